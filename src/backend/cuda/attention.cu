/* Causal self-attention over the fused qkv buffer (layout in backend_ops.h), flash-attention style:
 * tiles of 64 queries x 64 keys, online softmax, fp32 accumulators, the (S, S) probabilities
 * never stored. Matrix products use the tensor cores through WMMA (h16 16x16x16, fp32
 * accumulate); WMMA fragments have an unspecified element layout, so anything row-wise (softmax,
 * rescaling) goes through shared memory.
 *
 * Forward, one block of 4 warps per (query tile, head, batch); warp w owns query rows 16w..16w+15
 * of the tile, so its softmax needs only __syncwarp. Per key tile: S = Q K^T (fp32 in shared
 * memory), row max / sum updated online in base 2 (scores pre-multiplied by scale*log2(e)),
 * P = exp2(S - m) as h16, O (fp32, shared memory) rescaled and O += P V. At the end O /= l and
 * the row's base-2 logsumexp, lse2 = m + log2(l), goes to `saved` (B, nq, S) fp32 for backward.
 *
 * Backward (deterministic, no atomics), three kernels:
 *  1. D[b,h,s] = dO . O (fp32) into the workspace;
 *  2. dK, dV: one block of 8 warps per (key tile, kv group, batch) loops over the r query heads of
 *     the group and the query tiles at or after the key tile, recomputing P = exp2(S - lse2) and
 *     dS = P (dP - D) with dP = dO V^T, accumulating dV += P^T dO and dK += dS^T Q in registers;
 *     each dk/dv element is written once, sums in a fixed order;
 *  3. dQ: one block of 8 warps per (query tile, head, batch) loops over key tiles, recomputes P
 *     and dS the same way and accumulates dQ += dS K.
 * The scores and dP are computed twice (kernels 2 and 3): the price of determinism without
 * atomics.
 *
 * Attention dropout (drop != NULL): core/dropout.h's counter-based factor f (0 or 1/(1-p)) of
 * each (sequence, global head, query, key), the CPU's exactly (cpu/cpu_attention.c). The forward
 * sums the undropped P into the normaliser l and multiplies the P tile that meets V by f; the
 * backward recomputes f: dV += (P f)^T dO, dS = P (f dP - D), with D = dO . O as before (O is
 * the dropped output). One Philox block gives the draws of 4 consecutive keys: under dropout a
 * forward lane owns two adjacent keys (2 lanes share a block) and a backward thread 4 (one block,
 * two where S % 4 leaves a row's keys straddling blocks).
 *
 * Document mask (doc_start != NULL, --reset-attention-mask; backend_ops.h): query qi also masks the
 * keys before doc_start[qi], the first token of its document. doc_start is non-decreasing along
 * a sequence, so a query tile's visible keys are [doc_start[q0], q0 + 63]: the forward and dQ
 * kernels start at that key tile and the dK/dV kernel stops at the first query tile whose first
 * row's document starts past its keys; the rest is masked per element (a row whose keys in a
 * tile are all masked keeps m = -inf there, see the guard). The backward keeps the rows'
 * doc_start in shared memory next to lse2 and D (0 without the mask: nothing masked).
 *
 * Rows past S (ragged last tile) are loaded as zeros and masked (P = 0); keys past the query or
 * past S are masked. Later query tiles have more work, so the forward and dQ grids start from the
 * last tile (and dK/dV from the first key tile), letting the long blocks start first.
 *
 * Limits: these kernels take hd a multiple of 16 from 16 to 128 (templated), with qkv, out, dout
 * and dqkv 16-byte aligned (16-byte vector loads); any other hd from 1 to 256 goes, forward and
 * backward alike, to attention_generic.cu's kernels (CUDA cores, element loads, no alignment
 * beyond the element's), which keep the same lse2 in `saved` and take the same D; a head dim
 * outside 1..256 is refused. Dynamic shared memory up to ~123 KB per block (HD 128), raised for
 * every kernel and head dim once per device at backend creation (mg_cuda_attention_init), not per
 * launch. Workspace: D, B*nq*S fp32 (4 MiB at B=8, nq=32, S=4096), for both families.
 * Exports: mg_cuda_attention_init, mg_cuda_attention_saved_bytes, mg_cuda_attention_forward,
 * mg_cuda_attention_backward. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include <type_traits>
#include "backend/cuda/cuda_common.cuh"

#include "backend/cuda/attention_generic.cuh"
#include "core/dropout.h"

#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <string.h>

using namespace nvcuda;

#define ATT_T           64 /* query and key tile rows; the backward's causal ranges assume they are equal */
#define ATT_FWD_THREADS 128
#define ATT_BWD_THREADS 256

template <typename h16>
using frag_a_row = wmma::fragment<wmma::matrix_a, 16, 16, 16, h16, wmma::row_major>;
template <typename h16>
using frag_a_col = wmma::fragment<wmma::matrix_a, 16, 16, 16, h16, wmma::col_major>;
template <typename h16>
using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, h16, wmma::row_major>;
template <typename h16>
using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, h16, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Shared-memory geometry for head dim HD. Row pitches are padded by 16 bytes (h16) or 16 bytes
 * (fp32) so that the 16 rows a WMMA load touches fall in different banks; every region size is a
 * multiple of 128 bytes so regions stay 32-byte aligned as WMMA requires. */
