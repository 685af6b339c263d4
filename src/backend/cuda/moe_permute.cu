/* MoE token movement on the GPU (CPU reference: cpu/cpu_moe.c; contract: backend_ops.h, "mixture of
 * experts"): permute and its backward, the weighted combine (unpermute) and its backward, and the
 * experts' activations over the rows of their groups. Nothing here reads a count back to the host,
 * synchronises or allocates: counts, offsets and rows are computed and read on the device, and
 * temporaries come from the backend's workspace (mg_cuda_scratch).
 *
 * Permute (E <= PERM_MAX_E): a counting sort in two kernels, no radix sort. Blocks of
 * PERM_TOKENS tokens count their kept pairs per expert (shared-memory integer atomics: exact).
 * Each block of the second kernel then reads those counts whole: every expert's total, its first
 * sorted index (their exclusive scan) and the first sorted index of the block's own pairs (the
 * same expert's counts in the blocks before); it ranks its pairs within their expert in pair
 * order (__match_any_sync in the warp, per-warp counts across the warps), so the sort is stable:
 * within an expert the pairs keep token order, the CPU's order. A pair's row is its sorted index
 * (dropless) or e x pad + its rank within the expert (padded). The same block then copies each
 * of its tokens' rows (x read once) to its pairs' rows and zeroes its share of the rows no pair
 * fills, so every row of xp, padding included, is written exactly once. Above PERM_MAX_E
 * experts: the former path, a stable radix sort (CUB) of the expert keys (dropped pairs: key E,
 * sorted last) carrying the pair index, the rows gathered in sorted order.
 * In the padded mode the CPU fails when an expert keeps more than pad pairs; here that cannot be
 * reported without a host synchronisation, so the pairs past an expert's pad rows get pos -1 (not
 * placed). The router's capacity (pad = capacity) makes that impossible.
 * The combines (permute backward, unpermute): a warp per token loads a 1024-column chunk of the
 * base row and of two pairs' rows at a time before summing in pair order. Unpermute backward: a
 * warp per token (dout read once from memory), after a pass that marks the rows some pair
 * reaches; the others are zeroed.
 *
 * Activations: the row count is the sum of counts[0..G), read by every block on the device; the
 * kernels are grid-stride loops on a grid sized for the device, so no bound is needed from the
 * host. GELU and SwiGLU are activation.cu's formulas (the CPU's).
 * Regroup (expert parallelism's fixed-size exchange): blocks of rows between packed and slab
 * placement, each block's size and offset summed from the counts on the device.
 * Exports: mg_cuda_moe_permute, mg_cuda_moe_permute_backward, mg_cuda_moe_regroup,
 * mg_cuda_moe_unpermute,
 * mg_cuda_moe_unpermute_backward, mg_cuda_grouped_activation_forward,
 * mg_cuda_grouped_swiglu_backward. */
#include "backend/cuda/activation_math.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "core/slab_rounds.h"

#include <cub/device/device_radix_sort.cuh>

#define ROW_WARPS    8  /* rows per block in the row kernels: one warp each */
#define PERM_TOKENS  16 /* tokens per block of the counting sort: 2 rows per warp */
#define PERM_THREADS 256
#define PERM_WARPS   (PERM_THREADS / 32)
#define PERM_MAX_E   512 /* the counting sort's shared memory: (4 + PERM_WARPS) E ints */
#define FULL_MASK    0xffffffffu

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* A whole row of H: h16 copies and zero fills, one warp, 16-byte vectors when vec. */
template <typename h16>
static __device__ __forceinline__ void row_copy(h16 *dst, const h16 *src, int H, int vec) {
    int lane = threadIdx.x & 31;
    int nv = vec ? H / 8 : 0;
    for (int u = lane; u < nv; u += 32) {
        uint4 z = make_uint4(0, 0, 0, 0);
        if (src) z = *reinterpret_cast<const uint4 *>(src + 8 * u);
        *reinterpret_cast<uint4 *>(dst + 8 * u) = z;
    }
    for (int h = nv * 8 + lane; h < H; h += 32) dst[h] = src ? src[h] : f_to_h16<h16>(0.0f);
}

/* ---------------------------------------------------------------- permute: counting sort */

/* Block b of the histogram and the placement takes tokens [b PERM_TOKENS, (b + 1) PERM_TOKENS),
 * i.e. pairs [b PERM_TOKENS k, ...): the same blocks in both kernels. */
