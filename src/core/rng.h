/* Counter-based random numbers: Philox-4x32-10 (Salmon et al., SC'11). A value depends only on
 * (key, counter), never on call order, so any shard of a parameter can generate exactly the values
 * the unsharded parameter has at the same global element indices.
 * Parameter initialisation uses key = (seed, parameter id) and counter = global element index.
 * Exports: mg_philox, mg_rng_normal, mg_rng_uniform, mg_param_id. Needs: nothing. */
#ifndef MG_RNG_H
#define MG_RNG_H

#include <stdint.h>

/* One Philox-4x32-10 block: out = philox(counter, key). */
void mg_philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
/* Standard normal N(0,1) for element `index` of the stream (seed, id), by Box-Muller. */
float mg_rng_normal(uint64_t seed, uint32_t id, uint64_t index);
/* Uniform in [0,1) for element `index` of the stream (seed, id); 24-bit resolution. */
float mg_rng_uniform(uint64_t seed, uint32_t id, uint64_t index);
/* Stable parameter id: FNV-1a of the parameter's canonical (unsharded) name. */
uint32_t mg_param_id(const char *name);

#endif
