/* CUDA backend against the CPU backend: the mixture-of-experts ops (method and tolerances:
 * cuda_test_util.h). Integer outputs (idx, pos, counts, aux_counts) must be EQUAL; they are
 * poisoned with 0x7f7f7f7f first (0xFF would read as -1, a legal "dropped" value).
 *  - router products: logits fp32 and dw fp32 (accumulated) at CT_TOL_F32, dx in the compute
 *    dtype (accumulated) at CT_TOL_ACT (one output rounding);
 *  - routing: the SAME fp32 logits on both sides (routing takes fp32, so no rounding can
 *    reorder experts; random logits make ties measure zero). Routing weights are a few fp32
 *    operations from the logits (expf, a softmax over k or E): CT_TOL_F32_ELEM; the loss
 *    statistics and dlogits are double sums in another order rounded to fp32: CT_TOL_F32;
 *  - token movement: copies are exact (tolerance 0); weighted sums and products are fp32 with
 *    one output rounding: CT_TOL_ACT; dprobs is a dot product over H: CT_TOL_F32;
 *  - activations: CT_TOL_ACT, as test_cuda_activation.c.
 * The cases cover softmax top-2, pre-softmax, sigmoid with expert bias and groups, scaling,
 * capacity by weight and by position (with drops), the padded permute, seq-aux and z-loss
 * statistics, skewed routing (one hot expert, experts that receive nothing), E > 32 (several
 * experts per lane) and token counts that are not a multiple of the kernels' blocks; and a
 * layer's ops run twice repeat every output bitwise. */
#include "cuda_test_util.h"

#include "core/slab_rounds.h"

#include "core/rng.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define POISON_I32 0x7f7f7f7f

static int32_t *poison_i32(ct_pool *P, size_t n) {
    int32_t *h = ct_host(P, (n ? n : 1) * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) h[i] = POISON_I32;
    return ct_up_i32(P, h, n ? n : 1);
}

static void expect_equal_i32(mg_test_ctx *t, int line, const int32_t *got, const int32_t *ref,
                             size_t n, const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i] && bad++ == 0) first = i;
    if (ct_verbose()) printf("  %-60s %zu of %zu differ\n", what, bad, n);
    if (bad)
        mg_test_fail(t, __FILE__, line, "%s: %zu of %zu differ (first [%zu]: got %d, want %d)",
                     what, bad, n, first, got[first], ref[first]);
}
#define EXPECT_EQ_I32(got, ref, n, what) expect_equal_i32(t, __LINE__, (got), (ref), (n), (what))

/* ---------------------------------------------------------------- router products */

MG_TEST(cuda_moe_router_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    /* E <= 32 and H % 8 == 0: the row kernels (E <= 8: the tensor-core ones); the others: the
     * tiled product. 2048 tokens at the benchmark's H 1024 and E 8: dw's token ranges (64 tokens
     * each) number 32, over the 8 that one pass of its reduction takes, as at 8192. */
    static const int cases[][3] = {{2048, 1024, 8}, {37, 72, 6},    {1000, 520, 20},
                                   {50, 36, 8},     {300, 256, 64}, {129, 40, 256}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int T = cases[c][0], H = cases[c][1], E = cases[c][2];
        size_t nx = (size_t)T * H, nw = (size_t)E * H, nl = (size_t)T * E;
        ct_pool P = ct_pool_of(t, gpu);
        float *x = ct_rand_act(&P, 300, nx, 1.0f), *w = ct_rand_act(&P, 301, nw, 0.05f);
        float *dl = ct_uniform_f32(&P, 302, nl, -1.0f, 1.0f);
        float *dx0 = ct_rand_act(&P, 303, nx, 0.5f), *dw0 = ct_uniform_f32(&P, 304, nw, -1, 1);
        float *ref_l = ct_host(&P, nl * 4), *ref_dx = ct_dup(&P, dx0, nx);
        float *ref_dw = ct_dup(&P, dw0, nw);
        MG_EXPECT_OK(cpu->router_forward(cpu, ref_l, x, w, T, H, E));
        MG_EXPECT_OK(cpu->router_backward(cpu, ref_dx, ref_dw, dl, x, w, T, H, E));
        void *d_x = ct_up_act(&P, x, nx), *d_w = ct_up_act(&P, w, nw);
        void *d_dx = ct_up_act(&P, dx0, nx);
        float *d_l = ct_poison(&P, nl * 4), *d_dl = ct_up_f32(&P, dl, nl);
        float *d_dw = ct_up_f32(&P, dw0, nw);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->router_forward(gpu, d_l, d_x, d_w, T, H, E));
            MG_EXPECT_OK(gpu->router_backward(gpu, d_dx, d_dw, d_dl, d_x, d_w, T, H, E));
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_l, nl), ref_l, nl, CT_TOL_F32,
                            "router_forward logits T=%d H=%d E=%d", T, H, E);
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, nx), ref_dx, nx, CT_TOL_ACT,
                            "router_backward dx (accumulated) T=%d H=%d E=%d", T, H, E);
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_dw, nw), ref_dw, nw, CT_TOL_F32,
                            "router_backward dw (accumulated) T=%d H=%d E=%d", T, H, E);
        }
        ct_pool_free(&P);
    }
}

/* ---------------------------------------------------------------- routing */

/* Uniform logits in [-2, 2); skew > 0 adds skew to expert 1 (most tokens pick it) and takes 3 x
 * skew from the last two experts (they receive nothing). */
static float *route_logits(ct_pool *P, uint32_t id, int T, int E, float skew) {
    float *l = ct_uniform_f32(P, id, (size_t)T * E, -2.0f, 2.0f);
    if (skew > 0)
        for (int t = 0; t < T; t++) {
            l[(size_t)t * E + 1] += skew;
            l[(size_t)t * E + E - 1] -= 3 * skew;
            l[(size_t)t * E + E - 2] -= 3 * skew;
        }
    return l;
}