static __global__ void __launch_bounds__(PERM_THREADS)
    permute_hist_kernel(int32_t *hist, const int32_t *idx, int n, int k, int E, int nb) {
    extern __shared__ int32_t hs[]; /* (E) */
    for (int e = threadIdx.x; e < E; e += PERM_THREADS) hs[e] = 0;
    __syncthreads();
    int p0 = blockIdx.x * PERM_TOKENS * k, p1 = min(n, p0 + PERM_TOKENS * k);
    for (int p = p0 + threadIdx.x; p < p1; p += PERM_THREADS) {
        int32_t e = idx[p];
        if (e >= 0 && e < E) atomicAdd(&hs[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += PERM_THREADS) hist[(size_t)e * nb + blockIdx.x] = hs[e];
}

/* Copies x's row to the rows pos[0..k) that are >= 0 (one warp, 16-byte vectors when vec). */
template <typename h16>
static __device__ __forceinline__ void scatter_row(h16 *xp, const h16 *xr, const int32_t *pos,
                                                   int k, int H, int vec) {
    int lane = threadIdx.x & 31;
    if (vec) {
        for (int hc = 0; hc < H; hc += 1024) {
            uint4 v[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int h = hc + 256 * i + 8 * lane;
                v[i] =
                    h < H ? __ldg(reinterpret_cast<const uint4 *>(xr + h)) : make_uint4(0, 0, 0, 0);
            }
            for (int j = 0; j < k; j++) {
                int32_t p = pos[j];
                if (p < 0) continue;
                h16 *o = xp + (size_t)p * H;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int h = hc + 256 * i + 8 * lane;
                    if (h < H) *reinterpret_cast<uint4 *>(o + h) = v[i];
                }
            }
        }
        return;
    }
    for (int j = 0; j < k; j++) {
        int32_t p = pos[j];
        if (p < 0) continue;
        for (int h = lane; h < H; h += 32) xp[(size_t)p * H + h] = xr[h];
    }
}

/* Block b: (0) from the histogram (E, nb), each expert's total and first sorted index (the
 * exclusive scan of the totals), and the first sorted index of its pairs in block b (+ the
 * counts of blocks < b); integer sums, exact in any order; block 0 writes counts and load. (1)
 * The sorted index of each of its kept pairs: that first index + the pair's rank among the
 * block's pairs of expert e (rounds of PERM_THREADS pairs in pair order: earlier rounds in run,
 * earlier warps in wc, earlier lanes of the warp by __match_any_sync), hence pos (stable: the
 * CPU's order). (2) Its tokens' rows copied to their pairs' rows, x read once per token. (3) Its
 * share of the rows no pair fills, zeroed. Every row of xp is written exactly once. */
template <typename h16>
static __global__ void __launch_bounds__(PERM_THREADS)
    permute_place_kernel(h16 *xp, int32_t *pos, int32_t *counts, float *load, const h16 *x,
                         const int32_t *idx, const int32_t *hist, int T, int k, int E, int H,
                         int pad, int nb, int R, int vec) {
    /* run (E) | wc (PERM_WARPS, E) | total (E) | start (E) | first (E) */
    extern __shared__ int32_t ps[];
    int32_t *run = ps, *wc = run + E, *total = wc + PERM_WARPS * E, *start = total + E;
    int32_t *first = start + E;
    __shared__ int32_t all;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, b = blockIdx.x, n = T * k;
    for (int e = warp; e < E; e += PERM_WARPS) { /* (0) */
        const int32_t *h = hist + (size_t)e * nb;
        int32_t tot = 0, before = 0;
        for (int c = lane; c < nb; c += 32) {
            int32_t v = h[c];
            tot += v;
            before += c < b ? v : 0;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            tot += __shfl_xor_sync(FULL_MASK, tot, o);
            before += __shfl_xor_sync(FULL_MASK, before, o);
        }
        if (lane == 0) total[e] = tot, first[e] = before;
    }
    for (int e = tid; e < E; e += PERM_THREADS) run[e] = 0;
    __syncthreads();
    if (warp == 0) { /* start = exclusive scan of total: lane i a contiguous run of experts */
        int m = (E + 31) / 32, e0 = min(E, lane * m), e1 = min(E, e0 + m);
        int32_t s = 0, incl;
        for (int e = e0; e < e1; e++) s += total[e];
        incl = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t v = __shfl_up_sync(FULL_MASK, incl, o);
            if (lane >= o) incl += v;
        }
        int32_t base = incl - s;
        for (int e = e0; e < e1; e++) {
            start[e] = base;
            base += total[e];
        }
        if (lane == 31) all = incl;
    }
    __syncthreads();
    for (int e = tid; e < E; e += PERM_THREADS) {
        first[e] += start[e];
        if (b == 0) {
            counts[e] = pad > 0 ? pad : total[e];
            if (load) load[e] += (float)total[e];
        }
    }
    __syncthreads();
    int p0 = b * PERM_TOKENS * k, p1 = min(n, p0 + PERM_TOKENS * k);
    for (int rb = p0; rb < p1; rb += PERM_THREADS) { /* (1) */
        for (int i = tid; i < PERM_WARPS * E; i += PERM_THREADS) wc[i] = 0;
        __syncthreads();
        int p = rb + tid;
        int32_t e = p < p1 ? idx[p] : -1;
        bool keep = p < p1 && e >= 0 && e < E;
        unsigned peers = __match_any_sync(FULL_MASK, keep ? e : -1);
        int wr = __popc(peers & ((1u << lane) - 1u));
        if (keep && wr == 0) wc[warp * E + e] = __popc(peers);
        __syncthreads();
        if (p < p1) {
            int32_t q = -1;
            if (keep) {
                int32_t rank = run[e] + wr;
                for (int w = 0; w < warp; w++) rank += wc[w * E + e];
                int32_t i = first[e] + rank;
                if (pad > 0) {
                    int32_t re = i - start[e];
                    q = re < pad ? e * pad + re : -1;
                } else {
                    q = i;
                }
            }
            pos[p] = q;
        }
        __syncthreads();
        for (int e2 = tid; e2 < E; e2 += PERM_THREADS) {
            int32_t s = 0;
            for (int w = 0; w < PERM_WARPS; w++) s += wc[w * E + e2];
            run[e2] += s;
        }
        __syncthreads(); /* wc is read before the next round clears it */
    }
    __syncthreads(); /* the block's pos (global) is visible to the block */
    int tb0 = b * PERM_TOKENS, tb1 = min(T, tb0 + PERM_TOKENS);
    for (int t = tb0 + warp; t < tb1; t += PERM_WARPS) /* (2) */
        scatter_row(xp, x + (size_t)t * H, pos + (size_t)t * k, k, H, vec);
    int rpb = (R + nb - 1) / nb, r0 = b * rpb, r1 = min(R, r0 + rpb);
    for (int r = r0 + warp; r < r1; r += PERM_WARPS) { /* (3) */
        bool placed = pad > 0 ? r % pad < total[r / pad] : r < all;
        if (!placed) row_copy<h16>(xp + (size_t)r * H, NULL, H, vec);
    }
}

