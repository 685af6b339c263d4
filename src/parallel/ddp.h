/* Data-parallel communication over the grad buffer's buckets (parallel/grad_buffer.h), as
 * megatron-core's _ParamAndGradBucketGroup.start_grad_sync and start_param_sync do it, one
 * collective per bucket, in buffer order (the order backward completes them):
 *   mg_ddp_reduce_bucket / mg_ddp_reduce_grads
 *     plain data parallelism: all-reduce (sum) of the bucket, every rank gets the whole sum;
 *     distributed optimizer: reduce-scatter (sum) of the bucket in place, so dp rank r's shard
 *     of it (mg_grad_buffer_shard_range) holds the sum and the rest of the bucket is stale.
 *   mg_ddp_gather_bucket / mg_ddp_gather_params
 *     distributed optimizer: all-gather of the bucket's shards of the parameter buffer, in place
 *     and in the parameters' dtype, after each rank updated its own shard.
 * Averaging: Megatron multiplies the gradients by 1/D before summing (gradient_scaling_factor,
 * without --average-in-collective); the trainer folds that factor into the loss gradient, so
 * these functions only sum. The group must have the layout's data_parallel_size ranks; buffers
 * are in the memory of the group's backend (host for MPI) and `stream` is passed to mg_comm.
 * Exports: mg_ddp_reduce_bucket, mg_ddp_reduce_grads, mg_ddp_gather_bucket,
 * mg_ddp_gather_params. Needs: comm, parallel/grad_buffer. */
#ifndef MG_PARALLEL_DDP_H
#define MG_PARALLEL_DDP_H

#include "comm/comm.h"
#include "parallel/grad_buffer.h"

/* grads: (l->numel) fp32 */
mg_status mg_ddp_reduce_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               float *grads, void *stream);
mg_status mg_ddp_reduce_grads(const mg_grad_buffer_layout *l, mg_comm *dp, float *grads,
                              void *stream);
/* params: (l->numel) of dtype dt; only with the distributed optimizer (MG_ERR_INTERNAL else) */
mg_status mg_ddp_gather_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               void *params, mg_dtype dt, void *stream);
mg_status mg_ddp_gather_params(const mg_grad_buffer_layout *l, mg_comm *dp, void *params,
                               mg_dtype dt, void *stream);

#endif
