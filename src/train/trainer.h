/* The training loop: Megatron's iteration (microbatches with gradient accumulation, global-norm
 * clipping, AdamW, the lr schedule), evaluation, logging, checkpointing, exit interval.
 * The trainer owns the memory plan: one arena per lifetime class (parameters, master weights,
 * gradients, optimizer state, activations, workspace, batch), sized before the first step and
 * committed once, in the backend's memory (device memory on CUDA). A step allocates nothing.
 *
 * Backends (--device): cpu trains in fp32 (the parameters are the fp32 masters); cuda keeps bf16
 * parameters (the compute dtype) plus fp32 master weights, fp32 gradients and Adam moments, on
 * the GPU numbered by the launcher's local rank. auto, the default, takes cuda when the build
 * has it and a GPU is present, else cpu; cfg.device then holds the backend actually used.
 * Both start from the same fp32 initial values (CUDA's parameters are their bf16 rounding), and
 * checkpoints hold the fp32 masters, so a resumed run continues bitwise on the same backend.
 *
 * Host synchronisation (CUDA): mg_trainer_step_async waits for nothing; the step's loss and
 * gradient norm stay in backend memory (t->stats) until mg_trainer_read_stats reads them all
 * with one copy, i.e. one host sync. mg_trainer_step = step_async + read_stats: exactly one host
 * sync per step. `megatron train` (run.c) reads only at log, save and exit points.
 * Data parallelism (mg_trainer_init_dp with the data-parallel group; parallel/ddp.h): every
 * rank holds the whole model. The parameter and gradient buffers take the grad buffer's layout
 * (parallel/grad_buffer.h: reverse registration order, 64-element starts, buckets; padded
 * buckets with the distributed optimizer). Of each global batch, dp rank r takes Megatron's
 * samples (MegatronPretrainingSampler): microbatch m is [first + (m*D + r)*mbs, +mbs), so
 * num_microbatches = global_batch / (mbs x D). The loss gradient of every token is 1/(tokens of
 * the global batch) — Megatron's 1/(tokens x microbatches) times its gradient scaling 1/D; with
 * --eod-mask-loss or --calculate-per-token-loss train/trainer_loss.h's weights — so
 * summing the buckets over the group gives the global batch's mean gradient; the reported loss
 * is summed over the group the same way. After backward: all-reduce per bucket (plain), or
 * reduce-scatter per bucket, AdamW on this rank's shard and all-gather of the updated
 * parameters (--use-distributed-optimizer). The gradient norm is global. Every rank ends a step
 * with the same parameters (with --overlap-param-gather: once the next forward, or
 * mg_trainer_sync_params, gathered them). The collectives and their overlap with backward and
 * forward are parallel/ddp.h's, driven by the model's hooks (model/gpt.h).
 * Exports: mg_trainer, mg_stat, mg_step_stats, mg_trainer_*, mg_train_run.
 * Needs: model, the train modules, data, backend, comm, parallel/grad_buffer, parallel/ddp. */
#ifndef MG_TRAIN_TRAINER_H
#define MG_TRAIN_TRAINER_H

#include "data/gpt_dataset.h"
#include "data/mock.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "parallel/ddp.h"
#include "parallel/grad_buffer.h"
#include "parallel/pipeline/run.h"
#include "train/batch_schedule.h"
#include "train/buffers.h"
#include "train/checkpoint.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

/* Where samples come from: sample `index` of a split as (S) input ids and (S) target ids.
 * The mock data is one source; the indexed datasets of the data issue are another; tests plug in
 * fixed batches. */
typedef struct {
    mg_status (*sample)(void *ctx, int64_t index, int32_t *tokens, int32_t *targets);
    void *ctx;
} mg_sample_source;

/* Step statistics, fp32 in backend memory (t->stats), read back together by one copy. */
typedef enum {
    MG_STAT_LOSS = 0,      /* mean loss of the last forward_backward (a step or an eval batch) */
    MG_STAT_GRAD_NORM,     /* pre-clipping gradient norm of the last step */
    MG_STAT_LOSS_SUM,      /* sum of the step losses since the last reset */
    MG_STAT_GRAD_NORM_SUM, /* sum of the grad norms since the last reset (a NaN or Inf sticks) */
    MG_STAT_EVAL_SUM,      /* sum of the eval batch losses of the last mg_trainer_evaluate */
    MG_STAT_MOE_AUX,       /* MoE: the last step's logged aux loss (model/moe.h) */
    MG_STAT_MOE_Z,         /* MoE: the last step's logged z-loss */
    MG_STAT_PARAMS_SUMSQ,  /* mg_trainer_params_norm: the dense parameters' sum of squares */
    MG_STAT_PARAMS_SUMSQ_EXPERT, /* and the experts' */
    MG_STAT_COUNT,               /* the statistics mg_trainer_read_stats reads */
    MG_STAT_ZEROS = 10, /* int64 (2), 8-byte aligned: mg_trainer_num_zeros's dense and expert
                           counts, over 4 fp32 slots */
    MG_STAT_END = 14    /* <= MG_MEMORY_STATS (train/memory.h) */
} mg_stat;

