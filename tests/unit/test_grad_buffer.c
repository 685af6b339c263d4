/* The grad buffer layout and distributed-optimizer shards (src/parallel/grad_buffer.c) against
 * Megatron: a worked example spelled out by hand, megatron-core 0.16.1's own layouts and
 * shard ranges (tests/golden/grad_buffer/megatron_grad_buffer.json, written by
 * tools/reference/megatron_grad_buffer.py), invariants over seeded random layouts, and every
 * rejection. */
#include "test.h"

#include "golden_io.h"

#include "core/file.h"
#include "core/status.h"
#include "parallel/grad_buffer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static mg_grad_buffer_config config(int d, bool distopt) {
    mg_grad_buffer_config c = {
        .data_parallel_size = d, .use_distributed_optimizer = distopt, .shared_embedding = NULL};
    return c;
}

static bool range_is(mg_grad_range r, int64_t start, int64_t end) {
    return r.start == start && r.end == end;
}

/* A worked example: four parameters of 3, 5, 4, 4 elements in buffer order (16 in all) over 4 DP
 * ranks, as the pre-alignment Megatron the seed reads laid them out (no distributed-optimizer
 * padding: 16 is already a multiple of 4). "Param1" (yellow, 5 elements at [3, 8)): rank 0 holds
 * one element, world [3,4], local [3,4], param [0,1]; rank 1 holds four, world [4,8], local [0,4],
 * param [1,5]. Registration order is the reverse of the buffer's: sizes {4, 4, 5, 3}. */
MG_TEST(grad_buffer_worked_example_4_ranks) {
    const int64_t sizes[] = {4, 4, 5, 3};
    mg_grad_buffer_config c = config(4, false);
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 4, &c, &l));
    MG_EXPECT(l.numel == 16 && l.numel_unpadded == 16 && l.n_buckets == 1,
              "numel %lld/%lld, %d buckets", (long long)l.numel, (long long)l.numel_unpadded,
              l.n_buckets);
    static const int64_t starts[4] = {0, 3, 8, 12}, ends[4] = {3, 8, 12, 16};
    for (int r = 0; r < 4; r++)
        MG_EXPECT(l.params[r].index == 3 - r && range_is(l.params[r].range, starts[r], ends[r]),
                  "row %d: index %d [%lld, %lld)", r, l.params[r].index,
                  (long long)l.params[r].range.start, (long long)l.params[r].range.end);
    /* Step 4 of the seed: rank r copies elements [4r, 4r+4). */
    for (int r = 0; r < 4; r++) {
        mg_grad_range s;
        MG_EXPECT_OK(mg_grad_buffer_shard_range(&l, 0, r, &s));
        MG_EXPECT(range_is(s, 4 * r, 4 * r + 4), "rank %d shard [%lld, %lld)", r,
                  (long long)s.start, (long long)s.end);
    }
    mg_grad_shard_param sp[4];
    int n;
    MG_EXPECT_OK(mg_grad_buffer_shard_params(&l, 0, 0, sp, &n));
    MG_EXPECT(n == 2 && sp[0].index == 3 && sp[1].index == 2, "rank 0: %d params", n);
    MG_EXPECT(range_is(sp[1].world, 3, 4) && range_is(sp[1].local, 3, 4) &&
                  range_is(sp[1].param, 0, 1) && range_is(sp[1].world_in_bucket, 3, 4),
              "rank 0 Param1 ranges");
    MG_EXPECT_OK(mg_grad_buffer_shard_params(&l, 0, 1, sp, &n));
    MG_EXPECT(n == 1 && sp[0].index == 2 && range_is(sp[0].world, 4, 8) &&
                  range_is(sp[0].local, 0, 4) && range_is(sp[0].param, 1, 5),
              "rank 1: %d params, first index %d", n, sp[0].index);
    /* The same through the one-parameter function, as Megatron's range map is written. */
    mg_grad_shard_param one;
    MG_EXPECT(mg_grad_buffer_param_ranges((mg_grad_range){3, 8}, (mg_grad_range){4, 8}, 0, &one) &&
                  range_is(one.param, 1, 5),
              "param_ranges");
    MG_EXPECT(!mg_grad_buffer_param_ranges((mg_grad_range){3, 8}, (mg_grad_range){8, 12}, 0, &one),
              "Param1 does not reach rank 2");
    mg_grad_buffer_layout_free(&l);
}

