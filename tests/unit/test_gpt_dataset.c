/* Megatron's GPT dataset end to end: for five configurations (default split, several epochs with
 * and without a separate final epoch, weighted and unweighted blends, a one-prefix weighted blend
 * with an absent split) the C build must write the same cache files, byte for byte and under the
 * same md5 names, as Megatron-LM's own GPTDataset / BlendedDataset code did
 * (tests/golden/dataset, tools/reference/make_dataset_golden.py), report the same lengths and
 * epochs and return the same token ids per sample. Then a hand-computed dataset, cache reuse and
 * rebuilds, Megatron's default cache directory, and bad input. */
#include "test.h"

#include "core/status.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/npy.h"
#include "dataset_test_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const k_split_names[3] = {"train", "valid", "test"};

typedef struct {
    const char *name;
    char data_path[512], split[64];
    mg_gpt_data_config cfg;
    cJSON *meta;
} golden_case;

static bool load_case(mg_test_ctx *t, const char *name, golden_case *g) {
    char path[256];
    snprintf(path, sizeof path, DS_GOLDEN "/%s/case.json", name);
    g->name = name;
    char *text = ds_read_file(path, NULL);
    MG_EXPECT(text != NULL, "cannot read %s", path);
    if (!text) return false;
    g->meta = cJSON_Parse(text);
    free(text);
    const cJSON *dp = cJSON_GetObjectItem(g->meta, "data_path");
    g->data_path[0] = '\0';
    for (int i = 0; i < cJSON_GetArraySize(dp); i++) {
        strcat(g->data_path, i ? " " : "");
        strcat(g->data_path, cJSON_GetArrayItem(dp, i)->valuestring);
    }
    snprintf(g->split, sizeof g->split, "%s", cJSON_GetObjectItem(g->meta, "split")->valuestring);
    const cJSON *ns = cJSON_GetObjectItem(g->meta, "num_samples");
    g->cfg =
        (mg_gpt_data_config){.data_path = g->data_path,
                             .split = g->split,
                             .seq_length = cJSON_GetObjectItem(g->meta, "seq_length")->valueint,
                             .seed = (uint64_t)cJSON_GetObjectItem(g->meta, "seed")->valuedouble};
    for (int i = 0; i < 3; i++) g->cfg.num_samples[i] = cJSON_GetArrayItem(ns, i)->valueint;
    return true;
}

/* Lengths, epochs and token ids of every split against Megatron's. */
static void expect_splits(mg_test_ctx *t, const char *name, const golden_case *g, mg_gpt_data *d) {
    const char *label = name;
    name = g->name;
    const cJSON *splits = cJSON_GetObjectItem(g->meta, "splits");
    int L1 = g->cfg.seq_length + 1;
    int32_t *ids = malloc(sizeof *ids * (size_t)L1);
    for (int s = 0; s < 3; s++) {
        const cJSON *e = cJSON_GetObjectItem(splits, k_split_names[s]);
        if (cJSON_IsNull(e)) {
            MG_EXPECT(mg_gpt_data_len(d, s) == 0, "%s %s: absent split has length %lld", label,
                      k_split_names[s], (long long)mg_gpt_data_len(d, s));
            continue;
        }
        int64_t len = (int64_t)cJSON_GetObjectItem(e, "len")->valuedouble;
        int epochs = cJSON_GetObjectItem(e, "num_epochs")->valueint;
        MG_EXPECT(mg_gpt_data_len(d, s) == len && mg_gpt_data_num_epochs(d, s) == epochs,
                  "%s %s: len %lld epochs %d, Megatron %lld / %d", label, k_split_names[s],
                  (long long)mg_gpt_data_len(d, s), mg_gpt_data_num_epochs(d, s), (long long)len,
                  epochs);
        char path[256];
        snprintf(path, sizeof path, DS_GOLDEN "/%s/tokens_%s.npy", name, k_split_names[s]);
        mg_npy tok;
        MG_EXPECT_OK(mg_npy_load(&tok, path));
        int bad = 0;
        for (int64_t i = 0; tok.data && i < tok.shape[0]; i++) {
            if (mg_gpt_data_sample(d, s, i, ids) != MG_OK) {
                MG_EXPECT(0, "%s %s sample %lld: %s", label, k_split_names[s], (long long)i,
                          mg_error_message());
                break;
            }
            for (int j = 0; j < L1; j++) bad += ids[j] != mg_npy_get(&tok, i * L1 + j);
        }
        MG_EXPECT(bad == 0, "%s %s: %d token ids differ from Megatron's", label, k_split_names[s],
                  bad);
        mg_npy_free(&tok);
    }
    free(ids);
}

