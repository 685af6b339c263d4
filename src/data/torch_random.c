/* torch's CPU randperm with a seeded generator (see torch_random.h). */
#include "data/torch_random.h"

#include "data/numpy_random.h"

/* One body for both element types: the draws depend only on n and the seed. */
#define RANDPERM_BODY(T)                                                                           \
    mg_np_random r;                                                                                \
    mg_np_random_seed(&r, (uint32_t)(seed & 0xffffffffu));                                         \
    if (n < MG_TORCH_RANDPERM_SMALL) {                                                             \
        for (int64_t i = 0; i < n; i++) out[i] = (T)i;                                             \
        for (int64_t i = 0; i < n - 1; i++) {                                                      \
            int64_t z = (int64_t)(mg_np_random_next32(&r) % (uint64_t)(n - i));                    \
            T save = out[i];                                                                       \
            out[i] = out[z + i];                                                                   \
            out[z + i] = save;                                                                     \
        }                                                                                          \
        return;                                                                                    \
    }                                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                              \
        int64_t z = (int64_t)(mg_np_random_next64(&r) % (uint64_t)(i + 1));                        \
        out[i] = (T)i;                                                                             \
        out[i] = out[z];                                                                           \
        out[z] = (T)i;                                                                             \
    }

void mg_torch_randperm_i64(uint64_t seed, int64_t n, int64_t *out) {
    RANDPERM_BODY(int64_t)
}

void mg_torch_randperm_u32(uint64_t seed, int64_t n, uint32_t *out) {
    RANDPERM_BODY(uint32_t)
}
