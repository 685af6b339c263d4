/* The MoE router's products on the GPU (CPU reference: cpu/cpu_router.c; contract: backend.h,
 * "mixture of experts"): logits (T,E) fp32 = x (T,H) @ w (E,H)^T, and its backward, dx (T,H) bf16
 * += dlogits @ w, dw (E,H) fp32 += dlogits^T @ x. cuBLASLt cannot take the fp32 dlogits with bf16
 * x or w in one product, and E is small (4..256), so all three are memory-bound reads of x and
 * kernels of our own do them with fp32 FMA:
 *  - E <= 32 (the usual case), H a multiple of 8, 16-byte aligned: row kernels. One warp per
 *    token reads its row of x once in 16-byte vectors and meets the E rows of w (E x H x 2 bytes,
 *    resident in L1/L2) for the logits and dx; dw has each warp accumulate 8 experts x 8 columns
 *    per lane over a contiguous range of tokens.
 *  - otherwise: a tiled product (64 x 64 tiles) of bf16 or fp32 operands read as fp32.
 * Sums over tokens (dw, and the tiled product when it splits K to fill the GPU) go through
 * partials in the workspace, summed in a fixed order: every output repeats bitwise. Nothing
 * here synchronises or allocates.
 * Exports: mg_cuda_router_forward, mg_cuda_router_backward. */
#include "backend/cuda/cuda_common.cuh"

/* ---------------------------------------------------------------- router products */

#define RG_BM      64
#define RG_BN      64
#define RG_BK      16
#define RG_THREADS 256
enum { RG_STORE_F32 = 0, RG_ADD_F32, RG_ADD_BF16 };

/* C (M,N) row-major = sum_k A(m,k) B(k,n), A(m,k) = a[m sam + k sak], B(k,n) = b[k sbk + n sbn];
 * mode says how C meets `out` (M,N); with splits > 1 blocks write their part to part (z,M,N). */
typedef struct {
    const void *a, *b;
    long long sam, sak, sbk, sbn;
    int M, N, K, kchunk, mode;
    void *out;
    float *part;
} rg_args;

static __device__ __forceinline__ float to_f(float v) {
    return v;
}
static __device__ __forceinline__ float to_f(bf16 v) {
    return __bfloat162float(v);
}

static __device__ __forceinline__ void rg_store(int mode, void *out, size_t i, float v) {
    if (mode == RG_STORE_F32) {
        ((float *)out)[i] = v;
    } else if (mode == RG_ADD_F32) {
        ((float *)out)[i] += v;
    } else {
        bf16 *o = (bf16 *)out + i;
        *o = __float2bfloat16_rn(__bfloat162float(*o) + v);
    }
}

/* 16x16 threads, each a 4x4 of outputs strided by 16 (conflict-free shared reads). The tile loads
 * walk the contiguous dimension of each operand across neighbouring threads. */