typedef struct {
    double loss, grad_norm;         /* the last step's */
    double loss_sum, grad_norm_sum; /* since the last reset */
    double moe_aux, moe_z;          /* MoE: the last step's logged aux loss and z-loss */
} mg_step_stats;

/* The groups of one rank (none owned; NULL: a group of one rank): data-parallel, tensor-parallel,
 * pipeline-parallel, and the embedding group (the first and last pipeline stage of a pipeline
 * group, NULL on the others: Megatron's _EMBEDDING_GROUP). */
typedef struct {
    mg_comm *dp, *tp, *pp, *embedding;
    mg_comm *ep, *edp; /* expert-parallel and expert-data-parallel (MoE models) */
} mg_train_groups;

typedef struct {
    mg_config cfg; /* cfg.device: the backend in use ("cpu" or "cuda"), never "auto" */
    mg_backend *be;
    mg_comm *dp;          /* the data-parallel group (not owned); NULL: one rank */
    int dp_rank, dp_size; /* 0, 1 without a group */
    mg_comm *tp;          /* the tensor-parallel group (not owned); NULL: one rank */
    int tp_rank, tp_size; /* 0, 1 without a group */
    mg_comm *pp;          /* the pipeline-parallel group (not owned); NULL: one stage */
    int pp_rank, pp_size; /* 0, 1 without a group */
    mg_comm *embd;        /* the embedding group (first and last stage), or NULL */
    mg_comm *ep;          /* the expert-parallel group (not owned); NULL: one rank */
    int ep_rank, ep_size; /* 0, 1 without a group */
    mg_comm *edp;         /* the expert-data-parallel group (dp / ep ranks; the
                             data-parallel group itself with one expert-parallel
                             rank); NULL: one rank */
    int edp_rank, edp_size;
    mg_pipeline pipe;                 /* the schedule walker (parallel/pipeline/run.h) */
    bool grad_sync_live;              /* in each chunk's last backward of the step: the hooks
                                         all-reduce the sequence-parallel gradients over tp and hand
                                         complete gradients to the data-parallel overlap */
    bool grad_sync_armed;             /* the data-parallel reduction is armed for this step */
    bool forward_only;                /* the pass running: an evaluation (the head in forward) */
    const mg_sample_source *pass_src; /* the pass's samples: global batch from pass_first */
    int64_t pass_first;
    mg_train_buffers bufs; /* the parameter and gradient buffers: dense, and the experts' */
    mg_ddp ddp[MG_TRAIN_BUFFERS_MAX]; /* each buffer's collectives (where its group has > 1 rank) */
    int gpu; /* the CUDA device (launcher's local rank); -1 on the CPU backend */
    mg_gpt model;
    mg_optimizer opt;
    mg_lr_schedule lr;
    mg_grad_scaler scaler; /* loss scaling (train/grad_scaler.h); off: scale 1, no skips */
    /* since the last mg_trainer_take_skips: steps the scaler skipped, of which those whose loss
     * was not finite (Megatron's "number of skipped/nan iterations"); whether the last step was
     * skipped (its grad norm is then None) */
    int64_t skipped_iters, nan_iters;
    bool last_skipped;
    mg_arena a_params, a_master, a_grads, a_optim, a_acts, a_work, a_io;
    mg_allocator be_alloc;           /* the arenas' memory on a device backend: be->alloc */
    const mg_allocator *arena_alloc; /* &be_alloc, or NULL (host memory) on the CPU backend */
    size_t planned_bytes;            /* all arenas together */
    size_t used_before_arenas;       /* device memory in use before the arenas (the CUDA context,
                                        the backend's workspace, libraries): the predicted peak is
                                        this plus planned_bytes; 0 on the cpu backend */
    size_t measured_state_bytes;     /* device memory the weight, gradient, master and optimizer
                                        arenas took (backends with memory_info), else 0 */
    size_t off_params, off_master, off_grads, off_tokens, off_targets, off_dloss, off_stats;
    void *params;       /* (numel) compute dtype */
    float *master;      /* (opt.numel) fp32 master weights of this rank's shard (local
                           coordinates, train/optimizer.h); NULL when params are fp32 (CPU) */
    float *grads;       /* (numel) fp32 */
    size_t *zero_spans; /* (2 n_zero_spans) MoE: the runs of grads a step zeroes (element offset,
                           count), train/trainer_moe.c; NULL: all of them */
    int n_zero_spans;
    int32_t *tokens;  /* (n_slots, N) backend: each activation slot's input ids */
    int32_t *targets; /* (n_slots, N) backend: each slot's labels */
    /* packed documents (train/trainer_docs.h), NULL without their flag: each slot's positions
     * (--reset-position-ids) and document starts (--reset-attention-mask) */
    int32_t *positions, *doc_starts; /* (n_slots, N) backend */
    size_t off_positions, off_doc_starts;
    int32_t docs_eod;   /* the end-of-document id they split at; -1: off */
    int32_t *host_docs; /* (2N) host staging: positions, then document starts */
    float *dloss;       /* (N) backend: d(loss)/d(token loss) = 1 / (N * microbatches * D); with
                           --eod-mask-loss (n_slots, N): each slot's masked weights
                           (train/trainer_loss.h) */
    float *stats;       /* (MG_MEMORY_STATS) backend fp32 (two int64 at MG_STAT_ZEROS) */
    float *loss;        /* (1) backend accumulator: &stats[MG_STAT_LOSS] */
    int32_t *host_tokens, *host_targets;            /* (N) */
    mg_mock_data train_data, valid_data, test_data; /* --mock-data */
    mg_gpt_data *gpt_data;                          /* --data-path: Megatron's GPT datasets */
    struct mg_gpt_split_source {
        mg_gpt_data *data;
        int split;
    } train_split, valid_split, test_split;
    /* one of the two above; tests may plug in others */
    mg_sample_source train_src, valid_src, test_src;
    /* --dataloader-type cyclic: Megatron's random sampler over each split, wrapping the sources
     * above (train/trainer_loader.h); NULL: single */
    struct mg_cyclic_loaders *cyclic;
    bool have_valid;     /* false when the validation split is empty */
    bool have_test;      /* the test split exists and --eval-iters > 0: evaluated after training */
    int32_t eod_id;      /* --eod-mask-loss: inputs with this id carry no loss; -1: no mask */
    int64_t pass_tokens; /* unmasked tokens of the global batch of the last pass (T) */
    double *slot_denom;  /* (n_slots) host: each slot's gradient weight is mask / slot_denom
                            (train/trainer_loss.h) */
    mg_train_state state;
    int num_microbatches; /* per rank, of the pass running: global batch / (micro batch x D) */
    /* the global batch of each iteration (--rampup-batch-size) and the run's length
     * (train/trainer_batch.h) */
    mg_batch_schedule batch;
    int64_t train_iters;       /* --train-iters, or --train-samples' (update_train_iters) */
    int64_t step_global_batch; /* the global batch of the last training step */
    int eval_microbatches;     /* per rank, of the final --global-batch-size: the most, planned */
    void *pipe_buffers;        /* the pipeline's buffers (a_work), for a rebuild */
    size_t pipe_bytes;
    float *host_dloss; /* (N) staging of the per-token loss weight */
    float dloss_scale; /* the loss scale the gradient weights in dloss (and the MoE loss weights)
                          carry: the scaler's at the last upload (train/trainer_batch.h) */
    mg_metrics_file metrics;
    /* --async-save: the checkpoint being written in the background, and its host copy */
    mg_checkpoint_pending *pending_save;
    mg_checkpoint_tensors *pending_host;
    float *stage; /* the checkpoint staging (weights, moments), pinned where the backend can */
    size_t stage_bytes;
    void *ckpt_scratch; /* 8 bytes of backend memory: the save's values over NCCL groups */
} mg_trainer;

