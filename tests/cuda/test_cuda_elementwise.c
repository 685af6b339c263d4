/* CUDA backend against the CPU backend: add, bias_residual_add, the fp32 reductions sum_f32 and
 * sumsq_f32, count_zeros_f32, and clip_coef (method and tolerances: cuda_test_util.h). */
#include "cuda_test_util.h"

#include <math.h>

static const size_t k_sizes[] = {1, 7, 257, 1000003};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

MG_TEST(cuda_add_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = k_sizes[k];
        ct_pool P = ct_pool_of(t, gpu);
        float *a = ct_rand_act(&P, 1, n, 1.0f), *b = ct_rand_act(&P, 2, n, 3.0f);
        float *ref = ct_host(&P, n * sizeof(float));
        MG_EXPECT_OK(cpu->add(cpu, ref, a, b, n));
        void *da = ct_up_act(&P, a, n), *db = ct_up_act(&P, b, n), *dout = ct_poison_act(&P, n);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->add(gpu, dout, da, db, n));
            CT_EXPECT_CLOSE(ct_down_act(&P, dout, n), ref, n, CT_TOL_ACT, "add n=%zu", n);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_add_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 1031 };
    ct_pool P = ct_pool_of(t, gpu);
    float *a = ct_rand_act(&P, 3, N, 1.0f), *b = ct_rand_act(&P, 4, N, 1.0f);
    a[0] = NAN, a[17] = INFINITY, a[18] = -INFINITY, a[500] = INFINITY, b[500] = -INFINITY;
    b[1030] = NAN, b[99] = INFINITY;
    float *ref = ct_host(&P, N * sizeof(float));
    MG_EXPECT_OK(cpu->add(cpu, ref, a, b, N));
    void *da = ct_up_act(&P, a, N), *db = ct_up_act(&P, b, N), *dout = ct_poison_act(&P, N);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->add(gpu, dout, da, db, N));
        CT_EXPECT_PARITY(ct_down_act(&P, dout, N), ref, N, "add with NaN/Inf");
    }
    ct_pool_free(&P);
}

/* count_zeros_f32 (--log-num-zeros-in-grad): an integer count, so the GPU's must equal the CPU's
 * exactly at every size; +0 and -0 count, NaN and denormals do not; it adds to *out. */
MG_TEST(cuda_count_zeros_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = k_sizes[k];
        ct_pool P = ct_pool_of(t, gpu);
        float *x = ct_uniform_f32(&P, 11, n, -1.0f, 1.0f);
        for (size_t i = 0; x && i < n; i++) {
            if (i % 5 == 0) x[i] = i % 10 == 0 ? 0.0f : -0.0f;
            if (i % 5 == 1 && (i / 5) % 19 == 0) x[i] = NAN;
            if (i % 5 == 2 && (i / 5) % 23 == 0) x[i] = 1e-40f; /* a denormal is not zero */
        }
        int64_t ref = 7, init = 7;
        if (!P.failed) MG_EXPECT_OK(cpu->count_zeros_f32(cpu, &ref, x, n));
        float *dx = ct_up_f32(&P, x, n);
        int64_t *dout = (int64_t *)ct_up_f32(&P, (const float *)&init, 2);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->count_zeros_f32(gpu, dout, dx, n));
            const int64_t *got = (const int64_t *)ct_down_f32(&P, (const float *)dout, 2);
            MG_EXPECT(got && *got == ref, "count_zeros_f32 n=%zu: %lld on the GPU, %lld on the CPU",
                      n, got ? (long long)*got : -1LL, (long long)ref);
            MG_EXPECT(ref - 7 == (int64_t)((n + 4) / 5),
                      "n=%zu: the CPU counted %lld zeros, want %zu", n, (long long)(ref - 7),
                      (n + 4) / 5);
        }
        ct_pool_free(&P);
    }
}

/* Runs sum_f32 (w may be NULL) or sumsq_f32 on the GPU from the pre-filled value `init`. */
static float gpu_reduce(mg_test_ctx *t, ct_pool *P, int square, const float *dx, const float *dw,
                        size_t n, float scale, float init) {
    mg_backend *g = P->g;
    float *dout = ct_up_f32(P, &init, 1);
    if (P->failed) return NAN;
    if (square) /* scale 1 (the op's unscale pointer: test_cuda_step_control.c) */
        MG_EXPECT_OK(g->sumsq_f32(g, dout, dx, n, NULL));
    else
        MG_EXPECT_OK(g->sum_f32(g, dout, dx, dw, n, scale));
    return *ct_down_f32(P, dout, 1);
}

