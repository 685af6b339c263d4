/* The trainer's state (train/trainer.h), carved by concern so each train/trainer_*.c can take the
 * part it works on: the rank's place in the layout (mg_train_layout), the data sources
 * (mg_train_data, train/trainer_data.h), the memory plan and the buffers in it (mg_train_memory,
 * train/trainer_memory.h), the checkpoint staging (mg_train_ckpt_stage, train/trainer_ckpt.h) and
 * loss scaling (mg_train_scaling, train/trainer_scaler.h); mg_trainer holds them with the model,
 * the optimizer and the step's bookkeeping. Types only: the functions are in the modules above
 * and in train/trainer.h, which includes them all.
 * Exports: mg_sample_source, mg_stat, mg_step_stats, mg_train_groups, mg_train_layout,
 * mg_train_data, mg_train_memory, mg_train_ckpt_stage, mg_train_scaling, mg_trainer,
 * mg_trainer_buf_group. Needs: model, data, comm, parallel, the train modules. */
#ifndef MG_TRAIN_TRAINER_PARTS_H
#define MG_TRAIN_TRAINER_PARTS_H

#include "comm/comm.h"
#include "data/gpt_dataset.h"
#include "data/mock.h"
#include "model/gpt.h"
#include "parallel/ddp.h"
#include "parallel/grad_buffer.h"
#include "parallel/pipeline/run.h"
#include "train/batch_schedule.h"
#include "train/buffers.h"
#include "train/checkpoint.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/memory.h"
#include "train/metrics.h"
#include "train/optimizer.h"

/* Where samples come from: sample `index` of a split as (S) input ids and (S) target ids.
 * The mock data is one source; a --data-path's GPT datasets (data/gpt_dataset.h) are another; tests
 * plug in fixed batches. */
typedef struct {
    mg_status (*sample)(void *ctx, int64_t index, int32_t *tokens, int32_t *targets);
    void *ctx;
} mg_sample_source;

/* Step statistics, fp32 in backend memory (t->mem.stats), read back together by one copy. */
typedef enum {
    MG_STAT_LOSS = 0,      /* mean loss of the last forward_backward (a step or an eval batch) */
    MG_STAT_GRAD_NORM,     /* pre-clipping gradient norm of the last step */
    MG_STAT_LOSS_SUM,      /* sum of the step losses since the last reset */
    MG_STAT_GRAD_NORM_SUM, /* sum of the grad norms since the last reset (a NaN or Inf sticks) */
    MG_STAT_EVAL_SUM,      /* sum of the eval batch losses of the last mg_trainer_evaluate */
    MG_STAT_MOE_AUX,       /* MoE: the last step's logged aux loss (model/moe.h) */
    MG_STAT_MOE_Z,         /* MoE: the last step's logged z-loss */
    MG_STAT_MOE_OVER,      /* MoE under a receive budget: the last step's MoE layer passes that
                              took extra dispatch rounds (summed like the two before) */
    MG_STAT_PARAMS_SUMSQ,  /* mg_trainer_params_norm: the dense parameters' sum of squares */
    MG_STAT_PARAMS_SUMSQ_EXPERT, /* and the experts' */
    MG_STAT_COUNT,               /* the statistics mg_trainer_read_stats reads */
    MG_STAT_ZEROS = 10, /* int64 (2), 8-byte aligned: mg_trainer_num_zeros's dense and expert
                           counts, over 4 fp32 slots */
    MG_STAT_FAULT = 14, /* MG_FAULT_OVERFLOW: Inf or 0, added to a gradient (trainer_scaler.h) */
    MG_STAT_END = 15    /* <= MG_MEMORY_STATS (train/memory.h) */
} mg_stat;

typedef struct {
    double loss, grad_norm;         /* the last step's */
    double loss_sum, grad_norm_sum; /* since the last reset, of the steps that were not skipped */
    double moe_aux, moe_z;          /* MoE: the last step's logged aux loss and z-loss */
    /* from the step-control block (core/step_rules.h), read by the same copy */
    int64_t skipped_iters, nan_iters; /* since the last reset: skipped steps, non-finite losses */
    bool last_skipped;                /* the last step was skipped (its grad norm is None) */
    double loss_scale;                /* the loss scale after the last step */
    int64_t moe_overflow_steps;       /* since the last reset: steps over the receive budget */
} mg_step_stats;

