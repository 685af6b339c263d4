/* Per-bucket gradient reduction and parameter gathering (rules in ddp.h). */
#include "parallel/ddp.h"

#include <stdlib.h>
#include <string.h>

static mg_status check_group(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp) {
    if (!dp || mg_comm_size(dp) != l->cfg.data_parallel_size)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "data-parallel group of %d ranks for a grad buffer laid out for %d",
                       dp ? mg_comm_size(dp) : 0, l->cfg.data_parallel_size);
    if (bucket < 0 || bucket >= l->n_buckets)
        return MG_FAIL(MG_ERR_INTERNAL, "bucket %d of %d", bucket, l->n_buckets);
    return MG_OK;
}

/* Bucket `bucket`'s sum over dp, in place in buf (its elements of dtype dt, the bucket's first at
 * buf): all of it, or this rank's shard with the distributed optimizer; *sum: the range (buffer
 * coordinates) that holds the sum. */
static mg_status reduce_in(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp, void *buf,
                           mg_dtype dt, void *stream, mg_grad_range *sum) {
    mg_grad_range b = l->buckets[bucket].range;
    *sum = b;
    if (!l->cfg.use_distributed_optimizer)
        return mg_comm_all_reduce(dp, buf, buf, (size_t)(b.end - b.start), dt, MG_REDUCE_SUM,
                                  stream);
    MG_CHECK(mg_grad_buffer_shard_range(l, bucket, mg_comm_rank(dp), sum));
    return mg_comm_reduce_scatter(dp, buf,
                                  (char *)buf + (size_t)(sum->start - b.start) * mg_dtype_size(dt),
                                  (size_t)(sum->end - sum->start), dt, MG_REDUCE_SUM, stream);
}

mg_status mg_ddp_reduce_bucket(const mg_grad_buffer_layout *l, int bucket, mg_comm *dp,
                               float *grads, void *stream) {
    MG_CHECK(check_group(l, bucket, dp));
    mg_grad_range s;
    return reduce_in(l, bucket, dp, grads + l->buckets[bucket].range.start, MG_F32, stream, &s);
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

/* ---- the step's state machine ---- */

static bool streams(const mg_ddp *d) {
    return d->be->stream_handle != NULL;
}

static void *comm_stream(const mg_ddp *d) {
    return streams(d) ? d->be->stream_handle(d->be, MG_STREAM_COMM) : NULL;
}

/* The bucket of parameter-table index i, or -1 (another buffer's). */
static int bucket_of(const mg_ddp *d, int i) {
    return i >= 0 && i < d->n_table ? d->bucket_of[i] : -1;
}

mg_status mg_ddp_init(mg_ddp *d, const mg_grad_buffer_layout *l, const int *index, int n_table,
                      mg_comm *dp, mg_backend *be, float *grads, void *params, mg_dtype pdt,
                      bool overlap_grad, bool overlap_param, void *bf16_stage) {
    memset(d, 0, sizeof *d);
    MG_CHECK(check_group(l, 0, dp));
    if (overlap_param && !l->cfg.use_distributed_optimizer)
        return MG_FAIL(MG_ERR_INTERNAL, "parameter gather overlap without the distributed "
                                        "optimizer");
    if (be->stream_handle && !(be->stream_wait && be->stream_mark && be->stream_wait_mark))
        return MG_FAIL(MG_ERR_INTERNAL, "backend '%s' has streams but no stream ordering",
                       be->name);
    *d = (mg_ddp){.l = l,
                  .dp = dp,
                  .be = be,
                  .grads = grads,
                  .params = params,
                  .pdt = pdt,
                  .overlap_grad = overlap_grad,
                  .overlap_param = overlap_param,
                  .stage = bf16_stage};
    if (!index) n_table = l->n_params;
    d->n_table = n_table;
    d->pending_grads = calloc((size_t)l->n_buckets, sizeof *d->pending_grads);
    d->bucket_of = malloc((size_t)(n_table > 0 ? n_table : 1) * sizeof *d->bucket_of);
    if (!d->pending_grads || !d->bucket_of) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_table; i++) d->bucket_of[i] = -1;
    for (int r = 0; r < l->n_params; r++) {
        int i = index ? index[l->params[r].index] : l->params[r].index;
        if (i < 0 || i >= n_table)
            return MG_FAIL(MG_ERR_INTERNAL, "buffer parameter %d maps outside the table of %d", i,
                           n_table);
        d->bucket_of[i] = l->params[r].bucket;
    }
    d->next_reduce = l->n_buckets; /* nothing to start before start_grad_sync */
    d->waited_gather = 0;          /* every bucket is current */
    return MG_OK;
}

