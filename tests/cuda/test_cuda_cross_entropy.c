/* CUDA backend against the CPU backend: the fused softmax cross-entropy (losses, then the logits
 * overwritten in place by their gradient), and its vocab-parallel form (max, sums, finish over
 * column ranges, the all-reduces emulated on the host). Method and tolerances: cuda_test_util.h.
 * The gradient's target entries ((p - 1) dloss, O(dloss)) and the others (p dloss, ~1/V of that)
 * are compared separately, each normalised by its own largest value, so an error in the small
 * entries cannot hide behind the large ones. */
#include "cuda_test_util.h"

#include <math.h>

typedef struct {
    int N, V;
} ce_case;

static const ce_case k_cases[] = {{1, 50304}, {7, 50257}, {64, 50304}, {33, 1001}};

/* Splits a (N, V) gradient into its target entries (N) and the rest, with the targets zeroed. */
static void split_targets(ct_pool *P, const float *g, const int32_t *tgt, int N, int V,
                          float **at_target, float **rest) {
    size_t n = (size_t)N * V;
    *at_target = ct_host(P, (size_t)N * 4);
    *rest = ct_dup(P, g, n);
    for (int i = 0; i < N; i++) {
        (*at_target)[i] = g[(size_t)i * V + tgt[i]];
        (*rest)[(size_t)i * V + tgt[i]] = 0.0f;
    }
}

MG_TEST(cuda_cross_entropy_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        int N = k_cases[k].N, V = k_cases[k].V;
        size_t n = (size_t)N * V;
        ct_pool P = ct_pool_of(t, gpu);
        float *logits = ct_rand_act(&P, 60, n, 2.0f);
        int32_t *tgt = ct_tokens(&P, 61, N, V);
        float *dloss = ct_uniform_f32(&P, 62, N, 0.5f / N, 1.5f / N);
        float *ref_g = ct_dup(&P, logits, n), *ref_loss = ct_host(&P, (size_t)N * 4);
        MG_EXPECT_OK(cpu->cross_entropy_fused(cpu, ref_g, ref_loss, tgt, dloss, N, V));
        void *d_logits = ct_up_act(&P, logits, n);
        int32_t *d_tgt = ct_up_i32(&P, tgt, N);
        float *d_dloss = ct_up_f32(&P, dloss, N), *d_loss = ct_poison(&P, (size_t)N * 4);
        if (P.failed) goto next;
        float *got_g[2], *got_loss[2];
        for (int run = 0; run < 2; run++) {
            ct_put_act(&P, d_logits, logits, n);
            MG_EXPECT_OK(gpu->cross_entropy_fused(gpu, d_logits, d_loss, d_tgt, d_dloss, N, V));
            got_g[run] = ct_down_act(&P, d_logits, n);
            got_loss[run] = ct_down_f32(&P, d_loss, N);
        }
        CT_EXPECT_CLOSE(got_loss[0], ref_loss, N, CT_TOL_F32, "cross_entropy losses N=%d V=%d", N,
                        V);
        float *gt, *gr, *rt, *rr;
        split_targets(&P, got_g[0], tgt, N, V, &gt, &gr);
        split_targets(&P, ref_g, tgt, N, V, &rt, &rr);
        CT_EXPECT_CLOSE(gt, rt, N, CT_TOL_ACT, "cross_entropy dlogits at targets N=%d V=%d", N, V);
        CT_EXPECT_CLOSE(gr, rr, n, CT_TOL_ACT, "cross_entropy dlogits elsewhere N=%d V=%d", N, V);
        CT_EXPECT_SAME_BITS(got_loss[0], got_loss[1], (size_t)N * 4, "cross_entropy losses N=%d",
                            N);
        CT_EXPECT_SAME_BITS(got_g[0], got_g[1], n * 4, "cross_entropy dlogits N=%d", N);
    next:
        ct_pool_free(&P);
    }
}

/* A NaN logit in one row and an Inf in another: those rows' losses and gradients are NaN as on the
 * CPU, the other rows stay finite. */
