/* Megatron indexed dataset: the writer's bytes against a hand-written file, read-back for every
 * integer dtype, and every rejection path of the reader (each error names the file and field). */
#include "test.h"

#include "core/status.h"
#include "data/indexed_dataset.h"
#include "indexed_test_util.h"

#include <stdlib.h>
#include <string.h>

/* The 3-document file: D0 = one sequence [1 2 3]; D1 = two sequences [4] [5 6]; D2 = empty
 * (zero sequences: its document index repeats). dtype uint16. Written out byte by byte from the
 * format (indexed_dataset.h), not by the writer. */
static const unsigned char k_idx[102] = {
    'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,          /* magic */
    1,   0,   0,   0,   0,   0,   0,   0,             /* version 1 */
    8,                                                /* dtype uint16 */
    3,   0,   0,   0,   0,   0,   0,   0,             /* 3 sequences */
    4,   0,   0,   0,   0,   0,   0,   0,             /* 4 document indices (3 documents) */
    3,   0,   0,   0,   1,   0,   0,   0, 2, 0, 0, 0, /* lengths 3 1 2 */
    0,   0,   0,   0,   0,   0,   0,   0,             /* pointer 0 */
    6,   0,   0,   0,   0,   0,   0,   0,             /* pointer 6 = 3 tokens * 2 bytes */
    8,   0,   0,   0,   0,   0,   0,   0,             /* pointer 8 */
    0,   0,   0,   0,   0,   0,   0,   0,             /* document indices 0 */
    1,   0,   0,   0,   0,   0,   0,   0,             /*   1 */
    3,   0,   0,   0,   0,   0,   0,   0,             /*   3 */
    3,   0,   0,   0,   0,   0,   0,   0,             /*   3 (D2 is empty) */
};
static const unsigned char k_bin[12] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0};

static void write_three_docs(mg_test_ctx *t, const char *prefix, int dtype) {
    mg_indexed_writer *w = NULL;
    MG_EXPECT_OK(mg_indexed_writer_open(&w, prefix, dtype));
    if (!w) return;
    const int32_t d0[] = {1, 2, 3}, l0[] = {3}, d1[] = {4, 5, 6}, l1[] = {1, 2};
    MG_EXPECT_OK(mg_indexed_writer_add_document(w, d0, l0, 1));
    MG_EXPECT_OK(mg_indexed_writer_add_document(w, d1, l1, 2));
    MG_EXPECT_OK(mg_indexed_writer_add_document(w, NULL, NULL, 0));
    MG_EXPECT_OK(mg_indexed_writer_finish(w));
    mg_indexed_writer_free(w);
}

