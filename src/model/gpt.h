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
 *
 * Pipeline-aware: the model is also pipeline rank pp_rank's part of a model split over
 * cfg->pipeline_model_parallel_size stages, as V model chunks (virtual stages,
 * parallel/pipeline/layers.h places their layers). A chunk is a contiguous range of global layers
 * with two flags: `pre` (the first stage's first chunk: owns the embedding, takes tokens) and
 * `post` (the last stage's last chunk: owns the final norm, the output layer and the loss). A
 * chunk's forward takes a hidden state (Nl,H) (or tokens) into one activation slot and gives its
 * output hidden state (Nl,H); its backward takes the output's gradient and gives the input's.
 * The head runs lazily: a post chunk's forward stops at the final residual, and mg_gpt_head_loss
 * (the final norm, logits and loss, in the backward step or the forward of an evaluation) reuses
 * the workspace, so no logits are kept per in-flight microbatch. Slots: mg_gpt_plan reserves
 * n_slots of them, each the saved activations of the rank's largest chunk plus its output, so
 * activation memory is n_slots x slot_bytes whatever the number of microbatches (the schedule
 * decides n_slots: parallel/pipeline/schedule.h). Parameter names keep global layer numbers, and
 * initialisation is keyed by them, so every layout starts from the one-rank model's weights.
 * Tied embeddings across stages: the last stage holds its own copy "output_layer.weight",
 * initialised as the embedding (same RNG stream), marked `embedding_group` on both stages and
 * `shared` on the copy (Megatron's attributes): the trainer all-reduces the two gradients and the
 * gradient norm counts the copy out.
 * With one stage and one chunk (P = 1) the walk is the single-GPU one: mg_gpt_forward,
 * mg_gpt_loss, mg_gpt_backward work on chunk 0 and slot 0.
 *
 * Lifecycle:
 *   mg_gpt_build(&g, cfg, tp, pp, ep ranks)     metadata only (parameter table, shapes, chunks)
 *   mg_gpt_plan(&g, target, B, n_slots, acts, work)   reserves the activation slots and the
 *                                               workspace (target: the backend's values)
 *   ... commit the arenas, allocate parameter and gradient buffers (g.params.numel elements) ...
 *   mg_gpt_bind(&g, be, params, grads, tp_group)
 *   per microbatch (P = 1): mg_gpt_forward -> mg_gpt_loss -> mg_gpt_backward
 *   per microbatch and chunk c in slot s (train/pipeline.c):
 *     forward:  [not pre: hidden state into mg_gpt_chunk_input] mg_gpt_chunk_forward
 *               [post, evaluation: mg_gpt_head_loss | not post: send mg_gpt_chunk_output]
 *     backward: [post: mg_gpt_head_loss | else: d(output) into mg_gpt_chunk_dout]
 *               mg_gpt_chunk_backward [not pre: send mg_gpt_chunk_dout, now d(input)]
 * Exports: mg_gpt, mg_gpt_chunk, mg_gpt_hooks, mg_gpt_*. Needs: model/block, model/config,
 * model/params, model/rng, parallel/pipeline/layers, parallel/tensor_parallel, backend. */
#ifndef MG_MODEL_GPT_H
#define MG_MODEL_GPT_H

#include "backend/backend.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/block.h"
#include "model/params.h"
#include "parallel/pipeline/layers.h"

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

/* One model chunk of this rank: global layers [offset, offset + count), held as local layers
 * [first, first + count) of mg_gpt.layers. */
typedef struct {
    int first, count, offset;
    bool pre, post; /* owns the embedding / the final norm, output layer and loss */
} mg_gpt_chunk;

typedef struct {
    mg_model_config cfg;
    mg_param_table params;
    mg_gpt_hooks hooks; /* zero: none */
    /* parameter rows, -1 where this rank has none: wte, wpe on the first stage; lnf, out_w on
     * the last (out_w == wte when tied on one stage; the last stage's copy with P > 1) */
    int wte, wpe, lnf_w, lnf_b, out_w;
    int pp, pp_rank;         /* pipeline stages and this rank's (1, 0: the whole model) */
    int n_chunks;            /* V: model chunks (virtual stages) on this rank */
    mg_gpt_chunk *chunks;    /* (n_chunks) */
    int n_layers;            /* layers held by this rank, all chunks */
    mg_layer_params *layers; /* (n_layers) chunk after chunk */
    uint8_t *is_moe;         /* (cfg.L) global layer l is an MoE layer (--moe-layer-freq) */
    int n_moe;               /* MoE layers held by this rank */
    int n_fp8;               /* fp8 layers held by this rank (model/fp8.h) */
    mg_moe_ws moe_ws;        /* their shared workspace and state (model/moe.h) */
    mg_model_rng rng;        /* the dropout streams (model/rng.h; allocated at bind) */

    /* plan (set by mg_gpt_plan) */
    int n_slots, slot_layers; /* activation slots; layer entries per slot (largest chunk) */
    size_t slot_bytes;        /* one slot's share of the activation arena */
    mg_layer_slot *slot;      /* (n_slots * slot_layers) */
    size_t *x_out;            /* (n_slots) a chunk's output (Nl,H): the final residual */
    /* activation recomputation (model/block.h's MG_SLOT_RC_*): what each position of a chunk
     * recomputes, the buffers the slots share for it (rc_groups: one per layer of a uniform
     * group, else one) and their bytes, and with --distribute-saved-activations each entry's
     * share of its input */
    unsigned *rc_pos;          /* (slot_layers) */
    mg_layer_slot *rc_scratch; /* (rc_groups) */
    int rc_groups;
    bool rc_any;              /* something is recomputed */
    bool fp8_keep;            /* fp8 layers keep their inputs' transposes (model/fp8.h), and
                                 their norms' outputs and activation share buffers
                                 (MG_SLOT_RC_FP8) */
    size_t rc_bytes;          /* the shared buffers' part of the activation arena (recomputation's
                                 and the fp8 layers') */
    size_t *x_part;           /* (n_slots * slot_layers) offsets, 0 bytes where not distributed */
    mg_block_pass *slot_pass; /* (n_slots) the dropout of each slot's microbatch */
    size_t lnf, lnf_mean, lnf_rstd; /* workspace: final norm (N,H) whole, (Nl), (Nl) */
    mg_block_ws ws;                 /* workspace offsets */
    mg_tp tp;                       /* the tensor-parallel group (set at bind) */
    /* the shapes (blk.B micro-batch, blk.N = B*S tokens, blk.Nl residual rows on this rank),
     * arenas and, from mg_gpt_bind, the parameter and gradient buffers (blk.param_buf compute
     * dtype, blk.grad_buf fp32, params.numel each): what every layer shares (model/block.h) */
    mg_block_ctx blk;
} mg_gpt;

/* Tensor-parallel rank tp_rank's, pipeline rank pp_rank's and expert-parallel rank ep_rank's
 * part of the model cfg describes (0, 0, 0 with one rank): the MoE layers hold experts
 * [ep_rank E/ep, (ep_rank + 1) E/ep) of --expert-model-parallel-size ep (global numbers in their
 * names). A placement the layer rules refuse is MG_ERR_USAGE. */
mg_status mg_gpt_build(mg_gpt *g, const mg_config *c, int tp_rank, int pp_rank, int ep_rank);
/* What the plan needs of the backend that will run the model, as values, so that a plan needs no
 * backend (`megatron plan` plans for a device it may not have): the compute dtype, the bytes
 * one layer's attention saves for its backward (the backend's attention_saved_bytes for this
 * model's shape and the micro-batch) and whether it has the fp8 grouped GEMM (model/fp8.h's
 * routed experts). _of: backend be's; _for: those of a backend on `device` computing in
 * `compute` (backend/backend.h's mg_backend_attention_saved_bytes; the fp8 grouped GEMM on the
 * CPU, and on CUDA with bf16 compute, as a build with CUTLASS has it); and whether it has the
 * block-scaled fp8 products of --fp8-recipe blockwise (its fp8_cast_blocks; CUDA's products are
 * cuBLASLt's block scaling, sm 9.0; _for
 * predicts the recipe's buffers whatever the device, the trainer refuses it where they are
 * missing). */
typedef struct {
    mg_dtype compute;
    size_t attention_saved;
    bool fp8_grouped;
    bool fp8_blocks;
} mg_gpt_target;
mg_gpt_target mg_gpt_target_of(const mg_gpt *g, mg_backend *be, int micro_batch);
mg_gpt_target mg_gpt_target_for(const mg_gpt *g, mg_device device, mg_dtype compute,
                                int micro_batch);
/* Reserves n_slots activation slots (>= 1) and the workspace for micro-batches of micro_batch,
 * for a backend with target's values. */
mg_status mg_gpt_plan(mg_gpt *g, mg_gpt_target target, int micro_batch, int n_slots, mg_arena *acts,
                      mg_arena *work);
/* Binds the backend (whose compute dtype must be the plan's), committed buffers and the
 * tensor-parallel group (NULL with one rank; else its size must
 * be the configuration's and its rank tp_rank); also seeds the dropout streams in be's memory
 * (model/rng.h) and fills the RoPE tables (and the ones that --apply-layernorm-1p adds to the
 * norm weights). */
mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads, mg_comm *tp_group);
/* --fp8-param-gather (model/fp8.h): tags the fp8 linears' weights (mg_fp8_mark_weights; the
 * routed experts' where fp8_grouped, model/gpt.h's mg_gpt_target) before the trainer lays out its
 * buffers; and binds the bytes of the tagged weights ((params.numel - params.fp8_from) bytes,
 * backend memory), which the forward then reads instead of casting the weights. */
void mg_gpt_mark_fp8_weights(mg_gpt *g, bool fp8_grouped);
void mg_gpt_bind_fp8_params(mg_gpt *g, uint8_t *bytes);
/* RoPE's tables, as Hugging Face and megatron-core compute them in fp32: for position s < S and
 * i < rd/2, angle = s * inv_freq[i], inv_freq[i] = 1 / base^(2i / rd) (rd: the rotated channels
 * per head, model/config.h), cos_tab[s, i] = cos(angle), sin_tab[s, i] = sin(angle). */
void mg_gpt_rope_tables(float *cos_tab /* (S, rd/2) */, float *sin_tab /* (S, rd/2) */, int S,
                        int rd, double base);
/* ---- chunks (train/pipeline.c) ---- */
/* The dropout of the microbatch that slot s takes next (core/dropout.h): with train, the masks
 * of --attention-dropout and --hidden-dropout are keyed by the microbatch's number mb in this
 * rank's step (stream masks, model/rng.h; the step's end must advance the streams:
 * mg_model_rng_advance), or with --layout-invariant-dropout by the training iteration (backend
 * memory, read by the ops: the step-control block's count) and the index in the global batch of
 * the microbatch's first sequence. The slot's backward recomputes its forward's masks. Slots
 * start without dropout (evaluation, generation: train false). */
void mg_gpt_set_dropout(mg_gpt *g, int s, bool train, int mb, const int64_t *iteration,
                        int sample0);
/* The packed documents of the microbatch in slot s (backend int32 (N) each, or NULL; they stay
 * set until changed, and must hold the slot's values from its forward through its backward):
 * pos, each token's position for the learned position embedding and RoPE (NULL: i % S);
 * doc_start, the first token of each token's document in its sequence, for the attention mask
 * (NULL: plain causal). train/trainer_docs.h computes them (--reset-position-ids,
 * --reset-attention-mask). Slots start with neither. */
void mg_gpt_set_documents(mg_gpt *g, int s, const int32_t *pos, const int32_t *doc_start);
/* Chunk c's forward into slot s: tokens (backend int32 (N)) for a pre chunk, else the hidden
 * state already in mg_gpt_chunk_input(g, c, s). The output lands in mg_gpt_chunk_output. */
mg_status mg_gpt_chunk_forward(mg_gpt *g, mg_backend *be, int c, int s, const int32_t *tokens);
/* The final norm, the logits and the loss of the post chunk's forward in slot s (mg_gpt_loss's
 * arguments); the logits become their gradients for mg_gpt_chunk_backward. */
mg_status mg_gpt_head_loss(mg_gpt *g, mg_backend *be, int s, const int32_t *targets,
                           const float *dloss, const float *loss_w, float *loss_acc,
                           float loss_scale);
/* Chunk c's backward of its forward in slot s; ACCUMULATES into the gradient buffer. A post chunk
 * starts from the logits' gradients (mg_gpt_head_loss), any other from d(output) written to
 * mg_gpt_chunk_dout. Afterwards mg_gpt_chunk_dinput holds d(input) (not for a pre chunk, whose
 * input gradient goes into the embedding; tokens: as for the forward); it stays valid until the
 * next backward, and the next d(output) may be received meanwhile (two buffers). */
mg_status mg_gpt_chunk_backward(mg_gpt *g, mg_backend *be, int c, int s, const int32_t *tokens);
void *mg_gpt_chunk_input(const mg_gpt *g, int c, int s);  /* (Nl,H) compute dtype */
void *mg_gpt_chunk_output(const mg_gpt *g, int c, int s); /* (Nl,H) */
void *mg_gpt_chunk_dout(const mg_gpt *g);                 /* (Nl,H) workspace */
const void *mg_gpt_chunk_dinput(const mg_gpt *g);         /* (Nl,H) workspace */
/* Elements of a hidden state between stages: Nl x H (Megatron's tensor_shape, (S/T with
 * sequence parallelism) x B x H). */
size_t mg_gpt_hidden_numel(const mg_gpt *g);

/* ---- the whole model on one stage (P = 1, one chunk, slot 0) ---- */
/* tokens: backend int32 (N). Leaves the logits (N, V/T) of this rank's vocabulary rows in the
 * workspace (mg_gpt_logits). */
mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens);
/* Cross-entropy on the logits of the last forward (fused with one rank, vocab-parallel else):
 * per-token losses into the workspace,
 * *loss_acc += loss_scale * sum_i(losses[i] * (loss_w ? loss_w[i] : 1)) (backend fp32 pointer;
 * loss_w backend fp32 (N) or NULL: a loss mask, train/trainer_loss.h), and the logits become
 * their gradients with weight dloss[i] (backend fp32 (N); 0 where the loss is masked). */
mg_status mg_gpt_loss(mg_gpt *g, mg_backend *be, const int32_t *targets, const float *dloss,
                      const float *loss_w, float *loss_acc, float loss_scale);
/* Backward of the last forward + loss; ACCUMULATES into the gradient buffer, except for what
 * mg_gpt_expert_grads_unwritten releases. */
mg_status mg_gpt_backward(mg_gpt *g, mg_backend *be, const int32_t *tokens);
void *mg_gpt_logits(const mg_gpt *g);
void *mg_gpt_param(const mg_gpt *g, int index);
float *mg_gpt_grad(const mg_gpt *g, int index);
/* MoE layer i's state on this rank (backend fp32, E values): the step's tokens per expert (the
 * layers' loads are one block: layer i's at mg_gpt_moe_load(g, 0) + i E), and the expert bias
 * (NULL without --moe-router-enable-expert-bias). */
float *mg_gpt_moe_load(const mg_gpt *g, int i);
float *mg_gpt_moe_bias(const mg_gpt *g, int i);
/* The name MoE layer i's expert bias is saved under (cap bytes): its router weight's with
 * expert_bias for weight (megatron-core's TopKRouter buffer, decoder.layers.L.mlp.router.
 * expert_bias, global layer numbers). */
void mg_gpt_moe_bias_name(const mg_gpt *g, int i, char *out, size_t cap);
/* The name parameter p is saved under: its own, but a pipeline stage's copy of the tied
 * embedding (metadata `shared`) has the embedding's (the first stage saves it; every copy reads
 * it). */
const char *mg_gpt_saved_name(const mg_param_meta *p);
/* The token dispatch's static sizes for N tokens per microbatch (model/moe.h's plan): rows of
 * one rank's permuted pairs, rows its experts may receive (under the receive budget, if any, and
 * in the worst case), tokens kept per expert (0: dropless), and the elements per received row of
 * an MoE layer's saved activations (per microbatch in flight) and of its workspace. For `megatron
 * plan`; the model need not be planned. */
typedef struct {
    int sent, received, received_worst, capacity;
    size_t act_elems_per_row, work_elems_per_row;
} mg_gpt_moe_dispatch;
mg_status mg_gpt_moe_rows(const mg_gpt *g, int N, mg_gpt_moe_dispatch *out);
/* The caller did not zero the gradients of the expert parameters (mg_param_meta.expert) for this
 * step: each MoE layer's next backward writes them over instead of adding to them (every expert
 * of the layer, zeros for one without tokens), later ones accumulate again. Saves a pass over
 * the experts' gradients (most of an MoE model's) and the grouped GEMM's read of them. */
void mg_gpt_expert_grads_unwritten(mg_gpt *g);
/* Frees the tables and, once bound, the dropout streams in the backend's memory: call it before
 * the backend is destroyed. */
void mg_gpt_free(mg_gpt *g);

#endif
