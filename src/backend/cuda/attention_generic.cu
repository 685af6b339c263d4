/* Causal self-attention for any head dim hd from 1 to 256 (attention_generic.cuh), the head dims
 * attention.cu's tensor-core kernels are not built for. Plain fp32 arithmetic on the CUDA cores,
 * no tensor cores; scalar h16 loads and stores, so no buffer needs more than 2-byte alignment.
 * The same contract as attention.cu (backend_ops.h): GQA over the fused qkv layout, scale
 * 1/sqrt(hd), attention dropout, document mask, and the same `saved` state: per query row the
 * base-2 logsumexp lse2 = m + log2(l) of the scores pre-multiplied by scale*log2(e).
 *
 * Every kernel gives one warp one row and puts 8 warps (8 consecutive rows of one head or group,
 * one sequence) in a block. The rows of the other side (keys for a query row, queries for a key
 * row) go through shared memory in chunks of 32, one per lane, staged once per block for its 8
 * warps. A lane computes the dot products of its chunk row with the warp's row (both h16 in
 * shared memory, summed in fp32 in channel order), then the warp accumulates across the chunk's
 * visible rows, one after the other in increasing order, each lane owning the head channels
 * lane, lane + 32, ... (at most 8, registers). Masked rows are skipped, never multiplied by 0, so
 * a non-finite value in a masked key or value cannot leak into a row that does not see it.
 *
 * Forward, grid (ceil(S/8), nq, B): warp = query row s of head h. Per key chunk: the lane's score
 * x = scale*log2(e) q.k (-inf when masked), online softmax in base 2 (the warp's running max m and
 * sum l of the undropped probabilities, identical in every lane), O = alpha O + sum_t p_t f_t v_t
 * with f the dropout factor (1 without dropout). At the end out = O / l and lse2 = m + log2(l).
 *
 * Backward (deterministic: no atomics, each output element written by one thread, sums in a
 * fixed order). D = dO . O (the dropped O) is computed by attention.cu first. Then:
 *  - dQ, grid (ceil(S/8), nq, B): warp = query row s of head h, looping over key chunks:
 *    p = exp2(x - lse2), dP = dO . v, dS = p (f dP - D); dq = scale sum_t dS_t k_t;
 *  - dK and dV, grid (ceil(S/8), ng, B): warp = key row t of group g, looping over the r query
 *    heads of the group and chunks of the queries s >= t (up to where the documents start past
 *    the block's keys): dv = sum p f dO_s, dk = scale sum dS q_s.
 * The scores are recomputed by both backward kernels in the forward's summation order, so p is
 * the forward's bit for bit. The dropout factor f is core/dropout.h's, element for element (the
 * CPU's, cpu/cpu_attention.c): one Philox block per element, redundant but simple.
 *
 * Document mask (doc_start): row s sees keys doc_start[s] <= t <= s. A query block starts its key
 * chunks at its first row's document start (doc_start is non-decreasing); the key block stops at
 * the first query chunk whose first row's document starts after the block's last key.
 *
 * Shared memory, dynamic, under the 48 KB default for hd <= 256 (no attribute to raise): two
 * chunks of 32 rows at pitch gen_pitch(hd) (an odd number of 4-byte words, so that the 32 lanes
 * reading the same channel of 32 rows hit 32 different banks) and the 8 warps' own rows.
 * Exports: mg_cuda_attention_generic_forward, mg_cuda_attention_generic_backward (templates,
 * instantiated at the end for bf16 and fp16). */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"

#include "backend/cuda/attention_generic.cuh"
#include "core/dropout.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define GEN_WARPS   8  /* rows per block, one per warp */
#define GEN_CHUNK   32 /* rows of the other side staged at a time, one per lane */
#define GEN_THREADS (GEN_WARPS * 32)
#define GEN_NV      (MG_ATT_GENERIC_MAX_HD / 32) /* head channels per lane, at most */

/* Row pitch (h16 elements) of a staged chunk: at least hd, and an odd number of 4-byte words. */
static __host__ __device__ __forceinline__ int gen_pitch(int hd) {
    return 2 * (((hd + 1) / 2) | 1);
}

