/* Data-parallel communication over the grad buffer's buckets (parallel/grad_buffer.h), as
 * megatron-core's _ParamAndGradBucketGroup does it: one collective per bucket.
 *   reduce (after backward, or during it with --overlap-grad-reduce)
 *     plain data parallelism: all-reduce (sum) of the bucket, every rank gets the whole sum;
 *     distributed optimizer: reduce-scatter (sum) of the bucket in place, so dp rank r's shard
 *     of it (mg_grad_buffer_shard_range) holds the sum and the rest of the bucket is stale.
 *   gather (distributed optimizer, after each rank updated its own shard)
 *     all-gather of the bucket's shards of the parameter buffer, in place, in the parameters'
 *     dtype: after the step, or (--overlap-param-gather) bucket by bucket in the next forward.
 * Averaging: Megatron multiplies the gradients by 1/D before summing (gradient_scaling_factor,
 * without --average-in-collective); the trainer folds that factor into the loss gradient, so
 * these functions only sum. The group must have the layout's data_parallel_size ranks; buffers
 * are in the memory of the group's backend (host for MPI, device for NCCL).
 *
 * Streams (backends with stream_handle, i.e. CUDA + NCCL): every collective runs on the
 * backend's communication stream. Its start waits for the compute stream's work so far (the
 * gradients it reduces, the shard the optimizer wrote), and the compute stream waits for it
 * where the results are used: after backward for the gradients (mg_ddp_finish_grad_sync),
 * before the first layer that reads a bucket's parameters (mg_ddp_params_needed, through the
 * model's hooks, model/gpt.h). No host waits. On the cpu backend (MPI) every collective has
 * completed when it returns and the ordering calls do nothing.
 *
 * One step:
 *   mg_ddp_start_grad_sync(d)       before the last microbatch's backward: arms the counters
 *   mg_ddp_grads_ready(d, idx, n)   (model hook) with --overlap-grad-reduce, a bucket whose
 *                                   parameters are all complete starts its reduction at once
 *   mg_ddp_finish_grad_sync(d)      after backward: starts every bucket not started (in order),
 *                                   the compute stream waits for all of them
 *   ... the optimizer updates this rank's shard ...
 *   mg_ddp_start_param_sync(d)      distributed optimizer: gathers every bucket now, or with
 *                                   --overlap-param-gather only the first bucket forward reads
 *   mg_ddp_params_needed(d, idx, n) (model hook) the bucket of each parameter is gathered and
 *                                   waited for; the bucket forward reads next is started (one
 *                                   ahead, as Megatron's forward pre-hook does)
 *   mg_ddp_finish_param_sync(d)     gathers and waits for what is left (before reading the
 *                                   parameters outside forward: checkpoints, tests)
 * With --overlap-param-gather a step's gathers cross into the next step, so a graph of one step
 * (the trainer's full-iteration graph) starts from mg_ddp_graph_boundary's state, the one every
 * replay starts from; the trainer calls it before each capture and after each launch.
 * Every rank makes the same calls in the same order (NCCL's rule): the hooks fire at the same
 * points of the same model on every replica.
 * Exports: mg_ddp, mg_ddp_*. Needs: comm, backend, parallel/grad_buffer. */
#ifndef MG_PARALLEL_DDP_H
#define MG_PARALLEL_DDP_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/peer_window.h"
#include "parallel/grad_buffer.h"

typedef struct {
    const mg_grad_buffer_layout *l; /* not owned */
    int *bucket_of;                 /* (n_table) bucket of each parameter-table index; -1: the
                                       parameter is in another buffer (the hooks skip it) */
    int n_table;
    mg_comm *dp;    /* not owned; the layout's data_parallel_size ranks */
    mg_backend *be; /* not owned */
    float *grads;   /* (l->numel) fp32, backend memory */
    void *params;   /* (l->numel) of dtype pdt, backend memory */
    mg_dtype pdt;
    bool overlap_grad, overlap_param;
    void *stage; /* --grad-reduce-in-bf16: a bf16 copy of the largest bucket, or NULL (fp32) */
    const mg_peer_window *peer; /* not owned; the distributed optimizer's reduce-scatters and
                                   gathers as copies through it (mg_ddp_bind_peer), or NULL */
    int *pending_grads; /* (n_buckets) parameters of the bucket not complete in this backward */
    int next_reduce;    /* buckets start in buffer order: the next one to start */
    bool armed;         /* between start_grad_sync and finish_grad_sync */
    int next_gather;    /* buckets are gathered from the last (forward's first) down */
    int waited_gather;  /* buckets [waited_gather, n_buckets) are waited for (the stream runs
                           them in order: waiting for one waits for those started before) */
    bool rejoin;        /* the next gather first makes the communication stream follow the compute
                           stream (after start_param_sync: the shards the optimizer wrote; after
                           mg_ddp_graph_boundary: inside a capture, joins it) */
    /* statistics for the tests, since init: bucket reductions started during backward
     * (overlapped), and bucket gathers started inside forward */
    int overlapped_reduces, overlapped_gathers;
} mg_ddp;

