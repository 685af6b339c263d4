/* The CUDA backend's op entries for one compute dtype. Built twice like the op files (Makefile):
 * as is, mg_cuda_ops_init fills the table with the bf16 launchers, and with -DMG_CUDA_F16,
 * mg_cuda_f16_ops_init with the fp16 ones (cuda_f16_names.h renames every launcher named here).
 * cuda_backend.c calls the one of its dtype after the memory and stream entries are set and the
 * context (stream, cuBLASLt handle, workspace) exists.
 * Exports: mg_cuda_ops_init (cuda_internal.h). */
#include "backend/cuda/cuda_internal.h"
#include "core/env.h"
#include "core/log.h"

#include <string.h>

/* MG_ATTENTION: "cudnn" (default in builds with cuDNN: cuDNN fused attention, deterministic
 * backward; 6x faster than ours on H200, bench/NOTES.md 2026-11-21), "ours" (attention.cu, the
 * default without cuDNN) or "cudnn-nondet" (cuDNN's fp32-atomic dQ). The cuDNN entries fall back
 * to ours per shape when cuDNN has no engine, so choosing cuDNN never makes a model unrunnable. */
static mg_status attention_select(mg_backend *be) {
    const char *impl =
        mg_env_str("MG_ATTENTION", mg_cuda_attention_cudnn_available() ? "cudnn" : "ours");
    int det = strcmp(impl, "cudnn") == 0;
    if (strcmp(impl, "ours") == 0) return MG_OK;
    if (!det && strcmp(impl, "cudnn-nondet") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_ATTENTION=%s: expected ours, cudnn or cudnn-nondet", impl);
    if (!mg_cuda_attention_cudnn_available()) {
        mg_log_warn("MG_ATTENTION=%s: this build has no cuDNN; using our attention kernels", impl);
        return MG_OK;
    }
    MG_CHECK(mg_cuda_attention_cudnn_init(be, det));
    be->attention_saved_bytes = mg_cuda_attention_cudnn_saved_bytes;
    be->attention_forward = mg_cuda_attention_cudnn_forward;
    be->attention_backward = mg_cuda_attention_cudnn_backward;
    return MG_OK;
}

mg_status mg_cuda_ops_init(mg_backend *be) {
    be->embedding_forward = mg_cuda_embedding_forward;
    be->embedding_backward = mg_cuda_embedding_backward;
    be->layernorm_forward = mg_cuda_layernorm_forward;
    be->layernorm_backward = mg_cuda_layernorm_backward;
    be->rmsnorm_forward = mg_cuda_rmsnorm_forward;
    be->rmsnorm_backward = mg_cuda_rmsnorm_backward;
    be->linear_forward = mg_cuda_linear_forward;
    be->linear_gelu_forward = mg_cuda_linear_gelu_forward;
    be->linear_backward = mg_cuda_linear_backward;
    be->gelu_forward = mg_cuda_gelu_forward;
    be->gelu_backward = mg_cuda_gelu_backward;
    be->swiglu_forward = mg_cuda_swiglu_forward;
    be->swiglu_backward = mg_cuda_swiglu_backward;
    be->rope_forward = mg_cuda_rope_forward;
    be->rope_backward = mg_cuda_rope_backward;
    be->attention_saved_bytes = mg_cuda_attention_saved_bytes;
    be->attention_forward = mg_cuda_attention_forward;
    be->attention_backward = mg_cuda_attention_backward;
    be->cross_entropy_fused = mg_cuda_cross_entropy_fused;
    be->cross_entropy_max = mg_cuda_cross_entropy_max;
    be->cross_entropy_sums = mg_cuda_cross_entropy_sums;
    be->cross_entropy_finish = mg_cuda_cross_entropy_finish;
    be->add = mg_cuda_add;
    be->bias_residual_add = mg_cuda_bias_residual_add;
    be->dropout_add = mg_cuda_dropout_add;
    be->dropout_backward = mg_cuda_dropout_backward;
    be->sum_f32 = mg_cuda_sum_f32;
    be->sumsq_f32 = mg_cuda_sumsq_f32;
    be->count_zeros_f32 = mg_cuda_count_zeros_f32;
    be->clip_coef = mg_cuda_clip_coef;
    be->adamw = mg_cuda_adamw;
    be->router_forward = mg_cuda_router_forward;
    be->router_backward = mg_cuda_router_backward;
    be->moe_route = mg_cuda_moe_route;
    be->moe_route_backward = mg_cuda_moe_route_backward;
    be->moe_permute = mg_cuda_moe_permute;
    be->moe_regroup = mg_cuda_moe_regroup;
    be->moe_permute_backward = mg_cuda_moe_permute_backward;
    be->moe_unpermute = mg_cuda_moe_unpermute;
    be->moe_unpermute_backward = mg_cuda_moe_unpermute_backward;
    be->grouped_activation_forward = mg_cuda_grouped_activation_forward;
    be->grouped_swiglu_backward = mg_cuda_grouped_swiglu_backward;
    be->moe_expert_bias_update = mg_cuda_moe_expert_bias_update;
    be->matmul_peak_tflops = mg_cuda_matmul_peak_tflops;

    MG_CHECK(mg_cuda_attention_init()); /* also under cuDNN: a shape it lacks falls back to ours */
    /* the grouped linear: CUTLASS's Hopper kernel where it applies (bf16 only), else the portable
     * kernel (MG_GROUPED_GEMM) */
    MG_CHECK(mg_cuda_grouped_gemm_init(be));
    return attention_select(be);
}
