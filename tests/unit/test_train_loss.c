/* The loss and logging options of Megatron's recipes through the trainer on the CPU backend
 * (train/trainer_loss.h, train/trainer_stats.c):
 *  - --eod-mask-loss: the reported loss (training and an evaluation over two batches) is the sum
 *    of the per-token losses whose INPUT is not the end-of-document id, over their number,
 *    computed here from the model's unweighted per-token cross-entropy of the same samples read
 *    straight from the mock data; without the flag, the plain mean;
 *  - the gradients of one global batch under --eod-mask-loss equal the model's backward with the
 *    weights the definition gives, set here per token: mask / (n_m M) per microbatch m (default)
 *    and mask / T over the whole batch (--calculate-per-token-loss); the two modes' gradients
 *    differ (the microbatches hold different counts) while the reported loss is the same;
 *  - without a mask, --calculate-per-token-loss trains bit for bit as the default;
 *  - the test split: evaluated from its first sample each time (the mock's stream 2), the
 *    manual mean of those samples, another value than the validation's, no validation samples
 *    consumed;
 *  - mg_trainer_params_norm is sqrt(sum w^2) of the weights read back, mg_trainer_num_zeros the
 *    count of zero gradient elements in the parameters' ranges (the untied embedding's rows of
 *    unused tokens), count_zeros_f32 against a known count;
 *  - the end-of-document id of each data source. */
#include "test.h"

#include "config_test_util.h"

#include "config/flags.h"
#include "data/mock.h"
#include "train/trainer.h"
#include "train/trainer_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { S = 16, V = 64, MBS = 2, GBS = 6, M = GBS / MBS, N = MBS * S, EOD = V - 1 };

/* A tiny untied GPT on mock data without dropout (extra flags: NULL-terminated lists). */
#define LOSS_FLAGS                                                                                 \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 2 --global-batch-size 6 --train-iters 3 --lr 3e-3 "            \
    "--eval-iters 2 --num-threads 1 --device cpu --attention-dropout 0 --hidden-dropout 0 "        \
    "--untie-embeddings-and-output-weights"

static mg_status loss_config(mg_config *c, const char *const *extra) {
    return mg_test_config(c, LOSS_FLAGS, extra);
}

static mg_trainer *make_trainer(mg_test_ctx *t, const char *const *extra) {
    return mg_test_trainer(t, LOSS_FLAGS, extra);
}

static void release(mg_trainer *tr) {
    mg_test_trainer_free(tr);
}

/* Microbatch `mb` (MBS samples from `first`) of mock stream `stream` (the trainer's seed). */
static void read_microbatch(mg_test_ctx *t, uint32_t stream, int64_t first, int mb, int32_t *tok,
                            int32_t *tgt) {
    mg_mock_data d;
    MG_EXPECT_OK(mg_mock_init(&d, 1234, stream, V, S));
    for (int b = 0; b < MBS; b++)
        MG_EXPECT_OK(mg_mock_source(&d, first + (int64_t)mb * MBS + b, tok + b * S, tgt + b * S));
    mg_mock_free(&d);
}

static int unmasked(const int32_t *tok) {
    int n = 0;
    for (int i = 0; i < N; i++) n += tok[i] != EOD;
    return n;
}

/* The model's forward and cross-entropy of one microbatch (host arrays: the cpu backend's memory
 * is the host's), the per-token losses into losses; with dloss, the backward too (accumulating
 * into the trainer's gradients with those per-token weights). */
static void model_pass(mg_test_ctx *t, mg_trainer *tr, const int32_t *tok, const int32_t *tgt,
                       const float *dloss, float *losses) {
    mg_gpt *g = &tr->model;
    static float ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    float acc = 0;
    MG_EXPECT_OK(mg_gpt_forward(g, tr->be, tok));
    MG_EXPECT_OK(mg_gpt_loss(g, tr->be, tgt, dloss ? dloss : ones, NULL, &acc, 1.0f));
    memcpy(losses, mg_block_ws_ptr(&g->blk, g->ws.losses), N * sizeof(float));
    if (dloss) MG_EXPECT_OK(mg_gpt_backward(g, tr->be, tok));
}

