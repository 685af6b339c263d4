/* CUDA backend against the CPU backend: AdamW with an fp32 master and a bf16 or fp16 parameter
 * (method and tolerances: cuda_test_util.h). The master's change (lr-sized) is compared, not the
 * master itself, whose leading digits do not move; the parameter must be exactly the new master
 * rounded to the compute dtype. */
#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>

#define LR    1e-2f
#define B1    0.9f
#define B2    0.95f
#define ADEPS 1e-8f
#define WD    0.1f
#define STEP  3

typedef struct {
    float *master, *grad, *m, *v, *param, scale;
} adam_in;

static adam_in adam_inputs(ct_pool *P, size_t n) {
    adam_in a;
    a.master = ct_uniform_f32(P, 70, n, -1.0f, 1.0f);
    a.grad = ct_rand_act(P, 71, n, 0.5f); /* any fp32 works; compute-dtype values keep it simple */
    a.m = ct_uniform_f32(P, 72, n, -0.05f, 0.05f);
    a.v = ct_uniform_f32(P, 73, n, 0.0f, 1e-2f);
    a.param = ct_dup(P, a.master, n);
    ct_round_act(a.param, n);
    a.scale = 0.7f; /* a clipping coefficient */
    return a;
}

/* Runs both backends over the spans; returns the GPU's master, m, v and param (as fp32) in
 * got[0..3] and the CPU's master, m, v in ref[0..2]. */
static void adam_run(mg_test_ctx *t, mg_backend *cpu, ct_pool *P, const adam_in *a, size_t n,
                     const mg_adamw_span *spans, int n_spans, float *got[4], float *ref[3]) {
    mg_backend *gpu = P->g;
    /* the rates as the step-control block holds them: lr, a second lr group, wd, bc1, bc2 */
    float rates[5] = {LR, 0.5f * LR, WD, 1.0f - powf(B1, STEP), 1.0f - powf(B2, STEP)};
    ref[0] = ct_dup(P, a->master, n), ref[1] = ct_dup(P, a->m, n), ref[2] = ct_dup(P, a->v, n);
    float *cpu_param = ct_dup(P, a->param, n);
    MG_EXPECT_OK(cpu->adamw(cpu, cpu_param, ref[0], a->grad, ref[1], ref[2], spans, n_spans, rates,
                            &rates[3], B1, B2, ADEPS, &a->scale));
    void *d_param = ct_up_act(P, a->param, n);
    float *d_master = ct_up_f32(P, a->master, n), *d_grad = ct_up_f32(P, a->grad, n);
    float *d_m = ct_up_f32(P, a->m, n), *d_v = ct_up_f32(P, a->v, n);
    float *d_scale = ct_up_f32(P, &a->scale, 1), *d_rates = ct_up_f32(P, rates, 5);
    if (!P->failed)
        MG_EXPECT_OK(gpu->adamw(gpu, d_param, d_master, d_grad, d_m, d_v, spans, n_spans, d_rates,
                                &d_rates[3], B1, B2, ADEPS, d_scale));
    got[0] = ct_down_f32(P, d_master, n);
    got[1] = ct_down_f32(P, d_m, n);
    got[2] = ct_down_f32(P, d_v, n);
    got[3] = ct_down_act(P, d_param, n);
}

/* The master's change, the moments and the parameters against the CPU's; a parameter of a span
 * must be its new master rounded, one outside every span unchanged. */