MG_TEST(indexed_writer_matches_hand_written_bytes) {
    char dir[64], prefix[128], path[160];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(prefix, sizeof prefix, "%s/three", dir);
    write_three_docs(t, prefix, MG_IDX_UINT16);
    size_t n = 0;
    snprintf(path, sizeof path, "%s.idx", prefix);
    unsigned char *idx = mg_idx_test_read(path, &n);
    MG_EXPECT(idx && n == sizeof k_idx && !memcmp(idx, k_idx, n), ".idx bytes differ (%zu bytes)",
              n);
    free(idx);
    snprintf(path, sizeof path, "%s.bin", prefix);
    unsigned char *bin = mg_idx_test_read(path, &n);
    MG_EXPECT(bin && n == sizeof k_bin && !memcmp(bin, k_bin, n), ".bin bytes differ");
    free(bin);
    MG_EXPECT(mg_idx_test_count_files(dir) == 2, "temporary files left behind");
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_reader_fields_and_reads) {
    char dir[64], prefix[128];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(prefix, sizeof prefix, "%s/three", dir);
    mg_idx_test_write_pair(prefix, k_idx, sizeof k_idx, k_bin, sizeof k_bin);
    mg_indexed_dataset d;
    MG_EXPECT_OK(mg_indexed_dataset_open(&d, prefix));
    MG_EXPECT(d.dtype_code == MG_IDX_UINT16 && d.dtype_size == 2, "dtype %d", d.dtype_code);
    MG_EXPECT(d.num_sequences == 3 && d.num_documents == 3, "counts %lld %lld",
              (long long)d.num_sequences, (long long)d.num_documents);
    if (d.num_sequences == 3) {
        MG_EXPECT(d.sequence_lengths[0] == 3 && d.sequence_lengths[1] == 1 &&
                      d.sequence_lengths[2] == 2,
                  "lengths");
        MG_EXPECT(d.sequence_pointers[1] == 6 && d.sequence_pointers[2] == 8, "pointers");
        MG_EXPECT(d.document_indices[0] == 0 && d.document_indices[1] == 1 &&
                      d.document_indices[2] == 3 && d.document_indices[3] == 3,
                  "document indices");
        int32_t out[3] = {0};
        MG_EXPECT_OK(mg_indexed_dataset_read(&d, 0, 0, 3, out));
        MG_EXPECT(out[0] == 1 && out[1] == 2 && out[2] == 3, "seq 0: %d %d %d", out[0], out[1],
                  out[2]);
        MG_EXPECT_OK(mg_indexed_dataset_read(&d, 2, 1, 1, out));
        MG_EXPECT(out[0] == 6, "seq 2 offset 1: %d", out[0]);
        MG_EXPECT(mg_indexed_dataset_read(&d, 3, 0, 1, out) == MG_ERR_USAGE, "seq out of range");
        MG_EXPECT(mg_indexed_dataset_read(&d, 1, 1, 1, out) == MG_ERR_USAGE, "past the sequence");
        MG_EXPECT(mg_indexed_dataset_read(&d, 0, -1, 1, out) == MG_ERR_USAGE, "negative offset");
        MG_EXPECT_OK(mg_indexed_dataset_read(&d, 0, 3, 0, out)); /* empty read at the end */
    }
    mg_indexed_dataset_close(&d);
    mg_indexed_dataset_close(&d); /* closing twice is harmless */
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_every_integer_dtype_round_trips) {
    static const struct {
        int code;
        int32_t lo, hi;
    } cases[] = {{MG_IDX_UINT8, 0, 255},
                 {MG_IDX_INT8, -128, 127},
                 {MG_IDX_INT16, -32768, 32767},
                 {MG_IDX_UINT16, 0, 65535},
                 {MG_IDX_INT32, INT32_MIN, INT32_MAX},
                 {MG_IDX_INT64, INT32_MIN, INT32_MAX}};
    char dir[64], prefix[128];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        snprintf(prefix, sizeof prefix, "%s/d%d", dir, cases[c].code);
        int32_t toks[5] = {cases[c].lo, cases[c].hi, 0, 1, cases[c].hi - 1}, lens[2] = {2, 3};
        mg_indexed_writer *w = NULL;
        MG_EXPECT_OK(mg_indexed_writer_open(&w, prefix, cases[c].code));
        if (!w) continue;
        MG_EXPECT_OK(mg_indexed_writer_add_document(w, toks, lens, 2));
        MG_EXPECT_OK(mg_indexed_writer_finish(w));
        mg_indexed_writer_free(w);
        mg_indexed_dataset d;
        MG_EXPECT_OK(mg_indexed_dataset_open(&d, prefix));
        int32_t out[3] = {0};
        MG_EXPECT_OK(mg_indexed_dataset_read(&d, 1, 0, 3, out));
        MG_EXPECT(out[0] == 0 && out[1] == 1 && out[2] == toks[4], "dtype %d: seq 1",
                  cases[c].code);
        MG_EXPECT_OK(mg_indexed_dataset_read(&d, 0, 0, 2, out));
        MG_EXPECT(out[0] == cases[c].lo && out[1] == cases[c].hi, "dtype %d: extremes %d %d",
                  cases[c].code, out[0], out[1]);
        mg_indexed_dataset_close(&d);
    }
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_writer_rejects_and_cleans_up) {
    char dir[64], prefix[128];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(prefix, sizeof prefix, "%s/w", dir);
    mg_indexed_writer *w = NULL;
    MG_EXPECT(mg_indexed_writer_open(&w, prefix, MG_IDX_FLOAT32) == MG_ERR_USAGE, "float dtype");
    MG_EXPECT(mg_indexed_writer_open(&w, prefix, 9) == MG_ERR_USAGE && !w, "unknown dtype");
    MG_EXPECT_OK(mg_indexed_writer_open(&w, prefix, MG_IDX_UINT16));
    if (w) {
        const int32_t big[] = {70000}, len[] = {1};
        MG_EXPECT_ERROR(mg_indexed_writer_add_document(w, big, len, 1), MG_ERR_USAGE,
                        "token id 70000 does not fit dtype code 8");
        MG_EXPECT(mg_idx_test_count_files(dir) == 1, "only the temporary .bin while writing");
        mg_indexed_writer_free(w); /* not finished: the temporaries go */
    }
    MG_EXPECT(mg_idx_test_count_files(dir) == 0, "an unfinished writer left files");
    snprintf(prefix, sizeof prefix, "%s/no/such/dir/w", dir);
    w = NULL;
    MG_EXPECT_ERROR(mg_indexed_writer_open(&w, prefix, MG_IDX_UINT16), MG_ERR_IO,
                    "no/such/dir/w.bin.tmp");
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_optimal_dtype_is_megatrons) {
    MG_EXPECT(mg_indexed_optimal_dtype(50257) == MG_IDX_UINT16, "GPT-2");
    MG_EXPECT(mg_indexed_optimal_dtype(65499) == MG_IDX_UINT16, "65499");
    MG_EXPECT(mg_indexed_optimal_dtype(65500) == MG_IDX_INT32, "65500");
    MG_EXPECT(mg_indexed_optimal_dtype(128256) == MG_IDX_INT32, "Llama 3");
}

