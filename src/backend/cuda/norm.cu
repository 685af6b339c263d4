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
 * dw/db: deterministic column sums, no atomics (colsum.cuh's two stages). Stage 1 is fused into
 * the dx kernel: a block takes a chunk of R rows (R depends only on N: one row per warp up to
 * 4096 rows, then as many chunks as stage 2 takes, so a small batch still fills the GPU), each
 * warp adds its rows' dout * xhat (and dout) into its own shared-memory row of H floats (a lane
 * touches only its own columns, so no synchronisation until the chunk is done), then the warp
 * rows are added in warp order into one partial per (chunk, column). Stage 2 adds a column's
 * partials in a fixed order and accumulates (+=) into the fp32 dw/db. So backward reads x and dout
 * once. Where the per-warp rows would not fit in shared memory (H above MG_NORM_FUSED_MAX_SMEM / (8
 * warps * 4 or 8 bytes)), the dw/db stage 1 is a kernel of its own that reads x and dout again.
 * Workspace: (1 + has_bias) * nchunks * H * 4 bytes, nchunks <= 512 (3 MB at N = 32k, H = 768). */
#include "backend/cuda/colsum.cuh"

#define NORM_ROWS_PER_BLOCK 8  /* warps per block in the row kernels */
#define DW_WARPS            4  /* row-interleaved warps of an unfused stage-1 block */
#define DW_MIN_ROWS         64 /* rows per chunk of the unfused stage 1, at least */
/* shared memory of a fused backward block at most (8 warps x H floats, twice with a bias): up to
 * H = 2560 for LayerNorm with a bias, 5120 for RMSNorm */
#define MG_NORM_FUSED_MAX_SMEM (160u << 10)

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

/* acc[k] += v[k] for VEC consecutive floats of shared memory (16-byte aligned when VEC = 8). */
template <int VEC> static __device__ __forceinline__ void norm_acc(float *acc, const float *v) {
    if (VEC == 8) {
        float4 *a4 = reinterpret_cast<float4 *>(acc);
        float4 p = a4[0], q = a4[1];
        a4[0] = make_float4(p.x + v[0], p.y + v[1], p.z + v[2], p.w + v[3]);
        a4[1] = make_float4(q.x + v[4], q.y + v[5], q.z + v[6], q.w + v[7]);
    } else {
        acc[0] += v[0];
    }
}

/* One row of a warp: dx, and the row's dout * xhat and dout added to the warp's accumulators
 * aw/ab (NULL: none). dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w (RMS: no
 * mean(g) term). (Two rows in flight per lane measured slower on an H200: 76 against 69 us per
 * GPT-2 124M call, bench/NOTES.md 2026-11-29; the shared-memory accumulators already limit the
 * warps per multiprocessor.) */
template <typename h16, bool LN, int VEC>
static __device__ __forceinline__ void
norm_backward_row(h16 *dx, float *aw, float *ab, const h16 *dout, const h16 *x, const h16 *w,
                  const float *mean, const float *rstd, int row, int H) {
    const int lane = threadIdx.x & 31;
    const size_t off = (size_t)row * H;
    const float m = LN ? mean[row] : 0.0f, r = rstd[row];
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
    const float mg = LN ? mg_warp_sum(sg) / H : 0.0f, mgx = mg_warp_sum(sgx) / H;
    for (int c = lane * VEC; c < H; c += 32 * VEC) {
        float fx[VEC], fd[VEC], fw[VEC], o[VEC], pw[VEC];
        mg_loadv<VEC>(x + off + c, fx);
        mg_loadv<VEC>(dout + off + c, fd);
        mg_loadv<VEC>(w + c, fw);
        mg_loadv<VEC>(dx + off + c, o);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float g = fd[k] * fw[k], xh = (fx[k] - m) * r;
            o[k] += r * (g - mg - xh * mgx);
            pw[k] = fd[k] * xh;
        }
        mg_storev<VEC>(dx + off + c, o);
        if (aw) norm_acc<VEC>(aw + c, pw);
        if (ab) norm_acc<VEC>(ab + c, fd);
    }
}

/* dx alone, one warp per row (the unfused path: dw/db then come from norm_dw_partial_kernel). */
template <typename h16, bool LN, int VEC>
static __global__ void norm_backward_dx_kernel(h16 *dx, const h16 *dout, const h16 *x, const h16 *w,
                                               const float *mean, const float *rstd, int N, int H) {
    // dx, dout, x (N, H); w (H); mean (N) (LN only), rstd (N)
    int row = blockIdx.x * NORM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= N) return;
    norm_backward_row<h16, LN, VEC>(dx, NULL, NULL, dout, x, w, mean, rstd, row, H);
}

/* dx and stage 1 of dw/db: block = chunk blockIdx.x of R rows, warp w
 * takes rows r0 + w, r0 + w + 8, ... in order (header comment). Dynamic shared
 * memory: NORM_ROWS_PER_BLOCK * H floats for dw, as many again for db when part_b is not NULL. */
