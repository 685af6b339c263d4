/* The MoE router's products on the GPU (CPU reference: cpu/cpu_router.c; contract: backend_ops.h,
 * "mixture of experts"): logits (T,E) fp32 = x (T,H) @ w (E,H)^T, and its backward, dx (T,H) h16
 * += dlogits @ w, dw (E,H) fp32 += dlogits^T @ x. cuBLASLt cannot take the fp32 dlogits with h16
 * x or w in one product, and E is small (4..256), so all three are reads of x by kernels of our
 * own:
 *  - E <= 8 (Mixtral's), H a multiple of 8, 16-byte aligned: tensor cores (mma.sync m16n8k16,
 *    h16 in, fp32 accumulate), the experts one n8 tile: the FMA kernels below spend ~E fp32
 *    instructions per element of x (logits: 27 us against 12 us on an H200 at T 8192, H 1024,
 *    E 8, where reading x takes ~5 us). The fp32 dlogits enter the products as h16 parts
 *    hi = h16(dl) and lo = h16(dl - hi) in the two halves of k (dx) or of the rows (dw), which
 *    carries them to about 16 bits with bf16; with fp16 to 22 bits or an absolute 2^-25,
 *    whichever is coarser (lo may be subnormal), and a |dl| beyond 65504 becomes Inf (as the
 *    fp16 gradient of Megatron's fp16 router would; the loss scaler backs off).
 *  - E <= 32, H a multiple of 8, 16-byte aligned: row kernels with fp32 FMA. For the logits and
 *    dx a warp takes two tokens, all of a 1024-column chunk of their rows loaded in 16-byte
 *    vectors before the products, each vector of w (E x H x 2 bytes, resident in L1/L2) serving
 *    both; dw has each warp accumulate 8 experts x 8 columns per lane over a contiguous range of
 *    tokens with 4 tokens' vectors in flight, two warps' ranges added in shared memory.
 *  - otherwise: a tiled product (64 x 64 tiles) of h16 or fp32 operands read as fp32.
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
enum { RG_STORE_F32 = 0, RG_ADD_F32, RG_ADD_H16 };

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
static __device__ __forceinline__ float to_f(h16 v) {
    return h16_to_f(v);
}

static __device__ __forceinline__ void rg_store(int mode, void *out, size_t i, float v) {
    if (mode == RG_STORE_F32) {
        ((float *)out)[i] = v;
    } else if (mode == RG_ADD_F32) {
        ((float *)out)[i] += v;
    } else {
        h16 *o = (h16 *)out + i;
        *o = f_to_h16(h16_to_f(*o) + v);
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

#define RW_WARPS  8    /* warps per block (logits, dx) */
#define RW_TPW    2    /* tokens per warp (logits, dx): two rows in flight, w's vectors shared */
#define RW_EC     8    /* experts per pass: 8 accumulators per token (logits), 8 x 8 (dw) */
#define RW_CHUNK  1024 /* columns a warp holds at once: 4 16-byte vectors per lane per row */
#define RW_MAX_E  32
#define DW_SLICES 4 /* dw: warps across the columns, 256 each (1024 per block) */
#define DW_SUBS   2 /* dw: token halves per block, summed in shared memory */
#define DW_U      4 /* dw: tokens a warp has in flight */

static __device__ __forceinline__ uint4 ld_ro(const h16 *p) { /* read-only data (x, w) */
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* Chunk hc of RW_TPW rows, all loads issued before any use: the lane's 8 columns
 * hc + 256 i + 8 lane of each (zeros past H); RO: through the read-only path (rows the kernel
 * does not write). */
template <bool RO>
static __device__ __forceinline__ void load_chunk(uint4 (&v)[RW_TPW][4], const h16 *const *rows,
                                                  int hc, int H, int lane) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int h = hc + 256 * i + 8 * lane;
#pragma unroll
        for (int u = 0; u < RW_TPW; u++)
            v[u][i] = h >= H ? make_uint4(0, 0, 0, 0)
                      : RO   ? ld_ro(rows[u] + h)
                             : *reinterpret_cast<const uint4 *>(rows[u] + h);
    }
}

