/* The grad buffer's layout and the distributed optimizer's shards (rules in grad_buffer.h). The
 * layout walk is megatron-core's loop over params[::-1] in _ParamAndGradBuffer.__init__, step for
 * step, so the places where a bucket closes and what it counts as unpadded match exactly. */
#include "parallel/grad_buffer.h"

#include <stdlib.h>
#include <string.h>

/* Elements beyond this are refused: far above any real model, far below int64 overflow even
 * after padding to a bucket divisor (at most 2^31 x 2^16). */
#define MAX_NUMEL ((int64_t)1 << 56)

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm64(int64_t a, int64_t b) {
    return a / gcd64(a, b) * b;
}

static int64_t pad_up(int64_t x, int64_t divisor) {
    return (x + divisor - 1) / divisor * divisor;
}

static mg_status check_config(const mg_grad_buffer_config *c) {
    if (c->data_parallel_size < 1)
        return MG_FAIL(MG_ERR_USAGE, "grad buffer: the data-parallel size must be >= 1, got %d",
                       c->data_parallel_size);
    if (c->bucket_size < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--ddp-bucket-size must be a positive number of elements, got %lld",
                       (long long)c->bucket_size);
    return MG_OK;
}

mg_status mg_grad_buffer_bucket_size(const mg_grad_buffer_config *c, int64_t *out) {
    MG_CHECK(check_config(c));
    if (!c->overlap_grad_reduce || c->disable_bucketing)
        *out = MG_GRAD_BUFFER_NO_BUCKET_SIZE;
    else if (c->bucket_size > 0)
        *out = c->bucket_size;
    else {
        int64_t scaled = (int64_t)MG_GRAD_BUFFER_BUCKET_PER_RANK * c->data_parallel_size;
        *out = scaled > MG_GRAD_BUFFER_DEFAULT_BUCKET ? scaled : MG_GRAD_BUFFER_DEFAULT_BUCKET;
    }
    return MG_OK;
}

/* The walk's state: where the next parameter may start and the bucket being filled. */
typedef struct {
    const mg_grad_buffer_config *cfg;
    mg_grad_buffer_layout *l;
    int64_t bucket_divisor; /* bucket ends are padded to a multiple (distributed optimizer) */
    int64_t bucket_start;
    int bucket_first; /* first row of the open bucket */
    int rows;         /* rows placed so far */
} walk;

/* Megatron's _update_bucket_metadata: closes the open bucket at `end` (a parameter's end or the
 * shared embedding's aligned start) and returns the padded end, where the next bucket starts. */
static int64_t close_bucket(walk *w, int64_t end) {
    mg_grad_buffer_layout *l = w->l;
    mg_grad_buffer_bucket *b = &l->buckets[l->n_buckets++];
    int64_t padded = w->cfg->use_distributed_optimizer ? pad_up(end, w->bucket_divisor) : end;
    b->range = (mg_grad_range){w->bucket_start, padded};
    b->numel_unpadded = end - w->bucket_start;
    b->first = w->bucket_first;
    b->count = w->rows - w->bucket_first;
    l->numel_unpadded += b->numel_unpadded;
    w->bucket_start = padded;
    w->bucket_first = w->rows;
    return padded;
}

static mg_status check_sizes(const int64_t *numel, int n, const mg_grad_buffer_config *c) {
    if (!numel || n < 1)
        return MG_FAIL(MG_ERR_USAGE, "grad buffer: no parameters to lay out (got %d)", n);
    for (int i = 0; i < n; i++)
        if (numel[i] < 1 || numel[i] > MAX_NUMEL)
            return MG_FAIL(MG_ERR_USAGE,
                           "grad buffer: parameter %d has %lld elements; sizes must be in "
                           "[1, 2^56]",
                           i, (long long)numel[i]);
    return MG_OK;
}