/* The groups of one rank (none owned; NULL: a group of one rank): data-parallel, tensor-parallel,
 * pipeline-parallel, and the embedding group (the first and last pipeline stage of a pipeline
 * group, NULL on the others: Megatron's _EMBEDDING_GROUP). */
typedef struct {
    mg_comm *dp, *tp, *pp, *embedding;
    mg_comm *ep, *edp; /* expert-parallel and expert-data-parallel (MoE models) */
} mg_train_groups;

/* The rank's groups (not owned; NULL: one rank) with its rank and size in each (0, 1 without). */
typedef struct {
    mg_comm *dp; /* data-parallel */
    int dp_rank, dp_size;
    mg_comm *tp; /* tensor-parallel */
    int tp_rank, tp_size;
    mg_comm *pp; /* pipeline-parallel */
    int pp_rank, pp_size;
    mg_comm *embd; /* the embedding group (first and last stage), or NULL */
    mg_comm *ep;   /* expert-parallel */
    int ep_rank, ep_size;
    mg_comm *edp; /* expert-data-parallel (dp / ep ranks; the data-parallel group itself with one
                     expert-parallel rank) */
    int edp_rank, edp_size;
} mg_train_layout;

/* The samples of the three splits: Megatron's mock streams (--mock-data) or its GPT datasets
 * (--data-path), as the sources the passes read (train/trainer_data.h). */
typedef struct {
    mg_mock_data train_data, valid_data, test_data; /* --mock-data */
    mg_gpt_data *gpt_data;                          /* --data-path: Megatron's GPT datasets */
    struct mg_gpt_split_source {
        mg_gpt_data *data;
        int split;
    } train_split, valid_split, test_split;
    /* one of the two above; tests may plug in others */
    mg_sample_source train_src, valid_src, test_src;
    /* --dataloader-type cyclic: Megatron's random sampler over each split, wrapping the sources
     * above; NULL: single */
    struct mg_cyclic_loaders *cyclic;
    bool have_valid; /* the validation split exists and --eval-iters > 0: evaluated */
    bool have_test;  /* the test split exists and --eval-iters > 0: evaluated after training */
} mg_train_data;

/* The peer windows of mg_train_memory (train/trainer_peer.h). */
enum {
    MG_TRAIN_PEER_EP,
    MG_TRAIN_PEER_TP,
    MG_TRAIN_PEER_ACTS, /* the activations' arena, mapped over the tensor-parallel group */
    MG_TRAIN_PEER_WORK, /* the workspace's */
    MG_TRAIN_PEER_DP,   /* the first of MG_TRAIN_BUFFERS_MAX: buffer b's at MG_TRAIN_PEER_DP + b */
    MG_TRAIN_PEERS = MG_TRAIN_PEER_DP + MG_TRAIN_BUFFERS_MAX
};

/* An arena committed in peer-mapped memory (train/trainer_peer.h's mg_trainer_peer_arena): its
 * allocator, and the backend's where the group cannot map it. */
typedef struct {
    mg_allocator alloc;
    void *memory;                 /* the mg_train_memory it belongs to */
    int k;                        /* its window: MG_TRAIN_PEER_ACTS or MG_TRAIN_PEER_WORK */
    const char *name;             /* for the log line */
    mg_comm *group;               /* not owned */
    const mg_allocator *fallback; /* the backend's */
    bool mapped;                  /* committed in a window (else by fallback) */
    bool log;                     /* this rank logs */
} mg_peer_arena;

