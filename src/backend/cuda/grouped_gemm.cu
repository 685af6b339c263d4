/* The experts' grouped linear on the GPU (backend_ops.h, "mixture of experts"; CPU reference:
 * cpu/cpu_moe.c): G = n_src x n_w groups of rows one after the other from row 0, group g of
 * counts[g] rows (device memory) against weight w[g % n_w] (OC, IC). h16 activations and
 * weights, fp32 accumulation, fp32 weight and bias gradients (accumulated).
 *
 * No host synchronisation, no allocation: the counts stay on the device. A one-block kernel
 * scans them into row offsets (and the fallback's tile offsets) in the backend's workspace, and
 * every later kernel reads its groups there. Workspace (stream-ordered like every op's):
 *   [0, A)   row_off (G+1) int32: group g's rows are [row_off[g], row_off[g+1])
 *   [A, B)   tile_off (G+1) int32: the fallback's M-tiles before group g (BM rows each)
 *   [B, ..)  CUTLASS's per-group shapes, pointers, strides and its own workspace
 * (A, B: 256-byte aligned; about 100 bytes per group in all, so the default 2 GiB workspace holds
 * millions of groups).
 *
 * Two implementations:
 *  - CUTLASS (grouped_gemm_cutlass.cu): Hopper ptr-array grouped GEMM with device-side problem
 *    shapes; the fast path, taken when the build has CUTLASS, the compute dtype is bf16 (its
 *    kernels are built for bf16 alone: fp16 always takes the portable kernel), the device is
 *    sm 9.0, IC and OC are multiples of 8 and the activation buffers 16-byte aligned. The bias,
 *    the GELU derivative and the bias gradient are small kernels of this file around it (gelu'
 *    multiplies the bf16 dinp: one more rounding than the fused path, as in linear.cu's
 *    fallback). H200, 8 experts x 2048 rows: 0.91-0.95 of one dense cuBLASLt GEMM of the same
 *    FLOPs forward, 0.82-0.85 backward.
 *  - The portable kernel below (the fallback, and the second opinion in the tests): WMMA h16
 *    tensor cores, 128x128x32 tiles, 8 warps of 64x32, two cp.async stages. Forward and dinp run
 *    a persistent grid whose blocks walk the flattened (M-tile, N-tile) list, finding their group
 *    by a binary search of tile_off; the bias and gelu'(gelu_pre) are applied to the fp32
 *    accumulators before the one rounding. dW runs one block per (N-tile, M-tile, weight j) that
 *    loops over the sources, so groups sharing a weight accumulate in registers and dW_j is
 *    read and written once by one block: no race and a fixed order of additions. Any counts
 *    (0 rows, rows not a multiple of the tile) and any IC, OC: 16-byte copies where the widths
 *    are multiples of 8 and the pointers aligned, element copies otherwise. About 140 TFLOP/s
 *    on H200 (a fifth of CUTLASS's rate): a fallback, not a fast path.
 * dinp may be NULL (weight and bias gradients only), as linear_backward allows.
 * The fp8 ops (fp8_grouped_linear_forward/_backward) are grouped_gemm_fp8.cu's; the scan, the
 * small kernels and the host helpers both files use are grouped_gemm_common.cuh's.
 * MG_GROUPED_GEMM=cutlass|fallback (read once, at backend creation) picks the table's entries;
 * the default is CUTLASS where it is available.
 *
 * The GELU derivative is activation.cu's (tanh form), from activation_math.cuh.
 * Exports: mg_cuda_grouped_gemm_init, mg_cuda_grouped_linear_forward/_backward (CUTLASS where it
 * applies), mg_cuda_grouped_linear_forward/_backward_portable. */
#include "backend/cuda/grouped_gemm_common.cuh"
#include "core/env.h"
#include "core/log.h"

#include <mma.h>
#include <string.h>
#include <type_traits>

