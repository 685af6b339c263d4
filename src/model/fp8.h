/* fp8 linears (Megatron's --fp8-format with Transformer Engine's delayed scaling): the four
 * linears of an fp8 layer (QKV, attention output; fc1 and fc2 of a dense MLP, or of an MoE
 * layer's shared experts) compute with fp8
 * values of their inputs: in the forward the input and the weight (e4m3), in the backward also
 * the output's gradient (e4m3, or e5m2 with hybrid), for both the input's and the weight's
 * gradient. Each of these tensors has its own scale and amax history (model state, kept in the
 * workspace arena like the expert bias, saved in checkpoints). A cast records the tensor's
 * amax of the step in training passes; at the step's end the trainer reduces the amaxes over the
 * ranks that hold the same layers (a maximum over the tensor- and data-parallel groups, so every
 * layout gets one rank's scales) and updates scales and histories (backend fp8_update).
 * The values a linear computes with are the fp8 ones divided by the scale again
 * (backend fp8_quantize, into workspace copies): the CPU backend's exact emulation of an fp8
 * GEMM with fp32 accumulation.
 * Tensors: linear j (mg_fp8_linear) of a layer whose mg_layer_params.fp8 is k >= 0 owns tensors
 * 3 (k + j) + {0: input, 1: weight, 2: output gradient}.
 * Exports: mg_fp8_linear, mg_fp8_plan, mg_fp8_forward, mg_fp8_backward. Needs: model/block. */
#ifndef MG_MODEL_FP8_H
#define MG_MODEL_FP8_H

#include "model/block.h"

typedef enum { MG_FP8_QKV, MG_FP8_PROJ, MG_FP8_FC1, MG_FP8_FC2, MG_FP8_LINEARS } mg_fp8_linear;

/* Reserves the state of n_linears fp8 linears ([amax | scale | history], block.h's fp8_state)
 * and the workspace copies the casts write (nothing when n_linears is 0). */
mg_status mg_fp8_plan(const mg_block_ctx *x, mg_block_ws *w, int n_linears);
/* The scales start at 1, the amaxes and histories at 0 (at bind). */
mg_status mg_fp8_reset(const mg_block_ctx *x);
/* Linear j of layer p in the forward: *inp (n_inp elements) and *w (n_w) become their fp8
 * values when the layer computes in fp8 (else unchanged). */
mg_status mg_fp8_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                         const void **inp, size_t n_inp, const void **w, size_t n_w);
/* The same in the backward, with the output's gradient *dout (n_dout). */
mg_status mg_fp8_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                          const void **dout, size_t n_dout, const void **inp, size_t n_inp,
                          const void **w, size_t n_w);

#endif