/* Sizes 10, 20, 30 over 2 ranks with the distributed optimizer: 64-element
 * starts 0, 64, 128; 138 used, padded to lcm(2, 128) = 128 -> 256; shards [0,128), [128,256). */
MG_TEST(grad_buffer_distopt_alignment_example) {
    const int64_t sizes[] = {10, 20, 30};
    mg_grad_buffer_config c = config(2, true);
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
    MG_EXPECT(l.numel == 256 && l.numel_unpadded == 138 && l.n_buckets == 1 &&
                  l.bucket_size == MG_GRAD_BUFFER_NO_BUCKET_SIZE,
              "numel %lld unpadded %lld", (long long)l.numel, (long long)l.numel_unpadded);
    MG_EXPECT(range_is(l.params[0].range, 0, 30) && range_is(l.params[1].range, 64, 84) &&
                  range_is(l.params[2].range, 128, 138),
              "param starts");
    mg_grad_shard_param sp[3];
    int n;
    MG_EXPECT_OK(mg_grad_buffer_shard_params(&l, 0, 1, sp, &n));
    MG_EXPECT(n == 1 && sp[0].index == 0 && range_is(sp[0].world, 128, 138) &&
                  range_is(sp[0].local, 0, 10) && range_is(sp[0].param, 0, 10),
              "rank 1");
    mg_grad_buffer_layout_free(&l);
}

/* align_param_starts (the trainer's buffers): 64-element starts without the distributed
 * optimizer, but no bucket padding; buckets still close by the distance from their start. */
MG_TEST(grad_buffer_align_param_starts_without_distopt) {
    const int64_t sizes[] = {10, 20, 30};
    mg_grad_buffer_config c = config(2, false);
    c.align_param_starts = true;
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
    MG_EXPECT(l.numel == 138 && l.numel_unpadded == 138 && l.n_buckets == 1,
              "numel %lld/%lld, %d buckets", (long long)l.numel, (long long)l.numel_unpadded,
              l.n_buckets);
    MG_EXPECT(range_is(l.params[0].range, 0, 30) && range_is(l.params[1].range, 64, 84) &&
                  range_is(l.params[2].range, 128, 138),
              "starts %lld %lld %lld", (long long)l.params[0].range.start,
              (long long)l.params[1].range.start, (long long)l.params[2].range.start);
    mg_grad_buffer_layout_free(&l);
    /* with buckets of >= 70 elements: 30 + gap + 20 reaches 84 -> closes after index 1 */
    c.overlap_grad_reduce = true;
    c.bucket_size = 70;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
    MG_EXPECT(l.n_buckets == 2 && range_is(l.buckets[0].range, 0, 84) &&
                  range_is(l.buckets[1].range, 84, 138) && range_is(l.params[2].range, 128, 138),
              "%d buckets", l.n_buckets);
    mg_grad_buffer_layout_free(&l);
}
/* One parameter larger than a shard: 1000 elements, D 4 -> bucket 1024, shards of 256; the
 * parameter's slices are [0,256), [256,512), [512,768), [768,1000). */
MG_TEST(grad_buffer_param_spans_shards) {
    const int64_t sizes[] = {1000};
    mg_grad_buffer_config c = config(4, true);
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 1, &c, &l));
    MG_EXPECT(l.numel == 1024, "numel %lld", (long long)l.numel);
    for (int r = 0; r < 4; r++) {
        mg_grad_shard_param sp[1];
        int n;
        MG_EXPECT_OK(mg_grad_buffer_shard_params(&l, 0, r, sp, &n));
        int64_t end = r == 3 ? 1000 : 256 * (r + 1);
        MG_EXPECT(n == 1 && range_is(sp[0].param, 256 * r, end) &&
                      range_is(sp[0].local, 0, end - 256 * r) &&
                      range_is(sp[0].world, 256 * r, end),
                  "rank %d", r);
    }
    mg_grad_buffer_layout_free(&l);
}

