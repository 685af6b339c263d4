/* Model shapes derived from the run configuration (after mg_config_validate resolved defaults) and
 * the tensor-parallel layout: the global shapes (the unsplit model's; parameter metadata,
 * checkpoints, `plan`) and this rank's local ones, which every computation uses. With tp = 1 the
 * local shapes are the global ones.
 *   heads, query groups, QKV rows, FFN width, vocabulary rows: divided by tp (column-parallel
 *   outputs, row-parallel inputs, vocab-parallel embedding and output layer);
 *   rows of the residual stream: N / tp under sequence parallelism (mg_model_config_rows).
 * Exports: mg_model_config, mg_model_config_from, mg_model_config_num_params,
 * mg_model_config_rows. Needs: core, include/megatron.h. */
#ifndef MG_MODEL_CONFIG_H
#define MG_MODEL_CONFIG_H

#include "backend/backend.h"
#include "core/echo_plan.h"
#include "core/status.h"

#include <stdbool.h>

/* Mixture of experts (model/moe.h): an MoE layer's MLP is E experts of width F, k per token,
 * plus optional shared experts; expert-parallel rank ep_rank of ep holds experts
 * [e0, e0 + E_l). `route` holds the routing flags; the model fills in its token counts and the
 * trainer its loss weights. */
typedef struct {
    int E, k;                 /* experts per MoE layer (0: a dense model), experts per token */
    int n_layers;             /* MoE layers of the whole model (--moe-layer-freq) */
    int F, fc1;               /* an expert's MLP width and its fc1 rows (2F with SwiGLU) */
    int shared_F, shared_fc1; /* the shared experts' MLP (0: none) */
    int ep, ep_rank, E_l, e0; /* expert parallelism */
    double capacity_factor;   /* < 0: dropless */
    bool pad;                 /* --moe-pad-expert-input-to-capacity */
    bool expert_bias;         /* aux-loss-free balancing */
    float bias_rate;          /* --moe-router-bias-update-rate */
    mg_moe_dispatcher dispatcher;
    bool force_balance;  /* --moe-router-force-load-balancing: random logits (model/moe.c) */
    double budget;       /* --moe-expert-rank-capacity-factor: receive rows for budget x the
                            balanced share; 0: the worst case (model/moe.h) */
    bool echo;           /* --moe-enable-echo: hot experts cloned into spare slots (model/moe.c) */
    bool shared_overlap; /* --moe-shared-expert-overlap: the shared experts beside the first
                            token exchange (model/moe.c) */
    mg_echo_params echo_p; /* its planner's settings (core/echo_plan.h) */
    mg_moe_routing route;
} mg_moe_config;

/* Full recomputation's method (--recompute-method): none, uniform groups of rc_layers layers
 * each keeping its input, or block: the first rc_layers layers of each model chunk. */
typedef enum { MG_RC_NONE, MG_RC_UNIFORM, MG_RC_BLOCK } mg_rc_method;

typedef struct {
    int L;        /* layers */
    int H;        /* hidden size */
    int F;        /* ffn hidden size (per gate with SwiGLU) */
    int nq, ng;   /* query heads, query groups (= key/value heads) */
    int hd;       /* head dim (kv channels) */
    int rd;       /* RoPE's rotated channels per head: int(hd * --rotary-percent), even, <= hd */
    int S;        /* sequence length */
    int P;        /* max position embeddings (rows of the learned position table) */
    int V;        /* padded vocabulary (rows of the embedding and output layer) */
    int qkv_dim;  /* ng * (nq/ng + 2) * hd */
    int attn_dim; /* nq * hd */
    int fc1_dim;  /* F, or 2F with SwiGLU */
    mg_norm_kind norm;
    bool norm_1p; /* --apply-layernorm-1p: norm weights stored as w, applied as 1 + w */
    mg_pos_kind pos;
    bool swiglu, bias, tied;
    float eps;
    double rope_base;
    double init_std;
    uint64_t seed;
    double attn_dropout, hidden_dropout; /* probabilities (training passes only: model/block.h) */
    bool dropout_positional; /* --layout-invariant-dropout: positional masks, else Megatron's
                                streams (core/dropout.h, model/rng.h) */
    /* tensor parallelism: this rank (tp_rank of tp), sequence parallelism, local shapes */
    int tp, tp_rank;
    bool sp;
    bool tp_bulk_wgrad; /* TP > 1 without --no-tp-comm-bulk-wgrad */
    bool tp_overlap_ag; /* SP with --tp-comm-overlap, without --no-tp-comm-overlap-ag */
    bool tp_overlap_rs; /* TP > 1 with --tp-comm-overlap, without --no-tp-comm-overlap-rs */
    int nq_l, ng_l;     /* nq / tp, ng / tp */
    int qkv_l;          /* qkv_dim / tp: this rank's query groups, whole */
    int attn_l;         /* attn_dim / tp */
    int F_l, fc1_l;     /* F / tp, fc1_dim / tp */
    int V_l, v0;        /* vocabulary rows [v0, v0 + V_l) */
    /* fp8 linears (model/fp8.h): the layers config/flags.h's mg_config_fp8_layer picks; the
     * gradients' format (core/fp8.h's mg_fp8_format: e5m2 with hybrid; the forward's tensors are
     * always e4m3), and delayed scaling's settings (core/fp8_scaling.h) */
    int fp8_bwd;
    int fp8_len, fp8_margin, fp8_algo;
    bool fp8_current; /* --fp8-recipe tensorwise: each cast scales by its tensor's amax now */
    bool fp8_block;   /* --fp8-recipe blockwise: each 1 x 128 block (inputs, gradients) or
                         128 x 128 tile (weights) by its own amax now (core/fp8_block.h) */
    bool fp8_wgrad;   /* the weight gradients from fp8 bytes (not under --no-fp8-wgrad) */
    bool fp8_experts; /* an fp8 MoE layer's routed experts in fp8 too (model/fp8.h) */
    bool fp8_params;  /* --fp8-param-gather: the fp8 linears' weights come as fp8 bytes, cast
                         after each update and gathered in fp8 (model/fp8.h) */
    /* activation recomputation (model/recompute.h): the selective modules (config/flags.h's
     * MG_RECOMPUTE_*), or full recomputation of the layers the method picks */
    unsigned rc_modules;
    mg_rc_method rc_full;
    int rc_layers;      /* --recompute-num-layers */
    bool rc_distribute; /* --distribute-saved-activations (tp > 1, no SP) */
    mg_moe_config moe;
} mg_model_config;

/* Shapes of tensor-parallel rank tp_rank of c->tensor_model_parallel_size (sequence parallel as
 * c->sequence_parallel says, off for one rank). Fails with MG_ERR_USAGE if the shapes are
 * inconsistent or do not split over the group (the flag checks should catch it first). */
mg_status mg_model_config_from(mg_model_config *m, const mg_config *c, int tp_rank);
/* This rank's experts under expert-parallel rank ep_rank of the layout's size. */
void mg_model_config_set_ep(mg_model_config *m, int ep_rank);
/* Total number of trainable parameters of the whole model (tied embedding counted once). */
int64_t mg_model_config_num_params(const mg_model_config *m);
/* Rows of the residual stream on this rank for N tokens: N, or N / tp with sequence parallelism. */
static inline int mg_model_config_rows(const mg_model_config *m, int N) {
    return m->sp ? N / m->tp : N;
}

#endif
