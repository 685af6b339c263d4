/* Model-internal: what a transformer block's sublayers (attention.c, mlp.c) need, and nothing of
 * the model around them. A sublayer sees its parameters (rows of the parameter table), its saved
 * activations (a slot), the workspace shared by all layers, this rank's shapes and the
 * tensor-parallel group — the block context. gpt.c builds the context and walks the layers; the
 * sublayers never call back into gpt.c.
 *
 * Tensor parallelism inside a block (Megatron's ParallelAttention / ParallelMLP):
 *   norm -> [all-gather rows, SP] -> column-parallel linear (QKV, fc1: this rank's heads / FFN
 *   columns) -> attention / activation on local heads / columns -> row-parallel linear (proj,
 *   fc2: partial products) -> all-reduce (or reduce-scatter rows, SP) -> + bias + residual.
 * Backward mirrors it: the row-parallel layer's output gradient is whole on every rank (gathered
 * under SP), the column-parallel layer's input gradient is a partial sum, all-reduced (or
 * reduce-scattered, SP) before the norm's backward. With one rank the single-GPU fused paths are
 * used unchanged (bias and residual inside the GEMM epilogue).
 * Exports: mg_moe_params, mg_layer_params, mg_layer_slot, mg_block_ws, mg_moe_ws, mg_block_ctx,
 * mg_block_*, mg_attention_*, mg_mlp_*, mg_moe_forward, mg_moe_backward. Needs: model/config,
 * model/params, model/rng, parallel/tensor_parallel, backend, core/arena. */
#ifndef MG_MODEL_BLOCK_H
#define MG_MODEL_BLOCK_H

#include "backend/backend.h"
#include "config/flags.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/params.h"
#include "model/rng.h"
#include "parallel/tensor_parallel.h"

/* Rows of the parameter table of an MoE layer's MLP (model/moe.c); -1 where it has none. */
typedef struct {
    int router_w;
    int *fc1_w, *fc1_b, *fc2_w, *fc2_b;         /* (E_l) this rank's experts, e0 + j */
    int sh_fc1_w, sh_fc1_b, sh_fc2_w, sh_fc2_b; /* the shared experts */
    int index;                                  /* this rank's MoE layer number (its state) */
} mg_moe_params;

/* Rows of the parameter table for one transformer layer; -1 where the model has none. An MoE
 * layer (moe != NULL) has no fc1/fc2: its MLP is the router and the experts. */
typedef struct {
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
    int ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
    mg_moe_params *moe;
    int layer; /* the global layer number (dropout masks are keyed by it) */
    int fp8;   /* its first fp8 linear (model/fp8.h), -1: the layer computes in the compute dtype */
} mg_layer_params;

/* Offsets (bytes) of one layer's saved activations in the activation arena. N tokens of the
 * microbatch, Nl = rows of the residual stream on this rank (N / tp with SP, else N). */
typedef struct {
    size_t x;                       /* (Nl,H) layer input = residual stream */
    size_t ln1, ln1_mean, ln1_rstd; /* (N,H) whole (gathered under SP), (Nl), (Nl) */
    size_t qkv;                     /* (N, qkv_l), after RoPE */
    size_t att, att_saved;          /* (N, attn_l), backend private */
    size_t mid;                     /* (Nl,H) x + attention output */
    size_t ln2, ln2_mean, ln2_rstd; /* as ln1 */
    size_t fc1;                     /* (N, fc1_l) */
    size_t act;                     /* (N, F_l) */
    /* MoE layers (model/moe.c); R: rows of the experts' input (mg_moe_rows) */
    size_t logits;          /* (N,E) fp32 router logits */
    size_t idx, probs, pos; /* (N,k) int32, fp32, int32 */
    size_t aux_counts;      /* (N/S,E) int32 */
    size_t counts;          /* (ep x El) int32: rows per source rank and local expert (El: the
                               moe workspace's, E_l and with ECHO the spare slots) */
    size_t lcounts;         /* (Ed) int32 expert parallelism: this rank's rows per expert */
    size_t plan, idx2;      /* ECHO: the plan (moe_echo_plan's ints), (N,k) int32 each pair's
                               expert or spare slot (the rank-major numbering of Ed) */
    size_t rounds;          /* (1) int32 under a receive budget: the exchange's rounds
                               (model/moe_dispatch.h) */
    size_t xe;              /* (R,H) the experts' input rows */
    size_t e_fc1, e_act;    /* (R, moe fc1), (R, moe F) */
    size_t y;               /* (Rp,H) the expert outputs of this rank's pairs */
    size_t sh_fc1, sh_act;  /* (N, shared fc1), (N, shared F) */
    unsigned rc;            /* what the entry does not keep (MG_SLOT_RC_*, MG_RECOMPUTE_*): those
                               fields share the recomputation buffers, written again in the
                               backward */
} mg_layer_slot;