/* Buckets: one huge parameter fills and closes a bucket by itself; without the distributed
 * optimizer nothing is aligned or padded. */
MG_TEST(grad_buffer_bucket_of_one_huge_param) {
    const int64_t sizes[] = {10, 20, 5000, 30, 40}; /* buffer order: 40, 30, 5000, 20, 10 */
    mg_grad_buffer_config c = config(2, false);
    c.overlap_grad_reduce = true;
    c.bucket_size = 100;
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 5, &c, &l));
    MG_EXPECT(l.n_buckets == 2 && range_is(l.buckets[0].range, 0, 5070) &&
                  range_is(l.buckets[1].range, 5070, 5100) && l.buckets[0].count == 3 &&
                  l.numel == 5100 && l.numel_unpadded == 5100,
              "%d buckets, numel %lld", l.n_buckets, (long long)l.numel);
    mg_grad_buffer_layout_free(&l);
    /* With the distributed optimizer: starts 0, 64, 128; bucket 0 closes at 5128, padded to 5248.
     */
    c.use_distributed_optimizer = true;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 5, &c, &l));
    MG_EXPECT(l.n_buckets == 2 && range_is(l.buckets[0].range, 0, 5248) &&
                  l.buckets[0].numel_unpadded == 5128 && range_is(l.params[3].range, 5248, 5268) &&
                  range_is(l.buckets[1].range, 5248, 5376) && l.buckets[1].numel_unpadded == 74,
              "distopt buckets");
    mg_grad_buffer_layout_free(&l);
}

/* The shared embedding (registered in the middle) gets its own bucket with the distributed
 * optimizer: the open bucket closes at its aligned start, the next one right after it. */
MG_TEST(grad_buffer_shared_embedding_bucket) {
    const int64_t sizes[] = {10, 20, 1000, 30, 40};
    mg_grad_buffer_config c = config(2, true);
    const bool shared[5] = {false, false, true, false, false};
    c.shared_embedding = shared;
    mg_grad_buffer_layout l;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 5, &c, &l));
    MG_EXPECT(l.n_buckets == 3 && range_is(l.buckets[0].range, 0, 128) &&
                  l.buckets[0].numel_unpadded == 128 && range_is(l.buckets[1].range, 128, 1152) &&
                  l.buckets[1].count == 1 && l.params[l.buckets[1].first].index == 2 &&
                  range_is(l.buckets[2].range, 1152, 1280),
              "%d buckets", l.n_buckets);
    mg_grad_buffer_layout_free(&l);
    /* Without the distributed optimizer Megatron does not split it off. */
    c.use_distributed_optimizer = false;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 5, &c, &l));
    MG_EXPECT(l.n_buckets == 1 && l.numel == 1100, "plain: %d buckets", l.n_buckets);
    mg_grad_buffer_layout_free(&l);
    /* Two shared-embedding parameters in one buffer: each gets a bucket of its own (buffer
     * order 40, 30, [1000], 20, [10]: 40 at 0, 30 at 64, close at 128; 1000 at 128..1152;
     * 20 at 1152, close at 1280; 10 at 1280, close at 1408) */
    const bool two[5] = {true, false, true, false, false};
    c = config(2, true);
    c.shared_embedding = two;
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 5, &c, &l));
    MG_EXPECT(l.n_buckets == 4 && range_is(l.buckets[1].range, 128, 1152) &&
                  l.buckets[1].count == 1 && range_is(l.buckets[2].range, 1152, 1280) &&
                  range_is(l.buckets[3].range, 1280, 1408) && l.buckets[3].count == 1 &&
                  l.params[l.buckets[3].first].index == 0,
              "two shared: %d buckets", l.n_buckets);
    mg_grad_buffer_layout_free(&l);
}

