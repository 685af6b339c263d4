/* Dropout in training (--attention-dropout, --hidden-dropout; core/dropout.h) through the
 * trainer on the CPU backend, with Megatron's stream masks (the default; model/rng.h) unless
 * --layout-invariant-dropout is named:
 *  - the backward is the gradient of the forward that ran, masks included: per element against
 *    central differences of the training loss (the streams move only at a step's end, so
 *    repeated forward-backward passes draw the same masks and the loss is a smooth function of
 *    the weights), GPT-2 style, Llama style and an MoE model;
 *  - the streams' offset selects the masks: moved on, the same pass draws others; moved back,
 *    the first ones again;
 *  - evaluation runs without dropout (its loss equals a dropout-free model's bit for bit), and
 *    training with it (the training loss differs);
 *  - the same seed twice trains bit-identically, another seed otherwise; every step moves the
 *    streams on by its uses, a step whose update an fp16 overflow skipped included;
 *  - positional masks are keyed by the sequence's place in the global batch: micro-batches of 1
 *    and of 2 sequences train the same model (the one-process form of the layout equivalence;
 *    the multi-rank runs are in tests/dist);
 *  - a run saved at iteration 2 and resumed draws the masks the uninterrupted run drew (the
 *    checkpoint keeps the streams' offset; positional masks, the iteration): the same losses and
 *    weights, bit for bit; with --no-load-rng, or from a checkpoint saved with --no-save-rng, the
 *    resumed run draws from fresh streams and its losses differ. */
#include "test.h"

#include "config_test_util.h"

#include "core/file.h"
#include "config/flags.h"
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODEL_GPT2, MODEL_LLAMA, MODEL_MOE };

/* A tiny model with dropout p (both kinds); extra: more flags (NULL-terminated). */
static mg_status drop_config(mg_config *c, int kind, const char *p, const char *const *extra) {
    /* MoE: every token to all 4 experts: the top-k choice, a step function, never changes, so
     * the loss stays smooth for the finite differences */
    const char *model =
        kind == MODEL_LLAMA ? "--normalization RMSNorm --swiglu --position-embedding-type rope "
                              "--group-query-attention --num-query-groups 2 --disable-bias-linear "
                              "--untie-embeddings-and-output-weights"
        : kind == MODEL_MOE ? "--num-experts 4 --moe-router-topk 4 --moe-ffn-hidden-size 24 "
                              "--moe-layer-freq [0,1] --moe-shared-expert-intermediate-size 16"
                            : "";
    char flags[1024];
    snprintf(flags, sizeof flags,
             "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
             "--vocab-size 64 --mock-data --micro-batch-size 2 --global-batch-size 4 "
             "--train-iters 4 --lr 3e-3 --eval-iters 1 --num-threads 2 --device cpu "
             "--attention-dropout %s --hidden-dropout %s %s",
             p, p, model);
    return mg_test_config(c, flags, extra);
}

/* The training loss of the first global batch at weights w (the masks of the streams' current
 * offset), and the gradient into grad when given. */
static double train_loss(mg_test_ctx *t, mg_trainer *tr, const float *w, float *grad) {
    mg_backend *be = tr->be;
    size_t n = tr->model.params.numel;
    MG_EXPECT_OK(mg_trainer_set_weights(tr, w));
    MG_EXPECT_OK(be->memset_zero(be, tr->mem.grads, n * sizeof(float)));
    MG_EXPECT_OK(mg_trainer_forward_backward(tr, &tr->data.train_src, 0, true));
    float loss = NAN;
    MG_EXPECT_OK(be->copy_d2h(be, &loss, tr->mem.loss, sizeof loss));
    if (grad) MG_EXPECT_OK(be->copy_d2h(be, grad, tr->mem.grads, n * sizeof(float)));
    return loss;
}

/* For each parameter whose name contains one of `names`: its 3 elements of largest gradient and
 * 2 others, against (L(w + h e_i) - L(w - h e_i)) / 2h, h = 1e-2, and 5e-2 for the norms'
 * weights and biases (gradients of ~1e-3, little curvature). The loss is an fp32 value near 4
 * (steps of 4.8e-7), so the difference quotient carries ~2e-5 (norms: ~5e-6) of quantisation
 * against gradients of 1e-3 .. 0.3 at the largest elements; truncation is O(h^2) of the
 * gradient. Normalised error max|g - fd| / max|fd| per parameter <= 2e-2; a mask that differs
 * between forward and backward shows up as O(0.1 .. 1). */