/* Dynamic shared memory in bytes of each kernel (layouts in the kernels). */
static __host__ __device__ constexpr size_t gen_smem_chunks(int hd) {
    return 2 * (size_t)GEN_CHUNK * (size_t)(2 * (((hd + 1) / 2) | 1)) * 2; /* two h16 chunks */
}
static __host__ __device__ constexpr size_t gen_smem_forward(int hd) {
    return gen_smem_chunks(hd) + (size_t)GEN_WARPS * hd * 2; /* K, V chunks; q rows */
}
static __host__ __device__ constexpr size_t gen_smem_dq(int hd) {
    return gen_smem_chunks(hd) + 2 * (size_t)GEN_WARPS * hd * 2; /* K, V chunks; q, dO rows */
}
static __host__ __device__ constexpr size_t gen_smem_dkdv(int hd) {
    /* lse2, D, doc start of the chunk's rows; Q, dO chunks; k, v rows */
    return 3 * (size_t)GEN_CHUNK * 4 + gen_smem_chunks(hd) + 2 * (size_t)GEN_WARPS * hd * 2;
}
static_assert(gen_smem_forward(MG_ATT_GENERIC_MAX_HD) <= 48 * 1024 &&
                  gen_smem_dq(MG_ATT_GENERIC_MAX_HD) <= 48 * 1024 &&
                  gen_smem_dkdv(MG_ATT_GENERIC_MAX_HD) <= 48 * 1024,
              "the generic kernels stay within the default dynamic shared memory");

/* dst (GEN_CHUNK, pitch) <- rows [r0, r0 + GEN_CHUNK) of a (rows, hd) matrix at src with row
 * stride `stride` elements; rows past `last` are zeros. The whole block takes part. */
template <typename h16>
static __device__ __forceinline__ void gen_stage(h16 *dst, const h16 *src, size_t stride, int r0,
                                                 int last, int hd, int pitch) {
    for (int i = threadIdx.x; i < GEN_CHUNK * hd; i += blockDim.x) {
        const int t = i / hd, d = i - t * hd;
        dst[t * pitch + d] =
            r0 + t <= last ? src[(size_t)(r0 + t) * stride + d] : f_to_h16<h16>(0.0f);
    }
}

/* One warp: dst[0..hd) <- src[0..hd). */
template <typename h16>
static __device__ __forceinline__ void gen_copy_row(h16 *dst, const h16 *src, int hd) {
    for (int d = threadIdx.x % 32; d < hd; d += 32) dst[d] = src[d];
}

/* sum_d a[d] b[d] in fp32, d in increasing order (the same order in every kernel). */
template <typename h16>
static __device__ __forceinline__ float gen_dot(const h16 *a, const h16 *b, int hd) {
    float acc = 0.0f;
    for (int d = 0; d < hd; d++) acc = fmaf(h16_to_f(a[d]), h16_to_f(b[d]), acc);
    return acc;
}

/* acc += w * row over the lane's channels (lane, lane + 32, ...; fp32 fused multiply-add). */
template <typename h16>
static __device__ __forceinline__ void gen_axpy(float acc[GEN_NV], float w, const h16 *row, int hd,
                                                int lane) {
#pragma unroll
    for (int i = 0; i < GEN_NV; i++) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] = fmaf(w, h16_to_f(row[d]), acc[i]);
    }
}

/* dst = acc * mul, rounded to h16, over the lane's channels. */
template <typename h16>
static __device__ __forceinline__ void gen_store(h16 *dst, const float acc[GEN_NV], float mul,
                                                 int hd, int lane) {
#pragma unroll
    for (int i = 0; i < GEN_NV; i++) {
        const int d = lane + 32 * i;
        if (d < hd) dst[d] = f_to_h16<h16>(acc[i] * mul);
    }
}

