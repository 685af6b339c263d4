/* CUDA backend against the CPU backend: the linear layer (cuBLASLt GEMMs), forward (with bias
 * and residual), the GELU-fused forward and the GELU-fused input gradient, and backward (method
 * and tolerances: cuda_test_util.h). The shapes with a width not a multiple of 8 take the
 * unfused fallback (cuBLASLt's aux buffer needs ld % 8 == 0), so both paths are checked. Weight and
 * bias gradients are fp32 and accumulate, so they are pre-filled and compared at the fp32
 * tolerance: a GEMM that rounded them through bf16 or fp16 would fail. */
#include "cuda_test_util.h"

#include "core/env.h"

#include <math.h>

typedef struct {
    int N, IC, OC;
} lin_case;

static const lin_case k_cases[] = {
    {1, 64, 96},       {7, 64, 96},   {257, 64, 96}, {1, 96, 1000},   {7, 96, 1000},
    {257, 96, 1000},   {1, 1000, 64}, {7, 1000, 64}, {257, 1000, 64}, {7, 64, 50304}, /* LM head */
    {512, 1024, 4096}, {33, 100, 72}, {33, 72, 100}, /* widths not a multiple of 8 */
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

/* A case's input and weight (scale w_scale / sqrt(IC)) and, with `bias`, bias (scale 0.5), seeded
 * by ids id, id + 1 and id + 2, and their uploads. A case's inputs serve all its variants; each
 * variant gets a freshly poisoned output. */
typedef struct {
    float *inp, *w, *bias;
    void *d_inp, *d_w, *d_bias;
} lin_in;

static lin_in lin_inputs(ct_pool *P, lin_case c, uint32_t id, float w_scale, bool bias) {
    size_t ni = (size_t)c.N * c.IC, nw = (size_t)c.OC * c.IC;
    lin_in in = {0};
    in.inp = ct_rand_act(P, id, ni, 1.0f);
    in.w = ct_rand_act(P, id + 1, nw, w_scale / sqrtf((float)c.IC));
    in.d_inp = ct_up_act(P, in.inp, ni);
    in.d_w = ct_up_act(P, in.w, nw);
    if (bias) {
        in.bias = ct_rand_act(P, id + 2, c.OC, 0.5f);
        in.d_bias = ct_up_act(P, in.bias, c.OC);
    }
    return in;
}

/* variant bit 0: bias, bit 1: residual */
MG_TEST(cuda_linear_forward_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NCASES; k++) {
        lin_case c = k_cases[k];
        size_t no = (size_t)c.N * c.OC;
        ct_pool P = ct_pool_of(t, gpu);
        lin_in in = lin_inputs(&P, c, 80, 1.0f, true);
        float *res = ct_rand_act(&P, 79, no, 1.0f), *ref = ct_host(&P, no * 4);
        void *d_res = ct_up_act(&P, res, no);
        for (int variant = 0; variant < 4 && !P.failed; variant++) {
            int with_bias = variant & 1, with_res = variant >> 1;
            MG_EXPECT_OK(cpu->linear_forward(cpu, ref, in.inp, in.w, with_bias ? in.bias : NULL,
                                             with_res ? res : NULL, c.N, c.IC, c.OC));
            void *d_out = ct_poison_act(&P, no);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->linear_forward(gpu, d_out, in.d_inp, in.d_w,
                                             with_bias ? in.d_bias : NULL, with_res ? d_res : NULL,
                                             c.N, c.IC, c.OC));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_out, no), ref, no, CT_TOL_GEMM,
                            "linear_forward N=%d IC=%d OC=%d bias=%d residual=%d", c.N, c.IC, c.OC,
                            with_bias, with_res);
        }
        ct_pool_free(&P);
    }
}

/* linear_gelu_forward: both outputs (the pre-activation saved for backward and the GELU), poisoned
 * first, against the CPU's linear + GELU. */