void mg_ddp_bind_peer(mg_ddp *d, const mg_peer_window *pw) {
    mg_backend *be = d->be;
    const bool can = be->peer_push && be->peer_sum && be->peer_take;
    d->peer = pw && can && d->l->cfg.use_distributed_optimizer ? pw : NULL;
}

/* Whether bucket b's exchange of dt values (shards of n) goes by copies: a bound window whose
 * slots hold a shard, values the backend sums (the same answer on every rank). */
static bool by_copies(const mg_ddp *d, size_t shard, mg_dtype dt, bool sums) {
    if (!d->peer) return false;
    /* NCCL's copy-engine gathers (MG_NCCL_COPY_ENGINE=1) write straight into place: theirs */
    if (!sums && mg_comm_copy_engine(d->dp)) return false;
    if (sums && dt != MG_F32 && dt != d->be->compute_dtype) return false;
    return shard * mg_dtype_size(dt) <= d->peer->bytes / (size_t)d->peer->n;
}

/* Bucket b's reduce-scatter by copies (rules in ddp.h's mg_ddp_bind_peer), in place in buf (its
 * values of dt, the bucket's first at buf), on the communication stream; *sum: this rank's
 * shard. */
static mg_status reduce_copies(mg_ddp *d, int bucket, void *buf, mg_dtype dt, mg_grad_range *sum) {
    mg_backend *be = d->be;
    const mg_grad_range b = d->l->buckets[bucket].range;
    MG_CHECK(mg_grad_buffer_shard_range(d->l, bucket, mg_comm_rank(d->dp), sum));
    const size_t n = (size_t)(sum->end - sum->start), bytes = n * mg_dtype_size(dt);
    char *mine = (char *)buf + (size_t)(sum->start - b.start) * mg_dtype_size(dt);
    MG_CHECK(be->peer_push(be, d->peer, buf, bytes, bytes, MG_STREAM_COMM));
    return be->peer_sum(be, d->peer, mine, mine, n, dt, NULL, NULL, 0, MG_STREAM_COMM);
}

/* Bucket b's reduction in place in buf (its values of dt), on the communication stream: by
 * copies where it can, else the group's collective. */
static mg_status reduce_on_comm(mg_ddp *d, int bucket, void *buf, mg_dtype dt, void *stream,
                                mg_grad_range *sum) {
    const mg_grad_range b = d->l->buckets[bucket].range;
    const size_t shard = (size_t)(b.end - b.start) / (size_t)mg_comm_size(d->dp);
    if (by_copies(d, shard, dt, true)) return reduce_copies(d, bucket, buf, dt, sum);
    return reduce_in(d->l, bucket, d->dp, buf, dt, stream, sum);
}

void mg_ddp_free(mg_ddp *d) {
    free(d->pending_grads);
    free(d->bucket_of);
    memset(d, 0, sizeof *d);
}

mg_status mg_ddp_start_grad_sync(mg_ddp *d) {
    const mg_grad_buffer_layout *l = d->l;
    for (int b = 0; b < l->n_buckets; b++) d->pending_grads[b] = l->buckets[b].count;
    d->next_reduce = 0;
    d->armed = true;
    return MG_OK;
}

/* --grad-reduce-in-bf16: bucket b's reduction through the bf16 stage, all on the
 * communication stream: the bucket rounded to bf16, summed over the group in bf16 (all of it, or
 * this rank's shard with the distributed optimizer), and the sum back into the fp32 gradients.
 * One stage serves every bucket and buffer: the stream runs them one after another. */
static mg_status reduce_bucket_bf16(mg_ddp *d, int bucket, void *stream) {
    mg_grad_range b = d->l->buckets[bucket].range, s;
    uint16_t *st = d->stage;
    MG_CHECK(d->be->convert_bf16(d->be, st, d->grads + b.start, (size_t)(b.end - b.start), true,
                                 MG_STREAM_COMM));
    MG_CHECK(reduce_on_comm(d, bucket, st, MG_BF16, stream, &s));
    return d->be->convert_bf16(d->be, d->grads + s.start, st + (s.start - b.start),
                               (size_t)(s.end - s.start), false, MG_STREAM_COMM);
}