/* logits[t, e] = x[t] . w[e]: a warp takes RW_TPW tokens, lane columns 8 lane + 256 i, all of a
 * chunk's x vectors loaded before the products; each w vector serves both tokens (w stays in
 * L1). Per lane the columns in ascending order, then the warp's butterfly. */
static __global__ void __launch_bounds__(RW_WARPS * 32)
    router_logits_rows_kernel(float *logits, const h16 *x, const h16 *w, int T, int H, int E) {
    int lane = threadIdx.x & 31, t0 = (blockIdx.x * RW_WARPS + threadIdx.x / 32) * RW_TPW;
    if (t0 >= T) return; /* the whole warp */
    int nt = min(RW_TPW, T - t0);
    const h16 *xr[RW_TPW];
#pragma unroll
    for (int u = 0; u < RW_TPW; u++) xr[u] = x + (size_t)(t0 + min(u, nt - 1)) * H;
    for (int e0 = 0; e0 < E; e0 += RW_EC) {
        float acc[RW_TPW][RW_EC] = {};
        for (int hc = 0; hc < H; hc += RW_CHUNK) {
            uint4 xv[RW_TPW][4];
            load_chunk<true>(xv, xr, hc, H, lane);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int h = hc + 256 * i + 8 * lane;
                if (h >= H) break;
                float xf[RW_TPW][8];
#pragma unroll
                for (int u = 0; u < RW_TPW; u++) mg_unpack8(xv[u][i], xf[u]);
#pragma unroll
                for (int q = 0; q < RW_EC; q++) {
                    if (e0 + q >= E) break;
                    float wv[8];
                    mg_unpack8(ld_ro(w + (size_t)(e0 + q) * H + h), wv);
#pragma unroll
                    for (int c = 0; c < 8; c++)
#pragma unroll
                        for (int u = 0; u < RW_TPW; u++)
                            acc[u][q] = fmaf(xf[u][c], wv[c], acc[u][q]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < RW_TPW; u++)
#pragma unroll
            for (int q = 0; q < RW_EC; q++) {
                float v = mg_warp_sum(acc[u][q]);
                if (lane == q && u < nt && e0 + q < E) logits[(size_t)(t0 + u) * E + e0 + q] = v;
            }
    }
}

/* dx[t] += sum_e dlogits[t, e] w[e], the sum in fp32 (experts in order) before the add, one
 * rounding; a warp takes RW_TPW tokens with all of a chunk's dx vectors loaded first. */
static __global__ void __launch_bounds__(RW_WARPS * 32)
    router_dx_rows_kernel(h16 *dx, const float *dl, const h16 *w, int T, int H, int E) {
    int lane = threadIdx.x & 31, t0 = (blockIdx.x * RW_WARPS + threadIdx.x / 32) * RW_TPW;
    if (t0 >= T) return;
    int nt = min(RW_TPW, T - t0);
    h16 *o[RW_TPW];
    const float *g[RW_TPW]; /* one address per warp: broadcasts */
#pragma unroll
    for (int u = 0; u < RW_TPW; u++) {
        int t = t0 + min(u, nt - 1);
        o[u] = dx + (size_t)t * H;
        g[u] = dl + (size_t)t * E;
    }
    for (int hc = 0; hc < H; hc += RW_CHUNK) {
        uint4 dv[RW_TPW][4];
        load_chunk<false>(dv, o, hc, H, lane);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int h = hc + 256 * i + 8 * lane;
            if (h >= H) break;
            float s[RW_TPW][8] = {};
            for (int e0 = 0; e0 < E; e0 += RW_EC) {
                float gv[RW_TPW][RW_EC];
#pragma unroll
                for (int u = 0; u < RW_TPW; u++)
#pragma unroll
                    for (int q = 0; q < RW_EC; q++) gv[u][q] = e0 + q < E ? g[u][e0 + q] : 0.0f;
#pragma unroll
                for (int q = 0; q < RW_EC; q++) {
                    if (e0 + q >= E) break;
                    float wv[8];
                    mg_unpack8(ld_ro(w + (size_t)(e0 + q) * H + h), wv);
#pragma unroll
                    for (int u = 0; u < RW_TPW; u++)
#pragma unroll
                        for (int c = 0; c < 8; c++) s[u][c] = fmaf(gv[u][q], wv[c], s[u][c]);
                }
            }
#pragma unroll
            for (int u = 0; u < RW_TPW; u++) {
                if (u >= nt) break;
                float d[8];
                mg_unpack8(dv[u][i], d);
#pragma unroll
                for (int c = 0; c < 8; c++) d[c] += s[u][c];
                mg_store8(o[u] + h, d);
            }
        }
    }
}

/* dw partials: block (1024 columns x, token range y, RW_EC experts z); warp (slice, half) sums
 * the tokens of its half of range y in order for 8 columns x RW_EC experts per lane, DW_U
 * tokens' x vectors in flight; the second half's sums are added to the first's in shared
 * memory, and the block writes part (ranges, E, H). */
static __global__ void __launch_bounds__(DW_SLICES *DW_SUBS * 32, 2)
    router_dw_rows_kernel(float *part, const float *dl, const h16 *x, int T, int H, int E,
                          int per_block) {
    static_assert(DW_SUBS == 2, "the shared-memory sum adds one half to the other");
    __shared__ float red[DW_SLICES * RW_EC * 8 * 32]; /* 32 KB */
    int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    int slice = warp % DW_SLICES, sub = warp / DW_SLICES;
    int h = blockIdx.x * (DW_SLICES * 256) + slice * 256 + 8 * lane, e0 = blockIdx.z * RW_EC;
    int tb0 = blockIdx.y * per_block, tb1 = min(T, tb0 + per_block);
    int half = (per_block + DW_SUBS - 1) / DW_SUBS;
    int ta = min(tb1, tb0 + sub * half), te = min(tb1, ta + half);
    bool col = h < H;
    float acc[RW_EC][8] = {};
    for (int t = ta; t < te; t += DW_U) {
        uint4 xv[DW_U];
#pragma unroll
        for (int u = 0; u < DW_U; u++)
            xv[u] = col && t + u < te ? ld_ro(x + (size_t)(t + u) * H + h) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < DW_U; u++) {
            if (t + u >= te) break; /* the same for the whole warp */
            const float *d = dl + (size_t)(t + u) * E + e0;
            float gv[RW_EC], xf[8];
#pragma unroll
            for (int q = 0; q < RW_EC; q++) gv[q] = e0 + q < E ? d[q] : 0.0f;
            mg_unpack8(xv[u], xf);
#pragma unroll
            for (int q = 0; q < RW_EC; q++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[q][c] = fmaf(gv[q], xf[c], acc[q][c]);
        }
    }
    float *r = red + (size_t)slice * RW_EC * 8 * 32 + lane;
    if (sub == 1)
#pragma unroll
        for (int q = 0; q < RW_EC; q++)
#pragma unroll
            for (int c = 0; c < 8; c++) r[(q * 8 + c) * 32] = acc[q][c];
    __syncthreads();
    if (sub != 0 || !col) return;
    float *o = part + (size_t)blockIdx.y * E * H + h;
#pragma unroll
    for (int q = 0; q < RW_EC; q++) {
        if (e0 + q >= E) break;
        float v[8];
#pragma unroll
        for (int c = 0; c < 8; c++) v[c] = acc[q][c] + r[(q * 8 + c) * 32];
        float4 *p = reinterpret_cast<float4 *>(o + (size_t)(e0 + q) * H);
        p[0] = make_float4(v[0], v[1], v[2], v[3]);
        p[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

/* dw[o] += sum_y part[y][o]: one block per 32 outputs, warp j summing y = j, j + 8, ... in order,
 * then the 8 warp sums in warp order: a fixed order. */
static __global__ void __launch_bounds__(256)
    router_dw_reduce_kernel(float *dw, const float *part, int Y, size_t EH) {
    __shared__ float s[8][32];
    int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    size_t o = (size_t)blockIdx.x * 32 + lane;
    float v = 0.0f;
    if (o < EH) {
        int y = warp;
        for (; y + 24 < Y; y += 32) { /* four loads in flight */
            float a0 = part[(size_t)y * EH + o], a1 = part[(size_t)(y + 8) * EH + o];
            float a2 = part[(size_t)(y + 16) * EH + o], a3 = part[(size_t)(y + 24) * EH + o];
            v += a0;
            v += a1;
            v += a2;
            v += a3;
        }
        for (; y < Y; y += 8) v += part[(size_t)y * EH + o];
    }
    s[warp][lane] = v;
    __syncthreads();
    if (warp != 0 || o >= EH) return;
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) t += s[j][lane];
    dw[o] += t;
}

/* ---------------------------------------------------------------- tensor-core kernels (E <= 8) */

#define MMA_MAX_E 8    /* one n8 tile of experts */
#define MF_WARPS  4    /* logits: warps per block, on the same 16 tokens, a quarter of H each */
#define MF_SLABS  8    /* logits: 32-column slabs a warp has in flight */
#define MX_WARPS  8    /* dx: warps per block, on the same 16 tokens */
#define MX_COLS   1024 /* dx: columns per block (w packed in shared memory: 16 KB) */
#define MX_TILES  8    /* dx: 8-column tiles a warp has in flight */
#define MW_WARPS  4    /* dw: warps per block, 64 columns each */

/* c (16 x 8, fp32) += a (16 x 16, h16) b (16 x 8, h16): mma.sync m16n8k16 (.bf16 or .f16 operands:
 * MG_PTX_H16). Lane (g, q) = (lane
 * / 4, lane % 4) holds a0 = A[g][2q..2q+1], a1 = A[g+8][2q..], a2 = A[g][2q+8..], a3 =
 * A[g+8][2q+8..], b0 = B[2q..2q+1][g], b1 = B[2q+8..][g] (the lower k in the lower half), and
 * c = C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1]. */
static __device__ __forceinline__ void mma_h16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MG_PTX_H16 "." MG_PTX_H16 ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_h16(float lo, float hi) {
    h16x2 v = f2_to_h16x2(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* logits (T, E <= 8) = x w^T on tensor cores: a block takes 16 tokens (the rows of A), the
 * experts are the 8 columns (B = w^T, experts past E zero); its warps split the columns of x into
 * quarters, and warp 0 adds the four products in warp order. The reduction index may be
 * permuted when x and w take the same permutation: in each 32-column slab lane (g, q) loads
 * columns [8q, 8q + 8) of rows g and g + 8 of x and of row g of w (16-byte vectors), the first
 * four as the k pairs of one product and the last four of a second. */
static __global__ void __launch_bounds__(MF_WARPS * 32)
    router_logits_mma_kernel(float *logits, const h16 *x, const h16 *w, int T, int H, int E) {
    __shared__ float4 red[MF_WARPS][32];
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, warp = threadIdx.x >> 5;
    int t0 = blockIdx.x * 16;
    const h16 *xa = x + (size_t)min(t0 + g, T - 1) * H; /* rows past T: not written */
    const h16 *xb = x + (size_t)min(t0 + g + 8, T - 1) * H;
    const h16 *wr = w + (size_t)min(g, E - 1) * H;
    bool wlive = g < E;
    int ns = (H + 31) / 32, per = (ns + MF_WARPS - 1) / MF_WARPS;
    int s0 = warp * per, s1 = min(ns, s0 + per);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int sb = s0; sb < s1; sb += MF_SLABS) {
        uint4 va[MF_SLABS], vb[MF_SLABS], vw[MF_SLABS];
#pragma unroll
        for (int s = 0; s < MF_SLABS; s++) {
            int h = 32 * (sb + s) + 8 * q;
            bool ok = sb + s < s1 && h < H;
            va[s] = ok ? ld_ro(xa + h) : zero;
            vb[s] = ok ? ld_ro(xb + h) : zero;
            vw[s] = ok && wlive ? ld_ro(wr + h) : zero;
        }
#pragma unroll
        for (int s = 0; s < MF_SLABS; s++) {
            if (sb + s >= s1) break; /* the same for the whole warp */
            mma_h16(c, va[s].x, vb[s].x, va[s].y, vb[s].y, vw[s].x, vw[s].y);
            mma_h16(c, va[s].z, vb[s].z, va[s].w, vb[s].w, vw[s].z, vw[s].w);
        }
    }
    red[warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
    __syncthreads();
    if (warp != 0) return;
    float4 v = red[0][lane];
#pragma unroll
    for (int k = 1; k < MF_WARPS; k++) {
        float4 u = red[k][lane];
        v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
    }
    int e = 2 * q, ta = t0 + g, tb = t0 + g + 8;
    if (ta < T && e < E) logits[(size_t)ta * E + e] = v.x;
    if (ta < T && e + 1 < E) logits[(size_t)ta * E + e + 1] = v.y;
    if (tb < T && e < E) logits[(size_t)tb * E + e] = v.z;
    if (tb < T && e + 1 < E) logits[(size_t)tb * E + e + 1] = v.w;
}

/* dx[t] += sum_e dlogits[t, e] w[e] (E <= 8) on tensor cores: a block takes 16 tokens (the rows
 * of A) and MX_COLS columns, 8-column tiles (B) split over its warps. A = dlogits with k 0..7 the
 * experts' h16 parts hi = h16(dl) and k 8..15 their remainders h16(dl - hi), so the product
 * carries dl to about 16 (bf16) or 22 (fp16) bits; B = the same expert pair of w for both halves,
 * packed per column in shared memory. Each element: h16(dx + the fp32 product), one rounding. */
static __global__ void __launch_bounds__(MX_WARPS * 32)
    router_dx_mma_kernel(h16 *dx, const float *dl, const h16 *w, int T, int H, int E) {
    __shared__ uint32_t wpk[MX_COLS * 4]; /* [tile][column g][pair q] = (w[2q][c], w[2q+1][c]) */
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, warp = threadIdx.x >> 5;
    int t0 = blockIdx.x * 16, c0 = blockIdx.y * MX_COLS, nc = min(MX_COLS, H - c0);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int i = threadIdx.x; i < nc / 2; i += MX_WARPS * 32) { /* (tile, pair) items */
        int j = i >> 2, p = i & 3, c = c0 + 8 * j;
        uint4 lo = 2 * p < E ? ld_ro(w + (size_t)(2 * p) * H + c) : zero;
        uint4 hi = 2 * p + 1 < E ? ld_ro(w + (size_t)(2 * p + 1) * H + c) : zero;
        const unsigned short *l = reinterpret_cast<const unsigned short *>(&lo);
        const unsigned short *h = reinterpret_cast<const unsigned short *>(&hi);
#pragma unroll
        for (int m = 0; m < 8; m++) wpk[j * 32 + m * 4 + p] = (uint32_t)l[m] | (uint32_t)h[m] << 16;
    }
    uint32_t a[4]; /* rows g (a0 hi, a2 lo) and g + 8 (a1 hi, a3 lo), experts 2q and 2q + 1 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = t0 + g + 8 * r, e = 2 * q;
        float d0 = t < T && e < E ? dl[(size_t)t * E + e] : 0.0f;
        float d1 = t < T && e + 1 < E ? dl[(size_t)t * E + e + 1] : 0.0f;
        float h0 = h16_to_f(f_to_h16(d0));
        float h1 = h16_to_f(f_to_h16(d1));
        a[r] = pack_h16(h0, h1);
        a[2 + r] = pack_h16(d0 - h0, d1 - h1);
    }
    __syncthreads();
    int nt = nc / 8, per = (nt + MX_WARPS - 1) / MX_WARPS, j0 = warp * per, j1 = min(nt, j0 + per);
    bool ra = t0 + g < T, rb = t0 + g + 8 < T;
    h16 *xa = dx + (size_t)(t0 + g) * H + c0 + 2 * q, *xb = xa + (size_t)8 * H;
    for (int jb = j0; jb < j1; jb += MX_TILES) {
        uint32_t da[MX_TILES], db[MX_TILES];
#pragma unroll
        for (int u = 0; u < MX_TILES; u++) {
            int j = jb + u;
            da[u] = ra && j < j1 ? *reinterpret_cast<const uint32_t *>(xa + 8 * j) : 0u;
            db[u] = rb && j < j1 ? *reinterpret_cast<const uint32_t *>(xb + 8 * j) : 0u;
        }
#pragma unroll
        for (int u = 0; u < MX_TILES; u++) {
            int j = jb + u;
            if (j >= j1) break; /* the same for the whole warp */
            uint32_t b = wpk[j * 32 + lane];
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_h16(c, a[0], a[1], a[2], a[3], b, b);
            float2 fa = h16x2_to_f2(*reinterpret_cast<const h16x2 *>(&da[u]));
            float2 fb = h16x2_to_f2(*reinterpret_cast<const h16x2 *>(&db[u]));
            if (ra) *reinterpret_cast<uint32_t *>(xa + 8 * j) = pack_h16(fa.x + c[0], fa.y + c[1]);
            if (rb) *reinterpret_cast<uint32_t *>(xb + 8 * j) = pack_h16(fb.x + c[2], fb.y + c[3]);
        }
    }
}

/* dw partials (E <= 8) on tensor cores: dw = dl^T x with the experts as the rows of A (rows 0..7
 * the h16 parts hi of dl, rows 8..15 the remainders, added at the end) and the tokens as k.
 * Warp (64 columns, token range y) keeps 8 tiles of 8 columns; its lane (g, q) loads 16-byte
 * vectors of columns [8g, 8g + 8) at tokens 2q, 2q + 1, 2q + 8, 2q + 9 of each 16, and tile j's
 * logical column n is the physical column 8n + j, so B's pairs of tokens at one column come
 * from two vectors by a byte permutation. The tokens in order, part (ranges, E, H). */
static __global__ void __launch_bounds__(MW_WARPS * 32)
    router_dw_mma_kernel(float *part, const float *dl, const h16 *x, int T, int H, int E, int per) {
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, warp = threadIdx.x >> 5;
    int c0 = (blockIdx.x * MW_WARPS + warp) * 64, cx = c0 + 8 * g;
    if (c0 >= H) return; /* the whole warp */
    int ta = blockIdx.y * per, tb = min(T, ta + per);
    bool colok = cx < H, eok = g < E;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    float c[8][4] = {};
    for (int t = ta; t < tb; t += 32) { /* two k blocks of 16 tokens */
        uint4 xv[2][4];
        float d[2][4];
#pragma unroll
        for (int kb = 0; kb < 2; kb++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int tk = t + 16 * kb + 2 * q + (i & 1) + 8 * (i >> 1);
                bool ok = tk < tb;
                xv[kb][i] = ok && colok ? ld_ro(x + (size_t)tk * H + cx) : zero;
                d[kb][i] = ok && eok ? dl[(size_t)tk * E + g] : 0.0f;
            }
#pragma unroll
        for (int kb = 0; kb < 2; kb++) {
            float h[4];
#pragma unroll
            for (int i = 0; i < 4; i++) h[i] = h16_to_f(f_to_h16(d[kb][i]));
            uint32_t a0 = pack_h16(h[0], h[1]), a1 = pack_h16(d[kb][0] - h[0], d[kb][1] - h[1]);
            uint32_t a2 = pack_h16(h[2], h[3]), a3 = pack_h16(d[kb][2] - h[2], d[kb][3] - h[3]);
            const uint32_t *u0 = reinterpret_cast<const uint32_t *>(&xv[kb][0]);
            const uint32_t *u1 = reinterpret_cast<const uint32_t *>(&xv[kb][1]);
            const uint32_t *u2 = reinterpret_cast<const uint32_t *>(&xv[kb][2]);
            const uint32_t *u3 = reinterpret_cast<const uint32_t *>(&xv[kb][3]);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                unsigned sel = j & 1 ? 0x7632u : 0x5410u; /* column j of both tokens */
                uint32_t b0 = __byte_perm(u0[j / 2], u1[j / 2], sel);
                uint32_t b1 = __byte_perm(u2[j / 2], u3[j / 2], sel);
                mma_h16(c[j], a0, a1, a2, a3, b0, b1);
            }
        }
    }
    if (!eok) return;
    float *o = part + (size_t)blockIdx.y * E * H + (size_t)g * H + c0 + 16 * q;
#pragma unroll
    for (int half = 0; half < 2; half++) { /* logical columns 2q and 2q + 1 */
        if (c0 + 16 * q + 8 * half >= H) break;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = c[j][half] + c[j][2 + half];
        float4 *p = reinterpret_cast<float4 *>(o + 8 * half);
        p[0] = make_float4(v[0], v[1], v[2], v[3]);
        p[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

static bool mma_ok(const void *a, const void *b, int H, int E) {
    return E <= MMA_MAX_E && H % 8 == 0 && mg_cuda_aligned16(a) && mg_cuda_aligned16(b);
}

static bool rows_ok(const void *a, const void *b, int H, int E) {
    return E <= RW_MAX_E && H % 8 == 0 && mg_cuda_aligned16(a) && mg_cuda_aligned16(b);
}

static unsigned rows_blocks(int T) {
    return (unsigned)((T + RW_WARPS * RW_TPW - 1) / (RW_WARPS * RW_TPW));
}

/* Token ranges for dw: about two blocks per multiprocessor, at least 8 tokens per warp, the
 * partials within the workspace. */
/* dw on tensor cores (E <= 8): token ranges of a multiple of 32 tokens, about 16 warps per
 * multiprocessor, at least 64 tokens each. */
static mg_status router_dw_mma(mg_backend *be, float *dw, const float *dl, const h16 *x, int T,
                               int H, int E) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    long long groups = (H + 63) / 64, gx = (groups + MW_WARPS - 1) / MW_WARPS;
    long long gy = (16LL * c->num_sms + groups - 1) / groups;
    long long most = ((long long)T + 63) / 64;
    size_t EH = (size_t)E * H, per_range = EH * sizeof(float);
    if (gy > most) gy = most;
    if (gy > 65535) gy = 65535;
    if ((size_t)gy * per_range > c->workspace_bytes)
        gy = (long long)(c->workspace_bytes / per_range);
    if (gy < 1) gy = 1;
    int per = (int)(((T + gy - 1) / gy + 31) / 32 * 32);
    gy = (T + per - 1) / per;
    if (gx > 0x7fffffffLL) return MG_FAIL(MG_ERR_UNSUPPORTED, "router dw: H = %d", H);
    void *part = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)gy * per_range, &part, "router dw"));
    router_dw_mma_kernel<<<dim3((unsigned)gx, (unsigned)gy), MW_WARPS * 32, 0, c->stream>>>(
        (float *)part, dl, x, T, H, E, per);
    MG_CUDA_CHECK_LAUNCH();
    router_dw_reduce_kernel<<<(unsigned)((EH + 31) / 32), 256, 0, c->stream>>>(
        dw, (const float *)part, (int)gy, EH);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

static mg_status router_dw_rows(mg_backend *be, float *dw, const float *dl, const h16 *x, int T,
                                int H, int E) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    unsigned gx = (unsigned)((H + DW_SLICES * 256 - 1) / (DW_SLICES * 256));
    unsigned gz = (unsigned)((E + RW_EC - 1) / RW_EC);
    long long gy = (2LL * c->num_sms + gx * gz - 1) / (gx * gz);
    long long most = ((long long)T + 8 * DW_SUBS - 1) / (8 * DW_SUBS);
    size_t EH = (size_t)E * H, per_range = EH * sizeof(float);
    if (gy > most) gy = most;
    if (gy > 65535) gy = 65535;
    if ((size_t)gy * per_range > c->workspace_bytes)
        gy = (long long)(c->workspace_bytes / per_range);
    if (gy < 1) gy = 1;
    int per_block = (int)((T + gy - 1) / gy);
    gy = (T + per_block - 1) / per_block; /* no empty range */
    void *part = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)gy * per_range, &part, "router dw"));
    router_dw_rows_kernel<<<dim3(gx, (unsigned)gy, gz), DW_SLICES * DW_SUBS * 32, 0, c->stream>>>(
        (float *)part, dl, x, T, H, E, per_block);
    MG_CUDA_CHECK_LAUNCH();
    router_dw_reduce_kernel<<<(unsigned)((EH + 31) / 32), 256, 0, c->stream>>>(
        dw, (const float *)part, (int)gy, EH);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- the entries */