MG_TEST(cuda_linear_gelu_forward_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NCASES; k++) {
        lin_case c = k_cases[k];
        size_t no = (size_t)c.N * c.OC;
        ct_pool P = ct_pool_of(t, gpu);
        lin_in in = lin_inputs(&P, c, 90, 2.0f, true);
        float *ref = ct_host(&P, no * 4), *ref_pre = ct_host(&P, no * 4);
        for (int with_bias = 0; with_bias < 2 && !P.failed; with_bias++) {
            MG_EXPECT_OK(cpu->linear_gelu_forward(cpu, ref, ref_pre, in.inp, in.w,
                                                  with_bias ? in.bias : NULL, c.N, c.IC, c.OC));
            void *d_out = ct_poison_act(&P, no), *d_pre = ct_poison_act(&P, no);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->linear_gelu_forward(gpu, d_out, d_pre, in.d_inp, in.d_w,
                                                  with_bias ? in.d_bias : NULL, c.N, c.IC, c.OC));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_pre, no), ref_pre, no, CT_TOL_GEMM,
                            "linear_gelu_forward pre N=%d IC=%d OC=%d bias=%d", c.N, c.IC, c.OC,
                            with_bias);
            CT_EXPECT_CLOSE(ct_down_act(&P, d_out, no), ref, no, CT_TOL_GEMM,
                            "linear_gelu_forward out N=%d IC=%d OC=%d bias=%d", c.N, c.IC, c.OC,
                            with_bias);
        }
        ct_pool_free(&P);
    }
}

/* variant 0: dinp and dbias; 1: dinp, no dbias; 2: no dinp (first layer), dbias; 3: dinp through
 * a GELU (gelu_pre) and dbias. Inputs made and uploaded once per case, as above. */
