/* LayerNorm and RMSNorm over the last dimension. Row statistics are computed in double (cheap next
 * to the GEMMs around them) and stored as fp32, as the contract asks. Backward computes dx row by
 * row (parallel over rows) and the weight/bias gradients column block by column block, each
 * column summed over rows in order, so results do not depend on the thread count.
 * Loops carry `omp simd`: a row sum becomes a few interleaved partial sums (a fixed order for a
 * given build), while a column-block loop vectorises across independent columns and reorders
 * nothing. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

mg_status mg_cpu_layernorm_forward(mg_backend *be, void *out_, float *mean, float *rstd,
                                   const void *x_, const void *w_, const void *b_, int N, int H,
                                   float eps) {
    float *out = out_;   // (N, H)
    const float *x = x_; // (N, H)
    const float *w = w_; // (H)
    const float *b = b_; // (H) or NULL; mean, rstd (N)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * H;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < H; j++) s += xi[j];
        double m = s / H;
        double v = 0;
#pragma omp simd reduction(+ : v)
        for (int j = 0; j < H; j++) {
            double d = xi[j] - m;
            v += d * d;
        }
        float mf = (float)m;
        float rf = (float)(1.0 / sqrt(v / H + eps));
        float *oi = out + (size_t)i * H;
        if (b) {
#pragma omp simd
            for (int j = 0; j < H; j++) oi[j] = ((xi[j] - mf) * rf) * w[j] + b[j];
        } else {
#pragma omp simd
            for (int j = 0; j < H; j++) oi[j] = ((xi[j] - mf) * rf) * w[j] + 0.0f;
        }
        mean[i] = mf;
        rstd[i] = rf;
    }
    return MG_OK;
}

mg_status mg_cpu_layernorm_backward(mg_backend *be, void *dx_, float *dw, float *db,
                                    const void *dout_, const void *x_, const void *w_,
                                    const float *mean, const float *rstd, int N, int H) {
    float *dx = dx_;           // (N, H), accumulated
    const float *dout = dout_; // (N, H)
    const float *x = x_;       // (N, H)
    const float *w = w_;       // (H); dw, db (H) accumulated; mean, rstd (N)
    /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * H, *di = dout + (size_t)i * H;
        float mf = mean[i], rf = rstd[i];
        double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int j = 0; j < H; j++) {
            float g = di[j] * w[j];
            float xh = (xi[j] - mf) * rf;
            sg += g;
            sgx += (double)g * xh;
        }
        float mg = (float)(sg / H), mgx = (float)(sgx / H);
        float *dxi = dx + (size_t)i * H;
#pragma omp simd
        for (int j = 0; j < H; j++) {
            float g = di[j] * w[j];
            float xh = (xi[j] - mf) * rf;
            dxi[j] += rf * (g - mg - xh * mgx);
        }
    }
    int nblocks = (H + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int j0 = blk * MG_CPU_COL_BLOCK;
        int j1 = j0 + MG_CPU_COL_BLOCK < H ? j0 + MG_CPU_COL_BLOCK : H;
        double aw[MG_CPU_COL_BLOCK], ab[MG_CPU_COL_BLOCK];
        memset(aw, 0, sizeof aw);
        memset(ab, 0, sizeof ab);
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * H, *di = dout + (size_t)i * H;
            float mf = mean[i], rf = rstd[i];
#pragma omp simd
            for (int j = j0; j < j1; j++) {
                float xh = (xi[j] - mf) * rf;
                aw[j - j0] += (double)di[j] * xh;
                ab[j - j0] += di[j];
            }
        }
        for (int j = j0; j < j1; j++) {
            dw[j] += (float)aw[j - j0];
            if (db) db[j] += (float)ab[j - j0];
        }
    }
    return MG_OK;
}

mg_status mg_cpu_rmsnorm_forward(mg_backend *be, void *out_, float *rstd, const void *x_,
                                 const void *w_, int N, int H, float eps) {
    float *out = out_;   // (N, H)
    const float *x = x_; // (N, H)
    const float *w = w_; // (H); rstd (N)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * H;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < H; j++) ss += (double)xi[j] * xi[j];
        float rf = (float)(1.0 / sqrt(ss / H + eps));
        float *oi = out + (size_t)i * H;
#pragma omp simd
        for (int j = 0; j < H; j++) oi[j] = (xi[j] * rf) * w[j];
        rstd[i] = rf;
    }
    return MG_OK;
}

mg_status mg_cpu_rmsnorm_backward(mg_backend *be, void *dx_, float *dw, const void *dout_,
                                  const void *x_, const void *w_, const float *rstd, int N, int H) {
    float *dx = dx_;           // (N, H), accumulated
    const float *dout = dout_; // (N, H)
    const float *x = x_;       // (N, H)
    const float *w = w_;       // (H); dw (H) accumulated; rstd (N)
    /* dx = rstd * (g - xhat * mean(g * xhat)), g = dout * w */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * H, *di = dout + (size_t)i * H;
        float rf = rstd[i];
        double sgx = 0;
#pragma omp simd reduction(+ : sgx)
        for (int j = 0; j < H; j++) sgx += (double)(di[j] * w[j]) * (xi[j] * rf);
        float mgx = (float)(sgx / H);
        float *dxi = dx + (size_t)i * H;
#pragma omp simd
        for (int j = 0; j < H; j++) {
            float g = di[j] * w[j];
            float xh = xi[j] * rf;
            dxi[j] += rf * (g - xh * mgx);
        }
    }
    int nblocks = (H + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int j0 = blk * MG_CPU_COL_BLOCK;
        int j1 = j0 + MG_CPU_COL_BLOCK < H ? j0 + MG_CPU_COL_BLOCK : H;
        double aw[MG_CPU_COL_BLOCK];
        memset(aw, 0, sizeof aw);
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * H, *di = dout + (size_t)i * H;
            float rf = rstd[i];
#pragma omp simd
            for (int j = j0; j < j1; j++) aw[j - j0] += (double)di[j] * (xi[j] * rf);
        }
        for (int j = j0; j < j1; j++) dw[j] += (float)aw[j - j0];
    }
    return MG_OK;
}
