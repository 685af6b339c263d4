/* The memory one rank of each pipeline stage needs, computed without a device: the same model
 * build, buffer layout, optimizer shards, activation slots and workspace the trainer reserves, for
 * `megatron plan` ("memory" per pipeline rank) and the trainer's start-up line. Also the one place
 * the trainer's parameter and gradient buffers get their layout (mg_train_buffer_layout).
 * Exports: mg_memory_stage, mg_memory_stage_estimate, mg_train_buffer_layout.
 * Needs: model/gpt, parallel/grad_buffer, parallel/pipeline, train/optimizer. */
#ifndef MG_TRAIN_MEMORY_H
#define MG_TRAIN_MEMORY_H

#include "model/gpt.h"
#include "parallel/grad_buffer.h"

#define MG_MEMORY_STATS 8 /* fp32 step statistics the trainer keeps (at least MG_STAT_COUNT) */

typedef struct {
    int pp_rank;
    int64_t params;        /* this rank's parameters (tensor-parallel rank 0's shards) */
    size_t weights;        /* the parameters in the compute dtype */
    size_t grads;          /* fp32 gradients */
    size_t master_weights; /* fp32 masters (0 where the parameters are fp32) */
    size_t optimizer;      /* Adam's moments (this data-parallel rank's shard) and scalars */
    size_t activations;    /* slots x slot_bytes */
    int slots;
    size_t slot_bytes;
    size_t workspace; /* transient buffers, the pipeline's gradient buffers included */
    size_t batch;     /* input ids, labels, loss weights, statistics */
    size_t total;
} mg_memory_stage;

/* The trainer's layout of the parameter and gradient buffers (parallel/grad_buffer.h) for a
 * data-parallel size: Megatron's, with parameters on 64-element starts, the tied embedding's
 * pipeline copy in a bucket of its own and one bucket on stages after the first; pt's offsets
 * become the layout's. */
mg_status mg_train_buffer_layout(mg_param_table *pt, const mg_config *c, int dp_size, int pp_rank,
                                 mg_grad_buffer_layout *out);

/* Pipeline rank pp_rank's memory (tensor-parallel rank 0, data-parallel rank 0 of dp_size) for
 * parameters in `compute` (MG_F32: no master weights; MG_BF16: fp32 masters). */
mg_status mg_memory_stage_estimate(const mg_config *c, int pp_rank, int dp_size, mg_dtype compute,
                                   mg_memory_stage *out);

#endif
