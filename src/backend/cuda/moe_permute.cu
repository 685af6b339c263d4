/* MoE token movement on the GPU (CPU reference: cpu/cpu_moe.c; contract: backend.h, "mixture of
 * experts"): permute and its backward, the weighted combine (unpermute) and its backward, and the
 * experts' activations over the rows of their groups. Nothing here reads a count back to the host,
 * synchronises or allocates: counts, offsets and rows are computed and read on the device, and
 * temporaries come from the backend's workspace (mg_cuda_scratch).
 *
 * Permute: the kept pairs are sorted by expert with a stable radix sort (CUB) of the keys
 * idx (dropped pairs: key E, sorted last) carrying the pair index, so within an expert the pairs
 * keep token order, the CPU's order. A histogram (integer atomics: exact) and its exclusive scan
 * give each expert's first sorted index; a pair's row is its sorted index (dropless) or
 * e x pad + its rank within the expert (padded). The rows are then gathered: output row r knows
 * its pair from the sorted order, so every row, padding included, is written exactly once.
 * In the padded mode the CPU fails when an expert keeps more than pad pairs; here that cannot be
 * reported without a host synchronisation, so the pairs past an expert's pad rows get pos -1 (not
 * placed). The router's capacity (pad = capacity) makes that impossible.
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

#include <cub/device/device_radix_sort.cuh>

#define ROW_WARPS 8 /* rows per block in the row kernels: one warp each */

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* A whole row of H: bf16 copies and zero fills, one warp, 16-byte vectors when vec. */
static __device__ __forceinline__ void row_copy(bf16 *dst, const bf16 *src, int H, int vec) {
    int lane = threadIdx.x & 31;
    int nv = vec ? H / 8 : 0;
    for (int u = lane; u < nv; u += 32) {
        uint4 z = make_uint4(0, 0, 0, 0);
        if (src) z = *reinterpret_cast<const uint4 *>(src + 8 * u);
        *reinterpret_cast<uint4 *>(dst + 8 * u) = z;
    }
    for (int h = nv * 8 + lane; h < H; h += 32) dst[h] = src ? src[h] : __float2bfloat16_rn(0.0f);
}

/* ---------------------------------------------------------------- permute */

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
static __global__ void permute_scan_kernel(int32_t *start, int32_t *counts, float *load,
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
static __global__ void permute_rows_kernel(bf16 *xp, const bf16 *x, const int32_t *vs,
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
        row_copy(xp + (size_t)r * H, src >= 0 ? x + (size_t)src * H : NULL, H, vec);
    }
}

static unsigned row_blocks(mg_backend *be, int rows) {
    unsigned b = (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS);
    unsigned cap = (unsigned)mg_cuda_ctx_of(be)->num_sms * 16;
    if (b > cap) b = cap;
    return b < 1 ? 1 : b;
}

