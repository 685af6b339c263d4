/* Megatron's --dataloader-type cyclic: MegatronPretrainingRandomSampler
 * (megatron/training/datasets/data_samplers.py) iterated by training.py's cyclic_iter, sample for
 * sample. With a dataset of T samples, micro batch M and D data-parallel ranks, let
 * A = T - T % (M D) (the samples an epoch consumes: the last incomplete batch is dropped). Each
 * rank's sampler keeps a counter c of consumed samples (the loader's consumed_samples at build,
 * then + M D per micro-batch it yields); each pass (an epoch's iterator) starts at epoch
 * e = c / A, offset o = c % A, and draws P = torch.randperm(N, seed e) (data/torch_random.h):
 *   data sharding (Megatron's default): N = (T / (M D)) M, the bucket of rank r is
 *     [r N, (r + 1) N); the rank yields r N + P[o / D ...] in micro-batches of M;
 *   --no-data-sharding: N = (T / M) M, the rank yields P[o + r], P[o + r + D], ... in
 *     micro-batches of M, an incomplete last one dropped.
 * When the pass ends, the next starts from the counter. Without sharding a rank r gets one
 * micro-batch more than (A - o) / (M D) per pass when ceil((T % (M D) - T % M - r) / D) = M
 * (e.g. T = 10, M = 1, D = 4: ranks 0 and 1), taken from the tail past A; its counter then runs
 * ahead of the other ranks' into the next epochs: Megatron's behaviour, reproduced.
 *
 * Positions: the trainer numbers samples as the single sampler does (the global batch that
 * starts after c consumed samples gives rank r's micro-batch m the positions
 * c + (m D + r) M + b); mg_cyclic_sampler_index maps such a position to the dataset index the
 * cyclic sampler gives rank r there, for loaders built at `start` consumed samples (Megatron
 * builds them at the run's start, so a resumed run continues from the checkpoint's consumed
 * samples as Megatron's does). The map is a pure function of the position and `start`; lookups
 * are fastest in increasing order (each rank keeps a cursor on its current pass, and a few
 * epochs' permutations are cached).
 * Exports: mg_cyclic_sampler, mg_cyclic_sampler_*. Needs: data/torch_random, core/status. */
#ifndef MG_DATA_CYCLIC_SAMPLER_H
#define MG_DATA_CYCLIC_SAMPLER_H

#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_CYCLIC_CACHE 3 /* epochs' permutations kept (ranks may be an epoch or two apart) */

typedef struct {
    int64_t counter; /* the rank's consumed samples when this pass began */
    int64_t k0;      /* the rank's micro-batches (since start) before this pass */
    int64_t n;       /* micro-batches this pass yields */
} mg_cyclic_pass;

typedef struct {
    int64_t total;        /* T: the dataset's samples */
    int64_t start;        /* consumed samples when the loader was built */
    int mbs, dp;          /* M, D */
    bool sharding;        /* Megatron's data_sharding (--no-data-sharding: false) */
    int64_t active;       /* A = T - T % (M D) */
    int64_t bucket;       /* N: the permutation's length */
    mg_cyclic_pass *pass; /* (D) each rank's cursor */
    struct {
        int64_t epoch;  /* -1: empty */
        uint32_t *perm; /* (bucket) torch.randperm(bucket, seed epoch) */
        uint64_t used;
    } cache[MG_CYCLIC_CACHE];
    uint64_t tick;
} mg_cyclic_sampler;

/* Fails (MG_ERR_USAGE) where Megatron's sampler fails: T < M D (no complete micro-batch over the
 * ranks: Megatron divides by zero) or start not a multiple of M D (its assertion). */
mg_status mg_cyclic_sampler_init(mg_cyclic_sampler *s, int64_t total, int64_t start, int mbs,
                                 int dp, bool sharding);
/* *index: the dataset sample at position pos >= start (see above). */
mg_status mg_cyclic_sampler_index(mg_cyclic_sampler *s, int64_t pos, int64_t *index);
void mg_cyclic_sampler_free(mg_cyclic_sampler *s);

#endif