/* The mean loss over `batches` global batches of stream `stream` from sample 0, masked or not,
 * from the model's per-token losses; *counts receives each microbatch's unmasked tokens. */
static double manual_mean(mg_test_ctx *t, mg_trainer *tr, uint32_t stream, int batches, bool mask,
                          int *counts) {
    int32_t tok[N], tgt[N];
    float losses[N];
    double sum = 0, n = 0;
    for (int mb = 0; mb < batches * M; mb++) {
        read_microbatch(t, stream, 0, mb, tok, tgt);
        model_pass(t, tr, tok, tgt, NULL, losses);
        for (int i = 0; i < N; i++)
            if (!mask || tok[i] != EOD) sum += losses[i], n += 1;
        if (counts) counts[mb] = unmasked(tok);
    }
    return sum / n;
}

static double rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

MG_TEST(train_eod_mask_loss_is_the_mean_over_unmasked_inputs) {
    const char *flags[] = {"--eod-mask-loss", NULL};
    mg_trainer *masked = make_trainer(t, flags), *plain = make_trainer(t, NULL);
    if (!masked || !plain) goto done;
    MG_EXPECT(masked->eod_id == EOD, "eod id %d, want %d", (int)masked->eod_id, EOD);
    double got_m, got_p;
    MG_EXPECT_OK(mg_trainer_evaluate(masked, &got_m));
    MG_EXPECT_OK(mg_trainer_evaluate(plain, &got_p));
    /* the same initial weights: the references come from one model */
    int counts[2 * M];
    double want_m = manual_mean(t, masked, 1, 2, true, counts);
    double want_p = manual_mean(t, masked, 1, 2, false, NULL);
    int total = 0;
    for (int k = 0; k < 2 * M; k++) total += counts[k];
    MG_EXPECT(total < 2 * M * N && total > 0, "%d of %d validation tokens unmasked: no mask tested",
              total, 2 * M * N);
    MG_EXPECT(rel(got_m, want_m) < 2e-6, "masked validation loss %.9g, manual %.9g", got_m, want_m);
    MG_EXPECT(rel(got_p, want_p) < 2e-6, "unmasked validation loss %.9g, manual %.9g", got_p,
              want_p);
    MG_EXPECT(rel(want_m, want_p) > 1e-4, "the mask changes nothing (%.9g, %.9g)", want_m, want_p);
done:
    release(masked);
    release(plain);
}

/* One global batch's loss and gradients through the trainer, then through the model with the
 * definition's weights; per_token: --calculate-per-token-loss. */
static void check_mode(mg_test_ctx *t, bool per_token, float *grads_out, double *loss_out) {
    const char *flags[] = {"--eod-mask-loss", per_token ? "--calculate-per-token-loss" : NULL,
                           NULL};
    mg_trainer *tr = make_trainer(t, flags);
    if (!tr) return;
    mg_backend *be = tr->be;
    size_t n = tr->model.params.numel;
    float *want = calloc(n, sizeof *want);
    MG_EXPECT_OK(be->memset_zero(be, tr->mem.grads, n * sizeof(float)));
    MG_EXPECT_OK(mg_trainer_forward_backward(tr, &tr->data.train_src, 0, true));
    float loss = NAN;
    MG_EXPECT_OK(be->copy_d2h(be, &loss, tr->mem.loss, sizeof loss));
    MG_EXPECT_OK(be->copy_d2h(be, grads_out, tr->mem.grads, n * sizeof(float)));
    /* the reference: each microbatch's masked weights, accumulated by the model's backward */
    int32_t tok[M][N], tgt[M][N];
    int count[M], T = 0;
    for (int mb = 0; mb < M; mb++) {
        read_microbatch(t, 0, 0, mb, tok[mb], tgt[mb]);
        count[mb] = unmasked(tok[mb]);
        T += count[mb];
    }
    MG_EXPECT_OK(be->memset_zero(be, tr->mem.grads, n * sizeof(float)));
    double sum = 0;
    for (int mb = 0; mb < M; mb++) {
        float dloss[N], losses[N];
        double denom = per_token ? T : (double)(count[mb] > 1 ? count[mb] : 1) * M;
        for (int i = 0; i < N; i++) dloss[i] = tok[mb][i] != EOD ? (float)(1.0 / denom) : 0.0f;
        model_pass(t, tr, tok[mb], tgt[mb], dloss, losses);
        for (int i = 0; i < N; i++)
            if (tok[mb][i] != EOD) sum += losses[i];
    }
    MG_EXPECT_OK(be->copy_d2h(be, want, tr->mem.grads, n * sizeof(float)));
    double err = mg_test_rel_err(grads_out, want, n);
    MG_EXPECT(err < 1e-6, "%s: gradients differ from the definition's by %.3g",
              per_token ? "per-token" : "default", err);
    MG_EXPECT(rel(loss, sum / T) < 2e-6, "%s: reported loss %.9g, sum / T %.9g",
              per_token ? "per-token" : "default", loss, sum / T);
    MG_EXPECT(count[0] != count[1] || count[1] != count[2],
              "every microbatch has %d unmasked tokens: the modes are not told apart", count[0]);
    *loss_out = loss;
    free(want);
    release(tr);
}