template <typename h16, bool LN, int VEC>
static __global__ void norm_backward_fused_kernel(h16 *dx, float *part_w, float *part_b,
                                                  const h16 *dout, const h16 *x, const h16 *w,
                                                  const float *mean, const float *rstd, int N,
                                                  int H, int R) {
    // dx, dout, x (N, H); w (H); mean (N) (LN only), rstd (N); part_w, part_b (nchunks, H)
    extern __shared__ float4 smem4[];
    float *acc = reinterpret_cast<float *>(smem4);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, chunk = blockIdx.x;
    float *aw = acc + (size_t)warp * H;
    float *ab = part_b ? acc + (size_t)(NORM_ROWS_PER_BLOCK + warp) * H : NULL;
    for (int c = lane * VEC; c < H; c += 32 * VEC)
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            aw[c + k] = 0.0f;
            if (ab) ab[c + k] = 0.0f;
        }
    const int r0 = chunk * R, r1 = min(N, r0 + R);
    for (int row = r0 + warp; row < r1; row += NORM_ROWS_PER_BLOCK)
        norm_backward_row<h16, LN, VEC>(dx, aw, ab, dout, x, w, mean, rstd, row, H);
    __syncthreads();
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float s = acc[c], t = ab ? acc[(size_t)NORM_ROWS_PER_BLOCK * H + c] : 0.0f;
        for (int q = 1; q < NORM_ROWS_PER_BLOCK; q++) {
            s += acc[(size_t)q * H + c];
            if (ab) t += acc[(size_t)(NORM_ROWS_PER_BLOCK + q) * H + c];
        }
        part_w[(size_t)chunk * H + c] = s;
        if (part_b) part_b[(size_t)chunk * H + c] = t;
    }
}

/* Dynamic shared memory of a fused backward block: a row of H floats per warp for dw, as many
 * for db. */
static inline size_t norm_fused_smem(int H, bool bias) {
    return (size_t)NORM_ROWS_PER_BLOCK * (size_t)H * sizeof(float) * (bias ? 2 : 1);
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

/* dx and the dw/db partials (fused, or dx then the stage-1 kernel), for one vector width. */
template <typename h16, bool LN, int VEC>
static mg_status norm_backward_launch(cudaStream_t st, bool fused, h16 *dx, float *part_w,
                                      float *part_b, const h16 *dout, const h16 *x, const h16 *w,
                                      const float *mean, const float *rstd, int N, int H, int R) {
    int nchunks = mg_colsum_chunks(N, R);
    if (fused) {
        const size_t smem = norm_fused_smem(H, part_b != NULL);
        auto *k = norm_backward_fused_kernel<h16, LN, VEC>;
        MG_CUDA_CHECK(
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k<<<(unsigned)nchunks, 32 * NORM_ROWS_PER_BLOCK, smem, st>>>(dx, part_w, part_b, dout, x, w,
                                                                     mean, rstd, N, H, R);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    unsigned row_blocks = (unsigned)((N + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    norm_backward_dx_kernel<h16, LN, VEC>
        <<<row_blocks, 32 * NORM_ROWS_PER_BLOCK, 0, st>>>(dx, dout, x, w, mean, rstd, N, H);
    MG_CUDA_CHECK_LAUNCH();
    dim3 grid((unsigned)((H + 32 * VEC - 1) / (32 * VEC)), (unsigned)nchunks);
    norm_dw_partial_kernel<h16, LN, VEC>
        <<<grid, dim3(32, DW_WARPS), 0, st>>>(part_w, part_b, dout, x, mean, rstd, N, H, R);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template <typename h16, bool LN>
static mg_status norm_backward(mg_backend *be, void *dx, float *dw, float *db, const void *dout,
                               const void *x, const void *w, const float *mean, const float *rstd,
                               int N, int H) {
    if (N <= 0 || H <= 0) return MG_OK;
    const bool fused = norm_fused_smem(H, db != NULL) <= MG_NORM_FUSED_MAX_SMEM;
    int R = mg_colsum_rows(N, fused ? NORM_ROWS_PER_BLOCK : DW_MIN_ROWS);
    int nchunks = mg_colsum_chunks(N, R);
    size_t part = (size_t)nchunks * H; /* floats per partial array */
    float *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, (db ? 2 : 1) * part * sizeof(float), (void **)&ws,
                             LN ? "layernorm_backward" : "rmsnorm_backward"));
    float *part_w = ws, *part_b = db ? ws + part : NULL;
    cudaStream_t st = mg_cuda_stream(be);
    h16 *ddx = (h16 *)dx;
    const h16 *d = (const h16 *)dout, *xx = (const h16 *)x, *ww = (const h16 *)w;
    bool vec = H % 8 == 0 && mg_cuda_aligned16(dx) && mg_cuda_aligned16(dout) &&
               mg_cuda_aligned16(x) && mg_cuda_aligned16(w);
    if (vec)
        MG_CHECK((norm_backward_launch<h16, LN, 8>(st, fused, ddx, part_w, part_b, d, xx, ww, mean,
                                                   rstd, N, H, R)));
    else
        MG_CHECK((norm_backward_launch<h16, LN, 1>(st, fused, ddx, part_w, part_b, d, xx, ww, mean,
                                                   rstd, N, H, R)));
    mg_colsum_final(st, dw, db, part_w, part_b, nchunks, H);
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
