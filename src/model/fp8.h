/* A layer's linears, and fp8 (Megatron's --fp8-format with Transformer Engine's scaling recipes).
 * Every linear of a layer (QKV, attention output; fc1 and fc2 of a dense MLP, or of an MoE
 * layer's shared experts) goes through mg_fp8_linear_forward / mg_fp8_linear_backward. In a layer
 * that computes in the compute dtype they are the backend's linear ops. In an fp8 layer
 * (mg_layer_params.fp8 >= 0) the operands are cast to fp8 bytes first (backend fp8_cast into
 * workspace copies): in the forward the input and the weight (e4m3), in the backward also the
 * output's gradient (e4m3, or e5m2 with hybrid), with the transposes the gradients' products read,
 * and the backend's fp8_linear ops multiply the bytes (on CUDA cuBLASLt's fp8 GEMMs; on the CPU
 * their exact emulation).
 * A weight is cast once per pass: the pass's first microbatch (mg_block_pass.mb 0, which every
 * schedule runs first) writes its bytes and transpose into the layer's weight copy, which the
 * other microbatches' forwards and every backward of the pass read (weights and scales change
 * only between passes, so the bytes are those a cast at each use would write).
 * An input is cast once per microbatch: the training forward writes its bytes and, into the
 * layer's input copy in the microbatch's slot (mg_block_pass.slot), its transpose, which the
 * weight gradient's product reads in the backward; the input and its scale are unchanged in
 * between (a recomputed forward writes the same bytes again). Under a pipeline with tensorwise
 * scaling (each microbatch's cast has its own scale, and the next one's replaces it) the backward
 * casts the transpose again from the saved input instead.
 * Each of these tensors has its own scale and amax history (model state, kept in the workspace
 * arena like the expert bias, saved in checkpoints). A cast records the tensor's amax of the step
 * in training passes; at the step's end the trainer reduces the amaxes over the ranks that hold
 * the same layers (a maximum over the tensor- and data-parallel groups, so every layout gets one
 * rank's scales) and updates scales and histories (backend fp8_update). With --fp8-recipe
 * tensorwise the scale of a cast comes from the tensor's amax now instead. With --fp8-recipe
 * blockwise every 1 x 128 block (inputs and gradients; along rows for the forward and the input
 * gradient, along columns for the weight gradient) and every 128 x 128 tile of a weight takes its
 * scale from its own amax now (core/fp8_block.h): no state; the kept input transposes keep their
 * block scales beside them (fp8_xts), per slot.
 * The routed experts of an MoE layer (mg_fp8_experts_*) are two more linears of the layer where
 * mg_model_config.fp8_experts says: their rows cast in groups (fp8_cast_grouped: the transposes
 * the weight gradients read start each group on a 16-byte column), every local expert's weight in
 * one tensor (one scale, one amax over them all), multiplied by the backend's
 * fp8_grouped_linear ops (on CUDA CUTLASS's fp8 grouped GEMM). Their inputs' grouped transposes
 * are kept for the backward as the dense inputs' are, per slot (fp8_ext), except under a receive
 * budget, whose extra dispatch rounds cast through the same rows: there the backward casts them
 * again.
 * --fp8-param-gather (mg_model_config.fp8_params): the fp8 layers' weights (the routed experts'
 * where they compute in fp8) are kept as fp8 bytes besides their compute-dtype values
 * (mg_fp8_mark_weights tags them; the trainer keeps them in buffers of their own, train/buffers.h):
 * after each update the optimizer's elements of them are cast (mg_fp8_param_cast) and the
 * distributed optimizer gathers the bytes, and the pass's first forward transposes those bytes
 * (fp8_transpose) instead of casting the weight. A weight's bytes are the cast the forward would
 * have made: the same values, the same scale (delayed: the tensor's, already updated for the next
 * step; tensorwise: from the amax over every part of the weight), and with delayed scaling the
 * same amax recorded, so training is the same with and without the flag.
 * Tensors: linear j (mg_fp8_linear) of a layer whose mg_layer_params.fp8 is k >= 0 owns tensors
 * 3 (k + j) + {0: input, 1: weight, 2: output gradient}; k counts mg_fp8_layer_linears per
 * layer.
 * Exports: mg_fp8_linear, mg_fp8_layer_linears, mg_fp8_experts_on, mg_fp8_mark_weights,
 * mg_fp8_plan, mg_fp8_reset, mg_fp8_linear_forward, mg_fp8_gathers_bytes,
 * mg_fp8_linear_forward_gathered, mg_fp8_linear_backward,
 * mg_fp8_takes_gelu_grad,
 * mg_fp8_experts_forward, mg_fp8_experts_backward, mg_fp8_param_*.
 * Needs: model/block. */
