/* CUDA backend against the CPU backend: GELU and SwiGLU, forward and backward (method and
 * tolerances: cuda_test_util.h). Inputs span [-6, 6] so both tails and the curved middle count. */
#include "cuda_test_util.h"

#include <math.h>

static const size_t k_sizes[] = {1, 7, 257, 1000003};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

MG_TEST(cuda_gelu_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = k_sizes[k];
        ct_pool P = ct_pool_of(t, gpu);
        float *x = ct_uniform_act(&P, 10, n, -6.0f, 6.0f), *dy = ct_rand_act(&P, 11, n, 1.0f);
        float *ref_y = ct_host(&P, n * 4), *ref_dx = ct_host(&P, n * 4);
        MG_EXPECT_OK(cpu->gelu_forward(cpu, ref_y, x, n));
        MG_EXPECT_OK(cpu->gelu_backward(cpu, ref_dx, x, dy, n));
        void *d_x = ct_up_act(&P, x, n), *d_dy = ct_up_act(&P, dy, n);
        void *d_y = ct_poison_act(&P, n), *d_dx = ct_poison_act(&P, n);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->gelu_forward(gpu, d_y, d_x, n));
            MG_EXPECT_OK(gpu->gelu_backward(gpu, d_dx, d_x, d_dy, n));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_y, n), ref_y, n, CT_TOL_ACT, "gelu_forward n=%zu", n);
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, n), ref_dx, n, CT_TOL_ACT, "gelu_backward n=%zu",
                            n);
        }
        ct_pool_free(&P);
    }
}

/* NaN and +Inf in, the CPU's NaN/Inf positions out. Backward gets NaNs only: at +-Inf the
 * derivative is a limit (1 and 0) that the two backends need not reach the same way, and -Inf is
 * left out of forward for the same reason (the limit there is 0). */
MG_TEST(cuda_gelu_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 515 };
    ct_pool P = ct_pool_of(t, gpu);
    float *x = ct_uniform_act(&P, 12, N, -4.0f, 4.0f), *dy = ct_rand_act(&P, 13, N, 1.0f);
    x[3] = NAN, x[100] = NAN;
    dy[200] = NAN;
    float *xi = ct_dup(&P, x, N);
    xi[514] = INFINITY;
    float *ref_y = ct_host(&P, N * 4), *ref_dx = ct_host(&P, N * 4);
    MG_EXPECT_OK(cpu->gelu_forward(cpu, ref_y, xi, N));
    MG_EXPECT_OK(cpu->gelu_backward(cpu, ref_dx, x, dy, N));
    void *d_x = ct_up_act(&P, x, N), *d_xi = ct_up_act(&P, xi, N), *d_dy = ct_up_act(&P, dy, N);
    void *d_y = ct_poison_act(&P, N), *d_dx = ct_poison_act(&P, N);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->gelu_forward(gpu, d_y, d_xi, N));
        MG_EXPECT_OK(gpu->gelu_backward(gpu, d_dx, d_x, d_dy, N));
        CT_EXPECT_PARITY(ct_down_act(&P, d_y, N), ref_y, N, "gelu_forward");
        CT_EXPECT_PARITY(ct_down_act(&P, d_dx, N), ref_dx, N, "gelu_backward");
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_swiglu_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const int Ns[] = {1, 7, 257}, Fs[] = {64, 96, 1000, 2816};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++) {
            int N = Ns[a], F = Fs[b];
            size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
            ct_pool P = ct_pool_of(t, gpu);
            float *x = ct_uniform_act(&P, 14, ni, -6.0f, 6.0f), *dy = ct_rand_act(&P, 15, no, 1);
            float *ref_y = ct_host(&P, no * 4), *ref_dx = ct_host(&P, ni * 4);
            MG_EXPECT_OK(cpu->swiglu_forward(cpu, ref_y, x, N, F));
            MG_EXPECT_OK(cpu->swiglu_backward(cpu, ref_dx, x, dy, N, F));
            void *d_x = ct_up_act(&P, x, ni), *d_dy = ct_up_act(&P, dy, no);
            void *d_y = ct_poison_act(&P, no), *d_dx = ct_poison_act(&P, ni);
            if (!P.failed) {
                MG_EXPECT_OK(gpu->swiglu_forward(gpu, d_y, d_x, N, F));
                MG_EXPECT_OK(gpu->swiglu_backward(gpu, d_dx, d_x, d_dy, N, F));
                CT_EXPECT_CLOSE(ct_down_act(&P, d_y, no), ref_y, no, CT_TOL_ACT,
                                "swiglu_forward N=%d F=%d", N, F);
                CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, ni), ref_dx, ni, CT_TOL_ACT,
                                "swiglu_backward N=%d F=%d", N, F);
            }
            ct_pool_free(&P);
        }
}

MG_TEST(cuda_swiglu_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 3, F = 96 };
    ct_pool P = ct_pool_of(t, gpu);
    float *x = ct_uniform_act(&P, 16, N * 2 * F, -4.0f, 4.0f);
    x[5] = NAN;                      /* gate of row 0 */
    x[2 * F + F + 7] = NAN;          /* up of row 1 */
    x[2 * 2 * F + F + 9] = INFINITY; /* up of row 2: silu(gate) * Inf */
    float *ref_y = ct_host(&P, N * F * 4);
    MG_EXPECT_OK(cpu->swiglu_forward(cpu, ref_y, x, N, F));
    void *d_x = ct_up_act(&P, x, N * 2 * F), *d_y = ct_poison_act(&P, N * F);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->swiglu_forward(gpu, d_y, d_x, N, F));
        CT_EXPECT_PARITY(ct_down_act(&P, d_y, N * F), ref_y, N * F, "swiglu_forward");
    }
    ct_pool_free(&P);
}
