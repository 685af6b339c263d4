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
 * Five instantiations in all (about a minute of nvcc for this file).
 *
 * Preconditions (checked by grouped_gemm.cu before it calls here): IC and OC multiples of 8 and
 * every activation buffer 16-byte aligned, as TMA needs. The weight pointers live on the device;
 * they must be 16-byte aligned too (parameters start on 64-element boundaries, params.h), and the
 * fill kernel traps on one that is not rather than let TMA read a wrong address.
 * Exports: mg_cuda_grouped_cutlass_available, mg_cuda_grouped_cutlass_init,
 * mg_cuda_grouped_cutlass_run. */
#include "backend/cuda/cuda_common.cuh"

#ifdef MG_HAVE_CUTLASS

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#define GG_MAX_DEVICES  64
#define GG_PING_MAX_K   2048 /* forward, dinp: depth up to this takes the ping-pong kernel */
#define GG_FILL_THREADS 1024

namespace mg_gg {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>; /* (M,N,K) per group */
using Shape3 = ProblemShape::UnderlyingProblemShape;
using ct_bf16 = cutlass::bfloat16_t;
typedef __nv_bfloat16 bf16; /* built once, for the bf16 backend (h16 is bf16 here) */

/* The two tile configurations (tile (M,N,K), cluster, kernel and epilogue schedules); the
 * header says which product takes which. */
struct CfgCoop { /* two consumer warpgroups on one 128x256 tile */
    using TileShape = Shape<_128, _256, _64>;
    using ClusterShape = Shape<_2, _1, _1>;
    using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
    using Epi = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct CfgPing { /* two consumer warpgroups on alternate 128x128 tiles */
    using TileShape = Shape<_128, _128, _64>;
    using ClusterShape = Shape<_2, _1, _1>;
    using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
    using Epi = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

template <class Cfg, class LayoutA, class LayoutB, class ElementC, class ElementD>
struct GroupedGemm {
    using TileShape = typename Cfg::TileShape;
    using ClusterShape = typename Cfg::ClusterShape;
    static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
    static constexpr int kAlignC =
        cute::is_void_v<ElementC> ? kAlignD : 128 / cutlass::sizeof_bits<ElementC>::value;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC,
        cutlass::layout::RowMajor *, kAlignC, ElementD, cutlass::layout::RowMajor *, kAlignD,
        typename Cfg::Epi,
        cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC,
                                                     float>>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ct_bf16, LayoutA *, 8, ct_bf16,
        LayoutB *, 8, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epilogue::SharedStorage))>,
        typename Cfg::Kernel>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Kernel::InternalStrideA;
    using StrideB = typename Kernel::InternalStrideB;
    using StrideC = typename Kernel::InternalStrideC;
    using StrideD = typename Kernel::InternalStrideD;
    using CType = ElementC; /* void: no source operand */
    using ElemC = cute::conditional_t<cute::is_void_v<ElementC>, ElementD, ElementC>;
};

/* CUTLASS's B is (N,K): "ColumnMajor" is K-major, "RowMajor" N-major. */
template <class Cfg>
using GemmFwd =
    GroupedGemm<Cfg, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, void, ct_bf16>;
template <class Cfg>
using GemmDinp =
    GroupedGemm<Cfg, cutlass::layout::RowMajor, cutlass::layout::RowMajor, void, ct_bf16>;
using GemmDw =
    GroupedGemm<CfgPing, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, float, float>;

/* The one run-time entry of a stride: the leading dimension, in the mode that is not unit. */
template <class S> __device__ __forceinline__ S ld_stride(int64_t ld) {
    S s{};
    if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>)
        cute::get<1>(s) = ld;
    else
        cute::get<0>(s) = ld;
    return s;
}

/* The per-group arrays in the workspace, one slot per group. */
template <class GG> struct Arrays {
    Shape3 *shape;
    const ct_bf16 **a, **b;
    const typename GG::ElemC **c;
    typename GG::ElemC **d;
    typename GG::StrideA *sa;
    typename GG::StrideB *sb;
    typename GG::StrideC *sc;
    typename GG::StrideD *sd;
};