/* ---- bad input: a mutation of the hand-written pair, the expected code and message part. */

static void put64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}

typedef struct {
    const char *name;
    mg_status code;
    const char *message; /* substring */
} bad_case;

static void expect_bad(mg_test_ctx *t, const char *dir, const bad_case *c, const void *idx,
                       size_t idx_n, const void *bin, size_t bin_n) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s/%s", dir, c->name);
    mg_idx_test_write_pair(prefix, idx, idx_n, bin, bin_n);
    mg_indexed_dataset d;
    mg_error_clear();
    mg_status st = mg_indexed_dataset_open(&d, prefix);
    const char *msg = mg_error_message();
    MG_EXPECT(st == c->code, "%s: status %s, expected %s (%s)", c->name, mg_status_name(st),
              mg_status_name(c->code), msg);
    MG_EXPECT(strstr(msg, c->message) != NULL, "%s: message '%s' lacks '%s'", c->name, msg,
              c->message);
    MG_EXPECT(strstr(msg, c->name) != NULL, "%s: message '%s' does not name the file", c->name,
              msg);
    MG_EXPECT(!strchr(msg, '\n'), "%s: message is not one line", c->name);
    MG_EXPECT(d.idx_map == NULL && d.bin_map == NULL, "%s: failed open kept mappings", c->name);
    if (st == MG_OK) mg_indexed_dataset_close(&d);
}