static void check_route(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, const char *name,
                        mg_moe_routing r, float skew) {
    int T = r.T, E = r.E, k = r.k, n = T * k;
    int ng = r.balancing == MG_MOE_LB_SEQ_AUX ? T / r.S : 1;
    bool aux = r.balancing != MG_MOE_LB_NONE && r.aux_coeff > 0;
    size_t nl = (size_t)T * E, nc = (size_t)ng * E;
    ct_pool P = ct_pool_of(t, gpu);
    float *logits = route_logits(&P, 310, T, E, skew);
    float *bias = ct_uniform_f32(&P, 311, (size_t)E, -0.3f, 0.3f);
    float *dprobs = ct_uniform_f32(&P, 312, (size_t)n, -1.0f, 1.0f);
    const float stats0[2] = {0.25f, -0.5f};
    int32_t *idx = ct_host(&P, (size_t)n * 4), *counts = ct_host(&P, nc * 4);
    float *probs = ct_host(&P, (size_t)n * 4), *stats = ct_dup(&P, stats0, 2);
    float *dl = ct_host(&P, nl * 4);
    memset(counts, 0, nc * 4);
    MG_EXPECT_OK(cpu->moe_route(cpu, &r, idx, probs, counts, stats, logits, bias));
    MG_EXPECT_OK(cpu->moe_route_backward(cpu, &r, dl, dprobs, logits, idx, probs, counts, bias));
    int dropped = 0, used = 0, *seen = ct_host(&P, (size_t)E * sizeof(int));
    memset(seen, 0, (size_t)E * sizeof(int));
    for (int p = 0; p < n; p++) {
        dropped += idx[p] < 0;
        if (idx[p] >= 0) used += seen[idx[p]]++ == 0;
    }
    MG_EXPECT(r.capacity == 0 || dropped > 0, "%s: the capacity drops nothing", name);
    MG_EXPECT(skew == 0 || used < E, "%s: every expert receives tokens", name);
    float *d_logits = ct_up_f32(&P, logits, nl), *d_bias = ct_up_f32(&P, bias, (size_t)E);
    float *d_dprobs = ct_up_f32(&P, dprobs, (size_t)n), *d_stats = ct_up_f32(&P, stats0, 2);
    int32_t *d_idx = poison_i32(&P, (size_t)n), *d_counts = poison_i32(&P, nc);
    float *d_probs = ct_poison(&P, (size_t)n * 4), *d_dl = ct_poison(&P, nl * 4);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->moe_route(gpu, &r, d_idx, d_probs, d_counts, d_stats, d_logits,
                                    r.bias ? d_bias : NULL));
        MG_EXPECT_OK(gpu->moe_route_backward(gpu, &r, d_dl, d_dprobs, d_logits, d_idx, d_probs,
                                             d_counts, r.bias ? d_bias : NULL));
        char what[160];
        snprintf(what, sizeof what, "moe_route idx (%s, %d dropped)", name, dropped);
        EXPECT_EQ_I32(ct_down_raw(&P, d_idx, (size_t)n * 4), idx, (size_t)n, what);
        CT_EXPECT_CLOSE(ct_down_f32(&P, d_probs, (size_t)n), probs, (size_t)n, CT_TOL_F32_ELEM,
                        "moe_route probs (%s)", name);
        if (aux) {
            snprintf(what, sizeof what, "moe_route aux_counts (%s)", name);
            EXPECT_EQ_I32(ct_down_raw(&P, d_counts, nc * 4), counts, nc, what);
        }
        float *got = ct_down_f32(&P, d_stats, 2);
        CT_EXPECT_CLOSE(got, stats, 1, CT_TOL_F32, "moe_route stats[0] aux (%s)", name);
        CT_EXPECT_CLOSE(got + 1, stats + 1, 1, CT_TOL_F32, "moe_route stats[1] z (%s)", name);
        CT_EXPECT_CLOSE(ct_down_f32(&P, d_dl, nl), dl, nl, CT_TOL_F32,
                        "moe_route_backward dlogits (%s)", name);
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_moe_route_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const mg_moe_routing base = {.T = 512,
                                 .S = 128,
                                 .E = 8,
                                 .k = 2,
                                 .scaling = 1.0f,
                                 .balancing = MG_MOE_LB_NONE,
                                 .loss_weight = 0.7f,
                                 .stat_weight = 0.5f};
    mg_moe_routing r = base;
    check_route(t, cpu, gpu, "softmax top-2", r, 0);
    r.balancing = MG_MOE_LB_AUX, r.aux_coeff = 0.01f, r.z_coeff = 0.001f;
    check_route(t, cpu, gpu, "softmax top-2, aux, z", r, 0);
    r = base; /* 390 tokens: not a multiple of the blocks' 4 tokens or of 32 */
    r.T = 390, r.S = 130, r.E = 16, r.k = 3, r.pre_softmax = true, r.scaling = 2.5f;
    r.capacity = (int)ceil(390.0 * 3 / 16 * 0.8);
    r.balancing = MG_MOE_LB_SEQ_AUX, r.aux_coeff = 0.1f;
    check_route(t, cpu, gpu, "pre-softmax, scaling, capacity by probs, seq aux", r, 0);
    r.drop = MG_MOE_DROP_POSITION, r.z_coeff = 0.01f;
    check_route(t, cpu, gpu, "pre-softmax, capacity by position, seq aux, z", r, 0);
    r = base;
    r.E = 32, r.k = 4, r.score = MG_MOE_SCORE_SIGMOID, r.bias = true, r.groups = 8, r.group_k = 4;
    r.balancing = MG_MOE_LB_AUX, r.aux_coeff = 0.1f, r.z_coeff = 0.01f;
    check_route(t, cpu, gpu, "sigmoid, expert bias, groups, aux, z", r, 0);
    r.k = 1, r.groups = 0, r.group_k = 0, r.T = 257, r.S = 257, r.scaling = 1.5f;
    check_route(t, cpu, gpu, "sigmoid top-1, scaling", r, 0);
    r = base; /* skewed: expert 1 hot, the last two empty; E > 32: two experts per lane */
    r.T = 300, r.S = 100, r.E = 64, r.k = 2, r.capacity = (int)ceil(300.0 * 2 / 64 * 2.0);
    r.balancing = MG_MOE_LB_SEQ_AUX, r.aux_coeff = 0.01f, r.z_coeff = 0.001f;
    check_route(t, cpu, gpu, "skewed softmax, capacity by probs", r, 4.0f);
    r.drop = MG_MOE_DROP_POSITION, r.pre_softmax = true;
    check_route(t, cpu, gpu, "skewed pre-softmax, capacity by position", r, 4.0f);
    r = base; /* DeepSeek-V3-like: 256 experts, top-8 of 4 of 8 groups, sigmoid and bias */
    r.T = 1000, r.S = 250, r.E = 256, r.k = 8, r.score = MG_MOE_SCORE_SIGMOID, r.bias = true;
    r.groups = 8, r.group_k = 4, r.scaling = 2.5f, r.capacity = (int)ceil(1000.0 * 8 / 256);
    r.balancing = MG_MOE_LB_SEQ_AUX, r.aux_coeff = 0.001f;
    check_route(t, cpu, gpu, "256 experts, groups, sigmoid, bias, capacity", r, 0);
    r = base; /* the benchmark shape */
    r.T = 8192, r.S = 2048, r.capacity = (int)ceil(8192.0 * 2 / 8 * 1.0);
    r.balancing = MG_MOE_LB_AUX, r.aux_coeff = 0.01f, r.z_coeff = 0.001f;
    check_route(t, cpu, gpu, "8192 tokens, 8 experts, capacity 1.0", r, 0);
}

/* ---------------------------------------------------------------- token movement */

/* k distinct experts per token; skew: expert 1 first for 3 of 4 tokens and the last two experts
 * never; drop_pct: that share of pairs dropped (-1 - e). */
static int32_t *make_idx(ct_pool *P, uint32_t id, int T, int k, int E, bool skew, int drop_pct) {
    int32_t *idx = ct_host(P, (size_t)T * k * 4);
    int avail = skew ? E - 2 : E;
    uint64_t c = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = (int)(mg_rng_uniform(CT_SEED, id, c++) * avail);
                if (e >= avail) e = avail - 1;
                if (skew && j == 0 && t % 4 != 0) e = 1;
                dup = false;
                for (int i = 0; i < j; i++) dup |= idx[(size_t)t * k + i] == e;
            } while (dup);
            idx[(size_t)t * k + j] = e;
        }
    for (int p = 0; p < T * k; p++)
        if (mg_rng_uniform(CT_SEED, id + 1, (uint64_t)p) * 100 < drop_pct) idx[p] = -1 - idx[p];
    return idx;
}