extern "C" mg_status mg_cuda_moe_permute(mg_backend *be, void *xp, int32_t *pos, int32_t *counts,
                                         float *load, const void *x, const int32_t *idx, int T,
                                         int k, int E, int H, int pad) {
    // xp (R,H), R = pad > 0 ? E x pad : T x k; pos, idx (T,k); counts, load (E); x (T,H)
    if (E <= 0) return MG_OK;
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
    permute_scan_kernel<<<1, 32, 0, st>>>(start, counts, load, kept, E, pad);
    MG_CUDA_CHECK_LAUNCH();
    if (n > 0) {
        permute_pos_kernel<<<pgrid, MG_CUDA_THREADS, 0, st>>>(pos, keys_s, vals_s, start, n, E,
                                                              pad);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (R > 0 && H > 0) {
        int vec = H % 8 == 0 && mg_cuda_aligned16(xp) && mg_cuda_aligned16(x);
        permute_rows_kernel<<<row_blocks(be, R), ROW_WARPS * 32, 0, st>>>(
            (bf16 *)xp, (const bf16 *)x, vals_s, start, kept, R, k, E, H, pad, vec);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}

/* dx[t] += sum_j dxp[pos[t,j]] (fp32 sum in pair order, one rounding). VEC columns per item. */
template <int VEC>
static __global__ void permute_backward_kernel(bf16 *dx, const bf16 *dxp, const int32_t *pos, int T,
                                               int k, int H) {
    size_t per_row = (size_t)H / VEC, items = (size_t)T * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t t = u / per_row, h = (u % per_row) * VEC;
        float acc[VEC], s[VEC];
        mg_loadv<VEC>(dx + t * H + h, acc);
        for (int j = 0; j < k; j++) {
            int32_t p = pos[t * k + j];
            if (p < 0) continue;
            mg_loadv<VEC>(dxp + (size_t)p * H + h, s);
#pragma unroll
            for (int q = 0; q < VEC; q++) acc[q] += s[q];
        }
        mg_storev<VEC>(dx + t * H + h, acc);
    }
}

extern "C" mg_status mg_cuda_moe_permute_backward(mg_backend *be, void *dx, const void *dxp,
                                                  const int32_t *pos, int T, int k, int H) {
    // dx (T,H) accumulates; dxp (R,H); pos (T,k)
    if (T <= 0 || H <= 0 || k <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    if (H % 8 == 0 && mg_cuda_aligned16(dx) && mg_cuda_aligned16(dxp)) {
        permute_backward_kernel<8>
            <<<mg_cuda_blocks((size_t)T * (H / 8), MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (bf16 *)dx, (const bf16 *)dxp, pos, T, k, H);
    } else {
        permute_backward_kernel<1>
            <<<mg_cuda_blocks((size_t)T * H, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (bf16 *)dx, (const bf16 *)dxp, pos, T, k, H);
    }
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- regroup (expert parallelism) */

/* Block p of the exchange (blockIdx.y): its packed offset and rows from counts (P x El, small),
 * then one warp per row, grid-stride over the slab. */
static __global__ void regroup_kernel(bf16 *dst, const bf16 *src, const int32_t *counts, int P,
                                      int El, int slab, int H, int to_slabs, int vec) {
    int p = blockIdx.y;
    long long packed = 0, n = 0;
    for (int q = 0; q <= p; q++) {
        long long m = 0;
        for (int j = 0; j < El; j++) m += counts[q * El + j];
        if (q < p) packed += m;
        else n = m < slab ? m : slab;
    }
    (void)P;
    long long at = (long long)p * slab;
    int warp = (int)(threadIdx.x >> 5), warps = (int)(blockDim.x >> 5);
    for (long long r = (long long)blockIdx.x * warps + warp; r < n; r += (long long)gridDim.x * warps) {
        long long from = to_slabs ? packed + r : at + r, to = to_slabs ? at + r : packed + r;
        row_copy(dst + (size_t)to * H, src + (size_t)from * H, H, vec);
    }
}

extern "C" mg_status mg_cuda_moe_regroup(mg_backend *be, void *dst, const void *src,
                                         const int32_t *counts, int P, int El, int slab, int H,
                                         bool to_slabs) {
    // dst, src (P x slab, H) on the slab side, packed rows on the other; counts (P x El)
    if (P <= 0 || slab <= 0 || H <= 0) return MG_OK;
    if (P > 65535) return MG_FAIL(MG_ERR_UNSUPPORTED, "regroup over %d ranks (at most 65535)", P);
    int vec = H % 8 == 0 && mg_cuda_aligned16(dst) && mg_cuda_aligned16(src);
    dim3 grid(row_blocks(be, slab), (unsigned)P);
    regroup_kernel<<<grid, ROW_WARPS * 32, 0, mg_cuda_stream(be)>>>(
        (bf16 *)dst, (const bf16 *)src, counts, P, El, slab, H, to_slabs, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---------------------------------------------------------------- unpermute (the combine) */

/* out[t] = base[t] + sum_j probs[t,j] y[pos[t,j]] in fp32 in pair order (the CPU's), one
 * rounding; each element is read and written by one thread, so base may be out. */
template <int VEC>
static __global__ void unpermute_kernel(bf16 *out, const bf16 *base, const bf16 *y,
                                        const int32_t *pos, const float *probs, int T, int k,
                                        int H) {
    size_t per_row = (size_t)H / VEC, items = (size_t)T * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t t = u / per_row, h = (u % per_row) * VEC;
        float acc[VEC], s[VEC];
        mg_loadv<VEC>(base + t * H + h, acc);
        for (int j = 0; j < k; j++) {
            int32_t p = pos[t * k + j];
            if (p < 0) continue;
            float w = probs[t * k + j];
            mg_loadv<VEC>(y + (size_t)p * H + h, s);
#pragma unroll
            for (int q = 0; q < VEC; q++) acc[q] += w * s[q];
        }
        mg_storev<VEC>(out + t * H + h, acc);
    }
}

extern "C" mg_status mg_cuda_moe_unpermute(mg_backend *be, void *out, const void *base,
                                           const void *y, const int32_t *pos, const float *probs,
                                           int T, int k, int H) {
    // out, base (T,H); y (R,H); pos, probs (T,k)
    if (T <= 0 || H <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    if (H % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(base) && mg_cuda_aligned16(y)) {
        unpermute_kernel<8>
            <<<mg_cuda_blocks((size_t)T * (H / 8), MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (bf16 *)out, (const bf16 *)base, (const bf16 *)y, pos, probs, T, k, H);
    } else {
        unpermute_kernel<1>
            <<<mg_cuda_blocks((size_t)T * H, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (bf16 *)out, (const bf16 *)base, (const bf16 *)y, pos, probs, T, k, H);
    }
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* inv[pos[q]] = q for kept pairs (inv starts all -1); dprobs of dropped pairs 0. */
static __global__ void unpermute_inverse_kernel(int32_t *inv, float *dprobs, const int32_t *pos,
                                                int n, int R) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < (size_t)n; q += stride) {
        int32_t p = pos[q];
        if (p >= 0 && p < R)
            inv[p] = (int32_t)q;
        else
            dprobs[q] = 0.0f;
    }
}

/* One warp per row r of dy: probs[q] dout[t] for the pair q placed there (zeros for none), and
 * dprobs[q] = dout[t] . y[r] (fp32 lane sums, a fixed butterfly). */
static __global__ void unpermute_backward_rows_kernel(bf16 *dy, float *dprobs, const bf16 *dout,
                                                      const bf16 *y, const int32_t *inv,
                                                      const float *probs, int R, int k, int H,
                                                      int vec) {
    int lane = threadIdx.x & 31, warps = gridDim.x * ROW_WARPS;
    for (int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32; r < R; r += warps) {
        int32_t q = inv[r];
        bf16 *o = dy + (size_t)r * H;
        if (q < 0) {
            row_copy(o, NULL, H, vec);
            continue;
        }
        const bf16 *d = dout + (size_t)(q / k) * H, *s = y + (size_t)r * H;
        float w = probs[q], dot = 0.0f;
        int nv = vec ? H / 8 : 0;
        for (int u = lane; u < nv; u += 32) {
            float fd[8], fs[8];
            mg_load8(d + 8 * u, fd);
            mg_load8(s + 8 * u, fs);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                dot += fd[i] * fs[i];
                fd[i] *= w;
            }
            mg_store8(o + 8 * u, fd);
        }
        for (int h = nv * 8 + lane; h < H; h += 32) {
            float fd = __bfloat162float(d[h]);
            dot += fd * __bfloat162float(s[h]);
            o[h] = __float2bfloat16_rn(w * fd);
        }
        dot = mg_warp_sum(dot);
        if (lane == 0) dprobs[q] = dot;
    }
}

extern "C" mg_status mg_cuda_moe_unpermute_backward(mg_backend *be, void *dy, float *dprobs,
                                                    const void *dout, const void *y,
                                                    const int32_t *pos, const float *probs, int T,
                                                    int k, int H, int R) {
    // dy, y (R,H); dprobs, pos, probs (T,k); dout (T,H)
    int n = T * k;
    if (R <= 0 && n <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    int32_t *inv = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)(R > 0 ? R : 1) * sizeof(int32_t), (void **)&inv,
                             "moe unpermute backward"));
    if (R > 0) MG_CUDA_CHECK(cudaMemsetAsync(inv, 0xFF, (size_t)R * sizeof(int32_t), st));
    if (n > 0) {
        unpermute_inverse_kernel<<<mg_cuda_blocks((size_t)n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
                                   st>>>(inv, dprobs, pos, n, R);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (R > 0 && H > 0) {
        int vec =
            H % 8 == 0 && mg_cuda_aligned16(dy) && mg_cuda_aligned16(dout) && mg_cuda_aligned16(y);
        unpermute_backward_rows_kernel<<<row_blocks(be, R), ROW_WARPS * 32, 0, st>>>(
            (bf16 *)dy, dprobs, (const bf16 *)dout, (const bf16 *)y, inv, probs, R, k, H, vec);
        MG_CUDA_CHECK_LAUNCH();
    }
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

static __global__ void grouped_gelu_kernel(bf16 *out, const bf16 *pre, const int32_t *counts, int G,
                                           int F, int vec) {
    size_t n = group_rows(counts, G) * (size_t)F;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 8 : 0;
    for (size_t u = t0; u < nv; u += stride) {
        float f[8];
        mg_load8(pre + 8 * u, f);
#pragma unroll
        for (int q = 0; q < 8; q++) f[q] = mg_gelu_fwd(f[q]);
        mg_store8(out + 8 * u, f);
    }
    for (size_t i = nv * 8 + t0; i < n; i += stride)
        out[i] = __float2bfloat16_rn(mg_gelu_fwd(__bfloat162float(pre[i])));
}

/* out (rows,F) = silu(gate) * up, pre (rows,2F) = [gate | up]; VEC columns per item. */
template <int VEC>
static __global__ void grouped_swiglu_kernel(bf16 *out, const bf16 *pre, const int32_t *counts,
                                             int G, int F) {
    size_t per_row = (size_t)F / VEC, items = group_rows(counts, G) * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t i = u / per_row, j = (u % per_row) * VEC;
        float g[VEC], up[VEC];
        mg_loadv<VEC>(pre + i * 2 * F + j, g);
        mg_loadv<VEC>(pre + i * 2 * F + F + j, up);
#pragma unroll
        for (int q = 0; q < VEC; q++) g[q] = g[q] * mg_sigmoid(g[q]) * up[q];
        mg_storev<VEC>(out + i * F + j, g);
    }
}

template <int VEC>
static __global__ void grouped_swiglu_backward_kernel(bf16 *dpre, const bf16 *pre, const bf16 *dout,
                                                      const int32_t *counts, int G, int F) {
    size_t per_row = (size_t)F / VEC, items = group_rows(counts, G) * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t i = u / per_row, j = (u % per_row) * VEC;
        float g[VEC], up[VEC], d[VEC], dg[VEC], du[VEC];
        mg_loadv<VEC>(pre + i * 2 * F + j, g);
        mg_loadv<VEC>(pre + i * 2 * F + F + j, up);
        mg_loadv<VEC>(dout + i * F + j, d);
#pragma unroll
        for (int q = 0; q < VEC; q++) {
            float sig = mg_sigmoid(g[q]);
            /* d silu / dg = sig * (1 + g * (1 - sig)) */
            dg[q] = d[q] * up[q] * sig * (1.0f + g[q] * (1.0f - sig));
            du[q] = d[q] * (g[q] * sig);
        }
        mg_storev<VEC>(dpre + i * 2 * F + j, dg);
        mg_storev<VEC>(dpre + i * 2 * F + F + j, du);
    }
}

/* A grid that covers the device; the kernels stride over however many rows the counts give. */
static unsigned activation_blocks(mg_backend *be) {
    return (unsigned)mg_cuda_ctx_of(be)->num_sms * 8;
}

extern "C" mg_status mg_cuda_grouped_activation_forward(mg_backend *be, void *out, const void *pre,
                                                        const int32_t *counts, int G, int F,
                                                        bool swiglu) {
    // swiglu: out (rows,F), pre (rows,2F); else out, pre (rows,F); rows = sum counts[0..G)
    if (G <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    unsigned grid = activation_blocks(be);
    bool al = mg_cuda_aligned16(out) && mg_cuda_aligned16(pre);
    if (!swiglu)
        grouped_gelu_kernel<<<grid, MG_CUDA_THREADS, 0, st>>>((bf16 *)out, (const bf16 *)pre,
                                                              counts, G, F, al);
    else if (al && F % 8 == 0)
        grouped_swiglu_kernel<8>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((bf16 *)out, (const bf16 *)pre, counts, G, F);
    else
        grouped_swiglu_kernel<1>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((bf16 *)out, (const bf16 *)pre, counts, G, F);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

extern "C" mg_status mg_cuda_grouped_swiglu_backward(mg_backend *be, void *dpre, const void *pre,
                                                     const void *dout, const int32_t *counts, int G,
                                                     int F) {
    // dpre, pre (rows,2F); dout (rows,F); rows = sum counts[0..G)
    if (G <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    unsigned grid = activation_blocks(be);
    if (F % 8 == 0 && mg_cuda_aligned16(dpre) && mg_cuda_aligned16(pre) && mg_cuda_aligned16(dout))
        grouped_swiglu_backward_kernel<8><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (bf16 *)dpre, (const bf16 *)pre, (const bf16 *)dout, counts, G, F);
    else
        grouped_swiglu_backward_kernel<1><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (bf16 *)dpre, (const bf16 *)pre, (const bf16 *)dout, counts, G, F);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