static void backward_cases(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu) {
    for (size_t k = 0; k < NCASES; k++) {
        lin_case c = k_cases[k];
        size_t ni = (size_t)c.N * c.IC, nw = (size_t)c.OC * c.IC, no = (size_t)c.N * c.OC;
        ct_pool P = ct_pool_of(t, gpu);
        lin_in in = lin_inputs(&P, c, 83, 1.0f, false);
        float *dout = ct_rand_act(&P, 85, no, 1.0f);
        float *dw0 = ct_uniform_f32(&P, 86, nw, -1.0f, 1.0f);
        float *db0 = ct_uniform_f32(&P, 87, c.OC, -1.0f, 1.0f);
        float *pre = ct_rand_act(&P, 78, ni, 2.0f); /* GELU input: both signs, the bend */
        float *ref_dinp = ct_host(&P, ni * 4), *ref_dw = ct_host(&P, nw * 4);
        float *ref_db = ct_host(&P, (size_t)c.OC * 4);
        void *d_pre = ct_up_act(&P, pre, ni), *d_dout = ct_up_act(&P, dout, no);
        float *d_dw = ct_up_f32(&P, dw0, nw), *d_db = ct_up_f32(&P, db0, c.OC);
        for (int variant = 0; variant < 4 && !P.failed; variant++) {
            int want_dinp = variant != 2, want_db = variant != 1, want_gelu = variant == 3;
            memcpy(ref_dw, dw0, nw * 4);
            memcpy(ref_db, db0, (size_t)c.OC * 4);
            MG_EXPECT_OK(cpu->linear_backward(cpu, want_dinp ? ref_dinp : NULL, ref_dw,
                                              want_db ? ref_db : NULL, dout, in.inp, in.w,
                                              want_gelu ? pre : NULL, c.N, c.IC, c.OC));
            void *d_dinp = ct_poison_act(&P, ni);
            if (P.failed) break;
            float *got[2][3];
            for (int run = 0; run < 2; run++) {
                ct_put_f32(&P, d_dw, dw0, nw);
                ct_put_f32(&P, d_db, db0, c.OC);
                MG_EXPECT_OK(gpu->linear_backward(gpu, want_dinp ? d_dinp : NULL, d_dw,
                                                  want_db ? d_db : NULL, d_dout, in.d_inp, in.d_w,
                                                  want_gelu ? d_pre : NULL, c.N, c.IC, c.OC));
                got[run][0] = ct_down_act(&P, d_dinp, ni);
                got[run][1] = ct_down_f32(&P, d_dw, nw);
                got[run][2] = ct_down_f32(&P, d_db, c.OC);
            }
            if (want_dinp)
                CT_EXPECT_CLOSE(got[0][0], ref_dinp, ni, CT_TOL_GEMM,
                                "linear_backward dinp N=%d IC=%d OC=%d gelu=%d", c.N, c.IC, c.OC,
                                want_gelu);
            CT_EXPECT_CLOSE(got[0][1], ref_dw, nw, CT_TOL_F32,
                            "linear_backward dw (accumulated) N=%d IC=%d OC=%d variant %d", c.N,
                            c.IC, c.OC, variant);
            if (want_db)
                CT_EXPECT_CLOSE(got[0][2], ref_db, c.OC, CT_TOL_F32,
                                "linear_backward dbias (accumulated) N=%d OC=%d", c.N, c.OC);
            else
                MG_EXPECT(memcmp(got[0][2], db0, (size_t)c.OC * 4) == 0,
                          "dbias changed though NULL (N=%d OC=%d)", c.N, c.OC);
            const size_t sizes[3] = {ni, nw, (size_t)c.OC};
            for (int o = 0; o < 3; o++)
                CT_EXPECT_SAME_BITS(got[0][o], got[1][o], sizes[o] * 4,
                                    "linear_backward output %d N=%d IC=%d OC=%d", o, c.N, c.IC,
                                    c.OC);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_linear_backward_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    backward_cases(t, cpu, gpu);
}

/* The same with MG_DBIAS=epilogue: the bias gradient from cuBLASLt's BGRADB epilogue on the
 * weight-gradient product instead of our column sums (the default). */
MG_TEST(cuda_linear_backward_epilogue_dbias_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    setenv("MG_DBIAS", "epilogue", 1);
    mg_env_forget();
    backward_cases(t, cpu, gpu);
    if (gpu->device == MG_DEVICE_CUDA) { /* any other value is refused in one line */
        setenv("MG_DBIAS", "fast", 1);
        mg_env_forget();
        enum { N = 4, IC = 8, OC = 8 };
        ct_pool P = ct_pool_of(t, gpu);
        void *d_dout = ct_poison_act(&P, N * OC), *d_inp = ct_poison_act(&P, N * IC);
        void *d_w = ct_poison_act(&P, OC * IC);
        float *d_dw = ct_poison(&P, OC * IC * 4), *d_db = ct_poison(&P, OC * 4);
        if (!P.failed) {
            mg_status st =
                gpu->linear_backward(gpu, NULL, d_dw, d_db, d_dout, d_inp, d_w, NULL, N, IC, OC);
            MG_EXPECT(st == MG_ERR_USAGE && strstr(mg_error_message(), "MG_DBIAS=fast"),
                      "MG_DBIAS=fast: status %d, '%s'", (int)st, mg_error_message());
            mg_error_clear();
        }
        ct_pool_free(&P);
    }
    unsetenv("MG_DBIAS");
    mg_env_forget();
}

/* A NaN in one input row and an Inf in another: the NaN row comes out all NaN, the Inf row all
 * +-Inf (the sign of the weight that meets the Inf), the other rows finite, as on the CPU. */
MG_TEST(cuda_linear_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 5, IC = 64, OC = 96 };
    ct_pool P = ct_pool_of(t, gpu);
    float *inp = ct_rand_act(&P, 88, N * IC, 1.0f), *w = ct_rand_act(&P, 89, OC * IC, 0.125f);
    inp[1 * IC + 3] = NAN;
    inp[3 * IC + 60] = INFINITY;
    float *ref = ct_host(&P, N * OC * 4);
    MG_EXPECT_OK(cpu->linear_forward(cpu, ref, inp, w, NULL, NULL, N, IC, OC));
    void *d_inp = ct_up_act(&P, inp, N * IC), *d_w = ct_up_act(&P, w, OC * IC);
    void *d_out = ct_poison_act(&P, N * OC);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->linear_forward(gpu, d_out, d_inp, d_w, NULL, NULL, N, IC, OC));
        CT_EXPECT_PARITY(ct_down_act(&P, d_out, N * OC), ref, N * OC, "linear_forward");
    }
    ct_pool_free(&P);
}