/* Bucket ends: lcm(D, 128), or lcm(D, 128, 65536) for high NCCL bus bandwidth. In buffer order
 * 100 at 0, 13 at 128, 7 at 192: 199 elements used whatever D. */
MG_TEST(grad_buffer_bucket_padding) {
    const int64_t sizes[] = {7, 13, 100};
    static const int ds[] = {1, 2, 3, 4, 6, 8};
    static const int64_t plain[] = {256, 256, 384, 256, 384, 256};
    static const int64_t busbw[] = {65536, 65536, 196608, 65536, 196608, 65536};
    for (int i = 0; i < 6; i++) {
        mg_grad_buffer_config c = config(ds[i], true);
        mg_grad_buffer_layout l;
        MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
        MG_EXPECT(l.numel == plain[i] && l.numel_unpadded == 199, "D %d: numel %lld", ds[i],
                  (long long)l.numel);
        mg_grad_buffer_layout_free(&l);
        c.pad_for_high_nccl_busbw = true;
        MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
        MG_EXPECT(l.numel == busbw[i], "D %d busbw: numel %lld", ds[i], (long long)l.numel);
        mg_grad_buffer_layout_free(&l);
    }
}

/* Megatron's bucket size: None without overlap or with bucketing disabled, the flag, else
 * max(40M, 1M x D). */
MG_TEST(grad_buffer_bucket_size_rule) {
    mg_grad_buffer_config c = config(8, true);
    int64_t b;
    c.bucket_size = 500;
    MG_EXPECT_OK(mg_grad_buffer_bucket_size(&c, &b));
    MG_EXPECT(b == MG_GRAD_BUFFER_NO_BUCKET_SIZE, "no overlap: %lld", (long long)b);
    c.overlap_grad_reduce = true;
    MG_EXPECT_OK(mg_grad_buffer_bucket_size(&c, &b));
    MG_EXPECT(b == 500, "flag: %lld", (long long)b);
    c.disable_bucketing = true;
    MG_EXPECT_OK(mg_grad_buffer_bucket_size(&c, &b));
    MG_EXPECT(b == MG_GRAD_BUFFER_NO_BUCKET_SIZE, "disabled: %lld", (long long)b);
    c.disable_bucketing = false;
    c.bucket_size = 0;
    MG_EXPECT_OK(mg_grad_buffer_bucket_size(&c, &b));
    MG_EXPECT(b == 40000000, "default D 8: %lld", (long long)b);
    c.data_parallel_size = 64;
    MG_EXPECT_OK(mg_grad_buffer_bucket_size(&c, &b));
    MG_EXPECT(b == 64000000, "default D 64: %lld", (long long)b);
}

/* ---- megatron-core's goldens ---- */

static int64_t jint(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : -999;
}

