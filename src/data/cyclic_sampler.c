/* Megatron's cyclic sampler as a map from positions to samples (see cyclic_sampler.h). */
#include "data/cyclic_sampler.h"

#include "data/torch_random.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Micro-batches rank r's pass yields when it starts at counter c (MegatronPretrainingRandomSampler
 * .__iter__: the rank's share of the epoch from offset c % A, in whole micro-batches). */
static int64_t pass_batches(const mg_cyclic_sampler *s, int64_t c, int r) {
    const int64_t o = c % s->active, M = s->mbs, D = s->dp;
    if (s->sharding) return (s->bucket - o / D) / M;
    const int64_t left = s->bucket - o - r; /* idx_range_active[r::D] has ceil(left / D) */
    return left > 0 ? (left + D - 1) / D / M : 0;
}

mg_status mg_cyclic_sampler_init(mg_cyclic_sampler *s, int64_t total, int64_t start, int mbs,
                                 int dp, bool sharding) {
    memset(s, 0, sizeof *s);
    const int64_t per = (int64_t)mbs * dp;
    if (mbs < 1 || dp < 1 || total < 0 || start < 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "cyclic sampler: %" PRId64 " samples from %" PRId64
                       ", micro batch %d, %d ranks",
                       total, start, mbs, dp);
    if (total < per)
        return MG_FAIL(MG_ERR_USAGE,
                       "--dataloader-type cyclic: a split of %" PRId64 " samples holds no "
                       "micro batch for each of the %d data-parallel ranks (%" PRId64 " samples); "
                       "use more data, a smaller --micro-batch-size or --dataloader-type single",
                       total, dp, per);
    if (total > (int64_t)UINT32_MAX + 1)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "--dataloader-type cyclic: %" PRId64 " samples are more than 2^32", total);
    if (start % per)
        return MG_FAIL(MG_ERR_USAGE,
                       "--dataloader-type cyclic: %" PRId64 " consumed samples are not a multiple "
                       "of micro batch x data-parallel size (%" PRId64 "), as Megatron's sampler "
                       "requires",
                       start, per);
    s->total = total;
    s->start = start;
    s->mbs = mbs;
    s->dp = dp;
    s->sharding = sharding;
    s->active = total - total % per;
    s->bucket = sharding ? total / per * mbs : total / mbs * mbs;
    for (int i = 0; i < MG_CYCLIC_CACHE; i++) s->cache[i].epoch = -1;
    s->pass = calloc((size_t)dp, sizeof *s->pass);
    if (!s->pass) return MG_FAIL(MG_ERR_NOMEM, "out of memory (cyclic sampler)");
    for (int r = 0; r < dp; r++) s->pass[r] = (mg_cyclic_pass){start, 0, pass_batches(s, start, r)};
    return MG_OK;
}

/* torch.randperm(bucket, seed epoch), from the cache or drawn into its least recently used slot. */
static mg_status epoch_perm(mg_cyclic_sampler *s, int64_t epoch, const uint32_t **perm) {
    int slot = 0;
    for (int i = 0; i < MG_CYCLIC_CACHE; i++) {
        if (s->cache[i].epoch == epoch) {
            s->cache[i].used = ++s->tick;
            *perm = s->cache[i].perm;
            return MG_OK;
        }
        if (s->cache[i].used < s->cache[slot].used) slot = i;
    }
    if (!s->cache[slot].perm) {
        s->cache[slot].perm = malloc((size_t)s->bucket * sizeof(uint32_t));
        if (!s->cache[slot].perm)
            return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the permutation of %" PRId64 " samples",
                           s->bucket);
    }
    mg_torch_randperm_u32((uint64_t)epoch, s->bucket, s->cache[slot].perm);
    s->cache[slot].epoch = epoch;
    s->cache[slot].used = ++s->tick;
    *perm = s->cache[slot].perm;
    return MG_OK;
}

mg_status mg_cyclic_sampler_index(mg_cyclic_sampler *s, int64_t pos, int64_t *index) {
    const int64_t M = s->mbs, D = s->dp, per = M * D;
    if (!s->pass || pos < s->start)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "cyclic sampler: position %" PRId64 " before its start %" PRId64, pos,
                       s->start);
    const int64_t k = (pos - s->start) / per, b = (pos - s->start) % M;
    const int r = (int)((pos - s->start) % per / M);
    mg_cyclic_pass *p = &s->pass[r];
    if (k < p->k0) *p = (mg_cyclic_pass){s->start, 0, pass_batches(s, s->start, r)};
    while (k >= p->k0 + p->n) { /* the passes before the one holding micro-batch k */
        p->counter += p->n * per;
        p->k0 += p->n;
        p->n = pass_batches(s, p->counter, r);
    }
    const int64_t e = p->counter / s->active, o = p->counter % s->active, j = (k - p->k0) * M + b;
    const uint32_t *perm = NULL;
    MG_CHECK(epoch_perm(s, e, &perm));
    *index = s->sharding ? r * s->bucket + perm[o / D + j] : perm[o + r + j * D];
    return MG_OK;
}

void mg_cyclic_sampler_free(mg_cyclic_sampler *s) {
    for (int i = 0; i < MG_CYCLIC_CACHE; i++) free(s->cache[i].perm);
    free(s->pass);
    memset(s, 0, sizeof *s);
}