template <typename h16>
static mg_status permute_counting(mg_backend *be, void *xp, int32_t *pos, int32_t *counts,
                                  float *load, const void *x, const int32_t *idx, int T, int k,
                                  int E, int H, int pad) {
    cudaStream_t st = mg_cuda_stream(be);
    int n = T * k, R = pad > 0 ? E * pad : n;
    int nb = (T + PERM_TOKENS - 1) / PERM_TOKENS;
    if (nb < 1) nb = 1;
    int32_t *hist = NULL; /* (E, nb) */
    MG_CHECK(mg_cuda_scratch(be, (size_t)E * nb * 4, (void **)&hist, "moe permute"));
    permute_hist_kernel<<<(unsigned)nb, PERM_THREADS, (size_t)E * 4, st>>>(hist, idx, n, k, E, nb);
    MG_CUDA_CHECK_LAUNCH();
    int vec = H % 8 == 0 && mg_cuda_aligned16(xp) && mg_cuda_aligned16(x);
    permute_place_kernel<h16><<<(unsigned)nb, PERM_THREADS, (size_t)(4 + PERM_WARPS) * E * 4, st>>>(
        (h16 *)xp, pos, counts, load, (const h16 *)x, idx, hist, T, k, E, H, pad, nb, R, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- permute: radix sort */

/* Above PERM_MAX_E experts. */

static __global__ void permute_keys_kernel(uint32_t *keys, int32_t *vals, int32_t *kept,
                                           const int32_t *idx, int n, int E) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < (size_t)n; p += stride) {
        int32_t e = idx[p];
        bool keep = e >= 0 && e < E;
        keys[p] = keep ? (uint32_t)e : (uint32_t)E;
        vals[p] = (int32_t)p;
        if (keep) atomicAdd(&kept[e], 1);
    }
}