/* Every cache file Megatron wrote exists in dir with the same bytes, and nothing else. */
static void expect_cache_files(mg_test_ctx *t, const char *name, const golden_case *g,
                               const char *dir) {
    const cJSON *files = cJSON_GetObjectItem(g->meta, "cache_files");
    int n = cJSON_GetArraySize(files);
    for (int i = 0; i < n; i++) {
        const char *f = cJSON_GetArrayItem(files, i)->valuestring;
        char ours[512], theirs[512];
        snprintf(ours, sizeof ours, "%s/%s", dir, f);
        snprintf(theirs, sizeof theirs, DS_GOLDEN "/%s/cache/%s", name, f);
        MG_EXPECT(ds_files_equal(ours, theirs), "%s: %s differs from Megatron's (or is missing)",
                  name, f);
    }
    MG_EXPECT(ds_count_files(dir) == n, "%s: %d cache files, Megatron wrote %d", name,
              ds_count_files(dir), n);
}

static int64_t mtime_ns(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

static void run_golden(mg_test_ctx *t, const char *name) {
    golden_case g;
    char dir[64];
    if (!load_case(t, name, &g)) return;
    if (!ds_tmpdir(dir)) {
        MG_EXPECT(0, "mkdtemp failed");
        cJSON_Delete(g.meta);
        return;
    }
    g.cfg.cache_path = dir;
    mg_gpt_data *d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    if (d) {
        expect_splits(t, name, &g, d);
        expect_cache_files(t, name, &g, dir);
        mg_gpt_data_free(d);
    }
    /* Megatron's own cache files (a copy) load as a cache hit and give the same samples. */
    ds_rmtree(dir);
    const cJSON *files = cJSON_GetObjectItem(g.meta, "cache_files");
    if (ds_tmpdir(dir)) {
        for (int i = 0; i < cJSON_GetArraySize(files); i++) {
            const char *f = cJSON_GetArrayItem(files, i)->valuestring;
            char from[512], to[512];
            snprintf(from, sizeof from, DS_GOLDEN "/%s/cache/%s", name, f);
            snprintf(to, sizeof to, "%s/%s", dir, f);
            MG_EXPECT(ds_copy_file(from, to), "cannot copy %s", from);
        }
        int nf = cJSON_GetArraySize(files);
        int64_t before[64];
        char path[512];
        for (int i = 0; i < nf && i < 64; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetArrayItem(files, i)->valuestring);
            before[i] = mtime_ns(path);
        }
        d = NULL;
        MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
        if (d) {
            expect_splits(t, name, &g, d);
            expect_cache_files(t, name, &g, dir); /* nothing added */
            mg_gpt_data_free(d);
        }
        for (int i = 0; i < nf && i < 64; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetArrayItem(files, i)->valuestring);
            MG_EXPECT(mtime_ns(path) == before[i], "%s: Megatron's %s was rewritten, not loaded",
                      name, path);
        }
        ds_rmtree(dir);
    }
    cJSON_Delete(g.meta);
}

MG_TEST(dataset_golden_single_default_split) {
    run_golden(t, "single_default");
}
MG_TEST(dataset_golden_single_multi_epoch) {
    run_golden(t, "single_epochs");
}
MG_TEST(dataset_golden_blend_weighted) {
    run_golden(t, "blend_weighted");
}
MG_TEST(dataset_golden_blend_unweighted) {
    run_golden(t, "blend_unweighted");
}
MG_TEST(dataset_golden_single_weighted_absent_split) {
    run_golden(t, "single_weighted");
}

/* Documents [10 11 12], [20..24], [30 31]; seed 9 orders them 1, 0, 2 and the two samples 1, 0
 * (numpy: RandomState(9).shuffle of arange(3) then of arange(2)); see the sample index test in
 * test_dataset_parts.c for the sample boundaries. */