static bool jbool(const cJSON *o, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int64_t item(const cJSON *a, int i) {
    const cJSON *x = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : -999;
}

/* Compares one golden case; returns false (after reporting) on the first difference. */
static bool check_case(mg_test_ctx *t, const cJSON *o) {
    const char *name = cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring;
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(o, "sizes");
    int n = cJSON_GetArraySize(sz);
    int64_t sizes[64];
    if (n < 1 || n > 64) {
        MG_EXPECT(0, "%s: %d sizes", name, n);
        return false;
    }
    for (int i = 0; i < n; i++) sizes[i] = item(sz, i);
    /* "shared_embedding": a registration index (-1: none) or a list of them */
    bool shared[64] = {false};
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(o, "shared_embedding");
    if (cJSON_IsNumber(se) && se->valuedouble >= 0 && se->valuedouble < n)
        shared[(int)se->valuedouble] = true;
    for (int i = 0; cJSON_IsArray(se) && i < cJSON_GetArraySize(se); i++) {
        double v = cJSON_GetArrayItem(se, i)->valuedouble;
        if (v >= 0 && v < n) shared[(int)v] = true;
    }
    const cJSON *flag = cJSON_GetObjectItemCaseSensitive(o, "ddp_bucket_size");
    mg_grad_buffer_config c = {.data_parallel_size = (int)jint(o, "dp"),
                               .use_distributed_optimizer = jbool(o, "use_distributed_optimizer"),
                               .overlap_grad_reduce = jbool(o, "overlap_grad_reduce"),
                               .bucket_size = cJSON_IsNumber(flag) ? (int64_t)flag->valuedouble : 0,
                               .pad_for_high_nccl_busbw = jbool(o, "pad_for_high_nccl_busbw"),
                               .disable_bucketing = jint(o, "pp_rank") > 0,
                               .shared_embedding = shared};
    mg_grad_buffer_layout l;
    mg_status st = mg_grad_buffer_layout_build(sizes, n, &c, &l);
    MG_EXPECT(st == MG_OK, "%s: %s", name, mg_error_message());
    if (st != MG_OK) return false;
    bool ok = true;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (ok && !(cond)) {                                                                       \
            MG_EXPECT(0, __VA_ARGS__);                                                             \
            ok = false;                                                                            \
        }                                                                                          \
    } while (0)
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(o, "bucket_size");
    int64_t want_bs = cJSON_IsNumber(bs) ? (int64_t)bs->valuedouble : MG_GRAD_BUFFER_NO_BUCKET_SIZE;
    CHECK(l.bucket_size == want_bs, "%s: bucket size %lld, want %lld", name,
          (long long)l.bucket_size, (long long)want_bs);
    CHECK(l.numel == jint(o, "numel") && l.numel_unpadded == jint(o, "numel_unpadded"),
          "%s: numel %lld/%lld, want %lld/%lld", name, (long long)l.numel,
          (long long)l.numel_unpadded, (long long)jint(o, "numel"),
          (long long)jint(o, "numel_unpadded"));
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
    CHECK(cJSON_GetArraySize(params) == l.n_params, "%s: %d params", name, l.n_params);
    for (int r = 0; ok && r < l.n_params; r++) {
        const cJSON *p = cJSON_GetArrayItem(params, r);
        const mg_grad_buffer_param *q = &l.params[r];
        CHECK(q->index == item(p, 0) && range_is(q->range, item(p, 1), item(p, 2)) &&
                  q->bucket == item(p, 3),
              "%s: row %d = index %d [%lld, %lld) bucket %d, want %lld [%lld, %lld) %lld", name, r,
              q->index, (long long)q->range.start, (long long)q->range.end, q->bucket,
              (long long)item(p, 0), (long long)item(p, 1), (long long)item(p, 2),
              (long long)item(p, 3));
    }
    const cJSON *buckets = cJSON_GetObjectItemCaseSensitive(o, "buckets");
    CHECK(cJSON_GetArraySize(buckets) == l.n_buckets, "%s: %d buckets, want %d", name, l.n_buckets,
          cJSON_GetArraySize(buckets));
    for (int b = 0; ok && b < l.n_buckets; b++) {
        const cJSON *x = cJSON_GetArrayItem(buckets, b);
        const mg_grad_buffer_bucket *q = &l.buckets[b];
        CHECK(range_is(q->range, item(x, 0), item(x, 1)) && q->numel_unpadded == item(x, 2),
              "%s: bucket %d = [%lld, %lld) %lld, want [%lld, %lld) %lld", name, b,
              (long long)q->range.start, (long long)q->range.end, (long long)q->numel_unpadded,
              (long long)item(x, 0), (long long)item(x, 1), (long long)item(x, 2));
    }
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(o, "shards");
    CHECK(cJSON_IsNull(shards) == !c.use_distributed_optimizer, "%s: shards presence", name);
    mg_grad_shard_param *sp = malloc((size_t)n * sizeof *sp);
    for (int r = 0; ok && sp && cJSON_IsArray(shards) && r < c.data_parallel_size; r++) {
        const cJSON *per_bucket = cJSON_GetArrayItem(shards, r);
        for (int b = 0; ok && b < l.n_buckets; b++) {
            const cJSON *want = cJSON_GetArrayItem(per_bucket, b);
            int got_n;
            CHECK(mg_grad_buffer_shard_params(&l, b, r, sp, &got_n) == MG_OK, "%s: shard", name);
            CHECK(got_n == cJSON_GetArraySize(want), "%s: rank %d bucket %d: %d params, want %d",
                  name, r, b, got_n, cJSON_GetArraySize(want));
            for (int k = 0; ok && k < got_n; k++) {
                const cJSON *w = cJSON_GetArrayItem(want, k);
                const mg_grad_shard_param *g = &sp[k];
                CHECK(g->index == item(w, 0) && range_is(g->world, item(w, 1), item(w, 2)) &&
                          range_is(g->world_in_bucket, item(w, 3), item(w, 4)) &&
                          range_is(g->local, item(w, 5), item(w, 6)) &&
                          range_is(g->param, item(w, 7), item(w, 8)),
                      "%s: rank %d bucket %d entry %d (index %d) differs", name, r, b, k, g->index);
            }
        }
    }
#undef CHECK
    free(sp);
    mg_grad_buffer_layout_free(&l);
    return ok;
}