/* Activation recomputation in a slot entry: the selective modules (config/flags.h's
 * MG_RECOMPUTE_*: their outputs rebuilt inside the sublayers' backward), or full recomputation
 * (model/gpt.c runs the layers' forward again before their backward): */
#define MG_SLOT_RC_FULL  (1u << 8) /* everything but the layer input and the MoE routing */
#define MG_SLOT_RC_INNER (1u << 9) /* a uniform group's later layer: its input too */
#define MG_SLOT_RC_DIST                                                                            \
    (1u << 10) /* a group's first layer whose input is kept split over the                         \
                  tensor-parallel ranks (--distribute-saved-activations) */
/* and not recomputation: a dense fp8 layer that keeps its linears' input transposes (model/fp8.h)
 * reads its norms' outputs and its activation only in the forward (the weight gradients take the
 * kept bytes), so those share the buffers of every slot */
#define MG_SLOT_RC_FP8 (1u << 11)

/* What MoE layers share (model/moe.c): workspace offsets for the backward, per MoE layer the
 * expert bias, the step's load and the experts' pointer arrays, and the pass's settings. */
typedef struct {
    size_t dlogits, dprobs;            /* (N,E), (N,k) fp32 */
    size_t dy;                         /* (Rp,H) d(the expert outputs of this rank's pairs) */
    size_t dxe;                        /* (R,H) d(the experts' input rows) */
    size_t de_fc1, de_act;             /* (R, moe fc1), (R, moe F) */
    size_t xp;                         /* (Rp,H) expert parallelism: the permuted rows before the
                                          all-to-all (the experts' input is the slot's xe); in the
                                          backward their gradient */
    size_t slab_send, slab_recv;       /* (R,H) each, expert parallelism: the all-to-all's slabs
                                          (model/moe_dispatch.c) */
    size_t *count_splits, *row_splits; /* (2 ep) host, expert parallelism: the all-to-alls'
                                          fixed counts then displacements per peer (E_l
                                          counts; slabs of R / ep rows x H), set by the plan */
    size_t ye;      /* (R,H) expert parallelism: the experts' output rows before the
                       all-to-all back; in the backward their gradient */
    size_t rcounts; /* (ep x E_l) int32 under a receive budget: a round's rows per source
                       rank and local expert (model/moe_dispatch.h) */
    bool budget;    /* a receive budget makes the slabs smaller than the worst case: an
                       exchange may take several rounds */
    int El, Ed;     /* experts the dispatch sees per rank and in all: E_l and E, with
                       ECHO E_l + S/ep and E + S (each rank's home experts, then its
                       spare slots) */
    /* ECHO (model/moe.c): the counting pass's (E) rows per home expert and (N,k) rows, the
     * all-gathered (ep, E) counts, the slabs of the weight and gradient exchange (ep x S/ep
     * experts' weights, fp32 size each), the spare slots' weights (compute dtype) and fp32
     * gradients (S/ep experts), the exchange's fixed splits (host, 2 ep) */
    size_t hcounts, hpos, gcounts, echo_send, echo_recv, spare_w, spare_g;
    size_t *echo_splits;
    size_t echo_seg[4];    /* elements of one expert's fc1 weight, fc1 bias, fc2 weight, fc2 bias
                              (the biases 0 without them), one after the other in a row */
    size_t echo_width;     /* their sum: one expert's row */
    int *overflows;        /* host (1): training forwards of this step's MoE layers that took
                              more than one round (the trainer reads and zeroes it) */
    size_t *bias;          /* (n_layers) offsets of (E) fp32 each */
    size_t load;           /* (n_layers, E) fp32, one block: layer i's tokens per expert at
                              row i (the trainer zeroes, sums and reads them in one call each);
                              with ECHO then (n_layers, ep): each rank's tokens after it */
    size_t *ptrs;          /* (n_layers) offsets of 8 arrays of E_l pointers */
    bool *grads_unwritten; /* (n_layers) host: the layer's expert gradients hold nothing yet
                              this step (the caller did not zero them, mg_gpt_expert_grads_
                              unwritten): its next backward writes them over, then clears it */
    int n_layers;          /* MoE layers on this rank */
    int Rp;                /* rows of this rank's permuted pairs: N x k, or E x capacity */
    int R;                 /* rows of the experts' input: Rp, or with expert parallelism what
                              the all-to-all may deliver at most */
    int capacity;          /* tokens per expert kept, 0: dropless */
    mg_comm *ep;           /* the expert-parallel group (set at bind), NULL: one rank */
    const mg_peer_window *peer; /* the group's peer-mapped receive slabs (R x H each, set at
                                   bind where the backend and the group have them), NULL: the
                                   slabs travel by the group's all-to-all */
    bool train;                 /* this pass trains: aux losses, load, expert bias */
    float *stats;               /* (2) backend fp32: the logged aux loss and z-loss accumulate */
    float loss_weight, stat_weight; /* mg_moe_routing's, set by the trainer */
    const float *loss_scale;        /* mg_moe_routing's (backend memory, NULL: 1), the trainer's */
} mg_moe_ws;

