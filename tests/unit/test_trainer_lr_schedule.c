/* The schedules inside the trainer (cpu backend, tiny untied GPT): --decoupled-lr reaches exactly
 * the word embedding and the output layer (Megatron's is_embedding_or_output_parameter); the
 * weight-decay schedule's value reaches AdamW at the right step (p' - p of two runs is
 * lr x wd x p); and a batch-size rampup runs each iteration's samples with the right number of
 * microbatches and loss weights (its step losses, at lr 0, are the means of a constant-batch
 * run's over the same samples; evaluation in between runs the full global batch). */
#include "test.h"

#include "config_test_util.h"

#include "config/flags.h"
#include "core/status.h"
#include "train/trainer.h"

#include <stdlib.h>
#include <string.h>

static const char BASE[] =
    "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64 "
    "--mock-data --micro-batch-size 2 --eval-iters 0 --num-threads 2 --device cpu "
    "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0 --seed 11";

/* A trainer of the base model with the extra flags (NULL-terminated). */
static mg_trainer *make(mg_test_ctx *t, const char *const *extra) {
    return mg_test_trainer(t, BASE, extra);
}

static void drop(mg_trainer *tr) {
    mg_test_trainer_free(tr);
}

static float *weights(mg_test_ctx *t, mg_trainer *tr) {
    float *w = malloc(tr->model.params.numel * sizeof *w);
    MG_EXPECT_OK(mg_trainer_get_weights(tr, w));
    return w;
}

static void steps(mg_test_ctx *t, mg_trainer *tr, int n) {
    double loss, norm;
    for (int i = 0; i < n; i++) MG_EXPECT_OK(mg_trainer_step(tr, &loss, &norm));
}

static bool same(const float *a, const float *b, const mg_param_meta *m) {
    return memcmp(a + m->offset, b + m->offset, (size_t)m->numel * sizeof *a) == 0;
}

MG_TEST(trainer_decoupled_lr_reaches_embedding_and_output_only) {
    const char *frozen[] = {"--train-iters",  "4", "--global-batch-size", "4", "--lr", "3e-3",
                            "--decoupled-lr", "0", "--decoupled-min-lr",  "0", NULL};
    mg_trainer *tr = make(t, frozen);
    if (t->failures) {
        drop(tr);
        return;
    }
    float *before = weights(t, tr);
    steps(t, tr, 2);
    float *after = weights(t, tr);
    const mg_param_table *pt = &tr->model.params;
    int n_frozen = 0, n_moved = 0;
    for (int i = 0; i < pt->n; i++) {
        const mg_param_meta *m = &pt->p[i];
        bool unchanged = same(before, after, m);
        bool want = m->embedding_or_output;
        MG_EXPECT(unchanged == want, "%s: %s with --decoupled-lr 0", m->name,
                  unchanged ? "unchanged" : "updated");
        n_frozen += want;
        n_moved += !unchanged;
    }
    MG_EXPECT(n_frozen == 2 && n_moved == pt->n - 2, "%d frozen, %d of %d moved", n_frozen, n_moved,
              pt->n);
    MG_EXPECT(
        mg_params_find(pt, "embedding.position_embeddings.weight") >= 0 &&
            !pt->p[mg_params_find(pt, "embedding.position_embeddings.weight")].embedding_or_output,
        "the position embedding is not Megatron's embedding_or_output");
    free(before);
    free(after);
    drop(tr);

    /* --decoupled-lr equal to --lr (and its minimum to --min-lr): bitwise the plain run */
    const char *plain[] = {"--train-iters", "4",    "--global-batch-size", "4",      "--lr", "3e-3",
                           "--min-lr",      "3e-4", "--lr-decay-style",    "cosine", NULL};
    const char *equal[] = {"--train-iters",
                           "4",
                           "--global-batch-size",
                           "4",
                           "--lr",
                           "3e-3",
                           "--min-lr",
                           "3e-4",
                           "--lr-decay-style",
                           "cosine",
                           "--decoupled-lr",
                           "3e-3",
                           "--decoupled-min-lr",
                           "3e-4",
                           NULL};
    mg_trainer *a = make(t, plain), *b = make(t, equal);
    if (!t->failures) {
        steps(t, a, 3);
        steps(t, b, 3);
        float *wa = weights(t, a), *wb = weights(t, b);
        MG_EXPECT(memcmp(wa, wb, a->model.params.numel * sizeof *wa) == 0,
                  "--decoupled-lr = --lr changed the weights");
        free(wa);
        free(wb);
    }
    drop(a);
    drop(b);
}