template <typename TA, typename TB>
static __global__ void __launch_bounds__(RG_THREADS) router_gemm_kernel(rg_args g) {
    __shared__ float As[RG_BK][RG_BM + 1], Bs[RG_BK][RG_BN + 1];
    const TA *a = (const TA *)g.a;
    const TB *b = (const TB *)g.b;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int m0 = blockIdx.y * RG_BM, n0 = blockIdx.x * RG_BN;
    int k_lo = blockIdx.z * g.kchunk, k_hi = min(g.K, k_lo + g.kchunk);
    float acc[4][4] = {};
    for (int k0 = k_lo; k0 < k_hi; k0 += RG_BK) {
#pragma unroll
        for (int r = 0; r < RG_BM * RG_BK / RG_THREADS; r++) {
            int e = tid + r * RG_THREADS, mm, nn, ka, kb;
            if (g.sak == 1)
                ka = e % RG_BK, mm = e / RG_BK;
            else
                mm = e % RG_BM, ka = e / RG_BM;
            if (g.sbn == 1)
                nn = e % RG_BN, kb = e / RG_BN;
            else
                kb = e % RG_BK, nn = e / RG_BK;
            int m = m0 + mm, n = n0 + nn;
            As[ka][mm] = m < g.M && k0 + ka < k_hi ? to_f(a[m * g.sam + (k0 + ka) * g.sak]) : 0.0f;
            Bs[kb][nn] = n < g.N && k0 + kb < k_hi ? to_f(b[(k0 + kb) * g.sbk + n * g.sbn]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < RG_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i], bv[i] = Bs[kk][tx + 16 * i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
    size_t MN = (size_t)g.M * g.N;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m >= g.M || n >= g.N) continue;
            size_t o = (size_t)m * g.N + n;
            if (gridDim.z == 1)
                rg_store(g.mode, g.out, o, acc[i][j]);
            else
                g.part[blockIdx.z * MN + o] = acc[i][j];
        }
}

/* The split-K partials summed in split order, then applied as the mode says. */
static __global__ void router_gemm_reduce_kernel(const float *part, int splits, size_t MN, int mode,
                                                 void *out) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += stride) {
        float v = 0.0f;
        for (int z = 0; z < splits; z++) v += part[z * MN + i];
        rg_store(mode, out, i, v);
    }
}

/* Splits K so that the grid has about two blocks per multiprocessor, each split at least 8 steps
 * of RG_BK, when the workspace holds the partials. */
