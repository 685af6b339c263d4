/* A whole layer's worth of ops (every compute entry of the table) after set-up: none may allocate
 * device memory or wait for the device (no host synchronisation in the steady state:
 * docs/architecture.md, "Principles"). Proved with the backend's counters; the results are then
 * read once to check they are finite, i.e. the sequence really ran. */
#include "cuda_test_util.h"

#include <math.h>

enum {
    B = 2,
    S = 16,
    N = B * S,
    H = 128,
    NQ = 2,
    NG = 1,
    HD = 64,
    QKVW = NG * (NQ / NG + 2) * HD, /* 256 */
    AW = NQ * HD,                   /* 128 */
    F = 256,
    V = 512,
};

MG_TEST(cuda_op_sequence_allocates_and_syncs_nothing) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    ct_pool P = ct_pool_of(t, g);
    /* ---- set-up: every buffer, before the counters are read ---- */
    int32_t *tok = ct_tokens(&P, 100, N, V), *tgt = ct_tokens(&P, 101, N, V);
    float *cs = ct_uniform_f32(&P, 102, S * HD / 2, -1, 1),
          *sn = ct_uniform_f32(&P, 103, S * HD / 2, -1, 1);
    float *dl = ct_uniform_f32(&P, 104, N, 0.01f, 0.05f);
    int32_t *d_tok = ct_up_i32(&P, tok, N), *d_tgt = ct_up_i32(&P, tgt, N);
    float *d_cs = ct_up_f32(&P, cs, S * HD / 2), *d_sn = ct_up_f32(&P, sn, S * HD / 2);
    float *d_dl = ct_up_f32(&P, dl, N);
    void *wte = ct_up_act(&P, ct_rand_act(&P, 105, V * H, 0.5f), V * H);
    void *wpe = ct_up_act(&P, ct_rand_act(&P, 106, S * H, 0.5f), S * H);
    void *ln_w = ct_up_act(&P, ct_uniform_act(&P, 107, H, 0.9f, 1.1f), H);
    void *w_qkv = ct_up_act(&P, ct_rand_act(&P, 108, QKVW * H, 0.09f), QKVW * H);
    void *w_proj = ct_up_act(&P, ct_rand_act(&P, 109, H * AW, 0.09f), H * AW);
    void *w_fc = ct_up_act(&P, ct_rand_act(&P, 110, 2 * F * H, 0.09f), 2 * F * H);
    void *w_head = ct_up_act(&P, ct_rand_act(&P, 111, V * F, 0.06f), V * F);
    float *master = ct_up_f32(&P, ct_rand_act(&P, 112, V * F, 0.06f), V * F);
    float *grads = ct_poison(&P, (size_t)V * F * 4), *m = ct_poison(&P, (size_t)V * F * 4);
    float *v = ct_poison(&P, (size_t)V * F * 4), *g_wte = ct_poison(&P, (size_t)V * H * 4);
    float *g_wpe = ct_poison(&P, (size_t)S * H * 4), *g_ln = ct_poison(&P, H * 4);
    float *g_qkv = ct_poison(&P, (size_t)QKVW * H * 4),
          *g_fc = ct_poison(&P, (size_t)2 * F * H * 4);
    float *scal = ct_poison(&P, 8 * 4), *mean = ct_poison(&P, N * 4), *rstd = ct_poison(&P, N * 4);
    float *rstd2 = ct_poison(&P, N * 4), *losses = ct_poison(&P, N * 4);
    void *x = ct_poison_act(&P, N * H), *xn = ct_poison_act(&P, N * H);
    void *qkv = ct_poison_act(&P, N * QKVW), *att = ct_poison_act(&P, N * AW);
    void *proj = ct_poison_act(&P, N * H), *res = ct_poison_act(&P, N * H);
    void *res_n = ct_poison_act(&P, N * H), *fc = ct_poison_act(&P, (size_t)N * 2 * F);
    void *act = ct_poison_act(&P, N * F), *act2 = ct_poison_act(&P, N * F);
    void *logits = ct_poison_act(&P, N * V), *d_act = ct_poison_act(&P, N * F);
    void *d_act2 = ct_poison_act(&P, N * F), *d_fc = ct_poison_act(&P, (size_t)N * 2 * F);
    void *d_res = ct_poison_act(&P, N * H), *d_att = ct_poison_act(&P, N * AW);
    void *d_qkv = ct_poison_act(&P, N * QKVW), *d_x = ct_poison_act(&P, N * H);
    void *d_resn = ct_poison_act(&P, N * H), *d_xn = ct_poison_act(&P, N * H);
    float *g_proj = ct_poison(&P, (size_t)H * AW * 4);
    void *saved = ct_poison(&P, g->attention_saved_bytes(g, B, S, NQ, HD));
    /* the step control (core/step_rules.h): no scaler, a constant lr of 1e-3, weight decay 0.1 */
    mg_step_ctl hctl = {.scale = 1.0f, .inv_scale = 1.0f};
    mg_step_rules rules = {.beta1 = 0.9, .beta2 = 0.95, .samples = 2};
    rules.lr.max_lr = 1e-3, rules.lr.style = MG_LR_CONSTANT;
    rules.lr.start_wd = rules.lr.end_wd = 0.1, rules.lr.wd_style = MG_WD_CONSTANT;
    mg_step_ctl *ctl = ct_poison(&P, sizeof hctl);
    if (P.failed) goto done;
    MG_EXPECT_OK(g->copy_h2d(g, ctl, &hctl, sizeof hctl));
    MG_EXPECT_OK(g->synchronize(g));

    uint64_t a0 = ct_allocs(g), f0 = mg_cuda_ctx_of(g)->n_device_frees, s0 = ct_syncs(g);
    /* ---- forward ---- */
    MG_EXPECT_OK(g->memset_zero(g, grads, (size_t)V * F * 4));
    MG_EXPECT_OK(g->memset_zero(g, m, (size_t)V * F * 4));
    MG_EXPECT_OK(g->memset_zero(g, v, (size_t)V * F * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_wte, (size_t)V * H * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_wpe, (size_t)S * H * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_ln, H * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_qkv, (size_t)QKVW * H * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_fc, (size_t)2 * F * H * 4));
    MG_EXPECT_OK(g->memset_zero(g, g_proj, (size_t)H * AW * 4));
    MG_EXPECT_OK(g->memset_zero(g, scal, 8 * 4));
    MG_EXPECT_OK(g->embedding_forward(g, x, d_tok, wte, wpe, NULL, N, S, H, 0, V));
    MG_EXPECT_OK(g->layernorm_forward(g, xn, mean, rstd, x, ln_w, NULL, N, H, 1e-5f));
    MG_EXPECT_OK(g->linear_forward(g, qkv, xn, w_qkv, NULL, NULL, N, H, QKVW));
    MG_EXPECT_OK(g->rope_forward(g, qkv, d_cs, d_sn, NULL, N, S, NQ, NG, HD, HD));
    MG_EXPECT_OK(g->attention_forward(g, att, saved, qkv, B, S, NQ, NG, HD, NULL, NULL));
    MG_EXPECT_OK(g->linear_forward(g, proj, att, w_proj, NULL, NULL, N, AW, H));
    MG_EXPECT_OK(g->add(g, res, x, proj, (size_t)N * H));
    MG_EXPECT_OK(g->linear_forward(g, res, att, w_proj, NULL, x, N, AW, H)); /* fused residual */
    MG_EXPECT_OK(g->rmsnorm_forward(g, res_n, rstd2, res, ln_w, N, H, 1e-5f));
    MG_EXPECT_OK(g->linear_forward(g, fc, res_n, w_fc, NULL, NULL, N, H, 2 * F));
    MG_EXPECT_OK(g->swiglu_forward(g, act, fc, N, F));
    MG_EXPECT_OK(g->gelu_forward(g, act2, act, (size_t)N * F));
    MG_EXPECT_OK(g->linear_gelu_forward(g, act2, act, res_n, w_fc, NULL, N, H, F));
    MG_EXPECT_OK(g->swiglu_forward(g, act, fc, N, F)); /* act as the unfused path left it */
    MG_EXPECT_OK(g->gelu_forward(g, act2, act, (size_t)N * F));
    MG_EXPECT_OK(g->linear_forward(g, logits, act2, w_head, NULL, NULL, N, F, V));
    MG_EXPECT_OK(g->cross_entropy_fused(g, logits, losses, d_tgt, d_dl, N, V));
    MG_EXPECT_OK(g->sum_f32(g, scal, losses, NULL, N, 1.0f / N));
    /* ---- backward ---- */
    MG_EXPECT_OK(g->linear_backward(g, d_act2, grads, NULL, logits, act2, w_head, act, N, F, V));
    MG_EXPECT_OK(g->linear_backward(g, d_act2, grads, NULL, logits, act2, w_head, NULL, N, F, V));
    MG_EXPECT_OK(g->gelu_backward(g, d_act, act, d_act2, (size_t)N * F));
    MG_EXPECT_OK(g->swiglu_backward(g, d_fc, fc, d_act, N, F));
    MG_EXPECT_OK(g->memset_zero(g, d_res, (size_t)N * H * 2));
    MG_EXPECT_OK(g->linear_backward(g, d_resn, g_fc, NULL, d_fc, res_n, w_fc, NULL, N, H, 2 * F));
    MG_EXPECT_OK(g->rmsnorm_backward(g, d_res, g_ln, d_resn, res, ln_w, rstd2, N, H));
    MG_EXPECT_OK(g->copy_d2d(g, d_x, d_res, (size_t)N * H * 2));
    MG_EXPECT_OK(g->linear_backward(g, d_att, g_proj, NULL, d_res, att, w_proj, NULL, N, AW, H));
    MG_EXPECT_OK(
        g->attention_backward(g, d_qkv, d_att, qkv, att, saved, B, S, NQ, NG, HD, NULL, NULL));
    MG_EXPECT_OK(g->rope_backward(g, d_qkv, d_cs, d_sn, NULL, N, S, NQ, NG, HD, HD));
    MG_EXPECT_OK(g->linear_backward(g, d_xn, g_qkv, NULL, d_qkv, xn, w_qkv, NULL, N, H, QKVW));
    MG_EXPECT_OK(g->layernorm_backward(g, d_x, g_ln, NULL, d_xn, x, ln_w, mean, rstd, N, H));
    MG_EXPECT_OK(g->embedding_backward(g, g_wte, g_wpe, d_x, d_tok, NULL, N, S, H, 0, V));
    /* ---- optimizer ---- */
    MG_EXPECT_OK(g->sumsq_f32(g, scal + 1, grads, (size_t)V * F, &ctl->inv_scale));
    MG_EXPECT_OK(g->clip_coef(g, scal + 2, scal + 3, scal + 1, 1.0f, &ctl->inv_scale));
    MG_EXPECT_OK(g->step_control(g, ctl, scal + 3, scal, scal + 4, &rules));
    const mg_adamw_span head = {0, 0, 0, (size_t)V * F, MG_RATE_LR, MG_RATE_WD};
    MG_EXPECT_OK(g->adamw(g, w_head, master, grads, m, v, &head, 1, ctl->rate,
                          &ctl->rate[MG_RATE_BC1], 0.9f, 0.95f, 1e-8f, scal + 2));
    MG_EXPECT(ct_allocs(g) == a0 && mg_cuda_ctx_of(g)->n_device_frees == f0,
              "the op sequence allocated %llu and freed %llu device buffers",
              (unsigned long long)(ct_allocs(g) - a0),
              (unsigned long long)(mg_cuda_ctx_of(g)->n_device_frees - f0));
    MG_EXPECT(ct_syncs(g) == s0, "the op sequence synchronised with the host %llu times",
              (unsigned long long)(ct_syncs(g) - s0));
    MG_EXPECT_OK(g->synchronize(g));
    MG_EXPECT(ct_syncs(g) == s0 + 1, "synchronize counted %llu times",
              (unsigned long long)(ct_syncs(g) - s0));
    {
        float *loss = ct_down_f32(&P, scal, 4), *wt = ct_down_act(&P, w_head, 64);
        MG_EXPECT(isfinite(loss[0]) && loss[0] > 0 && isfinite(loss[1]) && loss[1] > 0 &&
                      isfinite(loss[2]) && isfinite(loss[3]),
                  "mean loss %g, grad sumsq %g, coef %g, norm %g", loss[0], loss[1], loss[2],
                  loss[3]);
        int bad = 0;
        for (int i = 0; i < 64; i++) bad += !isfinite(wt[i]);
        MG_EXPECT(bad == 0, "%d updated head weights are not finite", bad);
        MG_EXPECT_OK(g->copy_d2h(g, &hctl, ctl, sizeof hctl));
        MG_EXPECT(hctl.adam_step == 1 && hctl.lr_num_steps == 2 && hctl.skipped_iters == 0 &&
                      hctl.rate[MG_RATE_LR] == 1e-3f && hctl.rate[MG_RATE_WD] == 0.1f &&
                      hctl.rate[MG_RATE_BC1] == (float)(1.0 - 0.9),
                  "step control: adam step %lld, samples %lld, lr %g, wd %g, bc1 %g",
                  (long long)hctl.adam_step, (long long)hctl.lr_num_steps,
                  (double)hctl.rate[MG_RATE_LR], (double)hctl.rate[MG_RATE_WD],
                  (double)hctl.rate[MG_RATE_BC1]);
    }
done:
    ct_pool_free(&P);
}