typedef struct {
    int T, k, E, H, padded, skew, drop_pct;
} move_case;

static void check_movement(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, move_case c) {
    int T = c.T, k = c.k, E = c.E, H = c.H, n = T * k, pad = 0;
    ct_pool P = ct_pool_of(t, gpu);
    int32_t *idx = make_idx(&P, 320, T, k, E, c.skew, c.drop_pct);
    if (c.padded) { /* exactly the fullest expert's pairs: it fills its rows, the rest pad */
        int32_t *kc = ct_host(&P, (size_t)E * 4);
        memset(kc, 0, (size_t)E * 4);
        for (int p = 0; p < n; p++)
            if (idx[p] >= 0 && ++kc[idx[p]] > pad) pad = kc[idx[p]];
    }
    int R = pad > 0 ? E * pad : n;
    size_t nx = (size_t)T * H, nr = (size_t)R * H;
    float *x = ct_rand_act(&P, 321, nx, 1.0f), *load0 = ct_uniform_f32(&P, 322, E, 0, 5);
    float *dxp = ct_rand_act(&P, 323, nr, 1.0f), *dx0 = ct_rand_act(&P, 324, nx, 1.0f);
    float *y = ct_rand_act(&P, 325, nr, 1.0f), *base = ct_rand_act(&P, 326, nx, 1.0f);
    float *probs = ct_uniform_f32(&P, 327, (size_t)n, 0.0f, 1.0f);
    float *dout = ct_rand_act(&P, 328, nx, 1.0f);
    float *xp = ct_host(&P, nr * 4), *load = ct_dup(&P, load0, E), *dx = ct_dup(&P, dx0, nx);
    float *out = ct_host(&P, nx * 4), *dy = ct_host(&P, nr * 4), *dprobs = ct_host(&P, n * 4);
    int32_t *pos = ct_host(&P, (size_t)n * 4), *counts = ct_host(&P, (size_t)E * 4);
    MG_EXPECT_OK(cpu->moe_permute(cpu, xp, pos, counts, load, x, idx, T, k, E, H, pad));
    MG_EXPECT_OK(cpu->moe_permute_backward(cpu, dx, dxp, pos, T, k, H));
    MG_EXPECT_OK(cpu->moe_unpermute(cpu, out, base, y, pos, probs, T, k, H));
    MG_EXPECT_OK(cpu->moe_unpermute_backward(cpu, dy, dprobs, dout, y, pos, probs, T, k, H, R));
    void *d_x = ct_up_act(&P, x, nx), *d_xp = ct_poison_act(&P, nr);
    int32_t *d_idx = ct_up_i32(&P, idx, (size_t)n), *d_pos = poison_i32(&P, (size_t)n);
    int32_t *d_counts = poison_i32(&P, (size_t)E);
    float *d_load = ct_up_f32(&P, load0, E), *d_probs = ct_up_f32(&P, probs, (size_t)n);
    void *d_dxp = ct_up_act(&P, dxp, nr), *d_dx = ct_up_act(&P, dx0, nx);
    void *d_y = ct_up_act(&P, y, nr), *d_base = ct_up_act(&P, base, nx);
    void *d_out = ct_poison_act(&P, nx), *d_inplace = ct_up_act(&P, base, nx);
    void *d_dout = ct_up_act(&P, dout, nx), *d_dy = ct_poison_act(&P, nr);
    float *d_dprobs = ct_poison(&P, (size_t)n * 4);
    if (!P.failed) {
        char what[160];
        MG_EXPECT_OK(
            gpu->moe_permute(gpu, d_xp, d_pos, d_counts, d_load, d_x, d_idx, T, k, E, H, pad));
        MG_EXPECT_OK(gpu->moe_permute_backward(gpu, d_dx, d_dxp, d_pos, T, k, H));
        MG_EXPECT_OK(gpu->moe_unpermute(gpu, d_out, d_base, d_y, d_pos, d_probs, T, k, H));
        MG_EXPECT_OK(gpu->moe_unpermute(gpu, d_inplace, d_inplace, d_y, d_pos, d_probs, T, k, H));
        MG_EXPECT_OK(gpu->moe_unpermute_backward(gpu, d_dy, d_dprobs, d_dout, d_y, d_pos, d_probs,
                                                 T, k, H, R));
        snprintf(what, sizeof what, "moe_permute pos T=%d k=%d E=%d pad=%d", T, k, E, pad);
        EXPECT_EQ_I32(ct_down_raw(&P, d_pos, (size_t)n * 4), pos, (size_t)n, what);
        snprintf(what, sizeof what, "moe_permute counts T=%d k=%d E=%d pad=%d", T, k, E, pad);
        EXPECT_EQ_I32(ct_down_raw(&P, d_counts, (size_t)E * 4), counts, (size_t)E, what);
        CT_EXPECT_CLOSE(ct_down_act(&P, d_xp, nr), xp, nr, 0.0,
                        "moe_permute rows T=%d k=%d E=%d H=%d pad=%d", T, k, E, H, pad);
        CT_EXPECT_CLOSE(ct_down_f32(&P, d_load, E), load, E, 0.0, "moe_permute load E=%d", E);
        CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, nx), dx, nx, CT_TOL_ACT,
                        "moe_permute_backward dx (accumulated) T=%d k=%d H=%d", T, k, H);
        CT_EXPECT_CLOSE(ct_down_act(&P, d_out, nx), out, nx, CT_TOL_ACT,
                        "moe_unpermute T=%d k=%d H=%d", T, k, H);
        CT_EXPECT_CLOSE(ct_down_act(&P, d_inplace, nx), out, nx, CT_TOL_ACT,
                        "moe_unpermute in place T=%d k=%d H=%d", T, k, H);
        CT_EXPECT_CLOSE(ct_down_act(&P, d_dy, nr), dy, nr, CT_TOL_ACT,
                        "moe_unpermute_backward dy T=%d k=%d H=%d R=%d", T, k, H, R);
        CT_EXPECT_CLOSE(ct_down_f32(&P, d_dprobs, (size_t)n), dprobs, (size_t)n, CT_TOL_F32,
                        "moe_unpermute_backward dprobs T=%d k=%d H=%d", T, k, H);
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_moe_permute_unpermute_match_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const move_case cases[] = {
        {37, 2, 8, 36, 0, 0, 0},      /* H not a multiple of 8: the element path */
        {1000, 2, 16, 128, 0, 1, 10}, /* skewed, drops */
        {1000, 2, 16, 128, 1, 1, 10}, /* padded */
        {300, 4, 64, 40, 1, 0, 5},
        {2048, 8, 256, 64, 0, 1, 5},
        {513, 1, 4, 72, 0, 0, 0},
        /* the benchmark's rows (H 1024, top-2 of 8: four 16-byte vectors per lane), fewer tokens
         * than its 8192: no grid here is capped by the device's size at either count */
        {1024, 2, 8, 1024, 0, 0, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_movement(t, cpu, gpu, cases[i]);
}

/* ---------------------------------------------------------------- activations, bias update */

MG_TEST(cuda_moe_grouped_activations_match_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { G = 6, R = 64 }; /* R: the worst case the buffers are sized for */
    static const int32_t counts[G] = {5, 0, 17, 3, 0, 9}; /* 34 rows */
    static const int widths[] = {64, 36};
    int rows = 34;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        int F = widths[w];
        size_t n1 = (size_t)R * F, n2 = 2 * n1, m1 = (size_t)rows * F, m2 = 2 * m1;
        ct_pool P = ct_pool_of(t, gpu);
        float *pre = ct_rand_act(&P, 330, n2, 2.0f), *dout = ct_rand_act(&P, 331, n1, 1.0f);
        float *gelu = ct_host(&P, m1 * 4), *sw = ct_host(&P, m1 * 4), *dpre = ct_host(&P, m2 * 4);
        MG_EXPECT_OK(cpu->grouped_activation_forward(cpu, gelu, pre, counts, G, F, false));
        MG_EXPECT_OK(cpu->grouped_activation_forward(cpu, sw, pre, counts, G, F, true));
        MG_EXPECT_OK(cpu->grouped_swiglu_backward(cpu, dpre, pre, dout, counts, G, F));
        int32_t *d_counts = ct_up_i32(&P, counts, G);
        void *d_pre = ct_up_act(&P, pre, n2), *d_dout = ct_up_act(&P, dout, n1);
        void *d_gelu = ct_poison_act(&P, n1), *d_sw = ct_poison_act(&P, n1);
        void *d_dpre = ct_poison_act(&P, n2);
        if (!P.failed) {
            MG_EXPECT_OK(
                gpu->grouped_activation_forward(gpu, d_gelu, d_pre, d_counts, G, F, false));
            MG_EXPECT_OK(gpu->grouped_activation_forward(gpu, d_sw, d_pre, d_counts, G, F, true));
            MG_EXPECT_OK(gpu->grouped_swiglu_backward(gpu, d_dpre, d_pre, d_dout, d_counts, G, F));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_gelu, m1), gelu, m1, CT_TOL_ACT,
                            "grouped gelu rows=%d F=%d", rows, F);
            CT_EXPECT_CLOSE(ct_down_act(&P, d_sw, m1), sw, m1, CT_TOL_ACT,
                            "grouped swiglu rows=%d F=%d", rows, F);
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dpre, m2), dpre, m2, CT_TOL_ACT,
                            "grouped swiglu backward rows=%d F=%d", rows, F);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_moe_expert_bias_update_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (int c = 0; c < 2; c++) {
        int E = c == 0 ? 5 : 300; /* 5: load {1..5}, one expert exactly at the mean (sign 0) */
        ct_pool P = ct_pool_of(t, gpu);
        float *load = ct_host(&P, (size_t)E * 4), *bias0 = ct_uniform_f32(&P, 340, E, -1, 1);
        for (int e = 0; e < E; e++)
            load[e] = c == 0 ? (float)(e + 1) : floorf(mg_rng_uniform(CT_SEED, 341, e) * 100);
        float *ref = ct_dup(&P, bias0, E);
        MG_EXPECT_OK(cpu->moe_expert_bias_update(cpu, ref, load, E, 1e-3f));
        float *d_bias = ct_up_f32(&P, bias0, E), *d_load = ct_up_f32(&P, load, E);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->moe_expert_bias_update(gpu, d_bias, d_load, E, 1e-3f));
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_bias, E), ref, E, 0.0, "expert bias update E=%d", E);
        }
        ct_pool_free(&P);
    }
}

