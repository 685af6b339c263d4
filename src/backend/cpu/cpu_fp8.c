/* fp8 on the CPU backend (backend_ops.h): the reference every CUDA fp8 op is tested against. The
 * casts of core/fp8.h on fp32 values and the recipe of core/fp8_scaling.h; a linear on fp8
 * operands decodes them (the fp8 value times scale_inv, exact in fp32 but for that product) into
 * the scratch buffer and runs the fp32 linear there: an fp8 GEMM with fp32 accumulation, up to the
 * place where the scales are applied. */
#include "backend/cpu/cpu_ops.h"

#include "core/fp8.h"
#include "core/fp8_block.h"
#include "core/fp8_scaling.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Rows [0, rows) of in (cols wide) times s, cast: row-major into out (NULL: not written), and
 * transposed into out_t (NULL: not written) at column col0 of rows ld wide; the magnitudes'
 * maximum into *m (NaN wins). */
static void cast_rows(uint8_t *out, uint8_t *out_t, size_t ld, size_t col0, const float *in,
                      int rows, int cols, float s, mg_fp8_format f, float *m) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            size_t at = (size_t)i * cols + j;
            float v = in[at], a = fabsf(v);
            *m = mg_fp8_amax_max(*m, a);
            if (!out && !out_t) continue;
            uint8_t q = mg_fp8_from_f32(v * s, f, true);
            if (out) out[at] = q;
            if (out_t) out_t[(size_t)j * ld + col0 + i] = q;
        }
}

/* scale_inv and the amax of a cast whose magnitudes' maximum was m. */
static void cast_done(const float *scale, float *scale_inv, float *amax, float m) {
    if (scale_inv) *scale_inv = 1.0f / scale[0];
    if (amax) *amax = mg_fp8_amax_max(*amax, m);
}

mg_status mg_cpu_fp8_cast(mg_backend *be, uint8_t *out, uint8_t *out_t, const void *in, int rows,
                          int cols, const float *scale, float *scale_inv, float *amax, int format,
                          const void *gelu_pre, float *dbias) {
    float m = 0.0f;
    if (gelu_pre && rows > 0 && cols > 0) { /* gelu_backward's values, in the scratch buffer */
        size_t n = (size_t)rows * cols;
        void *g = NULL;
        MG_CHECK(mg_cpu_scratch(be, n * sizeof(float), &g));
        MG_CHECK(mg_cpu_gelu_backward(be, g, gelu_pre, in, n));
        in = g;
    }
    cast_rows(out, out_t, (size_t)rows, 0, in, rows, cols, scale[0], (mg_fp8_format)format, &m);
    cast_done(scale, scale_inv, amax, m);
    for (int b = 0; dbias && rows > 0 && b < (cols + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK; b++)
        mg_cpu_dbias_block(dbias, in, rows, cols, b);
    return MG_OK;
}

mg_status mg_cpu_fp8_cast_blocks(mg_backend *be, uint8_t *out, float *scale_inv, uint8_t *out_t,
                                 float *scale_inv_t, const void *in, int rows, int cols, bool tiles,
                                 int format, bool pow2) {
    (void)be;
    const float *x = in; /* the cpu backend computes in fp32 */
    const mg_fp8_format f = (mg_fp8_format)format;
    if (rows <= 0 || cols <= 0) return MG_OK;
    if (!tiles) {
        if (out) mg_fp8_block_rows(out, scale_inv, x, rows, cols, f, pow2);
        if (out_t) mg_fp8_block_cols(out_t, scale_inv_t, x, rows, cols, f, pow2);
        return MG_OK;
    }
    if (!out) return MG_FAIL(MG_ERR_INTERNAL, "fp8_cast_blocks: tiles without their bytes");
    mg_fp8_block_tiles(out, scale_inv, out_t ? scale_inv_t : NULL, x, rows, cols, f, pow2);
    for (int i = 0; out_t && i < rows; i++)
        for (int j = 0; j < cols; j++) out_t[(size_t)j * rows + i] = out[(size_t)i * cols + j];
    return MG_OK;
}

mg_status mg_cpu_fp8_transpose(mg_backend *be, uint8_t *out, uint8_t *out_t, const uint8_t *in,
                               int rows, int cols, const float *scale, float *scale_inv) {
    (void)be;
    if (scale_inv) *scale_inv = 1.0f / scale[0];
    if (out && out != in) memcpy(out, in, (size_t)rows * (size_t)cols);
    for (int i = 0; out_t && i < rows; i++)
        for (int j = 0; j < cols; j++) out_t[(size_t)j * rows + i] = in[(size_t)i * cols + j];
    return MG_OK;
}

/* The rows of the groups in all; MG_ERR_INTERNAL past R. */
static mg_status group_rows(const int32_t *counts, int G, int R, const char *op, int *rows) {
    int64_t n = 0;
    for (int g = 0; g < G; g++) n += counts[g] > 0 ? counts[g] : 0;
    if (n > R)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: the groups hold %lld rows, the buffer %d", op,
                       (long long)n, R);
    *rows = (int)n;
    return MG_OK;
}

