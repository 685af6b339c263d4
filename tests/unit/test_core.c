/* core/: arena planning, dtype rounding, the Philox generator, status propagation. */
#include "test.h"

#include "core/arena.h"
#include "core/rng.h"
#include "core/tensor.h"

#include <stdint.h>
#include <string.h>

MG_TEST(core_arena_offsets_aligned_and_fixed) {
    mg_arena a;
    mg_arena_init(&a, "test");
    size_t o1, o2, o3;
    MG_EXPECT_OK(mg_arena_reserve(&a, 3, 0, &o1));
    MG_EXPECT_OK(mg_arena_reserve(&a, 1000, 0, &o2));
    MG_EXPECT_OK(mg_arena_reserve(&a, 8, 4096, &o3));
    MG_EXPECT(o1 == 0 && o2 == 256 && o3 == 4096, "offsets %zu %zu %zu", o1, o2, o3);
    MG_EXPECT_OK(mg_arena_commit(&a, NULL));
    unsigned char *p = mg_arena_ptr(&a, 0);
    MG_EXPECT(((uintptr_t)p % MG_ARENA_ALIGN) == 0, "base not aligned");
    int zero = 1;
    for (size_t i = 0; i < a.size; i++) zero &= p[i] == 0;
    MG_EXPECT(zero, "committed memory is not zeroed");
    size_t o4;
    MG_EXPECT(mg_arena_reserve(&a, 8, 0, &o4) == MG_ERR_INTERNAL, "reserve after commit accepted");
    MG_EXPECT(strstr(mg_error_message(), "after commit") != NULL, "message: %s", mg_error_message());
    mg_arena_free(&a);
}

/* The two bf16 neighbours of x (truncation and the next value up in magnitude). */
static void bf16_neighbours(float x, float *lo, float *hi) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t t = u & 0xffff0000u, n = t + 0x10000u;
    memcpy(lo, &t, 4);
    memcpy(hi, &n, 4);
}

MG_TEST(core_bf16_round_to_nearest_even) {
    /* every rounding picks the nearer neighbour; exact ties pick the even mantissa */
    for (uint32_t k = 0; k < 200000; k++) {
        float x = (mg_rng_uniform(7, 1, k) - 0.5f) * 1e4f * mg_rng_uniform(7, 2, k);
        float lo, hi, r = mg_bf16_to_f32(mg_f32_to_bf16(x));
        bf16_neighbours(x, &lo, &hi);
        double dl = fabs((double)x - lo), dh = fabs((double)x - hi);
        float want = dl < dh ? lo : dh < dl ? hi : ((mg_f32_to_bf16(lo) & 1) ? hi : lo);
        if (r != want) {
            MG_EXPECT(0, "bf16(%.9g) = %.9g, expected %.9g", x, r, want);
            return;
        }
    }
    /* exact ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1); 1 + 3*2^-8 -> 1 + 2^-6 */
    MG_EXPECT(mg_bf16_to_f32(mg_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f, "tie not to even");
    MG_EXPECT(mg_bf16_to_f32(mg_f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f, "tie up");
    MG_EXPECT(isnan(mg_bf16_to_f32(mg_f32_to_bf16(NAN))), "NaN lost");
    MG_EXPECT(isinf(mg_bf16_to_f32(mg_f32_to_bf16(INFINITY))), "Inf lost");
    MG_EXPECT(isinf(mg_bf16_to_f32(mg_f32_to_bf16(3.4e38f))), "overflow must round to Inf");
}

MG_TEST(core_f16_round_to_nearest_even) {
    /* every one of the 63488 finite halves converts back exactly */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue;
        float f = mg_f16_to_f32((uint16_t)h);
        if (mg_f32_to_f16(f) != h && !(f == 0 && (h & 0x7fffu) == 0)) {
            MG_EXPECT(0, "half 0x%04x -> %g -> 0x%04x", h, f, mg_f32_to_f16(f));
            return;
        }
    }
    /* midpoints between consecutive halves go to the even one (normal and subnormal range) */
    uint16_t cases[] = {0x0001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x7bfe};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t a = cases[i], b = a + 1;
        float mid = (mg_f16_to_f32(a) + mg_f16_to_f32(b)) / 2; /* exact in fp32 */
        uint16_t even = (a & 1) ? b : a;
        MG_EXPECT(mg_f32_to_f16(mid) == even, "midpoint of 0x%04x,0x%04x -> 0x%04x", a, b,
                  mg_f32_to_f16(mid));
    }
    MG_EXPECT(mg_f32_to_f16(65519.0f) == 0x7bff, "65519 must round to 65504");
    MG_EXPECT(mg_f32_to_f16(65520.0f) == 0x7c00, "65520 must round to Inf");
    MG_EXPECT(mg_f32_to_f16(1e-8f) == 0, "below half the smallest subnormal must be 0");
    MG_EXPECT(mg_f32_to_f16(-0.0f) == 0x8000, "negative zero");
    MG_EXPECT((mg_f32_to_f16(NAN) & 0x7fffu) > 0x7c00u, "NaN lost");
}

MG_TEST(core_philox_known_answers) {
    /* Known-answer vectors of Philox-4x32-10 from the Random123 distribution (kat_vectors) */
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof *kat; i++) {
        uint32_t out[4];
        mg_philox(kat[i].ctr, kat[i].key, out);
        MG_EXPECT(memcmp(out, kat[i].out, sizeof out) == 0, "vector %zu: %08x %08x %08x %08x", i,
                  out[0], out[1], out[2], out[3]);
    }
}

MG_TEST(core_rng_normal_statistics_and_independence) {
    double s = 0, s2 = 0, s4 = 0, cross = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = mg_rng_normal(1234, 99, (uint64_t)i), y = mg_rng_normal(1234, 100, (uint64_t)i);
        s += x, s2 += x * x, s4 += x * x * x * x, cross += x * y;
    }
    double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var);
    /* standard errors: mean 1/sqrt(n) = 0.0022, var sqrt(2/n) = 0.0032, kurtosis ~0.011 */
    MG_EXPECT(fabs(mean) < 0.01, "mean %g", mean);
    MG_EXPECT(fabs(var - 1) < 0.015, "variance %g", var);
    MG_EXPECT(fabs(kurt - 3) < 0.06, "kurtosis %g (normal: 3)", kurt);
    MG_EXPECT(fabs(cross / n) < 0.01, "streams of different ids correlate: %g", cross / n);
    /* a value depends only on (seed, id, index): order of generation is irrelevant */
    MG_EXPECT(mg_rng_normal(5, 6, 123456789) == mg_rng_normal(5, 6, 123456789), "not a function");
    MG_EXPECT(mg_rng_normal(5, 6, 1) != mg_rng_normal(6, 6, 1), "seed ignored");
    MG_EXPECT(mg_rng_normal(5, 6, 1) != mg_rng_normal(5 + (1ull << 32), 6, 1),
              "high seed bits ignored");
}

static mg_status inner_failure(void) { return MG_FAIL(MG_ERR_FORMAT, "inner: bad field %d", 7); }
static mg_status outer_call(void) {
    MG_CHECK(inner_failure());
    return MG_OK;
}

MG_TEST(core_status_propagates_with_trace) {
    mg_error_clear();
    MG_EXPECT(outer_call() == MG_ERR_FORMAT, "code not propagated");
    MG_EXPECT(strcmp(mg_error_message(), "inner: bad field 7") == 0, "message: %s",
              mg_error_message());
    MG_EXPECT(strstr(mg_error_trace(), "outer_call") && strstr(mg_error_trace(), "inner_failure"),
              "trace: %s", mg_error_trace());
}