/* ECHO's plan on one device thread (core/echo_plan.h's code) equals the CPU backend's bit for bit
 * (the float32 proportional split included), whole buffer but the scratch: uniform, hot and
 * zero counts, one-shot greedy with and without reclaim, approximate bin packing. */
MG_TEST(cuda_moe_echo_plan_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const struct {
        int ep, experts, spares;
        mg_echo_method method;
        double threshold;
    } cases[] = {{2, 8, 2, MG_ECHO_ONE_SHOT_GREEDY, 0},
                 {4, 16, 8, MG_ECHO_ONE_SHOT_GREEDY, 0.1},
                 {8, 64, 8, MG_ECHO_APPROX_BIN_PACKING, 0},
                 {8, 64, 32, MG_ECHO_ONE_SHOT_GREEDY, 0},
                 {4, 4, 4, MG_ECHO_APPROX_BIN_PACKING, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const mg_echo_params p = {cases[c].ep, cases[c].experts, cases[c].spares, cases[c].method,
                                  cases[c].threshold};
        MG_EXPECT_OK(mg_echo_params_check(&p));
        const size_t nc = (size_t)p.ep * p.experts, n = mg_echo_plan_ints(&p);
        const size_t head = n - mg_echo_plan_scratch_ints(&p);
        ct_pool P = ct_pool_of(t, gpu);
        int32_t *counts = ct_host(&P, nc * 4), *want = ct_host(&P, n * 4),
                *got = ct_host(&P, n * 4);
        for (size_t i = 0; !P.failed && i < nc; i++) { /* expert 1 hot, rank 0's row empty */
            float u = mg_rng_uniform(CT_SEED, 350 + (uint32_t)c, i);
            counts[i] =
                i < (size_t)p.experts ? 0 : (int32_t)(u * 3000) * (i % p.experts == 1 ? 8 : 1);
        }
        int32_t *d_counts = ct_up_i32(&P, counts, nc), *d_plan = ct_poison(&P, n * 4);
        if (!P.failed) {
            MG_EXPECT_OK(cpu->moe_echo_plan(cpu, want, NULL, counts, &p));
            MG_EXPECT_OK(gpu->moe_echo_plan(gpu, d_plan, NULL, d_counts, &p));
            MG_EXPECT_OK(gpu->copy_d2h(gpu, got, d_plan, n * 4));
            MG_EXPECT(!memcmp(got, want, head * 4),
                      "echo plan (ep %d, E %d, S %d, method %d): the device's differs from the "
                      "cpu's",
                      p.ep, p.experts, p.spares, (int)p.method);
        }
        ct_pool_free(&P);
    }
}

/* ECHO's reroute, one device thread per pair, equals the CPU backend's: rank 1 of EP 4 routes
 * 2000 tokens top-2 over 16 experts, experts 0 and 5 hot, every other rank's counts seeded; the
 * plan from the CPU backend; pos and counts as moe_permute makes them (token order within an
 * expert); a dropped pair stays dropped. */
MG_TEST(cuda_moe_echo_reroute_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { EP = 4, E = 16, S = 8, T = 2000, K = 2, RANK = 1 };
    const mg_echo_params p = {EP, E, S, MG_ECHO_ONE_SHOT_GREEDY, 0};
    const size_t n = mg_echo_plan_ints(&p);
    ct_pool P = ct_pool_of(t, gpu);
    int32_t *counts = ct_host(&P, EP * E * 4), *plan = ct_host(&P, n * 4);
    int32_t *ids = ct_host(&P, T * K * 4), *pos = ct_host(&P, T * K * 4);
    int32_t *want = ct_host(&P, T * K * 4), *got = ct_host(&P, T * K * 4);
    if (P.failed) goto done;
    for (int i = 0; i < EP * E; i++)
        counts[i] = (int32_t)(mg_rng_uniform(CT_SEED, 360, (uint64_t)i) * 400);
    for (int e = 0; e < E; e++) counts[RANK * E + e] = 0;
    for (int tok = 0; tok < T; tok++) { /* two distinct experts, 0 and 5 often */
        float u = mg_rng_uniform(CT_SEED, 361, (uint64_t)tok);
        int a = u < 0.4f ? 0 : u < 0.6f ? 5 : (int)(u * 1000) % E;
        int b = (a + 1 + (int)(mg_rng_uniform(CT_SEED, 362, (uint64_t)tok) * (E - 1))) % E;
        ids[tok * K] = a, ids[tok * K + 1] = b;
    }
    ids[7] = -1; /* a dropped pair */
    int32_t first[E];
    for (int i = 0; i < T * K; i++)
        if (ids[i] >= 0) counts[RANK * E + ids[i]]++;
    for (int e = 0, row = 0; e < E; row += counts[RANK * E + e++]) first[e] = row;
    for (int i = 0; i < T * K; i++) pos[i] = ids[i] < 0 ? -1 : first[ids[i]]++;
    MG_EXPECT_OK(cpu->moe_echo_plan(cpu, plan, NULL, counts, &p));
    MG_EXPECT_OK(
        cpu->moe_echo_reroute(cpu, want, ids, pos, counts + RANK * E, plan, &p, RANK, T * K));
    int32_t *d_plan = ct_up_i32(&P, plan, n), *d_ids = ct_up_i32(&P, ids, T * K);
    int32_t *d_pos = ct_up_i32(&P, pos, T * K), *d_counts = ct_up_i32(&P, counts + RANK * E, E);
    int32_t *d_out = ct_poison(&P, T * K * 4);
    if (P.failed) goto done;
    MG_EXPECT_OK(
        gpu->moe_echo_reroute(gpu, d_out, d_ids, d_pos, d_counts, d_plan, &p, RANK, T * K));
    MG_EXPECT_OK(gpu->copy_d2h(gpu, got, d_out, T * K * 4));
    int moved = 0;
    for (int i = 0; i < T * K; i++) moved += want[i] >= 0 && want[i] % (E / EP + S / EP) >= E / EP;
    MG_EXPECT(moved > 0 && !memcmp(got, want, T * K * 4) && want[7] == -1,
              "echo reroute: the device's differs from the cpu's (%d pairs moved on the cpu)",
              moved);
done:
    ct_pool_free(&P);
}

/* ECHO's expert copies, every mode, equal the CPU backend's on the same tables: EP 4, 8 experts,
 * 4 spare slots (one per rank), expert 0 hot (its rank sends its weights to the slots that clone
 * it), ranks 0 (a home) and 2 (a clone's rank); experts of 4 segments of odd sizes; the slab
 * and every weight and gradient after each mode. Copies and fp32 sums: exact. */
MG_TEST(cuda_moe_echo_move_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { EP = 4, E = 8, S = 4, EL = E / EP + S / EP, NSEG = 4 };
    const mg_echo_params p = {EP, E, S, MG_ECHO_ONE_SHOT_GREEDY, 0};
    const size_t seg[NSEG] = {37, 5, 29, 3}, width = 37 + 5 + 29 + 3, rows = EP * (S / EP);
    const size_t n = mg_echo_plan_ints(&p);
    ct_pool P = ct_pool_of(t, gpu);
    int32_t *counts = ct_host(&P, EP * E * 4), *plan = ct_host(&P, n * 4);
    if (P.failed) goto done;
    for (int i = 0; i < EP * E; i++)
        counts[i] = (i % E == 0 ? 900 : 40) + (int32_t)(mg_rng_uniform(CT_SEED, 370, i) * 30);
    MG_EXPECT_OK(cpu->moe_echo_plan(cpu, plan, NULL, counts, &p));
    int32_t *d_plan = ct_up_i32(&P, plan, n);
    for (int rank = 0; rank < EP && !P.failed; rank += 2)
        for (int mode = MG_ECHO_SEND_WEIGHTS; mode <= MG_ECHO_ADD_GRADS && !P.failed; mode++) {
            ct_pool Q = ct_pool_of(t, gpu); /* per case: the pool holds 64 buffers */
            const bool grads = mode >= MG_ECHO_SEND_GRADS;
            void *h_tab[8 * EL], *d_tab[8 * EL];
            float *h_buf[8 * EL];
            for (int q = 0; q < 8 * EL; q++) { /* weights (act dtype) then gradients (fp32) */
                size_t m = seg[(q / EL) % NSEG];
                h_buf[q] = ct_rand_act(&Q, 380 + (uint32_t)q, m, 1.0f);
                h_tab[q] = h_buf[q];
                d_tab[q] =
                    q < 4 * EL ? ct_up_act(&Q, h_buf[q], m) : (void *)ct_up_f32(&Q, h_buf[q], m);
            }
            float *slab = ct_rand_act(&Q, 390 + (uint32_t)mode, rows * width, 1.0f);
            void *d_slab = grads ? (void *)ct_up_f32(&Q, slab, rows * width)
                                 : ct_up_act(&Q, slab, rows * width);
            void **d_table = ct_poison(&Q, sizeof d_tab);
            if (Q.failed) {
                ct_pool_free(&Q);
                break;
            }
            MG_EXPECT_OK(gpu->copy_h2d(gpu, d_table, d_tab, sizeof d_tab));
            MG_EXPECT_OK(cpu->moe_echo_move(cpu, slab, h_tab, plan, &p, rank, seg[0], seg[1],
                                            seg[2], seg[3], mode));
            MG_EXPECT_OK(gpu->moe_echo_move(gpu, d_slab, d_table, d_plan, &p, rank, seg[0], seg[1],
                                            seg[2], seg[3], mode));
            float *got = grads ? ct_down_f32(&Q, d_slab, rows * width)
                               : ct_down_act(&Q, d_slab, rows * width);
            CT_EXPECT_CLOSE(got, slab, rows * width, 0.0, "echo move slab, rank %d mode %d", rank,
                            mode);
            for (int q = 0; q < 8 * EL && !Q.failed; q++) {
                size_t m = seg[(q / EL) % NSEG];
                float *d = q < 4 * EL ? ct_down_act(&Q, d_tab[q], m)
                                      : ct_down_f32(&Q, (const float *)d_tab[q], m);
                CT_EXPECT_CLOSE(d, h_buf[q], m, 0.0, "echo move table entry %d, rank %d mode %d", q,
                                rank, mode);
            }
        }
done:
    ct_pool_free(&P);
}

/* ---------------------------------------------------------------- determinism */

/* The routing of the layer tests at the benchmark shape: softmax top-k, aux loss over sequences
 * of 2048, z-loss, capacity of the balanced load (T x k / E). */
static mg_moe_routing layer_routing(int T, int E, int k) {
    return (mg_moe_routing){.T = T,
                            .S = 2048,
                            .E = E,
                            .k = k,
                            .scaling = 1.0f,
                            .capacity = T * k / E,
                            .balancing = MG_MOE_LB_AUX,
                            .aux_coeff = 0.01f,
                            .z_coeff = 0.001f,
                            .loss_weight = 1.0f,
                            .stat_weight = 1.0f};
}

/* A layer's router and token movement, forward and backward, twice on the same inputs at the
 * benchmark's H, E and k (aux loss, z-loss, capacity) over 2048 tokens: every output must repeat
 * bitwise (the GPU's sums over tokens run in fixed orders; integer counts are exact). The token
 * count only sets how many blocks take part in each sum, and 2048 already gives every sum many. */
MG_TEST(cuda_moe_ops_repeat_bitwise) {
    mg_backend *g = ct_gpu(t);
    if (!g) return;
    enum { T = 2048, H = 1024, E = 8, K = 2, N = T * K, OUTS = 8 };
    mg_moe_routing r = layer_routing(T, E, K);
    ct_pool P = ct_pool_of(t, g);
    float *x = ct_rand_act(&P, 360, (size_t)T * H, 1.0f), *w = ct_rand_act(&P, 361, E * H, 0.05f);
    float *dout = ct_rand_act(&P, 362, (size_t)T * H, 1.0f);
    float *dx0 = ct_rand_act(&P, 363, (size_t)T * H, 0.5f), *zero = ct_host(&P, E * H * 4);
    if (zero) memset(zero, 0, E * H * 4);
    void *d_x = ct_up_act(&P, x, (size_t)T * H), *d_w = ct_up_act(&P, w, E * H);
    void *d_dout = ct_up_act(&P, dout, (size_t)T * H), *d_dx = ct_up_act(&P, dx0, (size_t)T * H);
    void *d_xp = ct_poison_act(&P, (size_t)N * H), *d_dy = ct_poison_act(&P, (size_t)N * H);
    float *d_l = ct_poison(&P, T * E * 4), *d_probs = ct_poison(&P, N * 4);
    float *d_dl = ct_poison(&P, T * E * 4), *d_dprobs = ct_poison(&P, N * 4);
    float *d_stats = ct_up_f32(&P, zero, 2), *d_load = ct_up_f32(&P, zero, E);
    float *d_dw = ct_up_f32(&P, zero, E * H);
    int32_t *d_idx = poison_i32(&P, N), *d_pos = poison_i32(&P, N), *d_counts = poison_i32(&P, E);
    int32_t *d_aux = poison_i32(&P, E);
    static const char *what[OUTS] = {"logits", "stats",   "idx", "pos",
                                     "dprobs", "dlogits", "dw",  "dx"};
    const void *got[2][OUTS] = {{0}};
    size_t bytes[OUTS] = {T * E * 4, 8,         N * 4,     N * 4,
                          N * 4,     T * E * 4, E * H * 4, (size_t)T * H * 4};
    for (int rep = 0; rep < 2 && !P.failed; rep++) {
        ct_put_f32(&P, d_stats, zero, 2);
        ct_put_f32(&P, d_load, zero, E);
        ct_put_f32(&P, d_dw, zero, E * H);
        ct_put_act(&P, d_dx, dx0, (size_t)T * H);
        MG_EXPECT_OK(g->router_forward(g, d_l, d_x, d_w, T, H, E));
        MG_EXPECT_OK(g->moe_route(g, &r, d_idx, d_probs, d_aux, d_stats, d_l, NULL));
        MG_EXPECT_OK(g->moe_permute(g, d_xp, d_pos, d_counts, d_load, d_x, d_idx, T, K, E, H, 0));
        MG_EXPECT_OK(
            g->moe_unpermute_backward(g, d_dy, d_dprobs, d_dout, d_xp, d_pos, d_probs, T, K, H, N));
        MG_EXPECT_OK(g->moe_permute_backward(g, d_dx, d_dy, d_pos, T, K, H));
        MG_EXPECT_OK(
            g->moe_route_backward(g, &r, d_dl, d_dprobs, d_l, d_idx, d_probs, d_aux, NULL));
        MG_EXPECT_OK(g->router_backward(g, d_dx, d_dw, d_dl, d_x, d_w, T, H, E));
        const void *dev[OUTS] = {d_l, d_stats, d_idx, d_pos, d_dprobs, d_dl, d_dw, NULL};
        for (int i = 0; i < OUTS - 1; i++) got[rep][i] = ct_down_raw(&P, dev[i], bytes[i]);
        got[rep][OUTS - 1] = ct_down_act(&P, d_dx, (size_t)T * H);
    }
    for (int i = 0; i < OUTS && !P.failed; i++)
        CT_EXPECT_SAME_BITS(got[0][i], got[1][i], bytes[i], "%s of two runs", what[i]);
    ct_pool_free(&P);
}

/* ---------------------------------------------------------------- the rule */

/* A host function that holds the stream until *gate is set (or 2 s pass, so that a mistake cannot
 * hang the test): the work queued behind it then runs back to back, and events between the ops
 * time the GPU's work alone, not the host's launches. */
static void CUDART_CB hold_stream(void *gate) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while (!atomic_load((atomic_int *)gate) && t.tv_sec - t0.tv_sec < 2);
}

