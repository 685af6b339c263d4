/* What the experts' grouped linear ops share (grouped_gemm.cu: the bf16/fp16 ops and the
 * portable kernel; grouped_gemm_fp8.cu: the fp8 ops): the scan of the group sizes into row and
 * tile offsets, the small kernels around the products (bias, GELU derivative, bias gradient,
 * zeroing the weight gradients no tile writes) and the host helpers (shape check, workspace,
 * launches). Included by those two files alone; grouped_gemm.cu's header says how the workspace
 * is laid out. */
#ifndef MG_GROUPED_GEMM_COMMON_CUH
#define MG_GROUPED_GEMM_COMMON_CUH

#include "backend/cuda/activation_math.cuh"
#include "backend/cuda/block_scan.cuh"
#include "backend/cuda/cuda_common.cuh"

#define GG_BM           128 /* rows of an output tile (M) */
#define GG_SCAN_THREADS 1024

enum { GG_FWD = 0, GG_DINP = 1, GG_DW = 2 }; /* also the op codes of grouped_gemm_cutlass.cu */

/* ---------------------------------------------------------------- device helpers */

/* One block: row_off[g] = rows of the groups before g (row_off[G] = all rows) and tile_off[g] =
 * their M-tiles of GG_BM rows. Negative counts count as 0. Chunks of blockDim.x groups, each a
 * warp-shuffle scan plus a scan of the warp totals, carried over the chunks. */
static __global__ void __launch_bounds__(GG_SCAN_THREADS)
    grouped_offsets_kernel(int32_t *row_off /* (G+1) */, int32_t *tile_off /* (G+1) */,
                           const int32_t *counts /* (G) */, int G) {
    __shared__ int32_t sums[2][GG_SCAN_THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int32_t carry_r = 0, carry_t = 0;
    for (int base = 0; base < G; base += blockDim.x) {
        int g = base + threadIdx.x;
        int32_t n = g < G ? max(counts[g], 0) : 0, t = (n + GG_BM - 1) / GG_BM;
        int32_t ir = n, it = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t vr = __shfl_up_sync(0xffffffffu, ir, o),
                    vt = __shfl_up_sync(0xffffffffu, it, o);
            if (lane >= o) ir += vr, it += vt;
        }
        if (lane == 31) sums[0][warp] = ir, sums[1][warp] = it;
        __syncthreads();
        if (warp == 0) {
            int32_t sr = lane < nwarps ? sums[0][lane] : 0, st = lane < nwarps ? sums[1][lane] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int32_t vr = __shfl_up_sync(0xffffffffu, sr, o);
                int32_t vt = __shfl_up_sync(0xffffffffu, st, o);
                if (lane >= o) sr += vr, st += vt;
            }
            if (lane < nwarps) sums[0][lane] = sr, sums[1][lane] = st;
        }
        __syncthreads();
        if (g < G) {
            row_off[g] = carry_r + (warp ? sums[0][warp - 1] : 0) + ir - n;
            tile_off[g] = carry_t + (warp ? sums[1][warp - 1] : 0) + it - t;
        }
        carry_r += sums[0][nwarps - 1];
        carry_t += sums[1][nwarps - 1];
        __syncthreads();
    }
    if (threadIdx.x == 0) row_off[G] = carry_r, tile_off[G] = carry_t;
}

/* ---------------------------------------------------------------- the small kernels */

/* The bias gradients in two deterministic stages (no atomics), so that the rows of a weight spread
 * over the whole GPU however few weights there are: stage 1 splits weight j's rows (its groups
 * from every source, taken source after source) into GG_DBIAS_CHUNKS equal chunks, their size
 * from the device's counts, and writes one fp32 partial per (j, chunk, column); stage 2 adds a
 * column's partials in chunk order. The order of the additions depends on the counts alone. */
#define GG_DBIAS_CHUNKS 32
#define GG_DBIAS_WARPS  8

/* Block (strip of 32 * VEC columns, chunk, weight j); warp w sums rows w, w + 8, ... of each of
 * the chunk's pieces of a group (four rows' loads in flight per lane), then the warp sums are
 * added in warp order. part: (n_w, nch, OC). */