/* The memory plan (train/memory.h) committed in the backend's memory, and the buffers in it. */
typedef struct {
    mg_memory_plan plan;
    mg_allocator be_alloc;           /* the arenas' memory on a device backend: be->alloc */
    const mg_allocator *arena_alloc; /* &be_alloc, or NULL (host memory) on the CPU backend */
    /* copy-engine collectives (comm.h, MG_NCCL_COPY_ENGINE=1): the weights, activations and
     * workspace in symmetric memory registered on the groups that gather or exchange from them */
    mg_allocator sym_alloc;
    mg_comm *sym_groups[4];
    int n_sym_groups;
    bool sym_abandon; /* the run failed: free without the collective deregistration (run.c) */
    /* peer-mapped memory (comm.h; train/trainer_peer.h), each window on peer_group[k] (NULL:
     * not mapped): the expert-parallel group's receive slabs (model/moe_dispatch.c), the
     * tensor-parallel group's slots (parallel/tensor_parallel.h), the activations' and
     * workspace's arenas, each gradient buffer's data-parallel slots (parallel/ddp.h) */
    mg_peer_window peer[MG_TRAIN_PEERS];
    mg_comm *peer_group[MG_TRAIN_PEERS];
    mg_peer_arena peer_arena[2]; /* the activations' and the workspace's, where they are mapped */
    size_t planned_bytes;        /* all arenas together */
    size_t used_before_arenas;   /* device memory in use before the arenas (the CUDA context,
                                    the backend's workspace, libraries): the predicted peak is
                                    this plus planned_bytes; 0 on the cpu backend */
    size_t measured_state_bytes; /* device memory the weight, gradient, master and optimizer
                                    arenas took (backends with memory_info), else 0 */
    void *params;                /* (numel) compute dtype */
    uint8_t *params8; /* (numel - fp8_from) the fp8 weights' bytes (--fp8-param-gather), or NULL */
    float *master;    /* (opt.numel) fp32 master weights of this rank's shard (local coordinates,
                         train/optimizer.h); NULL when params are fp32 (CPU) */
    float *grads;     /* (numel) fp32 */
    void *grad_stage; /* --grad-reduce-in-bf16: a bucket's bf16 copy (parallel/ddp.h), or NULL */
    int32_t *tokens;  /* (n_slots, N) backend: each activation slot's input ids */
    int32_t *targets; /* (n_slots, N) backend: each slot's labels */
    /* packed documents (train/trainer_docs.h), NULL without their flag: each slot's positions
     * (--reset-position-ids) and document starts (--reset-attention-mask) */
    int32_t *positions, *doc_starts; /* (n_slots, N) backend */
    float *dloss;        /* (N) backend: d(loss)/d(token loss) = 1 / (N * microbatches * D); with
                            --eod-mask-loss (n_slots, N): each slot's masked weights
                            (train/trainer_loss.h) */
    float *loss_w;       /* --eod-mask-loss: (n_slots, N) backend: each slot's reported-loss
                            weights, mask / T (train/trainer_loss.h); NULL without the mask */
    float *dloss_scaled; /* (N) backend: the weights of the training head running, times the loss
                            scale (train/trainer_loss.h) */
    float *stats;        /* (MG_MEMORY_STATS) backend fp32 (two int64 at MG_STAT_ZEROS) */
    mg_step_ctl *ctl;    /* (1) backend, right after stats: the step control (core/step_rules.h:
                            skip decision, Adam's step, rates, schedule position, loss scale) */
    float *loss;         /* (1) backend accumulator: &stats[MG_STAT_LOSS] */
    void *pipe_buffers;  /* the pipeline's buffers (workspace), for a rebuild */
    size_t pipe_bytes;
    int32_t *host_tokens, *host_targets; /* (N) host staging of a microbatch */
    float *host_dloss;                   /* (N) staging of the per-token loss weight */
    int32_t *host_docs;                  /* (2N) host staging: positions, then document starts */
} mg_train_memory;

/* Checkpoints: the save written in the background (--async-save) and its host copy, and the
 * staging the state goes through (train/trainer_ckpt.h). */
typedef struct {
    mg_checkpoint_pending *pending_save;
    mg_checkpoint_tensors *pending_host;
    float *stage; /* the checkpoint staging (weights, moments), pinned where the backend can */
    size_t stage_bytes;
    void *scratch; /* 8 bytes of backend memory: the save's values over NCCL groups */
} mg_train_ckpt_stage;

/* Loss scaling (train/grad_scaler.h; off: scale 1, no skips). The scaler's state of record is
 * the step-control block in backend memory (t->mem.ctl, train/trainer_scaler.h); the host copies
 * here are as of its last read (mg_trainer_read_stats, a checkpoint save). */
typedef struct {
    mg_grad_scaler scaler; /* the settings; scale and trackers: as of the last read */
    /* as of the last read, since the last reset of the sums: steps the scaler skipped, of which
     * those whose loss was not finite (Megatron's "number of skipped/nan iterations"); whether
     * the last step was skipped (its grad norm is then None) */
    int64_t skipped_iters, nan_iters;
    bool last_skipped;
} mg_train_scaling;