/* Workspace offsets (transient, shared by all layers and the head). */
typedef struct {
    size_t dres;               /* (Nl,H) gradient of the residual stream */
    size_t dio;                /* (Nl,H) pipeline: the next chunk's d(output), received while
                                  dres still holds the last d(input) being sent */
    size_t dln;                /* (N,H) gradient of a norm's (gathered) output: partial under TP */
    size_t datt, dqkv;         /* (N, attn_l), (N, qkv_l) */
    size_t dfc1, dact;         /* (N, fc1_l), (N, F_l) (SwiGLU only) */
    size_t part;               /* (N,H) tp > 1: a row-parallel product before its reduction, or a
                                  gathered residual-stream gradient */
    size_t ddrop;              /* (Nl,H) hidden dropout: a layer output's gradient through the
                                  mask (mg_block_row_parallel_dout) */
    size_t logits, losses;     /* (N, V_l), (N) fp32 */
    size_t ce;                 /* tp > 1: (3N) fp32 row maxima, then sums (2N) */
    size_t rope_cos, rope_sin; /* (S, rd/2) fp32 */
    size_t ones, norm_w;       /* (H) each, --apply-layernorm-1p: ones, and 1 + w of the norm
                                  running (the stored weight w is zero-centred) */
    size_t rc_out;             /* (Nl,H) recomputation: where a layer's forward run again puts
                                  the output nobody reads */
    /* fp8 linears (model/fp8.h): their state (fp32 [amax | scale | history] of fp8_tensors
       tensors; model state, not transient), the inverses of the scales the casts used (fp32,
       one per tensor, 16 bytes apart), the casts' bytes of an input and an output gradient
       (each row-major, then transposed), and every fp8 layer's weight copies (the bytes and
       the transpose of each linear's weight, cast once per pass) */
    size_t fp8_state, fp8_sinv, fp8_x, fp8_dy, fp8_wcopy;
    size_t fp8_xt;  /* every slot's fp8 layers' linears' inputs, transposed, as the training
                       forward cast them, for the weight gradients (model/fp8.h) */
    size_t fp8_now; /* --fp8-recipe tensorwise: (3) fp32 [amax | scale | history] of the cast
                       in progress */
    size_t fp8_bxs, fp8_bdys; /* --fp8-recipe blockwise: the block scales' inverses of an input's
                                 and an output gradient's casts (fp32: along rows, then along
                                 columns), and every fp8 layer's weight tiles' (model/fp8.h) */
    size_t fp8_bws;
    /* blockwise: the kept input transposes' block scales, slot by slot as fp8_xt (model/fp8.h) */
    size_t fp8_xts;
    size_t fp8_pw; /* --fp8-param-gather with tensorwise scaling: (2, 3, fp8_tensors) fp32, the
                      dense and the expert weights' [amax | scale | history] (model/fp8.h) */
    size_t fp8_ex, fp8_edy; /* the routed experts' input and output gradient bytes (R rows),
                               each row-major, then the grouped transpose (model/fp8.h) */
    size_t fp8_ext;         /* every slot's fp8 layers' routed experts' inputs (fc1's, then fc2's),
                               transposed in groups, as the training forward cast them (model/fp8.h) */
    int fp8_tensors;
    bool fp8_keep_inputs;  /* fp8_xt is there */
    bool fp8_keep_experts; /* fp8_ext is there */
    bool fp8_sp_bytes;     /* SP gathers the norms' outputs as fp8 bytes (model/fp8.h) */
} mg_block_ws;

