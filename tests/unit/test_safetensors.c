/* safetensors reader/writer: round trips, a file written by Python's safetensors library, and
 * corrupt files that must fail with a clear one-line error (never a crash). */
#include "test.h"

#include "core/safetensors.h"
#include "core/status.h"
#include "golden_io.h"

#include <cjson/cJSON.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

typedef struct {
    char dir[64];
    char path[128];
} tmpdir;

static int tmp_make(tmpdir *d, const char *file) {
    snprintf(d->dir, sizeof d->dir, "/tmp/mg_st_XXXXXX");
    if (!mkdtemp(d->dir)) return 0;
    snprintf(d->path, sizeof d->path, "%s/%s", d->dir, file);
    return 1;
}

static void tmp_remove(tmpdir *d) {
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", d->path);
    unlink(d->path);
    unlink(tmp);
    rmdir(d->dir);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(len > 0 ? (size_t)len : 1);
    *n = p ? fread(p, 1, (size_t)len, f) : 0;
    fclose(f);
    return p;
}

/* A raw file: 8-byte little-endian length `hlen` (the real header length when hlen is
 * UINT64_MAX), the header bytes, then `data_len` bytes of a counting pattern. */
static int write_raw(const char *path, uint64_t hlen, const char *header, size_t header_len,
                     size_t data_len) {
    size_t n = 8 + header_len + data_len;
    unsigned char *p = malloc(n);
    if (!p) return 0;
    uint64_t len = hlen == UINT64_MAX ? header_len : hlen;
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(len >> (8 * i));
    memcpy(p + 8, header, header_len);
    for (size_t i = 0; i < data_len; i++) p[8 + header_len + i] = (unsigned char)i;
    int ok = write_bytes(path, p, n);
    free(p);
    return ok;
}

static int st_is_empty(const mg_safetensors *st) {
    return !st->entries && st->n == 0 && !st->map && !st->map_size && !st->metadata_json;
}

