/* cuDNN's fused attention with attention dropout drawn from a stream (core/dropout.h's stream
 * masks; attention_cudnn.cu). cuDNN draws the keep mask with its own Philox generator, so no CPU
 * code can compute it; the test reads it back through the forward instead and checks everything
 * against it:
 *  - the mask: with q = k = 0 every causal probability of query s is 1/(s+1), and with the value
 *    rows one-hot (v_t = e_{t-c} for keys c <= t < c + hd, 0 elsewhere) the output is
 *    o[s, j] = f(s, c + j) / (s + 1): one forward per window of hd keys reads every factor f (0 or
 *    1/(1-p)) of every (sequence, head, query, key);
 *  - its statistics: the kept fraction is 1 - p (within 6 binomial standard deviations), and the
 *    masks of two uses of one stream, of two seeds, and of a stream before and after the step's
 *    rng_advance agree on p^2 + (1-p)^2 of the elements (independent draws), while the same use
 *    twice gives the same mask;
 *  - the forward and backward on random inputs, with the same stream and use, against a double
 *    precision reference that applies the read-back mask: out within CT_TOL_GEMM, dq, dk, dv
 *    within CT_TOL_ATTN_BWD. The backward draws the mask again from the same seed and offset, so
 *    this also shows that both directions drop the same elements.
 * Runs only on the CUDA backend with cuDNN (a SKIP line otherwise), in bf16 and fp16. */
#include "cuda_test_util.h"

#include "backend/cuda/cuda_ops.h"
#include "core/dropout.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    int B, S, nq, ng, hd;
} dcase;

static const dcase k_cases[] = {
    {2, 128, 4, 4, 64},  /* multi-head: one plan run for the batch */
    {3, 80, 4, 2, 128},  /* grouped queries: one run per sequence, each its own offset */
    {1, 200, 2, 2, 256}, /* the largest head size, keys past one window */
    {2, 64, 2, 2, 8},    /* the smallest head size cuDNN takes: eight windows of keys */
    {1, 96, 3, 1, 24},   /* multi-query, three heads per group */
    {1, 100, 2, 2, 80},
    {1, 70, 2, 2, 192},
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

/* Column of query head h's (part 0), its group's key (1) or value (2) head in the fused row. */
static size_t col_of(dcase c, int h, int part) {
    int r = c.nq / c.ng, g = h / r;
    int slot = part == 0 ? h % r : part == 1 ? r : r + 1;
    return ((size_t)g * (r + 2) + slot) * c.hd;
}
static size_t width(dcase c) {
    return (size_t)c.ng * (c.nq / c.ng + 2) * c.hd;
}

/* The forward's and backward's entries of cuDNN's attention in the backend's dtype. */
typedef struct {
    mg_backend *g;
    mg_backend_attention_forward_fn *fwd;
    mg_backend_attention_backward_fn *bwd;
    size_t saved;
} dimpl;

/* Reads the keep mask of `drop` for case c: keep[((b nq + h) S + s) S + t] in {0, 1} for t <= s
 * (-1 above the diagonal). Returns 0 on success. */
static int read_mask(mg_test_ctx *t, const dimpl *im, dcase c, const mg_dropout *drop,
                     int8_t *keep) {
    const int N = c.B * c.S, C = (int)width(c), OW = c.nq * c.hd;
    ct_pool P = ct_pool_of(t, im->g);
    float *qkv = ct_host(&P, (size_t)N * C * 4);
    void *d_qkv = ct_poison_act(&P, (size_t)N * C), *d_out = ct_poison_act(&P, (size_t)N * OW);
    void *d_saved = ct_poison(&P, im->saved);
    int rc = 1;
    if (P.failed) goto done;
    memset(keep, -1, (size_t)c.B * c.nq * c.S * c.S);
    for (int c0 = 0; c0 < c.S; c0 += c.hd) {
        memset(qkv, 0, (size_t)N * C * 4);
        for (int b = 0; b < c.B; b++)
            for (int s = c0; s < c.S && s < c0 + c.hd; s++)
                for (int h = 0; h < c.nq; h += c.nq / c.ng) /* each group's value head */
                    qkv[(size_t)(b * c.S + s) * C + col_of(c, h, 2) + (s - c0)] = 1.0f;
        ct_put_act(&P, d_qkv, qkv, (size_t)N * C);
        MG_EXPECT_OK(im->fwd(im->g, d_out, d_saved, d_qkv, c.B, c.S, c.nq, c.ng, c.hd, drop, NULL));
        float *o = ct_down_act(&P, d_out, (size_t)N * OW);
        if (P.failed || !o) goto done;
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.nq; h++)
                for (int s = 0; s < c.S; s++)
                    for (int j = 0; j < c.hd && c0 + j <= s; j++) {
                        float v = o[(size_t)(b * c.S + s) * OW + (size_t)h * c.hd + j] * (s + 1);
                        keep[(((size_t)b * c.nq + h) * c.S + s) * c.S + c0 + j] =
                            v > 0.5f * drop->scale;
                    }
    }
    rc = 0;
done:
    ct_pool_free(&P);
    return rc;
}

