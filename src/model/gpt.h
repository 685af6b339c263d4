/* The GPT model: GPT-2 style (LayerNorm, GELU, learned positions, biases, tied embeddings) and
 * Llama style (RMSNorm, SwiGLU, RoPE, GQA, no biases, untied output) from one code path chosen by
 * the configuration. Explicit forward and backward; what backward needs is saved in the
 * activation slot, whose layout is fixed by mg_gpt_plan before any memory exists.
 *
 * Shard-aware: the model is tensor-parallel rank tp_rank's part of a model split over
 * cfg->tensor_model_parallel_size ranks (one rank: the whole model). Its parameters are that
 * rank's shards (model/params.h: global shapes in the metadata, local ones in the buffers), every
 * shape it computes with is local (model/config.h), and it calls the tensor-parallel mappings
 * (parallel/tensor_parallel.h) over the group given at bind:
 *   vocab-parallel embedding   rows [v0, v0 + V/T) of the table; other tokens give zero; the
 *                              partial embeddings are all-reduced (reduce-scattered to this
 *                              rank's rows with SP); the position embedding (replicated) is added
 *                              by TP rank 0 before the reduction, i.e. once
 *   blocks                     model/block.h
 *   final norm, output layer   the norm's output gathered (SP), logits (N, V/T) for this rank's
 *                              vocabulary rows (tied: the same shard as the embedding's)
 *   loss                       Megatron's VocabParallelCrossEntropy: row maxima all-reduced (max),
 *                              sum of exponentials and target logit all-reduced (sum)
 * Every TP rank ends forward with the same per-token losses; the gradients of replicated
 * parameters are the same on every TP rank, except the norm weights' under sequence
 * parallelism, which are partial (metadata `sequence_parallel`: the trainer all-reduces them).
 * A later pipeline split will cut this walk into chunks (embedding | layers [a, b) | head); the
 * block context (model/block.h) already holds no reference to the whole model.
 *
 * Lifecycle:
 *   mg_gpt_build(&g, cfg, tp_rank)        metadata only (parameter table, shapes)
 *   mg_gpt_plan(&g, be, B, acts, work)    reserves the activation slot and the workspace
 *   ... commit the arenas, allocate parameter and gradient buffers (g.params.numel elements) ...
 *   mg_gpt_bind(&g, be, params, grads, tp_group)
 *   per microbatch: mg_gpt_forward -> mg_gpt_loss -> mg_gpt_backward
 * Exports: mg_gpt, mg_gpt_hooks, mg_gpt_*. Needs: model/block, model/config, model/params,
 * parallel/tensor_parallel, backend. */
#ifndef MG_MODEL_GPT_H
#define MG_MODEL_GPT_H

#include "backend/backend.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/block.h"
#include "model/params.h"

/* Optional callbacks around the parameters' use (the trainer's data-parallel overlap,
 * parallel/ddp.h), each with registration indices idx[0..n) (at most MG_GPT_HOOK_MAX):
 *   params_needed  forward is about to read these parameters (the embedding's, then each
 *                  layer's, then the final norm's and the output layer's);
 *   grads_ready    backward has written its last contribution to these gradients (the output
 *                  layer's when untied, the final norm's, each layer's from the last, then the
 *                  embedding's: a tied embedding's gradient is complete only here).
 * NULL entries are skipped; an error stops the pass. */
#define MG_GPT_HOOK_MAX 16
typedef struct {
    mg_status (*params_needed)(void *ctx, const int *idx, int n);
    mg_status (*grads_ready)(void *ctx, const int *idx, int n);
    void *ctx;
} mg_gpt_hooks;

typedef struct {
    mg_model_config cfg;
    mg_param_table params;
    mg_gpt_hooks hooks;                /* zero: none */
    int wte, wpe, lnf_w, lnf_b, out_w; /* out_w == wte when tied; wpe, lnf_b -1 if absent */
    mg_layer_params *layers;           /* (L) */

    /* plan (set by mg_gpt_plan) */
    mg_layer_slot *slot;                     /* (L) */
    size_t x_final, lnf, lnf_mean, lnf_rstd; /* final residual (Nl,H), final norm (N,H) whole */
    mg_block_ws ws;                          /* workspace offsets */
    mg_tp tp;                                /* the tensor-parallel group (set at bind) */
    /* the shapes (blk.B micro-batch, blk.N = B*S tokens, blk.Nl residual rows on this rank),
     * arenas and, from mg_gpt_bind, the parameter and gradient buffers (blk.param_buf compute
     * dtype, blk.grad_buf fp32, params.numel each): what every layer shares (model/block.h) */
    mg_block_ctx blk;
} mg_gpt;

/* Tensor-parallel rank tp_rank's part of the model cfg describes (0 with one rank). */
mg_status mg_gpt_build(mg_gpt *g, const mg_config *c, int tp_rank);
mg_status mg_gpt_plan(mg_gpt *g, mg_backend *be, int micro_batch, mg_arena *acts, mg_arena *work);
/* Binds committed buffers and the tensor-parallel group (NULL with one rank; else its size must
 * be the configuration's and its rank tp_rank); also fills the RoPE tables. */
mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads, mg_comm *tp_group);
/* tokens: backend int32 (N). Leaves the logits (N, V/T) of this rank's vocabulary rows in the
 * workspace (mg_gpt_logits). */
mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens);
/* Cross-entropy on the logits of the last forward (fused with one rank, vocab-parallel else):
 * per-token losses into the workspace,
 * *loss_acc += loss_scale * sum(losses) (backend fp32 pointer), and the logits become their
 * gradients with weight dloss[i] (backend fp32 (N)). */
mg_status mg_gpt_loss(mg_gpt *g, mg_backend *be, const int32_t *targets, const float *dloss,
                      float *loss_acc, float loss_scale);
/* Backward of the last forward + loss; ACCUMULATES into the gradient buffer. */
mg_status mg_gpt_backward(mg_gpt *g, mg_backend *be, const int32_t *tokens);
void *mg_gpt_logits(const mg_gpt *g);
void *mg_gpt_param(const mg_gpt *g, int index);
float *mg_gpt_grad(const mg_gpt *g, int index);
void mg_gpt_free(mg_gpt *g);

#endif