static void check_gradients(mg_test_ctx *t, int kind, const char *label) {
    mg_config c;
    MG_EXPECT_OK(drop_config(&c, kind, "0.2", NULL));
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    if (t->failures) goto done;
    size_t n = tr->model.params.numel;
    float *w = calloc(n, sizeof *w), *g = calloc(n, sizeof *g);
    MG_EXPECT_OK(mg_trainer_get_weights(tr, w));
    double l0 = train_loss(t, tr, w, g), l1 = train_loss(t, tr, w, NULL);
    MG_EXPECT(l0 == l1, "%s: the same weights give losses %.9g and %.9g", label, l0, l1);
    const char *names[] = {"linear_qkv.weight", "linear_proj", "linear_fc1.weight",
                           "linear_fc2",        "layernorm",   "word_embeddings",
                           "experts.linear_fc2"};
    const mg_param_table *pt = &tr->model.params;
    int checked = 0;
    for (int i = 0; i < pt->n; i++) {
        const mg_param_meta *m = &pt->p[i];
        bool want = false;
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            want |= !!strstr(m->name, names[k]);
        if (!want || strstr(m->name, "layers.0.mlp.experts")) continue;
        int64_t pick[5] = {-1, -1, -1, 0, m->numel / 2};
        for (int k = 0; k < 3; k++) /* the 3 largest |g| */
            for (int64_t j = 0; j < m->numel; j++) {
                if (j == pick[0] || j == pick[1]) continue;
                if (pick[k] < 0 || fabsf(g[m->offset + j]) > fabsf(g[m->offset + pick[k]]))
                    pick[k] = j;
            }
        double worst = 0, scale = 0;
        float a[5], fd[5];
        for (int k = 0; k < 5; k++) {
            size_t at = m->offset + (size_t)pick[k];
            float w0 = w[at], h = strstr(m->name, "layernorm") ? 5e-2f : 1e-2f; /* see above */
            w[at] = w0 + h;
            double lp = train_loss(t, tr, w, NULL);
            w[at] = w0 - h;
            double lm = train_loss(t, tr, w, NULL);
            w[at] = w0;
            a[k] = g[at];
            fd[k] = (float)((lp - lm) / ((double)(w0 + h) - (double)(w0 - h)));
            scale = fmax(scale, fabs(fd[k]));
        }
        for (int k = 0; k < 5; k++) worst = fmax(worst, fabs(a[k] - fd[k]));
        double e = worst / fmax(scale, 1e-12);
        MG_EXPECT(e <= 2e-2 && scale > 1e-5,
                  "%s %s: gradient vs central differences %.3g (largest %.3g; analytic %g %g %g, "
                  "fd %g %g %g)",
                  label, m->name, e, scale, a[0], a[1], a[2], fd[0], fd[1], fd[2]);
        checked++;
    }
    MG_EXPECT(checked >= 6, "%s: only %d parameters checked", label, checked);
    free(w);
    free(g);
done:
    mg_trainer_free(tr);
    free(tr);
}

MG_TEST(train_dropout_gradients_match_finite_differences) {
    check_gradients(t, MODEL_GPT2, "gpt2");
    check_gradients(t, MODEL_LLAMA, "llama");
    check_gradients(t, MODEL_MOE, "moe");
}

/* Uses of one step of drop_config's model: 2 microbatches of 2 layers, 3 sites each. */
#define STEP_USES 12u

static uint64_t offset_of(mg_test_ctx *t, mg_trainer *tr) {
    uint64_t off = 0;
    MG_EXPECT_OK(mg_model_rng_offset(&tr->model.rng, &off));
    return off;
}

MG_TEST(train_dropout_stream_offset_selects_the_masks) {
    mg_config c;
    MG_EXPECT_OK(drop_config(&c, MODEL_GPT2, "0.2", NULL));
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    if (t->failures) goto done;
    float *w = calloc(tr->model.params.numel, sizeof *w);
    MG_EXPECT_OK(mg_trainer_get_weights(tr, w));
    double l0 = train_loss(t, tr, w, NULL), again = train_loss(t, tr, w, NULL);
    MG_EXPECT(l0 == again, "the same pass twice: %.9g then %.9g", l0, again);
    MG_EXPECT_OK(mg_model_rng_advance(&tr->model.rng, STEP_USES));
    double moved = train_loss(t, tr, w, NULL);
    MG_EXPECT(fabs(moved - l0) > 1e-4 * l0, "streams moved on: loss %.9g, before %.9g", moved, l0);
    MG_EXPECT_OK(mg_model_rng_set_offset(&tr->model.rng, 0));
    double back = train_loss(t, tr, w, NULL);
    MG_EXPECT(back == l0, "streams back at 0: loss %.9g, first %.9g", back, l0);
    free(w);
done:
    mg_trainer_free(tr);
    free(tr);
}