mg_status mg_cpu_fp8_cast_grouped(mg_backend *be, uint8_t *out, uint8_t *out_t, const void *in,
                                  const int32_t *counts, int G, int R, int cols, const float *scale,
                                  float *scale_inv, float *amax, int format) {
    (void)be;
    int rows = 0;
    MG_CHECK(group_rows(counts, G, R, "fp8_cast_grouped", &rows));
    const size_t ld = (size_t)mg_fp8_group_ld(R, G);
    const float *x = in;
    float m = 0.0f;
    size_t row = 0, col = 0;
    for (int g = 0; g < G; g++) {
        int n = counts[g] > 0 ? counts[g] : 0;
        cast_rows(out ? out + row * cols : NULL, out_t, ld, col, x + row * cols, n, cols, scale[0],
                  (mg_fp8_format)format, &m);
        row += (size_t)n;
        col += (size_t)mg_fp8_group_cols(n);
    }
    cast_done(scale, scale_inv, amax, m);
    return MG_OK;
}

/* The scale inverse of element (i, j) of an operand (rows, cols), read from its row-major form
 * or (transposed) from its transposed one (mg_fp8_tensor's scalings). */
static float scale_inv_at(const mg_fp8_tensor *t, int rows, int cols, int i, int j,
                          bool transposed) {
    const int B = MG_FP8_BLOCK;
    switch (t->block) {     /* core/fp8_block.h's layouts */
    case MG_FP8_SCALE_ROWS: /* data_t: run j (a column), block i / B */
        return transposed ? t->scale_inv_t[mg_fp8_block_at(cols, j, i / B)]
                          : t->scale_inv[mg_fp8_block_at(rows, i, j / B)];
    case MG_FP8_SCALE_TILES: /* data_t's grid: tile (j / B, i / B) of the (cols, rows) transpose */
        return transposed ? t->scale_inv_t[mg_fp8_tile_at(rows, j / B, i / B)]
                          : t->scale_inv[mg_fp8_tile_at(cols, i / B, j / B)];
    default:
        return t->scale_inv[0];
    }
}

/* The values of an operand's bytes (rows, cols) into to (rows, cols): from its row-major bytes,
 * or (transposed = true) from its transposed ones. */
static void decode(float *to, const mg_fp8_tensor *t, int rows, int cols, bool transposed) {
    const mg_fp8_format f = (mg_fp8_format)t->format;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            uint8_t q =
                transposed ? t->data_t[(size_t)j * rows + i] : t->data[(size_t)i * cols + j];
            to[(size_t)i * cols + j] =
                mg_fp8_to_f32(q, f) * scale_inv_at(t, rows, cols, i, j, transposed);
        }
}

/* Scratch for two operands' values, (a) and (b) floats, and (table not NULL) a table of n_ptr
 * pointers after them. */
static mg_status buffers(mg_backend *be, size_t a, size_t b, int n_ptr, float **pa, float **pb,
                         void ***table) {
    size_t a_pad = (a + 63) & ~(size_t)63, b_pad = (b + 63) & ~(size_t)63;
    size_t ptr_floats = ((size_t)n_ptr * sizeof(void *) + sizeof(float) - 1) / sizeof(float);
    void *s = NULL;
    MG_CHECK(mg_cpu_scratch(be, (a_pad + b_pad + ptr_floats) * sizeof(float), &s));
    *pa = s;
    *pb = (float *)s + a_pad;
    if (table) *table = (void **)((float *)s + a_pad + b_pad); /* 256-byte aligned */
    return MG_OK;
}