static __device__ __forceinline__ float gen_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Grid (ceil(S/8), nq, B), GEN_THREADS threads. C = ng*(r+2)*hd is the qkv row width. */
template <typename h16>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_forward_kernel(h16 *out /* (B*S, nq*hd) */, float *lse /* (B, nq, S) */,
                       const h16 *qkv /* (B*S, C) */, int S, int nq, int r, int hd,
                       float scale_log2, mg_dropout drop, int dropping,
                       const int32_t *doc /* (B*S) or NULL */) {
    extern __shared__ __align__(16) unsigned char gen_smem[];
    const int pitch = gen_pitch(hd);
    h16 *k_s = (h16 *)gen_smem;         /* (GEN_CHUNK, pitch): a chunk of keys */
    h16 *v_s = k_s + GEN_CHUNK * pitch; /* (GEN_CHUNK, pitch): their values */
    h16 *q_s = v_s + GEN_CHUNK * pitch; /* (GEN_WARPS, hd): each warp's query row */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int blk = gridDim.x - 1 - blockIdx.x, h = blockIdx.y,
              b = blockIdx.z; /* long rows first */
    const int q0 = blk * GEN_WARPS, qlast = min(q0 + GEN_WARPS, S) - 1, s = q0 + warp;
    const int g = h / r, C = (nq / r) * (r + 2) * hd;
    const h16 *base = qkv + (size_t)b * S * C;
    const h16 *q = base + (size_t)(g * (r + 2) + h % r) * hd; // (S, hd) stride C
    const h16 *k = base + (size_t)(g * (r + 2) + r) * hd;     // (S, hd) stride C
    const h16 *v = k + hd;                                    // (S, hd) stride C
    const int32_t *sdoc = doc ? doc + (size_t)b * S : NULL;   /* this sequence's doc_start */

    const bool live = s < S; /* uniform across the warp */
    h16 *qw = q_s + warp * hd;
    if (live) gen_copy_row(qw, q + (size_t)s * C, hd);
    __syncwarp();
    const int lo = live && sdoc ? sdoc[s] : 0; /* the row's first visible key */
    mg_dropout_row drow{};
    if (live && dropping) drow = mg_dropout_attention_row(&drop, b, h, s, S);

    float m = -INFINITY, l = 0.0f, acc[GEN_NV];
#pragma unroll
    for (int i = 0; i < GEN_NV; i++) acc[i] = 0.0f;
    /* keys from the block's first row's document start to its last row */
    for (int k0 = sdoc ? sdoc[q0] : 0; k0 <= qlast; k0 += GEN_CHUNK) {
        __syncthreads(); /* every warp is done with the previous chunk */
        gen_stage(k_s, k, C, k0, qlast, hd, pitch);
        gen_stage(v_s, v, C, k0, qlast, hd, pitch);
        __syncthreads();
        if (!live) continue;
        const int t = k0 + lane;
        const bool visible = t >= lo && t <= s;
        const float x = visible ? gen_dot(qw, k_s + lane * pitch, hd) * scale_log2 : -INFINITY;
        const float mc = gen_warp_max(x);
        if (mc == -INFINITY) continue; /* no key of the chunk is visible to the row (uniform) */
        const float mn = fmaxf(m, mc), alpha = exp2f(m - mn); /* alpha = 0 while m = -inf */
        const float p = visible ? exp2f(x - mn) : 0.0f;
        l = l * alpha + mg_warp_sum(p); /* the undropped probabilities */
        const float pf =
            visible && dropping ? p * mg_dropout_row_factor(&drop, &drow, (uint32_t)t) : p;
#pragma unroll
        for (int i = 0; i < GEN_NV; i++) acc[i] *= alpha;
        for (unsigned vis = __ballot_sync(0xffffffffu, visible); vis; vis &= vis - 1) {
            const int j = __ffs(vis) - 1; /* the same j in every lane */
            const float w = __shfl_sync(0xffffffffu, pf, j);
            gen_axpy(acc, w, v_s + j * pitch, hd, lane);
        }
        m = mn;
    }
    if (!live) return;
    const float inv = 1.0f / l; /* l >= 1: the row's largest score contributes exp2(0) */
    h16 *o = out + ((size_t)b * S + s) * ((size_t)nq * hd) + (size_t)h * hd;
    gen_store(o, acc, inv, hd, lane);
    if (lane == 0) lse[((size_t)b * nq + h) * S + s] = m + log2f(l);
}