template <typename h16, int HD> struct att_geom {
    static constexpr int LD = HD + 8;     /* h16 (64, HD) tiles: Q, K, V, dO */
    static constexpr int LDS = ATT_T + 4; /* fp32 (64, 64) tiles: S, dP */
    static constexpr int LDP = ATT_T + 8; /* h16 (64, 64) tiles: P, dS */
    static constexpr int LDO = HD + 4;    /* fp32 (64, HD) tiles: O, staging */
    static constexpr size_t TILE = (size_t)ATT_T * LD * sizeof(h16);
    static constexpr size_t SCORE = (size_t)ATT_T * LDS * sizeof(float);
    static constexpr size_t PROB = (size_t)ATT_T * LDP * sizeof(h16);
    static constexpr size_t OUT = (size_t)ATT_T * LDO * sizeof(float);
    static constexpr size_t ROWS = ATT_T * sizeof(float);
    /* forward: Q K V | S | P | O */
    static constexpr size_t FWD = 3 * TILE + SCORE + PROB + OUT;
    /* backward: Q dO K V | S dP (also the fp32 staging of the final tile) | P dS | lse D doc */
    static constexpr size_t BWD = 4 * TILE + 2 * SCORE + 2 * PROB + 3 * ROWS;
    static_assert(2 * SCORE >= OUT, "staging must fit in the S and dP regions");
    static_assert(TILE % 128 == 0 && SCORE % 128 == 0 && PROB % 128 == 0 && OUT % 128 == 0,
                  "regions keep 128-byte alignment");
};

/* dst (64, HD) pitch LD <- rows [r0, r0+64) of a (rows, HD) matrix at src with row stride
 * `stride` elements; rows >= nrows are zero. 16-byte vectors. */
template <int HD, typename h16>
static __device__ __forceinline__ void load_tile(h16 *dst, const h16 *src, size_t stride, int r0,
                                                 int nrows) {
    constexpr int VPR = HD / 8; /* 16-byte vectors per row */
    for (int i = threadIdx.x; i < ATT_T * VPR; i += blockDim.x) {
        int r = i / VPR, c = (i % VPR) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < nrows) v = *(const uint4 *)(src + (size_t)(r0 + r) * stride + c);
        *(uint4 *)(dst + r * att_geom<h16, HD>::LD + c) = v;
    }
}

/* dst rows [r0, r0+64) (< nrows) <- scale * stage (64, HD) fp32 pitch LDO, as h16. */
template <int HD, typename h16>
static __device__ __forceinline__ void store_tile(h16 *dst, size_t stride, int r0, int nrows,
                                                  const float *stage, float scale) {
    constexpr int VPR = HD / 8;
    for (int i = threadIdx.x; i < ATT_T * VPR; i += blockDim.x) {
        int r = i / VPR, c = (i % VPR) * 8;
        if (r0 + r >= nrows) continue;
        const float *s = stage + r * att_geom<h16, HD>::LDO + c;
        __align__(16) h16 v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = f_to_h16<h16>(s[e] * scale);
        *(uint4 *)(dst + (size_t)(r0 + r) * stride + c) = *(const uint4 *)v;
    }
}

/* The dropout factors f[0..n) (n <= 4) of keys kj .. kj + n - 1 of query qi, sequence b, local
 * head h (core/dropout.h's mg_dropout_attention, element for element): one Philox block, or two
 * where the keys straddle a block boundary. */