mg_status mg_cpu_fp8_linear_forward(mg_backend *be, void *out, void *gelu_pre,
                                    const mg_fp8_tensor *inp, const mg_fp8_tensor *w,
                                    const void *bias, const void *residual, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return MG_OK;
    size_t ni = (size_t)N * (IC > 0 ? IC : 0), nw = (size_t)OC * (IC > 0 ? IC : 0);
    float *xi = NULL, *xw = NULL;
    MG_CHECK(buffers(be, ni, nw, 0, &xi, &xw, NULL));
    decode(xi, inp, N, IC, false);
    decode(xw, w, OC, IC, false);
    if (gelu_pre) return mg_cpu_linear_gelu_forward(be, out, gelu_pre, xi, xw, bias, N, IC, OC);
    return mg_cpu_linear_forward(be, out, xi, xw, bias, residual, N, IC, OC);
}

mg_status mg_cpu_fp8_linear_backward(mg_backend *be, void *dinp, float *dw, float *dbias,
                                     const void *dout, const mg_fp8_tensor *dout8,
                                     const mg_fp8_tensor *inp, const mg_fp8_tensor *w,
                                     const void *gelu_pre, int N, int IC, int OC) {
    if (N <= 0) return MG_OK;
    if (OC > 0 && dbias) /* from the gradient itself, not its fp8 bytes */
        MG_CHECK(mg_cpu_linear_backward(be, NULL, NULL, dbias, dout, NULL, NULL, NULL, N, 0, OC));
    if (IC <= 0 || OC <= 0)
        return mg_cpu_linear_backward(be, dinp, dw, NULL, dout, NULL, NULL, NULL, N, IC, OC);
    size_t nd = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *xd = NULL, *rest = NULL;
    MG_CHECK(buffers(be, nd, ni + nw, 0, &xd, &rest, NULL));
    float *xi = rest, *xw = rest + ni;
    /* the gradient's values once (its row-major and transposed bytes are the same values; the
     * CUDA test holds the transposes to the CPU's bytes), the weight's and input's from the
     * transposes the products read */
    decode(xd, dout8, N, OC, dout8->data == NULL);
    if (dinp) {
        decode(xw, w, OC, IC, true);
        MG_CHECK(mg_cpu_linear_backward(be, dinp, NULL, NULL, xd, NULL, xw, gelu_pre, N, IC, OC));
    }
    if (!dw) return MG_OK;
    /* blocks along rows: the transposed form is a cast of its own (other blocks), which the
     * weight gradient's product reads */
    if (dout8->block == MG_FP8_SCALE_ROWS && dout8->data) decode(xd, dout8, N, OC, true);
    decode(xi, inp, N, IC, true);
    return mg_cpu_linear_backward(be, NULL, dw, NULL, xd, xi, NULL, NULL, N, IC, OC);
}

/* The values of a grouped transpose t->data_t (cols, ld; fp8_cast_grouped's) into to (rows of
 * the groups, cols). */
static void decode_grouped(float *to, const mg_fp8_tensor *t, const int32_t *counts, int G,
                           size_t ld, int cols) {
    const float si = t->scale_inv[0];
    const mg_fp8_format f = (mg_fp8_format)t->format;
    size_t row = 0, col = 0;
    for (int g = 0; g < G; g++) {
        size_t n = counts[g] > 0 ? (size_t)counts[g] : 0;
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < cols; j++)
                to[(row + i) * cols + j] =
                    mg_fp8_to_f32(t->data_t[(size_t)j * ld + col + i], f) * si;
        row += n;
        col += (size_t)mg_fp8_group_cols((int64_t)n);
    }
}

/* The values of the n_w weights' bytes (OC, IC), wstride apart: from their row-major bytes, or
 * (transposed) from their transposes; to[j] = the floats of weight j (OC, IC), in xw. */
static void decode_weights(float *xw, void **to, const mg_fp8_tensor *w, size_t wstride, int n_w,
                           int OC, int IC, bool transposed) {
    for (int j = 0; j < n_w; j++) {
        mg_fp8_tensor wj = *w;
        if (transposed)
            wj.data_t += (size_t)j * wstride;
        else
            wj.data += (size_t)j * wstride;
        to[j] = xw + (size_t)j * OC * IC;
        decode(to[j], &wj, OC, IC, transposed);
    }
}

mg_status mg_cpu_fp8_grouped_linear_forward(mg_backend *be, void *out, const mg_fp8_tensor *inp,
                                            const mg_fp8_tensor *w, size_t wstride,
                                            void *const *bias, const int32_t *counts, int n_src,
                                            int n_w, int IC, int OC) {
    int rows = 0;
    MG_CHECK(group_rows(counts, n_src * n_w, INT32_MAX, "fp8_grouped_linear_forward", &rows));
    if (rows == 0 || OC <= 0) return MG_OK; /* (a receive budget's round may bring no rows) */
    if (IC <= 0)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_grouped_linear_forward: %d input columns", IC);
    size_t ni = (size_t)rows * IC, nw = (size_t)n_w * OC * IC;
    float *xi = NULL, *xw = NULL;
    void **wp = NULL;
    MG_CHECK(buffers(be, ni, nw, n_w, &xi, &xw, &wp));
    decode(xi, inp, rows, IC, false);
    decode_weights(xw, wp, w, wstride, n_w, OC, IC, false);
    return mg_cpu_grouped_linear_forward(be, out, xi, wp, bias, counts, n_src, n_w, IC, OC);
}