MG_TEST(trainer_weight_decay_schedule_reaches_adamw) {
    /* linear from 0 to 0.5 over 4 iterations x 4 samples: the first update decays by 0, the
     * second by get_wd(4 samples) = 0.5 * 4/16 = 0.125; constant lr 3e-3 */
    const char *lr_schedule[] = {"--train-iters",
                                 "4",
                                 "--global-batch-size",
                                 "4",
                                 "--lr",
                                 "3e-3",
                                 "--lr-decay-style",
                                 "constant",
                                 "--weight-decay-incr-style",
                                 "linear",
                                 "--start-weight-decay",
                                 "0",
                                 "--end-weight-decay",
                                 "0.5",
                                 NULL};
    const char *none[] = {
        "--train-iters",    "4",        "--global-batch-size", "4", "--lr", "3e-3",
        "--lr-decay-style", "constant", "--weight-decay",      "0", NULL};
    mg_trainer *a = make(t, lr_schedule), *b = make(t, none);
    if (t->failures) {
        drop(a);
        drop(b);
        return;
    }
    steps(t, a, 1);
    steps(t, b, 1);
    float *a1 = weights(t, a), *b1 = weights(t, b);
    MG_EXPECT(memcmp(a1, b1, a->model.params.numel * sizeof *a1) == 0,
              "the first update decayed (start weight decay is 0)");
    steps(t, a, 1);
    steps(t, b, 1);
    float *a2 = weights(t, a), *b2 = weights(t, b);
    const mg_param_table *pt = &a->model.params;
    const double lr = 3e-3, wd = 0.125;
    for (int i = 0; i < pt->n; i++) {
        const mg_param_meta *m = &pt->p[i];
        if (!m->weight_decay) { /* biases, norms: the same gradient, no decay */
            MG_EXPECT(same(a2, b2, m), "%s (no weight decay) differs", m->name);
            continue;
        }
        /* AdamW: p2 = p1 - lr (adam + wd p1); the two runs differ by lr wd p1 */
        double err = 0, scale = 0;
        for (int64_t j = 0; j < m->numel; j++) {
            size_t k = m->offset + (size_t)j;
            double want = -lr * wd * a1[k], got = (double)a2[k] - (double)b2[k];
            err = fmax(err, fabs(got - want));
            scale = fmax(scale, fabs(want));
        }
        /* the difference is ~1e-6 of weights ~0.02 stored in fp32 (ulp ~2e-9): 1% */
        MG_EXPECT(scale > 0 && err <= 1e-2 * scale, "%s: decay %.3g off by %.3g", m->name, scale,
                  err);
    }
    free(a1);
    free(b1);
    free(a2);
    free(b2);
    drop(a);
    drop(b);
}

MG_TEST(trainer_rampup_runs_each_iterations_samples) {
    /* per increment 12/3 = 4 samples: batches 2, 2, 4, 6, then 8 (consumed 14 > 12); 7 iterations
     * (update_train_iters: 4 in the ramp, then (40 - 14) / 8 = 3) */
    const char *ramp[] = {"--train-samples",
                          "40",
                          "--global-batch-size",
                          "8",
                          "--rampup-batch-size",
                          "2",
                          "2",
                          "12",
                          "--lr",
                          "0",
                          "--min-lr",
                          "0",
                          "--eval-iters",
                          "1",
                          NULL};
    const char *flat[] = {
        "--train-samples", "40", "--global-batch-size", "2", "--lr", "0", "--min-lr", "0", NULL};
    mg_trainer *r = make(t, ramp), *f = make(t, flat);
    if (t->failures) {
        drop(r);
        drop(f);
        return;
    }
    MG_EXPECT(r->train_iters == 7 && f->train_iters == 20, "train iters %lld and %lld",
              (long long)r->train_iters, (long long)f->train_iters);
    double fl[20], loss, norm, e0 = 0, e1 = 0;
    for (int i = 0; i < 20; i++) MG_EXPECT_OK(mg_trainer_step(f, &fl[i], &norm));
    MG_EXPECT_OK(mg_trainer_evaluate(r, &e0)); /* the full batch: 4 microbatches */
    static const int gbs[7] = {2, 2, 4, 6, 8, 8, 8};
    int k = 0; /* the flat run's step holding the next samples */
    for (int i = 0; i < 7; i++) {
        MG_EXPECT_OK(mg_trainer_step(r, &loss, &norm));
        MG_EXPECT(r->step_global_batch == gbs[i] && r->num_microbatches == gbs[i] / 2,
                  "iteration %d: global batch %lld, %d microbatches; want %d", i + 1,
                  (long long)r->step_global_batch, r->num_microbatches, gbs[i]);
        double mean = 0;
        for (int j = 0; j < gbs[i] / 2; j++) mean += fl[k + j];
        mean /= gbs[i] / 2;
        k += gbs[i] / 2;
        MG_EXPECT(fabs(loss - mean) <= 2e-6 * mean,
                  "iteration %d: loss %.9g, the samples' mean %.9g", i + 1, loss, mean);
        if (i == 2) { /* evaluation between ramp steps runs the full batch again */
            r->state.consumed_valid_samples = 0;
            MG_EXPECT_OK(mg_trainer_evaluate(r, &e1));
            MG_EXPECT(e1 == e0 && r->num_microbatches == 4, "evaluation %.9g then %.9g", e0, e1);
        }
    }
    MG_EXPECT(r->state.consumed_train_samples == 38 && r->lr.num_steps == 38,
              "consumed %lld, scheduler at %lld", (long long)r->state.consumed_train_samples,
              (long long)r->lr.num_steps);
    drop(r);
    drop(f);
}