#define GG_BN            128 /* columns (N) */
#define GG_BK            32  /* depth of one stage (K) */
#define GG_THREADS       256 /* 8 warps: 2 along M x 4 along N, 64x32 each */
#define GG_PAD           8   /* h16 per shared row of padding: ld stays a multiple of 8 (WMMA) */
#define GG_LD_K          (GG_BK + GG_PAD)      /* K-major tile [128][BK]: row stride */
#define GG_LD_MN         (GG_BM + GG_PAD)      /* MN-major tile [BK][128]: row stride */
#define GG_TILE          (GG_BM * GG_LD_K)     /* h16 per operand tile (the larger layout) */
#define GG_SMEM          (2 * 2 * GG_TILE * 2) /* 2 stages x (A, B) x bytes: 40 KiB */
#define GG_BLOCKS_PER_SM 2

static_assert(GG_BM * GG_LD_K >= GG_BK * GG_LD_MN, "tile size");
static_assert(GG_BM == GG_BN, "one tile shape for both operands");
static_assert(8 * 256 * sizeof(float) <= GG_SMEM, "epilogue scratch fits the stages");

/* ---------------------------------------------------------------- the portable GEMM */

/* One operand of a tile product: element (o, k), o along M or N and k along K, is
 * p[o * ld + k] when K-major and p[k * ld + o] when MN-major; valid for o < o_lim, k < k_lim
 * (zeros elsewhere). vec: 16-byte copies (the contiguous limit a multiple of 8, p and ld
 * aligned), else element by element. */
template <typename h16> struct gg_operand {
    const h16 *p;
    int64_t ld;
    int o_lim, k_lim;
    bool vec;
};

template <typename h16> struct gg_args {
    const h16 *x;        /* A's activations: inp (forward) or dout (dinp, dw) */
    const h16 *xb;       /* dw: inp */
    void *const *w;      /* forward, dinp: the n_w weights (h16); dw: the n_w dW (fp32) */
    void *const *bias;   /* forward: the n_w biases or NULL */
    const h16 *gelu_pre; /* dinp: (rows, IC) or NULL */
    h16 *y;              /* forward: out (rows, OC); dinp: dinp (rows, IC) */
    const int32_t *row_off, *tile_off; /* (G+1) each */
    int G, n_src, n_w, IC, OC;
    bool vec; /* IC, OC multiples of 8 and the activation buffers 16-byte aligned */
    bool acc; /* dw: add to dW (else write over it) */
};

static __device__ __forceinline__ void gg_cp_async16(void *smem, const void *gmem, bool ok) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = ok ? 16 : 0; /* 0 source bytes: the 16 bytes are zero-filled */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
static __device__ __forceinline__ void gg_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> static __device__ __forceinline__ void gg_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Tile (o0.., k0..) of op into shared s: [128][GG_LD_K] when K-major, [GG_BK][GG_LD_MN] else. */
template <bool KMAJ, typename h16>
static __device__ __forceinline__ void gg_load_tile(h16 *s, const gg_operand<h16> &op, int o0,
                                                    int k0) {
    if (op.vec) {
        for (int c = threadIdx.x; c < GG_BM * GG_BK / 8; c += GG_THREADS) {
            int o = KMAJ ? c / (GG_BK / 8) : (c % (GG_BM / 8)) * 8;
            int k = KMAJ ? (c % (GG_BK / 8)) * 8 : c / (GG_BM / 8);
            bool ok = o0 + o < op.o_lim && k0 + k < op.k_lim;
            const h16 *src = op.p;
            if (ok)
                src += KMAJ ? (int64_t)(o0 + o) * op.ld + (k0 + k)
                            : (int64_t)(k0 + k) * op.ld + (o0 + o);
            gg_cp_async16(KMAJ ? s + o * GG_LD_K + k : s + k * GG_LD_MN + o, src, ok);
        }
    } else {
        for (int e = threadIdx.x; e < GG_BM * GG_BK; e += GG_THREADS) {
            int o = KMAJ ? e / GG_BK : e % GG_BM, k = KMAJ ? e % GG_BK : e / GG_BM;
            h16 v = f_to_h16<h16>(0.0f);
            if (o0 + o < op.o_lim && k0 + k < op.k_lim)
                v = KMAJ ? op.p[(int64_t)(o0 + o) * op.ld + (k0 + k)]
                         : op.p[(int64_t)(k0 + k) * op.ld + (o0 + o)];
            (KMAJ ? s[o * GG_LD_K + k] : s[k * GG_LD_MN + o]) = v;
        }
    }
}

typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> gg_acc;

/* The 16x16 fragment at (mn, kk) of a staged tile: K-major tiles hold rows of GG_LD_K along K,
 * M/N-major ones rows of GG_LD_MN along M/N. */
template <bool KMAJOR, class Frag, typename h16>
static __device__ __forceinline__ void gg_load_frag(Frag &f, const h16 *tile, int mn, int kk) {
    if (KMAJOR)
        nvcuda::wmma::load_matrix_sync(f, tile + mn * GG_LD_K + kk, GG_LD_K);
    else
        nvcuda::wmma::load_matrix_sync(f, tile + kk * GG_LD_MN + mn, GG_LD_MN);
}

/* acc (the warp's 4x2 fragments) += A (m0.., 0..K) . B (n0.., 0..K)^T, two stages deep. Ends
 * with every cp.async complete and a barrier, so the caller may reuse the shared memory. */
template <bool AK, bool BK, typename h16>
static __device__ void gg_mainloop(h16 *smem, const gg_operand<h16> &A, const gg_operand<h16> &B,
                                   int m0, int n0, int K, gg_acc (&acc)[4][2]) {
    using namespace nvcuda;
    typedef typename std::conditional<AK, wmma::row_major, wmma::col_major>::type LayoutA;
    typedef typename std::conditional<BK, wmma::col_major, wmma::row_major>::type LayoutB;
    const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
    const int nk = (K + GG_BK - 1) / GG_BK;
    if (nk <= 0) return;
    gg_load_tile<AK>(smem, A, m0, 0);
    gg_load_tile<BK>(smem + GG_TILE, B, n0, 0);
    gg_cp_commit();
    for (int kt = 0; kt < nk; kt++) {
        h16 *sa = smem + (kt & 1) * 2 * GG_TILE, *sb = sa + GG_TILE;
        if (kt + 1 < nk) {
            h16 *na = smem + ((kt + 1) & 1) * 2 * GG_TILE;
            gg_load_tile<AK>(na, A, m0, (kt + 1) * GG_BK);
            gg_load_tile<BK>(na + GG_TILE, B, n0, (kt + 1) * GG_BK);
            gg_cp_commit();
            gg_cp_wait<1>();
        } else {
            gg_cp_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, h16, LayoutA> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, h16, LayoutB> fb[2];
#pragma unroll
            for (int i = 0; i < 4; i++) gg_load_frag<AK>(fa[i], sa, wm * 64 + i * 16, kk);
#pragma unroll
            for (int j = 0; j < 2; j++) gg_load_frag<BK>(fb[j], sb, wn * 32 + j * 16, kk);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
}

/* Writes the warp's fragments through a 16x16 fp32 scratch of its own: lane -> row lane/2,
 * columns (lane%2)*8 .. +8 of each fragment; f(m, n, v[8]) with tile-relative m, n. */
template <class F>
static __device__ __forceinline__ void gg_epilogue(float *smem_f, gg_acc (&acc)[4][2], F f) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
    float *scr = smem_f + warp * 256;
    const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            nvcuda::wmma::store_matrix_sync(scr, acc[i][j], 16, nvcuda::wmma::mem_row_major);
            __syncwarp();
            float v[8];
#pragma unroll
            for (int q = 0; q < 8; q++) v[q] = scr[r * 16 + c + q];
            f(wm * 64 + i * 16 + r, wn * 32 + j * 16 + c, v);
            __syncwarp();
        }
}

