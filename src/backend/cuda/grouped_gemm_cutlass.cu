/* The grouped linear's products through CUTLASS's Hopper ptr-array grouped GEMM (the performance
 * path of grouped_gemm.cu; backend_ops.h, "mixture of experts", has the contract). Built only with
 * -DMG_HAVE_CUTLASS (the Makefile passes it when CUTLASS's headers are in CUTLASS_INC); without
 * it the entries below say "not built" and grouped_gemm.cu uses its portable kernel.
 *
 * The group sizes never reach the host. One small kernel (fill_kernel, one block) scans the
 * counts on the device and writes, per group, the problem shape (M, N, K), the operand pointers
 * and their strides into the backend's workspace; the CUTLASS kernel then reads them there
 * (GroupProblemShape with no host copy of the shapes: the persistent tile scheduler walks the
 * groups on the device, and the TMA descriptors are rewritten on the device per group). So a
 * product enqueues the fill kernel and one grouped launch (dw: one per source), and neither
 * allocates nor waits for the device.
 *
 * The three products, in CUTLASS's terms D (M,N) = A (M,K) . B (N,K)^T, for group g of rows
 * [r0, r0 + n) and weight j = g % n_w (all buffers row-major as backend_ops.h stores them):
 *   forward  out (n,OC)    = inp (n,IC) . W_j^T      M=n  N=OC K=IC  A K-major, B K-major
 *   dinp     dinp (n,IC)   = dout (n,OC) . W_j       M=n  N=IC K=OC  A K-major, B N-major
 *   dw       dW_j (OC,IC) += dout^T (OC,n) . inp     M=OC N=IC K=n   A M-major, B N-major,
 *                                                                    C = D = dW_j fp32, beta 1
 *                                                                    (0 for the first source
 *                                                                    when not accumulating)
 * A dw group with no rows gets the shape (0, 0, 0): no tiles at all (with K = 0 the mainloop would
 * leave its accumulators unset). Groups that share a weight would race on dW_j (both read C and
 * write D), so the dw product is one grouped launch per source: n_w groups each, distinct dW_j.
 *
 * Kernel choice, measured on H200 (bench/grouped_gemm_bench.c, 8 experts x 2048 rows, five tile
 * configurations tried, 2026-11-26): two configurations, both with clusters of 2 along M
 * (the B tile multicast to both CTAs):
 *  - cooperative 128x256x64 (two consumer warpgroups on one tile) for deep products: forward and
 *    dinp with K > GG_PING_MAX_K (K 2816: 0.92 of dense cuBLASLt against 0.86 ping-pong);
 *  - ping-pong 128x128x64 (the two warpgroups on alternate tiles, one's epilogue under the
 *    other's mainloop) for shallow ones, K <= GG_PING_MAX_K (K 1024: 0.95 against 0.91), and for
 *    dw, whose fp32 C read and D write per tile the overlap hides best (0.83 against 0.75).
 * Five instantiations in all (about a minute of nvcc for this file). The fp8 products are
 * grouped_gemm_cutlass_fp8.cu's; grouped_gemm_cutlass.cuh has what both files share.
 *
 * Preconditions (checked by grouped_gemm.cu before it calls here): IC and OC multiples of 8 and
 * every activation buffer 16-byte aligned, as TMA needs. The weight pointers live on the device;
 * they must be 16-byte aligned too (parameters start on 64-element boundaries, params.h), and the
 * fill kernel traps on one that is not rather than let TMA read a wrong address.
 * Exports: mg_cuda_grouped_cutlass_available, mg_cuda_grouped_cutlass_init,
 * mg_cuda_grouped_cutlass_run. */
#include "backend/cuda/cuda_common.cuh"

#ifdef MG_HAVE_CUTLASS

#include "backend/cuda/grouped_gemm_cutlass.cuh"

#define GG_PING_MAX_K 2048 /* forward, dinp: depth up to this takes the ping-pong kernel */

