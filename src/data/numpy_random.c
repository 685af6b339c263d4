/* MT19937 and the bounded draws numpy's RandomState.shuffle makes (see numpy_random.h). */
#include "data/numpy_random.h"

#define MT_M       397
#define MATRIX_A   0x9908b0dfU
#define UPPER_BIT  0x80000000U
#define LOWER_BITS 0x7fffffffU

void mg_np_random_seed(mg_np_random *r, uint32_t seed) {
    r->key[0] = seed;
    for (int i = 1; i < MG_NP_MT_N; i++)
        r->key[i] = 1812433253U * (r->key[i - 1] ^ (r->key[i - 1] >> 30)) + (uint32_t)i;
    r->pos = MG_NP_MT_N;
}

static inline uint32_t twist(uint32_t cur, uint32_t next, uint32_t far) {
    uint32_t y = (cur & UPPER_BIT) | (next & LOWER_BITS);
    return far ^ (y >> 1) ^ ((y & 1U) ? MATRIX_A : 0U);
}

/* Regenerates all 624 words. */
static void regenerate(mg_np_random *r) {
    uint32_t *k = r->key;
    int i = 0;
    for (; i < MG_NP_MT_N - MT_M; i++) k[i] = twist(k[i], k[i + 1], k[i + MT_M]);
    for (; i < MG_NP_MT_N - 1; i++) k[i] = twist(k[i], k[i + 1], k[i + MT_M - MG_NP_MT_N]);
    k[MG_NP_MT_N - 1] = twist(k[MG_NP_MT_N - 1], k[0], k[MT_M - 1]);
    r->pos = 0;
}

uint32_t mg_np_random_next32(mg_np_random *r) {
    if (r->pos >= MG_NP_MT_N) regenerate(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

uint64_t mg_np_random_next64(mg_np_random *r) {
    uint64_t hi = mg_np_random_next32(r); /* numpy: first draw is the high half */
    return hi << 32 | mg_np_random_next32(r);
}

uint64_t mg_np_random_interval(mg_np_random *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffULL) {
        while ((v = (mg_np_random_next32(r) & mask)) > max) {
        }
    } else {
        while ((v = (mg_np_random_next64(r) & mask)) > max) {
        }
    }
    return v;
}

#define SHUFFLE_BODY(T)                                                                            \
    for (int64_t i = n - 1; i >= 1; i--) {                                                         \
        int64_t j = (int64_t)mg_np_random_interval(r, (uint64_t)i);                                \
        T tmp = a[j];                                                                              \
        a[j] = a[i];                                                                               \
        a[i] = tmp;                                                                                \
    }

void mg_np_shuffle_int32(mg_np_random *r, int32_t *a, int64_t n) {
    SHUFFLE_BODY(int32_t)
}
void mg_np_shuffle_uint32(mg_np_random *r, uint32_t *a, int64_t n) {
    SHUFFLE_BODY(uint32_t)
}
void mg_np_shuffle_int64(mg_np_random *r, int64_t *a, int64_t n) {
    SHUFFLE_BODY(int64_t)
}