/* Starts the reductions of buckets [next_reduce, end) on the communication stream, after the
 * compute stream's work so far (the gradients). */
static mg_status start_reduces(mg_ddp *d, int end) {
    if (d->next_reduce >= end) return MG_OK;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(d->be, &stream));
    for (; d->next_reduce < end; d->next_reduce++) {
        const int b = d->next_reduce;
        mg_grad_range s;
        MG_CHECK(check_group(d->l, b, d->dp));
        MG_CHECK(d->stage ? reduce_bucket_bf16(d, b, stream)
                          : reduce_on_comm(d, b, d->grads + d->l->buckets[b].range.start, MG_F32,
                                           stream, &s));
    }
    return MG_OK;
}

mg_status mg_ddp_grads_ready(mg_ddp *d, const int *idx, int n) {
    if (!d->armed || !d->overlap_grad) return MG_OK;
    for (int i = 0; i < n; i++) {
        int b = bucket_of(d, idx[i]);
        if (b < 0) continue; /* another buffer's */
        if (d->pending_grads[b] <= 0)
            return MG_FAIL(MG_ERR_INTERNAL, "parameter %d's gradient reported complete twice",
                           idx[i]);
        d->pending_grads[b]--;
    }
    /* buckets start in buffer order (the same on every rank): the complete prefix */
    int end = d->next_reduce;
    while (end < d->l->n_buckets && d->pending_grads[end] == 0) end++;
    int before = d->next_reduce;
    MG_CHECK(start_reduces(d, end));
    d->overlapped_reduces += end - before;
    return MG_OK;
}

mg_status mg_ddp_finish_grad_sync(mg_ddp *d) {
    MG_CHECK(start_reduces(d, d->l->n_buckets));
    d->armed = false;
    return mg_backend_comm_end(d->be);
}

/* Bucket b's parameter gather on the communication stream: by copies where it can (this rank's
 * shard to every peer, then theirs into place), else the group's all-gather. */
static mg_status gather_on_comm(mg_ddp *d, int b) {
    const mg_grad_range r = d->l->buckets[b].range;
    const size_t shard = (size_t)(r.end - r.start) / (size_t)mg_comm_size(d->dp);
    if (!by_copies(d, shard, d->pdt, false))
        return mg_ddp_gather_bucket(d->l, b, d->dp, d->params, d->pdt, comm_stream(d));
    mg_grad_range s;
    MG_CHECK(mg_grad_buffer_shard_range(d->l, b, mg_comm_rank(d->dp), &s));
    const size_t es = mg_dtype_size(d->pdt), bytes = (size_t)(s.end - s.start) * es;
    return mg_backend_peer_gather(d->be, d->peer, (char *)d->params + (size_t)r.start * es,
                                  (char *)d->params + (size_t)s.start * es, bytes, MG_STREAM_COMM);
}

/* Starts bucket next_gather's all-gather and marks its end on the communication stream. At most
 * MG_STREAM_MARKS_DDP gathers are started and not waited for: the oldest is waited for first. */
static mg_status start_gather(mg_ddp *d) {
    int b = d->next_gather;
    if (d->rejoin) { /* the first gather since start_param_sync or a graph's edge */
        void *stream;
        MG_CHECK(mg_backend_comm_begin(d->be, &stream));
        d->rejoin = false;
    }
    if (streams(d) && d->waited_gather - b > MG_STREAM_MARKS_DDP) {
        MG_CHECK(d->be->stream_wait_mark(d->be, MG_STREAM_COMPUTE,
                                         (d->waited_gather - 1) % MG_STREAM_MARKS_DDP));
        d->waited_gather--;
    }
    MG_CHECK(gather_on_comm(d, b));
    if (streams(d)) MG_CHECK(d->be->stream_mark(d->be, MG_STREAM_COMM, b % MG_STREAM_MARKS_DDP));
    d->next_gather--;
    return MG_OK;
}

/* The compute stream waits for buckets down to b (gathered in order: b's mark covers them). */
static mg_status wait_gathers(mg_ddp *d, int b) {
    if (b >= d->waited_gather) return MG_OK;
    if (streams(d))
        MG_CHECK(d->be->stream_wait_mark(d->be, MG_STREAM_COMPUTE, b % MG_STREAM_MARKS_DDP));
    d->waited_gather = b;
    return MG_OK;
}

/* Between start_param_sync and the last bucket's wait. */
static bool gathering(const mg_ddp *d) {
    return d->waited_gather > 0;
}

