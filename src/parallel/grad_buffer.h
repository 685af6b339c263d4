/* The contiguous gradient (and parameter) buffer's layout, as megatron-core builds it
 * (distributed/param_and_grad_buffer.py: _ParamAndGradBuffer.__init__; at newer commits
 * optimizer/distrib_optimizer.py: DistributedOptimizer._compute_per_buffer_param_layout and
 * param_and_grad_buffer.py: _compute_default_per_buffer_param_layout), and the distributed
 * optimizer's shard of every bucket (optimizer/distrib_optimizer.py: _build_model_gbuf_range,
 * _build_model_gbuf_param_range_map). Pure functions of the parameter sizes and the options:
 * `megatron plan` prints them and the tests compare them with megatron-core's own output.
 *
 * The rules (elements, not bytes):
 *   - parameters are laid out in REVERSE registration order (roughly the order backward
 *     produces their gradients), so buffer row r holds registration index n - 1 - r;
 *   - with the distributed optimizer (or align_param_starts) each parameter starts on a multiple
 *     of 64 (MG_GRAD_BUFFER_PARAM_ALIGN); with the distributed optimizer each bucket's end is
 *     padded to a multiple of lcm(D, 128), or lcm(D, 128, 65536) with
 *     --ddp-pad-buckets-for-high-nccl-busbw, so every bucket splits into D equal shards; without
 *     it there is no padding at all;
 *   - a bucket closes after the parameter that brings it to at least bucket_size elements
 *     (counted from the bucket's start, alignment gaps included). bucket_size is Megatron's
 *     None (one bucket) without --overlap-grad-reduce, on pipeline ranks > 0 and for model chunks
 *     after the first (disable_bucketing); else --ddp-bucket-size, default max(40M, 1M x D);
 *   - with the distributed optimizer the shared embedding (the word embedding / output weight
 *     tied across the first and last pipeline stages) gets a bucket of its own: the open bucket
 *     closes at the embedding's (aligned) start, and a new one closes right after it;
 *   - a bucket's numel_unpadded runs from its start to where it was closed (the last parameter's
 *     end, or the shared embedding's aligned start): alignment gaps inside count, the end
 *     padding does not. The buffer's numel_unpadded is their sum.
 * D is the size of the group the buffer is reduced over: Megatron's data-parallel group with
 * context parallelism (dp x cp).
 *
 * Shards (distributed optimizer): bucket b of size n splits into D shards of n / D elements;
 * dp rank r owns [start + r*n/D, start + (r+1)*n/D). For each parameter overlapping a shard,
 * four ranges (the world/local/param indices of Megatron's distributed optimizer, its names):
 *   world            the overlap, in buffer coordinates ("gbuf_world")
 *   world_in_bucket  the same, relative to the bucket's start ("gbuf_world_in_bucket")
 *   local            the same, relative to the shard's start ("gbuf_local")
 *   param            the same, relative to the parameter's own first element ("param")
 *
 * Usage:
 *   mg_grad_buffer_config c = {.data_parallel_size = 2, .use_distributed_optimizer = true,
 *                              .shared_embedding = NULL};
 *   int64_t sizes[] = {10, 20, 30};
 *   mg_grad_buffer_layout l;
 *   MG_CHECK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));   // numel 256, unpadded 138
 *   mg_grad_shard_param sp[3]; int n;
 *   MG_CHECK(mg_grad_buffer_shard_params(&l, 0, 1, sp, &n));     // rank 1: index 0, local [0,10)
 *   mg_grad_buffer_layout_free(&l);
 *
 * Exports: mg_grad_range, mg_grad_buffer_config, mg_grad_buffer_param, mg_grad_buffer_bucket,
 * mg_grad_buffer_layout, mg_grad_shard_param, mg_grad_buffer_bucket_size,
 * mg_grad_buffer_layout_build, mg_grad_buffer_layout_free, mg_grad_buffer_largest_bucket,
 * mg_grad_buffer_shard_range,
 * mg_grad_buffer_param_ranges, mg_grad_buffer_shard_params. Needs: core/status. */
#ifndef MG_PARALLEL_GRAD_BUFFER_H
#define MG_PARALLEL_GRAD_BUFFER_H

#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_GRAD_BUFFER_PARAM_ALIGN      64       /* 128 bytes at 16-bit precision */
#define MG_GRAD_BUFFER_BUCKET_ALIGN     128      /* 256 bytes at 16-bit precision */
#define MG_GRAD_BUFFER_HIGH_BUSBW_ALIGN 65536    /* 2^16, --ddp-pad-buckets-for-high-nccl-busbw */
#define MG_GRAD_BUFFER_DEFAULT_BUCKET   40000000 /* default bucket: max(this, ...PER_RANK x D) */
#define MG_GRAD_BUFFER_BUCKET_PER_RANK  1000000
#define MG_GRAD_BUFFER_NO_BUCKET_SIZE   (-1) /* Megatron's bucket_size None: one bucket */

