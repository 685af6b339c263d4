/* Elementwise add, the bias + residual add that closes a row-parallel linear layer, and the
 * deterministic reductions used for loss averaging and gradient-norm clipping. A reduction splits
 * its input into at most MG_SUM_MAX_CHUNKS chunks whose size depends only on n; each chunk is
 * summed in order in double (in parallel), and the chunk partials are then added in chunk order. So
 * the result is bitwise the same for every thread count. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>

#define MG_SUM_MAX_CHUNKS 256
#define MG_SUM_MIN_CHUNK  4096

mg_status mg_cpu_add(mg_backend *be, void *out_, const void *a_, const void *b_, size_t n) {
    float *out = out_;            // (n)
    const float *a = a_, *b = b_; // (n)
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return MG_OK;
}

/* out = (x + bias) + residual, in that order; out may alias x (each element is read, then
 * written, by the same iteration). */
mg_status mg_cpu_bias_residual_add(mg_backend *be, void *out_, const void *x_, const void *bias_,
                                   const void *residual_, int N, int H) {
    float *out = out_;                 // (N, H)
    const float *x = x_;               // (N, H)
    const float *bias = bias_;         // (H) or NULL
    const float *residual = residual_; // (N, H) or NULL
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * H;
        const float *xi = x + (size_t)i * H, *r = residual ? residual + (size_t)i * H : NULL;
        if (bias && r)
#pragma omp simd
            for (int j = 0; j < H; j++) o[j] = (xi[j] + bias[j]) + r[j];
        else if (bias)
#pragma omp simd
            for (int j = 0; j < H; j++) o[j] = xi[j] + bias[j];
        else if (r)
#pragma omp simd
            for (int j = 0; j < H; j++) o[j] = xi[j] + r[j];
        else if (o != xi)
            memcpy(o, xi, (size_t)H * sizeof(float));
    }
    return MG_OK;
}

static size_t chunk_size(size_t n) {
    size_t c = (n + MG_SUM_MAX_CHUNKS - 1) / MG_SUM_MAX_CHUNKS;
    return c < MG_SUM_MIN_CHUNK ? MG_SUM_MIN_CHUNK : c;
}

/* sum_i x[i] * (w ? w[i] : 1) (square = 0) or sum_i x[i]^2 (square = 1), in double. */
static double reduce(const float *x, const float *w, size_t n, int square) {
    double part[MG_SUM_MAX_CHUNKS];
    size_t cs = chunk_size(n);
    int nc = (int)((n + cs - 1) / cs);
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nc; c++) {
        size_t i0 = (size_t)c * cs, i1 = i0 + cs < n ? i0 + cs : n;
        double s = 0;
        if (square)
            for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        else if (w)
            for (size_t i = i0; i < i1; i++) s += (double)x[i] * w[i];
        else
            for (size_t i = i0; i < i1; i++) s += x[i];
        part[c] = s;
    }
    double total = 0;
    for (int c = 0; c < nc; c++) total += part[c];
    return total;
}

mg_status mg_cpu_sum_f32(mg_backend *be, float *out, const float *x, const float *w, size_t n,
                         float scale) {
    // out (1), accumulated; x, w (n)
    *out = (float)((double)*out + (double)scale * reduce(x, w, n, 0));
    return MG_OK;
}

mg_status mg_cpu_sumsq_f32(mg_backend *be, float *out, const float *x, size_t n,
                           const float *unscale) {
    // out (1), accumulated; x (n); unscale (1) or NULL
    const double u = unscale ? (double)*unscale : 1.0, scale = u * u;
    *out = (float)((double)*out + scale * reduce(x, NULL, n, 1));
    return MG_OK;
}

mg_status mg_cpu_count_zeros_f32(mg_backend *be, int64_t *out, const float *x, size_t n) {
    // out (1), accumulated; x (n)
    int64_t zeros = 0;
#pragma omp parallel for schedule(static) reduction(+ : zeros)
    for (size_t i = 0; i < n; i++) zeros += x[i] == 0.0f;
    *out += zeros;
    return MG_OK;
}

mg_status mg_cpu_clip_coef(mg_backend *be, float *coef_out, float *norm_out, const float *sumsq,
                           float clip, const float *unscale_) {
    // coef_out, norm_out, sumsq (1); unscale (1) or NULL
    const float unscale = unscale_ ? *unscale_ : 1.0f;
    float norm = sqrtf(*sumsq);
    *norm_out = norm;
    *coef_out = !isfinite(norm)
                    ? NAN
                    : (clip > 0.0f && norm > clip ? clip / (norm + 1e-6f) : 1.0f) * unscale;
    return MG_OK;
}

mg_status mg_cpu_scale_f32(mg_backend *be, float *out, const float *x, size_t n, const float *s) {
    // out, x (n); s (1)
    const float f = *s;
    for (size_t i = 0; i < n; i++) out[i] = x[i] * f;
    return MG_OK;
}