/* out rows of one group: y[row, n..n+8) = f(v) for n < N (bias / gelu' applied in fp32). */
template <int MODE, typename h16>
static __device__ __forceinline__ void gg_store_rows(const gg_args<h16> &a, int64_t row, int n,
                                                     int N, const h16 *bias, float v[8]) {
    h16 *y = a.y + row * N + n;
    if (MODE == GG_FWD && bias)
#pragma unroll
        for (int q = 0; q < 8; q++) v[q] += n + q < N ? h16_to_f(bias[n + q]) : 0.0f;
    if (MODE == GG_DINP && a.gelu_pre) {
        const h16 *pre = a.gelu_pre + row * N + n;
#pragma unroll
        for (int q = 0; q < 8; q++) v[q] = n + q < N ? mg_gelu_bwd(h16_to_f(pre[q]), v[q]) : 0.0f;
    }
    if (a.vec && n + 8 <= N) {
        mg_store8(y, v);
    } else {
#pragma unroll
        for (int q = 0; q < 8; q++)
            if (n + q < N) y[q] = f_to_h16<h16>(v[q]);
    }
}

template <typename h16, int MODE>
static __global__ void __launch_bounds__(GG_THREADS, GG_BLOCKS_PER_SM)
    grouped_gemm_kernel(gg_args<h16> a) {
    __shared__ __align__(128) unsigned char smem_raw[GG_SMEM];
    h16 *smem = reinterpret_cast<h16 *>(smem_raw);
    float *smem_f = reinterpret_cast<float *>(smem_raw);
    constexpr bool AK = MODE != GG_DW;  /* A K-major: forward, dinp (rows of dout / inp) */
    constexpr bool BK = MODE == GG_FWD; /* B K-major: forward (W rows); dinp, dw: MN-major */
    gg_acc acc[4][2];

    if (MODE == GG_DW) {
        /* dW_j (OC, IC) += sum over sources of dout^T (OC, n) . inp (n, IC): M = OC, N = IC */
        const int j = blockIdx.z, m0 = blockIdx.y * GG_BM, n0 = blockIdx.x * GG_BN;
        float *dw = reinterpret_cast<float *>(a.w[j]);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int q = 0; q < 2; q++) nvcuda::wmma::fill_fragment(acc[i][q], 0.0f);
        for (int s = 0; s < a.n_src; s++) {
            int g = s * a.n_w + j, r0 = a.row_off[g], n = a.row_off[g + 1] - r0;
            if (n <= 0) continue;
            gg_operand<h16> A = {a.x + (int64_t)r0 * a.OC, a.OC, a.OC, n, a.vec};
            gg_operand<h16> B = {a.xb + (int64_t)r0 * a.IC, a.IC, a.IC, n, a.vec};
            gg_mainloop<AK, BK>(smem, A, B, m0, n0, n, acc);
        }
        const bool v4 = a.vec && ((uintptr_t)dw & 15u) == 0;
        gg_epilogue(smem_f, acc, [&](int m, int n, float v[8]) {
            m += m0, n += n0;
            if (m >= a.OC) return;
            float *d = dw + (int64_t)m * a.IC + n;
            if (v4 && n + 8 <= a.IC) {
                float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
                if (a.acc)
                    x0 = reinterpret_cast<float4 *>(d)[0], x1 = reinterpret_cast<float4 *>(d)[1];
                x0.x += v[0], x0.y += v[1], x0.z += v[2], x0.w += v[3];
                x1.x += v[4], x1.y += v[5], x1.z += v[6], x1.w += v[7];
                reinterpret_cast<float4 *>(d)[0] = x0;
                reinterpret_cast<float4 *>(d)[1] = x1;
            } else {
#pragma unroll
                for (int q = 0; q < 8; q++)
                    if (n + q < a.IC) d[q] = (a.acc ? d[q] : 0.0f) + v[q];
            }
        });
        return;
    }

    /* forward: out (n, OC) = inp (n, IC) . W^T; dinp: dinp (n, IC) = dout (n, OC) . W */
    const int N = MODE == GG_FWD ? a.OC : a.IC, K = MODE == GG_FWD ? a.IC : a.OC;
    const int ntn = (N + GG_BN - 1) / GG_BN;
    const int64_t total = (int64_t)a.tile_off[a.G] * ntn;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int32_t mt = (int32_t)(t / ntn);
        const int n0 = (int)(t % ntn) * GG_BN;
        const int g = find_group(a.tile_off, a.G, mt), j = g % a.n_w;
        const int32_t r0 = a.row_off[g], rows = a.row_off[g + 1] - r0;
        const int m0 = (mt - a.tile_off[g]) * GG_BM;
        const h16 *w = reinterpret_cast<const h16 *>(a.w[j]);
        const h16 *bias =
            MODE == GG_FWD && a.bias ? reinterpret_cast<const h16 *>(a.bias[j]) : NULL;
        const bool wvec = a.vec && ((uintptr_t)w & 15u) == 0;
        gg_operand<h16> A = {a.x + (int64_t)r0 * K, K, rows, K, a.vec};
        gg_operand<h16> B = MODE == GG_FWD ? gg_operand<h16>{w, a.IC, a.OC, a.IC, wvec}
                                           : gg_operand<h16>{w, a.IC, a.IC, a.OC, wvec};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int q = 0; q < 2; q++) nvcuda::wmma::fill_fragment(acc[i][q], 0.0f);
        gg_mainloop<AK, BK>(smem, A, B, m0, n0, K, acc);
        gg_epilogue(smem_f, acc, [&](int m, int n, float v[8]) {
            m += m0, n += n0;
            if (m < rows && n < N) gg_store_rows<MODE>(a, (int64_t)r0 + m, n, N, bias, v);
        });
        __syncthreads(); /* the next tile's copies overwrite the epilogue's scratch */
    }
}

