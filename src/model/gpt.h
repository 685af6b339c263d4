/* The GPT model: GPT-2 style (LayerNorm, GELU, learned positions, biases, tied embeddings) and
 * Llama style (RMSNorm, SwiGLU, RoPE, GQA, no biases, untied output) from one code path chosen by
 * the configuration. Explicit forward and backward; what backward needs is saved in the
 * activation slot, whose layout is fixed by mg_gpt_plan before any memory exists.
 *
 * Lifecycle:
 *   mg_gpt_build(&g, cfg)                 metadata only (parameter table, shapes)
 *   mg_gpt_plan(&g, be, B, acts, work)    reserves the activation slot and the workspace
 *   ... commit the arenas, allocate parameter and gradient buffers (g.params.numel elements) ...
 *   mg_gpt_bind(&g, params, grads, acts, work)
 *   per microbatch: mg_gpt_forward -> mg_gpt_loss -> mg_gpt_backward
 * Exports: mg_gpt, mg_layer_params, mg_gpt_*. Needs: model/config, model/params, backend. */
#ifndef MG_MODEL_GPT_H
#define MG_MODEL_GPT_H

#include "backend/backend.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/params.h"

/* Rows of the parameter table for one transformer layer; -1 where the model has none. */
typedef struct {
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
    int ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
} mg_layer_params;

/* Offsets (bytes) of one layer's saved activations in the activation arena. */
typedef struct {
    size_t x;                       /* (N,H) layer input = residual stream */
    size_t ln1, ln1_mean, ln1_rstd; /* (N,H), (N), (N) */
    size_t qkv;                     /* (N, qkv_dim), after RoPE */
    size_t att, att_saved;          /* (N, attn_dim), backend private */
    size_t mid;                     /* (N,H) x + attention output */
    size_t ln2, ln2_mean, ln2_rstd;
    size_t fc1; /* (N, fc1_dim) */
    size_t act; /* (N, F) */
} mg_layer_slot;

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
    int B, N;                                /* micro-batch size, tokens per microbatch (B*S) */
    size_t esz;                              /* bytes per activation element */
    mg_layer_slot *slot;                     /* (L) */
    size_t x_final, lnf, lnf_mean, lnf_rstd; /* final residual (N,H), final norm */
    /* workspace offsets (transient, shared by all layers) */
    size_t w_dres, w_dln, w_datt, w_dqkv, w_dfc1, w_dact, w_logits, w_losses, w_rope_cos,
        w_rope_sin;
    mg_arena *acts, *work;

    /* bound buffers (set by mg_gpt_bind) */
    void *param_buf; /* (params.numel) compute dtype */
    float *grad_buf; /* (params.numel) fp32 main grads */
} mg_gpt;

mg_status mg_gpt_build(mg_gpt *g, const mg_config *c);
mg_status mg_gpt_plan(mg_gpt *g, mg_backend *be, int micro_batch, mg_arena *acts, mg_arena *work);
/* Binds committed buffers; also fills the RoPE tables. */
mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads);
/* tokens: backend int32 (N). Leaves the logits (N,V) in the workspace (mg_gpt_logits). */
mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens);
/* Fused cross-entropy on the logits of the last forward: per-token losses into the workspace,
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
