/* The parameter registry: every trainable tensor is described by metadata — name, global and
 * local shape, tensor-parallel split, weight decay, initialisation — and found by name, never by
 * index arithmetic. Offsets into the contiguous parameter (and gradient) buffer are assigned by
 * mg_params_layout; initialisation draws from the counter-based RNG keyed by (seed, parameter id,
 * global element index), so a shard initialises exactly its slice of the unsharded tensor.
 *
 * Tensor parallelism (a table made for rank tp_rank of tp_size, mg_params_set_tp): a parameter
 * split along dimension d holds 1/tp_size of it. Its `tp_split_chunks` stacked blocks along d
 * (SwiGLU's [gate; up]: 2) are split independently, rank r holding rows [r*c/T, (r+1)*c/T) of
 * each block of c rows, the blocks kept stacked: local row i of block b is global row
 * b*c + r*c/T + i. Megatron's fused QKV keeps whole query groups together along its rows, so one
 * block gives each rank complete groups. mg_param_global_index maps a local element to its
 * global one. A replicated parameter (tp_split_dim -1) is whole on every rank; with sequence
 * parallelism the replicated norm weights see only this rank's tokens, so their gradients are
 * partial sums over the tensor-parallel group (`sequence_parallel`, Megatron's attribute).
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
    int64_t shape[2];        /* this rank's (local) shape: (out, in) for linear weights */
    int64_t global_shape[2]; /* the unsplit tensor's shape (initialisation, checkpoints) */
    int64_t numel;           /* local elements */
    int tp_split_dim;        /* dimension split by tensor parallelism, -1 for replicated */
    int tp_split_chunks;     /* stacked blocks split independently (2 for SwiGLU's [gate; up]) */
    int tp_rank, tp_size;    /* the table's */
    bool sequence_parallel;  /* gradient is a partial sum over the TP group (see above) */
    bool weight_decay;       /* false for biases and norm weights */
    /* pipeline parallelism with tied embeddings: the word embedding (first stage) and its copy,
     * the output layer (last stage), whose gradients are summed over the embedding group; the
     * copy is `shared` (Megatron's attribute): the gradient norm leaves it out */
    bool embedding_group, shared;
    /* its rows are the vocabulary padded to a multiple of --make-vocab-size-divisible-by x TP
     * (the embedding, the output layer): another layout may have more or fewer of them */
    bool vocab_rows;
    /* the word embedding and the output layer (its pipeline copy too): Megatron's
     * is_embedding_or_output_parameter, which --decoupled-lr gives its own lr
     * (train/lr_schedule.h) */
    bool embedding_or_output;
    /* an expert's weight (Megatron's allreduce = False): this expert-parallel rank's own, its
     * gradient reduced over the expert-data-parallel group, not the data-parallel one */
    bool expert;
    /* the weight of an fp8 linear whose bytes --fp8-param-gather keeps and gathers (model/fp8.h's
     * mg_fp8_mark_weights): its fp8 tensor (the scale and amax it casts with); -1: none */
    int fp8_tensor;
    mg_init_kind init;
    float init_std;
    uint32_t id;   /* RNG stream: mg_param_id(name) */
    size_t offset; /* elements from the start of the parameter buffer */
} mg_param_meta;

typedef struct {
    mg_param_meta *p;
    int n, cap;
    size_t numel;         /* buffer length in elements, including alignment padding */
    size_t fp8_from;      /* --fp8-param-gather: elements [fp8_from, numel) hold the fp8-gathered
                             weights (train/buffers.h puts them last); numel: none */
    int tp_rank, tp_size; /* 0, 1 unless mg_params_set_tp */
} mg_param_table;

/* Makes the parameters registered afterwards rank tp_rank's shards of tp_size (default 0, 1). */
void mg_params_set_tp(mg_param_table *t, int tp_rank, int tp_size);
/* Registers a parameter of global shape (d0, d1); *index_out receives its row in the table.
 * A split dimension that tp_size x split_chunks does not divide is MG_ERR_USAGE naming it. */
mg_status mg_params_add(mg_param_table *t, const char *name, int ndim, int64_t d0, int64_t d1,
                        int split_dim, int split_chunks, bool weight_decay, mg_init_kind init,
                        float std, int *index_out);
/* Assigns offsets in registration order, each aligned to MG_PARAM_ALIGN elements. */
void mg_params_layout(mg_param_table *t);
/* Moves parameter i to offset[i] (elements) in a buffer of numel elements: another layout's, such
 * as the data-parallel grad buffer's (parallel/grad_buffer.h). Fails with MG_ERR_INTERNAL, leaving
 * the table as it was, when a parameter would leave the buffer or overlap another. */
mg_status mg_params_relayout(mg_param_table *t, const size_t *offset, size_t numel);
/* Elements of every parameter in the table (this rank's shards; alignment padding excluded). */
int64_t mg_params_count(const mg_param_table *t);
/* The global (row-major, unsplit) element index of local element j of m. */
int64_t mg_param_global_index(const mg_param_meta *m, int64_t j);
/* Index of the named parameter, or -1. */
int mg_params_find(const mg_param_table *t, const char *name);
/* Writes the initial values of every parameter into buf (fp32 host, t->numel elements). */
void mg_params_init(const mg_param_table *t, uint64_t seed, float *buf);
void mg_params_free(mg_param_table *t);

#endif