/* Grid (ceil(S/8), nq, B), GEN_THREADS threads. Writes the query part of dqkv. */
template <typename h16>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_dq_kernel(h16 *dqkv /* (B*S, C) */, const h16 *qkv /* (B*S, C) */,
                  const h16 *dout /* (B*S, nq*hd) */, const float *lse /* (B, nq, S) */,
                  const float *D /* (B, nq, S) */, int S, int nq, int r, int hd, float scale_log2,
                  float scale, mg_dropout drop, int dropping,
                  const int32_t *doc /* (B*S) or NULL */) {
    extern __shared__ __align__(16) unsigned char gen_smem[];
    const int pitch = gen_pitch(hd);
    h16 *k_s = (h16 *)gen_smem;         /* (GEN_CHUNK, pitch): a chunk of keys */
    h16 *v_s = k_s + GEN_CHUNK * pitch; /* (GEN_CHUNK, pitch): their values */
    h16 *q_s = v_s + GEN_CHUNK * pitch; /* (GEN_WARPS, hd): each warp's query row */
    h16 *do_s = q_s + GEN_WARPS * hd;   /* (GEN_WARPS, hd): each warp's dO row */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int blk = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = blk * GEN_WARPS, qlast = min(q0 + GEN_WARPS, S) - 1, s = q0 + warp;
    const int g = h / r, C = (nq / r) * (r + 2) * hd, OW = nq * hd;
    const size_t tok0 = (size_t)b * S;
    const size_t qoff = (size_t)(g * (r + 2) + h % r) * hd;
    const h16 *k = qkv + tok0 * C + (size_t)(g * (r + 2) + r) * hd; // (S, hd) stride C
    const h16 *v = k + hd;                                          // (S, hd) stride C
    const int32_t *sdoc = doc ? doc + tok0 : NULL;

    const bool live = s < S;
    h16 *qw = q_s + warp * hd, *dow = do_s + warp * hd;
    if (live) {
        gen_copy_row(qw, qkv + (tok0 + s) * C + qoff, hd);
        gen_copy_row(dow, dout + (tok0 + s) * OW + (size_t)h * hd, hd);
    }
    __syncwarp();
    const int lo = live && sdoc ? sdoc[s] : 0;
    const size_t row = ((size_t)b * nq + h) * S + s;
    const float lse_s = live ? lse[row] : 0.0f, d_s = live ? D[row] : 0.0f;
    mg_dropout_row drow{};
    if (live && dropping) drow = mg_dropout_attention_row(&drop, b, h, s, S);

    float acc[GEN_NV];
#pragma unroll
    for (int i = 0; i < GEN_NV; i++) acc[i] = 0.0f;
    for (int k0 = sdoc ? sdoc[q0] : 0; k0 <= qlast; k0 += GEN_CHUNK) {
        __syncthreads();
        gen_stage(k_s, k, C, k0, qlast, hd, pitch);
        gen_stage(v_s, v, C, k0, qlast, hd, pitch);
        __syncthreads();
        if (!live) continue;
        const int t = k0 + lane;
        const bool visible = t >= lo && t <= s;
        float ds = 0.0f;
        if (visible) {
            const float p = exp2f(gen_dot(qw, k_s + lane * pitch, hd) * scale_log2 - lse_s);
            const float dp = gen_dot(dow, v_s + lane * pitch, hd);
            const float f = dropping ? mg_dropout_row_factor(&drop, &drow, (uint32_t)t) : 1.0f;
            ds = p * (f * dp - d_s);
        }
        for (unsigned vis = __ballot_sync(0xffffffffu, visible); vis; vis &= vis - 1) {
            const int j = __ffs(vis) - 1;
            const float w = __shfl_sync(0xffffffffu, ds, j);
            gen_axpy(acc, w, k_s + j * pitch, hd, lane);
        }
    }
    if (!live) return;
    h16 *dq = dqkv + (tok0 + s) * C + qoff;
    gen_store(dq, acc, scale, hd, lane); /* dq = scale dS K */
}