/* The pass in progress, from the slot's (gpt.c sets it before a chunk's forward or backward):
 * its dropout (core/dropout.h; off for evaluation and generation) and, for packed documents,
 * the microbatch's positions and document starts (train/trainer_docs.h). */
typedef struct {
    int slot;                 /* the slot whose activations it uses (a microbatch in flight) */
    bool on;                  /* a training pass: --attention-dropout and --hidden-dropout apply */
    int mb;                   /* stream masks: the microbatch's number in this rank's step */
    const int64_t *iteration; /* positional masks: the training iteration (backend memory) */
    int sample0;              /* positional masks: the microbatch's first sequence, its index in
                                 the global batch */
    const int32_t *pos;       /* (N) backend: each token's position (--reset-position-ids: the
                                 learned embedding's row, RoPE's angle); NULL: i % S */
    const int32_t *doc_start; /* (N) backend: the first token of each token's document in its
                                 sequence (--reset-attention-mask); NULL: plain causal */
} mg_block_pass;

/* What every layer shares; gpt.c fills it at plan (shapes, arenas) and bind (backend, buffers). */
typedef struct {
    const mg_model_config *c;
    mg_backend *be;
    size_t att_saved; /* bytes one layer's attention saves for its backward (model/gpt.h's
                         mg_gpt_target) */
    bool fp8_grouped; /* the backend has the fp8 grouped GEMM (model/gpt.h's mg_gpt_target) */
    bool fp8_blocks;  /* the backend has block-scaled fp8 products (the same) */
    const mg_tp *tp;
    int B, N, Nl;
    size_t esz; /* bytes per activation element */
    const mg_param_table *params;
    void *param_buf;        /* (params->numel) compute dtype */
    uint8_t *fp8_param_buf; /* --fp8-param-gather: (params->numel - params->fp8_from) the fp8
                               weights' bytes (model/fp8.h), the trainer's; NULL: none */
    float *grad_buf;        /* (params->numel) fp32 */
    mg_arena *acts, *work;
    const mg_block_ws *ws;
    const mg_moe_ws *moe;           /* NULL in a dense model */
    const mg_model_rng *rng;        /* the dropout streams (set at bind) */
    mg_block_pass pass;             /* the pass's dropout */
    struct mg_layer_graphs *graphs; /* per-layer graphs (model/layer_graphs.h; the trainer's),
                                       NULL: none */
    bool recompute; /* the forward runs again in the backward (full recomputation, or the moe
                       module): no per-layer graphs, no statistics, the MoE routing reused */
} mg_block_ctx;

static inline void *mg_block_act(const mg_block_ctx *x, size_t off) {
    return mg_arena_ptr(x->acts, off);
}
static inline void *mg_block_ws_ptr(const mg_block_ctx *x, size_t off) {
    return mg_arena_ptr(x->work, off);
}
/* Parameter i's values / gradient; NULL for i < 0 (a parameter the model does not have). */
static inline void *mg_block_param(const mg_block_ctx *x, int i) {
    return i < 0 ? NULL : (char *)x->param_buf + x->params->p[i].offset * x->esz;
}
/* Parameter i's fp8 bytes (--fp8-param-gather), NULL where it has none. */
static inline uint8_t *mg_block_param8(const mg_block_ctx *x, int i) {
    if (i < 0 || !x->fp8_param_buf || x->params->p[i].fp8_tensor < 0) return NULL;
    return x->fp8_param_buf + (x->params->p[i].offset - x->params->fp8_from);
}
static inline float *mg_block_grad(const mg_block_ctx *x, int i) {
    return i < 0 ? NULL : x->grad_buf + x->params->p[i].offset;
}

/* Reserves one layer's slot in acts (sizes from the context's shapes): the dense MLP's
 * activations if `dense`, an MoE layer's if `moe` (a slot entry serves the layer at one position
 * of every chunk: it may need both). The fields recomputation `rc` frees take scratch's offsets
 * instead (the buffers every slot shares, mg_block_plan_scratch). */