template <typename TA, typename TB> static mg_status router_gemm(mg_backend *be, rg_args g) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    if (g.M <= 0 || g.N <= 0) return MG_OK;
    unsigned gx = (unsigned)((g.N + RG_BN - 1) / RG_BN), gy = (unsigned)((g.M + RG_BM - 1) / RG_BM);
    long long tiles = (long long)gx * gy, steps = (g.K + RG_BK - 1) / RG_BK;
    size_t MN = (size_t)g.M * g.N;
    long long splits = 1;
    if (tiles < 2LL * c->num_sms) splits = (2LL * c->num_sms + tiles - 1) / tiles;
    if (splits > steps / 8) splits = steps / 8;
    if (splits > 64) splits = 64;
    if (splits > 1 && (size_t)splits * MN * sizeof(float) > c->workspace_bytes)
        splits = (long long)(c->workspace_bytes / (MN * sizeof(float)));
    if (splits < 1) splits = 1;
    g.kchunk = (int)((steps + splits - 1) / splits) * RG_BK;
    if (g.kchunk > 0) splits = (g.K + g.kchunk - 1) / g.kchunk;
    if (splits < 1) splits = 1;
    g.part = NULL;
    if (splits > 1) {
        void *ws = NULL;
        MG_CHECK(mg_cuda_scratch(be, (size_t)splits * MN * sizeof(float), &ws, "router product"));
        g.part = (float *)ws;
    }
    if (gy > 65535u)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "router product: %d rows (at most %d)", g.M,
                       65535 * RG_BM);
    router_gemm_kernel<TA, TB><<<dim3(gx, gy, (unsigned)splits), RG_THREADS, 0, c->stream>>>(g);
    MG_CUDA_CHECK_LAUNCH();
    if (splits > 1) {
        router_gemm_reduce_kernel<<<mg_cuda_blocks(MN, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
                                    c->stream>>>(g.part, (int)splits, MN, g.mode, g.out);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}

/* ---------------------------------------------------------------- row kernels (E <= 32) */

#define RW_WARPS    8 /* tokens per block (logits, dx) */
#define RW_EC       8 /* experts per pass: 8 accumulators (logits) or 8 x 8 (dw) per lane */
#define RW_DW_WARPS 4
#define RW_MAX_E    32

/* logits[t, e] = x[t] . w[e]: lane columns 8 lane + 256 i, RW_EC experts a pass, warp sums. */
static __global__ void __launch_bounds__(RW_WARPS * 32)
    router_logits_rows_kernel(float *logits, const bf16 *x, const bf16 *w, int T, int H, int E) {
    int lane = threadIdx.x & 31, t = blockIdx.x * RW_WARPS + threadIdx.x / 32;
    if (t >= T) return;
    const bf16 *xr = x + (size_t)t * H;
    for (int e0 = 0; e0 < E; e0 += RW_EC) {
        float acc[RW_EC] = {};
        for (int h = 8 * lane; h < H; h += 256) {
            float xv[8];
            mg_load8(xr + h, xv);
#pragma unroll
            for (int q = 0; q < RW_EC; q++) {
                if (e0 + q >= E) break;
                float wv[8];
                mg_load8(w + (size_t)(e0 + q) * H + h, wv);
#pragma unroll
                for (int c = 0; c < 8; c++) acc[q] = fmaf(xv[c], wv[c], acc[q]);
            }
        }
#pragma unroll
        for (int q = 0; q < RW_EC; q++) {
            float v = mg_warp_sum(acc[q]);
            if (lane == 0 && e0 + q < E) logits[(size_t)t * E + e0 + q] = v;
        }
    }
}

/* dx[t] += sum_e dlogits[t, e] w[e], the sum in fp32 before the add (as the tiled kernel). */
static __global__ void __launch_bounds__(RW_WARPS * 32)
    router_dx_rows_kernel(bf16 *dx, const float *dl, const bf16 *w, int T, int H, int E) {
    int lane = threadIdx.x & 31, t = blockIdx.x * RW_WARPS + threadIdx.x / 32;
    if (t >= T) return;
    const float *g = dl + (size_t)t * E; /* one address per warp: a broadcast */
    bf16 *o = dx + (size_t)t * H;
    for (int h = 8 * lane; h < H; h += 256) {
        float s[8] = {}, d[8];
        for (int e = 0; e < E; e++) {
            float wv[8];
            mg_load8(w + (size_t)e * H + h, wv);
#pragma unroll
            for (int c = 0; c < 8; c++) s[c] = fmaf(g[e], wv[c], s[c]);
        }
        mg_load8(o + h, d);
#pragma unroll
        for (int c = 0; c < 8; c++) d[c] += s[c];
        mg_store8(o + h, d);
    }
}

/* dw partials: block (256 columns, token split y, RW_EC experts z); warp w of split y sums the
 * tokens of range y RW_DW_WARPS + w, lane 8 columns x RW_EC experts; part (ranges, E, H). */
static __global__ void __launch_bounds__(RW_DW_WARPS * 32)
    router_dw_rows_kernel(float *part, const float *dl, const bf16 *x, int T, int H, int E,
                          int per_range) {
    int lane = threadIdx.x & 31, range = blockIdx.y * RW_DW_WARPS + threadIdx.x / 32;
    int h = blockIdx.x * 256 + 8 * lane, e0 = blockIdx.z * RW_EC;
    int t0 = range * per_range, t1 = min(T, t0 + per_range);
    if (h >= H) return;
    float acc[RW_EC][8] = {};
    for (int t = t0; t < t1; t++) {
        float xv[8];
        mg_load8(x + (size_t)t * H + h, xv);
        const float *d = dl + (size_t)t * E + e0;
#pragma unroll
        for (int q = 0; q < RW_EC; q++) {
            float g = e0 + q < E ? d[q] : 0.0f;
#pragma unroll
            for (int c = 0; c < 8; c++) acc[q][c] = fmaf(g, xv[c], acc[q][c]);
        }
    }
    float *o = part + (size_t)range * E * H + h;
#pragma unroll
    for (int q = 0; q < RW_EC; q++)
        if (e0 + q < E)
#pragma unroll
            for (int c = 0; c < 8; c++) o[(size_t)(e0 + q) * H + c] = acc[q][c];
}

static bool rows_ok(const void *a, const void *b, int H, int E) {
    return E <= RW_MAX_E && H % 8 == 0 && mg_cuda_aligned16(a) && mg_cuda_aligned16(b);
}

/* Token ranges for dw: about two blocks per multiprocessor, at least 16 tokens per warp, the
 * partials within the workspace. */
static mg_status router_dw_rows(mg_backend *be, float *dw, const float *dl, const bf16 *x, int T,
                                int H, int E) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    unsigned gx = (unsigned)((H + 255) / 256), gz = (unsigned)((E + RW_EC - 1) / RW_EC);
    long long gy = (2LL * c->num_sms + gx * gz - 1) / (gx * gz);
    long long most = ((long long)T + 16 * RW_DW_WARPS - 1) / (16 * RW_DW_WARPS);
    size_t EH = (size_t)E * H, per_split = RW_DW_WARPS * EH * sizeof(float);
    if (gy > most) gy = most;
    if (gy > 65535) gy = 65535;
    if ((size_t)gy * per_split > c->workspace_bytes)
        gy = (long long)(c->workspace_bytes / per_split);
    if (gy < 1) gy = 1;
    int ranges = (int)gy * RW_DW_WARPS, per_range = (T + ranges - 1) / ranges;
    void *part = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)gy * per_split, &part, "router dw"));
    router_dw_rows_kernel<<<dim3(gx, (unsigned)gy, gz), RW_DW_WARPS * 32, 0, c->stream>>>(
        (float *)part, dl, x, T, H, E, per_range);
    MG_CUDA_CHECK_LAUNCH();
    router_gemm_reduce_kernel<<<mg_cuda_blocks(EH, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
                                c->stream>>>((const float *)part, ranges, EH, RG_ADD_F32, dw);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- the entries */

extern "C" mg_status mg_cuda_router_forward(mg_backend *be, float *logits, const void *x,
                                            const void *w, int T, int H, int E) {
    // logits (T,E) fp32 = x (T,H) @ w (E,H)^T
    if (T <= 0 || E <= 0) return MG_OK;
    if (rows_ok(x, w, H, E)) {
        router_logits_rows_kernel<<<(unsigned)((T + RW_WARPS - 1) / RW_WARPS), RW_WARPS * 32, 0,
                                    mg_cuda_stream(be)>>>(logits, (const bf16 *)x, (const bf16 *)w,
                                                          T, H, E);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    rg_args g = {x, w, H, 1, 1, H, T, E, H, 0, RG_STORE_F32, logits, NULL};
    return router_gemm<bf16, bf16>(be, g);
}

extern "C" mg_status mg_cuda_router_backward(mg_backend *be, void *dx, float *dw,
                                             const float *dlogits, const void *x, const void *w,
                                             int T, int H, int E) {
    // dx (T,H) bf16 += dlogits (T,E) @ w (E,H); dw (E,H) fp32 += dlogits^T @ x (T,H)
    if (T <= 0 || H <= 0 || E <= 0) return MG_OK;
    if (rows_ok(dx, w, H, E)) {
        router_dx_rows_kernel<<<(unsigned)((T + RW_WARPS - 1) / RW_WARPS), RW_WARPS * 32, 0,
                                mg_cuda_stream(be)>>>((bf16 *)dx, dlogits, (const bf16 *)w, T, H,
                                                      E);
        MG_CUDA_CHECK_LAUNCH();
    } else {
        rg_args gx = {dlogits, w, E, 1, H, 1, T, H, E, 0, RG_ADD_BF16, dx, NULL};
        MG_CHECK((router_gemm<float, bf16>(be, gx)));
    }
    if (rows_ok(x, x, H, E)) return router_dw_rows(be, dw, dlogits, (const bf16 *)x, T, H, E);
    rg_args gw = {dlogits, x, 1, E, H, 1, E, H, T, 0, RG_ADD_F32, dw, NULL};
    return router_gemm<float, bf16>(be, gw);
}
