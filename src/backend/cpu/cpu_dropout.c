/* Hidden dropout (Megatron's bias-dropout-add) and its backward, with the counter-based mask of
 * core/dropout.h (stream or positional). A row's factors come 4 elements per Philox block: the
 * block changes when the element index s H + h crosses a multiple of 4, so each block is drawn once
 * per row it touches. Elementwise in fp32; the result does not depend on the thread count. */
#include "backend/cpu/cpu_ops.h"

#include "core/normal.h"

/* f[h] = the factor of hidden index h of the op's row i (0 or scale). */
static void row_factors(const mg_dropout *d, int i, int S, int H, float *f) {
    const mg_dropout_row row = mg_dropout_hidden_row(d, i, S, H);
    uint32_t r[4];
    for (int h = 0; h < H; h++) {
        uint64_t e = row.e0 + (uint64_t)h;
        if (h == 0 || (e & 3) == 0) mg_dropout_row_block(&row, (uint32_t)(e >> 2), r);
        f[h] = r[e & 3] >= d->threshold ? d->scale : 0.0f;
    }
}

/* Per-thread rows of factors from the backend's scratch. */
static mg_status factor_rows(mg_backend *be, int H, float **out) {
    void *p;
    MG_CHECK(mg_cpu_scratch(be, (size_t)mg_cpu_max_threads() * (size_t)H * sizeof(float), &p));
    *out = p;
    return MG_OK;
}

mg_status mg_cpu_dropout_add(mg_backend *be, void *out_, const void *x_, const void *bias_,
                             const void *residual_, int N, int H, int S, const mg_dropout *d) {
    float *out = out_;                 // (N, H)
    const float *x = x_;               // (N, H)
    const float *bias = bias_;         // (H) or NULL
    const float *residual = residual_; // (N, H)
    float *fac;
    MG_CHECK(factor_rows(be, H, &fac));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *f = fac + (size_t)mg_cpu_thread_id() * H;
        row_factors(d, i, S, H, f);
        float *o = out + (size_t)i * H;
        const float *xi = x + (size_t)i * H, *r = residual + (size_t)i * H;
#pragma omp simd
        for (int j = 0; j < H; j++) o[j] = r[j] + f[j] * (xi[j] + (bias ? bias[j] : 0.0f));
    }
    return MG_OK;
}

mg_status mg_cpu_dropout_backward(mg_backend *be, void *dx_, const void *dout_, int N, int H, int S,
                                  const mg_dropout *d) {
    float *dx = dx_;           // (N, H)
    const float *dout = dout_; // (N, H)
    float *fac;
    MG_CHECK(factor_rows(be, H, &fac));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *f = fac + (size_t)mg_cpu_thread_id() * H;
        row_factors(d, i, S, H, f);
#pragma omp simd
        for (int j = 0; j < H; j++) dx[(size_t)i * H + j] = f[j] * dout[(size_t)i * H + j];
    }
    return MG_OK;
}

mg_status mg_cpu_normal_f32(mg_backend *be, float *out, size_t n, const uint64_t *state,
                            uint64_t use) {
    (void)be;
    const uint64_t seed = state[0], off = state[1] + use;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < (n + 3) / 4; b++) {
        float z[4];
        mg_normal_block(seed, off, b, z);
        for (size_t k = 0; k < 4 && 4 * b + k < n; k++) out[4 * b + k] = z[k];
    }
    return MG_OK;
}