extern "C" mg_status MG_CUDA_FN(router_forward)(mg_backend *be, float *logits, const void *x,
                                                const void *w, int T, int H, int E) {
    // logits (T,E) fp32 = x (T,H) @ w (E,H)^T
    if (T <= 0 || E <= 0) return MG_OK;
    if (mma_ok(x, w, H, E)) {
        router_logits_mma_kernel<<<(unsigned)((T + 15) / 16), MF_WARPS * 32, 0,
                                   mg_cuda_stream(be)>>>(logits, (const h16 *)x, (const h16 *)w, T,
                                                         H, E);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    if (rows_ok(x, w, H, E)) {
        router_logits_rows_kernel<<<rows_blocks(T), RW_WARPS * 32, 0, mg_cuda_stream(be)>>>(
            logits, (const h16 *)x, (const h16 *)w, T, H, E);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    rg_args g = {x, w, H, 1, 1, H, T, E, H, 0, RG_STORE_F32, logits, NULL};
    return router_gemm<h16, h16>(be, g);
}

extern "C" mg_status MG_CUDA_FN(router_backward)(mg_backend *be, void *dx, float *dw,
                                                 const float *dlogits, const void *x, const void *w,
                                                 int T, int H, int E) {
    // dx (T,H) h16 += dlogits (T,E) @ w (E,H); dw (E,H) fp32 += dlogits^T @ x (T,H)
    if (T <= 0 || H <= 0 || E <= 0) return MG_OK;
    if (mma_ok(dx, w, H, E) && (H + MX_COLS - 1) / MX_COLS <= 65535) {
        dim3 grid((unsigned)((T + 15) / 16), (unsigned)((H + MX_COLS - 1) / MX_COLS));
        router_dx_mma_kernel<<<grid, MX_WARPS * 32, 0, mg_cuda_stream(be)>>>(
            (h16 *)dx, dlogits, (const h16 *)w, T, H, E);
        MG_CUDA_CHECK_LAUNCH();
    } else if (rows_ok(dx, w, H, E)) {
        router_dx_rows_kernel<<<rows_blocks(T), RW_WARPS * 32, 0, mg_cuda_stream(be)>>>(
            (h16 *)dx, dlogits, (const h16 *)w, T, H, E);
        MG_CUDA_CHECK_LAUNCH();
    } else {
        rg_args gx = {dlogits, w, E, 1, H, 1, T, H, E, 0, RG_ADD_H16, dx, NULL};
        MG_CHECK((router_gemm<float, h16>(be, gx)));
    }
    if (mma_ok(x, x, H, E)) return router_dw_mma(be, dw, dlogits, (const h16 *)x, T, H, E);
    if (rows_ok(x, x, H, E)) return router_dw_rows(be, dw, dlogits, (const h16 *)x, T, H, E);
    rg_args gw = {dlogits, x, 1, E, H, 1, E, H, T, 0, RG_ADD_F32, dw, NULL};
    return router_gemm<float, h16>(be, gw);
}