/* Whether the CUTLASS path takes this call (see the header). Its kernels are instantiated for
 * bf16 operands only (grouped_gemm_cutlass.cu), so fp16 always takes the portable kernel. */
template <typename h16>
static bool use_cutlass(mg_backend *be, int IC, int OC, const void *a, const void *b, const void *c,
                        const void *d) {
    if (std::is_same<h16, __half>::value) return false;
    return mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(be)->device) && IC > 0 && OC > 0 &&
           IC % 8 == 0 && OC % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c) &&
           aligned16(d);
}

MG_CUDA_DTYPES(mg_status, grouped_linear_forward_portable,
               (mg_backend * be, void *out /* (R,OC) */, const void *inp /* (R,IC) */,
                void *const *w, void *const *bias, const int32_t *counts /* (G) */, int n_src,
                int n_w, int IC, int OC),
               (be, out, inp, w, bias, counts, n_src, n_w, IC, OC)) {
    MG_CHECK(check_shape("grouped_linear_forward", n_src, n_w, IC, OC));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, "grouped_linear_forward", &ws));
    MG_CHECK(launch_offsets(be, &ws, counts, G));
    if (OC == 0) return MG_OK;
    gg_args<h16> a = {(const h16 *)inp,
                      NULL,
                      w,
                      bias,
                      NULL,
                      (h16 *)out,
                      ws.row_off,
                      ws.tile_off,
                      G,
                      n_src,
                      n_w,
                      IC,
                      OC,
                      IC % 8 == 0 && OC % 8 == 0 && aligned16(inp) && aligned16(out),
                      false};
    grouped_gemm_kernel<h16, GG_FWD>
        <<<persistent_blocks(be, GG_BLOCKS_PER_SM), GG_THREADS, 0, mg_cuda_stream(be)>>>(a);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, grouped_linear_backward_portable,
               (mg_backend * be, void *dinp /* (R,IC) or NULL */, float *const *dw,
                float *const *dbias, const void *dout /* (R,OC) */, const void *inp /* (R,IC) */,
                void *const *w, const void *gelu_pre /* (R,IC) or NULL */, const int32_t *counts,
                int n_src, int n_w, int IC, int OC, bool accumulate),
               (be, dinp, dw, dbias, dout, inp, w, gelu_pre, counts, n_src, n_w, IC, OC,
                accumulate)) {
    MG_CHECK(check_shape("grouped_linear_backward", n_src, n_w, IC, OC));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, "grouped_linear_backward", &ws));
    MG_CHECK(launch_offsets(be, &ws, counts, G));
    cudaStream_t stream = mg_cuda_stream(be);
    bool vec = IC % 8 == 0 && OC % 8 == 0 && aligned16(dout) && aligned16(inp) && aligned16(dinp) &&
               aligned16(gelu_pre);
    if (IC > 0 && OC > 0) {
        gg_args<h16> a = {(const h16 *)dout,
                          (const h16 *)inp,
                          (void *const *)dw,
                          NULL,
                          NULL,
                          NULL,
                          ws.row_off,
                          ws.tile_off,
                          G,
                          n_src,
                          n_w,
                          IC,
                          OC,
                          vec,
                          accumulate};
        dim3 grid((IC + GG_BN - 1) / GG_BN, (OC + GG_BM - 1) / GG_BM, n_w);
        grouped_gemm_kernel<h16, GG_DW><<<grid, GG_THREADS, 0, stream>>>(a);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (dinp && IC > 0) { /* OC == 0: K = 0, dinp = 0 */
        gg_args<h16> a = {(const h16 *)dout,
                          NULL,
                          w,
                          NULL,
                          (const h16 *)gelu_pre,
                          (h16 *)dinp,
                          ws.row_off,
                          ws.tile_off,
                          G,
                          n_src,
                          n_w,
                          IC,
                          OC,
                          vec,
                          false};
        grouped_gemm_kernel<h16, GG_DINP>
            <<<persistent_blocks(be, GG_BLOCKS_PER_SM), GG_THREADS, 0, stream>>>(a);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (dbias) MG_CHECK(launch_dbias<h16>(be, dbias, dout, ws, n_src, n_w, OC, accumulate));
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, grouped_linear_forward,
               (mg_backend * be, void *out /* (R,OC) */, const void *inp /* (R,IC) */,
                void *const *w, void *const *bias, const int32_t *counts, int n_src, int n_w,
                int IC, int OC),
               (be, out, inp, w, bias, counts, n_src, n_w, IC, OC)) {
    if (!use_cutlass<h16>(be, IC, OC, out, inp, NULL, NULL))
        return grouped_linear_forward_portable<h16>(be, out, inp, w, bias, counts, n_src, n_w, IC,
                                                    OC);
    MG_CHECK(check_shape("grouped_linear_forward", n_src, n_w, IC, OC));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, "grouped_linear_forward", &ws));
    MG_CHECK(mg_cuda_grouped_cutlass_run(be, GG_FWD, out, inp, NULL, w, ws.row_off, counts, n_src,
                                         n_w, IC, OC, true, ws.rest, ws.rest_bytes));
    return add_grouped_bias<h16>(be, out, bias, ws, G, n_w, OC);
}

