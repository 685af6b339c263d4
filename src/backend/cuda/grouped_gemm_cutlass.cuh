/* What the experts' CUTLASS grouped GEMMs share (grouped_gemm_cutlass.cu: bf16 operands;
 * grouped_gemm_cutlass_fp8.cu: fp8 operands): the kernel type of a tile configuration and operand
 * types (CUTLASS's Hopper ptr-array grouped GEMM), the per-group arrays in the workspace, the scan
 * of the group sizes on the device, the per-kernel setup and the launch. Included by those two
 * files alone, which are built only with -DMG_HAVE_CUTLASS.
 * In CUTLASS's terms a group's product is D (M,N) = alpha A (M,K) . B (N,K)^T + beta C. */
#ifndef MG_GROUPED_GEMM_CUTLASS_CUH
#define MG_GROUPED_GEMM_CUTLASS_CUH

#include "backend/cuda/block_scan.cuh"
#include "backend/cuda/cuda_common.cuh"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#define GG_MAX_DEVICES  64
#define GG_FILL_THREADS 1024

namespace mg_gg {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>; /* (M,N,K) per group */
using Shape3 = ProblemShape::UnderlyingProblemShape;
using ct_bf16 = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
using ColMajor = cutlass::layout::ColumnMajor; /* as CUTLASS's B (N,K): K-major */

/* A tile configuration: tile (M,N,K), clusters of 2 along M (B's tile multicast to both CTAs),
 * kernel and epilogue schedules. */
template <class Tile, class KernelSchedule, class EpiSchedule> struct Cfg {
    using TileShape = Tile;
    using ClusterShape = Shape<_2, _1, _1>;
    using Kernel = KernelSchedule;
    using Epi = EpiSchedule;
};

template <class C, class EA, class LayoutA, class EB, class LayoutB, class ElementC, class ElementD>
struct GroupedGemm {
    using TileShape = typename C::TileShape;
    using ClusterShape = typename C::ClusterShape;
    using ElemA = EA;
    using ElemB = EB;
    static constexpr int kAlignA = 128 / cutlass::sizeof_bits<EA>::value;
    static constexpr int kAlignB = 128 / cutlass::sizeof_bits<EB>::value;
    static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
    static constexpr int kAlignC =
        cute::is_void_v<ElementC> ? kAlignD : 128 / cutlass::sizeof_bits<ElementC>::value;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, RowMajor *,
        kAlignC, ElementD, RowMajor *, kAlignD, typename C::Epi,
        cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC,
                                                     float>>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, EA, LayoutA *, kAlignA, EB, LayoutB *,
        kAlignB, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epilogue::SharedStorage))>,
        typename C::Kernel>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Kernel::InternalStrideA;
    using StrideB = typename Kernel::InternalStrideB;
    using StrideC = typename Kernel::InternalStrideC;
    using StrideD = typename Kernel::InternalStrideD;
    using CType = ElementC; /* void: no source operand */
    using ElemC = cute::conditional_t<cute::is_void_v<ElementC>, ElementD, ElementC>;
};

/* The one run-time entry of a stride: the leading dimension, in the mode that is not unit. */
template <class S> __device__ __forceinline__ S ld_stride(int64_t ld) {
    S s{};
    if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>)
        cute::get<1>(s) = ld;
    else
        cute::get<0>(s) = ld;
    return s;
}

/* The per-group arrays in the workspace, one slot per group, and one float: alpha, where the
 * products take it from the device (fp8: the operands' scale inverses multiplied). */
template <class GG> struct Arrays {
    Shape3 *shape;
    const typename GG::ElemA **a;
    const typename GG::ElemB **b;
    const typename GG::ElemC **c;
    typename GG::ElemC **d;
    typename GG::StrideA *sa;
    typename GG::StrideB *sb;
    typename GG::StrideC *sc;
    typename GG::StrideD *sd;
    float *alpha;
};