mg_status mg_block_plan_slot(const mg_block_ctx *x, mg_layer_slot *s, bool dense, bool moe,
                             unsigned rc, const mg_layer_slot *scratch);
/* Reserves only the fields `rc` frees: the recomputation buffers of one layer. */
mg_status mg_block_plan_scratch(const mg_block_ctx *x, mg_layer_slot *s, bool dense, bool moe,
                                unsigned rc);

/* Under SP, products of a gathered input's rows beside the gather: the tensor-parallel group
 * gathers this rank's Nl rows (mine, width elements of dt each) into whole while rows() runs on
 * mine (first row tp rank x Nl); after the gather, rows() on the rows before this rank's and on
 * those after it, each read from whole (in: the range's first row; r0: its row number). */
typedef mg_status (*mg_block_rows_fn)(const mg_block_ctx *x, void *ctx, const void *in, int r0,
                                      int n);
mg_status mg_block_gather_beside(const mg_block_ctx *x, void *whole, const void *mine, size_t width,
                                 mg_dtype dt, mg_block_rows_fn rows, void *ctx);
/* LayerNorm or RMSNorm of the Nl local rows of `in` into the rows of `whole` (N,H) this rank
 * owns, then (SP) the all-gather that makes `whole` complete on every rank. mean is unused by
 * RMSNorm. With --apply-layernorm-1p the norm scales by 1 + w (w the stored weight, Megatron's
 * layernorm_zero_centered_gamma), formed in the workspace before the op; the backward's weight
 * gradient is w's as it stands, d(1 + w)/dw = 1. */
mg_status mg_block_norm_forward(const mg_block_ctx *x, void *whole, float *mean, float *rstd,
                                const void *in, int w, int b);
/* The norm (as mg_block_norm_forward: whole, mean, rstd, in, weight nw, bias nb) and the
 * column-parallel linear j of layer p that reads its output: out (N,OC) = whole w^T + bias, or
 * with gelu_pre (N,OC) the product there and out = gelu(gelu_pre). Under SP in a bf16 layer (with
 * --tp-comm-overlap) the gather runs on the tensor-parallel stream while the linear
 * computes the rows of this rank's own tokens, then the rest (parallel/tensor_parallel.h). */
mg_status mg_block_norm_linear_forward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                       void *whole, float *mean, float *rstd, const void *in,
                                       int nw, int nb, void *out, void *gelu_pre, const void *w,
                                       const void *bias, int OC);
/* The mirror: dwhole (N,H) is a column-parallel layer's input gradient (a partial sum over the
 * group); it is all-reduced (reduce-scattered to this rank's rows, SP), then the norm's backward
 * ACCUMULATES into dx (Nl,H) and the weight gradients. dwhole is clobbered. */
mg_status mg_block_norm_backward(const mg_block_ctx *x, void *dx, void *dwhole, const void *in,
                                 const float *mean, const float *rstd, int w, int b);
/* A column-parallel linear that reads a norm's (gathered) output: out (N,OC) = inp w^T + bias. */
typedef struct {
    int j;                  /* the layer's linear (model/fp8.h's mg_fp8_linear) */
    float *dw, *dbias;      /* its gradients (accumulate; dbias may be NULL) */
    const void *dout, *inp; /* (N,OC), the norm's output (N,IC) */
    const void *w;          /* (OC,IC) */
    int IC, OC;
    const void *dout_gelu_pre; /* NULL, or dout is the gradient of gelu(this) (N,OC), which
                                  the fp8 cast applies (mg_fp8_linear_backward) */
} mg_block_norm_linear;
/* The backward of that linear and then of the norm (mg_block_norm_backward's arguments): the
 * linear's input gradient into dwhole, whose reduction over the tensor-parallel group runs beside
 * the weight gradient's GEMM (parallel/tensor_parallel.h's mg_tp_reduce_begin; an fp8 layer
 * casts the gradient's rows before the reduction and its transpose after; a bf16 layer under SP
 * where the group maps its peers' memory computes the other ranks' rows first and pushes them,
 * mg_tp_push_begin), then the norm's backward. */
