/* CUDA backend against the CPU backend: rotary position embedding on the fused qkv buffer,
 * forward and backward, in place (method and tolerances: cuda_test_util.h). The value heads must
 * come out bit for bit untouched. */
#include "cuda_test_util.h"

#include <math.h>

typedef struct {
    int B, S, nq, ng, hd;
} rope_case;

static const rope_case k_cases[] = {
    {2, 7, 4, 2, 64},    /* grouped queries */
    {1, 257, 8, 8, 128}, /* multi-head, Llama's head size */
    {3, 1, 4, 1, 64},    /* one position, one kv group */
    {2, 129, 12, 4, 96},
};

/* cos/sin (S, hd/2) of the standard frequencies 10000^(-2i/hd). */
static void rope_tables(float *c, float *s, int S, int hd) {
    for (int p = 0; p < S; p++)
        for (int i = 0; i < hd / 2; i++) {
            double th = p * pow(10000.0, -2.0 * i / hd);
            c[(size_t)p * (hd / 2) + i] = (float)cos(th);
            s[(size_t)p * (hd / 2) + i] = (float)sin(th);
        }
}

/* Count of value-head entries of `got` whose bits differ from `want`. */
static int value_heads_changed(const float *got, const float *want, int N, int nq, int ng, int hd) {
    int r = nq / ng, bad = 0;
    size_t C = (size_t)ng * (r + 2) * hd;
    for (int i = 0; i < N; i++)
        for (int g = 0; g < ng; g++) {
            size_t off = (size_t)i * C + ((size_t)g * (r + 2) + r + 1) * hd;
            bad += memcmp(got + off, want + off, (size_t)hd * 4) != 0;
        }
    return bad;
}

MG_TEST(cuda_rope_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        rope_case c = k_cases[k];
        int N = c.B * c.S, r = c.nq / c.ng;
        size_t n = (size_t)N * c.ng * (r + 2) * c.hd, nt = (size_t)c.S * (c.hd / 2);
        ct_pool P = ct_pool_of(t, gpu);
        float *qkv = ct_rand_bf16(&P, 50, n, 1.0f), *dqkv = ct_rand_bf16(&P, 51, n, 1.0f);
        float *cs = ct_host(&P, nt * 4), *sn = ct_host(&P, nt * 4);
        rope_tables(cs, sn, c.S, c.hd);
        float *ref_f = ct_dup(&P, qkv, n), *ref_b = ct_dup(&P, dqkv, n);
        MG_EXPECT_OK(cpu->rope_forward(cpu, ref_f, cs, sn, N, c.S, c.nq, c.ng, c.hd));
        MG_EXPECT_OK(cpu->rope_backward(cpu, ref_b, cs, sn, N, c.S, c.nq, c.ng, c.hd));
        void *d_qkv = ct_up_act(&P, qkv, n), *d_dqkv = ct_up_act(&P, dqkv, n);
        float *d_cs = ct_up_f32(&P, cs, nt), *d_sn = ct_up_f32(&P, sn, nt);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->rope_forward(gpu, d_qkv, d_cs, d_sn, N, c.S, c.nq, c.ng, c.hd));
            MG_EXPECT_OK(gpu->rope_backward(gpu, d_dqkv, d_cs, d_sn, N, c.S, c.nq, c.ng, c.hd));
            float *got_f = ct_down_act(&P, d_qkv, n), *got_b = ct_down_act(&P, d_dqkv, n);
            CT_EXPECT_CLOSE(got_f, ref_f, n, CT_TOL_BF16,
                            "rope_forward B=%d S=%d nq=%d ng=%d hd=%d", c.B, c.S, c.nq, c.ng, c.hd);
            CT_EXPECT_CLOSE(got_b, ref_b, n, CT_TOL_BF16,
                            "rope_backward B=%d S=%d nq=%d ng=%d hd=%d", c.B, c.S, c.nq, c.ng,
                            c.hd);
            int bf = value_heads_changed(got_f, qkv, N, c.nq, c.ng, c.hd);
            int bb = value_heads_changed(got_b, dqkv, N, c.nq, c.ng, c.hd);
            MG_EXPECT(bf == 0 && bb == 0, "rope changed %d (forward) and %d (backward) value heads",
                      bf, bb);
        }
        ct_pool_free(&P);
    }
}