MG_TEST(dataset_hand_computed_samples) {
    char dir[64], prefix[128];
    if (!ds_tmpdir(dir)) return;
    snprintf(prefix, sizeof prefix, "%s/tiny", dir);
    mg_indexed_writer *w = NULL;
    MG_EXPECT_OK(mg_indexed_writer_open(&w, prefix, MG_IDX_INT32));
    const int32_t docs[3][5] = {{10, 11, 12}, {20, 21, 22, 23, 24}, {30, 31}};
    const int32_t lens[3] = {3, 5, 2};
    for (int i = 0; w && i < 3; i++)
        MG_EXPECT_OK(mg_indexed_writer_add_document(w, docs[i], &lens[i], 1));
    if (w) MG_EXPECT_OK(mg_indexed_writer_finish(w));
    mg_indexed_writer_free(w);
    mg_gpt_data_config c = {.data_path = prefix,
                            .split = "1,0,0",
                            .seq_length = 4,
                            .seed = 9,
                            .num_samples = {-1, -1, -1}};
    mg_gpt_data *d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &c));
    if (d) {
        const int32_t want[2][5] = {{24, 10, 11, 12, 30}, {20, 21, 22, 23, 24}};
        int32_t got[5], tok[4], tgt[4];
        MG_EXPECT(mg_gpt_data_len(d, 0) == 2 && mg_gpt_data_len(d, 1) == 0 &&
                      mg_gpt_data_len(d, 2) == 0 && mg_gpt_data_num_epochs(d, 0) == 1,
                  "len %lld", (long long)mg_gpt_data_len(d, 0));
        for (int s = 0; s < 2; s++) {
            MG_EXPECT_OK(mg_gpt_data_sample(d, 0, s, got));
            MG_EXPECT(!memcmp(got, want[s], sizeof got), "sample %d: %d %d %d %d %d", s, got[0],
                      got[1], got[2], got[3], got[4]);
        }
        MG_EXPECT_OK(mg_gpt_data_sample_pair(d, 0, 0, tok, tgt));
        MG_EXPECT(tok[0] == 24 && tok[3] == 12 && tgt[0] == 10 && tgt[3] == 30, "tokens/targets");
        /* Megatron indexes its arrays directly: no wrap-around */
        MG_EXPECT_ERROR(mg_gpt_data_sample(d, 0, 2, got), MG_ERR_USAGE,
                     "sample 2 is outside the train dataset [0, 2)");
        MG_EXPECT_ERROR(mg_gpt_data_sample(d, 1, 0, got), MG_ERR_USAGE, "outside the valid dataset");
        mg_gpt_data_free(d);
    }
    char cache[256]; /* Megatron's default: <prefix>/cache/GPTDataset_indices */
    snprintf(cache, sizeof cache, "%s/cache/GPTDataset_indices", prefix);
    MG_EXPECT(ds_count_files(cache) == 4, "default cache dir %s holds %d files", cache,
              ds_count_files(cache));
    ds_rmtree(dir);
}

MG_TEST(dataset_cache_reuse_and_rebuild) {
    golden_case g;
    char dir[64];
    if (!load_case(t, "single_epochs", &g) || !ds_tmpdir(dir)) return;
    g.cfg.cache_path = dir;
    mg_gpt_data *d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    mg_gpt_data_free(d);
    const cJSON *files = cJSON_GetObjectItem(g.meta, "cache_files");
    char path[256], shuffle[256] = "";
    int64_t before[16];
    int n = cJSON_GetArraySize(files);
    for (int i = 0; i < n && i < 16; i++) {
        const char *f = cJSON_GetArrayItem(files, i)->valuestring;
        snprintf(path, sizeof path, "%s/%s", dir, f);
        before[i] = mtime_ns(path);
        if (strstr(f, "-train-shuffle_index.npy")) snprintf(shuffle, sizeof shuffle, "%s", path);
    }
    /* same inputs: a cache hit, nothing rewritten */
    d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    if (d) expect_splits(t, "single_epochs (cached)", &g, d);
    mg_gpt_data_free(d);
    for (int i = 0; i < n && i < 16; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetArrayItem(files, i)->valuestring);
        MG_EXPECT(mtime_ns(path) == before[i], "%s was rewritten on a cache hit", path);
    }
    /* another seed, another sequence length: new descriptions, new files next to the old */
    g.cfg.seed = 8;
    d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    mg_gpt_data_free(d);
    MG_EXPECT(ds_count_files(dir) == 2 * n, "seed change: %d files, want %d", ds_count_files(dir),
              2 * n);
    g.cfg.seed = 7;
    g.cfg.seq_length = 9;
    d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    mg_gpt_data_free(d);
    MG_EXPECT(ds_count_files(dir) == 3 * n, "seq_length change: %d files", ds_count_files(dir));
    /* a truncated index is detected (size check) and rebuilt identically */
    g.cfg.seq_length = 8;
    if (truncate(shuffle, 200) != 0) MG_EXPECT(0, "truncate %s failed", shuffle);
    d = NULL;
    MG_EXPECT_OK(mg_gpt_data_build(&d, &g.cfg));
    if (d) expect_splits(t, "single_epochs (rebuilt)", &g, d);
    mg_gpt_data_free(d);
    char theirs[256];
    snprintf(theirs, sizeof theirs, DS_GOLDEN "/single_epochs/cache/%s", strrchr(shuffle, '/') + 1);
    MG_EXPECT(ds_files_equal(shuffle, theirs), "rebuilt shuffle index differs");
    ds_rmtree(dir);
    cJSON_Delete(g.meta);
}

