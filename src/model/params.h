/* The parameter registry: every trainable tensor is described by metadata — name, shape,
 * tensor-parallel split, weight decay, initialisation — and found by name, never by index
 * arithmetic. Offsets into the contiguous parameter (and gradient) buffer are assigned by
 * mg_params_layout; initialisation draws from the counter-based RNG keyed by (seed, parameter id,
 * global element index), so a shard can initialise exactly its slice of the unsharded tensor.
 * Exports: mg_param_meta, mg_param_table, mg_params_*. Needs: core. */
#ifndef MG_MODEL_PARAMS_H
#define MG_MODEL_PARAMS_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_PARAM_ALIGN 64 /* elements; each parameter starts on a multiple (Megatron's rule) */

typedef enum { MG_INIT_NORMAL = 0, MG_INIT_ZEROS, MG_INIT_ONES } mg_init_kind;

typedef struct {
    char name[96]; /* Megatron-core name, e.g. decoder.layers.0.self_attention.linear_qkv.weight */
    int ndim;      /* 1 or 2 */
    int64_t shape[2]; /* (out, in) for linear weights, as torch.nn.Linear */
    int64_t numel;
    int tp_split_dim;    /* dimension split by tensor parallelism, -1 for replicated */
    int tp_split_chunks; /* stacked blocks split independently (2 for SwiGLU's [gate; up]) */
    bool weight_decay;   /* false for biases and norm weights */
    mg_init_kind init;
    float init_std;
    uint32_t id;   /* RNG stream: mg_param_id(name) */
    size_t offset; /* elements from the start of the parameter buffer */
} mg_param_meta;

typedef struct {
    mg_param_meta *p;
    int n, cap;
    size_t numel; /* buffer length in elements, including alignment padding */
} mg_param_table;

/* Registers a parameter; *index_out receives its row in the table. */
mg_status mg_params_add(mg_param_table *t, const char *name, int ndim, int64_t d0, int64_t d1,
                        int split_dim, int split_chunks, bool weight_decay, mg_init_kind init,
                        float std, int *index_out);
/* Assigns offsets in registration order, each aligned to MG_PARAM_ALIGN elements. */
void mg_params_layout(mg_param_table *t);
/* Moves parameter i to offset[i] (elements) in a buffer of numel elements: another layout's, such
 * as the data-parallel grad buffer's (parallel/grad_buffer.h). Fails with MG_ERR_INTERNAL, leaving
 * the table as it was, when a parameter would leave the buffer or overlap another. */
mg_status mg_params_relayout(mg_param_table *t, const size_t *offset, size_t numel);
/* Index of the named parameter, or -1. */
int mg_params_find(const mg_param_table *t, const char *name);
/* Writes the initial values of every parameter into buf (fp32 host, t->numel elements). */
void mg_params_init(const mg_param_table *t, uint64_t seed, float *buf);
void mg_params_free(mg_param_table *t);

#endif