MG_TEST(grad_buffer_matches_megatron_core) {
    const char *path = "tests/golden/grad_buffer/megatron_grad_buffer.json";
    cJSON *root = mg_golden_json(t, path);
    if (!root) return;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    int n = cJSON_GetArraySize(cases), passed = 0, distopt = 0, shared = 0, multi = 0;
    int seen_d[17] = {0};
    const cJSON *o;
    cJSON_ArrayForEach(o, cases) {
        passed += check_case(t, o);
        distopt += jbool(o, "use_distributed_optimizer");
        const cJSON *se = cJSON_GetObjectItemCaseSensitive(o, "shared_embedding");
        shared += cJSON_IsArray(se) || jint(o, "shared_embedding") >= 0;
        multi += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "buckets")) > 1;
        int64_t d = jint(o, "dp");
        if (d >= 1 && d <= 16) seen_d[d] = 1;
    }
    /* The file covers: D 1, 2, 4, 8; padding; shared embeddings;
     * several buckets. */
    MG_EXPECT(n >= 100 && passed == n && distopt > 50 && shared >= 16 && multi >= 20 && seen_d[1] &&
                  seen_d[2] && seen_d[4] && seen_d[8],
              "%d of %d cases match (distopt %d, shared %d, multi-bucket %d)", passed, n, distopt,
              shared, multi);
    cJSON_Delete(root);
}