/* One thread: start = exclusive scan of kept (E + 1), counts, load. */
static __global__ void permute_scan_serial_kernel(int32_t *start, int32_t *counts, float *load,
                                                  const int32_t *kept, int E, int pad) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int32_t s = 0;
    for (int e = 0; e < E; e++) {
        start[e] = s;
        s += kept[e];
        counts[e] = pad > 0 ? pad : kept[e];
        if (load) load[e] += (float)kept[e];
    }
    start[E] = s;
}

static __global__ void permute_pos_kernel(int32_t *pos, const uint32_t *ks, const int32_t *vs,
                                          const int32_t *start, int n, int E, int pad) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        int e = (int)ks[i];
        int32_t p = -1;
        if (e < E) {
            int32_t r = (int32_t)i - start[e];
            p = pad > 0 ? (r < pad ? e * pad + r : -1) : (int32_t)i;
        }
        pos[vs[i]] = p;
    }
}

/* Row r of xp: the token of the pair placed there, or zeros. */
template <typename h16>
static __global__ void permute_rows_kernel(h16 *xp, const h16 *x, const int32_t *vs,
                                           const int32_t *start, const int32_t *kept, int R, int k,
                                           int E, int H, int pad, int vec) {
    int warps = gridDim.x * ROW_WARPS;
    for (int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32; r < R; r += warps) {
        int src = -1;
        if (pad > 0) {
            int e = r / pad, q = r - e * pad;
            if (e < E && q < kept[e] && q < pad) src = vs[start[e] + q] / k;
        } else if (r < start[E]) {
            src = vs[r] / k;
        }
        row_copy<h16>(xp + (size_t)r * H, src >= 0 ? x + (size_t)src * H : NULL, H, vec);
    }
}

static unsigned row_blocks(mg_backend *be, int rows) {
    unsigned b = (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS);
    unsigned cap = (unsigned)mg_cuda_ctx_of(be)->num_sms * 16;
    if (b > cap) b = cap;
    return b < 1 ? 1 : b;
}