mg_status mg_cpu_fp8_grouped_linear_backward(mg_backend *be, void *dinp_, float *const *dw,
                                             float *const *dbias, const void *dout_,
                                             const mg_fp8_tensor *dout8, const mg_fp8_tensor *inp,
                                             const mg_fp8_tensor *w, size_t wstride,
                                             const void *gelu_pre_, const int32_t *counts,
                                             int n_src, int n_w, int R, int IC, int OC,
                                             bool accumulate) {
    const int G = n_src * n_w;
    float *dinp = dinp_;
    const float *dout = dout_, *gelu_pre = gelu_pre_;
    int rows = 0;
    MG_CHECK(group_rows(counts, G, R, "fp8_grouped_linear_backward", &rows));
    for (int j = 0; !accumulate && j < n_w; j++) { /* written over: from zero */
        if (dw) memset(dw[j], 0, (size_t)OC * (size_t)IC * sizeof(float));
        if (dbias) memset(dbias[j], 0, (size_t)OC * sizeof(float));
    }
    /* the bias gradient from the gradient itself, not its fp8 bytes */
    for (int g = 0, row = 0; dbias && OC > 0 && g < G; row += counts[g++])
        MG_CHECK(mg_cpu_linear_backward(be, NULL, NULL, dbias[g % n_w], dout + (size_t)row * OC,
                                        NULL, NULL, NULL, counts[g], 0, OC));
    if (rows == 0 || (!dinp && !dw)) return MG_OK;
    if (IC <= 0 || OC <= 0) { /* no depth: dinp = 0 */
        if (dinp) memset(dinp, 0, (size_t)rows * (IC > 0 ? IC : 0) * sizeof(float));
        return MG_OK;
    }
    const size_t ld = (size_t)mg_fp8_group_ld(R, G);
    size_t nd = (size_t)rows * OC, ni = (size_t)rows * IC, nw = (size_t)n_w * OC * IC;
    float *xd = NULL, *rest = NULL;
    void **wp = NULL;
    MG_CHECK(buffers(be, nd, ni + nw, n_w, &xd, &rest, &wp));
    float *xi = rest, *xw = rest + ni;
    /* the gradient's values once: its rows' bytes where there are, else its grouped transpose's
     * (the same bytes: the CUDA test holds them to these) */
    if (dout8->data)
        decode(xd, dout8, rows, OC, false);
    else
        decode_grouped(xd, dout8, counts, G, ld, OC);
    if (dinp) {
        decode_weights(xw, wp, w, wstride, n_w, OC, IC, true);
        for (int g = 0, row = 0; g < G; row += counts[g++])
            MG_CHECK(mg_cpu_linear_backward(
                be, dinp + (size_t)row * IC, NULL, NULL, xd + (size_t)row * OC, NULL, wp[g % n_w],
                gelu_pre ? gelu_pre + (size_t)row * IC : NULL, counts[g], IC, OC));
    }
    if (!dw) return MG_OK;
    decode_grouped(xi, inp, counts, G, ld, IC);
    for (int g = 0, row = 0; g < G; row += counts[g++])
        MG_CHECK(mg_cpu_linear_backward(be, NULL, dw[g % n_w], NULL, xd + (size_t)row * OC,
                                        xi + (size_t)row * IC, NULL, NULL, counts[g], IC, OC));
    return MG_OK;
}

mg_status mg_cpu_fp8_update(mg_backend *be, float *state, int n, int len, int margin, int algo,
                            float max_fwd, float max_bwd) {
    (void)be;
    float *amax = state, *scale = state + n, *hist = state + 2 * (size_t)n;
    for (int t = 0; t < n; t++) {
        float *h = hist + (size_t)t * len;
        h[0] = amax[t];
        amax[t] = 0.0f;
        scale[t] = mg_fp8_delayed_update(h, len, scale[t], t % 3 == 2 ? max_bwd : max_fwd, margin,
                                         (mg_fp8_amax_algo)algo);
    }
    return MG_OK;
}