static size_t align256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

/* Carves the arrays for G groups from ws; returns the bytes used (256-byte aligned). */
template <class GG> static size_t carve(Arrays<GG> *A, char *ws, int G) {
    size_t off = 0;
#define GG_CARVE(field)                                                                            \
    A->field = reinterpret_cast<decltype(A->field)>(ws ? ws + off : nullptr);                      \
    off += align256((size_t)G * sizeof(*A->field));
    GG_CARVE(shape)
    GG_CARVE(a)
    GG_CARVE(b)
    GG_CARVE(c)
    GG_CARVE(d)
    GG_CARVE(sa)
    GG_CARVE(sb)
    GG_CARVE(sc)
    GG_CARVE(sd)
#undef GG_CARVE
    return off;
}

static __device__ __forceinline__ void check_aligned16(const void *p) {
    if ((uintptr_t)p & 15u) __trap(); /* a weight not on a 16-byte boundary: see the header */
}

/* One block: exclusive scan of the counts (row_off (G+1): each group's first row, then the total)
 * and each group's shape, pointers and strides for `op` (0 forward, 1 dinp, 2 dw; table above).
 * x: inp (forward) or dout (dinp, dw); xb: inp (dw); y: out or dinp; wp: weights, or dW (dw). */
template <class GG>
static __global__ void __launch_bounds__(GG_FILL_THREADS)
    fill_kernel(Arrays<GG> A, int32_t *row_off /* (G+1) */, const int32_t *counts /* (G) */, int G,
                int n_w, int IC, int OC, int op, const bf16 *x, const bf16 *xb, void *y,
                void *const *wp) {
    __shared__ int32_t warp_sums[GG_FILL_THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int32_t carry = 0; /* rows of the chunks before this one */
    for (int base = 0; base < G; base += blockDim.x) {
        int g = base + threadIdx.x;
        int32_t n = g < G ? max(counts[g], 0) : 0, incl = n;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) warp_sums[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            int32_t s = lane < nwarps ? warp_sums[lane] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int32_t v = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += v;
            }
            if (lane < nwarps) warp_sums[lane] = s; /* inclusive over warps */
        }
        __syncthreads();
        int32_t r0 = carry + (warp ? warp_sums[warp - 1] : 0) + incl - n;
        int32_t chunk_total = warp_sums[nwarps - 1];
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
        __syncthreads(); /* warp_sums is rewritten by the next chunk */
    }
    if (threadIdx.x == 0) row_off[G] = carry;
}

/* Per device: 1 once init found an sm 9.0 device (the sm_90a code runs there only). */
static int g_ready[GG_MAX_DEVICES];

/* Per kernel and device: the maximum of co-resident clusters (the persistent grid's size), 0
 * when the occupancy query failed (CUTLASS then sizes the grid from the SM count). */
template <class GG> static int *clusters_of(int device) {
    static int clusters[GG_MAX_DEVICES];
    return &clusters[device];
}

/* Once per kernel and device, outside any capture: the shared-memory limit (initialize() would
 * set it on every call) and the occupancy query. */
template <class GG> static mg_status kernel_init(int device) {
    int smem = (int)GG::Kernel::SharedStorageSize;
    MG_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<typename GG::Kernel>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    *clusters_of<GG>(device) =
        cutlass::KernelHardwareInfo::query_device_max_active_clusters<typename GG::Kernel>();
    (void)cudaGetLastError();
    return MG_OK;
}

