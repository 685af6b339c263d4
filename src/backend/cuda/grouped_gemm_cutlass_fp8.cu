/* The experts' products on fp8 operands through CUTLASS's Hopper ptr-array grouped GEMM
 * (backend_ops.h's fp8_grouped_linear_forward/_backward, which grouped_gemm.cu implements around
 * these; grouped_gemm_cutlass.cuh has what this file shares with the bf16 one). fp32
 * accumulation; alpha = the two operands' scale inverses multiplied, on the device (the fill
 * kernel writes it beside the group arrays), so nothing reaches the host.
 *
 * Hopper's fp8 MMA reads both operands K-major only, so every product is "TN": A (M,K) row-major,
 * B (N,K) with K contiguous. For group g of rows [r0, r0 + n) and expert j = g % n_w:
 *   forward  out (n,OC)    = inp8 (n,IC) . W8_j^T    M=n  N=OC K=IC  B: W8_j's bytes (OC,IC)
 *   dinp     dinp (n,IC)   = dout8 (n,OC) . W8_j     M=n  N=IC K=OC  B: W8_j's transpose (IC,OC)
 *   dw       dW_j (OC,IC) += dout8^T . inp8          M=OC N=IC K=n   A, B: the group's columns
 *                                                                    of the grouped transposes
 *                                                                    dout8^T (OC,ld), inp8^T
 *                                                                    (IC,ld); C = D = dW_j fp32
 * The grouped transposes (fp8_cast_grouped, core/fp8.h) start each group at a 16-byte aligned
 * column, as TMA needs an operand's start to be; a group's K is its own rows, so the columns
 * between groups (never written) are never read: TMA fills past K with zeros.
 * Accumulation: the forward takes Hopper's fast fp8 accumulation, the gradients CUTLASS's
 * promoted one (partial sums moved to fp32 registers every few MMAs), as the dense fp8 linears do
 * with cuBLASLt (linear.cu).
 * Tiles (fp8: 128 bytes deep), measured on H200 (bench/NOTES.md, the Mixtral-style shape): the
 * forward 128x128x128 ping-pong, or 128x256x128 cooperative deeper than GG8_PING_MAX_K, as the
 * bf16 products choose; the gradients 128x128x128 cooperative: the ping-pong kernel of that tile
 * spills registers under the promoted accumulation and ran at a third of the cooperative's rate.
 * Six instantiations: the forward's two, and dinp and dw once per format of the gradient (e4m3,
 * e5m2).
 * Preconditions (grouped_gemm.cu checks them): IC and OC multiples of 16, the buffers and wstride
 * 16-byte aligned; the fill kernel traps on a weight (gradient) pointer that is not. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include "core/fp8.h"

#ifdef MG_HAVE_CUTLASS

#include "backend/cuda/grouped_gemm_cutlass.cuh"

#define GG8_PING_MAX_K 2048

namespace mg_gg {

using ct_e4m3 = cutlass::float_e4m3_t;
using ct_e5m2 = cutlass::float_e5m2_t;
using Tile8 = Shape<_128, _128, _128>;
using Cfg8PingFast = Cfg<Tile8, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum,
                         cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
using Cfg8CoopFast = Cfg<Shape<_128, _256, _128>,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
/* the gradients' promoted accumulation keeps a second fp32 accumulator: with one warpgroup per
 * 128x128 tile (ping-pong) that spills registers (ptxas: ~950 bytes), with two (cooperative, 64
 * rows each) it does not */
using Cfg8Coop = Cfg<Tile8, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                     cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;

template <class C> using Fwd8 = GroupedGemm<C, ct_e4m3, RowMajor, ct_e4m3, ColMajor, void, ct_bf16>;
template <class EA>
using Dinp8 = GroupedGemm<Cfg8Coop, EA, RowMajor, ct_e4m3, ColMajor, void, ct_bf16>;
template <class EA>
using Dw8 = GroupedGemm<Cfg8Coop, EA, RowMajor, ct_e4m3, ColMajor, float, float>;

/* One block: the scans of the counts (row_off (G+1): each group's first row, then the total; and
 * each group's first column in the grouped transposes), alpha, and each group's shape, pointers
 * and strides for the product (the header's table). */