static __device__ __forceinline__ void drop_run(const mg_dropout *d, int b, int h, int qi, int kj,
                                                int S, int n, float *f) {
    const mg_dropout_row row = mg_dropout_attention_row(d, b, h, qi, S);
    const uint64_t e0 = row.e0 + (uint64_t)kj;
    const uint32_t l0 = (uint32_t)e0 & 3u;
    uint32_t r[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    mg_dropout_row_block(&row, (uint32_t)(e0 >> 2), r);
    if (l0 + (uint32_t)n > 4u) mg_dropout_row_block(&row, (uint32_t)(e0 >> 2) + 1u, r + 4);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (k >= n) break;
        uint32_t v = r[0];
#pragma unroll
        for (int j = 1; j < 8; j++) /* r[l0 + k] without a local-memory index */
            if ((uint32_t)j == l0 + (uint32_t)k) v = r[j];
        f[k] = v >= d->threshold ? d->scale : 0.0f;
    }
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Grid (ceil(S/64), nq, B), 128 threads. C = ng*(r+2)*HD is the qkv row width. */
template <typename h16, int HD>
static __global__ void __launch_bounds__(ATT_FWD_THREADS)
    attention_forward_kernel(h16 *out /* (B*S, nq*HD) */, float *lse /* (B, nq, S) */,
                             const h16 *qkv /* (B*S, C) */, int S, int nq, int r, float scale_log2,
                             mg_dropout drop, int dropping,
                             const int32_t *doc /* (B*S) or NULL */) {
    typedef att_geom<h16, HD> G;
    extern __shared__ __align__(128) unsigned char smem[];
    h16 *q_s = (h16 *)smem;                                 // (64, HD) pitch LD
    h16 *k_s = (h16 *)(smem + G::TILE);                     // (64, HD)
    h16 *v_s = (h16 *)(smem + 2 * G::TILE);                 // (64, HD)
    float *s_s = (float *)(smem + 3 * G::TILE);             // (64, 64) pitch LDS
    h16 *p_s = (h16 *)((unsigned char *)s_s + G::SCORE);    // (64, 64) pitch LDP
    float *o_s = (float *)((unsigned char *)p_s + G::PROB); // (64, HD) pitch LDO

    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = h / r, C = (nq / r) * (r + 2) * HD, q0 = qt * ATT_T;
    const h16 *base = qkv + (size_t)b * S * C;
    const h16 *q = base + (size_t)(g * (r + 2) + h % r) * HD; // (S, HD) stride C
    const h16 *k = base + (size_t)(g * (r + 2) + r) * HD;     // (S, HD) stride C
    const h16 *v = k + HD;                                    // (S, HD) stride C

    load_tile<HD>(q_s, q, C, q0, S);
    for (int i = threadIdx.x; i < ATT_T * G::LDO; i += blockDim.x) o_s[i] = 0.0f;
    __syncthreads();
    frag_a_row<h16> qf[HD / 16]; /* this warp's 16 query rows, reused for every key tile */
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        wmma::load_matrix_sync(qf[kk], q_s + warp * 16 * G::LD + kk * 16, G::LD);

    float m_i[16], l_i[16]; /* running max (base 2) and sum per row, identical in every lane */
    int ds_i[16];           /* the rows' first visible key (document mask; 0: none) */
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int qi = q0 + warp * 16 + i;
        m_i[i] = -INFINITY, l_i[i] = 0.0f;
        ds_i[i] = doc && qi < S ? doc[(size_t)b * S + qi] : 0;
    }
    float *s_w = s_s + warp * 16 * G::LDS;
    h16 *p_w = p_s + warp * 16 * G::LDP;
    float *o_w = o_s + warp * 16 * G::LDO;

    /* causal: keys up to the tile's last query, from its first row's document start */
    const int kt0 = doc ? doc[(size_t)b * S + q0] / ATT_T : 0;
    for (int kt = kt0; kt <= qt; kt++) {
        const int k0 = kt * ATT_T;
        __syncthreads(); /* every warp is done with the previous K, V */
        load_tile<HD>(k_s, k, C, k0, S);
        load_tile<HD>(v_s, v, C, k0, S);
        __syncthreads();
        /* S_w (16, 64) = Q_w K^T */
#pragma unroll
        for (int n = 0; n < ATT_T / 16; n++) {
            frag_c acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                frag_b_col<h16> kf; /* K^T: element (d, key) at k_s[key*LD + d] */
                wmma::load_matrix_sync(kf, k_s + n * 16 * G::LD + kk * 16, G::LD);
                wmma::mma_sync(acc, qf[kk], kf, acc);
            }
            wmma::store_matrix_sync(s_w + n * 16, acc, G::LDS, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax, one row at a time across the warp (lane owns keys lane, lane+32; under
         * dropout the adjacent 2 lane, 2 lane + 1, whose draws share a Philox block) */
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int qi = q0 + warp * 16 + i;
            const int c0 = dropping ? 2 * lane : lane, c1 = dropping ? c0 + 1 : lane + 32;
            const int kj0 = k0 + c0, kj1 = k0 + c1;
            float x0 = kj0 <= qi && kj0 < S && kj0 >= ds_i[i] ? s_w[i * G::LDS + c0] * scale_log2
                                                              : -INFINITY;
            float x1 = kj1 <= qi && kj1 < S && kj1 >= ds_i[i] ? s_w[i * G::LDS + c1] * scale_log2
                                                              : -INFINITY;
            float m_new = fmaxf(m_i[i], warp_max(fmaxf(x0, x1)));
            /* m_new = -inf: no visible key so far (a row past S; or, under the document mask, a
             * row whose document starts after this tile); the guard keeps NaN out of it */
            float alpha = m_new == -INFINITY ? 1.0f : exp2f(m_i[i] - m_new);
            float p0 = m_new == -INFINITY ? 0.0f : exp2f(x0 - m_new);
            float p1 = m_new == -INFINITY ? 0.0f : exp2f(x1 - m_new);
            l_i[i] = l_i[i] * alpha + mg_warp_sum(p0 + p1);
            m_i[i] = m_new;
            if (dropping && (p0 != 0.0f || p1 != 0.0f)) {
                /* the normaliser keeps the undropped sum; V meets P f */
                float f[2];
                drop_run(&drop, b, h, qi, k0 + c0, S, 2, f);
                p0 *= f[0];
                p1 *= f[1];
            }
            p_w[i * G::LDP + c0] = f_to_h16<h16>(p0);
            p_w[i * G::LDP + c1] = f_to_h16<h16>(p1);
            if (kt > kt0)
                for (int d = lane; d < HD; d += 32) o_w[i * G::LDO + d] *= alpha;
        }
        __syncwarp();
        /* O_w (16, HD) += P_w (16, 64) V (64, HD) */
        frag_a_row<h16> pf[ATT_T / 16];
#pragma unroll
        for (int kk = 0; kk < ATT_T / 16; kk++)
            wmma::load_matrix_sync(pf[kk], p_w + kk * 16, G::LDP);
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            frag_c acc;
            wmma::load_matrix_sync(acc, o_w + n * 16, G::LDO, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < ATT_T / 16; kk++) {
                frag_b_row<h16> vf;
                wmma::load_matrix_sync(vf, v_s + kk * 16 * G::LD + n * 16, G::LD);
                wmma::mma_sync(acc, pf[kk], vf, acc);
            }
            wmma::store_matrix_sync(o_w + n * 16, acc, G::LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    /* out = O / l; lse2 = m + log2(l) */
    const int OW = nq * HD;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int qi = q0 + warp * 16 + i;
        if (qi >= S) continue; /* uniform across the warp */
        const float inv = 1.0f / l_i[i];
        h16 *o = out + ((size_t)b * S + qi) * OW + (size_t)h * HD;
        for (int d = lane; d < HD; d += 32) o[d] = f_to_h16<h16>(o_w[i * G::LDO + d] * inv);
        if (lane == 0) lse[((size_t)b * nq + h) * S + qi] = m_i[i] + log2f(l_i[i]);
    }
}

/* D[b,h,s] = sum_d dO[b,s,h,d] O[b,s,h,d]: one warp per (token, head). */
template <typename h16>
static __global__ void
attention_bwd_dot_kernel(float *D /* (B, nq, S) */, const h16 *dout /* (B*S, nq*hd) */,
                         const h16 *out /* (B*S, nq*hd) */, int B, int S, int nq, int hd) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (size_t)B * S * nq) return;
    const h16 *a = dout + row * hd, *o = out + row * hd; /* row = token * nq + h */
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc += h16_to_f(a[d]) * h16_to_f(o[d]);
    acc = mg_warp_sum(acc);
    if (lane == 0) {
        size_t token = row / nq;
        int h = (int)(row % nq), s = (int)(token % S), bb = (int)(token / S);
        D[((size_t)bb * nq + h) * S + s] = acc;
    }
}