/* Enqueues one grouped GEMM over the G groups whose arrays start at A (offset by the caller). */
template <class GG>
static mg_status launch(mg_cuda_ctx *ctx, const Arrays<GG> &A, int G, float beta, int clusters,
                        void *ws, size_t ws_bytes) {
    typename GG::Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {G, A.shape, nullptr}; /* shapes on the device only */
    args.mainloop = {A.a, A.sa, A.b, A.sb};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = beta;
    if constexpr (cute::is_void_v<typename GG::CType>)
        args.epilogue.ptr_C = nullptr;
    else
        args.epilogue.ptr_C = A.c;
    args.epilogue.dC = A.sc;
    args.epilogue.ptr_D = A.d;
    args.epilogue.dD = A.sd;
    args.hw_info.device_id = ctx->device;
    args.hw_info.sm_count = ctx->num_sms;
    args.hw_info.max_active_clusters = clusters;
    size_t need = GG::Gemm::get_workspace_size(args);
    if (need > ws_bytes)
        return MG_FAIL(MG_ERR_NOMEM,
                       "grouped GEMM (CUTLASS) needs %zu bytes of CUDA workspace after its group "
                       "arrays, %zu are left (raise MG_CUDA_WORKSPACE_MB)",
                       need, ws_bytes);
    if (GG::Gemm::can_implement(args) != cutlass::Status::kSuccess)
        return MG_FAIL(MG_ERR_INTERNAL, "grouped GEMM (CUTLASS): can_implement refused %d groups",
                       G);
    cutlass::Status st = GG::Kernel::initialize_workspace(args, ws, ctx->stream);
    if (st != cutlass::Status::kSuccess)
        return MG_FAIL(MG_ERR_INTERNAL, "grouped GEMM (CUTLASS): workspace: %s",
                       cutlassGetStatusString(st));
    typename GG::Kernel::Params params = GG::Kernel::to_underlying_arguments(args, ws);
    st = GG::Gemm::run(params, ctx->stream);
    if (st != cutlass::Status::kSuccess)
        return MG_FAIL(MG_ERR_INTERNAL, "grouped GEMM (CUTLASS): launch: %s (%s)",
                       cutlassGetStatusString(st), cudaGetErrorString(cudaGetLastError()));
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

template <class GG>
static mg_status run_op(mg_backend *be, int op, void *y, const void *x, const void *xb,
                        void *const *wp, int32_t *row_off, const int32_t *counts, int n_src,
                        int n_w, int IC, int OC, bool accumulate, void *scratch,
                        size_t scratch_bytes) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    const int G = n_src * n_w;
    Arrays<GG> A;
    size_t used = carve(&A, NULL, G);
    if (used > scratch_bytes)
        return MG_FAIL(MG_ERR_NOMEM,
                       "grouped GEMM (CUTLASS): %d groups need %zu bytes of CUDA workspace, %zu "
                       "are left (raise MG_CUDA_WORKSPACE_MB)",
                       G, used, scratch_bytes);
    carve(&A, (char *)scratch, G);
    fill_kernel<GG><<<1, GG_FILL_THREADS, 0, ctx->stream>>>(
        A, row_off, counts, G, n_w, IC, OC, op, (const bf16 *)x, (const bf16 *)xb, y, wp);
    MG_CUDA_CHECK_LAUNCH();
    void *ws = (char *)scratch + used;
    size_t ws_bytes = scratch_bytes - used;
    int clusters = *clusters_of<GG>(ctx->device);
    if (op != 2) return launch<GG>(ctx, A, G, 0.0f, clusters, ws, ws_bytes);
    /* dw: one launch per source, so no two groups of a launch share dW_j; without accumulate
     * the first writes over dW (beta 0: C is not read) */
    for (int s = 0; s < n_src; s++) {
        Arrays<GG> As = A;
        size_t o = (size_t)s * n_w;
        As.shape += o, As.a += o, As.b += o, As.c += o, As.d += o;
        As.sa += o, As.sb += o, As.sc += o, As.sd += o;
        MG_CHECK(
            launch<GG>(ctx, As, n_w, s == 0 && !accumulate ? 0.0f : 1.0f, clusters, ws, ws_bytes));
    }
    return MG_OK;
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