template <class GG>
static __global__ void __launch_bounds__(GG_FILL_THREADS)
    fill8_kernel(Arrays<GG> A, int32_t *row_off /* (G+1) */, const int32_t *counts /* (G) */, int G,
                 mg_gg8_args p) {
    __shared__ int32_t warp_sums[GG_FILL_THREADS / 32];
    if (threadIdx.x == 0) *A.alpha = p.sinv_a[0] * p.sinv_b[0];
    int32_t rows = 0, cols = 0; /* of the chunks before this one */
    for (int base = 0; base < G; base += blockDim.x) {
        int g = base + threadIdx.x;
        int32_t n = g < G ? max(counts[g], 0) : 0, r0, c0;
        block_group_scan(n, warp_sums, &rows, &cols, &r0, &c0);
        if (g < G) {
            row_off[g] = r0;
            const int j = g % p.n_w;
            if (p.op != 2) { /* forward, dinp: (n rows, width ldd, depth lda) */
                const int lda = p.op == 0 ? p.IC : p.OC, ldd = p.op == 0 ? p.OC : p.IC;
                const uint8_t *wj = p.b + (size_t)j * p.wstride;
                check_aligned16(wj);
                A.shape[g] = cute::make_shape(n, ldd, lda);
                A.a[g] = reinterpret_cast<const typename GG::ElemA *>(p.a + (size_t)r0 * lda);
                A.b[g] = reinterpret_cast<const typename GG::ElemB *>(wj);
                A.c[g] = nullptr;
                A.d[g] = reinterpret_cast<typename GG::ElemC *>(p.y) + (size_t)r0 * ldd;
                A.sa[g] = ld_stride<typename GG::StrideA>(lda);
                A.sb[g] = ld_stride<typename GG::StrideB>(lda);
                A.sc[g] = ld_stride<typename GG::StrideC>(ldd);
                A.sd[g] = ld_stride<typename GG::StrideD>(ldd);
            } else { /* dw: the group's columns; no rows, no tiles */
                float *dwj = p.dw[j];
                check_aligned16(dwj);
                A.shape[g] = n > 0 ? cute::make_shape(p.OC, p.IC, n) : cute::make_shape(0, 0, 0);
                A.a[g] = reinterpret_cast<const typename GG::ElemA *>(p.a + c0);
                A.b[g] = reinterpret_cast<const typename GG::ElemB *>(p.b + c0);
                A.c[g] = reinterpret_cast<const typename GG::ElemC *>(dwj);
                A.d[g] = reinterpret_cast<typename GG::ElemC *>(dwj);
                A.sa[g] = ld_stride<typename GG::StrideA>(p.ld);
                A.sb[g] = ld_stride<typename GG::StrideB>(p.ld);
                A.sc[g] = ld_stride<typename GG::StrideC>(p.IC);
                A.sd[g] = ld_stride<typename GG::StrideD>(p.IC);
            }
        }
    }
    if (threadIdx.x == 0) row_off[G] = rows;
}

template <class GG>
static mg_status run8(mg_backend *be, const mg_gg8_args *p, int32_t *row_off, const int32_t *counts,
                      void *scratch, size_t scratch_bytes) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    const int G = p->n_src * p->n_w;
    Arrays<GG> A;
    void *ws = NULL;
    size_t ws_bytes = 0;
    MG_CHECK(carve_scratch(&A, scratch, scratch_bytes, G, &ws, &ws_bytes));
    fill8_kernel<GG><<<1, GG_FILL_THREADS, 0, ctx->stream>>>(A, row_off, counts, G, *p);
    MG_CUDA_CHECK_LAUNCH();
    if (p->op != 2) return launch<GG>(ctx, A, G, 0.0f, true, ws, ws_bytes);
    return launch_per_source<GG>(ctx, A, p->n_src, p->n_w, p->accumulate, true, ws, ws_bytes);
}

} // namespace mg_gg

using namespace mg_gg;

mg_status mg_gg_fp8_init(int device) {
    MG_CHECK(kernel_init<Fwd8<Cfg8PingFast>>(device));
    MG_CHECK(kernel_init<Fwd8<Cfg8CoopFast>>(device));
    MG_CHECK(kernel_init<Dinp8<ct_e4m3>>(device));
    MG_CHECK(kernel_init<Dinp8<ct_e5m2>>(device));
    MG_CHECK(kernel_init<Dw8<ct_e4m3>>(device));
    return kernel_init<Dw8<ct_e5m2>>(device);
}

extern "C" mg_status mg_cuda_grouped_cutlass_fp8_run(mg_backend *be, const mg_gg8_args *p,
                                                     int32_t *row_off, const int32_t *counts,
                                                     void *scratch, size_t scratch_bytes) {
    if (!mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(be)->device))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "fp8 grouped GEMM (CUTLASS): not initialised on device %d",
                       mg_cuda_ctx_of(be)->device);
    const bool e5 = p->format_a == MG_FP8_E5M2;
#define GG8_RUN(GG) run8<GG>(be, p, row_off, counts, scratch, scratch_bytes)
    switch (p->op) {
    case 0:
        return p->IC <= GG8_PING_MAX_K ? GG8_RUN(Fwd8<Cfg8PingFast>) : GG8_RUN(Fwd8<Cfg8CoopFast>);
    case 1:
        return e5 ? GG8_RUN(Dinp8<ct_e5m2>) : GG8_RUN(Dinp8<ct_e4m3>);
    case 2:
        return e5 ? GG8_RUN(Dw8<ct_e5m2>) : GG8_RUN(Dw8<ct_e4m3>);
    default:
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 grouped GEMM (CUTLASS): unknown product %d", p->op);
    }
#undef GG8_RUN
}

#else /* no CUTLASS in this build */

extern "C" mg_status mg_cuda_grouped_cutlass_fp8_run(mg_backend *be, const mg_gg8_args *p,
                                                     int32_t *row_off, const int32_t *counts,
                                                     void *scratch, size_t scratch_bytes) {
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "the experts' fp8 products need CUTLASS's grouped GEMM: this build has none "
                   "(build with CUTLASS_INC)");
}

#endif