static inline size_t align256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

/* Carves the arrays for G groups from ws (NULL: only counts); returns the bytes used (256-byte
 * aligned). */
template <class GG> static size_t carve(Arrays<GG> *A, char *ws, int G) {
    size_t off = 0;
#define GG_CARVE(field, n)                                                                         \
    A->field = reinterpret_cast<decltype(A->field)>(ws ? ws + off : nullptr);                      \
    off += align256((size_t)(n) * sizeof(*A->field));
    GG_CARVE(shape, G)
    GG_CARVE(a, G)
    GG_CARVE(b, G)
    GG_CARVE(c, G)
    GG_CARVE(d, G)
    GG_CARVE(sa, G)
    GG_CARVE(sb, G)
    GG_CARVE(sc, G)
    GG_CARVE(sd, G)
    GG_CARVE(alpha, 1)
#undef GG_CARVE
    return off;
}

static __device__ __forceinline__ void check_aligned16(const void *p) {
    if ((uintptr_t)p & 15u) __trap(); /* a weight not on a 16-byte boundary: see the callers */
}

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

/* Enqueues one grouped GEMM over the G groups whose arrays start at A (offset by the caller);
 * alpha from the device (A.alpha) when device_alpha, else 1. */
template <class GG>
static mg_status launch(mg_cuda_ctx *ctx, const Arrays<GG> &A, int G, float beta, bool device_alpha,
                        void *ws, size_t ws_bytes) {
    typename GG::Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {G, A.shape, nullptr}; /* shapes on the device only */
    args.mainloop = {A.a, A.sa, A.b, A.sb};
    args.epilogue.thread.alpha = 1.0f;
    if (device_alpha) args.epilogue.thread.alpha_ptr = A.alpha;
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
    args.hw_info.max_active_clusters = *clusters_of<GG>(ctx->device);
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

/* Carves G groups' arrays from scratch: MG_ERR_NOMEM naming the sizes when they do not fit;
 * *rest, *rest_bytes: what is left for CUTLASS's own workspace. */
template <class GG>
static mg_status carve_scratch(Arrays<GG> *A, void *scratch, size_t scratch_bytes, int G,
                               void **rest, size_t *rest_bytes) {
    size_t used = carve(A, NULL, G);
    if (used > scratch_bytes)
        return MG_FAIL(MG_ERR_NOMEM,
                       "grouped GEMM (CUTLASS): %d groups need %zu bytes of CUDA workspace, %zu "
                       "are left (raise MG_CUDA_WORKSPACE_MB)",
                       G, used, scratch_bytes);
    carve(A, (char *)scratch, G);
    *rest = (char *)scratch + used;
    *rest_bytes = scratch_bytes - used;
    return MG_OK;
}

/* dW's product: one launch per source of n_w groups each (groups that share a weight would race
 * on dW_j, which both read as C and write as D); without accumulate the first source's writes
 * over dW (beta 0: C is not read). */
template <class GG>
static mg_status launch_per_source(mg_cuda_ctx *ctx, const Arrays<GG> &A, int n_src, int n_w,
                                   bool accumulate, bool device_alpha, void *ws, size_t ws_bytes) {
    for (int s = 0; s < n_src; s++) {
        Arrays<GG> As = A;
        size_t o = (size_t)s * n_w;
        As.shape += o, As.a += o, As.b += o, As.c += o, As.d += o;
        As.sa += o, As.sb += o, As.sc += o, As.sd += o;
        MG_CHECK(launch<GG>(ctx, As, n_w, s == 0 && !accumulate ? 0.0f : 1.0f, device_alpha, ws,
                            ws_bytes));
    }
    return MG_OK;
}

} // namespace mg_gg

/* grouped_gemm_cutlass_fp8.cu's kernels, set up by mg_cuda_grouped_cutlass_init. */
mg_status mg_gg_fp8_init(int device);

#endif