/* Shared by the two backward kernels: with Q, dO (query tile at q0) and K, V (key tile at k0) in
 * shared memory and the rows' lse2, D and first visible key in lse_s, d_s, doc_s, computes
 *   p_s  = P  = exp2(scale_log2 * Q K^T - lse2)          (h16, masked entries 0)
 *   ds_s = dS = P (dO V^T - D)                            (h16)
 * With dropout (drop non-NULL: sequence b, local head h), p_s = P f and dS = P (f dP - D).
 * Warp w computes the 16x32 piece (rows 16 (w%4), keys 32 (w/4)) of S and dP; then all threads
 * do the elementwise part. Ends with __syncthreads. */
template <int HD, typename h16>
static __device__ __forceinline__ void
bwd_probs(const h16 *q_s, const h16 *do_s, const h16 *k_s, const h16 *v_s, float *s_s, float *dp_s,
          h16 *p_s, h16 *ds_s, const float *lse_s, const float *d_s, const int *doc_s, int q0,
          int k0, int S, float scale_log2, const mg_dropout *drop, int b, int h) {
    typedef att_geom<h16, HD> G;
    const int warp = threadIdx.x / 32, rb = warp % 4, cb = warp / 4;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int n = cb * 2 + j;
        frag_c acc_s, acc_dp;
        wmma::fill_fragment(acc_s, 0.0f);
        wmma::fill_fragment(acc_dp, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            frag_a_row<h16> a;
            frag_b_col<h16> bm;
            wmma::load_matrix_sync(a, q_s + rb * 16 * G::LD + kk * 16, G::LD);
            wmma::load_matrix_sync(bm, k_s + n * 16 * G::LD + kk * 16, G::LD);
            wmma::mma_sync(acc_s, a, bm, acc_s);
            wmma::load_matrix_sync(a, do_s + rb * 16 * G::LD + kk * 16, G::LD);
            wmma::load_matrix_sync(bm, v_s + n * 16 * G::LD + kk * 16, G::LD);
            wmma::mma_sync(acc_dp, a, bm, acc_dp);
        }
        wmma::store_matrix_sync(s_s + rb * 16 * G::LDS + n * 16, acc_s, G::LDS,
                                wmma::mem_row_major);
        wmma::store_matrix_sync(dp_s + rb * 16 * G::LDS + n * 16, acc_dp, G::LDS,
                                wmma::mem_row_major);
    }
    __syncthreads();
    if (!drop) {
        for (int idx = threadIdx.x; idx < ATT_T * ATT_T; idx += blockDim.x) {
            const int i = idx / ATT_T, c = idx % ATT_T, qi = q0 + i, kj = k0 + c;
            float p = 0.0f, ds = 0.0f;
            if (qi < S && kj <= qi && kj >= doc_s[i]) {
                p = exp2f(s_s[i * G::LDS + c] * scale_log2 - lse_s[i]);
                ds = p * (dp_s[i * G::LDS + c] - d_s[i]);
            }
            if (p_s) p_s[i * G::LDP + c] = f_to_h16<h16>(p);
            ds_s[i * G::LDP + c] = f_to_h16<h16>(ds);
        }
    } else { /* a thread takes 4 adjacent keys: their draws share a Philox block */
        for (int idx = threadIdx.x; idx < ATT_T * ATT_T / 4; idx += blockDim.x) {
            const int i = idx / (ATT_T / 4), c0 = idx % (ATT_T / 4) * 4, qi = q0 + i;
            float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (qi < S && k0 + c0 <= qi && k0 + c0 + 3 >= doc_s[i])
                drop_run(drop, b, h, qi, k0 + c0, S, 4, f);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int c = c0 + k, kj = k0 + c;
                float pf = 0.0f, ds = 0.0f;
                if (qi < S && kj <= qi && kj >= doc_s[i]) {
                    const float p = exp2f(s_s[i * G::LDS + c] * scale_log2 - lse_s[i]);
                    pf = p * f[k];
                    ds = p * (f[k] * dp_s[i * G::LDS + c] - d_s[i]);
                }
                if (p_s) p_s[i * G::LDP + c] = f_to_h16<h16>(pf);
                ds_s[i * G::LDP + c] = f_to_h16<h16>(ds);
            }
        }
    }
    __syncthreads();
}