MG_CUDA_DTYPES(mg_status, grouped_linear_backward,
               (mg_backend * be, void *dinp /* (R,IC) or NULL */, float *const *dw,
                float *const *dbias, const void *dout /* (R,OC) */, const void *inp /* (R,IC) */,
                void *const *w, const void *gelu_pre /* (R,IC) or NULL */, const int32_t *counts,
                int n_src, int n_w, int IC, int OC, bool accumulate),
               (be, dinp, dw, dbias, dout, inp, w, gelu_pre, counts, n_src, n_w, IC, OC,
                accumulate)) {
    if (!use_cutlass<h16>(be, IC, OC, dinp, dout, inp, gelu_pre))
        return grouped_linear_backward_portable<h16>(be, dinp, dw, dbias, dout, inp, w, gelu_pre,
                                                     counts, n_src, n_w, IC, OC, accumulate);
    MG_CHECK(check_shape("grouped_linear_backward", n_src, n_w, IC, OC));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, "grouped_linear_backward", &ws));
    if (!accumulate && n_w > 0) { /* the weights the first source's product gives no tiles */
        dim3 grid(64, n_w);
        grouped_zero_empty_kernel<<<grid, 256, 0, mg_cuda_stream(be)>>>(dw, counts,
                                                                        (size_t)OC * IC);
        MG_CUDA_CHECK_LAUNCH();
    }
    MG_CHECK(mg_cuda_grouped_cutlass_run(be, GG_DW, NULL, dout, inp, (void *const *)dw, ws.row_off,
                                         counts, n_src, n_w, IC, OC, accumulate, ws.rest,
                                         ws.rest_bytes));
    if (dinp) {
        MG_CHECK(mg_cuda_grouped_cutlass_run(be, GG_DINP, dinp, dout, NULL, w, ws.row_off, counts,
                                             n_src, n_w, IC, OC, true, ws.rest, ws.rest_bytes));
        if (gelu_pre) {
            grouped_gelu_grad_kernel<h16><<<persistent_blocks(be, 8), 256, 0, mg_cuda_stream(be)>>>(
                (h16 *)dinp, (const h16 *)gelu_pre, ws.row_off, G, IC);
            MG_CUDA_CHECK_LAUNCH();
        }
    }
    if (dbias) MG_CHECK(launch_dbias<h16>(be, dbias, dout, ws, n_src, n_w, OC, accumulate));
    return MG_OK;
}

