/* numpy's legacy RandomState, as far as Megatron's dataset index building draws from it:
 * MT19937 seeded from an integer (numpy.random.RandomState(seed), i.e. Matsumoto and Nishimura's
 * init_genrand), its 32- and 64-bit outputs (numpy's next_uint32 / next_uint64; the 64-bit one is
 * the first 32-bit draw in the high half), bounded integers by masked rejection (numpy's
 * random_interval: the smallest all-ones mask >= max, redraw while the masked value exceeds max;
 * 32-bit draws while max fits in 32 bits, 64-bit draws above) and RandomState.shuffle on a 1-D
 * array (Fisher-Yates from the last element down: for i = n-1 .. 1 swap a[i] with
 * a[random_interval(i)]). The element type does not change the draws, only what is swapped.
 * Exports: mg_np_random, mg_np_random_*, mg_np_shuffle_*. Needs: nothing. */
#ifndef MG_DATA_NUMPY_RANDOM_H
#define MG_DATA_NUMPY_RANDOM_H

#include <stdint.h>

#define MG_NP_MT_N 624

typedef struct {
    uint32_t key[MG_NP_MT_N]; /* (624) MT19937 state words */
    int pos;                  /* next word to temper; MG_NP_MT_N: regenerate first */
} mg_np_random;

/* numpy.random.RandomState(seed) for an integer seed in [0, 2^32). */
void mg_np_random_seed(mg_np_random *r, uint32_t seed);
uint32_t mg_np_random_next32(mg_np_random *r);
uint64_t mg_np_random_next64(mg_np_random *r);
/* A uniform integer in [0, max], exactly as numpy's random_interval draws it. */
uint64_t mg_np_random_interval(mg_np_random *r, uint64_t max);

/* RandomState.shuffle(a) for a 1-D array of n elements. */
void mg_np_shuffle_int32(mg_np_random *r, int32_t *a, int64_t n);
void mg_np_shuffle_uint32(mg_np_random *r, uint32_t *a, int64_t n);
void mg_np_shuffle_int64(mg_np_random *r, int64_t *a, int64_t n);

#endif