MG_TEST(dataset_bad_input_is_one_line) {
    char dir[64];
    if (!ds_tmpdir(dir)) return;
    const char *A = DS_GOLDEN "/data/A";
    char blend[256];
    mg_gpt_data *d = NULL;
    mg_gpt_data_config c = {.data_path = A,
                            .split = "969, 30, 1",
                            .seq_length = 8,
                            .seed = 1,
                            .cache_path = dir,
                            .num_samples = {-1, -1, -1}};
#define BAD(field, value, code, msg)                                                               \
    do {                                                                                           \
        mg_gpt_data_config b_ = c;                                                                 \
        b_.field = value;                                                                          \
        MG_EXPECT_ERROR(mg_gpt_data_build(&d, &b_), code, msg);                                       \
        MG_EXPECT(d == NULL, "failed build returned a dataset");                                   \
    } while (0)
    snprintf(blend, sizeof blend, "0.3 %s x %s", A, A);
    BAD(data_path, blend, MG_ERR_USAGE, "blend weight 'x' (entry 3) is not a number");
    snprintf(blend, sizeof blend, "0.3 %s 0.7", A);
    BAD(data_path, blend, MG_ERR_USAGE, "has 3 entries starting with the weight '0.3'");
    BAD(split, "0,0,0", MG_ERR_USAGE, "--split '0,0,0' gives no data to any split");
    BAD(data_path, "/nonexistent/corpus", MG_ERR_USAGE,
        "--data-path prefix '/nonexistent/corpus' not found: /nonexistent/corpus.idx does not "
        "exist");
    BAD(data_path, "", MG_ERR_USAGE, "--data-path needs a dataset prefix");
    BAD(seq_length, 1, MG_ERR_USAGE, "--seq-length must be at least 2");
    BAD(seed, 4294967296ULL, MG_ERR_USAGE, "--seed must be in [0, 4294967295]");
    snprintf(blend, sizeof blend, "0.3 %s 0.7 %s", A, A);
    BAD(data_path, blend, MG_ERR_USAGE,
        "a weighted --data-path blend needs a sample count for "
        "every split; the train split has none");
    /* the test split of A under 969,30,1 is one short document: empty of samples is fine for
     * one epoch, but 5 samples cannot come from a split without documents */
    mg_gpt_data_config e = c;
    e.split = "1,1,0.0001";
    e.num_samples[2] = 5;
    MG_EXPECT_ERROR(mg_gpt_data_build(&d, &e), MG_ERR_USAGE,
                 "the test split of tests/golden/dataset/data/A is empty (0 of 600 documents");
    /* an indexed dataset without documents (the reader's check), written by hand: header with 0
     * sequences, document_indices [0], an empty .bin */
    char prefix[128], path[160];
    snprintf(prefix, sizeof prefix, "%s/empty", dir);
    unsigned char idx[34 + 8] = "MMIDIDX\0\0";
    idx[9] = 1;  /* version (u64) */
    idx[17] = 8; /* dtype uint16 */
    idx[26] = 1; /* document_indices length (u64); sequence count stays 0 */
    snprintf(path, sizeof path, "%s.idx", prefix);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(idx, 1, sizeof idx, f), fclose(f);
    snprintf(path, sizeof path, "%s.bin", prefix);
    f = fopen(path, "wb");
    if (f) fclose(f);
    BAD(data_path, prefix, MG_ERR_FORMAT, "empty dataset: 0 documents");
#undef BAD
    ds_rmtree(dir);
}
