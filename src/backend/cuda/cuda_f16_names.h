/* Internal to src/backend/cuda: the fp16 objects' names. Every op file (*.cu but CUTLASS's) and
 * cuda_table.c are compiled twice (Makefile): as is, with bf16 as the compute type and their
 * launchers named mg_cuda_<op>, and with -DMG_CUDA_F16, fp16 compute, where this header renames
 * each launcher mg_cuda_f16_<op>, so the two objects link side by side and code built once (the
 * backend's creation, the tests) picks one set by the backend's compute dtype (MG_CUDA_BY_DTYPE,
 * cuda_internal.h). Included by cuda_ops.h and convert.h, before their declarations.
 * Not renamed: what is built once (cuda_backend.c and staging.c: memory, streams, errors) and
 * CUTLASS's grouped GEMM (grouped_gemm_cutlass.cu, bf16 only: the fp16 grouped linear always
 * takes the portable kernel). Every extern "C" function an op file defines must be listed here:
 * one that is not is defined by both objects, and the link fails ("multiple definition").
 * Exports: nothing without MG_CUDA_F16. */
#ifndef MG_BACKEND_CUDA_F16_NAMES_H
#define MG_BACKEND_CUDA_F16_NAMES_H
#ifdef MG_CUDA_F16

#define mg_cuda_adamw                            mg_cuda_f16_adamw
#define mg_cuda_add                              mg_cuda_f16_add
#define mg_cuda_attention_backward               mg_cuda_f16_attention_backward
#define mg_cuda_attention_cudnn_available        mg_cuda_f16_attention_cudnn_available
#define mg_cuda_attention_cudnn_backward         mg_cuda_f16_attention_cudnn_backward
#define mg_cuda_attention_cudnn_destroy          mg_cuda_f16_attention_cudnn_destroy
#define mg_cuda_attention_cudnn_forward          mg_cuda_f16_attention_cudnn_forward
#define mg_cuda_attention_cudnn_init             mg_cuda_f16_attention_cudnn_init
#define mg_cuda_attention_cudnn_saved_bytes      mg_cuda_f16_attention_cudnn_saved_bytes
#define mg_cuda_attention_cudnn_supported        mg_cuda_f16_attention_cudnn_supported
#define mg_cuda_attention_forward                mg_cuda_f16_attention_forward
#define mg_cuda_attention_init                   mg_cuda_f16_attention_init
#define mg_cuda_attention_saved_bytes            mg_cuda_f16_attention_saved_bytes
#define mg_cuda_bias_residual_add                mg_cuda_f16_bias_residual_add
#define mg_cuda_clip_coef                        mg_cuda_f16_clip_coef
#define mg_cuda_count_zeros_f32                  mg_cuda_f16_count_zeros_f32
#define mg_cuda_cross_entropy_finish             mg_cuda_f16_cross_entropy_finish
#define mg_cuda_cross_entropy_fused              mg_cuda_f16_cross_entropy_fused
#define mg_cuda_cross_entropy_max                mg_cuda_f16_cross_entropy_max
#define mg_cuda_cross_entropy_sums               mg_cuda_f16_cross_entropy_sums
#define mg_cuda_dropout_add                      mg_cuda_f16_dropout_add
#define mg_cuda_dropout_backward                 mg_cuda_f16_dropout_backward
#define mg_cuda_embedding_backward               mg_cuda_f16_embedding_backward
#define mg_cuda_embedding_forward                mg_cuda_f16_embedding_forward
#define mg_cuda_f32_to_h16                       mg_cuda_f16_f32_to_h16
#define mg_cuda_gelu_backward                    mg_cuda_f16_gelu_backward
#define mg_cuda_gelu_forward                     mg_cuda_f16_gelu_forward
#define mg_cuda_grouped_activation_forward       mg_cuda_f16_grouped_activation_forward
#define mg_cuda_grouped_gemm_init                mg_cuda_f16_grouped_gemm_init
#define mg_cuda_grouped_linear_backward          mg_cuda_f16_grouped_linear_backward
#define mg_cuda_grouped_linear_backward_portable mg_cuda_f16_grouped_linear_backward_portable
#define mg_cuda_grouped_linear_forward           mg_cuda_f16_grouped_linear_forward
#define mg_cuda_grouped_linear_forward_portable  mg_cuda_f16_grouped_linear_forward_portable
#define mg_cuda_grouped_swiglu_backward          mg_cuda_f16_grouped_swiglu_backward
#define mg_cuda_h16_to_f32                       mg_cuda_f16_h16_to_f32
#define mg_cuda_layernorm_backward               mg_cuda_f16_layernorm_backward
#define mg_cuda_layernorm_forward                mg_cuda_f16_layernorm_forward
#define mg_cuda_linear_backward                  mg_cuda_f16_linear_backward
#define mg_cuda_linear_forward                   mg_cuda_f16_linear_forward
#define mg_cuda_linear_gelu_forward              mg_cuda_f16_linear_gelu_forward
#define mg_cuda_matmul_peak_tflops               mg_cuda_f16_matmul_peak_tflops
#define mg_cuda_moe_expert_bias_update           mg_cuda_f16_moe_expert_bias_update
#define mg_cuda_moe_permute                      mg_cuda_f16_moe_permute
#define mg_cuda_moe_permute_backward             mg_cuda_f16_moe_permute_backward
#define mg_cuda_moe_regroup                      mg_cuda_f16_moe_regroup
#define mg_cuda_moe_route                        mg_cuda_f16_moe_route
#define mg_cuda_moe_route_backward               mg_cuda_f16_moe_route_backward
#define mg_cuda_moe_unpermute                    mg_cuda_f16_moe_unpermute
#define mg_cuda_moe_unpermute_backward           mg_cuda_f16_moe_unpermute_backward
#define mg_cuda_ops_init                         mg_cuda_f16_ops_init
#define mg_cuda_rmsnorm_backward                 mg_cuda_f16_rmsnorm_backward
#define mg_cuda_rmsnorm_forward                  mg_cuda_f16_rmsnorm_forward
#define mg_cuda_rope_backward                    mg_cuda_f16_rope_backward
#define mg_cuda_rope_forward                     mg_cuda_f16_rope_forward
#define mg_cuda_router_backward                  mg_cuda_f16_router_backward
#define mg_cuda_router_forward                   mg_cuda_f16_router_forward
#define mg_cuda_sum_f32                          mg_cuda_f16_sum_f32
#define mg_cuda_sumsq_f32                        mg_cuda_f16_sumsq_f32
#define mg_cuda_swiglu_backward                  mg_cuda_f16_swiglu_backward
#define mg_cuda_swiglu_forward                   mg_cuda_f16_swiglu_forward

#endif
#endif