namespace mg_gg {

typedef __nv_bfloat16 bf16; /* built once, for the bf16 backend (h16 is bf16 here) */

/* The two tile configurations; the header says which product takes which. */
using CfgCoop =
    Cfg<Shape<_128, _256, _64>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
        cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
using CfgPing = Cfg<Shape<_128, _128, _64>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                    cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;

/* CUTLASS's B is (N,K): "ColumnMajor" is K-major, "RowMajor" N-major. */
template <class C>
using GemmFwd = GroupedGemm<C, ct_bf16, RowMajor, ct_bf16, ColMajor, void, ct_bf16>;
template <class C>
using GemmDinp = GroupedGemm<C, ct_bf16, RowMajor, ct_bf16, RowMajor, void, ct_bf16>;
using GemmDw = GroupedGemm<CfgPing, ct_bf16, ColMajor, ct_bf16, RowMajor, float, float>;

/* One block: exclusive scan of the counts (row_off (G+1): each group's first row, then the total)
 * and each group's shape, pointers and strides for `op` (0 forward, 1 dinp, 2 dw; table above).
 * x: inp (forward) or dout (dinp, dw); xb: inp (dw); y: out or dinp; wp: weights, or dW (dw). */
template <class GG>
static __global__ void __launch_bounds__(GG_FILL_THREADS)
    fill_kernel(Arrays<GG> A, int32_t *row_off /* (G+1) */, const int32_t *counts /* (G) */, int G,
                int n_w, int IC, int OC, int op, const bf16 *x, const bf16 *xb, void *y,
                void *const *wp) {
    __shared__ int32_t warp_sums[GG_FILL_THREADS / 32];
    int32_t carry = 0; /* rows of the chunks before this one */
    for (int base = 0; base < G; base += blockDim.x) {
        int g = base + threadIdx.x, chunk_total;
        int32_t n = g < G ? max(counts[g], 0) : 0;
        int32_t r0 = carry + block_exclusive_scan(n, warp_sums, &chunk_total);
        if (g < G) {
            row_off[g] = r0;
            const void *wj = wp[g % n_w];
            check_aligned16(wj);
            /* the leading dimensions: A's (x: inp rows of IC, or dout rows of OC) and D's
             * (forward: out rows of OC; dinp and dw: rows of IC); B's is always IC */
            const int lda = op == 0 ? IC : OC, ldd = op == 0 ? OC : IC;
            A.a[g] = reinterpret_cast<const ct_bf16 *>(x + (size_t)r0 * lda);
            A.sa[g] = ld_stride<typename GG::StrideA>(lda);
            A.sb[g] = ld_stride<typename GG::StrideB>(IC);
            A.sc[g] = ld_stride<typename GG::StrideC>(ldd);
            A.sd[g] = ld_stride<typename GG::StrideD>(ldd);
            if (op != 2) { /* forward, dinp: (n rows, width ldd, depth lda) */
                A.shape[g] = cute::make_shape(n, ldd, lda);
                A.b[g] = reinterpret_cast<const ct_bf16 *>(wj);
                A.c[g] = nullptr;
                A.d[g] = reinterpret_cast<typename GG::ElemC *>((bf16 *)y + (size_t)r0 * ldd);
            } else { /* dw: no rows, no tiles */
                A.shape[g] = n > 0 ? cute::make_shape(OC, IC, n) : cute::make_shape(0, 0, 0);
                A.b[g] = reinterpret_cast<const ct_bf16 *>(xb + (size_t)r0 * IC);
                A.c[g] = reinterpret_cast<const typename GG::ElemC *>(wj);
                A.d[g] = reinterpret_cast<typename GG::ElemC *>(const_cast<void *>(wj));
            }
        }
        carry += chunk_total;
    }
    if (threadIdx.x == 0) row_off[G] = carry;
}

/* Per device: 1 once init found an sm 9.0 device (the sm_90a code runs there only). */
static int g_ready[GG_MAX_DEVICES];

template <class GG>
static mg_status run_op(mg_backend *be, int op, void *y, const void *x, const void *xb,
                        void *const *wp, int32_t *row_off, const int32_t *counts, int n_src,
                        int n_w, int IC, int OC, bool accumulate, void *scratch,
                        size_t scratch_bytes) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    const int G = n_src * n_w;
    Arrays<GG> A;
    void *ws = NULL;
    size_t ws_bytes = 0;
    MG_CHECK(carve_scratch(&A, scratch, scratch_bytes, G, &ws, &ws_bytes));
    fill_kernel<GG><<<1, GG_FILL_THREADS, 0, ctx->stream>>>(
        A, row_off, counts, G, n_w, IC, OC, op, (const bf16 *)x, (const bf16 *)xb, y, wp);
    MG_CUDA_CHECK_LAUNCH();
    if (op != 2) return launch<GG>(ctx, A, G, 0.0f, false, ws, ws_bytes);
    return launch_per_source<GG>(ctx, A, n_src, n_w, accumulate, false, ws, ws_bytes);
}

} // namespace mg_gg