/* Fraction of the causal elements kept, and of those two masks agree on. */
static void mask_stats(dcase c, const int8_t *a, const int8_t *b, double *kept, double *agree,
                       double *n) {
    size_t total = (size_t)c.B * c.nq * c.S * c.S, k = 0, same = 0, cnt = 0;
    for (size_t i = 0; i < total; i++) {
        if (a[i] < 0) continue;
        cnt++;
        k += (size_t)a[i];
        if (b) same += a[i] == b[i];
    }
    *kept = (double)k / (double)cnt;
    *agree = b ? (double)same / (double)cnt : 0;
    *n = (double)cnt;
}

/* Double-precision attention with the factor keep * scale on each probability, and its
 * backward; qkv, dout as the GPU saw them (rounded to the compute dtype). */
static void reference(dcase c, const int8_t *keep, double dscale, const float *qkv,
                      const float *dout, float *out, float *dqkv) {
    const int S = c.S, hd = c.hd, C = (int)width(c), OW = c.nq * hd;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc(sizeof(double) * S), *dp = malloc(sizeof(double) * S);
    memset(dqkv, 0, sizeof(float) * (size_t)c.B * S * C);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.nq; h++) {
            const int8_t *kh = keep + ((size_t)b * c.nq + h) * S * S;
            for (int s = 0; s < S; s++) {
                const float *q = qkv + (size_t)(b * S + s) * C + col_of(c, h, 0);
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= s; u++) {
                    const float *k = qkv + (size_t)(b * S + u) * C + col_of(c, h, 1);
                    double z = 0;
                    for (int d = 0; d < hd; d++) z += (double)q[d] * k[d];
                    p[u] = z * scale;
                    mx = fmax(mx, p[u]);
                }
                for (int u = 0; u <= s; u++) sum += (p[u] = exp(p[u] - mx));
                for (int u = 0; u <= s; u++) p[u] /= sum;
                const float *go = dout + (size_t)(b * S + s) * OW + (size_t)h * hd;
                double dsum = 0;
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int u = 0; u <= s; u++)
                        o += p[u] * kh[(size_t)s * S + u] * dscale *
                             qkv[(size_t)(b * S + u) * C + col_of(c, h, 2) + d];
                    out[(size_t)(b * S + s) * OW + (size_t)h * hd + d] = (float)o;
                }
                /* dP[u] = f dO . v_u; dS = P (dP - sum P dP) */
                for (int u = 0; u <= s; u++) {
                    const float *v = qkv + (size_t)(b * S + u) * C + col_of(c, h, 2);
                    double x = 0;
                    for (int d = 0; d < hd; d++) x += (double)go[d] * v[d];
                    dp[u] = x * kh[(size_t)s * S + u] * dscale;
                    dsum += p[u] * dp[u];
                }
                float *dq = dqkv + (size_t)(b * S + s) * C + col_of(c, h, 0);
                for (int u = 0; u <= s; u++) {
                    const double f = kh[(size_t)s * S + u] * dscale, ds = p[u] * (dp[u] - dsum);
                    const float *k = qkv + (size_t)(b * S + u) * C + col_of(c, h, 1);
                    float *dk = dqkv + (size_t)(b * S + u) * C + col_of(c, h, 1);
                    float *dv = dqkv + (size_t)(b * S + u) * C + col_of(c, h, 2);
                    for (int d = 0; d < hd; d++) {
                        dq[d] += (float)(ds * scale * k[d]);
                        dk[d] += (float)(ds * scale * q[d]);
                        dv[d] += (float)(p[u] * f * go[d]);
                    }
                }
            }
        }
    free(p);
    free(dp);
}

