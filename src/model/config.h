/* Model shapes derived from the run configuration (after mg_config_validate resolved defaults).
 * Exports: mg_model_config, mg_model_config_from. Needs: core, include/megatron.h. */
#ifndef MG_MODEL_CONFIG_H
#define MG_MODEL_CONFIG_H

#include "core/status.h"

#include <stdbool.h>

typedef struct {
    int L;        /* layers */
    int H;        /* hidden size */
    int F;        /* ffn hidden size (per gate with SwiGLU) */
    int nq, ng;   /* query heads, query groups (= key/value heads) */
    int hd;       /* head dim (kv channels) */
    int S;        /* sequence length */
    int P;        /* max position embeddings (rows of the learned position table) */
    int V;        /* padded vocabulary (rows of the embedding and output layer) */
    int qkv_dim;  /* ng * (nq/ng + 2) * hd */
    int attn_dim; /* nq * hd */
    int fc1_dim;  /* F, or 2F with SwiGLU */
    mg_norm_kind norm;
    mg_pos_kind pos;
    bool swiglu, bias, tied;
    float eps;
    double rope_base;
    double init_std;
    uint64_t seed;
} mg_model_config;

/* Fails with MG_ERR_USAGE if the shapes are inconsistent (the flag checks should catch it first). */
mg_status mg_model_config_from(mg_model_config *m, const mg_config *c);
/* Total number of trainable parameters (tied embedding counted once). */
int64_t mg_model_config_num_params(const mg_model_config *m);

#endif