MG_TEST(train_eod_mask_gradients_follow_each_modes_definition) {
    mg_trainer *probe = make_trainer(t, NULL);
    if (!probe) return;
    size_t n = probe->model.params.numel;
    release(probe);
    float *gd = calloc(n, sizeof *gd), *gp = calloc(n, sizeof *gp);
    double ld = NAN, lp = NAN;
    check_mode(t, false, gd, &ld);
    check_mode(t, true, gp, &lp);
    /* Megatron reports sum / T in both modes; the gradients weigh microbatches differently */
    MG_EXPECT(ld == lp, "reported losses differ between the modes: %.9g, %.9g", ld, lp);
    MG_EXPECT(mg_test_rel_err(gd, gp, n) > 1e-3,
              "default and per-token gradients agree (%.3g): the mask's counts did not matter",
              mg_test_rel_err(gd, gp, n));
    free(gd);
    free(gp);
}

MG_TEST(train_per_token_loss_without_mask_is_the_default) {
    const char *flags[] = {"--calculate-per-token-loss", NULL};
    mg_trainer *a = make_trainer(t, NULL), *b = make_trainer(t, flags);
    if (!a || !b) goto done;
    for (int s = 0; s < 3; s++) {
        double la, na, lb, nb;
        MG_EXPECT_OK(mg_trainer_step(a, &la, &na));
        MG_EXPECT_OK(mg_trainer_step(b, &lb, &nb));
        MG_EXPECT(la == lb && na == nb, "step %d: loss %.9g / %.9g, grad norm %.9g / %.9g", s + 1,
                  la, lb, na, nb);
    }
done:
    release(a);
    release(b);
}

MG_TEST(train_test_split_evaluates_from_its_start) {
    mg_trainer *tr = make_trainer(t, NULL);
    if (!tr) return;
    MG_EXPECT(tr->data.have_test, "no test split with --mock-data --eval-iters 2");
    double t1, t2, v;
    MG_EXPECT_OK(mg_trainer_evaluate_test(tr, &t1));
    MG_EXPECT(tr->state.consumed_valid_samples == 0, "the test evaluation consumed %lld samples",
              (long long)tr->state.consumed_valid_samples);
    MG_EXPECT_OK(mg_trainer_evaluate_test(tr, &t2));
    MG_EXPECT_OK(mg_trainer_evaluate(tr, &v));
    double want = manual_mean(t, tr, 2, 2, false, NULL);
    MG_EXPECT(t1 == t2, "two test evaluations: %.9g, %.9g (each starts at sample 0)", t1, t2);
    MG_EXPECT(rel(t1, want) < 2e-6, "test loss %.9g, the mean over stream 2's samples %.9g", t1,
              want);
    MG_EXPECT(t1 != v, "the test loss equals the validation loss %.9g", v);
    release(tr);
    const char *none[] = {"--eval-iters", "0", NULL};
    tr = make_trainer(t, none);
    if (tr) MG_EXPECT(!tr->data.have_test, "--eval-iters 0 evaluates the test split");
    release(tr);
}