static mg_status copy_reference(void *dst, const void *src, size_t bytes, cudaStream_t st) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st) == cudaSuccess
               ? MG_OK
               : MG_FAIL(MG_ERR_INTERNAL, "cudaMemcpyAsync failed");
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A whole MoE layer's ops, forward and backward, on the CUDA backend: no device allocation and
 * no host synchronisation through the backend (the counters of mg_cuda_ctx). Under
 * MG_TEST_VERBOSE, a measurement (nothing is asserted about speed): the median time of each op
 * over the repetitions at the benchmark shape (T 8192, H 1024, E 8, top-2), first with the host
 * launching each repetition onto an idle GPU ("launched": the host's launch time can show), then
 * with all repetitions queued behind hold_stream ("GPU": the device's time alone), with a 32 MB
 * device copy for the memory bandwidth at hand. */
MG_TEST(cuda_moe_ops_neither_allocate_nor_synchronise) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    enum { T = 8192, H = 1024, E = 8, K = 2, F = 512, N = T * K };
    mg_moe_routing r = layer_routing(T, E, K);
    ct_pool P = ct_pool_of(t, g);
    float *x = ct_rand_act(&P, 350, (size_t)T * H, 1.0f), *w = ct_rand_act(&P, 351, E * H, 0.05f);
    float *pre = ct_rand_act(&P, 352, (size_t)N * 2 * F, 1.0f);
    void *d_x = ct_up_act(&P, x, (size_t)T * H), *d_w = ct_up_act(&P, w, E * H);
    void *d_xp = ct_poison_act(&P, (size_t)N * H), *d_out = ct_poison_act(&P, (size_t)T * H);
    void *d_pre = ct_up_act(&P, pre, (size_t)N * 2 * F), *d_act = ct_poison_act(&P, (size_t)N * F);
    void *d_dpre = ct_poison_act(&P, (size_t)N * 2 * F), *d_dy = ct_poison_act(&P, (size_t)N * H);
    float *d_l = ct_poison(&P, T * E * 4), *d_probs = ct_poison(&P, N * 4);
    float *d_stats = ct_poison(&P, 8), *d_load = ct_poison(&P, E * 4),
          *d_dl = ct_poison(&P, T * E * 4);
    float *d_dw = ct_poison(&P, E * H * 4), *d_dprobs = ct_poison(&P, N * 4);
    int32_t *d_idx = poison_i32(&P, N), *d_pos = poison_i32(&P, N), *d_counts = poison_i32(&P, E);
    int32_t *d_aux = poison_i32(&P, E);
    if (P.failed) goto done;
    MG_EXPECT_OK(g->memset_zero(g, d_stats, 8));
    MG_EXPECT_OK(g->memset_zero(g, d_load, E * 4));
    MG_EXPECT_OK(g->memset_zero(g, d_dw, E * H * 4));
    MG_EXPECT_OK(g->synchronize(g));
    /* moe_route twice more, for the time of its parts: routing alone, and with the losses */
    mg_moe_routing r_plain = r, r_loss = r;
    r_plain.capacity = 0, r_plain.aux_coeff = 0, r_plain.z_coeff = 0, r_loss.capacity = 0;
    const char *names[] = {"router_forward",        "moe_route (routing)",
                           "moe_route (+ losses)",  "moe_route",
                           "moe_permute",           "grouped_swiglu",
                           "moe_unpermute",         "moe_unpermute_backward",
                           "swiglu_backward",       "permute_backward",
                           "moe_route_backward",    "router_backward",
                           "copy 32 MB (reference)"};
    /* the eight ops of the layer's router and token movement (routing with its losses) */
    static const int eight[] = {0, 2, 4, 6, 7, 9, 10, 11};
    enum { NOPS = sizeof names / sizeof names[0], REPS = 12 };
    static cudaEvent_t ev[REPS][NOPS + 1];
    int timed = ct_verbose(), reps = timed ? REPS : 1;
    for (int i = 0; timed && i < REPS * (NOPS + 1); i++)
        timed = cudaEventCreate(&ev[i / (NOPS + 1)][i % (NOPS + 1)]) == cudaSuccess;
    uint64_t a0 = ct_allocs(g), f0 = mg_cuda_ctx_of(g)->n_device_frees, s0 = ct_syncs(g);
    cudaStream_t st = mg_cuda_stream(g);
    for (int gated = 0; gated < (timed ? 2 : 1); gated++) {
        atomic_int gate = 0;
        if (gated && cudaLaunchHostFunc(st, hold_stream, &gate) != cudaSuccess) break;
        for (int rep = 0; rep < reps; rep++) {
            int o = 0;
#define OP(call)                                                                                   \
    do {                                                                                           \
        if (timed) cudaEventRecord(ev[rep][o], st);                                                \
        MG_EXPECT_OK(call);                                                                        \
        o++;                                                                                       \
    } while (0)
            OP(g->router_forward(g, d_l, d_x, d_w, T, H, E));
            OP(g->moe_route(g, &r_plain, d_idx, d_probs, d_aux, d_stats, d_l, NULL));
            OP(g->moe_route(g, &r_loss, d_idx, d_probs, d_aux, d_stats, d_l, NULL));
            OP(g->moe_route(g, &r, d_idx, d_probs, d_aux, d_stats, d_l, NULL));
            OP(g->moe_permute(g, d_xp, d_pos, d_counts, d_load, d_x, d_idx, T, K, E, H, 0));
            OP(g->grouped_activation_forward(g, d_act, d_pre, d_counts, E, F, true));
            OP(g->moe_unpermute(g, d_out, d_x, d_xp, d_pos, d_probs, T, K, H));
            OP(g->moe_unpermute_backward(g, d_dy, d_dprobs, d_out, d_xp, d_pos, d_probs, T, K, H,
                                         N));
            OP(g->grouped_swiglu_backward(g, d_dpre, d_pre, d_act, d_counts, E, F));
            OP(g->moe_permute_backward(g, d_out, d_dy, d_pos, T, K, H));
            OP(g->moe_route_backward(g, &r, d_dl, d_dprobs, d_l, d_idx, d_probs, d_aux, NULL));
            OP(g->router_backward(g, d_out, d_dw, d_dl, d_x, d_w, T, H, E));
            OP(copy_reference(d_dy, d_xp, (size_t)N * H * 2, st));
#undef OP
            if (timed) cudaEventRecord(ev[rep][NOPS], st);
            if (timed && !gated) cudaEventSynchronize(ev[rep][NOPS]); /* the next from idle */
        }
        if (!timed) break;
        atomic_store(&gate, 1);
        cudaEventSynchronize(ev[reps - 1][NOPS]);
        double sum8 = 0;
        for (int i = 0; i < NOPS; i++) {
            float m[REPS];
            for (int rep = 1; rep < reps; rep++) { /* the first repetition warms up */
                m[rep - 1] = 0;
                cudaEventElapsedTime(&m[rep - 1], ev[rep][i], ev[rep][i + 1]);
            }
            qsort(m, (size_t)(reps - 1), sizeof m[0], cmp_float);
            double med = 1e3 * m[(reps - 1) / 2];
            for (size_t j = 0; j < sizeof eight / sizeof eight[0]; j++)
                sum8 += eight[j] == i ? med : 0;
            printf("  %-24s %8.1f us %s (T %d, H %d, E %d, top-%d, F %d)\n", names[i], med,
                   gated ? "GPU     " : "launched", T, H, E, K, F);
        }
        printf("  %-24s %8.1f us %s\n", "the eight ops", sum8, gated ? "GPU     " : "launched");
    }
    MG_EXPECT(ct_allocs(g) == a0 && mg_cuda_ctx_of(g)->n_device_frees == f0,
              "the MoE ops allocated %llu times", (unsigned long long)(ct_allocs(g) - a0));
    MG_EXPECT(ct_syncs(g) == s0, "the MoE ops synchronised with the host %llu times",
              (unsigned long long)(ct_syncs(g) - s0));
    for (int i = 0; timed && i < REPS * (NOPS + 1); i++)
        cudaEventDestroy(ev[i / (NOPS + 1)][i % (NOPS + 1)]);
    MG_EXPECT_OK(g->synchronize(g));
done:
    ct_pool_free(&P);
}

/* ---------------------------------------------------------------- regroup */

/* Expert parallelism's regroup both ways, against the CPU's on the same pre-filled buffers (the
 * rows no window covers must be left as they were): blocks of skewed sizes (one empty, one
 * filling its slab, one of 2.5 slabs), each window of the receive budget's rounds, row widths with
 * and without 16-byte vectors; and the round counts of each window. Copies: exact. */
MG_TEST(cuda_moe_regroup_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const int cases[][4] = {{2, 4, 300, 1024}, {4, 2, 33, 72}, {3, 1, 17, 36}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int P = cases[c][0], El = cases[c][1], slab = cases[c][2], H = cases[c][3];
        ct_pool P_ = ct_pool_of(t, gpu);
        int32_t *counts = (int32_t *)ct_host(&P_, (size_t)P * El * sizeof(int32_t));
        int total = 0;
        for (int p = 0; p < P; p++) { /* block 0 fills its slab, 1 is empty, the last 2.5 slabs */
            int rows = p == P - 1 ? 5 * slab / 2 : p == 0 ? slab : p == 1 ? 0 : slab / 3 + p;
            for (int j = 0; j < El; j++) counts[p * El + j] = rows / El + (j < rows % El);
            total += rows;
        }
        size_t n = (size_t)(total > P * slab ? total : P * slab) * H;
        float *src = ct_rand_act(&P_, 400 + (uint32_t)c, n, 1.0f);
        float *fill = ct_rand_act(&P_, 410 + (uint32_t)c, n, 1.0f);
        int32_t *d_counts = ct_up_i32(&P_, counts, (size_t)P * El);
        int32_t *rc = (int32_t *)ct_host(&P_, (size_t)P * El * sizeof(int32_t)), rounds = 0;
        int32_t *d_rc = ct_up_i32(&P_, counts, (size_t)P * El),
                *d_rounds = ct_up_i32(&P_, counts, 1);
        for (int first = 0; first < 3 * slab && !P_.failed; first += slab) {
            MG_EXPECT_OK(cpu->moe_round_counts(cpu, rc, &rounds, counts, P, El, slab, first));
            MG_EXPECT_OK(gpu->moe_round_counts(gpu, d_rc, d_rounds, d_counts, P, El, slab, first));
            int32_t got[64], got_rounds = 0;
            MG_EXPECT_OK(gpu->copy_d2h(gpu, got, d_rc, (size_t)P * El * sizeof(int32_t)));
            MG_EXPECT_OK(gpu->copy_d2h(gpu, &got_rounds, d_rounds, sizeof got_rounds));
            MG_EXPECT(rounds == 3 && got_rounds == rounds, "rounds: cpu %d, cuda %d (want 3)",
                      (int)rounds, (int)got_rounds);
            MG_EXPECT(memcmp(got, rc, (size_t)P * El * sizeof(int32_t)) == 0,
                      "moe_round_counts P=%d El=%d slab=%d first=%d", P, El, slab, first);
            for (int to_slabs = 0; to_slabs < 2; to_slabs++) {
                float *ref = ct_dup(&P_, fill, n);
                void *d_src = ct_up_act(&P_, src, n), *d_dst = ct_up_act(&P_, fill, n);
                MG_EXPECT_OK(
                    cpu->moe_regroup(cpu, ref, src, counts, P, El, slab, first, H, to_slabs));
                if (P_.failed) break;
                MG_EXPECT_OK(
                    gpu->moe_regroup(gpu, d_dst, d_src, d_counts, P, El, slab, first, H, to_slabs));
                CT_EXPECT_CLOSE(ct_down_act(&P_, d_dst, n), ref, n, 0.0,
                                "moe_regroup P=%d El=%d slab=%d first=%d H=%d to_slabs=%d", P, El,
                                slab, first, H, to_slabs);
            }
        }
        ct_pool_free(&P_);
    }
}

/* ---------------------------------------------------------------- stores into peers' slabs */

/* moe_put_rows between two ranks on one GPU: two CUDA backends (a stream each) stand for the ranks
 * and store their packed blocks into a pair of buffers standing for the ranks' peer-mapped receive
 * slabs; both kernels run at once and meet at their barriers (a wrong barrier hangs or races).
 * Rank p's buffer must then hold at rows [s slab, ...) the window of source s's block p, as the
 * slabs' all-to-all would leave it, and the rest untouched; twice (the barriers' epochs count
 * on), the second time the receive budget's next window. Row widths with and without 16-byte
 * vectors. Copies: exact. */
MG_TEST(cuda_moe_put_rows_matches_the_slab_exchange) {
    CT_BACKENDS(cpu, gpu);
    if (!gpu->moe_put_rows) {
        MG_EXPECT(gpu->device != MG_DEVICE_CUDA, "the cuda backend has no moe_put_rows");
        return;
    }
    mg_backend *g2 = NULL;
    MG_EXPECT_OK(mg_backend_cuda_create_dtype(&g2, 0, gpu->compute_dtype));
    if (!g2) return;
    enum { P = 2, El = 3 };
    const int slab = 40;
    /* source 0: block 0 fills its slab, block 1 13 rows; source 1: block 0 empty, block 1 2.5
     * slabs (a second window) */
    static const int32_t counts[P][P * El] = {{14, 13, 13, 5, 4, 4}, {0, 0, 0, 34, 33, 33}};
    mg_backend *rank_be[P] = {gpu, g2};
    for (int H = 72; H >= 36; H -= 36) { /* 144-byte rows, then 72-byte */
        ct_pool P_ = ct_pool_of(t, gpu);
        const size_t data = (size_t)P * slab * H, esz = mg_dtype_size(gpu->compute_dtype);
        const size_t total = data + MG_PEER_FLAG_BYTES / esz;
        float *src[P], *ref[P];
        void *d_src[P], *d_win[P];
        int32_t *d_counts[P];
        mg_peer_window pw[P];
        for (int s = 0; s < P; s++) {
            int rows = 0;
            for (int i = 0; i < P * El; i++) rows += counts[s][i];
            src[s] = ct_rand_act(&P_, 500 + (uint32_t)s, (size_t)rows * H, 1.0f);
            ref[s] = ct_rand_act(&P_, 510 + (uint32_t)s, total, 1.0f);
            d_src[s] = ct_up_act(&P_, src[s], (size_t)rows * H);
            d_win[s] = ct_up_act(&P_, ref[s], total);
            d_counts[s] = ct_up_i32(&P_, counts[s], (size_t)P * El);
        }
        for (int s = 0; s < P && !P_.failed; s++)
            MG_EXPECT_OK(gpu->memset_zero(gpu, (char *)d_win[s] + data * esz, MG_PEER_FLAG_BYTES));
        /* the uploads and zeroed flags (gpu's stream) done before g2's stream touches them */
        MG_EXPECT_OK(gpu->synchronize(gpu));
        for (int s = 0; s < P; s++) {
            memset(&pw[s], 0, sizeof pw[s]);
            pw[s].n = P, pw[s].rank = s, pw[s].bytes = data * esz;
            for (int q = 0; q < P; q++) pw[s].base[q] = d_win[q];
        }
        for (int first = 0; first < 2 * slab && !P_.failed; first += slab) {
            for (int s = 0; s < P; s++) /* the expected rows: source s's window of block p */
                for (int p = 0; p < P; p++) {
                    int64_t at = 0, n = mg_slab_window(counts[s], p, El, slab, first, &at);
                    memcpy(ref[p] + (size_t)s * slab * H, src[s] + (size_t)at * H,
                           (size_t)n * H * sizeof(float));
                }
            for (int s = 0; s < P; s++) /* both launched before either is waited for */
                MG_EXPECT_OK(rank_be[s]->moe_put_rows(rank_be[s], &pw[s], d_src[s], d_counts[s], El,
                                                      slab, first, H));
            for (int s = 0; s < P; s++) MG_EXPECT_OK(rank_be[s]->synchronize(rank_be[s]));
            for (int p = 0; p < P; p++)
                CT_EXPECT_CLOSE(ct_down_act(&P_, d_win[p], data), ref[p], data, 0.0,
                                "moe_put_rows: rank %d's slabs, H=%d first=%d", p, H, first);
        }
        ct_pool_free(&P_);
    }
    g2->destroy(g2);
}
