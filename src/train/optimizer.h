/* AdamW over this rank's part of the parameters with Megatron's semantics: global-norm gradient
 * clipping (the norm over every gradient), decoupled weight decay only on parameters whose
 * metadata says so (not on biases and norm weights), bias correction by the step count. The clip
 * coefficient stays in backend memory, so no host read is needed to apply it.
 *
 * What this rank updates (its "shards", one per bucket of the grad buffer layout): with the
 * distributed optimizer (ZeRO-1) dp rank r's shard of every bucket (mg_grad_buffer_shard_range),
 * otherwise every bucket whole. The optimizer state — Adam moments, and the fp32 master weights
 * where the parameters are not fp32 (the trainer's a_master arena, o->numel elements) — holds
 * only those elements, shard after shard in bucket order ("local" coordinates); the parameter and
 * gradient buffers are full-size ("world" coordinates: the layout's offsets). Without the
 * distributed optimizer local == world.
 *
 * The gradient norm: the sum of squares over this rank's shards, summed over `norm_group` (the
 * data-parallel group with the distributed optimizer over D > 1 ranks; NULL: the shards are
 * everything, or every rank holds the same reduced gradients), over the tensor-parallel group
 * `tp` and over the pipeline group `pp` (NULL: one rank), then the square root. An MoE model's
 * expert buffer (train/buffers.h) has its own sum: over its shards (the expert-data-parallel
 * group with the distributed optimizer) and over the expert-parallel group (other experts),
 * then added to the dense sum (megatron-core's ChainedOptimizer: the norm of both). Under tensor
 * parallelism each rank's shards of a split parameter count, and a replicated parameter (the
 * same gradient on every TP rank) only on TP rank 0; a pipeline stage's copy of the tied
 * embedding (metadata `shared`) never: Megatron's get_grad_norm_fp32 over the model-parallel
 * group with its param_is_not_shared and param_is_not_tensor_parallel_duplicate filters.
 * Exports: mg_optim_piece, mg_optim_span, mg_optim_shard, mg_optimizer, mg_optimizer_*.
 * Needs: model/params, parallel/grad_buffer, comm, backend, core/arena. */
#ifndef MG_TRAIN_OPTIMIZER_H
#define MG_TRAIN_OPTIMIZER_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/arena.h"
#include "model/params.h"
#include "parallel/grad_buffer.h"
#include "train/buffers.h"

/* The elements [param_start, param_end) of parameter `index` that this rank updates, at `world`
 * in the buffers and `local` in the optimizer state (Megatron's "param" and "gbuf_local" ranges,
 * as in Megatron's distributed optimizer). Checkpoints save and load the state by these. */
typedef struct {
    int index;
    int64_t param_start, param_end;
    size_t world, local;
} mg_optim_piece;

/* A run of neighbouring pieces of one shard with the same weight decay and lr group, updated by
 * one call. The gaps between them (alignment and bucket padding) are zero in every buffer and
 * stay zero. */
typedef struct {
    size_t world, local, n;
    bool weight_decay;
    bool decoupled; /* the embedding and output layer's lr (--decoupled-lr, metadata flag) */
    int buf;        /* the buffer (train/buffers.h) */
} mg_optim_span;

typedef struct {
    size_t world, local, n; /* a shard: world range [world, world + n), local start */
    int buf;                /* of this buffer (train/buffers.h) */
} mg_optim_shard;

/* The groups the optimizer's buffers are sharded and summed over (none owned; NULL: one rank):
 * group[b] and rank[b] for buffer b (the data-parallel group for the dense buffer, the
 * expert-data-parallel group for the experts'), and the tensor-, pipeline- and
 * expert-parallel groups of the gradient norm. */
typedef struct {
    mg_comm *group[MG_TRAIN_BUFFERS_MAX];
    int rank[MG_TRAIN_BUFFERS_MAX];
    mg_comm *tp, *pp, *ep;
} mg_optim_groups;

typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;
    int64_t step; /* completed optimizer steps (Adam's t after the last update): the host's copy
                     of the step-control block's count (train/trainer_scaler.h), as of its last
                     read; the update reads the block's */
    size_t numel; /* local elements: moments and masters */
    bool sharded; /* the distributed optimizer over more than one rank, in some buffer */
    int n_bufs;
    bool buf_sharded[MG_TRAIN_BUFFERS_MAX]; /* per buffer */
    bool buf_expert[MG_TRAIN_BUFFERS_MAX];  /* an expert buffer (its own norm sum, below) */
    bool experts;                           /* some buffer is */
    /* --fp8-param-gather (train/buffers.h): the fp8 buffers' compute-dtype values exist only for
     * this rank's elements (the forward reads their gathered fp8 bytes), in local coordinates:
     * the parameter array is [0, fp8_from) in world coordinates, then the fp8 buffers' local
     * elements from fp8_local on (mg_optimizer_param_at); params_numel elements in all */
    size_t fp8_from, fp8_local, params_numel;
    size_t buf_local[MG_TRAIN_BUFFERS_MAX], buf_numel[MG_TRAIN_BUFFERS_MAX]; /* local range */
    int n_shards, n_spans, n_pieces;
    mg_optim_shard *shards; /* (n_shards) bucket order */
    mg_adamw_span *updates; /* (n_spans) the update's runs, one adamw call for all */
    bool norm_filtered;     /* the norm counts norm_spans, not the whole shards */
    int n_norm_spans;       /* the runs the gradient norm counts (see above) */
    mg_optim_span *norm_spans;
    mg_comm *tp, *pp, *ep;  /* not owned; NULL: one rank */
    mg_optim_piece *pieces; /* (n_pieces) buffer order */
    mg_comm *norm_group[2]; /* the dense and the experts' sum's (see above); not owned */
    size_t off_m, off_v, off_scalars;
    float *m, *v;   /* (numel) fp32 moments, local coordinates */
    float *scalars; /* backend fp32 [sumsq, norm, coef, the experts' sumsq] */
} mg_optimizer;

/* The shards, pieces and spans of this rank (rank g->rank[b] of buffer b's group) for the
 * parameters `t`, laid out in `bufs` (t's offsets must be theirs). */
mg_status mg_optimizer_init(mg_optimizer *o, const mg_config *c, const mg_param_table *t,
                            const mg_train_buffers *bufs, const mg_optim_groups *g);
void mg_optimizer_free(mg_optimizer *o);
/* The parameter array's element holding the compute-dtype value of this rank's element at
 * `world` (and `local`, its optimizer coordinates): world, or in an fp8 buffer (world >=
 * fp8_from) fp8_from + local - fp8_local (see above). */
size_t mg_optimizer_param_at(const mg_optimizer *o, size_t world, size_t local);
/* Reserves the moments and scalars in the optimizer arena. */
mg_status mg_optimizer_plan(mg_optimizer *o, mg_arena *arena);
void mg_optimizer_bind(mg_optimizer *o, mg_arena *arena);
/* The first half of a step: the global gradient norm (into scalars[1], backend memory; of the
 * unscaled gradients) and the clip coefficient (scalars[2], times *unscale, the inverse of the
 * loss scale the gradients carry: backend memory, the step-control block's; NULL: 1). A norm that
 * is not finite (an overflow on some rank: every rank computes the same norm) makes the
 * coefficient NaN, which skips the update below on the device.
 * `grads` (world numel) fp32, of which only this rank's shards are read. Nothing is read back. */
mg_status mg_optimizer_norm(mg_optimizer *o, mg_backend *be, const float *grads,
                            const float *unscale);
/* The second half: clips and updates this rank's elements with the rates in backend memory
 * (`rates`, MG_RATE_COUNT fp32: core/step_rules.h's mg_step_ctl.rate, per span its lr group and
 * the weight decay or none, and the bias corrections), unless the coefficient marks an overflow:
 * then the moments, masters and parameters keep their values.
 * `params` (world numel) compute dtype. `master` (o->numel) fp32 holds the master weights of the
 * local elements when the compute dtype is not fp32 (CUDA: bf16 params receive the updated
 * masters rounded); NULL when the parameters are themselves fp32 (CPU). No host read. */
mg_status mg_optimizer_update(mg_optimizer *o, mg_backend *be, void *params, float *master,
                              const float *grads, const float *rates);
/* Whether tensor-parallel rank tp_rank's gradient norm counts parameter m (not the embedding's
 * pipeline copy; a replicated parameter only on TP rank 0): Megatron's filters, which its params
 * norm and zero count apply too (train/trainer_stats.c). */
bool mg_optimizer_counts(const mg_param_meta *m, int tp_rank);

#endif
