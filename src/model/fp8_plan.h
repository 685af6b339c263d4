/* The fp8 workspace's layout, shared by model/fp8_plan.c (which reserves it: mg_fp8_plan) and
 * model/fp8.c (whose casts find their copies in it). Internal to the model's fp8 files; the
 * model's interface is model/fp8.h. Offsets are per fp8 layer; linear j's part starts where the
 * parts of linears 0 .. j - 1 end, so a helper called with MG_FP8_LINEARS gives a layer's size.
 * Exports: FP8_ALIGN, SINV_STRIDE, mg_fp8_align, mg_fp8_weight_elems, mg_fp8_weight_tiles,
 * mg_fp8_dense_weight, mg_fp8_input_cols, mg_fp8_weight_copies, mg_fp8_input_copies,
 * mg_fp8_input_scales, mg_fp8_expert_input_copies. Needs: model/fp8. */
#ifndef MG_MODEL_FP8_PLAN_H
#define MG_MODEL_FP8_PLAN_H

#include "model/fp8.h"

#define FP8_ALIGN 256 /* where a transposed copy starts after the row-major one */
/* floats between two tensors' scale inverses: cuBLASLt refuses a scale pointer that is not
 * 16-byte aligned */
#define SINV_STRIDE 4

/* n rounded up to FP8_ALIGN. */
size_t mg_fp8_align(size_t n);
/* The elements of linear j's weight (the larger of a dense MLP's and an MoE layer's shared
 * experts'; a routed expert's for the experts' linears). */
size_t mg_fp8_weight_elems(const mg_model_config *c, int j);
/* Blockwise: floats of one fp8 layer's weight tile scales, and where linear j's start. */
size_t mg_fp8_weight_tiles(const mg_model_config *c, int j);
/* The parameter index of dense linear j's weight (QKV to fc2) in layer p: an MoE layer's fc1
 * and fc2 are its shared experts'. */
int mg_fp8_dense_weight(const mg_layer_params *p, int j);
/* The columns of linear j's input; 0 for the experts' linears, whose inputs are not kept. */
size_t mg_fp8_input_cols(const mg_model_config *c, int j);
/* Bytes of one fp8 layer's weight copies (bytes and transposes), and where linear j's starts. */
size_t mg_fp8_weight_copies(const mg_block_ctx *x, int j);
/* Bytes of one fp8 layer's kept input transposes (N rows each), and where linear j's starts. */
size_t mg_fp8_input_copies(const mg_model_config *c, size_t N, int j);
/* Floats of one fp8 layer's kept input transposes' block scales, and where linear j's start. */
size_t mg_fp8_input_scales(const mg_model_config *c, size_t N, int j);
/* Bytes of one fp8 layer's kept expert-input grouped transposes, and where linear j's starts. */
size_t mg_fp8_expert_input_copies(const mg_block_ctx *x, int j);

#endif
