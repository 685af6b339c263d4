/* CUDA backend against the CPU backend: LayerNorm and RMSNorm, forward and backward (method and
 * tolerances: cuda_test_util.h). Backward gets the same fp32 statistics on both sides (the CPU
 * forward's), so only the backward op itself is compared; dx, dw and db accumulate, so they are
 * pre-filled, and a second run must give the same bits. */
#include "cuda_test_util.h"

#include <math.h>

/* N = 257: several chunks of the dw/db column sums, the last one short. H: 64 and 96 fill part of a
 * warp's 256-column stride; 1000 takes the scalar kernels (not a multiple of 8); 1600 ends in a
 * partial stride; 4096 is above the fused kernel's shared memory with a LayerNorm bias (its dw/db
 * run as a kernel of their own), below it for RMSNorm. */
static const int k_N[] = {1, 7, 257};
static const int k_H[] = {64, 96, 1000, 1600, 4096};
#define N_H ((int)(sizeof k_H / sizeof k_H[0]))
#define EPS 1e-5f

MG_TEST(cuda_layernorm_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < N_H; b++)
            for (int with_b = 0; with_b < 2; with_b++) {
                int N = k_N[a], H = k_H[b];
                size_t n = (size_t)N * H;
                ct_pool P = ct_pool_of(t, gpu);
                /* an offset mean, so a missing mean subtraction shows */
                float *x = ct_rand_act(&P, 30, n, 1.5f);
                for (size_t i = 0; i < n; i++) x[i] += 0.75f;
                ct_round_act(x, n);
                float *w = ct_rand_act(&P, 31, H, 0.1f), *bias = ct_rand_act(&P, 32, H, 0.1f);
                for (int j = 0; j < H; j++) w[j] += 1.0f;
                ct_round_act(w, H);
                float *dout = ct_rand_act(&P, 33, n, 1.0f), *dx0 = ct_rand_act(&P, 34, n, 0.5f);
                float *dw0 = ct_uniform_f32(&P, 35, H, -1, 1),
                      *db0 = ct_uniform_f32(&P, 36, H, -1, 1);
                const float *bb = with_b ? bias : NULL;
                float *ref = ct_host(&P, n * 4), *mean = ct_host(&P, N * 4),
                      *rstd = ct_host(&P, N * 4);
                float *ref_dx = ct_dup(&P, dx0, n), *ref_dw = ct_dup(&P, dw0, H);
                float *ref_db = ct_dup(&P, db0, H);
                MG_EXPECT_OK(cpu->layernorm_forward(cpu, ref, mean, rstd, x, w, bb, N, H, EPS));
                MG_EXPECT_OK(cpu->layernorm_backward(cpu, ref_dx, ref_dw, with_b ? ref_db : NULL,
                                                     dout, x, w, mean, rstd, N, H));

                void *d_x = ct_up_act(&P, x, n), *d_w = ct_up_act(&P, w, H);
                void *d_b = ct_up_act(&P, bias, H), *d_out = ct_poison_act(&P, n);
                float *d_mean = ct_poison(&P, N * 4), *d_rstd = ct_poison(&P, N * 4);
                float *d_mean_ref = ct_up_f32(&P, mean, N), *d_rstd_ref = ct_up_f32(&P, rstd, N);
                void *d_dout = ct_up_act(&P, dout, n), *d_dx = ct_up_act(&P, dx0, n);
                float *d_dw = ct_up_f32(&P, dw0, H), *d_db = ct_up_f32(&P, db0, H);
                if (P.failed) goto next;
                MG_EXPECT_OK(gpu->layernorm_forward(gpu, d_out, d_mean, d_rstd, d_x, d_w,
                                                    with_b ? d_b : NULL, N, H, EPS));
                CT_EXPECT_CLOSE(ct_down_act(&P, d_out, n), ref, n, CT_TOL_ACT,
                                "layernorm_forward out N=%d H=%d bias=%d", N, H, with_b);
                CT_EXPECT_CLOSE(ct_down_f32(&P, d_mean, N), mean, N, CT_TOL_F32,
                                "layernorm_forward mean N=%d H=%d", N, H);
                CT_EXPECT_CLOSE(ct_down_f32(&P, d_rstd, N), rstd, N, CT_TOL_F32,
                                "layernorm_forward rstd N=%d H=%d", N, H);
                float *got[2][3];
                for (int run = 0; run < 2; run++) {
                    ct_put_act(&P, d_dx, dx0, n);
                    ct_put_f32(&P, d_dw, dw0, H);
                    ct_put_f32(&P, d_db, db0, H);
                    MG_EXPECT_OK(gpu->layernorm_backward(gpu, d_dx, d_dw, with_b ? d_db : NULL,
                                                         d_dout, d_x, d_w, d_mean_ref, d_rstd_ref,
                                                         N, H));
                    got[run][0] = ct_down_act(&P, d_dx, n);
                    got[run][1] = ct_down_f32(&P, d_dw, H);
                    got[run][2] = ct_down_f32(&P, d_db, H);
                }
                CT_EXPECT_CLOSE(got[0][0], ref_dx, n, CT_TOL_ACT,
                                "layernorm_backward dx (accumulated) N=%d H=%d", N, H);
                CT_EXPECT_CLOSE(got[0][1], ref_dw, H, CT_TOL_F32, "layernorm_backward dw N=%d H=%d",
                                N, H);
                CT_EXPECT_CLOSE(got[0][2], ref_db, H, CT_TOL_F32, "layernorm_backward db N=%d H=%d",
                                N, H);
                if (!with_b)
                    MG_EXPECT(memcmp(got[0][2], db0, H * 4) == 0, "db changed though NULL");
                for (int o = 0; o < 3; o++)
                    CT_EXPECT_SAME_BITS(got[0][o], got[1][o], (o ? (size_t)H : n) * 4,
                                        "layernorm_backward output %d N=%d H=%d", o, N, H);
            next:
                ct_pool_free(&P);
            }
}

