/* The memory one rank of each pipeline stage needs, computed without a device: the same model
 * build, buffer layout, optimizer shards, activation slots and workspace the trainer reserves, for
 * `megatron plan` ("memory" per pipeline rank) and the trainer's start-up line.
 * Exports: mg_memory_stage, mg_memory_stage_estimate.
 * Needs: model/gpt, train/buffers, parallel/pipeline, train/optimizer. */
#ifndef MG_TRAIN_MEMORY_H
#define MG_TRAIN_MEMORY_H

#include "model/gpt.h"
#include "parallel/grad_buffer.h"

#define MG_MEMORY_STATS 16 /* fp32 step statistics the trainer keeps (at least MG_STAT_END) */

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

/* Pipeline rank pp_rank's memory (tensor-parallel rank 0, data-parallel rank 0 of dp_size,
 * expert-parallel rank 0 of --expert-model-parallel-size) for
 * parameters in `compute` (MG_F32: no master weights; MG_BF16: fp32 masters). */
mg_status mg_memory_stage_estimate(const mg_config *c, int pp_rank, int dp_size, mg_dtype compute,
                                   mg_memory_stage *out);

#endif