#ifndef MG_MODEL_FP8_H
#define MG_MODEL_FP8_H

#include "model/block.h"

typedef enum {
    MG_FP8_QKV,
    MG_FP8_PROJ,
    MG_FP8_FC1,
    MG_FP8_FC2,
    MG_FP8_EXP_FC1, /* an MoE layer's routed experts (mg_model_config.fp8_experts) */
    MG_FP8_EXP_FC2,
    MG_FP8_LINEARS
} mg_fp8_linear;

/* The fp8 linears of each fp8 layer: with the routed experts' two where they are in fp8. */
static inline int mg_fp8_layer_linears(const mg_model_config *c) {
    return c->fp8_experts ? MG_FP8_LINEARS : MG_FP8_EXP_FC1;
}

/* Whether the routed experts compute in fp8: the model's layout has their linears
 * (mg_model_config.fp8_experts) and the plan's backend the fp8 grouped GEMM (an optional op,
 * mg_block_ctx.fp8_grouped). Else they compute in the compute dtype, nothing is reserved for
 * their casts, and their tensors' state stays unused (scales at 1), so the checkpoint layout does
 * not depend on the machine. */
bool mg_fp8_experts_on(const mg_block_ctx *x);
/* --fp8-param-gather: tags the weights of the fp8 linears of layers (n_layers of them) in pt
 * with their fp8 tensor (mg_param_meta.fp8_tensor; the routed experts' where c->fp8_experts and
 * the backend has the fp8 grouped GEMM, fp8_grouped); every other parameter -1. Without
 * c->fp8_params, nothing is tagged. */
void mg_fp8_mark_weights(mg_param_table *pt, const mg_layer_params *layers, int n_layers,
                         const mg_model_config *c, bool fp8_grouped);
/* Reserves the state of n_linears fp8 linears ([amax | scale | history], block.h's fp8_state),
 * the inverses of the scales, the workspace copies the casts of inputs and gradients write,
 * every fp8 layer's weight copies and, for keep_slots slots (0: none; only with fp8 weight
 * gradients), every fp8 layer's input transposes (nothing when n_linears is 0). */
mg_status mg_fp8_plan(const mg_block_ctx *x, mg_block_ws *w, int n_linears, int keep_slots);
/* The scales start at 1, the amaxes and histories at 0 (at bind). */
mg_status mg_fp8_reset(const mg_block_ctx *x);
/* Linear j of layer p on the block's N rows: out = inp @ w^T + bias (+ residual), as the
 * backend's linear_forward; with gelu_pre (residual NULL) out = gelu(gelu_pre), gelu_pre the
 * product, as linear_gelu_forward. */
mg_status mg_fp8_linear_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                void *out, void *gelu_pre, const void *inp, const void *w,
                                const void *bias, const void *residual, int IC, int OC);
/* Whether linear j of layer p (QKV or fc1: a norm's output is its input) takes its input from
 * mg_fp8_linear_forward_gathered: under SP, delayed scaling, in a training pass that keeps the
 * input's transpose (MG_TEST_FP8_SP_BF16=1: never). */