MG_TEST(cuda_sum_and_sumsq_match_cpu_and_repeat) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = k_sizes[k];
        ct_pool P = ct_pool_of(t, gpu);
        /* losses are positive (sum_f32 averages them): no cancellation hides an error */
        float *x = ct_uniform_f32(&P, 5, n, 0.1f, 3.0f), *w = ct_uniform_f32(&P, 6, n, 0.0f, 1.0f);
        float *y = ct_uniform_f32(&P, 7, n, -2.0f, 2.0f);
        float scale = 1.0f / (float)n, init = 0.75f;
        float ref_sum = init, ref_wsum = init, ref_sq = init;
        MG_EXPECT_OK(cpu->sum_f32(cpu, &ref_sum, x, NULL, n, scale));
        MG_EXPECT_OK(cpu->sum_f32(cpu, &ref_wsum, x, w, n, scale));
        MG_EXPECT_OK(cpu->sumsq_f32(cpu, &ref_sq, y, n, NULL));
        float *dx = ct_up_f32(&P, x, n), *dw = ct_up_f32(&P, w, n), *dy = ct_up_f32(&P, y, n);
        if (!P.failed) {
            float s1 = gpu_reduce(t, &P, 0, dx, NULL, n, scale, init);
            float s2 = gpu_reduce(t, &P, 0, dx, dw, n, scale, init);
            float s3 = gpu_reduce(t, &P, 1, dy, NULL, n, 1.0f, init);
            CT_EXPECT_CLOSE(&s1, &ref_sum, 1, CT_TOL_F32, "sum_f32 n=%zu", n);
            CT_EXPECT_CLOSE(&s2, &ref_wsum, 1, CT_TOL_F32, "sum_f32 weighted n=%zu", n);
            CT_EXPECT_CLOSE(&s3, &ref_sq, 1, CT_TOL_F32, "sumsq_f32 n=%zu", n);
            float r1 = gpu_reduce(t, &P, 0, dx, dw, n, scale, init);
            float r3 = gpu_reduce(t, &P, 1, dy, NULL, n, 1.0f, init);
            CT_EXPECT_SAME_BITS(&r1, &s2, sizeof r1, "sum_f32 n=%zu", n);
            CT_EXPECT_SAME_BITS(&r3, &s3, sizeof r3, "sumsq_f32 n=%zu", n);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_sum_and_sumsq_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 70001 };
    ct_pool P = ct_pool_of(t, gpu);
    float *x = ct_uniform_f32(&P, 8, N, -1.0f, 1.0f), *y = ct_dup(&P, x, N);
    x[12345] = INFINITY;
    y[69999] = NAN;
    float ref[3] = {0.5f, 0.5f, 0.5f};
    MG_EXPECT_OK(cpu->sum_f32(cpu, &ref[0], x, NULL, N, 1.0f));
    MG_EXPECT_OK(cpu->sumsq_f32(cpu, &ref[1], x, N, NULL));
    MG_EXPECT_OK(cpu->sumsq_f32(cpu, &ref[2], y, N, NULL));
    float *dx = ct_up_f32(&P, x, N), *dy = ct_up_f32(&P, y, N);
    if (!P.failed) {
        float got[3] = {gpu_reduce(t, &P, 0, dx, NULL, N, 1.0f, 0.5f),
                        gpu_reduce(t, &P, 1, dx, NULL, N, 1.0f, 0.5f),
                        gpu_reduce(t, &P, 1, dy, NULL, N, 1.0f, 0.5f)};
        CT_EXPECT_PARITY(got, ref, 3, "sum_f32 (Inf), sumsq_f32 (Inf), sumsq_f32 (NaN)");
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_clip_coef_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    /* (sumsq, clip, unscale): clipping active, inactive, disabled (clip 0), exactly at the
     * threshold; gradients held x 2^10 (a loss scale); an overflow (the coefficient is NaN) */
    const float cases[][3] = {{16.0f, 1.0f, 1.0f},      {16.0f, 10.0f, 1.0f},
                              {16.0f, 0.0f, 1.0f},      {16.0f, 4.0f, 1.0f},
                              {2.5e-3f, 1e-3f, 1.0f},   {16.0f, 1.0f, 0x1p-10f},
                              {16.0f, 10.0f, 0x1p-10f}, {INFINITY, 1.0f, 1.0f}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ct_pool P = ct_pool_of(t, gpu);
        float ref[2];
        MG_EXPECT_OK(
            cpu->clip_coef(cpu, &ref[0], &ref[1], &cases[k][0], cases[k][1], &cases[k][2]));
        /* the unscale from device memory (the step-control block's) */
        float *dsq = ct_up_f32(&P, &cases[k][0], 1), *dout = ct_poison(&P, 2 * sizeof(float));
        float *dun = ct_up_f32(&P, &cases[k][2], 1);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->clip_coef(gpu, dout, dout + 1, dsq, cases[k][1], dun));
            float *got = ct_down_f32(&P, dout, 2);
            if (isnan(ref[0])) { /* an overflow: the step is marked skipped, on both */
                MG_EXPECT(got && isnan(got[0]) && isinf(got[1]), "overflow: coef %g norm %g",
                          got ? got[0] : 0.0, got ? got[1] : 0.0);
                ct_pool_free(&P);
                continue;
            }
            CT_EXPECT_CLOSE(got, ref, 1, CT_TOL_F32_ELEM, "clip_coef coef, sumsq %g clip %g",
                            cases[k][0], cases[k][1]);
            CT_EXPECT_CLOSE(got + 1, ref + 1, 1, CT_TOL_F32_ELEM, "clip_coef norm, sumsq %g",
                            cases[k][0]);
            if (ref[0] == 1.0f) MG_EXPECT(got[0] == 1.0f, "coef %.9g, want exactly 1", got[0]);
        }
        ct_pool_free(&P);
    }
}