/* The full-iteration graphs (--cuda-graph-impl full_iteration, train/trainer_graph.h): one of a
 * training step, one of an evaluation batch. */
typedef enum { MG_GRAPH_TRAIN = 0, MG_GRAPH_EVAL, MG_GRAPH_KINDS } mg_graph_kind;
typedef struct {
    struct mg_graph *g; /* the captured pass; NULL before the capture */
    int m;              /* the microbatches per rank it was captured with */
    int eager;          /* eager runs since there was no graph (the warm-up) */
} mg_train_graph_one;
typedef struct {
    mg_train_graph_one k[MG_GRAPH_KINDS];
    int layer_captured; /* per-layer graphs captured as of the last log line about them */
    bool staged;        /* the pass running reads its microbatches' inputs from the staged copies */
    /* every microbatch's inputs, copied in before the pass (backend, (staged microbatches, N)
     * each; positions and doc_starts NULL without their flags, the loss weights without
     * --eod-mask-loss) */
    int32_t *tokens, *targets, *positions, *doc_starts;
    float *dloss, *loss_w;
} mg_train_graph;

typedef struct {
    mg_config cfg; /* cfg.device: the backend in use ("cpu" or "cuda"), never "auto" */
    mg_backend *be;
    int gpu; /* the CUDA device (launcher's local rank); -1 on the CPU backend */
    mg_train_layout layout;
    mg_train_data data;
    mg_train_memory mem;
    mg_train_ckpt_stage ckpt;
    mg_train_scaling scaling;
    mg_pipeline pipe;     /* the schedule walker (parallel/pipeline/run.h) */
    bool grad_sync_live;  /* in each chunk's last backward of the step: the hooks
                             all-reduce the sequence-parallel gradients over tp and hand
                             complete gradients to the data-parallel overlap */
    bool grad_sync_armed; /* the data-parallel reduction is armed for this step */
    bool sp_grads_at_end; /* the sequence-parallel gradients' tp sums wait for the backward's end
                             (nothing overlaps with it: trainer.c's sync_sp_grads) */
    bool forward_only;    /* the pass running: an evaluation (the head in forward) */
    const mg_sample_source *pass_src; /* the pass's samples: global batch from pass_first */
    int64_t pass_first;
    mg_train_buffers bufs; /* the parameter and gradient buffers: dense, and the experts' */
    mg_ddp ddp[MG_TRAIN_BUFFERS_MAX]; /* each buffer's collectives (where its group has > 1 rank) */
    mg_gpt model;
    mg_optimizer opt;
    mg_lr_schedule lr;
    size_t *zero_spans; /* (2 n_zero_spans) MoE: the runs of grads a step zeroes (element offset,
                           count), train/trainer_moe.c; NULL: all of them */
    int n_zero_spans;
    int64_t moe_overflow_steps; /* receive budget: steps since the last reset of the sums whose
                                   dispatch took extra rounds somewhere (trainer_moe.c) */
    int32_t docs_eod;           /* the end-of-document id packed documents split at; -1: off */
    int32_t eod_id;      /* --eod-mask-loss: inputs with this id carry no loss; -1: no mask */
    int64_t pass_tokens; /* unmasked tokens of the global batch of the last pass (T) */
    mg_train_state state;
    int num_microbatches; /* per rank, of the pass running: global batch / (micro batch x D) */
    /* the global batch of each iteration (--rampup-batch-size) and the run's length
     * (train/trainer_batch.h) */
    mg_batch_schedule batch;
    int64_t train_iters;       /* --train-iters, or --train-samples' (update_train_iters) */
    int64_t step_global_batch; /* the global batch of the last training step */
    int eval_microbatches;     /* per rank, of the final --global-batch-size: the most, planned */
    mg_metrics_file metrics;
    mg_train_graph graph;
} mg_trainer;

/* Buffer b's reduction group (train/buffers.h): data-parallel for the dense buffer,
 * expert-data-parallel for the experts'; NULL: one rank, nothing to reduce. */
static inline mg_comm *mg_trainer_buf_group(const mg_trainer *t, int b) {
    return t->bufs.b[b].expert ? t->layout.edp : t->layout.dp;
}

#endif
