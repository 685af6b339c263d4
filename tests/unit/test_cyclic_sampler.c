/* torch's CPU randperm (data/torch_random.h) and Megatron's cyclic sampler
 * (data/cyclic_sampler.h) against what torch and Megatron's own MegatronPretrainingRandomSampler
 * wrote (tests/golden/sampler, tools/reference/make_sampler_golden.py). */
#include "test.h"

#include "core/file.h"
#include "core/md5.h"
#include "core/status.h"
#include "data/cyclic_sampler.h"
#include "data/torch_random.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLER_DIR "tests/golden/sampler"

static cJSON *load_json(mg_test_ctx *t, const char *path) {
    char *text = NULL;
    MG_EXPECT_OK(mg_file_read(path, &text, NULL));
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    MG_EXPECT(root != NULL, "%s does not parse", path);
    return root;
}

static int64_t num(const cJSON *o, const char *key) {
    return (int64_t)cJSON_GetObjectItemCaseSensitive(o, key)->valuedouble;
}

/* md5 of torch's int64 permutation bytes (little-endian, as numpy's tobytes on x86). */
static void perm_md5(uint64_t seed, int64_t n, char hex[33]) {
    int64_t *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) {
        hex[0] = '\0';
        return;
    }
    mg_torch_randperm_i64(seed, n, p);
    mg_md5_hex(p, (size_t)n * sizeof *p, hex);
    free(p);
}

MG_TEST(torch_randperm_matches_torch) {
    cJSON *root = load_json(t, SAMPLER_DIR "/randperm.json");
    if (!root) return;
    int checked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const int64_t n = num(c, "n"), seed = num(c, "seed");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "perm");
        MG_EXPECT(cJSON_GetArraySize(want) == n, "seed %lld n %lld: golden size", (long long)seed,
                  (long long)n);
        int64_t *p = malloc((size_t)(n + 1) * sizeof *p);
        uint32_t *q = malloc((size_t)(n + 1) * sizeof *q);
        mg_torch_randperm_i64((uint64_t)seed, n, p);
        mg_torch_randperm_u32((uint64_t)seed, n, q);
        int64_t i = 0;
        const cJSON *w;
        cJSON_ArrayForEach(w, want) {
            MG_EXPECT(p[i] == (int64_t)w->valuedouble && q[i] == (uint32_t)p[i],
                      "seed %lld n %lld: element %lld is %lld (u32 %u), torch %lld",
                      (long long)seed, (long long)n, (long long)i, (long long)p[i], q[i],
                      (long long)w->valuedouble);
            if (++i >= n) break;
        }
        free(p);
        free(q);
        checked++;
    }
    MG_EXPECT(checked >= 50, "only %d cases", checked);
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "md5")) {
        char hex[33];
        perm_md5((uint64_t)num(c, "seed"), num(c, "n"), hex);
        const char *want = cJSON_GetObjectItemCaseSensitive(c, "md5")->valuestring;
        MG_EXPECT(!strcmp(hex, want), "seed %lld n %lld: md5 %s, torch %s",
                  (long long)num(c, "seed"), (long long)num(c, "n"), hex, want);
    }
    /* both of randperm_cpu's algorithms, at their boundary: 1.7 GB and seconds each */
    const char *slow = getenv("MG_TEST_SLOW");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "large_md5")) {
        MG_EXPECT(num(c, "n") == MG_TORCH_RANDPERM_SMALL - 1 ||
                      num(c, "n") == MG_TORCH_RANDPERM_SMALL,
                  "large case n %lld is not at the boundary %lld", (long long)num(c, "n"),
                  (long long)MG_TORCH_RANDPERM_SMALL);
        if (!slow || strcmp(slow, "1")) continue;
        char hex[33];
        perm_md5((uint64_t)num(c, "seed"), num(c, "n"), hex);
        MG_EXPECT(!strcmp(hex, cJSON_GetObjectItemCaseSensitive(c, "md5")->valuestring),
                  "n %lld: md5 %s differs from torch's", (long long)num(c, "n"), hex);
    }
    cJSON_Delete(root);
}

/* Every case: rank r's k-th micro-batch (Megatron's cyclic_iter over the sampler built at
 * `consumed`) is the map's positions consumed + k M D + r M + b. Each rank is walked in order,
 * then the ranks interleaved as the trainer reads a global batch, then once backwards. */
