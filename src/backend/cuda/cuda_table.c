/* The CUDA backend's table: every entry of backend_ops.h set to its launcher, the compute ops to
 * those of the backend's compute dtype (mg_cuda_<name> for bf16, mg_cuda_f16_<name> for fp16,
 * cuda_ops.h), then the one-time set-up of the ops, which may replace entries by alternatives
 * (cuDNN's attention, the portable grouped GEMM). Built once; serves both dtypes.
 * Exports: mg_cuda_table_fill, mg_cuda_ops_init (cuda_internal.h). */
#include "backend/cuda/cuda_internal.h"
#include "core/env.h"
#include "core/log.h"

#include <string.h>

/* MG_ATTENTION: "cudnn" (default in builds with cuDNN: cuDNN fused attention, deterministic
 * backward; 6x faster than ours on H200, bench/NOTES.md 2026-11-21), "ours" (attention.cu, the
 * default without cuDNN) or "cudnn-nondet" (cuDNN's fp32-atomic dQ). The cuDNN entries fall back
 * to ours per shape when cuDNN has no engine, so choosing cuDNN never makes a model unrunnable. */
static mg_status attention_select(mg_backend *be) {
    int available = MG_CUDA_BY_DTYPE(be, attention_cudnn_available)();
    const char *impl = mg_env_str("MG_ATTENTION", available ? "cudnn" : "ours");
    int det = strcmp(impl, "cudnn") == 0;
    if (strcmp(impl, "ours") == 0) return MG_OK;
    if (!det && strcmp(impl, "cudnn-nondet") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_ATTENTION=%s: expected ours, cudnn or cudnn-nondet", impl);
    if (!available) {
        mg_log_warn("MG_ATTENTION=%s: this build has no cuDNN; using our attention kernels", impl);
        return MG_OK;
    }
    MG_CHECK(MG_CUDA_BY_DTYPE(be, attention_cudnn_init)(be, det));
    be->attention_saved_bytes = MG_CUDA_BY_DTYPE(be, attention_cudnn_saved_bytes);
    be->attention_forward = MG_CUDA_BY_DTYPE(be, attention_cudnn_forward);
    be->attention_backward = MG_CUDA_BY_DTYPE(be, attention_cudnn_backward);
    return MG_OK;
}

void mg_cuda_table_fill(mg_backend *be) {
#define MG_OP(name, need, kind, ret, params, args) MG_CUDA_SET_##kind(name)
#define MG_CUDA_SET_RT(name)                 be->name = mg_cuda_##name;
#define MG_CUDA_SET_OP(name)                 be->name = MG_CUDA_BY_DTYPE(be, name);
#define MG_CUDA_SET_MOE(name)                MG_CUDA_SET_OP(name)
#include "backend/backend_ops.h"
#undef MG_CUDA_SET_RT
#undef MG_CUDA_SET_OP
#undef MG_CUDA_SET_MOE
}

mg_status mg_cuda_ops_init(mg_backend *be) {
    /* also under cuDNN: a shape it lacks falls back to ours */
    MG_CHECK(MG_CUDA_BY_DTYPE(be, attention_init)());
    /* the grouped linear: CUTLASS's Hopper kernel where it applies (bf16 only), else the portable
     * kernel (MG_GROUPED_GEMM) */
    MG_CHECK(MG_CUDA_BY_DTYPE(be, grouped_gemm_init)(be));
    MG_CHECK(mg_cuda_peer_reduce_load());
    return attention_select(be);
}