/* Opens path and expects failure with `code` and a message containing `want`. */
static void expect_open_fails(mg_test_ctx *t, const char *what, const char *path, mg_status code,
                              const char *want) {
    mg_safetensors st;
    mg_error_clear();
    mg_status s = mg_safetensors_open(&st, path);
    const char *msg = mg_error_message();
    MG_EXPECT(s == code, "%s: status %s, want %s (%s)", what, mg_status_name(s),
              mg_status_name(code), msg);
    MG_EXPECT(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
    MG_EXPECT(strstr(msg, path) != NULL, "%s: message '%s' does not name the file", what, msg);
    MG_EXPECT(strchr(msg, '\n') == NULL, "%s: message is not one line: '%s'", what, msg);
    MG_EXPECT(st_is_empty(&st), "%s: struct not left empty after failure", what);
    if (s == MG_OK) mg_safetensors_close(&st);
}

typedef struct {
    const char *what;
    const char *header; /* JSON header text */
    size_t data_len;
    const char *want; /* substring of the error message */
} header_case;

static void run_header_cases(mg_test_ctx *t, const header_case *cases, int n) {
    tmpdir d;
    if (!tmp_make(&d, "bad.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    for (int i = 0; i < n; i++) {
        const header_case *c = &cases[i];
        if (!write_raw(d.path, UINT64_MAX, c->header, strlen(c->header), c->data_len)) {
            MG_EXPECT(0, "%s: cannot write the test file", c->what);
            continue;
        }
        expect_open_fails(t, c->what, d.path, MG_ERR_FORMAT, c->want);
    }
    tmp_remove(&d);
}

/* ---------------------------------------------------------------- round trips */

MG_TEST(safetensors_roundtrip_dtypes_and_shapes) {
    float a[6];
    uint16_t b[5], c[8];
    int32_t d[7];
    int64_t e[3] = {-((int64_t)1 << 40), 0, (int64_t)1 << 62};
    float scalar = -7.5f, h[12];
    for (int i = 0; i < 6; i++) a[i] = 0.1f * (float)i - 0.25f;
    for (int i = 0; i < 5; i++) b[i] = mg_f32_to_bf16(1.5f * (float)i - 3.0f);
    for (int i = 0; i < 8; i++) c[i] = mg_f32_to_f16((float)i / 16.0f - 0.2f);
    for (int i = 0; i < 7; i++) d[i] = (i - 3) * 1000003;
    for (int i = 0; i < 12; i++) h[i] = (float)(i * i) - 10.0f;
    /* Deliberately not in name order, to check that order is kept. */
    const mg_st_tensor ts[] = {
        {"z.f32", MG_F32, 2, {2, 3}, a},    {"b.bf16", MG_BF16, 1, {5}, b},
        {"c.f16", MG_F16, 3, {2, 2, 2}, c}, {"d.i32", MG_I32, 1, {7}, d},
        {"e.i64", MG_I64, 1, {3}, e},       {"s.scalar", MG_F32, 0, {0}, &scalar},
        {"empty", MG_F32, 2, {0, 4}, NULL}, {"h.4d", MG_F32, 4, {2, 1, 3, 2}, h},
    };
    const int n = (int)(sizeof ts / sizeof ts[0]);
    tmpdir dir;
    if (!tmp_make(&dir, "rt.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    MG_EXPECT_OK(mg_safetensors_write(dir.path, ts, n, NULL));
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir.path);
    MG_EXPECT(!file_exists(tmp), "temporary file left behind");

    size_t fsize = 0;
    unsigned char *raw = read_bytes(dir.path, &fsize);
    if (raw && fsize >= 8) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
        MG_EXPECT(hlen % 8 == 0, "header length %llu is not a multiple of 8",
                  (unsigned long long)hlen);
        MG_EXPECT(hlen < fsize && raw[8] == '{', "header does not start with '{'");
    }
    free(raw);

    mg_safetensors st;
    MG_EXPECT_OK(mg_safetensors_open(&st, dir.path));
    MG_EXPECT(st.n == n, "n = %d, want %d", st.n, n);
    MG_EXPECT(st.metadata_json == NULL, "metadata present though none was written");
    for (int i = 0; i < n && i < st.n; i++) {
        const mg_st_entry *en = &st.entries[i];
        MG_EXPECT(strcmp(en->name, ts[i].name) == 0, "entry %d is '%s', want '%s' (write order)", i,
                  en->name, ts[i].name);
        MG_EXPECT(mg_safetensors_find(&st, ts[i].name) == en, "find('%s') wrong", ts[i].name);
        MG_EXPECT(en->dtype == ts[i].dtype, "%s: dtype %d", en->name, (int)en->dtype);
        MG_EXPECT(en->ndim == ts[i].ndim, "%s: ndim %d", en->name, en->ndim);
        size_t bytes = mg_dtype_size(ts[i].dtype);
        for (int k = 0; k < ts[i].ndim; k++) {
            MG_EXPECT(en->shape[k] == ts[i].shape[k], "%s: dim %d", en->name, k);
            bytes *= (size_t)ts[i].shape[k];
        }
        MG_EXPECT(en->nbytes == bytes, "%s: nbytes %zu, want %zu", en->name, en->nbytes, bytes);
        if (bytes)
            MG_EXPECT(memcmp(en->data, ts[i].data, bytes) == 0, "%s: data differs", en->name);
        if (i > 0)
            MG_EXPECT((const char *)en->data ==
                          (const char *)st.entries[i - 1].data + st.entries[i - 1].nbytes,
                      "%s: offsets not contiguous", en->name);
    }
    MG_EXPECT(mg_safetensors_find(&st, "absent") == NULL, "find of an absent name");
    mg_safetensors_close(&st);
    MG_EXPECT(st_is_empty(&st), "close does not zero the struct");
    mg_safetensors_close(&st); /* harmless twice */
    tmp_remove(&dir);
}

MG_TEST(safetensors_metadata_roundtrip_and_escaping) {
    float x[3] = {1.0f, -2.0f, 3.5f};
    const char *odd = "odd \"name\" with \\ and\ttab";
    const mg_st_tensor ts[] = {{odd, MG_F32, 1, {3}, x}};
    const char *meta =
        "{ \"format\": \"pt\", \"note\": \"line1\\nline2 \\\"q\\\"\", \"empty\": \"\" }";
    tmpdir dir;
    if (!tmp_make(&dir, "meta.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    MG_EXPECT_OK(mg_safetensors_write(dir.path, ts, 1, meta));
    mg_safetensors st;
    MG_EXPECT_OK(mg_safetensors_open(&st, dir.path));
    const mg_st_entry *e = mg_safetensors_find(&st, odd);
    MG_EXPECT(e && e->nbytes == sizeof x && memcmp(e->data, x, sizeof x) == 0,
              "escaped name did not round-trip");
    MG_EXPECT(st.metadata_json != NULL, "metadata lost");
    cJSON *m = st.metadata_json ? cJSON_Parse(st.metadata_json) : NULL;
    MG_EXPECT(m && cJSON_IsObject(m) && cJSON_GetArraySize(m) == 3, "metadata not an object of 3");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *no = cJSON_GetObjectItemCaseSensitive(m, "note");
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(m, "empty");
    MG_EXPECT(cJSON_IsString(f) && strcmp(f->valuestring, "pt") == 0, "format value");
    MG_EXPECT(cJSON_IsString(no) && strcmp(no->valuestring, "line1\nline2 \"q\"") == 0,
              "note value");
    MG_EXPECT(cJSON_IsString(em) && em->valuestring[0] == '\0', "empty value");
    cJSON_Delete(m);
    mg_safetensors_close(&st);

    /* Only metadata, no tensors: a valid file with an empty data section. */
    MG_EXPECT_OK(mg_safetensors_write(dir.path, NULL, 0, "{\"k\":\"v\"}"));
    MG_EXPECT_OK(mg_safetensors_open(&st, dir.path));
    MG_EXPECT(st.n == 0 && st.metadata_json && strcmp(st.metadata_json, "{\"k\":\"v\"}") == 0,
              "metadata-only file: n %d, metadata %s", st.n,
              st.metadata_json ? st.metadata_json : "NULL");
    mg_safetensors_close(&st);
    tmp_remove(&dir);
}

MG_TEST(safetensors_write_rejects_bad_arguments_and_keeps_old_file) {
    float x[4] = {1, 2, 3, 4};
    tmpdir dir;
    if (!tmp_make(&dir, "keep.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    const mg_st_tensor good[] = {{"w", MG_F32, 1, {4}, x}};
    MG_EXPECT_OK(mg_safetensors_write(dir.path, good, 1, NULL));
    size_t n0 = 0;
    unsigned char *before = read_bytes(dir.path, &n0);

    const mg_st_tensor dup[] = {{"w", MG_F32, 1, {2}, x}, {"w", MG_F32, 1, {2}, x + 2}};
    const mg_st_tensor meta_name[] = {{"__metadata__", MG_F32, 1, {4}, x}};
    const mg_st_tensor neg[] = {{"w", MG_F32, 2, {-1, 4}, x}};
    const mg_st_tensor nodata[] = {{"w", MG_F32, 1, {4}, NULL}};
    const mg_st_tensor dims[] = {{"w", MG_F32, 5, {1, 1, 1, 1}, x}};
    struct {
        const char *what;
        const mg_st_tensor *ts;
        int n;
        const char *meta, *want;
    } cases[] = {
        {"duplicate name", dup, 2, NULL, "given twice"},
        {"__metadata__ as a name", meta_name, 1, NULL, "not __metadata__"},
        {"negative dim", neg, 1, NULL, "negative dimension"},
        {"NULL data", nodata, 1, NULL, "data is NULL"},
        {"too many dims", dims, 1, NULL, "ndim 5"},
        {"metadata not an object", good, 1, "[1]", "JSON object of string values"},
        {"metadata number value", good, 1, "{\"a\": 1}", "value 'a' is not a string"},
        {"metadata invalid JSON", good, 1, "{\"a\": ", "JSON object of string values"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_error_clear();
        mg_status s = mg_safetensors_write(dir.path, cases[i].ts, cases[i].n, cases[i].meta);
        MG_EXPECT(s == MG_ERR_USAGE, "%s: status %s", cases[i].what, mg_status_name(s));
        MG_EXPECT(strstr(mg_error_message(), cases[i].want), "%s: message '%s' lacks '%s'",
                  cases[i].what, mg_error_message(), cases[i].want);
    }
    size_t n1 = 0;
    unsigned char *after = read_bytes(dir.path, &n1);
    MG_EXPECT(before && after && n0 == n1 && memcmp(before, after, n0) == 0,
              "a failed write changed the existing file");
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir.path);
    MG_EXPECT(!file_exists(tmp), "a failed write left a temporary file");
    free(before);
    free(after);

    /* A directory that does not exist: an I/O error naming the path, nothing created. */
    char missing[200];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", dir.dir);
    mg_status s = mg_safetensors_write(missing, good, 1, NULL);
    MG_EXPECT(s == MG_ERR_IO && strstr(mg_error_message(), "cannot create"), "missing dir: %s",
              mg_error_message());
    tmp_remove(&dir);
}

/* ---------------------------------------------------------------- interoperability */

/* Written by tools/reference/make_golden.py with Python's safetensors library; the values are
 * the formulas used there. */
MG_TEST(safetensors_reads_file_written_by_python) {
    mg_safetensors st;
    mg_status s = mg_safetensors_open(&st, MG_GOLDEN_DIR "/st_python.safetensors");
    MG_EXPECT(s == MG_OK, "open: %s", mg_error_message());
    if (s != MG_OK) return;
    MG_EXPECT(st.n == 8, "n = %d, want 8", st.n);
    for (int i = 1; i < st.n; i++)
        MG_EXPECT(st.entries[i].data >= st.entries[i - 1].data, "entries not in data order");

    cJSON *m = st.metadata_json ? cJSON_Parse(st.metadata_json) : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    MG_EXPECT(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pt") == 0, "metadata format");
    MG_EXPECT(cJSON_GetArraySize(m) == 1, "metadata has %d keys, want 1", cJSON_GetArraySize(m));
    cJSON_Delete(m);

    const mg_st_entry *e = mg_safetensors_find(&st, "a.f32");
    MG_EXPECT(e && e->dtype == MG_F32 && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3,
              "a.f32 header");
    for (int i = 0; e && i < 6; i++) {
        float v;
        memcpy(&v, (const char *)e->data + 4 * i, 4);
        MG_EXPECT(v == 0.5f * (float)i - 1.0f, "a.f32[%d] = %g", i, v);
    }
    e = mg_safetensors_find(&st, "b.bf16");
    MG_EXPECT(e && e->dtype == MG_BF16 && e->ndim == 1 && e->shape[0] == 4, "b.bf16 header");
    for (int i = 0; e && i < 4; i++) {
        uint16_t v;
        memcpy(&v, (const char *)e->data + 2 * i, 2);
        MG_EXPECT(mg_bf16_to_f32(v) == ((float)i - 2.0f) * 0.25f, "b.bf16[%d]", i);
    }
    e = mg_safetensors_find(&st, "c.f16");
    MG_EXPECT(e && e->dtype == MG_F16 && e->ndim == 3 && e->shape[2] == 2, "c.f16 header");
    for (int i = 0; e && i < 8; i++) {
        uint16_t v;
        memcpy(&v, (const char *)e->data + 2 * i, 2);
        MG_EXPECT(mg_f16_to_f32(v) == (float)i / 8.0f - 0.5f, "c.f16[%d]", i);
    }
    e = mg_safetensors_find(&st, "d.i32");
    const int32_t want_d[5] = {-2, -1, 0, 1, INT32_MAX};
    MG_EXPECT(e && e->dtype == MG_I32 && e->nbytes == sizeof want_d &&
                  memcmp(e->data, want_d, sizeof want_d) == 0,
              "d.i32");
    e = mg_safetensors_find(&st, "e.i64");
    const int64_t want_e[3] = {-((int64_t)1 << 40), 0, (int64_t)1 << 62};
    MG_EXPECT(e && e->dtype == MG_I64 && e->nbytes == sizeof want_e &&
                  memcmp(e->data, want_e, sizeof want_e) == 0,
              "e.i64");
    e = mg_safetensors_find(&st, "f.scalar");
    float sc = 0;
    if (e && e->nbytes == 4) memcpy(&sc, e->data, 4);
    MG_EXPECT(e && e->ndim == 0 && e->nbytes == 4 && sc == 3.25f, "f.scalar");
    e = mg_safetensors_find(&st, "g.empty");
    MG_EXPECT(e && e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 4 && e->nbytes == 0,
              "g.empty");
    e = mg_safetensors_find(&st, "h.4d");
    MG_EXPECT(e && e->ndim == 4 && e->shape[0] == 1 && e->shape[1] == 2 && e->shape[2] == 3 &&
                  e->shape[3] == 4 && e->nbytes == 96,
              "h.4d header");
    for (int i = 0; e && e->nbytes == 96 && i < 24; i++) {
        float v;
        memcpy(&v, (const char *)e->data + 4 * i, 4);
        MG_EXPECT(v == (float)i, "h.4d[%d] = %g", i, v);
    }
    mg_safetensors_close(&st);
}

/* ---------------------------------------------------------------- corrupt files */

MG_TEST(safetensors_rejects_bad_lengths) {
    tmpdir d;
    if (!tmp_make(&d, "len.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    write_bytes(d.path, "", 0);
    expect_open_fails(t, "empty file", d.path, MG_ERR_FORMAT, "shorter than the 8-byte");
    write_bytes(d.path, "\x10\0\0", 3);
    expect_open_fails(t, "3-byte file", d.path, MG_ERR_FORMAT, "file is 3 bytes");
    const char *h = "{}      ";
    write_raw(d.path, 4096, h, 8, 0);
    expect_open_fails(t, "header longer than the file", d.path, MG_ERR_FORMAT,
                      "header length 4096 exceeds the file (16 bytes)");
    write_raw(d.path, (uint64_t)1 << 40, h, 8, 0);
    expect_open_fails(t, "absurd header length", d.path, MG_ERR_FORMAT, "is absurd");
    write_raw(d.path, 0, "", 0, 0);
    expect_open_fails(t, "zero header length", d.path, MG_ERR_FORMAT, "not valid JSON");
    /* A text file that is not safetensors at all: its first 8 bytes read as a huge length. */
    write_bytes(d.path, "hello, world, this is not a tensor file\n", 40);
    expect_open_fails(t, "text file", d.path, MG_ERR_FORMAT, "header length");

    char missing[128];
    snprintf(missing, sizeof missing, "%s/absent.safetensors", d.dir);
    expect_open_fails(t, "missing file", missing, MG_ERR_IO, "cannot open");
    expect_open_fails(t, "a directory", d.dir, MG_ERR_IO, "not a regular file");
    tmp_remove(&d);
}

MG_TEST(safetensors_rejects_bad_json) {
    static const header_case cases[] = {
        {"truncated JSON", "{\"a\": {\"dtype\": \"F32\", ", 0, "not valid JSON"},
        {"trailing garbage", "{} xyz", 0, "not valid JSON"},
        {"not an object", "[1, 2]", 0, "header is not a JSON object"},
        {"entry not an object", "{\"a\": 3}", 0, "tensor 'a' is not a JSON object"},
        {"binary garbage", "\xff\xfe\x01{\x80", 0, "not valid JSON"},
        {"metadata not strings", "{\"__metadata__\": {\"x\": 1}}", 0,
         "__metadata__ value 'x' is not a string"},
        {"metadata not an object", "{\"__metadata__\": \"s\"}", 0, "__metadata__ is not a JSON"},
        {"metadata twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "appears twice"},
    };
    run_header_cases(t, cases, (int)(sizeof cases / sizeof cases[0]));

    /* A NUL byte inside the header (strlen-based parsing would stop there and accept it). */
    tmpdir d;
    if (tmp_make(&d, "nul.safetensors")) {
        write_raw(d.path, UINT64_MAX, "{}\0garbage", 10, 0);
        expect_open_fails(t, "NUL in header", d.path, MG_ERR_FORMAT, "NUL byte");
        tmp_remove(&d);
    }
}

MG_TEST(safetensors_rejects_bad_entries) {
    char longname[400];
    memset(longname, 'n', 200);
    snprintf(longname + 200, sizeof longname - 200,
             "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}");
    char longhdr[420] = "{\"";
    strcat(longhdr, longname);
    const header_case cases[] = {
        {"missing dtype", "{\"w\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8,
         "tensor 'w' has no dtype"},
        {"missing shape", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", 8,
         "tensor 'w' has no shape"},
        {"missing offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8,
         "tensor 'w' has no data_offsets"},
        {"unknown dtype", "{\"w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
         8, "unknown or unsupported dtype 'F64'"},
        {"dtype not a string", "{\"w\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, "dtype is not a string"},
        {"size mismatch",
         "{\"x\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 20,
         "tensor 'x' shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] span 20"},
        {"negative dim",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1, 4], \"data_offsets\": [0, 16]}}", 16,
         "negative dimension -1"},
        {"fractional dim",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}", 10,
         "shape entry 0 is not an integer"},
        {"string dim",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", 8,
         "not an integer"},
        {"too many dims",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1], \"data_offsets\": [0, 4]}}", 4,
         "has 5 dims"},
        {"shape not an array",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", 16,
         "shape is not an array"},
        {"huge shape overflows",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
         "\"data_offsets\": [0, 4]}}",
         4, "overflows"},
        {"offsets not a pair",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4,
         "not a pair of non-negative integers"},
        {"negative offset",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4,
         "not a pair of non-negative integers"},
        {"name too long", longhdr, 4, "bytes long (limit 159)"},
    };
    run_header_cases(t, cases, (int)(sizeof cases / sizeof cases[0]));
}

MG_TEST(safetensors_rejects_bad_layout) {
    static const header_case cases[] = {
        {"offsets beyond data",
         "{\"x\": {\"dtype\": \"F32\", \"shape\": [20], \"data_offsets\": [0, 80]}}", 64,
         "tensor 'x' data_offsets [0, 80] exceed the data section (64 bytes)"},
        {"reversed offsets",
         "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 0]}}", 16,
         "data_offsets [16, 0] are reversed"},
        {"overlap",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [16, 48]}}",
         48, "tensor 'b' data_offsets [16, 48] overlap tensor 'a'"},
        {"overlap listed in reverse order",
         "{\"b\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [16, 48]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]}}",
         48, "overlap tensor 'a'"},
        {"same offsets twice",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"b\": {\"dtype\": \"I32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
         16, "overlap"},
        {"hole",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [32, 48]}}",
         48, "bytes [16, 32) of the data section belong to no tensor"},
        {"uncovered tail",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 32,
         "the data section has 32 bytes but the tensors cover only 16"},
        {"no tensors but data", "{}", 8, "cover only 0"},
        {"duplicate name",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 32]}}",
         32, "tensor 'a' appears twice"},
    };
    run_header_cases(t, cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Random corruptions of a valid file (byte flips, truncations, length edits): open must either
 * succeed with self-consistent entries or fail with a format error, never crash. */
MG_TEST(safetensors_survives_random_corruption) {
    float w[16];
    int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 16; i++) w[i] = (float)i * 0.5f;
    const mg_st_tensor ts[] = {{"layer.weight", MG_F32, 2, {4, 4}, w},
                               {"ids", MG_I32, 1, {6}, ids}};
    tmpdir d;
    if (!tmp_make(&d, "fuzz.safetensors")) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    MG_EXPECT_OK(mg_safetensors_write(d.path, ts, 2, "{\"format\":\"pt\"}"));
    size_t n = 0;
    unsigned char *orig = read_bytes(d.path, &n);
    unsigned char *buf = malloc(n);
    if (!orig || !buf || n < 16) {
        MG_EXPECT(0, "cannot read back the file");
        free(orig);
        free(buf);
        tmp_remove(&d);
        return;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull; /* seeded: the same corruptions every run */
    int opened = 0, rejected = 0;
    for (int iter = 0; iter < 600; iter++) {
        memcpy(buf, orig, n);
        size_t len = n;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int kind = (int)(rng >> 60) % 4;
        int flips = 1 + (int)((rng >> 40) & 7);
        for (int f = 0; f < flips; f++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(rng >> 33) % n;
            if (kind == 0)
                buf[pos] ^= (unsigned char)(1u << ((rng >> 20) & 7));
            else if (kind == 1)
                buf[pos] = "{}[]\",:0123456789-e. \"\\"[(rng >> 24) % 23];
            else if (kind == 2)
                len = pos;
            else
                buf[(rng >> 24) % 8] = (unsigned char)(rng >> 16);
        }
        write_bytes(d.path, buf, len);
        mg_safetensors st;
        mg_error_clear();
        mg_status s = mg_safetensors_open(&st, d.path);
        if (s == MG_OK) {
            opened++;
            size_t covered = 0;
            for (int i = 0; i < st.n; i++) {
                const char *p = st.entries[i].data, *base = st.map;
                MG_EXPECT(p >= base && p + st.entries[i].nbytes <= base + st.map_size,
                          "iter %d: entry outside the mapping", iter);
                covered += st.entries[i].nbytes;
            }
            MG_EXPECT(covered <= st.map_size, "iter %d: entries cover more than the file", iter);
            mg_safetensors_close(&st);
        } else {
            rejected++;
            MG_EXPECT(s == MG_ERR_FORMAT && mg_error_message()[0],
                      "iter %d: status %s, message '%s'", iter, mg_status_name(s),
                      mg_error_message());
            MG_EXPECT(st_is_empty(&st), "iter %d: struct not empty after failure", iter);
        }
    }
    MG_EXPECT(rejected > 300, "only %d of 600 corruptions rejected (%d opened)", rejected, opened);
    free(orig);
    free(buf);
    tmp_remove(&d);
}