mg_status mg_block_norm_linear_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                        const mg_block_norm_linear *l, void *dx, void *dwhole,
                                        const void *in, const float *mean, const float *rstd, int w,
                                        int b);
/* fn(ctx), part `part` (model/layer_graphs.h's mg_layer_part) of global layer `layer` in
 * direction `backward`: through its per-layer graph in a training pass that has them, else
 * directly. */
mg_status mg_block_graph(const mg_block_ctx *x, int layer, int part, bool backward,
                         mg_status (*fn)(void *ctx), void *ctx);
/* The dropout at `site` (MG_DROPOUT_*) of global layer `layer` in this pass, for an op over this
 * rank's heads (attention) or residual rows (hidden): false when there is none (probability 0,
 * or not a training pass). Stream masks (model/rng.h) draw attention dropout from the
 * model-parallel stream, as Megatron forks its tracker around core attention, and hidden dropout
 * from the default stream (the tensor-parallel ranks drop the same elements of the activations
 * they all hold), or with sequence parallelism from the model-parallel one (each rank holds other
 * rows; Megatron runs the whole block in the fork then). */
bool mg_block_dropout(const mg_block_ctx *x, int layer, int site, mg_dropout *d);
/* out (Nl,H) = residual + bias + inp (N,IC) @ w^T (w: the weight's values, (H,IC)), the product
 * (layer p's linear j, model/fp8.h's mg_fp8_linear: in fp8 where the layer is) reduced over the
 * group (summed onto this rank's rows, SP); with drop (hidden dropout, NULL: none) Megatron's
 * bias-dropout-add: out = residual + dropout(bias + product). residual must not alias out.
 * Under SP a bf16 layer whose group maps its peers' memory computes the other ranks' rows first
 * and pushes them while it computes its own (mg_tp_push_begin); else --tp-comm-overlap reduces
 * the product in chunks beside their GEMMs. */
mg_status mg_block_row_parallel_forward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                        void *out, const void *inp, const void *w, int b,
                                        const void *residual, int IC, const mg_dropout *drop);
/* The gradient of a row-parallel layer's output as its backward needs it, whole (N,H): dout
 * (Nl,H) itself, or (SP) the rows of the group gathered into the workspace; with drop (the
 * forward's) through the mask first, on this rank's rows (those the forward's dropout_add drew
 * it over): the gradient of the product and bias before the dropout. */
mg_status mg_block_row_parallel_dout(const mg_block_ctx *x, const void *dout,
                                     const mg_dropout *drop, const void **whole);

/* The backward of row-parallel linear j of layer p (out = inp w^T, IC inputs, H outputs) from
 * its output's gradient dout (Nl,H) through drop (as mg_block_row_parallel_dout): dinp (N,IC;
 * with gelu_pre through the GELU, as linear_backward), dw and dbias (accumulate). Under SP in a
 * bf16 layer (with --tp-comm-overlap) the gradient's gather runs on the
 * tensor-parallel stream while dinp's rows of this rank's own tokens are computed from its own
 * rows; then the other rows, and the weight's and bias's gradients over all of them. */
mg_status mg_block_row_parallel_backward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                         const void *dout, const mg_dropout *drop, void *dinp,
                                         float *dw, float *dbias, const void *inp, const void *w,
                                         const void *gelu_pre, int IC);

/* x -> mid = x + proj(attention(norm1(x))) */
mg_status mg_attention_forward(const mg_block_ctx *x, const mg_layer_params *p,
                               const mg_layer_slot *s);
/* dres (Nl,H) holds d(mid) on entry and d(x) on exit. */
mg_status mg_attention_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                const mg_layer_slot *s, void *dres);
/* mid -> out = mid + fc2(act(fc1(norm2(mid)))); out NULL: up to the activation (what the
 * backward reads, recomputed) */
mg_status mg_mlp_forward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                         void *out);
/* dres holds d(out) on entry and d(mid) on exit. */
mg_status mg_mlp_backward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                          void *dres);
/* An MoE layer's MLP: mid -> out = mid + sum of the routed experts' outputs weighted by the
 * router (+ the shared experts) (model/moe.c). The backward as mg_mlp_backward's. With
 * x->recompute (the forward again, in the backward) the slot's routing is reused: no router,
 * no statistics, no exchange of counts or ECHO plan. */
mg_status mg_moe_forward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                         void *out);
mg_status mg_moe_backward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                          void *dres);

#endif
