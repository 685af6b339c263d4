/* LayerNorm and RMSNorm over the last dimension (CPU reference: cpu/cpu_norm.c). h16 activations
 * and weights, fp32 math and statistics. One template serves both norms (LN = false: RMSNorm, mean
 * taken as 0, no bias).
 *
 * Forward and the dx half of backward: one warp per row; the row is walked 8 columns per lane at a
 * time (16-byte loads) when H % 8 == 0 and the buffers are aligned, else one column per lane. The
 * two or three passes over a row re-read it from L1/L2 (a row is 1.5-3 KB). Row sums use a fixed
 * per-lane order and a fixed butterfly, so they are deterministic. dx ACCUMULATES into the h16
 * residual gradient (read, add in fp32, round once).
 *
 * dw/db: deterministic two-stage column sums, no atomics. Rows are cut into `nchunks` chunks of R
 * rows (R depends only on N); stage 1 gives each (column tile, chunk) block a fixed order over its
 * rows (4 warps interleave rows, then their sums are added in warp order) and writes one partial
 * per chunk and column to the workspace; stage 2 adds the partials of a column in a fixed order and
 * accumulates (+=) into the fp32 dw/db. Stage 1 reads x and dout again; fusing it into the dx
 * kernel is a possible later gain (it would need per-warp column accumulators in shared memory).
 * Workspace: (1 + has_bias) * nchunks * H * 4 bytes, nchunks <= 1024 (6 MB at N = 32k, H = 768). */
#include "backend/cuda/cuda_common.cuh"

#define NORM_ROWS_PER_BLOCK 8   /* warps per block in the row kernels */
#define DW_WARPS            4   /* row-interleaved warps of a stage-1 block */
#define DW_MIN_ROWS         128 /* rows per chunk, at least */
#define DW_MAX_CHUNKS       1024
#define DW_FINAL_WARPS      8

template <typename h16, bool LN, int VEC>
static __global__ void norm_forward_kernel(h16 *out, float *mean, float *rstd, const h16 *x,
                                           const h16 *w, const h16 *b, int N, int H, float eps) {
    // out, x (N, H); mean (N) (LN only), rstd (N); w (H); b (H) or NULL
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const h16 *xr = x + (size_t)row * H;
    float m = 0.0f;
    if (LN) {
        float s = 0.0f;
        for (int c = lane * VEC; c < H; c += 32 * VEC) {
            float f[VEC];
            mg_loadv<VEC>(xr + c, f);
#pragma unroll
            for (int k = 0; k < VEC; k++) s += f[k];
        }
        m = mg_warp_sum(s) / H;
    }
    float v = 0.0f; /* LN: centred second moment (two-pass, no cancellation); RMS: mean square */
    for (int c = lane * VEC; c < H; c += 32 * VEC) {
        float f[VEC];
        mg_loadv<VEC>(xr + c, f);
#pragma unroll
        for (int k = 0; k < VEC; k++) v += (f[k] - m) * (f[k] - m);
    }
    float r = 1.0f / sqrtf(mg_warp_sum(v) / H + eps);
    h16 *orow = out + (size_t)row * H;
    for (int c = lane * VEC; c < H; c += 32 * VEC) {
        float f[VEC], fw[VEC], fb[VEC];
        mg_loadv<VEC>(xr + c, f);
        mg_loadv<VEC>(w + c, fw);
        if (LN && b) mg_loadv<VEC>(b + c, fb);
#pragma unroll
        for (int k = 0; k < VEC; k++) f[k] = ((f[k] - m) * r) * fw[k] + (LN && b ? fb[k] : 0.0f);
        mg_storev<VEC>(orow + c, f);
    }
    if (lane == 0) {
        if (LN) mean[row] = m;
        rstd[row] = r;
    }
}

/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w (RMS: no mean(g) term). */
template <typename h16, bool LN, int VEC>
static __global__ void norm_backward_dx_kernel(h16 *dx, const h16 *dout, const h16 *x, const h16 *w,
                                               const float *mean, const float *rstd, int N, int H) {
    // dx, dout, x (N, H); w (H); mean (N) (LN only), rstd (N)
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t off = (size_t)row * H;
    float m = LN ? mean[row] : 0.0f, r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane * VEC; c < H; c += 32 * VEC) {
        float fx[VEC], fd[VEC], fw[VEC];
        mg_loadv<VEC>(x + off + c, fx);
        mg_loadv<VEC>(dout + off + c, fd);
        mg_loadv<VEC>(w + c, fw);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float g = fd[k] * fw[k];
            sg += g;
            sgx += g * ((fx[k] - m) * r);
        }
    }
    float mg = LN ? mg_warp_sum(sg) / H : 0.0f, mgx = mg_warp_sum(sgx) / H;
    for (int c = lane * VEC; c < H; c += 32 * VEC) {
        float fx[VEC], fd[VEC], fw[VEC], o[VEC];
        mg_loadv<VEC>(x + off + c, fx);
        mg_loadv<VEC>(dout + off + c, fd);
        mg_loadv<VEC>(w + c, fw);
        mg_loadv<VEC>(dx + off + c, o);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float g = fd[k] * fw[k], xh = (fx[k] - m) * r;
            o[k] += r * (g - mg - xh * mgx);
        }
        mg_storev<VEC>(dx + off + c, o);
    }
}