/* Creates the backend (cfg->device), builds the model and the memory plan (logged), initialises
 * or loads the weights. The trainer must not move afterwards (the model and the data sources
 * point into it). One rank: mg_trainer_init_dp(t, cfg, NULL). */
mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg);
/* The same as one replica of data-parallel group dp (every member calls it with the same cfg;
 * dp outlives the trainer). The group's buffers decide the backend: NCCL (device buffers) goes
 * with cuda, MPI (host buffers) with cpu; --device auto follows the group, a mismatch is
 * MG_ERR_UNSUPPORTED. */
mg_status mg_trainer_init_dp(mg_trainer *t, const mg_config *cfg, mg_comm *dp);
/* The same as tensor-parallel rank mg_comm_rank(g->tp) and pipeline rank mg_comm_rank(g->pp) of
 * one model replica (their sizes must be cfg's), that replica being one member of data-parallel
 * group g->dp (g NULL: one rank). The model holds this rank's shards of its pipeline stage's
 * chunks (model/gpt.h); the members of a tp group load the same microbatches. A step walks the
 * schedule of cfg (no pipelining, 1F1B or interleaved 1F1B: parallel/pipeline/run.h); only the
 * first stage reads input ids and only the last reads labels and computes the loss (t->loss is
 * zero on the other stages). After the schedule, the tied embedding's two copies (first and
 * last stage) have their gradients summed over g->embedding. The gradient norm counts every
 * tensor-parallel shard once, every replicated parameter once and the embedding's copy not at
 * all, summed over the model-parallel ranks (train/optimizer.h). */
