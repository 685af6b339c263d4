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

/* dbias_j[c] += sum of dout[r, c] over the rows r of every group of weight j: block (32 columns,
 * weight j), warp w sums rows w, w+8, ... of each source in order; then the 8 warp sums in warp
 * order. Deterministic for given counts. */
template <typename h16>
static __global__ void grouped_dbias_kernel(float *const *dbias, const h16 *dout /* (R,OC) */,
                                            const int32_t *row_off, int n_src, int n_w, int OC,
                                            bool accumulate) {
    __shared__ float sums[8][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 32 + lane, j = blockIdx.y;
    float acc = 0.0f;
    if (c < OC)
        for (int s = 0; s < n_src; s++) {
            int g = s * n_w + j;
            for (int32_t r = row_off[g] + warp; r < row_off[g + 1]; r += 8)
                acc += h16_to_f(dout[(int64_t)r * OC + c]);
        }
    sums[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && c < OC) {
        float s = sums[0][lane];
        for (int w = 1; w < 8; w++) s += sums[w][lane];
        dbias[j][c] = (accumulate ? dbias[j][c] : 0.0f) + s;
    }
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

template <typename h16>
static mg_status launch_dbias(mg_backend *be, float *const *dbias, const void *dout,
                              const int32_t *row_off, int n_src, int n_w, int OC, bool accumulate) {
    if (OC == 0) return MG_OK;
    dim3 grid((OC + 31) / 32, n_w);
    grouped_dbias_kernel<h16><<<grid, 256, 0, mg_cuda_stream(be)>>>(
        dbias, (const h16 *)dout, row_off, n_src, n_w, OC, accumulate);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

#endif