static void check_case(mg_test_ctx *t, mg_backend *gpu, dcase c, double p_drop) {
    const uint32_t thr = mg_dropout_init(p_drop, 0, 0, 0, MG_DROPOUT_ATTENTION, 0, 0).threshold;
    int ok = 0;
    MG_EXPECT_OK(CT_CUDA_OP(gpu, attention_cudnn_supported)(gpu, c.B, c.S, c.nq, c.ng, c.hd, thr,
                                                            &ok));
    if (!ok) {
        printf("SKIP cuda_attention_dropout B=%d S=%d nq=%d ng=%d hd=%d: no cuDNN plan with "
               "dropout (falls back to ours)\n",
               c.B, c.S, c.nq, c.ng, c.hd);
        return;
    }
    dimpl im = {gpu, CT_CUDA_OP(gpu, attention_cudnn_forward),
                CT_CUDA_OP(gpu, attention_cudnn_backward),
                CT_CUDA_OP(gpu, attention_cudnn_saved_bytes)(gpu, c.B, c.S, c.nq, c.hd)};
    const size_t nmask = (size_t)c.B * c.nq * c.S * c.S;
    const int N = c.B * c.S, C = (int)width(c), OW = c.nq * c.hd;
    ct_pool P = ct_pool_of(t, gpu);
    /* two streams: {seed, offset} pairs in device memory */
    uint64_t host_state[4] = {1234, 5, 99991, 5};
    uint64_t *st = ct_up_u64(&P, host_state, 4);
    int8_t *m0 = ct_host(&P, nmask), *m0b = ct_host(&P, nmask), *m1 = ct_host(&P, nmask);
    int8_t *m2 = ct_host(&P, nmask), *m3 = ct_host(&P, nmask);
    if (P.failed) goto done;
    mg_dropout d0 = mg_dropout_stream_init(p_drop, st, 7), d1 = mg_dropout_stream_init(p_drop, st, 8);
    mg_dropout d2 = mg_dropout_stream_init(p_drop, st + 2, 7);
    if (read_mask(t, &im, c, &d0, m0) || read_mask(t, &im, c, &d0, m0b) ||
        read_mask(t, &im, c, &d1, m1) || read_mask(t, &im, c, &d2, m2))
        goto done;
    double kept, agree, n, kept1, a1, a2, a3;
    mask_stats(c, m0, m0b, &kept, &agree, &n);
    MG_EXPECT(agree == 1.0, "B=%d S=%d hd=%d: the same use twice agrees on %.6f of the mask", c.B,
              c.S, c.hd, agree);
    const double q = 1.0 - p_drop, sd = sqrt(q * (1 - q) / n);
    MG_EXPECT(fabs(kept - q) < 6 * sd, "B=%d S=%d hd=%d p=%g: kept %.5f, want %.5f +- %.5f", c.B,
              c.S, c.hd, p_drop, kept, q, 6 * sd);
    /* independent masks agree on p^2 + q^2 (variance at most 1/(4n)) */
    const double want = p_drop * p_drop + q * q, tol = 6 * 0.5 / sqrt(n);
    mask_stats(c, m0, m1, &kept1, &a1, &n);
    mask_stats(c, m0, m2, &kept1, &a2, &n);
    MG_EXPECT(fabs(a1 - want) < tol, "uses 7 and 8 agree on %.5f, independent %.5f +- %.5f", a1,
              want, tol);
    MG_EXPECT(fabs(a2 - want) < tol, "two seeds agree on %.5f, independent %.5f +- %.5f", a2, want,
              tol);
    /* the step's end moves the stream on: use 7 then draws anew */
    MG_EXPECT_OK(gpu->rng_advance(gpu, st, 2, 1000));
    if (read_mask(t, &im, c, &d0, m3)) goto done;
    mask_stats(c, m0, m3, &kept1, &a3, &n);
    MG_EXPECT(fabs(a3 - want) < tol, "before and after rng_advance agree on %.5f, independent "
              "%.5f +- %.5f", a3, want, tol);

    /* random inputs through both directions against the mask read back (after the advance) */
    {
        float *qkv = ct_rand_act(&P, 301, (size_t)N * C, 1.0f);
        float *dout = ct_rand_act(&P, 302, (size_t)N * OW, 1.0f);
        float *ref_out = ct_host(&P, sizeof(float) * (size_t)N * OW);
        float *ref_d = ct_host(&P, sizeof(float) * (size_t)N * C);
        void *d_qkv = ct_up_act(&P, qkv, (size_t)N * C), *d_dout = ct_up_act(&P, dout, (size_t)N * OW);
        void *d_out = ct_poison_act(&P, (size_t)N * OW), *d_dqkv = ct_poison_act(&P, (size_t)N * C);
        void *d_saved = ct_poison(&P, im.saved);
        if (P.failed) goto done;
        MG_EXPECT_OK(im.fwd(gpu, d_out, d_saved, d_qkv, c.B, c.S, c.nq, c.ng, c.hd, &d0, NULL));
        MG_EXPECT_OK(im.bwd(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, c.B, c.S, c.nq, c.ng, c.hd,
                            &d0, NULL));
        float *got_out = ct_down_act(&P, d_out, (size_t)N * OW);
        float *got_d = ct_down_act(&P, d_dqkv, (size_t)N * C);
        if (P.failed) goto done;
        reference(c, m3, d0.scale, qkv, dout, ref_out, ref_d);
        CT_EXPECT_CLOSE(got_out, ref_out, (size_t)N * OW, CT_TOL_GEMM,
                        "cudnn dropout forward B=%d S=%d nq=%d ng=%d hd=%d", c.B, c.S, c.nq, c.ng,
                        c.hd);
        CT_EXPECT_QKV_CLOSE(&P, got_d, ref_d, N, c.nq, c.ng, c.hd, CT_TOL_ATTN_BWD,
                            "cudnn dropout backward B=%d S=%d nq=%d ng=%d hd=%d", c.B, c.S, c.nq,
                            c.ng, c.hd);
    }
    if (ct_verbose())
        printf("  cudnn dropout B=%d S=%d nq=%d ng=%d hd=%d p=%g: kept %.5f; agree use+1 %.5f, "
               "seed %.5f, advanced %.5f (independent %.5f)\n",
               c.B, c.S, c.nq, c.ng, c.hd, p_drop, kept, a1, a2, a3, want);
done:
    ct_pool_free(&P);
}

MG_TEST(cuda_attention_cudnn_dropout_matches_its_mask) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    if (gpu->device != MG_DEVICE_CUDA || !CT_CUDA_OP(gpu, attention_cudnn_available)()) {
        printf("SKIP cuda_attention_cudnn_dropout: %s\n", gpu->device != MG_DEVICE_CUDA
                                                               ? "backend under test is not cuda"
                                                               : "this build has no cuDNN");
        return;
    }
    for (size_t k = 0; k < NCASES; k++) check_case(t, gpu, k_cases[k], k == 1 ? 0.5 : 0.1);
}
