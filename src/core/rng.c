#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void mg_philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void block(uint64_t seed, uint32_t id, uint64_t index, uint32_t out[4]) {
    /* key: the low 32 bits of the seed and the stream id; the seed's high bits go in the counter */
    uint32_t key[2] = {(uint32_t)seed, id};
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)(seed >> 32), 0};
    mg_philox(ctr, key, out);
}

float mg_rng_normal(uint64_t seed, uint32_t id, uint64_t index) {
    uint32_t r[4];
    block(seed, id, index, r);
    /* u1 in (0,1], u2 in [0,1): 32-bit resolution, computed in double for accuracy */
    double u1 = ((double)r[0] + 1.0) / 4294967296.0;
    double u2 = (double)r[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float mg_rng_uniform(uint64_t seed, uint32_t id, uint64_t index) {
    uint32_t r[4];
    block(seed, id, index, r);
    return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

uint32_t mg_param_id(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}