MG_TEST(cyclic_sampler_matches_megatron) {
    cJSON *root = load_json(t, SAMPLER_DIR "/cyclic.json");
    if (!root) return;
    int cases = 0, desync = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const int64_t T = num(c, "total"), start = num(c, "consumed");
        const int M = (int)num(c, "mbs"), D = (int)num(c, "dp");
        const bool sharding = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "sharding"));
        const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(c, "batches");
        const int K = cJSON_GetArraySize(cJSON_GetArrayItem(ranks, 0));
        for (int order = 0; order < 3 && bad < 5; order++) {
            mg_cyclic_sampler s;
            MG_EXPECT_OK(mg_cyclic_sampler_init(&s, T, start, M, D, sharding));
            /* order 0: rank by rank; 1: global batches in order; 2: backwards */
            const int64_t n = (int64_t)D * K * M;
            for (int64_t q = 0; q < n && bad < 5; q++) {
                int64_t r, k, b;
                if (order == 0) {
                    r = q / ((int64_t)K * M), k = q / M % K, b = q % M;
                } else {
                    int64_t g = order == 1 ? q : n - 1 - q;
                    k = g / ((int64_t)D * M), r = g / M % D, b = g % M;
                }
                const cJSON *batch = cJSON_GetArrayItem(cJSON_GetArrayItem(ranks, (int)r), (int)k);
                const int64_t want = (int64_t)cJSON_GetArrayItem(batch, (int)b)->valuedouble;
                int64_t got = -1;
                MG_EXPECT_OK(mg_cyclic_sampler_index(&s, start + (k * D + r) * M + b, &got));
                if (got != want) {
                    MG_EXPECT(0,
                              "T %lld M %d D %d sharding %d from %lld, order %d: rank %lld batch "
                              "%lld [%lld] is %lld, Megatron %lld",
                              (long long)T, M, D, sharding, (long long)start, order, (long long)r,
                              (long long)k, (long long)b, (long long)got, (long long)want);
                    bad++;
                }
            }
            if (order == 0) {
                /* the ranks' passes differ in length: the extra micro-batch without sharding */
                for (int r = 1; r < D; r++) desync += s.pass[r].k0 != s.pass[0].k0;
            }
            mg_cyclic_sampler_free(&s);
        }
        cases++;
    }
    MG_EXPECT(cases >= 200, "only %d cases", cases);
    MG_EXPECT(desync > 0, "no case exercises a rank's extra micro-batch");
    cJSON_Delete(root);
}

MG_TEST(cyclic_sampler_rejects_what_megatron_cannot_run) {
    mg_cyclic_sampler s;
    /* Megatron's sampler divides by zero without one micro batch per rank */
    MG_EXPECT_ERROR(mg_cyclic_sampler_init(&s, 7, 0, 2, 4, true), MG_ERR_USAGE,
                    "a split of 7 samples holds no micro batch for each of the 4 data-parallel "
                    "ranks (8 samples)");
    /* and asserts that an epoch's consumed samples are whole micro-batches over the ranks */
    MG_EXPECT_ERROR(
        mg_cyclic_sampler_init(&s, 100, 6, 2, 2, false), MG_ERR_USAGE,
        "6 consumed samples are not a multiple of micro batch x data-parallel size (4)");
    MG_EXPECT_OK(mg_cyclic_sampler_init(&s, 100, 8, 2, 2, false));
    int64_t idx;
    MG_EXPECT_ERROR(mg_cyclic_sampler_index(&s, 7, &idx), MG_ERR_INTERNAL, "before its start 8");
    mg_cyclic_sampler_free(&s);
}

/* Invariants over a long run: with data sharding every epoch visits each sample of the D
 * buckets once (the tail T - A never), the same for every micro batch / rank split of a position
 * range; positions from a resumed start give what the uninterrupted loader gave. */
MG_TEST(cyclic_sampler_epochs_cover_the_buckets_and_resume_exactly) {
    const int64_t T = 1003;
    const int M = 3, D = 4;
    mg_cyclic_sampler s, r;
    MG_EXPECT_OK(mg_cyclic_sampler_init(&s, T, 0, M, D, true));
    const int64_t A = s.active;
    MG_EXPECT(A == 996 && s.bucket == 249, "A %lld bucket %lld", (long long)A, (long long)s.bucket);
    unsigned char *seen = calloc((size_t)T, 1);
    for (int64_t e = 0; e < 3; e++) {
        memset(seen, 0, (size_t)T);
        for (int64_t p = e * A; p < (e + 1) * A; p++) {
            int64_t i = -1;
            MG_EXPECT_OK(mg_cyclic_sampler_index(&s, p, &i));
            if (i < 0 || i >= A || seen[i]++) {
                MG_EXPECT(0, "epoch %lld position %lld: sample %lld out of range or repeated",
                          (long long)e, (long long)p, (long long)i);
                break;
            }
            /* rank r's samples come from its bucket */
            int rank = (int)(p % (M * D) / M);
            MG_EXPECT(i / s.bucket == rank, "position %lld (rank %d): sample %lld", (long long)p,
                      rank, (long long)i);
        }
    }
    /* a loader built at a resumed point (mid-epoch 1) continues the same sequence */
    const int64_t at = A + 10 * M * D;
    MG_EXPECT_OK(mg_cyclic_sampler_init(&r, T, at, M, D, true));
    for (int64_t p = at; p < at + 3 * A; p += 7) {
        int64_t a = -1, b = -2;
        MG_EXPECT_OK(mg_cyclic_sampler_index(&s, p, &a));
        MG_EXPECT_OK(mg_cyclic_sampler_index(&r, p, &b));
        if (a != b) {
            MG_EXPECT(0, "position %lld: uninterrupted %lld, resumed %lld", (long long)p,
                      (long long)a, (long long)b);
            break;
        }
    }
    free(seen);
    mg_cyclic_sampler_free(&s);
    mg_cyclic_sampler_free(&r);
}