/* Trains `steps` steps of c (losses into loss), returns the trainer. */
static mg_trainer *train(mg_test_ctx *t, const mg_config *c, int steps, double *loss) {
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, c, NULL));
    for (int s = 0; s < steps && !t->failures; s++) {
        double norm;
        MG_EXPECT_OK(mg_trainer_step(tr, &loss[s], &norm));
    }
    return tr;
}

static void release(mg_trainer *tr) {
    mg_trainer_free(tr);
    free(tr);
}

MG_TEST(train_dropout_only_in_training) {
    mg_config on, off;
    MG_EXPECT_OK(drop_config(&on, MODEL_GPT2, "0.1", NULL));
    MG_EXPECT_OK(drop_config(&off, MODEL_GPT2, "0", NULL));
    double lon[1], loff[1], eon = 0, eoff = 0;
    mg_trainer *a = train(t, &on, 0, lon), *b = train(t, &off, 0, loff);
    if (!t->failures) {
        MG_EXPECT_OK(mg_trainer_evaluate(a, &eon));
        MG_EXPECT_OK(mg_trainer_evaluate(b, &eoff));
        MG_EXPECT(eon == eoff, "evaluation with dropout 0.1 %.9g, without %.9g", eon, eoff);
        double n;
        MG_EXPECT_OK(mg_trainer_step(a, &lon[0], &n));
        MG_EXPECT_OK(mg_trainer_step(b, &loff[0], &n));
        MG_EXPECT(fabs(lon[0] - loff[0]) > 1e-4 * loff[0],
                  "training loss with dropout %.9g, without %.9g: no dropout applied", lon[0],
                  loff[0]);
    }
    release(a);
    release(b);
}

MG_TEST(train_dropout_stream_reproducible) {
    const char *seed[] = {"--seed", "77", NULL};
    mg_config c, o;
    MG_EXPECT_OK(drop_config(&c, MODEL_LLAMA, "0.1", NULL));
    MG_EXPECT_OK(drop_config(&o, MODEL_LLAMA, "0.1", seed));
    double l1[4], l2[4], l3[4];
    mg_trainer *a = train(t, &c, 4, l1), *b = train(t, &c, 4, l2), *d = train(t, &o, 4, l3);
    if (!t->failures) {
        for (int s = 0; s < 4; s++)
            MG_EXPECT(l1[s] == l2[s], "step %d: loss %.9g, then %.9g with the same seed", s + 1,
                      l1[s], l2[s]);
        MG_EXPECT(l3[0] != l1[0], "--seed 77 gives the first loss of --seed 1234, %.9g", l1[0]);
        uint64_t off = offset_of(t, a);
        MG_EXPECT(off == 4 * STEP_USES, "after 4 steps the streams are at %llu, want %u",
                  (unsigned long long)off, 4 * STEP_USES);
    }
    release(a);
    release(b);
    release(d);
}

/* An fp16 overflow skips the update, not the streams' move (Megatron's generators advance in
 * every step): a NaN weight makes the gradients NaN, which the loss scaler skips. */
MG_TEST(train_dropout_skipped_step_moves_the_streams) {
    const char *fp16[] = {"--fp16", NULL};
    mg_config c;
    MG_EXPECT_OK(drop_config(&c, MODEL_GPT2, "0.1", fp16));
    mg_trainer *a = train(t, &c, 0, NULL);
    if (!t->failures) {
        float *w = calloc(a->model.params.numel, sizeof *w);
        MG_EXPECT_OK(mg_trainer_get_weights(a, w));
        w[0] = NAN;
        MG_EXPECT_OK(mg_trainer_set_weights(a, w));
        free(w);
        double loss, norm;
        MG_EXPECT_OK(mg_trainer_step(a, &loss, &norm));
        MG_EXPECT(a->scaling.last_skipped, "the step with a NaN weight was not skipped");
        uint64_t off = offset_of(t, a);
        MG_EXPECT(off == STEP_USES, "after a skipped step the streams are at %llu, want %u",
                  (unsigned long long)off, STEP_USES);
    }
    release(a);
}