template <typename h16>
static mg_status permute_sorted(mg_backend *be, void *xp, int32_t *pos, int32_t *counts,
                                float *load, const void *x, const int32_t *idx, int T, int k, int E,
                                int H, int pad) {
    cudaStream_t st = mg_cuda_stream(be);
    int n = T * k, R = pad > 0 ? E * pad : n;
    int end_bit = 1;
    while (end_bit < 32 && ((unsigned)E >> end_bit) != 0) end_bit++; /* keys 0..E */
    uint32_t *keys = NULL, *keys_s = NULL;
    int32_t *vals = NULL, *vals_s = NULL;
    size_t sort_bytes = 0;
    if (n > 0)
        MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, keys, keys_s, vals, vals_s,
                                                      n, 0, end_bit, st));
    /* workspace: keys, sorted keys, pairs, sorted pairs (n each) | kept (E) | start (E+1) | CUB */
    size_t o_kept = 4 * align256((size_t)n * 4), o_start = o_kept + align256((size_t)E * 4);
    size_t o_sort = o_start + align256((size_t)(E + 1) * 4);
    char *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, o_sort + sort_bytes, (void **)&ws, "moe permute"));
    keys = (uint32_t *)ws;
    keys_s = (uint32_t *)(ws + align256((size_t)n * 4));
    vals = (int32_t *)(ws + 2 * align256((size_t)n * 4));
    vals_s = (int32_t *)(ws + 3 * align256((size_t)n * 4));
    int32_t *kept = (int32_t *)(ws + o_kept), *start = (int32_t *)(ws + o_start);
    MG_CUDA_CHECK(cudaMemsetAsync(kept, 0, (size_t)E * 4, st));
    unsigned pgrid = mg_cuda_blocks((size_t)n, MG_CUDA_THREADS);
    if (n > 0) {
        permute_keys_kernel<<<pgrid, MG_CUDA_THREADS, 0, st>>>(keys, vals, kept, idx, n, E);
        MG_CUDA_CHECK_LAUNCH();
        MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + o_sort, sort_bytes, keys, keys_s, vals,
                                                      vals_s, n, 0, end_bit, st));
    }
    permute_scan_serial_kernel<<<1, 32, 0, st>>>(start, counts, load, kept, E, pad);
    MG_CUDA_CHECK_LAUNCH();
    if (n > 0) {
        permute_pos_kernel<<<pgrid, MG_CUDA_THREADS, 0, st>>>(pos, keys_s, vals_s, start, n, E,
                                                              pad);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (R > 0 && H > 0) {
        int vec = H % 8 == 0 && mg_cuda_aligned16(xp) && mg_cuda_aligned16(x);
        permute_rows_kernel<h16><<<row_blocks(be, R), ROW_WARPS * 32, 0, st>>>(
            (h16 *)xp, (const h16 *)x, vals_s, start, kept, R, k, E, H, pad, vec);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, moe_permute,
               (mg_backend * be, void *xp, int32_t *pos, int32_t *counts, float *load,
                const void *x, const int32_t *idx, int T, int k, int E, int H, int pad),
               (be, xp, pos, counts, load, x, idx, T, k, E, H, pad)) {
    // xp (R,H), R = pad > 0 ? E x pad : T x k; pos, idx (T,k); counts, load (E); x (T,H)
    if (E <= 0) return MG_OK;
    if (E <= PERM_MAX_E && T >= 0 && k >= 1)
        return permute_counting<h16>(be, xp, pos, counts, load, x, idx, T, k, E, H, pad);
    return permute_sorted<h16>(be, xp, pos, counts, load, x, idx, T, k, E, H, pad);
}

/* ---------------------------------------------------------------- the combines */

/* out[t] = base[t] + sum_j w_j src[pos[t,j]] over the pairs with pos >= 0, in pair order in fp32
 * with one rounding (w_j = probs[t,j], or 1 when probs is NULL: fmaf(1, s, a) = a + s). Each
 * element is read and written by one thread, so base may be out. One element per item. */
template <typename h16>
static __global__ void combine_kernel(h16 *out, const h16 *base, const h16 *src, const int32_t *pos,
                                      const float *probs, int T, int k, int H) {
    size_t items = (size_t)T * H, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t t = u / H, h = u % H;
        float acc = h16_to_f(base[u]);
        for (int j = 0; j < k; j++) {
            int32_t p = pos[t * k + j];
            if (p < 0) continue;
            acc = fmaf(probs ? probs[t * k + j] : 1.0f, h16_to_f(src[(size_t)p * H + h]), acc);
        }
        out[u] = f_to_h16<h16>(acc);
    }
}

/* The same sums with 16-byte vectors, one warp per token: a 1024-column chunk of base and of two
 * pairs' rows at a time all loaded before the sums, which run in pair order as above. */
