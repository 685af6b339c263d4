/* The loss and logging options across layouts (train/trainer_loss.h, train/trainer_stats.c):
 * a tiny GPT on mock data with --eod-mask-loss (about one input in 17 is the end-of-document
 * token, so the microbatches hold different numbers of unmasked tokens) trains 4 steps alone (the
 * reference: the whole global batch of 8 samples) and on 2 ranks under D 2, D 2 with the
 * distributed optimizer, P 2 and T 2, with --calculate-per-token-loss (the sum over the global
 * batch's unmasked tokens over their count: the same value however the batch is split) and with
 * the default (each microbatch's mean; the microbatches are the same samples in every layout, so
 * it too is layout-independent). The losses (on the stage that computes them) and the grad norms
 * must match the reference's within 1e-5 (fp32, reductions in another order); afterwards
 * mg_trainer_params_norm within 1e-6 and mg_trainer_num_zeros exactly (its zeros are the input
 * embedding's rows of tokens the batch never holds: exact zeros in every layout). A tied model
 * under P 2 checks that the last stage's copy of the embedding stays out of the params norm.
 * Runs on 2 ranks; other world sizes have nothing to do. */
#include "dist.h"
#include "train_compare.h"

#include "core/log.h"

#include <stdio.h>

#define STEPS 4
#define TOL   1e-5

typedef struct {
    const char *label;
    bool per_token, tied;
    int tp, pp;
    const char *extra[4];
} variant;

static void model_flags(bool per_token, bool tied, const char **argv) {
    const char *common[] = {"--num-layers",
                            "2",
                            "--hidden-size",
                            "32",
                            "--num-attention-heads",
                            "2",
                            "--seq-length",
                            "16",
                            "--vocab-size",
                            "64",
                            "--make-vocab-size-divisible-by",
                            "32",
                            "--mock-data",
                            "--micro-batch-size",
                            "1",
                            "--global-batch-size",
                            "8",
                            "--train-iters",
                            "4",
                            "--lr",
                            "3e-3",
                            "--eval-iters",
                            "0",
                            "--attention-dropout",
                            "0",
                            "--hidden-dropout",
                            "0",
                            "--device",
                            "cpu",
                            "--num-threads",
                            "1",
                            "--eod-mask-loss",
                            NULL};
    int n = 0;
    for (const char *const *m = common; *m; m++) argv[n++] = *m;
    if (per_token) argv[n++] = "--calculate-per-token-loss";
    if (!tied) argv[n++] = "--untie-embeddings-and-output-weights";
    argv[n] = NULL;
}

static void stats(dist_ctx *t, mg_trainer *tr, double *norm, int64_t *zeros) {
    DOK(mg_trainer_params_norm(tr, norm));
    DOK(mg_trainer_num_zeros(tr, zeros));
}

static void check_variant(dist_ctx *t, const variant *v) {
    const char *model[48];
    model_flags(v->per_token, v->tied, model);
    char tp[8], pp[8];
    snprintf(tp, sizeof tp, "%d", v->tp);
    snprintf(pp, sizeof pp, "%d", v->pp);
    const char *lay[12] = {"--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size",
                           pp};
    int n = 4;
    for (int i = 0; v->extra[i]; i++) lay[n++] = v->extra[i];
    lay[n] = NULL;
    mg_config c1, cL;
    tc_config(t, &c1, model, NULL, 1);
    tc_config(t, &cL, model, lay, t->size);
    mg_train_groups g = {0};
    tc_run ref = {0}, got = {0};
    tc_train_both(t, &c1, &cL,
                  (mg_parallel_sizes){
                      .world_size = t->size, .tp = v->tp, .pp = v->pp, .cp = 1, .ep = 1, .etp = -1},
                  STEPS, &g, &ref, &got);
    tc_expect_steps(t, v->label, &got, &ref, STEPS, TOL, TOL);
    double n1, nL;
    int64_t z1, zL;
    stats(t, ref.tr, &n1, &z1);
    stats(t, got.tr, &nL, &zL);
    DEXPECT(tc_rel(nL, n1) <= 1e-6, "%s: params norm %.9g, one rank %.9g", v->label, nL, n1);
    DEXPECT(zL == z1, "%s: num zeros %lld, one rank %lld", v->label, (long long)zL, (long long)z1);
    DEXPECT(v->tied || z1 >= 31 * 32,
            "%s: %lld zero gradients, fewer than the unused embedding rows' %d", v->label,
            (long long)z1, 31 * 32);
    tc_release(&ref);
    tc_release(&got);
    tc_free_groups(&g);
}

void test_train_loss(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    if (dist_on_device(t) || t->size != 2) return;
    const variant all[] = {
        {"per-token dp2", true, false, 1, 1, {NULL}},
        {"per-token dp2, distributed optimizer",
         true,
         false,
         1,
         1,
         {"--use-distributed-optimizer", NULL}},
        {"per-token pp2", true, false, 1, 2, {NULL}},
        {"per-token tp2", true, false, 2, 1, {NULL}},
        {"per-token pp2, tied embedding", true, true, 1, 2, {NULL}},
        {"default dp2", false, false, 1, 1, {NULL}},
        {"default pp2", false, false, 1, 2, {NULL}},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) check_variant(t, &all[i]);
}
