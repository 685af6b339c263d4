/* Philox-4x32-10 (Salmon et al., SC'11) as one inline function that C host code and CUDA device
 * code both compile, so that a counter-based draw is the same bits on every backend. Integer
 * arithmetic only: no rounding, no device intrinsics that the host lacks.
 * core/rng.c (mg_philox, parameter initialisation) and core/dropout.h (dropout masks) use it.
 * Exports: MG_PHILOX_FN, mg_philox4x32_10. Needs: nothing. */
#ifndef MG_PHILOX_H
#define MG_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define MG_PHILOX_FN static inline __host__ __device__
#else
#define MG_PHILOX_FN static inline
#endif

/* out = philox(counter, key), ten rounds. */
MG_PHILOX_FN void mg_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                                   uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

#endif