MG_TEST(train_params_norm_and_num_zeros_match_the_buffers) {
    mg_trainer *tr = make_trainer(t, NULL);
    if (!tr) return;
    double loss, gn, pn;
    int64_t zeros = -1;
    MG_EXPECT_OK(mg_trainer_step(tr, &loss, &gn));
    MG_EXPECT_OK(mg_trainer_params_norm(tr, &pn));
    MG_EXPECT_OK(mg_trainer_num_zeros(tr, &zeros));
    const mg_param_table *pt = &tr->model.params;
    size_t n = pt->numel;
    float *w = calloc(n, sizeof *w), *g = calloc(n, sizeof *g);
    MG_EXPECT_OK(mg_trainer_get_weights(tr, w));
    MG_EXPECT_OK(tr->be->copy_d2h(tr->be, g, tr->mem.grads, n * sizeof(float)));
    double sq = 0;
    int64_t z = 0, emb_rows_unused = 0;
    for (int i = 0; i < pt->n; i++)
        for (int64_t j = 0; j < pt->p[i].numel; j++) {
            double x = w[pt->p[i].offset + (size_t)j];
            sq += x * x;
            z += g[pt->p[i].offset + (size_t)j] == 0.0f;
        }
    /* the input embedding's padded rows (vocabulary 64 of 128) never see a token */
    for (int i = 0; i < pt->n; i++)
        if (strstr(pt->p[i].name, "word_embeddings")) emb_rows_unused = (128 - V) * 32;
    MG_EXPECT(rel(pn, sqrt(sq)) < 1e-6, "params norm %.9g, from the weights %.9g", pn, sqrt(sq));
    MG_EXPECT(zeros == z, "num zeros %lld, counted in the gradients %lld", (long long)zeros,
              (long long)z);
    MG_EXPECT(z >= emb_rows_unused && emb_rows_unused > 0,
              "%lld zero gradients, fewer than the %lld of unused embedding rows", (long long)z,
              (long long)emb_rows_unused);
    free(w);
    free(g);
    release(tr);
}

MG_TEST(cpu_count_zeros_counts_signed_zeros_not_nan) {
    mg_backend *be;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (t->failures) return;
    enum { L = 100003 };
    float *x = malloc(L * sizeof *x);
    int64_t want = 0;
    uint32_t s = 12345;
    for (int i = 0; i < L; i++) { /* 1 in 8 is +0 or -0, the rest tiny non-zero values */
        s = s * 1664525u + 1013904223u;
        uint32_t kind = s >> 28;
        x[i] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : 1e-30f * (float)((s >> 8) | 1u);
        want += kind <= 1 && i != 7;
    }
    x[7] = NAN; /* not a zero */
    int64_t got = 5;
    MG_EXPECT_OK(be->count_zeros_f32(be, &got, x, L));
    MG_EXPECT(got == 5 + want, "counted %lld zeros (onto 5), want %lld", (long long)(got - 5),
              (long long)want);
    free(x);
    be->destroy(be);
}

MG_TEST(train_eod_id_of_each_data_source) {
    mg_config c;
    MG_EXPECT_OK(loss_config(&c, NULL));
    int32_t eod = 0;
    MG_EXPECT_OK(mg_trainer_loss_eod(&c, &eod));
    MG_EXPECT(eod == V - 1, "--mock-data: eod %d, want %d", (int)eod, V - 1);
    snprintf(c.data_path, sizeof c.data_path, "corpus_text_document");
    snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "NullTokenizer");
    MG_EXPECT_OK(mg_trainer_loss_eod(&c, &eod));
    MG_EXPECT(eod == V - 1, "NullTokenizer: eod %d, want %d", (int)eod, V - 1);
    snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "GPT2BPETokenizer");
    snprintf(c.vocab_file, sizeof c.vocab_file, "data/gpt2/encoder.json");
    snprintf(c.merge_file, sizeof c.merge_file, "data/gpt2/vocab.bpe");
    MG_EXPECT_OK(mg_trainer_loss_eod(&c, &eod));
    MG_EXPECT(eod == 50256, "GPT2BPETokenizer: eod %d, want 50256 (<|endoftext|>)", (int)eod);
}