MG_TEST(cuda_cross_entropy_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 5, V = 50304 };
    size_t n = (size_t)N * V;
    ct_pool P = ct_pool_of(t, gpu);
    float *logits = ct_rand_act(&P, 63, n, 2.0f);
    int32_t *tgt = ct_tokens(&P, 64, N, V);
    float *dloss = ct_uniform_f32(&P, 65, N, 0.1f, 0.3f);
    logits[(size_t)1 * V + 777] = NAN;
    logits[(size_t)3 * V + 12] = INFINITY;
    float *ref_g = ct_dup(&P, logits, n), *ref_loss = ct_host(&P, N * 4);
    MG_EXPECT_OK(cpu->cross_entropy_fused(cpu, ref_g, ref_loss, tgt, dloss, N, V));
    void *d_logits = ct_up_act(&P, logits, n);
    int32_t *d_tgt = ct_up_i32(&P, tgt, N);
    float *d_dloss = ct_up_f32(&P, dloss, N), *d_loss = ct_poison(&P, N * 4);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->cross_entropy_fused(gpu, d_logits, d_loss, d_tgt, d_dloss, N, V));
        CT_EXPECT_PARITY(ct_down_f32(&P, d_loss, N), ref_loss, N, "cross_entropy losses");
        CT_EXPECT_PARITY(ct_down_act(&P, d_logits, n), ref_g, n, "cross_entropy dlogits");
    }
    ct_pool_free(&P);
}

/* ---- vocab-parallel cross-entropy: max, sums, finish over column ranges ---- */

#define VP_MAXR 3
typedef struct {
    int N, V, nr, start[VP_MAXR + 1];
} vp_case;

static const vp_case k_vp_cases[] = {
    {7, 50304, 2, {0, 25152, 50304}},         /* 16-byte path in both ranges */
    {33, 1001, 2, {0, 400, 1001}},            /* 601 columns: the element-wise path */
    {64, 50257, 3, {0, 16752, 33504, 50257}}, /* three ranges, an odd last one */
};

/* Megatron's vocab-parallel cross-entropy on backend P->g, one rank per column range, the two
 * all-reduces (max, then sum) done on the host. Out: the concatenated gradient (N, V), the losses
 * (every range computes the same ones: checked bitwise), the reduced rowmax (N) and sums (2N). */
static void vp_run(ct_pool *P, const vp_case *c, const float *logits, const int32_t *tgt,
                   const float *dloss, float *grad, float *loss, float *rowmax, float *sums) {
    mg_test_ctx *t = P->t;
    mg_backend *be = P->g;
    int N = c->N, V = c->V;
    void *d_x[VP_MAXR];
    float *slice = ct_host(P, (size_t)N * V * sizeof(float));
    for (int r = 0; r < c->nr; r++) {
        int v0 = c->start[r], Vl = c->start[r + 1] - v0;
        for (int i = 0; i < N; i++)
            memcpy(slice + (size_t)i * Vl, logits + (size_t)i * V + v0, sizeof(float) * Vl);
        d_x[r] = ct_up_act(P, slice, (size_t)N * Vl);
    }
    int32_t *d_tgt = ct_up_i32(P, tgt, N);
    float *d_dl = ct_up_f32(P, dloss, N), *d_part = ct_poison(P, 2 * N * sizeof(float));
    float *d_max = ct_poison(P, N * sizeof(float)), *d_sums = ct_poison(P, 2 * N * sizeof(float));
    float *d_loss = ct_poison(P, N * sizeof(float));
    if (P->failed) return;
    for (int i = 0; i < N; i++) rowmax[i] = -INFINITY;
    for (int i = 0; i < 2 * N; i++) sums[i] = 0.0f;
    for (int r = 0; r < c->nr; r++) {
        MG_EXPECT_OK(be->cross_entropy_max(be, d_part, d_x[r], N, c->start[r + 1] - c->start[r]));
        float *h = ct_down_f32(P, d_part, N);
        for (int i = 0; i < N; i++) rowmax[i] = fmaxf(rowmax[i], h[i]);
    }
    ct_put_f32(P, d_max, rowmax, N);
    for (int r = 0; r < c->nr; r++) {
        int v0 = c->start[r], Vl = c->start[r + 1] - v0;
        MG_EXPECT_OK(be->cross_entropy_sums(be, d_part, d_x[r], d_max, d_tgt, v0, N, Vl));
        float *h = ct_down_f32(P, d_part, 2 * N);
        for (int i = 0; i < 2 * N; i++) sums[i] += h[i];
    }
    ct_put_f32(P, d_sums, sums, 2 * N);
    for (int r = 0; r < c->nr; r++) {
        int v0 = c->start[r], Vl = c->start[r + 1] - v0;
        MG_EXPECT_OK(
            be->cross_entropy_finish(be, d_x[r], d_loss, d_max, d_sums, d_tgt, d_dl, v0, N, Vl));
        float *l = ct_down_f32(P, d_loss, N), *g = ct_down_act(P, d_x[r], (size_t)N * Vl);
        if (r == 0)
            memcpy(loss, l, N * sizeof(float));
        else
            CT_EXPECT_SAME_BITS(l, loss, N * sizeof(float), "%s: range %d's losses differ",
                                be->name, r);
        for (int i = 0; i < N; i++)
            memcpy(grad + (size_t)i * V + v0, g + (size_t)i * Vl, sizeof(float) * Vl);
    }
}