/* ---- invariants over seeded random layouts ---- */

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void check_invariants(mg_test_ctx *t, const mg_grad_buffer_layout *l, const int64_t *sizes,
                             int iter) {
    const mg_grad_buffer_config *c = &l->cfg;
    int n = l->n_params, d = c->data_parallel_size;
    int64_t unpadded = 0, pos = 0;
    for (int b = 0; b < l->n_buckets; b++) {
        const mg_grad_buffer_bucket *q = &l->buckets[b];
        MG_EXPECT(q->range.start == pos && q->range.end > q->range.start && q->count >= 1,
                  "iter %d: bucket %d does not follow on", iter, b);
        if (c->use_distributed_optimizer)
            MG_EXPECT((q->range.end - q->range.start) % d == 0 && q->range.end % 128 == 0 &&
                          (!c->pad_for_high_nccl_busbw || q->range.end % 65536 == 0),
                      "iter %d: bucket %d not padded", iter, b);
        else
            MG_EXPECT(q->numel_unpadded == q->range.end - q->range.start, "iter %d: padding", iter);
        pos = q->range.end;
        unpadded += q->numel_unpadded;
        const mg_grad_buffer_param *last = &l->params[q->first + q->count - 1];
        MG_EXPECT(last->range.end <= q->range.start + q->numel_unpadded, "iter %d: unpadded", iter);
    }
    MG_EXPECT(pos == l->numel && unpadded == l->numel_unpadded, "iter %d: totals", iter);
    for (int r = 0; r < n; r++) {
        const mg_grad_buffer_param *p = &l->params[r];
        const mg_grad_buffer_bucket *q = &l->buckets[p->bucket];
        MG_EXPECT(p->index == n - 1 - r && p->range.end - p->range.start == sizes[p->index] &&
                      p->range.start >= q->range.start && p->range.end <= q->range.end &&
                      r >= q->first && r < q->first + q->count &&
                      (r == 0 || p->range.start >= l->params[r - 1].range.end) &&
                      (!c->use_distributed_optimizer || p->range.start % 64 == 0),
                  "iter %d: row %d misplaced", iter, r);
        if (c->use_distributed_optimizer && l->shared[p->index])
            MG_EXPECT(q->count == 1, "iter %d: shared embedding shares bucket %d", iter, p->bucket);
    }
    if (!c->use_distributed_optimizer) return;
    /* Shards tile each bucket; every parameter's slices tile the parameter exactly once. */
    int64_t *covered = calloc((size_t)n, sizeof *covered);
    mg_grad_shard_param *sp = malloc((size_t)n * sizeof *sp);
    for (int b = 0; covered && sp && b < l->n_buckets; b++) {
        const mg_grad_buffer_bucket *q = &l->buckets[b];
        int64_t at = q->range.start;
        for (int rank = 0; rank < d; rank++) {
            mg_grad_range s;
            MG_EXPECT_OK(mg_grad_buffer_shard_range(l, b, rank, &s));
            MG_EXPECT(s.start == at && s.end - s.start == (q->range.end - q->range.start) / d,
                      "iter %d: shard %d of bucket %d", iter, rank, b);
            at = s.end;
            int m;
            MG_EXPECT_OK(mg_grad_buffer_shard_params(l, b, rank, sp, &m));
            for (int k = 0; k < m; k++) {
                const mg_grad_shard_param *g = &sp[k];
                const mg_grad_buffer_param *p = &l->params[n - 1 - g->index];
                int64_t len = g->world.end - g->world.start;
                MG_EXPECT(len > 0 && g->world.start >= s.start && g->world.end <= s.end &&
                              g->local.start == g->world.start - s.start &&
                              g->local.end - g->local.start == len &&
                              g->world_in_bucket.start == g->world.start - q->range.start &&
                              g->param.start == g->world.start - p->range.start &&
                              g->param.end - g->param.start == len &&
                              g->param.start == covered[g->index],
                          "iter %d: rank %d bucket %d index %d ranges", iter, rank, b, g->index);
                covered[g->index] = g->param.end;
            }
            /* No parameter of another bucket overlaps this shard (Megatron scans all). */
            for (int r = 0; r < n; r++) {
                mg_grad_shard_param x;
                if (l->params[r].bucket != b)
                    MG_EXPECT(
                        !mg_grad_buffer_param_ranges(l->params[r].range, s, q->range.start, &x),
                        "iter %d: row %d overlaps a shard of bucket %d", iter, r, b);
            }
        }
        MG_EXPECT(at == q->range.end, "iter %d: shards of bucket %d end at %lld", iter, b,
                  (long long)at);
    }
    for (int i = 0; covered && i < n; i++)
        MG_EXPECT(covered[i] == sizes[i], "iter %d: param %d covered to %lld of %lld", iter, i,
                  (long long)covered[i], (long long)sizes[i]);
    free(covered);
    free(sp);
}