mg_status mg_grad_buffer_layout_build(const int64_t *numel, int n, const mg_grad_buffer_config *c,
                                      mg_grad_buffer_layout *out) {
    memset(out, 0, sizeof *out);
    int64_t bucket_size;
    MG_CHECK(mg_grad_buffer_bucket_size(c, &bucket_size));
    MG_CHECK(check_sizes(numel, n, c));
    mg_grad_buffer_layout l = {.cfg = *c, .bucket_size = bucket_size, .n_params = n};
    l.params = calloc((size_t)n, sizeof *l.params);
    /* A bucket closes only with a parameter in it, so there are at most n. */
    l.buckets = calloc((size_t)n, sizeof *l.buckets);
    l.shared = calloc((size_t)n, sizeof *l.shared);
    if (l.shared && c->shared_embedding) memcpy(l.shared, c->shared_embedding, (size_t)n);
    l.cfg.shared_embedding = l.shared;
    if (!l.params || !l.buckets || !l.shared) {
        mg_grad_buffer_layout_free(&l);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory laying out %d parameters", n);
    }
    const bool distopt = c->use_distributed_optimizer;
    int64_t divisor = lcm64(c->data_parallel_size, MG_GRAD_BUFFER_BUCKET_ALIGN);
    if (c->pad_for_high_nccl_busbw) divisor = lcm64(divisor, MG_GRAD_BUFFER_HIGH_BUSBW_ALIGN);
    walk w = {.cfg = c, .l = &l, .bucket_divisor = divisor};

    int64_t next = 0, end = 0; /* where the next parameter may start; the last one's end */
    for (int r = 0; r < n; r++) {
        int index = n - 1 - r; /* backward order */
        /* Megatron splits the shared embedding off only with the distributed optimizer, whose
         * reduce-scatter must shard it identically on the first and last pipeline stages. */
        bool own_bucket = distopt && l.shared[index];
        int64_t start =
            distopt || c->align_param_starts ? pad_up(next, MG_GRAD_BUFFER_PARAM_ALIGN) : next;
        if (own_bucket && w.rows > w.bucket_first) start = close_bucket(&w, start);
        end = start + numel[index];
        if (end > MAX_NUMEL) {
            mg_grad_buffer_layout_free(&l);
            return MG_FAIL(MG_ERR_USAGE, "grad buffer: %d parameters need more than 2^56 elements",
                           n);
        }
        l.params[r] =
            (mg_grad_buffer_param){.index = index, .bucket = l.n_buckets, .range = {start, end}};
        w.rows++;
        bool full =
            bucket_size != MG_GRAD_BUFFER_NO_BUCKET_SIZE && end - w.bucket_start >= bucket_size;
        next = full || own_bucket ? close_bucket(&w, end) : end;
    }
    if (w.rows > w.bucket_first) close_bucket(&w, end);
    l.numel = l.buckets[l.n_buckets - 1].range.end;
    *out = l;
    return MG_OK;
}

void mg_grad_buffer_layout_free(mg_grad_buffer_layout *l) {
    free(l->params);
    free(l->buckets);
    free(l->shared);
    memset(l, 0, sizeof *l);
}

int64_t mg_grad_buffer_largest_bucket(const mg_grad_buffer_layout *l) {
    int64_t most = 0;
    for (int k = 0; k < l->n_buckets; k++) {
        const int64_t n = l->buckets[k].range.end - l->buckets[k].range.start;
        if (n > most) most = n;
    }
    return most;
}

mg_status mg_grad_buffer_shard_range(const mg_grad_buffer_layout *l, int bucket, int dp_rank,
                                     mg_grad_range *out) {
    int d = l->cfg.data_parallel_size;
    if (bucket < 0 || bucket >= l->n_buckets)
        return MG_FAIL(MG_ERR_USAGE, "grad buffer: bucket %d does not exist (%d buckets)", bucket,
                       l->n_buckets);
    if (dp_rank < 0 || dp_rank >= d)
        return MG_FAIL(MG_ERR_USAGE, "grad buffer: data-parallel rank %d is outside [0, %d)",
                       dp_rank, d);
    mg_grad_range b = l->buckets[bucket].range;
    int64_t size = b.end - b.start;
    if (size % d)
        return MG_FAIL(MG_ERR_USAGE,
                       "grad buffer: bucket %d has %lld elements, not a multiple of the "
                       "data-parallel size %d; only the distributed optimizer's padded buckets "
                       "are sharded",
                       bucket, (long long)size, d);
    int64_t shard = size / d;
    out->start = b.start + dp_rank * shard;
    out->end = out->start + shard;
    return MG_OK;
}

bool mg_grad_buffer_param_ranges(mg_grad_range param_world, mg_grad_range shard,
                                 int64_t bucket_offset, mg_grad_shard_param *out) {
    int64_t shard_size = shard.end - shard.start;
    int64_t local_start = param_world.start - shard.start;
    int64_t local_end = param_world.end - shard.start;
    if (local_start < 0) local_start = 0;
    if (local_end > shard_size) local_end = shard_size;
    if (local_end <= local_start) return false;
    int64_t len = local_end - local_start;
    out->local = (mg_grad_range){local_start, local_end};
    out->world = (mg_grad_range){shard.start + local_start, shard.start + local_end};
    out->world_in_bucket =
        (mg_grad_range){out->world.start - bucket_offset, out->world.end - bucket_offset};
    int64_t sub_start = shard.start - param_world.start;
    if (sub_start < 0) sub_start = 0;
    out->param = (mg_grad_range){sub_start, sub_start + len};
    return true;
}

mg_status mg_grad_buffer_shard_params(const mg_grad_buffer_layout *l, int bucket, int dp_rank,
                                      mg_grad_shard_param *out, int *n_out) {
    mg_grad_range shard;
    *n_out = 0;
    MG_CHECK(mg_grad_buffer_shard_range(l, bucket, dp_rank, &shard));
    const mg_grad_buffer_bucket *b = &l->buckets[bucket];
    int n = 0;
    for (int r = b->first; r < b->first + b->count; r++) {
        const mg_grad_buffer_param *p = &l->params[r];
        if (mg_grad_buffer_param_ranges(p->range, shard, b->range.start, &out[n])) {
            out[n].index = p->index;
            n++;
        }
    }
    *n_out = n;
    return MG_OK;
}