/* Loads the per-row lse2 and D of query rows [q0, q0+64) of head (b, h), and the rows' first
 * visible key from doc (the sequence's doc_start, or NULL: 0); rows past S get 0 (they are masked
 * anyway). */
static __device__ __forceinline__ void load_rows(float *lse_s, float *d_s, int *doc_s,
                                                 const float *lse, const float *D,
                                                 const int32_t *doc, size_t off, int q0, int S) {
    for (int i = threadIdx.x; i < ATT_T; i += blockDim.x) {
        bool in = q0 + i < S;
        lse_s[i] = in ? lse[off + q0 + i] : 0.0f;
        d_s[i] = in ? D[off + q0 + i] : 0.0f;
        doc_s[i] = in && doc ? doc[q0 + i] : 0;
    }
}

/* Carves the backward's shared memory (see att_geom::BWD). */
#define ATT_BWD_SMEM(HD)                                                                           \
    typedef att_geom<h16, HD> G;                                                                   \
    extern __shared__ __align__(128) unsigned char smem[];                                         \
    h16 *q_s = (h16 *)smem;                                    /* (64, HD) pitch LD */             \
    h16 *do_s = (h16 *)(smem + G::TILE);                       /* (64, HD) */                      \
    h16 *k_s = (h16 *)(smem + 2 * G::TILE);                    /* (64, HD) */                      \
    h16 *v_s = (h16 *)(smem + 3 * G::TILE);                    /* (64, HD) */                      \
    float *s_s = (float *)(smem + 4 * G::TILE);                /* (64, 64) pitch LDS; staging */   \
    float *dp_s = (float *)((unsigned char *)s_s + G::SCORE);  /* (64, 64) pitch LDS */            \
    h16 *p_s = (h16 *)((unsigned char *)dp_s + G::SCORE);      /* (64, 64) pitch LDP */            \
    h16 *ds_s = (h16 *)((unsigned char *)p_s + G::PROB);       /* (64, 64) pitch LDP */            \
    float *lse_s = (float *)((unsigned char *)ds_s + G::PROB); /* (64) */                          \
    float *d_s = lse_s + ATT_T;                                /* (64) */                          \
    int *doc_s = (int *)(d_s + ATT_T);                         /* (64) */

/* Grid (ceil(S/64), ng, B), 256 threads. Warp w owns key rows 16 (w%4) of the tile and the
 * 16-wide column blocks n = w/4, w/4 + 2, ... of HD for dK and dV. */
