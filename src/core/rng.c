#include "core/rng.h"

#include "core/philox.h"

#include <math.h>

void mg_philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    mg_philox4x32_10(counter, key, out);
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
