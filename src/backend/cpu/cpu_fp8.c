/* fp8 on the CPU backend (backend_ops.h): the reference every CUDA fp8 op is tested against. The
 * casts of core/fp8.h on fp32 values and the recipe of core/fp8_scaling.h; a linear on fp8
 * operands decodes them (the fp8 value times scale_inv, exact in fp32 but for that product) into
 * the scratch buffer and runs the fp32 linear there: an fp8 GEMM with fp32 accumulation, up to the
 * place where the scales are applied. */
#include "backend/cpu/cpu_ops.h"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

#include <math.h>

mg_status mg_cpu_fp8_cast(mg_backend *be, uint8_t *out, uint8_t *out_t, const void *in, int rows,
                          int cols, const float *scale, float *scale_inv, float *amax, int format) {
    (void)be;
    const float *x = in;
    float s = scale[0], m = 0.0f;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            size_t at = (size_t)i * cols + j;
            float v = x[at], a = fabsf(v);
            if (isnan(a) || a > m || isnan(m)) m = isnan(m) ? m : a;
            if (!out && !out_t) continue;
            uint8_t q = mg_fp8_from_f32(v * s, (mg_fp8_format)format, true);
            if (out) out[at] = q;
            if (out_t) out_t[(size_t)j * rows + i] = q;
        }
    if (scale_inv) *scale_inv = 1.0f / s;
    if (amax && (isnan(m) || m > *amax || isnan(*amax))) *amax = isnan(*amax) ? *amax : m;
    return MG_OK;
}

/* The values of an operand's bytes (rows, cols) into to (rows, cols): from its row-major bytes,
 * or (transposed = true) from its transposed ones. */
static void decode(float *to, const mg_fp8_tensor *t, int rows, int cols, bool transposed) {
    const float si = t->scale_inv[0];
    const mg_fp8_format f = (mg_fp8_format)t->format;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            uint8_t q =
                transposed ? t->data_t[(size_t)j * rows + i] : t->data[(size_t)i * cols + j];
            to[(size_t)i * cols + j] = mg_fp8_to_f32(q, f) * si;
        }
}

/* Scratch for two operands' values: (a) and (b) floats. */
static mg_status two_buffers(mg_backend *be, size_t a, size_t b, float **pa, float **pb) {
    size_t a_pad = (a + 63) & ~(size_t)63;
    void *s = NULL;
    MG_CHECK(mg_cpu_scratch(be, (a_pad + b) * sizeof(float), &s));
    *pa = s;
    *pb = (float *)s + a_pad;
    return MG_OK;
}

mg_status mg_cpu_fp8_linear_forward(mg_backend *be, void *out, void *gelu_pre,
                                    const mg_fp8_tensor *inp, const mg_fp8_tensor *w,
                                    const void *bias, const void *residual, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return MG_OK;
    size_t ni = (size_t)N * (IC > 0 ? IC : 0), nw = (size_t)OC * (IC > 0 ? IC : 0);
    float *xi = NULL, *xw = NULL;
    MG_CHECK(two_buffers(be, ni, nw, &xi, &xw));
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
    MG_CHECK(two_buffers(be, nd, ni + nw, &xd, &rest));
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
    decode(xi, inp, N, IC, true);
    return mg_cpu_linear_backward(be, NULL, dw, NULL, xd, xi, NULL, NULL, N, IC, OC);
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