template <typename h16, int VEC>
static __global__ void grouped_dbias_partial_kernel(float *part, const h16 *dout /* (R,OC) */,
                                                    const int32_t *row_off, int n_src, int n_w,
                                                    int OC, int nch) {
    __shared__ float sums[GG_DBIAS_WARPS][32 * VEC];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int chunk = blockIdx.y, j = blockIdx.z, c0 = (blockIdx.x * 32 + lane) * VEC;
    int32_t total = 0;
    for (int s = 0; s < n_src; s++) total += row_off[s * n_w + j + 1] - row_off[s * n_w + j];
    const int32_t per = (total + nch - 1) / nch, lo = chunk * per, hi = min(total, lo + per);
    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (c0 < OC) {
        int32_t base = 0; /* rows of weight j in the sources before s */
        for (int s = 0; s < n_src && base < hi; s++) {
            const int g = s * n_w + j;
            const int32_t n = row_off[g + 1] - row_off[g];
            const int32_t a = max(lo, base), b = min(hi, base + n);
            const int32_t r1 = row_off[g] + b - base;
#pragma unroll 4
            for (int32_t r = row_off[g] + a - base + warp; r < r1; r += GG_DBIAS_WARPS) {
                float v[VEC];
                mg_loadv<VEC>(dout + (int64_t)r * OC + c0, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += v[k];
            }
            base += n;
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sums[warp][lane * VEC + k] = acc[k];
    __syncthreads();
    float *out = part + ((size_t)j * nch + chunk) * OC;
    for (int t = threadIdx.x; t < 32 * VEC; t += blockDim.x) {
        const int c = blockIdx.x * 32 * VEC + t;
        if (c >= OC) continue;
        float sum = sums[0][t];
        for (int w = 1; w < GG_DBIAS_WARPS; w++) sum += sums[w][t];
        out[c] = sum;
    }
}

/* Block (32 columns, weight j), 32 x 8 threads: row y of the block adds chunks y, y + 8, ... in
 * order, then the rows' sums in row order; dbias_j[c] = (accumulate ? dbias_j[c] : 0) + sum. */
static __global__ void grouped_dbias_final_kernel(float *const *dbias, const float *part, int OC,
                                                  int nch, bool accumulate) {
    __shared__ float sums[8][32];
    const int lane = threadIdx.x, y = threadIdx.y, j = blockIdx.y, c = blockIdx.x * 32 + lane;
    float acc = 0.0f;
    if (c < OC)
        for (int k = y; k < nch; k += 8) acc += part[((size_t)j * nch + k) * OC + c];
    sums[y][lane] = acc;
    __syncthreads();
    if (y != 0 || c >= OC) return;
    for (int q = 1; q < 8; q++) acc += sums[q][lane];
    dbias[j][c] = (accumulate ? dbias[j][c] : 0.0f) + acc;
}

/* dW_j = 0 for each weight j whose first-source group (counts[j]) has no rows: the CUTLASS dw
 * product, writing over dW from that source, gives such a weight no tiles. Block (x, j). */
static __global__ void grouped_zero_empty_kernel(float *const *dw, const int32_t *counts,
                                                 size_t n /* elements of each dW_j */) {
    const int j = blockIdx.y;
    if (counts[j] > 0) return;
    float *d = dw[j];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = 0.0f;
}

/* out[r, :] += bias_j for every row r of the groups (after the CUTLASS forward); OC % 8 == 0. */
template <typename h16>
static __global__ void grouped_bias_kernel(h16 *out /* (R,OC) */, void *const *bias,
                                           const int32_t *row_off, int G, int n_w, int OC) {
    const int32_t total = row_off[G];
    for (int32_t r = blockIdx.x; r < total; r += gridDim.x) {
        const h16 *b = reinterpret_cast<const h16 *>(bias[find_group(row_off, G, r) % n_w]);
        h16 *o = out + (int64_t)r * OC;
        if (((uintptr_t)b & 15u) == 0) {
            for (int c = threadIdx.x * 8; c < OC; c += blockDim.x * 8) {
                float x[8], y[8];
                mg_load8(o + c, x);
                mg_load8(b + c, y);
#pragma unroll
                for (int q = 0; q < 8; q++) x[q] += y[q];
                mg_store8(o + c, x);
            }
        } else {
            for (int c = threadIdx.x; c < OC; c += blockDim.x)
                o[c] = f_to_h16<h16>(h16_to_f(o[c]) + h16_to_f(b[c]));
        }
    }
}

/* dinp = gelu'(pre) * dinp over the groups' rows (after the CUTLASS dinp); IC % 8 == 0. */
template <typename h16>
static __global__ void grouped_gelu_grad_kernel(h16 *dinp /* (R,IC) */, const h16 *pre /* (R,IC) */,
                                                const int32_t *row_off, int G, int IC) {
    mg_gelu_backward_range(dinp, pre, dinp, (size_t)row_off[G] * (size_t)IC, 1);
}

/* ---------------------------------------------------------------- host side */

static size_t align256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

static mg_status check_shape(const char *op, int n_src, int n_w, int IC, int OC) {
    if (n_src < 1 || n_w < 1 || IC < 0 || OC < 0 || (int64_t)n_src * n_w > (1 << 24))
        return MG_FAIL(MG_ERR_INTERNAL,
                       "%s: bad shape n_src=%d n_w=%d IC=%d OC=%d (groups 1..2^24, widths >= 0)",
                       op, n_src, n_w, IC, OC);
    return MG_OK;
}

/* The workspace: row_off and tile_off (G+1 each), then the rest for CUTLASS. */
typedef struct {
    int32_t *row_off, *tile_off;
    void *rest;
    size_t rest_bytes;
} gg_ws;

static mg_status workspace(mg_backend *be, int G, const char *op, gg_ws *w) {
    size_t head = 2 * align256((size_t)(G + 1) * sizeof(int32_t));
    void *base = NULL;
    MG_CHECK(mg_cuda_scratch(be, head, &base, op));
    w->row_off = (int32_t *)base;
    w->tile_off = (int32_t *)((char *)base + head / 2);
    w->rest = (char *)base + head;
    w->rest_bytes = mg_cuda_ctx_of(be)->workspace_bytes - head;
    return MG_OK;
}

static bool aligned16(const void *p) {
    return p == NULL || mg_cuda_aligned16(p);
}

static unsigned persistent_blocks(mg_backend *be, int per_sm) {
    int sms = mg_cuda_ctx_of(be)->num_sms;
    return (unsigned)((sms > 0 ? sms : 1) * per_sm);
}

/* out's rows of every group += its weight's bias (bias NULL: nothing), after a forward product
 * whose row offsets ws holds. */
template <typename h16>
static mg_status add_grouped_bias(mg_backend *be, void *out, void *const *bias, const gg_ws &ws,
                                  int G, int n_w, int OC) {
    if (!bias) return MG_OK;
    grouped_bias_kernel<h16><<<persistent_blocks(be, 8), 256, 0, mg_cuda_stream(be)>>>(
        (h16 *)out, bias, ws.row_off, G, n_w, OC);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

static mg_status launch_offsets(mg_backend *be, const gg_ws *w, const int32_t *counts, int G) {
    grouped_offsets_kernel<<<1, GG_SCAN_THREADS, 0, mg_cuda_stream(be)>>>(w->row_off, w->tile_off,
                                                                          counts, G);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* dbias_j (+)= the column sums of dout over weight j's rows (ws: the products' row offsets; its
 * rest holds the partials, after the products on the same stream). */
template <typename h16>
static mg_status launch_dbias(mg_backend *be, float *const *dbias, const void *dout,
                              const gg_ws &ws, int n_src, int n_w, int OC, bool accumulate) {
    if (OC == 0 || n_w == 0) return MG_OK;
    const size_t per_chunk = (size_t)n_w * OC * sizeof(float);
    const int nch = (int)(ws.rest_bytes / per_chunk < GG_DBIAS_CHUNKS ? ws.rest_bytes / per_chunk
                                                                      : GG_DBIAS_CHUNKS);
    if (nch < 1)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "grouped bias gradient: %zu workspace bytes, %zu needed for %d x %d",
                       ws.rest_bytes, per_chunk, n_w, OC);
    float *part = (float *)ws.rest;
    cudaStream_t st = mg_cuda_stream(be);
    const int32_t *off = ws.row_off;
    if (OC % 8 == 0 && mg_cuda_aligned16(dout))
        grouped_dbias_partial_kernel<h16, 8>
            <<<dim3((unsigned)((OC + 255) / 256), (unsigned)nch, (unsigned)n_w),
               32 * GG_DBIAS_WARPS, 0, st>>>(part, (const h16 *)dout, off, n_src, n_w, OC, nch);
    else
        grouped_dbias_partial_kernel<h16, 1>
            <<<dim3((unsigned)((OC + 31) / 32), (unsigned)nch, (unsigned)n_w), 32 * GG_DBIAS_WARPS,
               0, st>>>(part, (const h16 *)dout, off, n_src, n_w, OC, nch);
    MG_CUDA_CHECK_LAUNCH();
    grouped_dbias_final_kernel<<<dim3((unsigned)((OC + 31) / 32), (unsigned)n_w), dim3(32, 8), 0,
                                 st>>>(dbias, part, OC, nch, accumulate);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

#endif