MG_TEST(indexed_reader_rejects_bad_files) {
    char dir[64];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    unsigned char m[sizeof k_idx + 16];
#define MUTATE(stmt, ...)                                                                          \
    do {                                                                                           \
        memcpy(m, k_idx, sizeof k_idx);                                                            \
        stmt;                                                                                      \
        bad_case c_ = {__VA_ARGS__};                                                               \
        expect_bad(t, dir, &c_, m, sizeof k_idx, k_bin, sizeof k_bin);                             \
    } while (0)
    MUTATE(m[0] = 'X', "magic", MG_ERR_FORMAT, "bad magic");
    MUTATE(m[9] = 2, "version", MG_ERR_FORMAT, "version 2");
    MUTATE(m[17] = 9, "dtype9", MG_ERR_FORMAT, "unknown dtype code 9");
    MUTATE(m[17] = 0, "dtype0", MG_ERR_FORMAT, "unknown dtype code 0");
    MUTATE(put64(m + 18, 4), "seqcount", MG_ERR_FORMAT, "truncated");
    MUTATE(put64(m + 18, UINT64_MAX), "hugecount", MG_ERR_FORMAT, "truncated");
    MUTATE(put64(m + 26, UINT64_MAX / 4), "hugedocs", MG_ERR_FORMAT, "truncated");
    MUTATE(m[34] = 0xff; m[35] = 0xff; m[36] = 0xff;
           m[37] = 0xff, "neglen", MG_ERR_FORMAT, "sequence_lengths[0] = -1");
    /* lengths at 34, 38, 42; pointers at 46, 54, 62; document indices at 70, 78, 86, 94 */
    MUTATE(m[62] = 100, "pointer", MG_ERR_FORMAT, "sequence_pointers[2] = 100, expected 8");
    MUTATE(m[42] = 7, "longseq", MG_ERR_FORMAT, "describes 22"); /* 3+1+7 tokens: past the .bin */
    MUTATE(m[70] = 1, "docstart", MG_ERR_FORMAT, "document_indices[0] = 1");
    MUTATE(m[78] = 3; m[86] = 1, "monotone", MG_ERR_FORMAT, "not monotone: [2] = 1 < [1] = 3");
    MUTATE(m[86] = 2; m[94] = 2, "docend", MG_ERR_FORMAT, "end at 2, must end at the sequence");
    /* size problems */
    bad_case empty = {"emptyidx", MG_ERR_FORMAT, "empty file"};
    expect_bad(t, dir, &empty, k_idx, 0, k_bin, sizeof k_bin);
    bad_case shorthdr = {"shorthdr", MG_ERR_FORMAT, "truncated header"};
    expect_bad(t, dir, &shorthdr, k_idx, 20, k_bin, sizeof k_bin);
    bad_case trunc = {"truncidx", MG_ERR_FORMAT, "truncated"};
    expect_bad(t, dir, &trunc, k_idx, sizeof k_idx - 1, k_bin, sizeof k_bin);
    memcpy(m, k_idx, sizeof k_idx), memset(m + sizeof k_idx, 0, 3);
    bad_case trailing = {"trailing", MG_ERR_FORMAT, "3 bytes after the document indices"};
    expect_bad(t, dir, &trailing, m, sizeof k_idx + 3, k_bin, sizeof k_bin);
    bad_case truncbin = {"truncbin", MG_ERR_FORMAT, "truncated: 10 bytes"};
    expect_bad(t, dir, &truncbin, k_idx, sizeof k_idx, k_bin, 10);
    bad_case emptybin = {"emptybin", MG_ERR_FORMAT, "truncated: 0 bytes"};
    expect_bad(t, dir, &emptybin, k_idx, sizeof k_idx, k_bin, 0);
    unsigned char bigbin[16] = {0};
    bad_case longbin = {"longbin", MG_ERR_FORMAT, "16 bytes, but"};
    expect_bad(t, dir, &longbin, k_idx, sizeof k_idx, bigbin, sizeof bigbin);
    /* 0 documents: the header only, with document_indices = [0] */
    unsigned char e[42];
    memcpy(e, k_idx, 18), put64(e + 18, 0), put64(e + 26, 1), put64(e + 34, 0);
    bad_case nodocs = {"nodocs", MG_ERR_FORMAT, "empty dataset: 0 documents"};
    expect_bad(t, dir, &nodocs, e, sizeof e, NULL, 0);
    put64(e + 26, 0);
    bad_case zerodocs = {"zerodocs", MG_ERR_FORMAT, "document count 0"};
    expect_bad(t, dir, &zerodocs, e, 34, NULL, 0);
    /* missing files */
    bad_case nobin = {"nobin", MG_ERR_IO, "nobin.bin: cannot open"};
    expect_bad(t, dir, &nobin, k_idx, sizeof k_idx, NULL, (size_t)-1);
    bad_case noidx = {"noidx", MG_ERR_IO, "noidx.idx: cannot open"};
    expect_bad(t, dir, &noidx, NULL, (size_t)-1, k_bin, sizeof k_bin);
#undef MUTATE
    mg_idx_test_rmdir(dir);
}

/* Every crasher the fuzzers ever found, replayed: a clean error or success, never a crash. */
MG_TEST(indexed_fuzz_regressions_replay) {
    char dir[64];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    int n = mg_idx_test_replay_dir(t, "tests/fuzz/regressions/indexed", dir, 0);
    n += mg_idx_test_replay_dir(t, "tests/fuzz/corpus/indexed", dir, 0);
    int j = mg_idx_test_replay_dir(t, "tests/fuzz/regressions/jsonl", dir, 1);
    j += mg_idx_test_replay_dir(t, "tests/fuzz/corpus/jsonl", dir, 1);
    MG_EXPECT(n > 0 && j > 0, "no fuzz corpus files found (run from the repository root)");
    mg_idx_test_rmdir(dir);
}