MG_TEST(train_dropout_micro_batch_size_invariant) {
    const char *mbs1[] = {"--micro-batch-size", "1", "--layout-invariant-dropout", NULL};
    const char *mbs2[] = {"--layout-invariant-dropout", NULL};
    mg_config c1, c2;
    MG_EXPECT_OK(drop_config(&c1, MODEL_LLAMA, "0.1", mbs1));
    MG_EXPECT_OK(drop_config(&c2, MODEL_LLAMA, "0.1", mbs2));
    double l1[4], l2[4];
    mg_trainer *a = train(t, &c1, 4, l1), *b = train(t, &c2, 4, l2);
    for (int s = 0; s < 4 && !t->failures; s++)
        MG_EXPECT(fabs(l1[s] - l2[s]) <= 1e-5 * l2[s],
                  "step %d: loss %.9g with micro-batches of 1, %.9g of 2", s + 1, l1[s], l2[s]);
    release(a);
    release(b);
}

/* Trains 4 steps straight, and 2 saved (with --no-save-rng when no_save_rng) then 2 resumed
 * (with --no-load-rng when no_load_rng), with dropout 0.2 and `extra` flags; same: whether the
 * resumed losses must equal the straight run's bit for bit (else they must differ). The resumed
 * streams end at `offset` uses. */
static void check_resume(mg_test_ctx *t, const char *label, const char *const *extra,
                         bool no_save_rng, bool no_load_rng, bool same, uint64_t offset) {
    char dir[] = "/tmp/mg_dropout_resume_XXXXXX";
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp failed");
    if (t->failures) return;
    mg_config c;
    MG_EXPECT_OK(drop_config(&c, MODEL_GPT2, "0.2", extra));
    double straight[4], first[2], second[2];
    mg_trainer *a = train(t, &c, 4, straight);
    mg_config cs = c;
    snprintf(cs.save, sizeof cs.save, "%s", dir);
    cs.no_save_rng = no_save_rng;
    mg_trainer *b = train(t, &cs, 2, first);
    if (!t->failures) MG_EXPECT_OK(mg_trainer_save(b));
    mg_config cl = c;
    snprintf(cl.load, sizeof cl.load, "%s", dir);
    cl.no_load_rng = no_load_rng;
    mg_trainer *r = t->failures ? NULL : train(t, &cl, 2, second);
    if (r && !t->failures) {
        MG_EXPECT(r->state.iteration == 4, "%s: resumed run ended at iteration %lld", label,
                  (long long)r->state.iteration);
        for (int s = 0; s < 2; s++)
            MG_EXPECT(first[s] == straight[s], "%s: step %d: loss %.9g, uninterrupted %.9g", label,
                      s + 1, first[s], straight[s]);
        for (int s = 2; s < 4; s++)
            MG_EXPECT((second[s - 2] == straight[s]) == same,
                      "%s: step %d: resumed loss %.9g, uninterrupted %.9g (want them %s)", label,
                      s + 1, second[s - 2], straight[s], same ? "equal" : "different");
        uint64_t off = offset_of(t, r);
        MG_EXPECT(off == offset, "%s: the resumed streams ended at %llu, want %llu", label,
                  (unsigned long long)off, (unsigned long long)offset);
        size_t n = a->model.params.numel;
        float *wa = calloc(n, sizeof *wa), *wr = calloc(n, sizeof *wr);
        MG_EXPECT_OK(mg_trainer_get_weights(a, wa));
        MG_EXPECT_OK(mg_trainer_get_weights(r, wr));
        MG_EXPECT(!memcmp(wa, wr, n * sizeof *wa) == same,
                  "%s: resumed weights %s the straight run's", label,
                  same ? "differ from" : "equal");
        free(wa);
        free(wr);
    }
    release(a);
    release(b);
    if (r) release(r);
    char sub[64];
    snprintf(sub, sizeof sub, "%s/iter_0000002", dir);
    mg_file_remove_dir(sub);
    snprintf(sub, sizeof sub, "%s/latest_checkpointed_iteration.txt", dir);
    remove(sub);
    mg_file_remove_dir(dir);
}

MG_TEST(train_dropout_resume_draws_the_same_masks) {
    const char *positional[] = {"--layout-invariant-dropout", NULL};
    check_resume(t, "stream masks", NULL, false, false, true, 4 * STEP_USES);
    check_resume(t, "positional masks", positional, false, false, true, 4 * STEP_USES);
    /* fresh streams: the resumed steps redraw the first two steps' positions */
    check_resume(t, "stream masks, --no-load-rng", NULL, false, true, false, 2 * STEP_USES);
    check_resume(t, "stream masks, saved with --no-save-rng", NULL, true, false, false,
                 2 * STEP_USES);
}