/* Grid (ceil(S/8), ng, B), GEN_THREADS threads. Writes the key and value parts of dqkv. */
template <typename h16>
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_dkdv_kernel(h16 *dqkv /* (B*S, C) */, const h16 *qkv /* (B*S, C) */,
                    const h16 *dout /* (B*S, nq*hd) */, const float *lse /* (B, nq, S) */,
                    const float *D /* (B, nq, S) */, int S, int nq, int r, int hd, float scale_log2,
                    float scale, mg_dropout drop, int dropping,
                    const int32_t *doc /* (B*S) or NULL */) {
    extern __shared__ __align__(16) unsigned char gen_smem[];
    const int pitch = gen_pitch(hd);
    float *lse_s = (float *)gen_smem;      /* (GEN_CHUNK): the chunk's rows' lse2 */
    float *d_s = lse_s + GEN_CHUNK;        /* (GEN_CHUNK): their D */
    int *doc_s = (int *)(d_s + GEN_CHUNK); /* (GEN_CHUNK): their first visible key */
    h16 *q_s = (h16 *)(doc_s + GEN_CHUNK); /* (GEN_CHUNK, pitch): a chunk of queries */
    h16 *do_s = q_s + GEN_CHUNK * pitch;   /* (GEN_CHUNK, pitch): their dO */
    h16 *k_s = do_s + GEN_CHUNK * pitch;   /* (GEN_WARPS, hd): each warp's key row */
    h16 *v_s = k_s + GEN_WARPS * hd;       /* (GEN_WARPS, hd): each warp's value row */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = blockIdx.y, b = blockIdx.z;
    const int t0 = blockIdx.x * GEN_WARPS, tlast = min(t0 + GEN_WARPS, S) - 1, t = t0 + warp;
    const int C = (nq / r) * (r + 2) * hd, OW = nq * hd;
    const size_t tok0 = (size_t)b * S;
    const h16 *base = qkv + tok0 * C;
    const size_t koff = (size_t)(g * (r + 2) + r) * hd;
    const int32_t *sdoc = doc ? doc + tok0 : NULL;

    const bool live = t < S;
    h16 *kw = k_s + warp * hd, *vw = v_s + warp * hd;
    if (live) {
        gen_copy_row(kw, base + (size_t)t * C + koff, hd);
        gen_copy_row(vw, base + (size_t)t * C + koff + hd, hd);
    }
    __syncwarp();

    float dk[GEN_NV], dv[GEN_NV];
#pragma unroll
    for (int i = 0; i < GEN_NV; i++) dk[i] = 0.0f, dv[i] = 0.0f;
    for (int j = 0; j < r; j++) { /* the group's query heads, in order */
        const int h = g * r + j;
        const h16 *q = base + (size_t)(g * (r + 2) + j) * hd; // (S, hd) stride C
        const h16 *dop = dout + tok0 * OW + (size_t)h * hd;   // (S, hd) stride OW
        const size_t rows = ((size_t)b * nq + h) * S;
        /* causal: the queries from the block's first key on */
        for (int s0 = t0; s0 < S; s0 += GEN_CHUNK) {
            /* documents: this and every later query start after the block's keys (uniform) */
            if (sdoc && sdoc[s0] > tlast) break;
            __syncthreads(); /* every warp is done with the previous chunk */
            gen_stage(q_s, q, C, s0, S - 1, hd, pitch);
            gen_stage(do_s, dop, OW, s0, S - 1, hd, pitch);
            for (int i = threadIdx.x; i < GEN_CHUNK; i += blockDim.x) {
                const bool in = s0 + i < S;
                lse_s[i] = in ? lse[rows + s0 + i] : 0.0f;
                d_s[i] = in ? D[rows + s0 + i] : 0.0f;
                doc_s[i] = in && sdoc ? sdoc[s0 + i] : 0;
            }
            __syncthreads();
            if (!live) continue;
            const int s = s0 + lane;
            const bool visible = s < S && s >= t && doc_s[lane] <= t;
            float pf = 0.0f, ds = 0.0f;
            if (visible) {
                const float p =
                    exp2f(gen_dot(q_s + lane * pitch, kw, hd) * scale_log2 - lse_s[lane]);
                const float dp = gen_dot(do_s + lane * pitch, vw, hd);
                const float f = dropping ? mg_dropout_attention(&drop, b, h, s, t, S) : 1.0f;
                pf = p * f;
                ds = p * (f * dp - d_s[lane]);
            }
            for (unsigned vis = __ballot_sync(0xffffffffu, visible); vis; vis &= vis - 1) {
                const int jj = __ffs(vis) - 1;
                const float wv = __shfl_sync(0xffffffffu, pf, jj);
                const float wk = __shfl_sync(0xffffffffu, ds, jj);
                gen_axpy(dv, wv, do_s + jj * pitch, hd, lane);
                gen_axpy(dk, wk, q_s + jj * pitch, hd, lane);
            }
        }
    }
    if (!live) return;
    h16 *dkp = dqkv + (tok0 + t) * C + koff, *dvp = dkp + hd;
    gen_store(dkp, dk, scale, hd, lane); /* dk = scale dS^T Q */
    gen_store(dvp, dv, 1.0f, hd, lane);
}

