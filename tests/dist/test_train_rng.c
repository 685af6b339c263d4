/* Megatron's dropout streams (model/rng.h, the default masks) under tensor parallelism, on 2
 * ranks (T = 2, host buffers): what each rank draws, compared between the ranks, and training.
 *  - the seeds: default --seed on both ranks, model-parallel --seed + 2718 + tensor-parallel rank;
 *  - the masks each rank's layer ops draw (mg_block_dropout: the ops of layer 1, microbatch 0,
 *    the hidden ones through dropout_add on ones): each rank keeps 1 - p of its elements of each
 *    (within 6 binomial standard deviations); attention dropout differs between the ranks
 *    (each its own model-parallel stream); hidden dropout agrees bit for bit without sequence
 *    parallelism (the default stream over the activations every rank holds) and differs with it
 *    (each rank's rows from its own stream). "Differs" is measured: two independent masks of keep
 *    probability q agree on an element with probability q^2 + (1 - q)^2, so the agreeing fraction
 *    must be within 6 binomial standard deviations of it (a shared stream agrees everywhere);
 *  - training with stream dropout 0.1, with and without sequence parallelism: finite losses that
 *    fall over 10 steps, and the same run twice gives the same losses bit for bit. */
#include "dist.h"
#include "train_compare.h"

#include "core/dropout.h"
#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 10

static void make_config(dist_ctx *t, mg_config *c, bool sp) {
    const char *model[] = {"--num-layers",
                           "2",
                           "--hidden-size",
                           "32",
                           "--num-attention-heads",
                           "2",
                           "--seq-length",
                           "32",
                           "--vocab-size",
                           "128",
                           "--make-vocab-size-divisible-by",
                           "32",
                           "--mock-data",
                           "--micro-batch-size",
                           "1",
                           "--global-batch-size",
                           "4",
                           "--train-iters",
                           "20",
                           "--lr",
                           "3e-3",
                           "--eval-iters",
                           "0",
                           "--device",
                           "cpu",
                           "--num-threads",
                           "1",
                           "--attention-dropout",
                           "0.1",
                           "--hidden-dropout",
                           "0.1",
                           "--tensor-model-parallel-size",
                           "2",
                           NULL};
    const char *with_sp[] = {"--sequence-parallel", NULL};
    tc_config(t, c, model, sp ? with_sp : NULL, t->size);
}

/* The fraction of n elements where a (this rank's) and b (the other's) agree on keeping, against
 * independence (p = 0.5: agreement 1/2) or identity. */
static void expect_masks(dist_ctx *t, const char *what, const float *a, const float *b, size_t n,
                         bool same) {
    double agree = 0;
    for (size_t i = 0; i < n; i++) agree += (a[i] != 0.0f) == (b[i] != 0.0f);
    agree /= (double)n;
    if (same) {
        DEXPECT(!memcmp(a, b, n * sizeof *a), "%s: the ranks' masks differ (agree on %.4f)", what,
                agree);
        return;
    }
    const double bound = 6.0 * sqrt(0.25 / (double)n);
    DEXPECT(fabs(agree - 0.5) <= bound,
            "%s: the ranks' masks agree on %.4f of %zu elements, independent ones on 0.5 +- %.3f",
            what, agree, n, bound);
}

/* The masks this rank's ops draw, against the other rank's (exchanged over the tensor-parallel
 * group). The model's masks at probability 0.5, for a sharp statistic. */