template <typename h16, int HD>
static __global__ void __launch_bounds__(ATT_BWD_THREADS)
    attention_bwd_dkdv_kernel(h16 *dqkv /* (B*S, C) */, const h16 *qkv /* (B*S, C) */,
                              const h16 *dout /* (B*S, nq*HD) */, const float *lse /* (B,nq,S) */,
                              const float *D /* (B,nq,S) */, int S, int nq, int r, float scale_log2,
                              float scale, mg_dropout drop, int dropping,
                              const int32_t *doc /* (B*S) or NULL */) {
    ATT_BWD_SMEM(HD)
    constexpr int NF = HD / 16, NH = (NF + 1) / 2;
    const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, k0 = kt * ATT_T;
    const int32_t *sdoc = doc ? doc + (size_t)b * S : NULL; /* this sequence's doc_start */
    const int warp = threadIdx.x / 32, kb = warp % 4, half = warp / 4;
    const int C = (nq / r) * (r + 2) * HD, OW = nq * HD, nqt = (S + ATT_T - 1) / ATT_T;
    const size_t tok0 = (size_t)b * S;
    const h16 *kp = qkv + tok0 * C + (size_t)(g * (r + 2) + r) * HD; // (S, HD) stride C
    load_tile<HD>(k_s, kp, C, k0, S);
    load_tile<HD>(v_s, kp + HD, C, k0, S);

    frag_c dk[NH], dv[NH];
#pragma unroll
    for (int t = 0; t < NH; t++) wmma::fill_fragment(dk[t], 0.0f), wmma::fill_fragment(dv[t], 0.0f);

    for (int j = 0; j < r; j++) {
        const int h = g * r + j;
        const h16 *qp = qkv + tok0 * C + (size_t)(g * (r + 2) + j) * HD; // (S, HD) stride C
        const h16 *dop = dout + tok0 * OW + (size_t)h * HD;              // (S, HD) stride OW
        for (int qt = kt; qt < nqt; qt++) { /* causal: query tiles at or after the key tile */
            const int q0 = qt * ATT_T;
            /* documents: this and every later query tile start past the key tile (uniform) */
            if (sdoc && sdoc[q0] >= k0 + ATT_T) break;
            __syncthreads(); /* the previous iteration's readers of Q, dO, P, dS are done */
            load_tile<HD>(q_s, qp, C, q0, S);
            load_tile<HD>(do_s, dop, OW, q0, S);
            load_rows(lse_s, d_s, doc_s, lse, D, sdoc, ((size_t)b * nq + h) * S, q0, S);
            __syncthreads();
            bwd_probs<HD, h16>(q_s, do_s, k_s, v_s, s_s, dp_s, p_s, ds_s, lse_s, d_s, doc_s, q0, k0,
                               S, scale_log2, dropping ? &drop : NULL, b, h);
            /* dV (64 keys, HD) += P^T dO;  dK += dS^T Q  (contraction over the 64 queries) */
            frag_a_col<h16> pt[ATT_T / 16],
                dst[ATT_T / 16]; /* element (key, query) at x[query*LDP+key] */
#pragma unroll
            for (int kk = 0; kk < ATT_T / 16; kk++) {
                wmma::load_matrix_sync(pt[kk], p_s + kk * 16 * G::LDP + kb * 16, G::LDP);
                wmma::load_matrix_sync(dst[kk], ds_s + kk * 16 * G::LDP + kb * 16, G::LDP);
            }
#pragma unroll
            for (int t = 0; t < NH; t++) {
                const int n = 2 * t + half;
                if (n >= NF) continue;
#pragma unroll
                for (int kk = 0; kk < ATT_T / 16; kk++) {
                    frag_b_row<h16> bm;
                    wmma::load_matrix_sync(bm, do_s + kk * 16 * G::LD + n * 16, G::LD);
                    wmma::mma_sync(dv[t], pt[kk], bm, dv[t]);
                    wmma::load_matrix_sync(bm, q_s + kk * 16 * G::LD + n * 16, G::LD);
                    wmma::mma_sync(dk[t], dst[kk], bm, dk[t]);
                }
            }
        }
    }
    /* stage through shared memory (the S/dP regions) and write h16: dk = scale dS^T Q */
    h16 *dkp = dqkv + tok0 * C + (size_t)(g * (r + 2) + r) * HD; // (S, HD) stride C
    float *stage = s_s;                                          // (64, HD) pitch LDO
    for (int pass = 0; pass < 2; pass++) {
        __syncthreads();
#pragma unroll
        for (int t = 0; t < NH; t++) {
            const int n = 2 * t + half;
            if (n < NF)
                wmma::store_matrix_sync(stage + kb * 16 * G::LDO + n * 16, pass ? dv[t] : dk[t],
                                        G::LDO, wmma::mem_row_major);
        }
        __syncthreads();
        store_tile<HD>(dkp + pass * HD, C, k0, S, stage, pass ? 1.0f : scale);
    }
}

/* Grid (ceil(S/64), nq, B), 256 threads. Warp w owns query rows 16 (w%4) and the 16-wide column
 * blocks n = w/4, w/4 + 2, ... of dQ. */
template <typename h16, int HD>
static __global__ void __launch_bounds__(ATT_BWD_THREADS)
    attention_bwd_dq_kernel(h16 *dqkv /* (B*S, C) */, const h16 *qkv /* (B*S, C) */,
                            const h16 *dout /* (B*S, nq*HD) */, const float *lse /* (B,nq,S) */,
                            const float *D /* (B,nq,S) */, int S, int nq, int r, float scale_log2,
                            float scale, mg_dropout drop, int dropping,
                            const int32_t *doc /* (B*S) or NULL */) {
    ATT_BWD_SMEM(HD)
    constexpr int NF = HD / 16, NH = (NF + 1) / 2;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qt * ATT_T;
    const int warp = threadIdx.x / 32, rb = warp % 4, half = warp / 4;
    const int g = h / r, C = (nq / r) * (r + 2) * HD, OW = nq * HD;
    const size_t tok0 = (size_t)b * S;
    const size_t qoff = (size_t)(g * (r + 2) + h % r) * HD;
    const h16 *kp = qkv + tok0 * C + (size_t)(g * (r + 2) + r) * HD; // (S, HD) stride C
    load_tile<HD>(q_s, qkv + tok0 * C + qoff, C, q0, S);
    load_tile<HD>(do_s, dout + tok0 * OW + (size_t)h * HD, OW, q0, S);
    const int32_t *sdoc = doc ? doc + (size_t)b * S : NULL; /* this sequence's doc_start */
    load_rows(lse_s, d_s, doc_s, lse, D, sdoc, ((size_t)b * nq + h) * S, q0, S);

    frag_c dq[NH];
#pragma unroll
    for (int t = 0; t < NH; t++) wmma::fill_fragment(dq[t], 0.0f);
    /* keys up to the tile's last query, from its first row's document start */
    for (int kt = sdoc ? sdoc[q0] / ATT_T : 0; kt <= qt; kt++) {
        const int k0 = kt * ATT_T;
        __syncthreads(); /* the previous iteration's readers of K, V, dS are done */
        load_tile<HD>(k_s, kp, C, k0, S);
        load_tile<HD>(v_s, kp + HD, C, k0, S);
        __syncthreads();
        bwd_probs<HD, h16>(q_s, do_s, k_s, v_s, s_s, dp_s, NULL, ds_s, lse_s, d_s, doc_s, q0, k0, S,
                           scale_log2, dropping ? &drop : NULL, b, h);
        /* dQ (64, HD) += dS (64, 64 keys) K (64 keys, HD) */
        frag_a_row<h16> af[ATT_T / 16];
#pragma unroll
        for (int kk = 0; kk < ATT_T / 16; kk++)
            wmma::load_matrix_sync(af[kk], ds_s + rb * 16 * G::LDP + kk * 16, G::LDP);
#pragma unroll
        for (int t = 0; t < NH; t++) {
            const int n = 2 * t + half;
            if (n >= NF) continue;
#pragma unroll
            for (int kk = 0; kk < ATT_T / 16; kk++) {
                frag_b_row<h16> bm;
                wmma::load_matrix_sync(bm, k_s + kk * 16 * G::LD + n * 16, G::LD);
                wmma::mma_sync(dq[t], af[kk], bm, dq[t]);
            }
        }
    }
    __syncthreads();
    float *stage = s_s; // (64, HD) pitch LDO
#pragma unroll
    for (int t = 0; t < NH; t++) {
        const int n = 2 * t + half;
        if (n < NF)
            wmma::store_matrix_sync(stage + rb * 16 * G::LDO + n * 16, dq[t], G::LDO,
                                    wmma::mem_row_major);
    }
    __syncthreads();
    store_tile<HD>(dqkv + tok0 * C + qoff, C, q0, S, stage, scale); /* dq = scale dS K */
}