/* A kernel argument for drop (NULL: a zeroed one and the flag off). */
static mg_dropout gen_drop_arg(const mg_dropout *drop) {
    mg_dropout d;
    memset(&d, 0, sizeof d);
    if (drop) d = *drop;
    return d;
}

template <typename h16>
mg_status mg_cuda_attention_generic_forward(mg_backend *be, h16 *out, float *lse, const h16 *qkv,
                                            int B, int S, int nq, int ng, int hd,
                                            const mg_dropout *drop, const int32_t *doc_start) {
    if (hd < 1 || hd > MG_ATT_GENERIC_MAX_HD)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "attention: head dim %d is not supported (1 to %d on CUDA)", hd,
                       MG_ATT_GENERIC_MAX_HD);
    const int r = nq / ng;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)hd);
    const dim3 grid((unsigned)((S + GEN_WARPS - 1) / GEN_WARPS), (unsigned)nq, (unsigned)B);
    gen_forward_kernel<h16><<<grid, GEN_THREADS, gen_smem_forward(hd), mg_cuda_stream(be)>>>(
        out, lse, qkv, S, nq, r, hd, scale_log2, gen_drop_arg(drop), drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template <typename h16>
mg_status mg_cuda_attention_generic_backward(mg_backend *be, h16 *dqkv, const h16 *dout,
                                             const h16 *qkv, const float *lse, const float *D,
                                             int B, int S, int nq, int ng, int hd,
                                             const mg_dropout *drop, const int32_t *doc_start) {
    if (hd < 1 || hd > MG_ATT_GENERIC_MAX_HD)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "attention: head dim %d is not supported (1 to %d on CUDA)", hd,
                       MG_ATT_GENERIC_MAX_HD);
    const int r = nq / ng;
    const float scale = 1.0f / sqrtf((float)hd), scale_log2 = 1.4426950408889634f * scale;
    const unsigned nb = (unsigned)((S + GEN_WARPS - 1) / GEN_WARPS);
    cudaStream_t stream = mg_cuda_stream(be);
    const mg_dropout d = gen_drop_arg(drop);
    gen_dkdv_kernel<h16>
        <<<dim3(nb, (unsigned)ng, (unsigned)B), GEN_THREADS, gen_smem_dkdv(hd), stream>>>(
            dqkv, qkv, dout, lse, D, S, nq, r, hd, scale_log2, scale, d, drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    gen_dq_kernel<h16>
        <<<dim3(nb, (unsigned)nq, (unsigned)B), GEN_THREADS, gen_smem_dq(hd), stream>>>(
            dqkv, qkv, dout, lse, D, S, nq, r, hd, scale_log2, scale, d, drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template mg_status mg_cuda_attention_generic_forward<__nv_bfloat16>(mg_backend *, __nv_bfloat16 *,
                                                                    float *, const __nv_bfloat16 *,
                                                                    int, int, int, int, int,
                                                                    const mg_dropout *,
                                                                    const int32_t *);
template mg_status mg_cuda_attention_generic_forward<__half>(mg_backend *, __half *, float *,
                                                             const __half *, int, int, int, int,
                                                             int, const mg_dropout *,
                                                             const int32_t *);
template mg_status mg_cuda_attention_generic_backward<__nv_bfloat16>(
    mg_backend *, __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, const float *,
    const float *, int, int, int, int, int, const mg_dropout *, const int32_t *);
template mg_status mg_cuda_attention_generic_backward<__half>(mg_backend *, __half *,
                                                              const __half *, const __half *,
                                                              const float *, const float *, int,
                                                              int, int, int, int,
                                                              const mg_dropout *, const int32_t *);