mg_status mg_trainer_init_groups(mg_trainer *t, const mg_config *cfg, const mg_train_groups *g);
/* Forward (+ backward) over this rank's part of the global batch of samples [first, first + gbs)
 * from src: the global batch's mean loss lands in t->loss (summed over the data-parallel group);
 * this rank's gradients ACCUMULATE into t->grads (not reduced over the group). */
mg_status mg_trainer_forward_backward(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                      bool backward);
/* One iteration, nothing read back (no host sync on CUDA): the loss and grad norm land in
 * t->stats and are added to the running sums. */
mg_status mg_trainer_step_async(mg_trainer *t);
/* Reads every statistic with one copy (one host sync); reset_sums then zeroes the running sums. */
mg_status mg_trainer_read_stats(mg_trainer *t, mg_step_stats *out, bool reset_sums);
/* One iteration: returns the mean lm loss and the pre-clipping gradient norm (one host sync). */
mg_status mg_trainer_step(mg_trainer *t, double *loss, double *grad_norm);
/* Mean loss over eval_iters global batches of the validation stream (one host sync). */
mg_status mg_trainer_evaluate(mg_trainer *t, double *loss);
/* The same over the test split from its first sample (Megatron's test dataloader starts at 0),
 * when t->have_test. */
mg_status mg_trainer_evaluate_test(mg_trainer *t, double *loss);
/* Megatron's calc_params_l2_norm: the L2 norm of the fp32 parameters (the masters where the
 * compute dtype is not fp32), every tensor-parallel shard once, replicated parameters once and
 * the embedding's pipeline copy not at all, over the model-parallel ranks (and the shards of the
 * distributed optimizer). Collective over those groups; one host read. */
mg_status mg_trainer_params_norm(mg_trainer *t, double *norm);
/* Megatron's count_zeros_fp32 of the last step's gradients: the zero elements of the gradients
 * the gradient norm counts, over the same ranks. Collective; one host read. */
mg_status mg_trainer_num_zeros(mg_trainer *t, int64_t *zeros);
/* The weights as fp32 host values (params.numel, parameter layout): set_weights writes the
 * masters and the parameters (their rounding to the compute dtype); get_weights reads the
 * masters (the parameters themselves on CPU; masters sharded over the data-parallel group are
 * all-gathered: every member must call it). */
mg_status mg_trainer_set_weights(mg_trainer *t, const float *host);
/* With --overlap-param-gather the parameter buffer is complete only once the next forward
 * gathered every bucket: this gathers (and orders) what is left, for readers outside forward.
 * get_weights and save call it. */
mg_status mg_trainer_sync_params(mg_trainer *t);
mg_status mg_trainer_get_weights(mg_trainer *t, float *host);
/* Bytes per model parameter of each state, from the committed arenas (padding included):
 * Megatron's accounting in seed 002 (fp32 params and grads: 4 + 4 + 8 = 16 B without the
 * distributed optimizer, 4 + 4 + 8/D with it; bf16 params with fp32 masters: 2 + 4 + 12, or
 * 2 + 4 + 12/D where the masters are sharded too). */
typedef struct {
    int64_t params;                           /* the model's parameters */
    double weights, grads, master, optimizer; /* bytes per parameter */
} mg_memory_per_param;
mg_memory_per_param mg_trainer_memory_per_param(const mg_trainer *t);
/* Logs the device memory in use (backends with memory_info; nothing on CPU) next to the plan. */
mg_status mg_trainer_log_memory(mg_trainer *t, const char *when);
/* MoE models: the last step's expert load, max over mean tokens per expert of the busiest MoE
 * layer of this rank's pipeline stage, over the whole global batch (every replica's tokens; a
 * host read; 0 for a dense model or on a read error). */
double mg_trainer_expert_load(mg_trainer *t);
/* Saves a checkpoint of the current state (every rank calls it). With --async-save the state is
 * copied to the host and written in the background: a save still being written is finished
 * first, mg_trainer_save_poll (at the same iteration on every rank) commits it once every rank's
 * files are written, and mg_trainer_save_wait waits for it (end of training, exit). */
mg_status mg_trainer_save(mg_trainer *t);
mg_status mg_trainer_save_poll(mg_trainer *t);
mg_status mg_trainer_save_wait(mg_trainer *t);
void mg_trainer_free(mg_trainer *t);

/* The whole `megatron train` run, as tensor-parallel rank mg_comm_rank(tp) of one replica in
 * data-parallel group dp (either NULL: one rank). */
mg_status mg_train_run(const mg_config *cfg, const mg_train_groups *g);

#endif
