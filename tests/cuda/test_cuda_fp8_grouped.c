/* The routed experts' fp8 ops (backend_ops.h: fp8_cast_grouped, fp8_grouped_linear_forward,
 * fp8_grouped_linear_backward) against the CPU backend's, on skewed group sizes (empty groups,
 * sizes that are not multiples of 16 or of the tiles, one source and two sources sharing the
 * experts) with rows after the groups:
 *   - fp8_cast_grouped gives the CPU's bytes bit for bit: the groups' rows row-major, and their
 *     columns of the grouped transpose (core/fp8.h: each group at a 16-aligned column), the same
 *     amax and scale inverse; rows after the groups are not written, both formats;
 *   - the grouped linear ops on the same bytes and scales (CUTLASS's fp8 grouped GEMM against the
 *     CPU's fp32 products of the decoded values): the forward with bias (Hopper's fast
 *     accumulation: FP8_TOL), the backward with e4m3 and e5m2 gradients, with and without the
 *     GELU's derivative, dW and dbias accumulated onto non-zero values (CT_TOL_F32) and written
 *     over (NaN before); depths on both sides of the forward's kernel switch (2048); widths that
 *     are not multiples of 16 refused with a line saying so. Where the
 *     backend has no fp8 grouped GEMM (fp16 compute, no CUTLASS) both entries must be absent. */
#include "cuda_test_util.h"

#include "core/fp8.h"

#include <math.h>
#include <string.h>

#define FG_TAIL  3
#define FG_MAX_W 8
#define FP8_TOL  (CT_TOL_GEMM > 5e-3 ? CT_TOL_GEMM : 5e-3)

static const int32_t k_skew[8] = {0, 1, 37, 0, 300, 129, 0, 7};
static const int32_t k_two_src[8] = {5, 0, 0, 194, 0, 0, 257, 1};
static const int32_t k_one[4] = {0, 333, 0, 0};
static const int32_t k_none[4] = {0, 0, 0, 0};

typedef struct {
    int IC, OC, n_src, n_w;
    const int32_t *counts;
} fg_case;

static int rows_of(const int32_t *counts, int G) {
    int n = 0;
    for (int g = 0; g < G; g++) n += counts[g];
    return n;
}

static void *bytes_up(ct_pool *P, const uint8_t *h, size_t n) {
    void *d = ct_poison(P, n);
    if (d && P->g->copy_h2d(P->g, d, h, n) != MG_OK) P->failed = 1;
    return d;
}

