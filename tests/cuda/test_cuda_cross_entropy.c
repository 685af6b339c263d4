/* CUDA backend against the CPU backend: the fused softmax cross-entropy (losses, then the logits
 * overwritten in place by their gradient). Method and tolerances: cuda_test_util.h. The gradient's
 * target entries ((p - 1) dloss, O(dloss)) and the others (p dloss, ~1/V of that) are compared
 * separately, each normalised by its own largest value, so an error in the small entries cannot
 * hide behind the large ones. */
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
        float *logits = ct_rand_bf16(&P, 60, n, 2.0f);
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
        CT_EXPECT_CLOSE(gt, rt, N, CT_TOL_BF16, "cross_entropy dlogits at targets N=%d V=%d", N, V);
        CT_EXPECT_CLOSE(gr, rr, n, CT_TOL_BF16, "cross_entropy dlogits elsewhere N=%d V=%d", N, V);
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
    float *logits = ct_rand_bf16(&P, 63, n, 2.0f);
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
