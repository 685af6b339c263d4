/* One rank's memory plan: every buffer of the trainer, reserved into one arena per lifetime class
 * (parameters, master weights, gradients, optimizer state, activations, workspace, batch) by one
 * function, mg_memory_plan_reserve. The trainer calls it and commits the arenas
 * (train/trainer_memory.h); `megatron plan` calls it through mg_memory_stage_estimate and reads
 * the sizes without committing anything, so the prediction and the trainer cannot disagree. What
 * the plan needs of the backend are values (model/gpt.h's mg_gpt_target): a prediction needs no
 * device.
 * Exports: mg_memory_plan, mg_memory_plan_reserve, mg_memory_plan_free, mg_memory_stage,
 * mg_memory_stage_estimate, mg_memory_tp_window_bytes, mg_memory_ep_window_bytes,
 * mg_memory_dp_window_bytes. Needs: model/gpt,
 * train/buffers, train/optimizer, parallel/pipeline. */
#ifndef MG_TRAIN_MEMORY_H
#define MG_TRAIN_MEMORY_H

#include "core/arena.h"
#include "core/step_rules.h"
#include "model/gpt.h"
#include "train/optimizer.h"

#define MG_MEMORY_STATS 16 /* fp32 step statistics the trainer keeps (at least MG_STAT_END) */

/* The step statistics and the step-control block side by side, so one copy reads both. */
typedef struct {
    float stats[MG_MEMORY_STATS];
    mg_step_ctl ctl;
} mg_memory_stats_block;

/* The arrays of a full-iteration graph's staged inputs (train/trainer_graph.h). */
typedef enum {
    MG_STAGED_TOKENS = 0,
    MG_STAGED_TARGETS,
    MG_STAGED_POSITIONS,
    MG_STAGED_DOC_STARTS,
    MG_STAGED_DLOSS,
    MG_STAGED_LOSS_W,
    MG_STAGED_ARRAYS
} mg_staged_array;

typedef struct {
    mg_arena params, master, grads, optim, acts, work, io;
    bool masters; /* fp32 master weights: the compute dtype is not fp32 (else master is empty and
                     never committed: the parameters are the masters) */
    /* where each buffer lies in its arena */
    size_t off_params, off_master, off_grads; /* (o.params_numel: train/optimizer.h) compute dtype,
                                                 (o.numel) f32, (numel) f32 */
    size_t off_grad_stage, grad_stage_bytes;  /* gradients' arena: --grad-reduce-in-bf16's copy */
    size_t off_params8;                       /* (numel - fp8_from) bytes: --fp8-param-gather's fp8
                                                 weights (model/params.h's fp8_from) */
    size_t off_pipe;                          /* the pipeline's message buffers (workspace) */
    size_t off_tokens, off_targets;           /* (n_slots, N) int32 each */
    size_t off_positions, off_doc_starts;     /* (n_slots, N) int32 with their flags, else empty */
    size_t off_dloss; /* (N) f32, or (n_slots, N) with --eod-mask-loss and then each slot's
                         reported-loss weights (n_slots, N); then (N) f32: the weights of the
                         head running, times the loss scale */
    /* a graphed step's inputs, (staged microbatches, N) 4-byte values each: ids, labels, positions
     * and document starts with their flags, gradient and loss weights with --eod-mask-loss; an
     * array's bytes are 0 where it is absent */
    size_t off_staged[MG_STAGED_ARRAYS], staged_array_bytes[MG_STAGED_ARRAYS];
    size_t staged_bytes; /* all of them (0 without a full-iteration graph) */
    size_t off_stats;    /* (1) mg_memory_stats_block: the statistics and the step control */
} mg_memory_plan;

/* Reserves every part of one rank's plan into p's arenas (initialised here): model g's parameters
 * in target.compute and fp32 gradients, fp32 masters where target.compute is not fp32, the
 * optimizer state of o (initialised for this rank's shards), n_slots activation slots and the
 * workspace (g is planned here, for micro-batches of c->micro_batch_size), pipe_bytes of pipeline
 * message buffers, and the batch (N = micro batch x sequence tokens): input ids, labels, the
 * packed documents' arrays, the loss weights and the step statistics and control; with
 * staged_microbatches > 0 (a full-iteration graph) also that many microbatches' ids, labels and
 * document arrays; in the gradients' arena grad_stage_bytes for --grad-reduce-in-bf16's bucket
 * copy (mg_train_buffers_bf16_stage). */