MG_TEST(cuda_fp8_cast_grouped_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const fg_case cases[] = {
        {0, 64, 1, 8, k_skew}, {0, 200, 2, 4, k_two_src}, {0, 48, 1, 4, k_one}};
    for (int k = 0; k < 3; k++) {
        for (int f = 0; f < 2; f++) {
            ct_pool P = ct_pool_of(t, gpu);
            const fg_case c = cases[k];
            const int G = c.n_src * c.n_w, rows = rows_of(c.counts, G), R = rows + FG_TAIL;
            const int cols = c.OC;
            const size_t ld = (size_t)mg_fp8_group_ld(R, G), n = (size_t)R * cols;
            float *x = ct_rand_act(&P, 500 + 10 * k + f, n, 3.0f);
            uint8_t *b = ct_host(&P, n), *bt = ct_host(&P, (size_t)cols * ld);
            float scale = (f ? 57344.0f : 448.0f) / 12.0f, sinv = 0, amax = 0;
            int32_t *d_counts = ct_up_i32(&P, c.counts, G);
            void *d_x = ct_up_act(&P, x, n);
            uint8_t *d_b = ct_poison(&P, n), *d_bt = ct_poison(&P, (size_t)cols * ld);
            float *d_scale = ct_up_f32(&P, &scale, 1), *d_sinv = ct_up_f32(&P, &sinv, 1);
            float *d_amax = ct_up_f32(&P, &amax, 1);
            if (P.failed) {
                ct_pool_free(&P);
                return;
            }
            memset(bt, 0, (size_t)cols * ld);
            MG_EXPECT_OK(cpu->fp8_cast_grouped(cpu, b, bt, x, c.counts, G, R, cols, &scale, &sinv,
                                               &amax, f));
            MG_EXPECT_OK(gpu->fp8_cast_grouped(gpu, d_b, d_bt, d_x, d_counts, G, R, cols, d_scale,
                                               d_sinv, d_amax, f));
            const uint8_t *gb = ct_down_raw(&P, d_b, n), *gbt = ct_down_raw(&P, d_bt, cols * ld);
            if (!gb || !gbt) break;
            CT_EXPECT_SAME_BITS(gb, b, (size_t)rows * cols, "grouped cast case %d format %d: rows",
                                k, f);
            int tail_ok = 1;
            for (size_t i = (size_t)rows * cols; i < n; i++) tail_ok &= gb[i] == 0xff;
            MG_EXPECT(tail_ok, "grouped cast case %d: wrote rows past the groups", k);
            size_t col = 0, bad = 0;
            for (int g = 0; g < G; g++) { /* the group's columns of every transposed row */
                for (int j = 0; j < cols; j++)
                    bad += memcmp(gbt + (size_t)j * ld + col, bt + (size_t)j * ld + col,
                                  (size_t)c.counts[g]) != 0;
                col += ((size_t)c.counts[g] + 15) / 16 * 16;
            }
            MG_EXPECT(bad == 0, "grouped cast case %d format %d: %zu transposed group rows differ",
                      k, f, bad);
            CT_EXPECT_SAME_BITS(ct_down_f32(&P, d_amax, 1), &amax, 4, "grouped cast %d: amax", k);
            CT_EXPECT_SAME_BITS(ct_down_f32(&P, d_sinv, 1), &sinv, 4, "grouped cast %d: sinv", k);
            ct_pool_free(&P);
        }
    }
}

/* The bytes of x (R, cols) in groups, rows and grouped transpose, on both backends. */
typedef struct {
    mg_fp8_tensor cpu, gpu;
} fg_pair;

static fg_pair grouped_operand(ct_pool *P, mg_backend *cpu, const float *x, const int32_t *counts,
                               int G, int R, int cols, float s, int format) {
    fg_pair o;
    memset(&o, 0, sizeof o);
    size_t n = (size_t)R * cols, nt = (size_t)cols * mg_fp8_group_ld(R, G);
    uint8_t *b = ct_host(P, n), *bt = ct_host(P, nt);
    float *sinv = ct_host(P, sizeof(float));
    if (P->failed) return o;
    memset(b, 0, n);
    memset(bt, 0, nt);
    (void)cpu->fp8_cast_grouped(cpu, b, bt, x, counts, G, R, cols, &s, sinv, NULL, format);
    o.cpu = (mg_fp8_tensor){b, bt, sinv, format, MG_FP8_SCALE_TENSOR, NULL};
    o.gpu = (mg_fp8_tensor){bytes_up(P, b, n),     bytes_up(P, bt, nt),
                            ct_up_f32(P, sinv, 1), format,
                            MG_FP8_SCALE_TENSOR,   NULL};
    return o;
}

/* n_w experts' weights (OC, IC) with one scale: every expert's bytes, then every transpose,
 * stride bytes apart, on both backends. */