static void check_masks(dist_ctx *t, mg_trainer *tr, bool sp) {
    mg_gpt *g = &tr->model;
    const mg_model_config *c = &g->cfg;
    mg_backend *be = tr->be;
    uint64_t st[4];
    DOK(be->copy_d2h(be, st, g->rng.state, sizeof st));
    const int r = tr->layout.tp_rank;
    DEXPECT(st[0] == 1234 && st[2] == 1234 + 2718 + (uint64_t)r,
            "tp rank %d: seeds %llu and %llu, want 1234 and %d", r, (unsigned long long)st[0],
            (unsigned long long)st[2], 1234 + 2718 + r);
    mg_block_ctx x = g->blk;
    x.pass.on = true;
    x.pass.mb = 0;
    const int Nl = x.Nl, H = c->H, S = c->S;
    const size_t nh = (size_t)Nl * H, na = (size_t)c->nq_l * S * S;
    float *ones = malloc(nh * sizeof *ones), *zero = calloc(nh, sizeof *zero);
    float *mine = calloc(nh > na ? nh : na, sizeof *mine);
    float *both = calloc(2 * (nh > na ? nh : na), sizeof *both);
    DOK(ones && zero && mine && both ? MG_OK : MG_ERR_NOMEM);
    for (size_t i = 0; i < nh; i++) ones[i] = 1.0f;
    const int sites[] = {MG_DROPOUT_ATTENTION, MG_DROPOUT_ATTN_OUT, MG_DROPOUT_MLP_OUT};
    const char *names[] = {"attention", "attention output", "MLP output"};
    for (int k = 0; k < 3; k++) {
        mg_dropout d;
        DEXPECT(mg_block_dropout(&x, 1, sites[k], &d), "no %s dropout in a training pass",
                names[k]);
        DEXPECT(d.mode == MG_DROPOUT_STREAM, "%s: not a stream mask", names[k]);
        mg_dropout_set_p(&d, 0.5);
        size_t n = sites[k] == MG_DROPOUT_ATTENTION ? na : nh;
        if (sites[k] == MG_DROPOUT_ATTENTION) { /* every local head of sequence 0 */
            for (int h = 0, i = 0; h < c->nq_l; h++)
                for (int s = 0; s < S; s++)
                    for (int u = 0; u < S; u++) mine[i++] = mg_dropout_attention(&d, 0, h, s, u, S);
        } else {
            DOK(be->dropout_add(be, mine, ones, NULL, zero, Nl, H, S, &d));
        }
        char what[96];
        snprintf(what, sizeof what, "%s dropout%s", names[k], sp ? " (sequence parallel)" : "");
        /* this rank keeps 1 - p of its elements (6 binomial standard deviations) */
        double kept = 0;
        for (size_t i = 0; i < n; i++) kept += mine[i] != 0.0f;
        kept /= (double)n;
        DEXPECT(fabs(kept - 0.5) <= 6.0 * sqrt(0.25 / (double)n),
                "%s: tp rank %d keeps %.4f of %zu elements, want 0.5 +- %.3f", what, r, kept, n,
                6.0 * sqrt(0.25 / (double)n));
        DOK(mg_tp_all_gather(&g->tp, both, mine, n, MG_F32));
        bool same = sites[k] != MG_DROPOUT_ATTENTION && !sp;
        expect_masks(t, what, both, both + n, n, same);
    }
    free(ones), free(zero), free(mine), free(both);
}

void test_train_rng(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    if (dist_on_device(t) || t->size != 2) return;
    for (int sp = 0; sp < 2; sp++) {
        mg_config c;
        make_config(t, &c, sp);
        mg_train_groups g = {0};
        tc_groups(
            t, (mg_parallel_sizes){.world_size = 2, .tp = 2, .pp = 1, .cp = 1, .ep = 1, .etp = -1},
            &g);
        tc_run a = {0}, b = {0};
        tc_train(t, &c, &g, STEPS, &a);
        tc_train(t, &c, &g, STEPS, &b);
        const char *label = sp ? "tp2+sp stream dropout" : "tp2 stream dropout";
        bool finite = true;
        for (int s = 0; s < STEPS; s++) {
            finite &= isfinite(a.loss[s]) != 0;
            DEXPECT(a.loss[s] == b.loss[s], "%s step %d: loss %.9g, then %.9g from the same seed",
                    label, s + 1, a.loss[s], b.loss[s]);
        }
        DEXPECT(finite && a.loss[STEPS - 1] < a.loss[0] - 0.05,
                "%s: losses %.6g .. %.6g over %d steps (finite, falling)", label, a.loss[0],
                a.loss[STEPS - 1], STEPS);
        check_masks(t, a.tr, sp);
        tc_release(&a);
        tc_release(&b);
        tc_free_groups(&g);
    }
}