/* Stage 1: block (column tile of 32*VEC, chunk of R rows) -> part_w/part_b[chunk, tile cols]. */
template <typename h16, bool LN, int VEC>
static __global__ void norm_dw_partial_kernel(float *part_w, float *part_b, const h16 *dout,
                                              const h16 *x, const float *mean, const float *rstd,
                                              int N, int H, int R) {
    // part_w, part_b (nchunks, H) (part_b NULL: no bias); dout, x (N, H); mean, rstd (N)
    __shared__ float sw[DW_WARPS][32 * VEC], sb[DW_WARPS][32 * VEC];
    int lane = threadIdx.x, y = threadIdx.y, chunk = blockIdx.y;
    int j = (blockIdx.x * 32 + lane) * VEC; /* VEC = 8 implies H % 8 == 0: all or none in range */
    float aw[VEC], ab[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) aw[k] = ab[k] = 0.0f;
    int r0 = chunk * R, r1 = r0 + R < N ? r0 + R : N;
    if (j < H) {
#pragma unroll 4
        for (int row = r0 + y; row < r1; row += DW_WARPS) {
            float fx[VEC], fd[VEC];
            mg_loadv<VEC>(x + (size_t)row * H + j, fx);
            mg_loadv<VEC>(dout + (size_t)row * H + j, fd);
            float m = LN ? mean[row] : 0.0f, r = rstd[row];
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                aw[k] += fd[k] * ((fx[k] - m) * r);
                ab[k] += fd[k];
            }
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sw[y][lane * VEC + k] = aw[k], sb[y][lane * VEC + k] = ab[k];
    __syncthreads();
    if (y != 0 || j >= H) return;
    for (int k = 0; k < VEC; k++) {
        float s = sw[0][lane * VEC + k], t = sb[0][lane * VEC + k];
        for (int q = 1; q < DW_WARPS; q++) s += sw[q][lane * VEC + k], t += sb[q][lane * VEC + k];
        part_w[(size_t)chunk * H + j + k] = s;
        if (part_b) part_b[(size_t)chunk * H + j + k] = t;
    }
}

/* Stage 2: block of 32 columns x DW_FINAL_WARPS warps; warp y sums chunks y, y + 8, ... in order,
 * then the warp sums are added in warp order and accumulated into dw (and db). */
static __global__ void norm_dw_final_kernel(float *dw, float *db, const float *part_w,
                                            const float *part_b, int nchunks, int H) {
    // dw, db (H) accumulated (db NULL: none); part_w, part_b (nchunks, H)
    __shared__ float sw[DW_FINAL_WARPS][32], sb[DW_FINAL_WARPS][32];
    int lane = threadIdx.x, y = threadIdx.y, j = blockIdx.x * 32 + lane;
    float s = 0.0f, t = 0.0f;
    if (j < H) {
#pragma unroll 4
        for (int c = y; c < nchunks; c += DW_FINAL_WARPS) {
            s += part_w[(size_t)c * H + j];
            if (db) t += part_b[(size_t)c * H + j];
        }
    }
    sw[y][lane] = s, sb[y][lane] = t;
    __syncthreads();
    if (y != 0 || j >= H) return;
    for (int q = 1; q < DW_FINAL_WARPS; q++) s += sw[q][lane], t += sb[q][lane];
    dw[j] += s;
    if (db) db[j] += t;
}

template <typename h16, bool LN>
static mg_status norm_backward(mg_backend *be, void *dx, float *dw, float *db, const void *dout,
                               const void *x, const void *w, const float *mean, const float *rstd,
                               int N, int H) {
    if (N <= 0 || H <= 0) return MG_OK;
    int R = (N + DW_MAX_CHUNKS - 1) / DW_MAX_CHUNKS;
    if (R < DW_MIN_ROWS) R = DW_MIN_ROWS;
    int nchunks = (N + R - 1) / R;
    size_t part = (size_t)nchunks * H; /* floats per partial array */
    float *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, (db ? 2 : 1) * part * sizeof(float), (void **)&ws,
                             LN ? "layernorm_backward" : "rmsnorm_backward"));
    float *part_w = ws, *part_b = db ? ws + part : NULL;
    cudaStream_t st = mg_cuda_stream(be);
    const h16 *d = (const h16 *)dout, *xx = (const h16 *)x, *ww = (const h16 *)w;
    bool vec = H % 8 == 0 && mg_cuda_aligned16(dx) && mg_cuda_aligned16(dout) &&
               mg_cuda_aligned16(x) && mg_cuda_aligned16(w);
    unsigned row_blocks = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    int vw = vec ? 8 : 1;
    dim3 dw_grid((unsigned)((H + 32 * vw - 1) / (32 * vw)), (unsigned)nchunks);
    if (vec) {
        norm_backward_dx_kernel<h16, LN, 8><<<row_blocks, 32 * NORM_ROWS_PER_BLOCK, 0, st>>>(
            (h16 *)dx, d, xx, ww, mean, rstd, N, H);
        MG_CUDA_CHECK_LAUNCH();
        norm_dw_partial_kernel<h16, LN, 8>
            <<<dw_grid, dim3(32, DW_WARPS), 0, st>>>(part_w, part_b, d, xx, mean, rstd, N, H, R);
    } else {
        norm_backward_dx_kernel<h16, LN, 1><<<row_blocks, 32 * NORM_ROWS_PER_BLOCK, 0, st>>>(
            (h16 *)dx, d, xx, ww, mean, rstd, N, H);
        MG_CUDA_CHECK_LAUNCH();
        norm_dw_partial_kernel<h16, LN, 1>
            <<<dw_grid, dim3(32, DW_WARPS), 0, st>>>(part_w, part_b, d, xx, mean, rstd, N, H, R);
    }
    MG_CUDA_CHECK_LAUNCH();
    norm_dw_final_kernel<<<(unsigned)((H + 31) / 32), dim3(32, DW_FINAL_WARPS), 0, st>>>(
        dw, db, part_w, part_b, nchunks, H);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template <typename h16, bool LN>