/* grads and params are the buffer's first elements in l's layout (a buffer of several, train/
 * buffers.h, passes its base); index (l->n_params) maps the layout's parameter indices to the
 * n_table indices of the parameter table the hooks name (NULL: the same, n_table =
 * l->n_params); cfg: --overlap-grad-reduce, --overlap-param-gather (only with the distributed
 * optimizer). */
mg_status mg_ddp_init(mg_ddp *d, const mg_grad_buffer_layout *l, const int *index, int n_table,
                      mg_comm *dp, mg_backend *be, float *grads, void *params, mg_dtype pdt,
                      bool overlap_grad, bool overlap_param, void *bf16_stage);
void mg_ddp_free(mg_ddp *d);
/* With the distributed optimizer, on a backend with peer_push, peer_sum and peer_take: the
 * reduce-scatters and gathers of the buckets whose shards fit pw's slots (peer-mapped memory
 * over the group, comm.h's mg_comm_peer_window_alloc, sized by train/memory.h's
 * mg_memory_dp_window_bytes) go as copies through it on the communication stream, the others
 * through the group's collectives: each rank copies every other rank's
 * shard of a bucket into that rank's memory and adds what arrived to its own shard (the copy
 * engines move the data on CUDA, so the reductions beside the backward take none of its
 * multiprocessors); a gather copies this rank's shard to every peer and then what arrived into
 * place. NULL (the default): the group's collectives. */
void mg_ddp_bind_peer(mg_ddp *d, const mg_peer_window *pw);

mg_status mg_ddp_start_grad_sync(mg_ddp *d);
mg_status mg_ddp_grads_ready(mg_ddp *d, const int *idx, int n);
mg_status mg_ddp_finish_grad_sync(mg_ddp *d);
mg_status mg_ddp_start_param_sync(mg_ddp *d);
mg_status mg_ddp_params_needed(mg_ddp *d, const int *idx, int n);
mg_status mg_ddp_finish_param_sync(mg_ddp *d);
/* At a graph's edge (before its capture, after a launch; outside any capture), with
 * --overlap-param-gather: the compute stream waits for the gathers started so far, and the
 * state becomes the one a step starts from after start_param_sync: the bucket forward reads
 * first gathered, the others still to gather in forward (a bucket already current is gathered
 * again: the same values). A captured step so holds every gather a replay needs, whatever ran
 * before the capture (an evaluation's forward gathers every bucket), and waits for nothing
 * recorded outside its capture; the next gather first makes the communication stream follow the
 * compute stream (inside a capture: joins it). Without the overlap nothing crosses a step: a
 * no-op. */
mg_status mg_ddp_graph_boundary(mg_ddp *d);

/* The distributed optimizer's fp32 state to the host, whole, on every rank: `local` (backend
 * memory) holds this rank's shard of every bucket, shard after shard in bucket order (the
 * optimizer's local coordinates, train/optimizer.h); `host` (l->numel) receives every rank's
 * shards at their buffer positions (padding zero). All-gathers through a scratch buffer of at
 * most 32 MiB per rank, allocated here (checkpoints, not steps). */
mg_status mg_ddp_gather_shards_f32(mg_ddp *d, const float *local, float *host);

/* One bucket's collective on `stream` (no ordering added): the building blocks above. */
mg_status mg_ddp_reduce_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               float *grads, void *stream);
/* only with the distributed optimizer (MG_ERR_INTERNAL else) */
mg_status mg_ddp_gather_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               void *params, mg_dtype dt, void *stream);

#endif