mg_status mg_ddp_finish_param_sync(mg_ddp *d) {
    if (!gathering(d)) return MG_OK;
    while (d->next_gather >= 0) MG_CHECK(start_gather(d));
    return wait_gathers(d, 0);
}

mg_status mg_ddp_start_param_sync(mg_ddp *d) {
    const mg_grad_buffer_layout *l = d->l;
    if (!l->cfg.use_distributed_optimizer) return MG_OK;
    MG_CHECK(mg_ddp_finish_param_sync(d)); /* a bucket forward never read: finish it first */
    /* the gathers read the shards the optimizer wrote on the compute stream */
    d->rejoin = true;
    d->next_gather = l->n_buckets - 1;
    d->waited_gather = l->n_buckets;
    if (!d->overlap_param) return mg_ddp_finish_param_sync(d);
    return start_gather(d); /* forward reads the last bucket first */
}

mg_status mg_ddp_graph_boundary(mg_ddp *d) {
    if (!d->overlap_param || !d->l->cfg.use_distributed_optimizer) return MG_OK;
    MG_CHECK(mg_backend_comm_end(d->be)); /* the gathers started so far, eagerly */
    const int n = d->l->n_buckets;
    d->next_gather = n - 2; /* as start_param_sync leaves it, its gather waited for */
    d->waited_gather = n - 1;
    d->rejoin = true;
    return MG_OK;
}

mg_status mg_ddp_params_needed(mg_ddp *d, const int *idx, int n) {
    if (!gathering(d)) return MG_OK;
    int low = d->waited_gather;
    for (int i = 0; i < n; i++)
        if (bucket_of(d, idx[i]) >= 0 && bucket_of(d, idx[i]) < low) low = bucket_of(d, idx[i]);
    if (low >= d->waited_gather) return MG_OK;
    while (d->next_gather >= low) {
        MG_CHECK(start_gather(d));
        d->overlapped_gathers++;
    }
    if (d->next_gather >= 0) { /* one ahead: the bucket forward reads next */
        MG_CHECK(start_gather(d));
        d->overlapped_gathers++;
    }
    return wait_gathers(d, low);
}

/* ---- the sharded fp32 state, whole on the host ---- */

#define GATHER_CHUNK ((size_t)8 << 20) /* elements per rank and all-gather: 32 MiB */

mg_status mg_ddp_gather_shards_f32(mg_ddp *d, const float *local, float *host) {
    const mg_grad_buffer_layout *l = d->l;
    mg_backend *be = d->be;
    int D = mg_comm_size(d->dp), me = mg_comm_rank(d->dp);
    memset(host, 0, (size_t)l->numel * sizeof *host);
    size_t largest = 0;
    for (int b = 0; b < l->n_buckets; b++) {
        size_t n = (size_t)(l->buckets[b].range.end - l->buckets[b].range.start) / (size_t)D;
        if (n > largest) largest = n;
    }
    size_t chunk = largest < GATHER_CHUNK ? largest : GATHER_CHUNK;
    if (chunk == 0) return MG_OK;
    float *scratch;
    MG_CHECK(be->alloc(be, chunk * (size_t)D * sizeof *scratch, (void **)&scratch));
    mg_status st = MG_OK;
    size_t at = 0; /* local offset of this bucket's shard */
    for (int b = 0; st == MG_OK && b < l->n_buckets; b++) {
        mg_grad_range s;
        st = mg_grad_buffer_shard_range(l, b, me, &s);
        size_t n = st == MG_OK ? (size_t)(s.end - s.start) : 0;
        int64_t bstart = l->buckets[b].range.start;
        for (size_t j = 0; st == MG_OK && j < n; j += chunk) {
            size_t k = n - j < chunk ? n - j : chunk;
            void *stream;
            st = mg_backend_comm_begin(be, &stream);
            if (st == MG_OK)
                st = mg_comm_all_gather(d->dp, local + at + j, scratch, k, MG_F32, stream);
            if (st == MG_OK) st = mg_backend_comm_end(be);
            /* rank r's piece lands at its shard of the bucket: every shard has n elements */
            for (int r = 0; st == MG_OK && r < D; r++)
                st = be->copy_d2h(be, host + bstart + (size_t)r * n + j, scratch + (size_t)r * k,
                                  k * sizeof *scratch);
        }
        at += n;
    }
    be->free(be, scratch);
    return st;
}