static fg_pair expert_weights(ct_pool *P, mg_backend *cpu, const float *w, int n_w, int OC, int IC,
                              size_t stride, float s) {
    fg_pair o;
    memset(&o, 0, sizeof o);
    size_t all = 2 * (size_t)n_w * stride;
    uint8_t *b = ct_host(P, all);
    float *sinv = ct_host(P, sizeof(float));
    if (P->failed) return o;
    memset(b, 0, all);
    for (int j = 0; j < n_w; j++)
        (void)cpu->fp8_cast(cpu, b + j * stride, b + (n_w + j) * stride, w + (size_t)j * OC * IC,
                            OC, IC, &s, sinv, NULL, MG_FP8_E4M3, NULL, NULL);
    uint8_t *d = bytes_up(P, b, all);
    o.cpu = (mg_fp8_tensor){b, b + n_w * stride, sinv, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    o.gpu = (mg_fp8_tensor){d,           d ? d + n_w * stride : NULL, ct_up_f32(P, sinv, 1),
                            MG_FP8_E4M3, MG_FP8_SCALE_TENSOR,         NULL};
    return o;
}

MG_TEST(cuda_fp8_grouped_linear_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    if (!gpu->fp8_grouped_linear_forward) { /* absent: only without CUTLASS's bf16 kernels */
        MG_EXPECT(gpu->compute_dtype != MG_BF16 ||
                      !mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(gpu)->device),
                  "the fp8 grouped GEMM is absent, but CUTLASS's kernels are there");
        MG_EXPECT(!gpu->fp8_grouped_linear_backward, "the fp8 grouped backward without forward");
        return;
    }
    { /* widths Hopper's fp8 GEMMs cannot take: a clear refusal before anything runs */
        const mg_fp8_tensor none = {NULL, NULL, NULL, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
        mg_status st =
            gpu->fp8_grouped_linear_forward(gpu, NULL, &none, &none, 0, NULL, NULL, 1, 1, 24, 32);
        MG_EXPECT(st == MG_ERR_UNSUPPORTED && strstr(mg_error_message(), "multiples of 16"),
                  "fp8 grouped forward with 24 inputs: status %d (%s)", st, mg_error_message());
        mg_error_clear();
    }
    static const fg_case cases[] = {{64, 96, 1, 8, k_skew},
                                    {256, 384, 2, 4, k_two_src},
                                    {2304, 128, 1, 8, k_skew},
                                    {128, 2112, 2, 4, k_two_src},
                                    {64, 96, 2, 2, k_none}};
    for (int k = 0; k < 5; k++) {
        ct_pool P = ct_pool_of(t, gpu);
        const fg_case c = cases[k];
        const int G = c.n_src * c.n_w, rows = rows_of(c.counts, G), R = rows + FG_TAIL;
        const size_t ni = (size_t)R * c.IC, no = (size_t)R * c.OC, nw = (size_t)c.OC * c.IC;
        const size_t stride = (nw + 255) / 256 * 256;
        const uint32_t id = 600 + 10 * (uint32_t)k;
        float *x = ct_rand_act(&P, id, ni, 1.0f), *dy = ct_rand_act(&P, id + 1, no, 1e-3f);
        float *w = ct_rand_act(&P, id + 2, nw * c.n_w, 1.0f / sqrtf((float)c.IC));
        float *b = ct_rand_act(&P, id + 3, (size_t)c.OC * c.n_w, 0.5f);
        float *pre = ct_rand_act(&P, id + 4, ni, 2.0f);
        float *dw0 = ct_uniform_f32(&P, id + 5, nw * c.n_w, -1.0f, 1.0f);
        float *db0 = ct_uniform_f32(&P, id + 6, (size_t)c.OC * c.n_w, -1.0f, 1.0f);
        int32_t *d_counts = ct_up_i32(&P, c.counts, G);
        fg_pair fx = grouped_operand(&P, cpu, x, c.counts, G, R, c.IC, 448.0f / 4.5f, MG_FP8_E4M3);
        fg_pair fw = expert_weights(&P, cpu, w, c.n_w, c.OC, c.IC, stride, 448.0f / 0.25f);
        void *hb[FG_MAX_W], *hdw[FG_MAX_W], *hdb[FG_MAX_W], *bb[FG_MAX_W], *dwb[FG_MAX_W],
            *dbb[FG_MAX_W];
        float *ref_dw = ct_host(&P, nw * c.n_w * 4),
              *ref_db = ct_host(&P, (size_t)c.OC * c.n_w * 4);
        void *const *d_b = ct_up_ptrs(&P, b, c.n_w, c.OC, 0, bb);
        float *const *d_dw = (float *const *)ct_up_ptrs(&P, dw0, c.n_w, nw, 1, dwb);
        float *const *d_db = (float *const *)ct_up_ptrs(&P, db0, c.n_w, c.OC, 1, dbb);
        void *d_dy = ct_up_act(&P, dy, no), *d_pre = ct_up_act(&P, pre, ni);
        float *ref = ct_host(&P, no * 4), *ref_dinp = ct_host(&P, ni * 4);
        float *nan_w = ct_host(&P, nw * 4);
        if (P.failed) {
            ct_pool_free(&P);
            break;
        }
        for (size_t i = 0; i < nw; i++) nan_w[i] = NAN;
        for (int j = 0; j < c.n_w; j++) {
            hb[j] = b + (size_t)j * c.OC;
            hdw[j] = ref_dw + j * nw, hdb[j] = ref_db + (size_t)j * c.OC;
        }
        /* the forward with bias */
        void *d_out = ct_poison_act(&P, no);
        MG_EXPECT_OK(gpu->fp8_grouped_linear_forward(gpu, d_out, &fx.gpu, &fw.gpu, stride, d_b,
                                                     d_counts, c.n_src, c.n_w, c.IC, c.OC));
        MG_EXPECT_OK(cpu->fp8_grouped_linear_forward(cpu, ref, &fx.cpu, &fw.cpu, stride, hb,
                                                     c.counts, c.n_src, c.n_w, c.IC, c.OC));
        CT_EXPECT_CLOSE(ct_down_act(&P, d_out, (size_t)rows * c.OC), ref, (size_t)rows * c.OC,
                        FP8_TOL, "fp8 grouped forward case %d IC=%d OC=%d", k, c.IC, c.OC);
        /* the backward: v bit 0 the gradient's format (e5m2), bit 1 the GELU, 4: written over */
        for (int v = 0; v < 5 && !P.failed; v++) {
            ct_pool Q = ct_pool_of(t, gpu);
            const int f = v & 1, gelu = (v >> 1) & 1, acc = v < 4;
            fg_pair fd = grouped_operand(&Q, cpu, dy, c.counts, G, R, c.OC,
                                         (f ? 57344.0f : 448.0f) / 5e-3f, f);
            void *d_dinp = ct_poison_act(&Q, ni);
            for (int j = 0; j < c.n_w; j++) {
                ct_put_f32(&Q, dwb[j], acc ? dw0 + j * nw : nan_w, nw);
                ct_put_f32(&Q, dbb[j], acc ? db0 + (size_t)j * c.OC : nan_w, c.OC);
            }
            if (Q.failed) {
                ct_pool_free(&Q);
                break;
            }
            memcpy(ref_dw, dw0, nw * c.n_w * 4);
            memcpy(ref_db, db0, (size_t)c.OC * c.n_w * 4);
            MG_EXPECT_OK(gpu->fp8_grouped_linear_backward(
                gpu, d_dinp, d_dw, d_db, d_dy, &fd.gpu, &fx.gpu, &fw.gpu, stride,
                gelu ? d_pre : NULL, d_counts, c.n_src, c.n_w, R, c.IC, c.OC, acc));
            MG_EXPECT_OK(cpu->fp8_grouped_linear_backward(
                cpu, ref_dinp, (float *const *)hdw, (float *const *)hdb, dy, &fd.cpu, &fx.cpu,
                &fw.cpu, stride, gelu ? pre : NULL, c.counts, c.n_src, c.n_w, R, c.IC, c.OC, acc));
            CT_EXPECT_CLOSE(ct_down_act(&Q, d_dinp, (size_t)rows * c.IC), ref_dinp,
                            (size_t)rows * c.IC, CT_TOL_GEMM, "fp8 grouped dinp case %d v%d", k, v);
            for (int j = 0; j < c.n_w; j++) {
                /* accumulated onto values of 1: fp32's tolerance of that growth; written over:
                 * the product's own (the precise fp8 accumulation sums a few K-blocks before it
                 * promotes to fp32) */
                CT_EXPECT_CLOSE(ct_down_f32(&Q, dwb[j], nw), ref_dw + j * nw, nw,
                                acc ? CT_TOL_F32 : CT_TOL_GEMM, "fp8 grouped dw[%d] case %d v%d", j,
                                k, v);
                CT_EXPECT_CLOSE(ct_down_f32(&Q, dbb[j], c.OC), ref_db + (size_t)j * c.OC, c.OC,
                                CT_TOL_F32, "fp8 grouped dbias[%d] case %d v%d", j, k, v);
            }
            ct_pool_free(&Q);
        }
        ct_pool_free(&P);
    }
}