typedef struct {
    int64_t start, end; /* [start, end) in elements */
} mg_grad_range;

typedef struct {
    int data_parallel_size;         /* D: ranks the buffer is reduced over (dp x cp), >= 1 */
    bool use_distributed_optimizer; /* --use-distributed-optimizer: alignment, padding, shards */
    bool overlap_grad_reduce;       /* --overlap-grad-reduce: several buckets */
    int64_t bucket_size;            /* --ddp-bucket-size; 0: not given (Megatron's default) */
    bool pad_for_high_nccl_busbw;   /* --ddp-pad-buckets-for-high-nccl-busbw */
    bool disable_bucketing;         /* pipeline rank > 0 or a model chunk after the first */
    /* (n, registration order) Megatron's shared_embedding attribute of each parameter (the word
     * embedding / output weight tied across stages; a buffer may hold several); NULL: none */
    const bool *shared_embedding;
    /* Not Megatron's: start every parameter on a multiple of MG_GRAD_BUFFER_PARAM_ALIGN also
     * without the distributed optimizer. The trainer's buffers use it so parameters keep 16-byte
     * aligned starts for vector loads on every layout; `megatron plan` shows Megatron's rule. */
    bool align_param_starts;
} mg_grad_buffer_config;

typedef struct {
    int index;           /* registration index (row r of the layout holds n - 1 - r) */
    int bucket;          /* bucket holding it */
    mg_grad_range range; /* its elements in the buffer */
} mg_grad_buffer_param;

typedef struct {
    mg_grad_range range;    /* padded; the next bucket starts at range.end */
    int64_t numel_unpadded; /* see the rules above */
    int first, count;       /* its parameters: rows first .. first + count - 1 of params */
} mg_grad_buffer_bucket;

typedef struct {
    mg_grad_buffer_config cfg;
    int64_t bucket_size; /* resolved; MG_GRAD_BUFFER_NO_BUCKET_SIZE: one bucket */
    int n_params;
    mg_grad_buffer_param *params; /* (n_params) in buffer order */
    int n_buckets;
    mg_grad_buffer_bucket *buckets; /* (n_buckets) in buffer order */
    int64_t numel;                  /* buffer length, padding included */
    int64_t numel_unpadded;         /* sum of the buckets' numel_unpadded */
    bool *shared;                   /* (n_params) the layout's copy of cfg.shared_embedding */
} mg_grad_buffer_layout;

typedef struct {
    int index; /* registration index */
    mg_grad_range world, world_in_bucket, local, param;
} mg_grad_shard_param;

/* Megatron's bucket size for these options: MG_GRAD_BUFFER_NO_BUCKET_SIZE without
 * overlap_grad_reduce or with disable_bucketing, else bucket_size, else max(40M, 1M x D).
 * Fails on a bad config (see mg_grad_buffer_layout_build). */
mg_status mg_grad_buffer_bucket_size(const mg_grad_buffer_config *c, int64_t *out);

/* Lays out n parameters of sizes numel[0..n) (registration order). Fails with MG_ERR_USAGE on
 * n < 1, a size < 1, D < 1, a negative bucket_size, or a
 * buffer too large to index. On failure *out is left empty (safe to free). */
mg_status mg_grad_buffer_layout_build(const int64_t *numel, int n, const mg_grad_buffer_config *c,
                                      mg_grad_buffer_layout *out);
void mg_grad_buffer_layout_free(mg_grad_buffer_layout *l);

/* The elements of the layout's largest bucket (0 without buckets). */
int64_t mg_grad_buffer_largest_bucket(const mg_grad_buffer_layout *l);

/* dp_rank's shard of a bucket, in buffer coordinates. Fails (MG_ERR_USAGE) on a bucket or rank
 * out of range, or a bucket whose size is not a multiple of D (possible only without the
 * distributed optimizer, which never shards such a buffer). */
mg_status mg_grad_buffer_shard_range(const mg_grad_buffer_layout *l, int bucket, int dp_rank,
                                     mg_grad_range *out);

/* Megatron's _build_model_gbuf_param_range_map for one parameter occupying param_world in the
 * buffer, against a shard in buffer coordinates and its bucket's start: false when they do not
 * overlap, else true and the four ranges in *out (out->index is left as it was). */
bool mg_grad_buffer_param_ranges(mg_grad_range param_world, mg_grad_range shard,
                                 int64_t bucket_offset, mg_grad_shard_param *out);

/* The parameters overlapping dp_rank's shard of a bucket, in buffer order, with their ranges.
 * out must hold l->buckets[bucket].count entries (no other parameter can overlap the shard);
 * *n_out receives how many were written. Fails as mg_grad_buffer_shard_range. */
mg_status mg_grad_buffer_shard_params(const mg_grad_buffer_layout *l, int bucket, int dp_rank,
                                      mg_grad_shard_param *out, int *n_out);

#endif