static void adam_check(mg_test_ctx *t, ct_pool *P, const adam_in *a, size_t n,
                       const mg_adamw_span *spans, int n_spans, float *got[4], float *ref[3],
                       const char *label) {
    float *dg = ct_host(P, n * 4), *dr = ct_host(P, n * 4), *want = ct_dup(P, a->param, n);
    if (P->failed) return;
    for (size_t i = 0; i < n; i++)
        dg[i] = got[0][i] - a->master[i], dr[i] = ref[0][i] - a->master[i];
    CT_EXPECT_CLOSE(dg, dr, n, CT_TOL_F32, "adamw master change, %s", label);
    CT_EXPECT_CLOSE(got[1], ref[1], n, CT_TOL_F32_ELEM, "adamw m, %s", label);
    CT_EXPECT_CLOSE(got[2], ref[2], n, CT_TOL_F32_ELEM, "adamw v, %s", label);
    for (int k = 0; k < n_spans; k++)
        for (size_t j = 0; j < spans[k].n; j++)
            want[spans[k].param_off + j] = got[0][spans[k].state_off + j];
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (ct_act_bits(got[3][i]) != ct_act_bits(want[i]) && bad++ == 0) first = i;
    MG_EXPECT(bad == 0,
              "adamw, %s: %zu params are not their rounded master or moved outside the spans "
              "(first [%zu]: %.9g, want %.9g)",
              label, bad, first, got[3][first], want[first]);
}

MG_TEST(cuda_adamw_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const size_t sizes[] = {1, 7, 1000003};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        const mg_adamw_span one = {0, 0, 0, n, 0, 2};
        ct_pool P = ct_pool_of(t, gpu);
        adam_in a = adam_inputs(&P, n);
        float *got[4], *ref[3];
        adam_run(t, cpu, &P, &a, n, &one, 1, got, ref);
        char label[32];
        snprintf(label, sizeof label, "n=%zu", n);
        if (!P.failed) adam_check(t, &P, &a, n, &one, 1, got, ref, label);
        ct_pool_free(&P);
    }
}

/* A whole step's worth of spans in one call: 130 spans (three launches of the multi-tensor
 * kernel), one to 20,000 elements (several tiles), two lr groups, with and without decay, gaps
 * between them (left alone), the moments at other offsets than the parameters and some gradients
 * at others still, some of them not 16-byte aligned (the scalar walk). */
MG_TEST(cuda_adamw_spans_match_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { SPANS = 130 };
    mg_adamw_span spans[SPANS];
    size_t p = 0, q = 0;
    for (int i = 0; i < SPANS; i++) {
        size_t len = i == 17 ? 20000 : (size_t)(i * 37 % 3000) + 1;
        p += (size_t)(i % 5 == 0 ? 4 : i % 5), q += (size_t)(i % 3) * 4;
        spans[i] = (mg_adamw_span){p, p, q, len, i % 2, i % 3 == 0 ? -1 : 2};
        p += len, q += len;
    }
    const size_t n = (p > q ? p : q) + 3;
    /* the gradients of every fourth span elsewhere (the compact fp8 parameters' spans,
     * train/optimizer.h): mirrored from the end of the buffer */
    for (int i = 0; i < SPANS; i += 4) spans[i].grad_off = n - spans[i].param_off - spans[i].n;
    ct_pool P = ct_pool_of(t, gpu);
    adam_in a = adam_inputs(&P, n);
    float *got[4], *ref[3];
    adam_run(t, cpu, &P, &a, n, spans, SPANS, got, ref);
    if (!P.failed) adam_check(t, &P, &a, n, spans, SPANS, got, ref, "130 spans");
    ct_pool_free(&P);
}

/* A NaN and an Inf gradient poison only their own elements, as on the CPU. */
MG_TEST(cuda_adamw_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 1001 };
    ct_pool P = ct_pool_of(t, gpu);
    adam_in a = adam_inputs(&P, N);
    a.grad[5] = NAN;
    a.grad[900] = INFINITY;
    float *got[4], *ref[3];
    const mg_adamw_span one = {0, 0, 0, N, 0, 2};
    adam_run(t, cpu, &P, &a, N, &one, 1, got, ref);
    if (!P.failed) {
        CT_EXPECT_PARITY(got[0], ref[0], N, "adamw master");
        CT_EXPECT_PARITY(got[1], ref[1], N, "adamw m");
        CT_EXPECT_PARITY(got[2], ref[2], N, "adamw v");
        CT_EXPECT_PARITY(got[3], ref[0], N, "adamw param");
    }
    ct_pool_free(&P);
}