MG_TEST(cuda_cross_entropy_vocab_parallel_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < sizeof k_vp_cases / sizeof k_vp_cases[0]; k++) {
        const vp_case *c = &k_vp_cases[k];
        int N = c->N, V = c->V;
        size_t n = (size_t)N * V;
        ct_pool P = ct_pool_of(t, gpu), PC = ct_pool_of(t, cpu);
        ct_pool G[2] = {ct_pool_of(t, gpu), ct_pool_of(t, gpu)};
        float *logits = ct_rand_act(&P, 66, n, 2.0f);
        int32_t *tgt = ct_tokens(&P, 67, N, V); /* the first is 0, the last V-1: every range */
        float *dloss = ct_uniform_f32(&P, 68, N, 0.5f / N, 1.5f / N);
        float *ref_g = ct_host(&P, n * 4), *ref_loss = ct_host(&P, N * 4);
        float *ref_max = ct_host(&P, N * 4), *ref_sums = ct_host(&P, 2 * N * 4);
        vp_run(&PC, c, logits, tgt, dloss, ref_g, ref_loss, ref_max, ref_sums);
        float *got_g[2], *got_loss[2], *got_max = ct_host(&P, N * 4);
        float *got_sums = ct_host(&P, 2 * N * 4);
        for (int run = 0; run < 2; run++) {
            got_g[run] = ct_host(&P, n * 4), got_loss[run] = ct_host(&P, N * 4);
            vp_run(&G[run], c, logits, tgt, dloss, got_g[run], got_loss[run], got_max, got_sums);
        }
        if (P.failed || PC.failed || G[0].failed || G[1].failed) goto next;
        /* the maxima of the same compute-dtype values and the target logits are exact */
        CT_EXPECT_SAME_BITS(got_max, ref_max, N * 4, "cross_entropy_max N=%d V=%d", N, V);
        CT_EXPECT_SAME_BITS(got_sums + N, ref_sums + N, N * 4,
                            "cross_entropy_sums target logits N=%d V=%d", N, V);
        CT_EXPECT_CLOSE(got_sums, ref_sums, N, CT_TOL_F32, "cross_entropy_sums N=%d V=%d", N, V);
        CT_EXPECT_CLOSE(got_loss[0], ref_loss, N, CT_TOL_F32,
                        "cross_entropy_finish losses N=%d V=%d (%d ranges)", N, V, c->nr);
        float *gt, *gr, *rt, *rr;
        split_targets(&P, got_g[0], tgt, N, V, &gt, &gr);
        split_targets(&P, ref_g, tgt, N, V, &rt, &rr);
        CT_EXPECT_CLOSE(gt, rt, N, CT_TOL_ACT, "cross_entropy_finish dlogits at targets N=%d V=%d",
                        N, V);
        CT_EXPECT_CLOSE(gr, rr, n, CT_TOL_ACT, "cross_entropy_finish dlogits elsewhere N=%d V=%d",
                        N, V);
        CT_EXPECT_SAME_BITS(got_loss[0], got_loss[1], N * 4, "vocab-parallel losses N=%d", N);
        CT_EXPECT_SAME_BITS(got_g[0], got_g[1], n * 4, "vocab-parallel dlogits N=%d", N);
    next:
        ct_pool_free(&G[0]), ct_pool_free(&G[1]), ct_pool_free(&PC), ct_pool_free(&P);
    }
}