using namespace mg_gg;

extern "C" int mg_cuda_grouped_cutlass_available(int device) {
    return device >= 0 && device < GG_MAX_DEVICES && g_ready[device];
}

extern "C" mg_status mg_cuda_grouped_cutlass_init(int device) {
    if (device < 0 || device >= GG_MAX_DEVICES)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "grouped GEMM (CUTLASS): device %d out of range",
                       device);
    if (g_ready[device]) return MG_OK;
    int major = 0, minor = 0;
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major != 9 || minor != 0)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "grouped GEMM (CUTLASS): built for sm_90a, device %d is sm %d.%d", device,
                       major, minor);
    MG_CHECK(kernel_init<GemmFwd<CfgCoop>>(device));
    MG_CHECK(kernel_init<GemmFwd<CfgPing>>(device));
    MG_CHECK(kernel_init<GemmDinp<CfgCoop>>(device));
    MG_CHECK(kernel_init<GemmDinp<CfgPing>>(device));
    MG_CHECK(kernel_init<GemmDw>(device));
    MG_CHECK(mg_gg_fp8_init(device));
    g_ready[device] = 1;
    return MG_OK;
}

extern "C" mg_status mg_cuda_grouped_cutlass_run(mg_backend *be, int op, void *y, const void *x,
                                                 const void *xb, void *const *wp, int32_t *row_off,
                                                 const int32_t *counts, int n_src, int n_w, int IC,
                                                 int OC, bool accumulate, void *scratch,
                                                 size_t scratch_bytes) {
    if (!mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(be)->device))
        return MG_FAIL(MG_ERR_UNSUPPORTED, "grouped GEMM (CUTLASS): not initialised on device %d",
                       mg_cuda_ctx_of(be)->device);
        /* the depth of the product picks the schedule (the header's measurements) */
#define GG_RUN(GG)                                                                                 \
    run_op<GG>(be, op, y, x, xb, wp, row_off, counts, n_src, n_w, IC, OC, accumulate, scratch,     \
               scratch_bytes)
    switch (op) {
    case 0:
        return IC <= GG_PING_MAX_K ? GG_RUN(GemmFwd<CfgPing>) : GG_RUN(GemmFwd<CfgCoop>);
    case 1:
        return OC <= GG_PING_MAX_K ? GG_RUN(GemmDinp<CfgPing>) : GG_RUN(GemmDinp<CfgCoop>);
    case 2:
        return GG_RUN(GemmDw);
    default:
        return MG_FAIL(MG_ERR_INTERNAL, "grouped GEMM (CUTLASS): unknown product %d", op);
    }
#undef GG_RUN
}

#else /* no CUTLASS in this build */

extern "C" int mg_cuda_grouped_cutlass_available(int device) {
    (void)device;
    return 0;
}

extern "C" mg_status mg_cuda_grouped_cutlass_init(int device) {
    (void)device;
    return MG_FAIL(MG_ERR_UNSUPPORTED, "grouped GEMM: this build has no CUTLASS (CUTLASS_INC)");
}

extern "C" mg_status mg_cuda_grouped_cutlass_run(mg_backend *be, int op, void *y, const void *x,
                                                 const void *xb, void *const *wp, int32_t *row_off,
                                                 const int32_t *counts, int n_src, int n_w, int IC,
                                                 int OC, bool accumulate, void *scratch,
                                                 size_t scratch_bytes) {
    return MG_FAIL(MG_ERR_UNSUPPORTED, "grouped GEMM: this build has no CUTLASS (CUTLASS_INC)");
}

#endif
