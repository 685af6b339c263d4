/* The dropout streams of one rank's model (core/dropout.h's MG_DROPOUT_STREAM masks), seeded as
 * Megatron seeds its tracker of CUDA generators at start-up:
 *   default         --seed + 100 x pipeline rank. The tensor-parallel ranks share it: they hold
 *                   the same activations outside the split layers, and must drop the same
 *                   elements of them (hidden dropout without sequence parallelism).
 *   model-parallel  the default seed + 2718 + tensor-parallel rank: a stream of each rank's own,
 *                   for what differs from rank to rank (attention dropout on the rank's heads;
 *                   hidden dropout on its rows under sequence parallelism).
 * Data-parallel ranks share both and draw the same positions of them for their different
 * samples (Megatron's --data-parallel-random-init, which would add 10 x data-parallel rank, is not
 * here). Each stream is a {seed, offset} pair in backend memory, the offsets starting at 0. The op
 * with use number u in a training step (mg_model_rng_use) draws at offset + u; the step's end moves
 * both offsets on by the step's uses (mg_model_rng_advance, on the backend's stream), so a
 * backward, which recomputes its forward's mask, draws what the forward drew. Both offsets move
 * together: a checkpoint keeps one (mg_model_rng_offset, mg_model_rng_set_offset).
 * Exports: MG_RNG_DEFAULT, MG_RNG_MODEL_PARALLEL, mg_model_rng, mg_model_rng_*. Needs: backend,
 * core/dropout.h. */
#ifndef MG_MODEL_RNG_H
#define MG_MODEL_RNG_H

#include "backend/backend.h"

#include <stdint.h>

enum { MG_RNG_DEFAULT = 0, MG_RNG_MODEL_PARALLEL = 1, MG_RNG_STREAMS = 2 };

typedef struct {
    mg_backend *be;
    uint64_t *state;               /* backend (2 x MG_RNG_STREAMS): {seed, offset} per stream */
    uint64_t seed[MG_RNG_STREAMS]; /* the seeds, on the host */
} mg_model_rng;

/* The seeds of the default and the model-parallel stream of the rank at (pp_rank, tp_rank). */
void mg_model_rng_seeds(uint64_t seed, int pp_rank, int tp_rank, uint64_t out[MG_RNG_STREAMS]);

/* The use number of the dropout at `site` (MG_DROPOUT_ATTENTION .. MG_DROPOUT_MLP_OUT) of global
 * layer `layer` in this rank's microbatch mb of a step, in a model of L layers: every (microbatch,
 * layer, site) of a step draws at its own offset. */
static inline uint64_t mg_model_rng_use(int L, int mb, int layer, int site) {
    return (uint64_t)mb * (3u * (uint64_t)L) + (uint64_t)layer * 3u + (uint64_t)(site - 1);
}
/* The uses of a step of n_microbatches: what the offsets move on by at its end. */
static inline uint64_t mg_model_rng_step_uses(int L, int n_microbatches) {
    return (uint64_t)n_microbatches * (3u * (uint64_t)L);
}

/* Allocates the streams in be's memory and seeds them (offsets 0). */
mg_status mg_model_rng_bind(mg_model_rng *r, mg_backend *be, uint64_t seed, int pp_rank,
                            int tp_rank);
/* The {seed, offset} pair of stream `which` (backend memory; NULL before bind). */
static inline const uint64_t *mg_model_rng_stream(const mg_model_rng *r, int which) {
    return r->state ? r->state + 2 * which : NULL;
}
/* The streams' offset, read back from the backend (waits for its stream; 0 before bind). */
mg_status mg_model_rng_offset(const mg_model_rng *r, uint64_t *offset);
/* Both streams at `offset` (a resumed run's), their seeds unchanged. */
mg_status mg_model_rng_set_offset(mg_model_rng *r, uint64_t offset);
/* Both offsets += by, in order with the backend's ops (the end of a training step). */
mg_status mg_model_rng_advance(mg_model_rng *r, uint64_t by);
void mg_model_rng_free(mg_model_rng *r);

#endif