template <typename h16>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    combine_rows_kernel(h16 *out, const h16 *base, const h16 *src, const int32_t *pos,
                        const float *probs, int T, int k, int H) {
    int lane = threadIdx.x & 31, warps = gridDim.x * ROW_WARPS;
    for (int t = blockIdx.x * ROW_WARPS + threadIdx.x / 32; t < T; t += warps) {
        const int32_t *pt = pos + (size_t)t * k;
        const float *wt = probs ? probs + (size_t)t * k : NULL;
        for (int hc = 0; hc < H; hc += 1024) {
            float acc[4][8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int h = hc + 256 * i + 8 * lane;
                uint4 v = h < H ? *reinterpret_cast<const uint4 *>(base + (size_t)t * H + h)
                                : make_uint4(0, 0, 0, 0);
                mg_unpack8<h16>(v, acc[i]);
            }
            for (int j = 0; j < k; j += 2) {
                int32_t p0 = pt[j], p1 = j + 1 < k ? pt[j + 1] : -1;
                float w0 = wt ? wt[j] : 1.0f, w1 = wt && j + 1 < k ? wt[j + 1] : 1.0f;
                uint4 s0[4], s1[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int h = hc + 256 * i + 8 * lane;
                    s0[i] = s1[i] = make_uint4(0, 0, 0, 0);
                    if (h < H && p0 >= 0)
                        s0[i] = *reinterpret_cast<const uint4 *>(src + (size_t)p0 * H + h);
                    if (h < H && p1 >= 0)
                        s1[i] = *reinterpret_cast<const uint4 *>(src + (size_t)p1 * H + h);
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float f[8];
                    if (p0 >= 0) {
                        mg_unpack8<h16>(s0[i], f);
#pragma unroll
                        for (int c = 0; c < 8; c++) acc[i][c] = fmaf(w0, f[c], acc[i][c]);
                    }
                    if (p1 >= 0) {
                        mg_unpack8<h16>(s1[i], f);
#pragma unroll
                        for (int c = 0; c < 8; c++) acc[i][c] = fmaf(w1, f[c], acc[i][c]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int h = hc + 256 * i + 8 * lane;
                if (h < H) mg_store8(out + (size_t)t * H + h, acc[i]);
            }
        }
    }
}

/* vec (H % 8 == 0, 16-byte aligned rows): a warp per token; else a thread per element. */
template <typename h16>
static void launch_combine(mg_backend *be, h16 *out, const h16 *base, const h16 *src,
                           const int32_t *pos, const float *probs, int T, int k, int H, bool vec,
                           cudaStream_t st) {
    if (vec)
        combine_rows_kernel<h16>
            <<<row_blocks(be, T), ROW_WARPS * 32, 0, st>>>(out, base, src, pos, probs, T, k, H);
    else
        combine_kernel<h16>
            <<<mg_cuda_blocks((size_t)T * H, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                out, base, src, pos, probs, T, k, H);
}

MG_CUDA_DTYPES(mg_status, moe_permute_backward,
               (mg_backend * be, void *dx, const void *dxp, const int32_t *pos, int T, int k,
                int H),
               (be, dx, dxp, pos, T, k, H)) {
    // dx (T,H) accumulates; dxp (R,H); pos (T,k)
    if (T <= 0 || H <= 0 || k <= 0) return MG_OK;
    bool vec = H % 8 == 0 && mg_cuda_aligned16(dx) && mg_cuda_aligned16(dxp);
    launch_combine(be, (h16 *)dx, (const h16 *)dx, (const h16 *)dxp, pos, NULL, T, k, H, vec,
                   mg_cuda_stream(be));
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- regroup (expert parallelism) */

/* Block p of the exchange (blockIdx.y): its packed offset and rows from counts (P x El, small),
 * its window [first, first + slab), then one warp per row, grid-stride over the slab. */
template <typename h16>
static __global__ void regroup_kernel(h16 *dst, const h16 *src, const int32_t *counts, int P,
                                      int El, int slab, int first, int H, int to_slabs, int vec) {
    int p = blockIdx.y;
    int64_t in = 0;
    const int64_t n = mg_slab_window(counts, p, El, slab, first, &in);
    (void)P;
    const int64_t at = (int64_t)p * slab;
    int warp = (int)(threadIdx.x >> 5), warps = (int)(blockDim.x >> 5);
    for (long long r = (long long)blockIdx.x * warps + warp; r < n;
         r += (long long)gridDim.x * warps) {
        long long from = to_slabs ? in + r : at + r, to = to_slabs ? at + r : in + r;
        row_copy<h16>(dst + (size_t)to * H, src + (size_t)from * H, H, vec);
    }
}

MG_CUDA_DTYPES(mg_status, moe_regroup,
               (mg_backend * be, void *dst, const void *src, const int32_t *counts, int P, int El,
                int slab, int first, int H, bool to_slabs),
               (be, dst, src, counts, P, El, slab, first, H, to_slabs)) {
    // dst, src (P x slab, H) on the slab side, packed rows on the other; counts (P x El)
    if (P <= 0 || slab <= 0 || H <= 0) return MG_OK;
    if (P > 65535) return MG_FAIL(MG_ERR_UNSUPPORTED, "regroup over %d ranks (at most 65535)", P);
    int vec = H % 8 == 0 && mg_cuda_aligned16(dst) && mg_cuda_aligned16(src);
    dim3 grid(row_blocks(be, slab), (unsigned)P);
    regroup_kernel<h16><<<grid, ROW_WARPS * 32, 0, mg_cuda_stream(be)>>>(
        (h16 *)dst, (const h16 *)src, counts, P, El, slab, first, H, to_slabs, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- unpermute (the combine) */

MG_CUDA_DTYPES(mg_status, moe_unpermute,
               (mg_backend * be, void *out, const void *base, const void *y, const int32_t *pos,
                const float *probs, int T, int k, int H),
               (be, out, base, y, pos, probs, T, k, H)) {
    // out, base (T,H); y (R,H); pos, probs (T,k)
    if (T <= 0 || H <= 0) return MG_OK;
    bool vec =
        H % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(base) && mg_cuda_aligned16(y);
    launch_combine(be, (h16 *)out, (const h16 *)base, (const h16 *)y, pos, probs, T, k, H, vec,
                   mg_cuda_stream(be));
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* mark[pos[q]] = 1 for the rows a pair reaches (mark starts all 0). */
static __global__ void unpermute_mark_kernel(int32_t *mark, const int32_t *pos, int n, int R) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < (size_t)n; q += stride) {
        int32_t p = pos[q];
        if (p >= 0 && p < R) mark[p] = 1;
    }
}

/* One warp per token t, reading dout[t] once per pair (L1 after the first): for each pair q =
 * t k + j with a row p, dy[p] = probs[q] dout[t] and dprobs[q] = dout[t] . y[p] (fp32 lane sums
 * in column order, a fixed butterfly); dprobs of the other pairs 0. Then, warp per row, the
 * rows no pair reaches (mark 0) are zeroed. */
template <typename h16>
static __global__ void unpermute_backward_tokens_kernel(h16 *dy, float *dprobs, const h16 *dout,
                                                        const h16 *y, const int32_t *pos,
                                                        const float *probs, const int32_t *mark,
                                                        int T, int k, int H, int R, int vec) {
    int lane = threadIdx.x & 31, warps = gridDim.x * ROW_WARPS;
    int w0 = blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    for (int t = w0; t < T; t += warps) {
        const h16 *d = dout + (size_t)t * H;
        for (int j = 0; j < k; j++) {
            size_t q = (size_t)t * k + j;
            int32_t p = pos[q];
            if (p < 0 || p >= R) {
                if (lane == 0) dprobs[q] = 0.0f;
                continue;
            }
            const h16 *s = y + (size_t)p * H;
            h16 *o = dy + (size_t)p * H;
            float w = probs[q], dot = 0.0f;
            if (vec) {
                for (int hc = 0; hc < H; hc += 1024) {
                    uint4 dv[4], sv[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int h = hc + 256 * i + 8 * lane;
                        dv[i] = sv[i] = make_uint4(0, 0, 0, 0);
                        if (h < H) {
                            dv[i] = *reinterpret_cast<const uint4 *>(d + h);
                            sv[i] = *reinterpret_cast<const uint4 *>(s + h);
                        }
                    }
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int h = hc + 256 * i + 8 * lane;
                        if (h >= H) break;
                        float fd[8], fs[8];
                        const typename mg_h16<h16>::x2 *a =
                            reinterpret_cast<const typename mg_h16<h16>::x2 *>(&dv[i]);
                        const typename mg_h16<h16>::x2 *b =
                            reinterpret_cast<const typename mg_h16<h16>::x2 *>(&sv[i]);
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            float2 x2 = h16x2_to_f2(a[c]), y2 = h16x2_to_f2(b[c]);
                            fd[2 * c] = x2.x, fd[2 * c + 1] = x2.y;
                            fs[2 * c] = y2.x, fs[2 * c + 1] = y2.y;
                        }
#pragma unroll
                        for (int c = 0; c < 8; c++) {
                            dot += fd[c] * fs[c];
                            fd[c] *= w;
                        }
                        mg_store8(o + h, fd);
                    }
                }
            } else {
                for (int h = lane; h < H; h += 32) {
                    float fd = h16_to_f(d[h]);
                    dot += fd * h16_to_f(s[h]);
                    o[h] = f_to_h16<h16>(w * fd);
                }
            }
            dot = mg_warp_sum(dot);
            if (lane == 0) dprobs[q] = dot;
        }
    }
    for (int r = w0; r < R; r += warps)
        if (mark[r] == 0) row_copy<h16>(dy + (size_t)r * H, NULL, H, vec);
}

MG_CUDA_DTYPES(mg_status, moe_unpermute_backward,
               (mg_backend * be, void *dy, float *dprobs, const void *dout, const void *y,
                const int32_t *pos, const float *probs, int T, int k, int H, int R),
               (be, dy, dprobs, dout, y, pos, probs, T, k, H, R)) {
    // dy, y (R,H); dprobs, pos, probs (T,k); dout (T,H)
    int n = T * k;
    if (R <= 0 && n <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    int32_t *mark = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)(R > 0 ? R : 1) * sizeof(int32_t), (void **)&mark,
                             "moe unpermute backward"));
    if (R > 0) MG_CUDA_CHECK(cudaMemsetAsync(mark, 0, (size_t)R * sizeof(int32_t), st));
    if (n > 0 && R > 0) {
        unpermute_mark_kernel<<<mg_cuda_blocks((size_t)n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
                                st>>>(mark, pos, n, R);
        MG_CUDA_CHECK_LAUNCH();
    }
    int vec =
        H % 8 == 0 && mg_cuda_aligned16(dy) && mg_cuda_aligned16(dout) && mg_cuda_aligned16(y);
    int items = T > R ? T : R;
    unpermute_backward_tokens_kernel<h16><<<row_blocks(be, items), ROW_WARPS * 32, 0, st>>>(
        (h16 *)dy, dprobs, (const h16 *)dout, (const h16 *)y, pos, probs, mark, T, k, H, R, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- grouped activations */

/* the formulas: activation_math.cuh */

/* The rows of the groups, read by each block (G is small: experts x source ranks). */
static __device__ size_t group_rows(const int32_t *counts, int G) {
    __shared__ long long rows;
    if (threadIdx.x == 0) {
        long long s = 0;
        for (int g = 0; g < G; g++) s += counts[g] > 0 ? counts[g] : 0;
        rows = s;
    }
    __syncthreads();
    return (size_t)rows;
}

template <typename h16>
static __global__ void grouped_gelu_kernel(h16 *out, const h16 *pre, const int32_t *counts, int G,
                                           int F, int vec) {
    mg_gelu_forward_range(out, pre, group_rows(counts, G) * (size_t)F, vec);
}

/* out (rows,F) = silu(gate) * up, pre (rows,2F) = [gate | up]; VEC columns per item. */
template <typename h16, int VEC>
static __global__ void grouped_swiglu_kernel(h16 *out, const h16 *pre, const int32_t *counts, int G,
                                             int F) {
    mg_swiglu_forward_rows<VEC>(out, pre, group_rows(counts, G), F);
}

template <typename h16, int VEC>
static __global__ void grouped_swiglu_backward_kernel(h16 *dpre, const h16 *pre, const h16 *dout,
                                                      const int32_t *counts, int G, int F) {
    mg_swiglu_backward_rows<VEC>(dpre, pre, dout, group_rows(counts, G), F);
}

/* A grid that covers the device; the kernels stride over however many rows the counts give. */
static unsigned activation_blocks(mg_backend *be) {
    return (unsigned)mg_cuda_ctx_of(be)->num_sms * 8;
}

MG_CUDA_DTYPES(mg_status, grouped_activation_forward,
               (mg_backend * be, void *out, const void *pre, const int32_t *counts, int G, int F,
                bool swiglu),
               (be, out, pre, counts, G, F, swiglu)) {
    // swiglu: out (rows,F), pre (rows,2F); else out, pre (rows,F); rows = sum counts[0..G)
    if (G <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    unsigned grid = activation_blocks(be);
    bool al = mg_cuda_aligned16(out) && mg_cuda_aligned16(pre);
    if (!swiglu)
        grouped_gelu_kernel<h16>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)out, (const h16 *)pre, counts, G, F, al);
    else if (al && F % 8 == 0)
        grouped_swiglu_kernel<h16, 8>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)out, (const h16 *)pre, counts, G, F);
    else
        grouped_swiglu_kernel<h16, 1>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)out, (const h16 *)pre, counts, G, F);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, grouped_swiglu_backward,
               (mg_backend * be, void *dpre, const void *pre, const void *dout,
                const int32_t *counts, int G, int F),
               (be, dpre, pre, dout, counts, G, F)) {
    // dpre, pre (rows,2F); dout (rows,F); rows = sum counts[0..G)
    if (G <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    unsigned grid = activation_blocks(be);
    if (F % 8 == 0 && mg_cuda_aligned16(dpre) && mg_cuda_aligned16(pre) && mg_cuda_aligned16(dout))
        grouped_swiglu_backward_kernel<h16, 8><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (h16 *)dpre, (const h16 *)pre, (const h16 *)dout, counts, G, F);
    else
        grouped_swiglu_backward_kernel<h16, 1><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (h16 *)dpre, (const h16 *)pre, (const h16 *)dout, counts, G, F);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