bool mg_fp8_gathers_bytes(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j);
/* mg_fp8_linear_forward of a sequence-parallel input from this rank's Nl rows of it (own, the
 * norm's output): the rows cast to fp8 here, the tensor-parallel group all-gathers the bytes
 * (half the bf16 gather's; with --tp-comm-overlap while the product of this rank's rows runs),
 * and their transpose is made from them for the weight gradient. The
 * bytes are those of the gathered input's cast: the same scale on every rank, each element cast
 * alone; the amax is this rank's rows', and the step's end takes the maximum over the group. */
mg_status mg_fp8_linear_forward_gathered(const mg_block_ctx *x, const mg_layer_params *p,
                                         mg_fp8_linear j, void *out, void *gelu_pre,
                                         const void *own, const void *w, const void *bias, int OC);
/* Its backward, as the backend's linear_backward; with dout_gelu_pre (N,OC) not NULL, dout is
 * the gradient of gelu(dout_gelu_pre), which the output gradient's cast takes through the GELU
 * (only where mg_fp8_takes_gelu_grad: an MLP's fc2 then leaves its gelu_pre NULL, and fc1
 * passes it here, saving the GELU gradient's pass over the (N, ffn) tensor). */
mg_status mg_fp8_linear_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 void *dinp, float *dw, float *dbias, const void *dout,
                                 const void *dout_gelu_pre, const void *inp, const void *w,
                                 const void *gelu_pre, int IC, int OC);
/* Whether layer p's MLP casts fc1's output gradient through its GELU (a GELU MLP, not SwiGLU;
 * the tensor-scaled recipes, with fp8 weight gradients: nothing then reads the compute dtype's
 * gradient). */
bool mg_fp8_takes_gelu_grad(const mg_block_ctx *x, const mg_layer_params *p);

/* The routed experts' linear j (MG_FP8_EXP_FC1 or _FC2) of MoE layer p on their rows (the
 * layer's x->moe->R, in groups of counts: sources x local experts): grouped_linear_forward's
 * contract, w and bias the tables of pointers it takes; in an fp8 layer on fp8 bytes
 * (fp8_cast_grouped, fp8_grouped_linear_forward), the weights cast once per pass as above, all
 * local experts' with one scale (one tensor). */
mg_status mg_fp8_experts_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 void *out, const void *inp, void *const *w, void *const *bias,
                                 const int32_t *counts, int IC, int OC);
/* Its backward, as grouped_linear_backward. */
mg_status mg_fp8_experts_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                  void *dinp, float *const *dw, float *const *dbias,
                                  const void *dout, const void *inp, void *const *w,
                                  const void *gelu_pre, const int32_t *counts, int IC, int OC,
                                  bool accumulate);

/* --fp8-param-gather, after an update: n elements (at most INT_MAX) of a weight of fp8 tensor t
 * (an `expert` weight or not), in (compute dtype), cast into out (bytes) with the tensor's scale
 * (delayed: recording its amax of the step; tensorwise: the scale mg_fp8_param_scales set). */
mg_status mg_fp8_param_cast(const mg_block_ctx *x, int t, bool expert, uint8_t *out, const void *in,
                            size_t n);
/* Tensorwise scaling: the (fp8_tensors) amaxes of the dense or the expert weights (backend
 * memory; NULL without tensorwise --fp8-param-gather), into which mg_fp8_param_amax gathers
 * the magnitudes of n elements of tensor t. The caller reduces them by a maximum over the ranks
 * that hold parts of the same weights, then mg_fp8_param_scales sets the scales from them (and
 * zeroes them for the next update). */
float *mg_fp8_param_amaxes(const mg_block_ctx *x, bool expert);
mg_status mg_fp8_param_amax(const mg_block_ctx *x, int t, bool expert, const void *in, size_t n);
mg_status mg_fp8_param_scales(const mg_block_ctx *x);

#endif