/* The head dims the tensor-core kernels are built for (with_head_dim); any other from 1 to
 * MG_ATT_GENERIC_MAX_HD runs attention_generic.cu's kernels, forward and backward alike. */
static bool fast_head_dim(int hd) {
    return hd % 16 == 0 && hd >= 16 && hd <= 128;
}

static mg_status attention_check(int B, int S, int nq, int ng, int hd, const void *const *ptrs,
                                 int nptrs) {
    if (B <= 0 || S <= 0 || nq <= 0 || ng <= 0 || nq % ng != 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "attention: bad shape B=%d S=%d, %d query heads in %d groups", B, S, nq, ng);
    if (hd < 1 || hd > MG_ATT_GENERIC_MAX_HD)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "attention: head dim %d is not supported (1 to %d on CUDA)", hd,
                       MG_ATT_GENERIC_MAX_HD);
    if (B > 65535 || nq > 65535)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "attention: B=%d or nq=%d over the grid limit 65535", B,
                       nq);
    if (!fast_head_dim(hd)) return MG_OK; /* the generic kernels load element by element */
    for (int i = 0; i < nptrs; i++)
        if ((uintptr_t)ptrs[i] % 16 != 0)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "attention: buffer %p is not 16-byte aligned (the kernels use 16-byte "
                           "vector accesses)",
                           ptrs[i]);
    return MG_OK;
}

MG_CUDA_DTYPES(size_t, attention_saved_bytes, (mg_backend * be, int B, int S, int nq, int hd),
               (be, B, S, nq, hd)) {
    (void)be;
    return mg_backend_attention_saved_bytes(MG_DEVICE_CUDA, B, S, nq, hd); /* lse2, (B, nq, S) */
}

/* A kernel argument for drop (NULL: a zeroed one and the flag off). */
static mg_dropout drop_arg(const mg_dropout *drop) {
    mg_dropout d;
    memset(&d, 0, sizeof d);
    if (drop) d = *drop;
    return d;
}