static mg_status norm_forward(mg_backend *be, void *out, float *mean, float *rstd, const void *x,
                              const void *w, const void *b, int N, int H, float eps) {
    if (N <= 0 || H <= 0) return MG_OK;
    bool vec = H % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(x) &&
               mg_cuda_aligned16(w) && (!b || mg_cuda_aligned16(b));
    unsigned blocks = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    cudaStream_t st = mg_cuda_stream(be);
    if (vec)
        norm_forward_kernel<h16, LN, 8><<<blocks, 32 * NORM_ROWS_PER_BLOCK, 0, st>>>(
            (h16 *)out, mean, rstd, (const h16 *)x, (const h16 *)w, (const h16 *)b, N, H, eps);
    else
        norm_forward_kernel<h16, LN, 1><<<blocks, 32 * NORM_ROWS_PER_BLOCK, 0, st>>>(
            (h16 *)out, mean, rstd, (const h16 *)x, (const h16 *)w, (const h16 *)b, N, H, eps);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, layernorm_forward,
               (mg_backend * be, void *out, float *mean, float *rstd, const void *x, const void *w,
                const void *b, int N, int H, float eps),
               (be, out, mean, rstd, x, w, b, N, H, eps)) {
    // out, x (N, H); mean, rstd (N); w (H); b (H) or NULL
    return norm_forward<h16, true>(be, out, mean, rstd, x, w, b, N, H, eps);
}

MG_CUDA_DTYPES(mg_status, layernorm_backward,
               (mg_backend * be, void *dx, float *dw, float *db, const void *dout, const void *x,
                const void *w, const float *mean, const float *rstd, int N, int H),
               (be, dx, dw, db, dout, x, w, mean, rstd, N, H)) {
    // dx (N, H) accumulated; dw, db (H) accumulated (db may be NULL); dout, x (N, H); w (H)
    return norm_backward<h16, true>(be, dx, dw, db, dout, x, w, mean, rstd, N, H);
}

MG_CUDA_DTYPES(mg_status, rmsnorm_forward,
               (mg_backend * be, void *out, float *rstd, const void *x, const void *w, int N, int H,
                float eps),
               (be, out, rstd, x, w, N, H, eps)) {
    // out, x (N, H); rstd (N); w (H)
    return norm_forward<h16, false>(be, out, NULL, rstd, x, w, NULL, N, H, eps);
}

MG_CUDA_DTYPES(mg_status, rmsnorm_backward,
               (mg_backend * be, void *dx, float *dw, const void *dout, const void *x,
                const void *w, const float *rstd, int N, int H),
               (be, dx, dw, dout, x, w, rstd, N, H)) {
    // dx (N, H) accumulated; dw (H) accumulated; dout, x (N, H); w (H); rstd (N)
    return norm_backward<h16, false>(be, dx, dw, NULL, dout, x, w, NULL, rstd, N, H);
}
