/* numpy's legacy RandomState as Megatron's index building uses it: MT19937 seeding and outputs,
 * bounded integers by masked rejection (32- and 64-bit paths) and RandomState.shuffle, against
 * values numpy wrote (tests/golden/dataset/numpy_random, tools/reference/make_dataset_golden.py)
 * and against MT19937's published reference outputs. */
#include "test.h"

#include "core/md5.h"
#include "core/status.h"
#include "data/npy.h"
#include "data/numpy_random.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define NPR_DIR "tests/golden/dataset/numpy_random"

static cJSON *load_meta(mg_test_ctx *t) {
    FILE *f = fopen(NPR_DIR "/meta.json", "rb");
    MG_EXPECT(f != NULL, "cannot open " NPR_DIR "/meta.json");
    if (!f) return NULL;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *m = cJSON_Parse(buf);
    MG_EXPECT(m != NULL, "meta.json does not parse");
    return m;
}

static const uint32_t k_seeds[4] = {0, 1, 1234, 4294967295U};

/* Matsumoto & Nishimura's reference: init_genrand(5489); also std::mt19937's 10000th output. */
MG_TEST(nprand_mt19937_reference_outputs) {
    const uint32_t want[10] = {3499211612U, 581869302U,  3890346734U, 3586334585U, 545404204U,
                               4161255391U, 3922919429U, 949333985U,  2715962298U, 1323567403U};
    mg_np_random r;
    mg_np_random_seed(&r, 5489);
    for (int i = 0; i < 10; i++) {
        uint32_t v = mg_np_random_next32(&r);
        MG_EXPECT(v == want[i], "output %d: %u, want %u", i, v, want[i]);
    }
    mg_np_random_seed(&r, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = mg_np_random_next32(&r);
    MG_EXPECT(v == 4123659995U, "10000th output %u, want 4123659995", v);
}

MG_TEST(nprand_raw_outputs_match_numpy) {
    for (int s = 0; s < 4; s++) {
        char path[256];
        snprintf(path, sizeof path, NPR_DIR "/raw_%u.npy", k_seeds[s]);
        mg_npy a;
        MG_EXPECT_OK(mg_npy_load(&a, path));
        if (!a.data) continue;
        MG_EXPECT(a.dtype == MG_NPY_U4 && a.shape[0] == 1300, "raw shape");
        mg_np_random r;
        mg_np_random_seed(&r, k_seeds[s]);
        int bad = 0;
        for (int64_t i = 0; i < a.shape[0]; i++) /* crosses two state regenerations */
            bad += mg_np_random_next32(&r) != (uint32_t)mg_npy_get(&a, i);
        MG_EXPECT(bad == 0, "seed %u: %d of 1300 outputs differ from numpy", k_seeds[s], bad);
        mg_npy_free(&a);
    }
}

MG_TEST(nprand_shuffle_matches_numpy) {
    const int sizes[5] = {1, 2, 3, 17, 1000};
    for (int s = 0; s < 4; s++) {
        /* consecutive shuffles from one RandomState, as Megatron shuffles the document index and
         * then the shuffle index; the three element types draw identically */
        mg_np_random r32, ru, r64;
        mg_np_random_seed(&r32, k_seeds[s]);
        ru = r64 = r32;
        for (int k = 0; k < 5; k++) {
            int n = sizes[k];
            char path[256];
            snprintf(path, sizeof path, NPR_DIR "/shuffle_%u_%d.npy", k_seeds[s], n);
            mg_npy g;
            MG_EXPECT_OK(mg_npy_load(&g, path));
            int32_t *a = malloc(sizeof *a * (size_t)n);
            uint32_t *u = malloc(sizeof *u * (size_t)n);
            int64_t *b = malloc(sizeof *b * (size_t)n);
            for (int i = 0; i < n; i++) a[i] = i, u[i] = (uint32_t)i, b[i] = i;
            mg_np_shuffle_int32(&r32, a, n);
            mg_np_shuffle_uint32(&ru, u, n);
            mg_np_shuffle_int64(&r64, b, n);
            int bad = 0;
            for (int i = 0; g.data && i < n; i++)
                bad += a[i] != mg_npy_get(&g, i) || (int64_t)u[i] != a[i] || b[i] != a[i];
            MG_EXPECT(g.data && g.shape[0] == n && bad == 0, "seed %u size %d: %d positions differ",
                      k_seeds[s], n, bad);
            free(a), free(u), free(b);
            mg_npy_free(&g);
        }
    }
}

MG_TEST(nprand_large_shuffle_matches_numpy) {
    cJSON *m = load_meta(t);
    if (!m) return;
    int64_t n = (int64_t)cJSON_GetObjectItem(m, "big_shuffle")->valuedouble;
    const cJSON *md5 = cJSON_GetObjectItem(m, "big_shuffle_md5");
    int64_t *a = malloc(sizeof *a * (size_t)n);
    for (int s = 0; s < 4 && a; s++) {
        char key[16], hex[33];
        snprintf(key, sizeof key, "%u", k_seeds[s]);
        for (int64_t i = 0; i < n; i++) a[i] = i;
        mg_np_random r;
        mg_np_random_seed(&r, k_seeds[s]);
        mg_np_shuffle_int64(&r, a, n);
        mg_md5_hex(a, sizeof *a * (size_t)n, hex); /* little-endian int64, as numpy's bytes */
        const char *want = cJSON_GetObjectItem(md5, key)->valuestring;
        MG_EXPECT(!strcmp(hex, want), "seed %s: permutation md5 %s, numpy's %s", key, hex, want);
    }
    free(a);
    cJSON_Delete(m);
}

/* numpy's legacy randint(0, max + 1, dtype=uint64) draws exactly random_interval(max): 32-bit
 * masked draws up to 2^32 - 1, 64-bit masked draws (high half first) above. */
MG_TEST(nprand_interval_matches_numpy_masked_rejection) {
    cJSON *m = load_meta(t);
    if (!m) return;
    const cJSON *maxes = cJSON_GetObjectItem(m, "interval_max");
    int draws = cJSON_GetObjectItem(m, "interval_draws")->valueint;
    mg_npy g;
    MG_EXPECT_OK(mg_npy_load(&g, NPR_DIR "/interval.npy"));
    int nmax = cJSON_GetArraySize(maxes);
    MG_EXPECT(g.data && g.shape[0] == nmax && g.shape[1] == draws, "interval.npy shape");
    int big = 0;
    for (int i = 0; g.data && i < nmax; i++) {
        uint64_t max = strtoull(cJSON_GetArrayItem(maxes, i)->valuestring, NULL, 10);
        big += max > 0xffffffffULL;
        mg_np_random r;
        mg_np_random_seed(&r, 1234);
        for (int k = 0; k < draws; k++) {
            uint64_t v = mg_np_random_interval(&r, max);
            uint64_t want = (uint64_t)mg_npy_get(&g, (int64_t)i * draws + k);
            MG_EXPECT(v == want && v <= max, "max %llu draw %d: %llu, numpy %llu",
                      (unsigned long long)max, k, (unsigned long long)v, (unsigned long long)want);
        }
    }
    MG_EXPECT(big >= 5, "the 64-bit path needs maxima above 2^32 - 1 (%d)", big);
    mg_npy_free(&g);
    cJSON_Delete(m);
}

MG_TEST(nprand_interval_edges) {
    mg_np_random r, before;
    mg_np_random_seed(&r, 7);
    before = r;
    MG_EXPECT(mg_np_random_interval(&r, 0) == 0, "max 0 gives 0");
    MG_EXPECT(!memcmp(&r, &before, sizeof r), "max 0 draws nothing (numpy returns early)");
    /* max 5: mask 7, a draw is kept when (x & 7) <= 5; every value in [0, 5] appears */
    int seen[8] = {0};
    for (int i = 0; i < 4000; i++) seen[mg_np_random_interval(&r, 5)]++;
    for (int v = 0; v < 8; v++)
        MG_EXPECT(v <= 5 ? seen[v] > 500 : seen[v] == 0, "value %d seen %d times", v, seen[v]);
    /* one draw per call when the mask is exact: max 2^32 - 1 consumes one 32-bit word, 2^64 - 1
     * one 64-bit (two words) */
    mg_np_random a = r, b = r;
    uint64_t x = mg_np_random_interval(&a, 0xffffffffULL);
    MG_EXPECT(x == mg_np_random_next32(&b) && a.pos == b.pos, "2^32 - 1 is one 32-bit draw");
    a = b = r;
    x = mg_np_random_interval(&a, UINT64_MAX);
    MG_EXPECT(x == mg_np_random_next64(&b) && a.pos == b.pos, "2^64 - 1 is one 64-bit draw");
}