template <int HD, typename h16>
static mg_status forward_launch(mg_backend *be, h16 *out, float *lse, const h16 *qkv, int B, int S,
                                int nq, int r, const mg_dropout *drop, const int32_t *doc_start) {
    const size_t smem = att_geom<h16, HD>::FWD;
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)HD);
    dim3 grid((S + ATT_T - 1) / ATT_T, nq, B);
    attention_forward_kernel<h16, HD><<<grid, ATT_FWD_THREADS, smem, mg_cuda_stream(be)>>>(
        out, lse, qkv, S, nq, r, scale_log2, drop_arg(drop), drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template <int HD, typename h16>
static mg_status backward_launch(mg_backend *be, h16 *dqkv, const h16 *dout, const h16 *qkv,
                                 const float *lse, const float *D, int B, int S, int nq, int ng,
                                 const mg_dropout *drop, const int32_t *doc_start) {
    const size_t smem = att_geom<h16, HD>::BWD;
    const int r = nq / ng, nt = (S + ATT_T - 1) / ATT_T;
    const float scale = 1.0f / sqrtf((float)HD), scale_log2 = 1.4426950408889634f * scale;
    cudaStream_t stream = mg_cuda_stream(be);
    const mg_dropout d = drop_arg(drop);
    attention_bwd_dkdv_kernel<h16, HD><<<dim3(nt, ng, B), ATT_BWD_THREADS, smem, stream>>>(
        dqkv, qkv, dout, lse, D, S, nq, r, scale_log2, scale, d, drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    attention_bwd_dq_kernel<h16, HD><<<dim3(nt, nq, B), ATT_BWD_THREADS, smem, stream>>>(
        dqkv, qkv, dout, lse, D, S, nq, r, scale_log2, scale, d, drop != NULL, doc_start);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* Calls f(std::integral_constant<int, hd>) for the head dims the kernels are built for
 * (fast_head_dim: the launchers send only these here); one switch for forward and backward. */
template <class F> static mg_status with_head_dim(int hd, F f) {
    switch (hd) {
    case 16:
        return f(std::integral_constant<int, 16>{});
    case 32:
        return f(std::integral_constant<int, 32>{});
    case 48:
        return f(std::integral_constant<int, 48>{});
    case 64:
        return f(std::integral_constant<int, 64>{});
    case 80:
        return f(std::integral_constant<int, 80>{});
    case 96:
        return f(std::integral_constant<int, 96>{});
    case 112:
        return f(std::integral_constant<int, 112>{});
    default:
        return f(std::integral_constant<int, 128>{});
    }
}

/* The kernels' dynamic shared memory above the 48 KB default, for one head dim. */
template <typename h16, int HD> static mg_status raise_smem_limits() {
    const cudaFuncAttribute attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
    MG_CUDA_CHECK(
        cudaFuncSetAttribute(attention_forward_kernel<h16, HD>, attr, (int)att_geom<h16, HD>::FWD));
    MG_CUDA_CHECK(cudaFuncSetAttribute(attention_bwd_dkdv_kernel<h16, HD>, attr,
                                       (int)att_geom<h16, HD>::BWD));
    MG_CUDA_CHECK(
        cudaFuncSetAttribute(attention_bwd_dq_kernel<h16, HD>, attr, (int)att_geom<h16, HD>::BWD));
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, attention_init, (void), ()) {
    for (int hd = 16; hd <= 128; hd += 16) /* every head dim with_head_dim dispatches to */
        MG_CHECK(with_head_dim(
            hd, [](auto HD) { return raise_smem_limits<h16, decltype(HD)::value>(); }));
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, attention_forward,
               (mg_backend * be, void *out /* (B*S, nq*hd) */,
                void *saved /* (B, nq, S) fp32 lse2 */, const void *qkv /* (B*S, ng*(r+2)*hd) */,
                int B, int S, int nq, int ng, int hd, const mg_dropout *drop,
                const int32_t *doc_start /* (B*S) or NULL */),
               (be, out, saved, qkv, B, S, nq, ng, hd, drop, doc_start)) {
    const void *ptrs[] = {out, qkv};
    MG_CHECK(attention_check(B, S, nq, ng, hd, ptrs, 2));
    if (!fast_head_dim(hd))
        return mg_cuda_attention_generic_forward<h16>(
            be, (h16 *)out, (float *)saved, (const h16 *)qkv, B, S, nq, ng, hd, drop, doc_start);
    const int r = nq / ng;
    return with_head_dim(hd, [&](auto HD) {
        return forward_launch<decltype(HD)::value>(be, (h16 *)out, (float *)saved, (const h16 *)qkv,
                                                   B, S, nq, r, drop, doc_start);
    });
}

MG_CUDA_DTYPES(mg_status, attention_backward,
               (mg_backend * be, void *dqkv /* (B*S, ng*(r+2)*hd) */,
                const void *dout /* (B*S, nq*hd) */, const void *qkv /* (B*S, ng*(r+2)*hd) */,
                const void *out /* (B*S, nq*hd) */, const void *saved /* (B, nq, S) fp32 lse2 */,
                int B, int S, int nq, int ng, int hd, const mg_dropout *drop,
                const int32_t *doc_start /* (B*S) or NULL */),
               (be, dqkv, dout, qkv, out, saved, B, S, nq, ng, hd, drop, doc_start)) {
    const void *ptrs[] = {dqkv, dout, qkv, out};
    MG_CHECK(attention_check(B, S, nq, ng, hd, ptrs, 4));
    const size_t rows = (size_t)B * nq * S;
    float *D = NULL; // (B, nq, S)
    MG_CHECK(mg_cuda_scratch(be, rows * sizeof(float), (void **)&D, "attention backward (dO.O)"));
    const int warps = 8;
    attention_bwd_dot_kernel<h16>
        <<<(unsigned)((rows + warps - 1) / warps), 32 * warps, 0, mg_cuda_stream(be)>>>(
            D, (const h16 *)dout, (const h16 *)out, B, S, nq, hd);
    MG_CUDA_CHECK_LAUNCH();
    if (!fast_head_dim(hd))
        return mg_cuda_attention_generic_backward<h16>(be, (h16 *)dqkv, (const h16 *)dout,
                                                       (const h16 *)qkv, (const float *)saved, D, B,
                                                       S, nq, ng, hd, drop, doc_start);
    return with_head_dim(hd, [&](auto HD) {
        return backward_launch<decltype(HD)::value>(be, (h16 *)dqkv, (const h16 *)dout,
                                                    (const h16 *)qkv, (const float *)saved, D, B, S,
                                                    nq, ng, drop, doc_start);
    });
}