MG_TEST(grad_buffer_invariants_random) {
    uint64_t seed = 2024;
    for (int iter = 0; iter < 400; iter++) {
        int n = 1 + (int)(next_rand(&seed) % 16);
        int64_t sizes[16];
        for (int i = 0; i < n; i++) {
            uint64_t k = next_rand(&seed) % 4;
            sizes[i] = k == 0   ? 1 + (int64_t)(next_rand(&seed) % 3)
                       : k == 1 ? 63 + (int64_t)(next_rand(&seed) % 3)
                                : 1 + (int64_t)(next_rand(&seed) % 5000);
        }
        static const int ds[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 64};
        mg_grad_buffer_config c = config(ds[next_rand(&seed) % 10], next_rand(&seed) % 4 != 0);
        c.overlap_grad_reduce = next_rand(&seed) % 2;
        c.bucket_size = (int64_t)(next_rand(&seed) % 3000);
        c.pad_for_high_nccl_busbw = next_rand(&seed) % 5 == 0;
        bool shared[16] = {false};
        for (int k = next_rand(&seed) % 3 == 0 ? 1 + (int)(next_rand(&seed) % 2) : 0; k > 0; k--)
            shared[next_rand(&seed) % (uint64_t)n] = true;
        c.shared_embedding = shared;
        mg_grad_buffer_layout l;
        MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, n, &c, &l));
        check_invariants(t, &l, sizes, iter);
        mg_grad_buffer_layout_free(&l);
        if (t->failures) return;
    }
}

/* ---- bad input ---- */

MG_TEST(grad_buffer_rejects_bad_input) {
    const int64_t sizes[] = {10, 20, 30};
    const int64_t zero[] = {10, 0, 30}, negative[] = {10, -5};
    mg_grad_buffer_config c = config(2, true);
    mg_grad_buffer_layout l;
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(sizes, 0, &c, &l), MG_ERR_USAGE, "no parameters");
    MG_EXPECT(l.params == NULL && l.n_params == 0, "left empty");
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(NULL, 3, &c, &l), MG_ERR_USAGE, "no parameters");
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(zero, 3, &c, &l), MG_ERR_USAGE,
                    "parameter 1 has 0 elements");
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(negative, 2, &c, &l), MG_ERR_USAGE,
                    "parameter 1 has -5 elements");
    const int64_t huge[] = {(int64_t)1 << 55, (int64_t)1 << 55, (int64_t)1 << 55};
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(huge, 3, &c, &l), MG_ERR_USAGE,
                    "need more than 2^56 elements");
    c.data_parallel_size = 0;
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(sizes, 3, &c, &l), MG_ERR_USAGE,
                    "data-parallel size must be >= 1, got 0");
    c = config(2, true);
    c.overlap_grad_reduce = true;
    c.bucket_size = -1;
    MG_EXPECT_ERROR(mg_grad_buffer_layout_build(sizes, 3, &c, &l), MG_ERR_USAGE,
                    "--ddp-bucket-size must be a positive number of elements, got -1");

    /* Shards: out-of-range bucket or rank; an unpadded bucket D does not divide. */
    c = config(7, false);
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
    mg_grad_range s;
    MG_EXPECT_ERROR(mg_grad_buffer_shard_range(&l, 0, 0, &s), MG_ERR_USAGE,
                    "bucket 0 has 60 elements, not a multiple of the data-parallel size 7");
    MG_EXPECT_ERROR(mg_grad_buffer_shard_range(&l, 1, 0, &s), MG_ERR_USAGE,
                    "bucket 1 does not exist (1 buckets)");
    mg_grad_buffer_layout_free(&l);
    c = config(4, true);
    MG_EXPECT_OK(mg_grad_buffer_layout_build(sizes, 3, &c, &l));
    MG_EXPECT_ERROR(mg_grad_buffer_shard_range(&l, 0, 4, &s), MG_ERR_USAGE,
                    "data-parallel rank 4 is outside [0, 4)");
    mg_grad_shard_param sp[3];
    int n = 7;
    MG_EXPECT_ERROR(mg_grad_buffer_shard_params(&l, 0, -1, sp, &n), MG_ERR_USAGE,
                    "data-parallel rank -1");
    MG_EXPECT(n == 0, "n_out %d after a failure", n);
    mg_grad_buffer_layout_free(&l);
}