/* bias_residual_add: the two adds in fp32 in the CPU's order, one rounding to the compute dtype,
 * so the result is the CPU's fp32 result rounded to it, bitwise (with MG_TEST_CUDA_AS_CPU=1 the
 * "GPU" is the CPU and returns it unrounded). Every combination of bias and residual, into a
 * separate buffer (poisoned) and in place (out = x), on the 16-byte path (H % 8 == 0) and the
 * element one. */
MG_TEST(cuda_bias_residual_add_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const int shapes[][2] = {{7, 96}, {5, 77}, {257, 1024}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], H = shapes[k][1];
        size_t n = (size_t)N * H;
        ct_pool P = ct_pool_of(t, gpu);
        float *x = ct_rand_act(&P, 9, n, 1.0f), *bias = ct_rand_act(&P, 10, H, 0.5f);
        float *res = ct_rand_act(&P, 11, n, 2.0f), *ref = ct_host(&P, n * 4);
        void *dx = ct_up_act(&P, x, n), *db = ct_up_act(&P, bias, H), *dr = ct_up_act(&P, res, n);
        void *dout = ct_poison_act(&P, n), *dio = ct_up_act(&P, x, n);
        for (int mode = 0; mode < 4 && !P.failed; mode++) {
            int wb = mode & 1, wr = mode >> 1;
            MG_EXPECT_OK(
                cpu->bias_residual_add(cpu, ref, x, wb ? bias : NULL, wr ? res : NULL, N, H));
            if (ct_as_cpu() != 1) ct_round_act(ref, n);
            MG_EXPECT_OK(
                gpu->bias_residual_add(gpu, dout, dx, wb ? db : NULL, wr ? dr : NULL, N, H));
            ct_put_act(&P, dio, x, n);
            MG_EXPECT_OK(
                gpu->bias_residual_add(gpu, dio, dio, wb ? db : NULL, wr ? dr : NULL, N, H));
            CT_EXPECT_SAME_BITS(ct_down_act(&P, dout, n), ref, n * 4,
                                "bias_residual_add N=%d H=%d bias %d residual %d", N, H, wb, wr);
            CT_EXPECT_SAME_BITS(ct_down_act(&P, dio, n), ref, n * 4,
                                "bias_residual_add in place N=%d H=%d bias %d residual %d", N, H,
                                wb, wr);
        }
        ct_pool_free(&P);
    }
}
