/* Per-bucket gradient reduction and parameter gathering (rules in ddp.h). */
#include "parallel/ddp.h"

static mg_status check_group(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp) {
    if (!dp || mg_comm_size(dp) != l->cfg.data_parallel_size)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "data-parallel group of %d ranks for a grad buffer laid out for %d",
                       dp ? mg_comm_size(dp) : 0, l->cfg.data_parallel_size);
    if (bucket < 0 || bucket >= l->n_buckets)
        return MG_FAIL(MG_ERR_INTERNAL, "bucket %d of %d", bucket, l->n_buckets);
    return MG_OK;
}

mg_status mg_ddp_reduce_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               float *grads, void *stream) {
    MG_CHECK(check_group(l, bucket, dp));
    mg_grad_range b = l->buckets[bucket].range;
    size_t n = (size_t)(b.end - b.start);
    if (!l->cfg.use_distributed_optimizer)
        return mg_comm_all_reduce(dp, grads + b.start, grads + b.start, n, MG_F32, MG_REDUCE_SUM,
                                  stream);
    mg_grad_range s;
    MG_CHECK(mg_grad_buffer_shard_range(l, bucket, mg_comm_rank(dp), &s));
    return mg_comm_reduce_scatter(dp, grads + b.start, grads + s.start, (size_t)(s.end - s.start),
                                  MG_F32, MG_REDUCE_SUM, stream);
}

mg_status mg_ddp_reduce_grads(const mg_grad_buffer_layout *l, mg_comm *dp, float *grads,
                              void *stream) {
    for (int b = 0; b < l->n_buckets; b++) MG_CHECK(mg_ddp_reduce_bucket(l, b, dp, grads, stream));
    return MG_OK;
}

mg_status mg_ddp_gather_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               void *params, mg_dtype dt, void *stream) {
    MG_CHECK(check_group(l, bucket, dp));
    if (!l->cfg.use_distributed_optimizer)
        return MG_FAIL(MG_ERR_INTERNAL, "parameter all-gather without the distributed optimizer");
    mg_grad_range b = l->buckets[bucket].range, s;
    MG_CHECK(mg_grad_buffer_shard_range(l, bucket, mg_comm_rank(dp), &s));
    size_t es = mg_dtype_size(dt);
    return mg_comm_all_gather(dp, (char *)params + (size_t)s.start * es,
                              (char *)params + (size_t)b.start * es, (size_t)(s.end - s.start), dt,
                              stream);
}

mg_status mg_ddp_gather_params(const mg_grad_buffer_layout *l, mg_comm *dp, void *params,
                               mg_dtype dt, void *stream) {
    for (int b = 0; b < l->n_buckets; b++)
        MG_CHECK(mg_ddp_gather_bucket(l, b, dp, params, dt, stream));
    return MG_OK;
}