/* MG_GROUPED_GEMM (docs/environment.md): "cutlass" (the default: CUTLASS where the build and the
 * device have it, the portable kernel for the rest) or "fallback" (the portable kernel only).
 * fp16 compute has the portable kernel alone (use_cutlass). */
MG_CUDA_DTYPES(mg_status, grouped_gemm_init, (mg_backend * be), (be)) {
    const char *impl = mg_env_str("MG_GROUPED_GEMM", NULL);
    if (impl && strcmp(impl, "cutlass") != 0 && strcmp(impl, "fallback") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_GROUPED_GEMM=%s: expected cutlass or fallback", impl);
    bool cutlass = !impl || strcmp(impl, "cutlass") == 0;
    if (std::is_same<h16, __half>::value) {
        if (impl && cutlass)
            mg_log_warn("MG_GROUPED_GEMM=cutlass: the CUTLASS grouped GEMM is bf16 only; fp16 uses "
                        "the portable grouped GEMM");
        cutlass = false;
    }
    if (cutlass && mg_cuda_grouped_cutlass_init(mg_cuda_ctx_of(be)->device) != MG_OK) {
        if (impl)
            mg_log_warn("MG_GROUPED_GEMM=cutlass: %s; using the portable grouped GEMM",
                        mg_error_message());
        else
            mg_log_debug("grouped GEMM: %s; using the portable kernel", mg_error_message());
        mg_error_clear();
        cutlass = false;
    }
    be->grouped_linear_forward = cutlass ? MG_CUDA_OF(h16, grouped_linear_forward)
                                         : MG_CUDA_OF(h16, grouped_linear_forward_portable);
    be->grouped_linear_backward = cutlass ? MG_CUDA_OF(h16, grouped_linear_backward)
                                          : MG_CUDA_OF(h16, grouped_linear_backward_portable);
    /* the fp8 products have CUTLASS's kernel alone (bf16 compute): absent without it */
    be->fp8_grouped_linear_forward = cutlass ? MG_CUDA_OF(h16, fp8_grouped_linear_forward) : NULL;
    be->fp8_grouped_linear_backward = cutlass ? MG_CUDA_OF(h16, fp8_grouped_linear_backward) : NULL;
    return MG_OK;
}
