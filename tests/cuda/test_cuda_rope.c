/* CUDA backend against the CPU backend: rotary position embedding on the fused qkv buffer,
 * forward and backward, in place (method and tolerances: cuda_test_util.h), whole heads and
 * partial (--rotary-percent: the first rd channels), positions i % S and per-token positions.
 * The value heads and the channels past rd must come out bit for bit untouched. */
#include "cuda_test_util.h"

#include <math.h>

typedef struct {
    int B, S, nq, ng, hd, rd;
    bool pos; /* per-token positions (else i % S) */
} rope_case;

static const rope_case k_cases[] = {
    {2, 7, 4, 2, 64, 64, false},     /* grouped queries */
    {1, 257, 8, 8, 128, 128, false}, /* multi-head, Llama's head size */
    {3, 1, 4, 1, 64, 64, false},     /* one position, one kv group */
    {2, 129, 12, 4, 96, 96, false},
    {2, 33, 4, 2, 64, 32, false}, /* --rotary-percent 0.5, vector path (rd/2 % 8 == 0) */
    {2, 17, 4, 2, 128, 64, true}, /* partial with positions, vector path */
    {1, 72, 8, 4, 72, 16, true},  /* hd 72: rd/2 = 8, hd % 8 == 0 */
    {1, 9, 2, 1, 12, 6, true},    /* odd rd/2: one pair per item */
    {2, 31, 8, 4, 80, 40, false}, /* rd/2 = 20: one pair per item */
    {2, 16, 4, 4, 64, 64, true},  /* whole heads, positions */
};

/* cos/sin (S, rd/2) of the frequencies 10000^(-2i/rd). */
static void rope_tables(float *c, float *s, int S, int rd) {
    for (int p = 0; p < S; p++)
        for (int i = 0; i < rd / 2; i++) {
            double th = p * pow(10000.0, -2.0 * i / rd);
            c[(size_t)p * (rd / 2) + i] = (float)cos(th);
            s[(size_t)p * (rd / 2) + i] = (float)sin(th);
        }
}

/* Count of entries of `got` whose bits differ from `want` among those rope must not touch: the
 * value heads, and the channels [rd, hd) of the query and key heads. */
static int untouched_changed(const float *got, const float *want, int N, int nq, int ng, int hd,
                             int rd) {
    int r = nq / ng, bad = 0;
    size_t C = (size_t)ng * (r + 2) * hd;
    for (int i = 0; i < N; i++)
        for (int g = 0; g < ng; g++)
            for (int h = 0; h < r + 2; h++) {
                size_t off = (size_t)i * C + ((size_t)g * (r + 2) + h) * hd;
                int from = h == r + 1 ? 0 : rd;
                bad += memcmp(got + off + from, want + off + from, (size_t)(hd - from) * 4) != 0;
            }
    return bad;
}

MG_TEST(cuda_rope_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        rope_case c = k_cases[k];
        int N = c.B * c.S, r = c.nq / c.ng;
        size_t n = (size_t)N * c.ng * (r + 2) * c.hd, nt = (size_t)c.S * (c.rd / 2);
        ct_pool P = ct_pool_of(t, gpu);
        float *qkv = ct_rand_act(&P, 50, n, 1.0f), *dqkv = ct_rand_act(&P, 51, n, 1.0f);
        float *cs = ct_host(&P, nt * 4), *sn = ct_host(&P, nt * 4);
        int32_t *pos = c.pos ? ct_tokens(&P, 52, (size_t)N, c.S) : NULL; /* in [0, S) */
        rope_tables(cs, sn, c.S, c.rd);
        float *ref_f = ct_dup(&P, qkv, n), *ref_b = ct_dup(&P, dqkv, n);
        MG_EXPECT_OK(cpu->rope_forward(cpu, ref_f, cs, sn, pos, N, c.S, c.nq, c.ng, c.hd, c.rd));
        MG_EXPECT_OK(cpu->rope_backward(cpu, ref_b, cs, sn, pos, N, c.S, c.nq, c.ng, c.hd, c.rd));
        void *d_qkv = ct_up_act(&P, qkv, n), *d_dqkv = ct_up_act(&P, dqkv, n);
        float *d_cs = ct_up_f32(&P, cs, nt), *d_sn = ct_up_f32(&P, sn, nt);
        int32_t *d_pos = pos ? ct_up_i32(&P, pos, (size_t)N) : NULL;
        if (!P.failed) {
            MG_EXPECT_OK(
                gpu->rope_forward(gpu, d_qkv, d_cs, d_sn, d_pos, N, c.S, c.nq, c.ng, c.hd, c.rd));
            MG_EXPECT_OK(
                gpu->rope_backward(gpu, d_dqkv, d_cs, d_sn, d_pos, N, c.S, c.nq, c.ng, c.hd, c.rd));
            float *got_f = ct_down_act(&P, d_qkv, n), *got_b = ct_down_act(&P, d_dqkv, n);
            CT_EXPECT_CLOSE(got_f, ref_f, n, CT_TOL_ACT,
                            "rope_forward B=%d S=%d nq=%d ng=%d hd=%d rd=%d pos=%d", c.B, c.S, c.nq,
                            c.ng, c.hd, c.rd, c.pos);
            CT_EXPECT_CLOSE(got_b, ref_b, n, CT_TOL_ACT,
                            "rope_backward B=%d S=%d nq=%d ng=%d hd=%d rd=%d pos=%d", c.B, c.S,
                            c.nq, c.ng, c.hd, c.rd, c.pos);
            int bf = untouched_changed(got_f, qkv, N, c.nq, c.ng, c.hd, c.rd);
            int bb = untouched_changed(got_b, dqkv, N, c.nq, c.ng, c.hd, c.rd);
            MG_EXPECT(bf == 0 && bb == 0,
                      "rope changed %d (forward) and %d (backward) heads outside its channels", bf,
                      bb);
        }
        ct_pool_free(&P);
    }
}