mg_status mg_memory_plan_reserve(mg_memory_plan *p, const mg_config *c, mg_gpt *g, mg_optimizer *o,
                                 mg_gpt_target target, int n_slots, size_t pipe_bytes,
                                 int staged_microbatches, size_t grad_stage_bytes);
/* The arenas in the order they are committed (the master arena's place too, committed or not). */
#define MG_MEMORY_ARENAS 7
void mg_memory_plan_arenas(mg_memory_plan *p, mg_arena *out[MG_MEMORY_ARENAS]);
void mg_memory_plan_free(mg_memory_plan *p);

typedef struct {
    int pp_rank;
    int64_t params;        /* this rank's parameters (tensor-parallel rank 0's shards) */
    size_t weights;        /* the parameters in the compute dtype */
    size_t grads;          /* fp32 gradients */
    size_t master_weights; /* fp32 masters (0 where the parameters are fp32) */
    size_t optimizer;      /* Adam's moments (this data-parallel rank's shard) and scalars */
    size_t activations;    /* slots x slot_bytes + recompute_bytes */
    int slots;
    size_t slot_bytes;
    size_t recompute_bytes; /* the buffers activation recomputation shares over the slots */
    size_t workspace;       /* transient buffers, the pipeline's gradient buffers included */
    size_t batch;           /* input ids, labels, loss weights, statistics */
    size_t graph_inputs;    /* of batch: every microbatch's inputs a full-iteration graph reads */
    size_t total;
    /* outside the arenas and the total: the peer-mapped windows a run maps where the group's
     * ranks share a host (mg_memory_tp_window_bytes, mg_memory_dp_window_bytes per buffer, plus
     * mg_memory_ep_window_bytes on a device) */
    size_t peer_windows;
} mg_memory_stage;

/* Pipeline rank pp_rank's memory (tensor-parallel rank 0, data-parallel rank 0 of dp_size,
 * expert-parallel rank 0 of --expert-model-parallel-size) for parameters in `compute` (MG_F32:
 * the cpu backend, no master weights; else a cuda backend with fp32 masters): the committed sizes
 * of mg_memory_plan_reserve's arenas for the model, buffers, optimizer shards and schedule the
 * trainer builds for that rank. */
mg_status mg_memory_stage_estimate(const mg_config *c, int pp_rank, int dp_size, mg_dtype compute,
                                   mg_memory_stage *out);

/* Bytes per rank of the peer-mapped windows (train/trainer_peer.h) of model g (planned) in
 * dtype compute, 0 where the layout has none. They are mapped by the communication library, not
 * committed from an arena: the tensor-parallel group's slots under sequence parallelism (one per
 * rank, each a rank's rows of the hidden activations of a micro-batch of mbs) and the
 * expert-parallel group's receive slabs (the MoE layers' worst-case rows). */
size_t mg_memory_tp_window_bytes(const mg_gpt *g, int mbs, mg_dtype compute);
size_t mg_memory_ep_window_bytes(const mg_gpt *g, mg_dtype compute);
/* A gradient buffer's data-parallel window (MG_DP_EXCHANGE=copies, train/trainer_peer.c): with the
 * distributed optimizer over more than one rank and buckets that overlap the backward
 * (--overlap-grad-reduce, several buckets), its largest bucket's fp32 bytes, at most
 * MG_MEMORY_DP_WINDOW_MAX elements (a larger bucket goes through the group's collectives); else
 * 0: one bucket of the whole buffer has nothing to hide behind, and a window of it would double
 * the gradients' memory. */
#define MG_MEMORY_DP_WINDOW_MAX ((int64_t)1 << 28)
size_t mg_memory_dp_window_bytes(const mg_grad_buffer_layout *l);

#endif