MG_TEST(cuda_rmsnorm_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < N_H; b++) {
            int N = k_N[a], H = k_H[b];
            size_t n = (size_t)N * H;
            ct_pool P = ct_pool_of(t, gpu);
            float *x = ct_rand_act(&P, 40, n, 1.5f), *w = ct_rand_act(&P, 41, H, 0.1f);
            for (int j = 0; j < H; j++) w[j] += 1.0f;
            ct_round_act(w, H);
            float *dout = ct_rand_act(&P, 42, n, 1.0f), *dx0 = ct_rand_act(&P, 43, n, 0.5f);
            float *dw0 = ct_uniform_f32(&P, 44, H, -1, 1);
            float *ref = ct_host(&P, n * 4), *rstd = ct_host(&P, N * 4);
            float *ref_dx = ct_dup(&P, dx0, n), *ref_dw = ct_dup(&P, dw0, H);
            MG_EXPECT_OK(cpu->rmsnorm_forward(cpu, ref, rstd, x, w, N, H, EPS));
            MG_EXPECT_OK(cpu->rmsnorm_backward(cpu, ref_dx, ref_dw, dout, x, w, rstd, N, H));

            void *d_x = ct_up_act(&P, x, n), *d_w = ct_up_act(&P, w, H);
            void *d_out = ct_poison_act(&P, n);
            float *d_rstd = ct_poison(&P, N * 4), *d_rstd_ref = ct_up_f32(&P, rstd, N);
            void *d_dout = ct_up_act(&P, dout, n), *d_dx = ct_up_act(&P, dx0, n);
            float *d_dw = ct_up_f32(&P, dw0, H);
            if (P.failed) goto next;
            MG_EXPECT_OK(gpu->rmsnorm_forward(gpu, d_out, d_rstd, d_x, d_w, N, H, EPS));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_out, n), ref, n, CT_TOL_ACT,
                            "rmsnorm_forward out N=%d H=%d", N, H);
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_rstd, N), rstd, N, CT_TOL_F32,
                            "rmsnorm_forward rstd N=%d H=%d", N, H);
            float *got[2][2];
            for (int run = 0; run < 2; run++) {
                ct_put_act(&P, d_dx, dx0, n);
                ct_put_f32(&P, d_dw, dw0, H);
                MG_EXPECT_OK(
                    gpu->rmsnorm_backward(gpu, d_dx, d_dw, d_dout, d_x, d_w, d_rstd_ref, N, H));
                got[run][0] = ct_down_act(&P, d_dx, n);
                got[run][1] = ct_down_f32(&P, d_dw, H);
            }
            CT_EXPECT_CLOSE(got[0][0], ref_dx, n, CT_TOL_ACT,
                            "rmsnorm_backward dx (accumulated) N=%d H=%d", N, H);
            CT_EXPECT_CLOSE(got[0][1], ref_dw, H, CT_TOL_F32, "rmsnorm_backward dw N=%d H=%d", N,
                            H);
            CT_EXPECT_SAME_BITS(got[0][0], got[1][0], n * 4, "rmsnorm_backward dx N=%d H=%d", N, H);
            CT_EXPECT_SAME_BITS(got[0][1], got[1][1], H * 4, "rmsnorm_backward dw N=%d H=%d", N, H);
        next:
            ct_pool_free(&P);
        }
}

/* A NaN in one row and an Inf in another: those rows' outputs and statistics follow the CPU's
 * NaN/Inf, the other rows stay finite. */
MG_TEST(cuda_norms_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 6, H = 96 };
    ct_pool P = ct_pool_of(t, gpu);
    float *x = ct_rand_act(&P, 45, N * H, 1.0f), *w = ct_rand_act(&P, 46, H, 1.0f);
    x[2 * H + 17] = NAN;
    x[4 * H + 5] = INFINITY;
    float *ln = ct_host(&P, N * H * 4), *mean = ct_host(&P, N * 4), *rstd = ct_host(&P, N * 4);
    float *rms = ct_host(&P, N * H * 4), *rrstd = ct_host(&P, N * 4);
    MG_EXPECT_OK(cpu->layernorm_forward(cpu, ln, mean, rstd, x, w, NULL, N, H, EPS));
    MG_EXPECT_OK(cpu->rmsnorm_forward(cpu, rms, rrstd, x, w, N, H, EPS));
    void *d_x = ct_up_act(&P, x, N * H), *d_w = ct_up_act(&P, w, H);
    void *d_ln = ct_poison_act(&P, N * H), *d_rms = ct_poison_act(&P, N * H);
    float *d_mean = ct_poison(&P, N * 4), *d_rstd = ct_poison(&P, N * 4);
    float *d_rrstd = ct_poison(&P, N * 4);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->layernorm_forward(gpu, d_ln, d_mean, d_rstd, d_x, d_w, NULL, N, H, EPS));
        MG_EXPECT_OK(gpu->rmsnorm_forward(gpu, d_rms, d_rrstd, d_x, d_w, N, H, EPS));
        CT_EXPECT_PARITY(ct_down_act(&P, d_ln, N * H), ln, N * H, "layernorm_forward out");
        /* rows 0..3 only: the mean of the Inf row is Inf or NaN depending on the algorithm
         * (a running mean meets Inf - Inf); its normalised output is NaN either way */
        CT_EXPECT_PARITY(ct_down_f32(&P, d_mean, N), mean, 4, "layernorm_forward mean");
        CT_EXPECT_PARITY(ct_down_act(&P, d_rms, N * H), rms, N * H, "rmsnorm_forward out");
    }
    ct_pool_free(&P);
}
