/* GPT-2 tokenizer: ids equal to Hugging Face `tokenizers` (tests/golden/tokenizer_gpt2.golden,
 * cross-checked there against Megatron's algorithm) for the demo corpus and tricky strings,
 * round trips, invalid UTF-8, bad vocabulary and merge files, threads and the word cache. */
#include "test.h"

#include "core/status.h"
#include "data/tokenizer_gpt2.h"
#include "data/tokenizer_bpe.h" /* to force the interpreter */
#include "golden_io.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VOCAB  "data/gpt2/encoder.json"
#define MERGES "data/gpt2/vocab.bpe"
#define CORPUS "data/moby-dick.txt"
#define GOLDEN MG_GOLDEN_DIR "/tokenizer_gpt2.golden"

/* ---------------------------------------------------------------- helpers */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_vec;

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* 1 when ids equal the golden record's uint16 values; reports the first difference. */
static int same_ids(mg_test_ctx *t, const char *what, const id_vec *v, const mg_golden_record *r) {
    const uint16_t *want = r->data;
    size_t n = (size_t)r->numel, i = 0;
    while (i < n && i < v->n && v->ids[i] == want[i]) i++;
    if (i == n && v->n == n) return 1;
    MG_EXPECT(0, "%s: %zu ids, want %zu; first difference at %zu: %d vs %d", what, v->n, n, i,
              i < v->n ? v->ids[i] : -1, i < n ? want[i] : -1);
    return 0;
}

/* Concatenates the raw bytes of ids; 1 when they spell text[0..len). */
static int ids_spell(const mg_tokenizer *tok, const id_vec *v, const char *text, size_t len) {
    size_t at = 0;
    for (size_t i = 0; i < v->n; i++) {
        size_t l;
        const char *b = mg_tokenizer_id_bytes(tok, v->ids[i], &l);
        if (!b || at + l > len || memcmp(text + at, b, l) != 0) return 0;
        at += l;
    }
    return at == len;
}

static int load(mg_test_ctx *t, mg_tokenizer **tok, mg_tokenizer_worker **w, mg_golden *g) {
    *tok = NULL;
    *w = NULL;
    if (g) *g = (mg_golden){0};
    MG_EXPECT_OK(mg_tokenizer_gpt2_load(tok, VOCAB, MERGES));
    if (*tok) MG_EXPECT_OK(mg_tokenizer_worker_create(*tok, w));
    if (g) MG_EXPECT_OK(mg_golden_load(g, GOLDEN));
    return *tok && *w && (!g || g->n > 0);
}

static void unload(mg_tokenizer *tok, mg_tokenizer_worker *w, mg_golden *g) {
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
    if (g) mg_golden_free(g);
}

/* ---------------------------------------------------------------- the real vocabulary */

MG_TEST(tokenizer_loads_gpt2_files) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    if (!load(t, &tok, &w, NULL)) {
        unload(tok, w, NULL);
        return;
    }
    MG_EXPECT(mg_tokenizer_vocab_size(tok) == 50257, "vocab %d", mg_tokenizer_vocab_size(tok));
    MG_EXPECT(mg_tokenizer_eod(tok) == 50256, "eod %d", mg_tokenizer_eod(tok));
    size_t l = 0;
    const char *b = mg_tokenizer_id_bytes(tok, 50256, &l);
    MG_EXPECT(b && l == 13 && !memcmp(b, "<|endoftext|>", 13), "bytes of 50256");
    b = mg_tokenizer_id_bytes(tok, 220, &l); /* "Ġ" is the space byte */
    MG_EXPECT(b && l == 1 && b[0] == ' ', "bytes of 220");
    b = mg_tokenizer_id_bytes(tok, 188, &l); /* "Ā" is byte 0 */
    MG_EXPECT(b && l == 1 && b[0] == 0, "bytes of 188");
    MG_EXPECT(!mg_tokenizer_id_bytes(tok, 50257, &l) && !mg_tokenizer_id_bytes(tok, -1, &l),
              "out-of-range ids have no bytes");
    unload(tok, w, NULL);
}

MG_TEST(tokenizer_matches_golden_strings) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    mg_golden g;
    if (!load(t, &tok, &w, &g)) {
        unload(tok, w, &g);
        return;
    }
    int strings = 0;
    for (int i = 0; i < g.n; i++) {
        const mg_golden_record *text = &g.records[i];
        if (strncmp(text->name, "str.", 4) != 0 || !strstr(text->name, ".text")) continue;
        char name[160];
        snprintf(name, sizeof name, "%.*s.ids", (int)(strlen(text->name) - 5), text->name);
        const mg_golden_record *want = mg_golden_find(&g, name);
        MG_EXPECT(want && want->dtype == MG_GOLDEN_U16 && text->dtype == MG_GOLDEN_U8,
                  "%s: record types", name);
        if (!want) continue;
        strings++;
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(w, text->data, (size_t)text->numel, &v.ids, &v.n, &v.cap));
        same_ids(t, text->name, &v, want);
        MG_EXPECT(ids_spell(tok, &v, text->data, (size_t)text->numel), "%s: bytes", text->name);
        char *dec = NULL;
        size_t len = 0;
        MG_EXPECT_OK(mg_tokenizer_decode(tok, v.ids, v.n, &dec, &len));
        MG_EXPECT(dec && len == (size_t)text->numel && !memcmp(dec, text->data, len) &&
                      dec[len] == '\0',
                  "%s: decode(encode(text)) != text", text->name);
        free(dec);
        free(v.ids);
    }
    MG_EXPECT(strings >= 30, "only %d golden strings", strings);
    unload(tok, w, &g);
}

MG_TEST(tokenizer_corpus_matches_golden_and_round_trips) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    mg_golden g;
    if (!load(t, &tok, &w, &g)) {
        unload(tok, w, &g);
        return;
    }
    size_t len = 0;
    char *text = read_all(CORPUS, &len);
    const mg_golden_record *want = mg_golden_find(&g, "corpus.ids");
    MG_EXPECT(text && want, "corpus or golden record missing");
    if (text && want) {
        /* decode of the reference ids is the text */
        int32_t *gold = malloc((size_t)want->numel * sizeof *gold);
        for (int64_t i = 0; i < want->numel; i++) gold[i] = ((const uint16_t *)want->data)[i];
        char *dec = NULL;
        size_t dlen = 0;
        MG_EXPECT_OK(mg_tokenizer_decode(tok, gold, (size_t)want->numel, &dec, &dlen));
        MG_EXPECT(dec && dlen == len && !memcmp(dec, text, len), "decode(golden ids) != corpus");
        free(dec);
        free(gold);
        /* encode twice with one worker: the second pass runs from a warm word cache */
        for (int pass = 0; pass < 2; pass++) {
            id_vec v = {0};
            MG_EXPECT_OK(mg_tokenizer_encode(w, text, len, &v.ids, &v.n, &v.cap));
            same_ids(t, pass ? "corpus (warm cache)" : "corpus", &v, want);
            MG_EXPECT(ids_spell(tok, &v, text, len), "corpus: ids do not spell the text");
            free(v.ids);
        }
    }
    free(text);
    unload(tok, w, &g);
}

/* A text with 120 000 distinct pre-tokens overflows the word cache (32 768 words) several times;
 * the ids must not depend on what the cache held. Appending to a non-empty array is checked too. */
MG_TEST(tokenizer_word_cache_does_not_change_ids) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w, *w2 = NULL;
    if (!load(t, &tok, &w, NULL)) {
        unload(tok, w, NULL);
        return;
    }
    MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &w2));
    size_t cap = 120000 * 12, len = 0;
    char *text = malloc(cap);
    for (int i = 0; i < 120000; i++) {
        static const char *stems[] = {" whale", " sea", "ahab", " 'll", "\n"};
        len += (size_t)snprintf(text + len, cap - len, "%s%d", stems[i % 5], (i * 7919) % 120000);
    }
    id_vec a = {0}, b = {0};
    MG_EXPECT_OK(mg_tokenizer_encode(w, text, len, &a.ids, &a.n, &a.cap));
    /* the second worker encodes the same text in two halves, after a first unrelated call */
    MG_EXPECT_OK(mg_tokenizer_encode(w2, "Call me Ishmael.", 16, &b.ids, &b.n, &b.cap));
    size_t before = b.n, half = len / 2;
    while (half < len && text[half] != '\n') half++; /* cut at a pre-token boundary */
    MG_EXPECT_OK(mg_tokenizer_encode(w2, text, half, &b.ids, &b.n, &b.cap));
    MG_EXPECT_OK(mg_tokenizer_encode(w2, text + half, len - half, &b.ids, &b.n, &b.cap));
    MG_EXPECT(before > 0 && b.n - before == a.n && !memcmp(a.ids, b.ids + before, a.n * 4),
              "ids differ between cache states (%zu vs %zu, before %zu)", a.n, b.n - before,
              before);
    MG_EXPECT(ids_spell(tok, &a, text, len), "ids do not spell the text");
    free(a.ids);
    free(b.ids);
    free(text);
    mg_tokenizer_worker_free(w2);
    unload(tok, w, NULL);
}

MG_TEST(tokenizer_invalid_utf8_round_trips_bytes) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    mg_golden g;
    if (!load(t, &tok, &w, &g)) {
        unload(tok, w, &g);
        return;
    }
    int cases = 0;
    for (int i = 0; i < g.n; i++) {
        const mg_golden_record *raw = &g.records[i];
        if (strncmp(raw->name, "bad.", 4) != 0 || !strstr(raw->name, ".bytes")) continue;
        char name[160];
        snprintf(name, sizeof name, "%.*s.replaced", (int)(strlen(raw->name) - 6), raw->name);
        const mg_golden_record *want = mg_golden_find(&g, name);
        if (!want) continue;
        cases++;
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(w, raw->data, (size_t)raw->numel, &v.ids, &v.n, &v.cap));
        MG_EXPECT(ids_spell(tok, &v, raw->data, (size_t)raw->numel), "%s: bytes lost", raw->name);
        char *dec = NULL;
        size_t len = 0;
        MG_EXPECT_OK(mg_tokenizer_decode(tok, v.ids, v.n, &dec, &len));
        MG_EXPECT(dec && len == (size_t)want->numel && !memcmp(dec, want->data, len),
                  "%s: decode differs from Python's errors='replace'", raw->name);
        free(dec);
        free(v.ids);
    }
    MG_EXPECT(cases >= 10, "only %d invalid strings", cases);
    /* every single byte value alone, and all 256 in a row */
    char all[256];
    for (int b = 0; b < 256; b++) {
        all[b] = (char)b;
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(w, all + b, 1, &v.ids, &v.n, &v.cap));
        MG_EXPECT(v.n == 1 && ids_spell(tok, &v, all + b, 1), "byte 0x%02x", b);
        free(v.ids);
    }
    id_vec v = {0};
    MG_EXPECT_OK(mg_tokenizer_encode(w, all, 256, &v.ids, &v.n, &v.cap));
    MG_EXPECT(ids_spell(tok, &v, all, 256), "bytes 0..255 do not round trip");
    free(v.ids);
    unload(tok, w, &g);
}

/* 1 when s[0..n) is valid UTF-8 (what decode must always produce). */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int need = c < 0x80                 ? 0
                   : c >= 0xc2 && c <= 0xdf ? 1
                   : c >= 0xe0 && c <= 0xef ? 2
                   : c >= 0xf0 && c <= 0xf4 ? 3
                                            : -1;
        if (need < 0) return 0;
        unsigned cp = need ? c & (0x3fu >> need) : c;
        for (int k = 1; k <= need; k++) {
            if (i + (size_t)k >= n || (s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned min_cp[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[need] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += (size_t)need + 1;
    }
    return 1;
}

/* Seeded random bytes biased towards what stresses the pattern and UTF-8 handling: letters,
 * digits, spaces, quotes, lead and continuation bytes. */
static void random_text(unsigned char *text, size_t n) {
    static const unsigned char pool[] = {'a',  'Z',  '0',  ' ',  ' ',  '\n', '\t', '\'', 's',
                                         '.',  0x80, 0xbf, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0,
                                         0x9f, 0x90, 0xb3, 0xed, 0xa0, 0xff, 0x00};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        text[i] = (x >> 40) % 4 ? pool[(x >> 8) % sizeof pool] : (unsigned char)(x >> 16);
    }
}

/* Random bytes: the ids spell them and decode to valid UTF-8. */
MG_TEST(tokenizer_random_bytes_round_trip) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    if (!load(t, &tok, &w, NULL)) {
        unload(tok, w, NULL);
        return;
    }
    enum { LEN = 1 << 16 };
    unsigned char *text = malloc(LEN);
    random_text(text, LEN);
    id_vec v = {0};
    MG_EXPECT_OK(mg_tokenizer_encode(w, (const char *)text, LEN, &v.ids, &v.n, &v.cap));
    MG_EXPECT(ids_spell(tok, &v, (const char *)text, LEN), "random bytes do not round trip");
    char *dec = NULL;
    size_t len = 0;
    MG_EXPECT_OK(mg_tokenizer_decode(tok, v.ids, v.n, &dec, &len));
    MG_EXPECT(dec && valid_utf8((const unsigned char *)dec, len) && len >= LEN / 2,
              "decode is not valid UTF-8 (%zu bytes)", len);
    free(dec);
    free(v.ids);
    free(text);
    unload(tok, w, NULL);
}

MG_TEST(tokenizer_decode_rejects_ids_outside_vocab) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    if (!load(t, &tok, &w, NULL)) {
        unload(tok, w, NULL);
        return;
    }
    int32_t bad[][2] = {{464, 50257}, {-1, 464}};
    for (int i = 0; i < 2; i++) {
        char *text = (char *)1;
        size_t len = 1;
        mg_status s = mg_tokenizer_decode(tok, bad[i], 2, &text, &len);
        MG_EXPECT(s == MG_ERR_FORMAT && strstr(mg_error_message(), "outside the vocabulary") &&
                      !text && len == 0,
                  "case %d: %s", i, mg_error_message());
    }
    char *text = NULL;
    size_t len = 1;
    MG_EXPECT_OK(mg_tokenizer_decode(tok, NULL, 0, &text, &len));
    MG_EXPECT(text && len == 0 && text[0] == '\0', "empty decode");
    free(text);
    unload(tok, w, NULL);
}

/* Where PCRE2 has no JIT the pattern is interpreted (through a widening window of the text): the
 * ids must still equal the golden ones. The tokenizer is immutable by contract; this test alone
 * flips its JIT flag, before creating a worker. */
MG_TEST(tokenizer_interpreter_matches_golden) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w, *wi = NULL;
    mg_golden g;
    if (!load(t, &tok, &w, &g)) {
        unload(tok, w, &g);
        return;
    }
    enum { LEN = 1 << 16 };
    unsigned char *bytes = malloc(LEN);
    random_text(bytes, LEN);
    id_vec r1 = {0}, r2 = {0};
    MG_EXPECT_OK(mg_tokenizer_encode(w, (const char *)bytes, LEN, &r1.ids, &r1.n, &r1.cap));
    MG_EXPECT(((mg_bpe *)tok)->jit, "PCRE2 JIT is not available on this machine (encoding is "
                                    "slower)");
    ((mg_bpe *)tok)->jit = 0;
    MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &wi));
    size_t len = 0;
    char *text = read_all(CORPUS, &len);
    const mg_golden_record *want = mg_golden_find(&g, "corpus.ids");
    int strings = 0;
    if (wi && text && want) {
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(wi, text, len, &v.ids, &v.n, &v.cap));
        same_ids(t, "corpus (interpreter)", &v, want);
        for (int i = 0; i < g.n; i++) {
            const mg_golden_record *r = &g.records[i];
            char name[160];
            snprintf(name, sizeof name, "%.*s.ids", (int)(strlen(r->name) - 5), r->name);
            if (strncmp(r->name, "str.", 4) != 0 || !strstr(r->name, ".text") ||
                !(want = mg_golden_find(&g, name)))
                continue;
            v.n = 0;
            MG_EXPECT_OK(mg_tokenizer_encode(wi, r->data, (size_t)r->numel, &v.ids, &v.n, &v.cap));
            strings += same_ids(t, r->name, &v, want);
        }
        free(v.ids);
    }
    MG_EXPECT(strings >= 30, "%d strings matched", strings);
    if (wi)
        MG_EXPECT_OK(mg_tokenizer_encode(wi, (const char *)bytes, LEN, &r2.ids, &r2.n, &r2.cap));
    MG_EXPECT(r1.n == r2.n && r1.n && !memcmp(r1.ids, r2.ids, r1.n * sizeof *r1.ids),
              "random bytes: JIT and interpreter differ (%zu vs %zu ids)", r1.n, r2.n);
    free(r1.ids);
    free(r2.ids);
    free(bytes);
    free(text);
    mg_tokenizer_worker_free(wi);
    unload(tok, w, &g);
}

/* ---------------------------------------------------------------- threads */

typedef struct {
    const mg_tokenizer *tok;
    const char *text;
    size_t len;
    id_vec out;
    mg_status st;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    mg_tokenizer_worker *w = NULL;
    j->st = mg_tokenizer_worker_create(j->tok, &w);
    if (j->st == MG_OK)
        j->st = mg_tokenizer_encode(w, j->text, j->len, &j->out.ids, &j->out.n, &j->out.cap);
    mg_tokenizer_worker_free(w);
    return NULL;
}

MG_TEST(tokenizer_two_threads_share_one_tokenizer) {
    mg_tokenizer *tok;
    mg_tokenizer_worker *w;
    mg_golden g;
    if (!load(t, &tok, &w, &g)) {
        unload(tok, w, &g);
        return;
    }
    size_t len = 0;
    char *text = read_all(CORPUS, &len);
    const mg_golden_record *want = mg_golden_find(&g, "corpus.ids");
    thread_job jobs[2] = {{tok, text, len, {0}, MG_OK}, {tok, text, len, {0}, MG_OK}};
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2 && text; i++)
        started += pthread_create(&th[i], NULL, encode_thread, &jobs[i]) == 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    MG_EXPECT(started == 2 && want, "threads started %d", started);
    for (int i = 0; i < started && want; i++) {
        MG_EXPECT(jobs[i].st == MG_OK, "thread %d: %s", i, mg_status_name(jobs[i].st));
        same_ids(t, i ? "thread 1" : "thread 0", &jobs[i].out, want);
        free(jobs[i].out.ids);
    }
    free(text);
    unload(tok, w, &g);
}

/* ---------------------------------------------------------------- bad files */

typedef struct {
    char dir[64], vocab[128], merges[128];
} tok_files;

/* A small valid vocabulary: the 256 one-byte tokens (ids 0..255, in byte order), "he" (256), then
 * extra entries, then "<|endoftext|>". `swap` replaces the token of byte 'Q' when not NULL. */
static void write_files(tok_files *f, const char *swap, const char *extra, int eod,
                        const char *merges) {
    FILE *v = fopen(f->vocab, "wb");
    fputc('{', v);
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        int cp = printable ? b : next++;
        if (b == 'Q' && swap)
            fprintf(v, "\"%s\": %d, ", swap, b);
        else if (cp == '"' || cp == '\\')
            fprintf(v, "\"\\%c\": %d, ", cp, b);
        else if (cp < 0x80)
            fprintf(v, "\"%c\": %d, ", cp, b);
        else
            fprintf(v, "\"%c%c\": %d, ", 0xc0 | cp >> 6, 0x80 | (cp & 0x3f), b);
    }
    fprintf(v, "\"he\": 256%s%s}", extra, eod ? ", \"<|endoftext|>\": 257" : "");
    fclose(v);
    FILE *m = fopen(f->merges, "wb");
    fputs(merges, m);
    fclose(m);
}

MG_TEST(tokenizer_small_vocab_merges) {
    tok_files f;
    snprintf(f.dir, sizeof f.dir, "/tmp/mg_tok_XXXXXX");
    if (!mkdtemp(f.dir)) {
        MG_EXPECT(0, "mkdtemp %s failed", f.dir);
        return;
    }
    snprintf(f.vocab, sizeof f.vocab, "%s/encoder.json", f.dir);
    snprintf(f.merges, sizeof f.merges, "%s/vocab.bpe", f.dir);
    write_files(&f, NULL, ", \"hehe\": 258", 1, "#version: 0.2\r\nh e\r\nhe he\r\n");
    mg_tokenizer *tok = NULL;
    mg_tokenizer_worker *w = NULL;
    MG_EXPECT_OK(mg_tokenizer_gpt2_load(&tok, f.vocab, f.merges));
    if (tok) MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &w));
    if (w) {
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(w, "hehehe heh", 10, &v.ids, &v.n, &v.cap));
        int32_t want[] = {258, 256, 32, 256, 'h'}; /* " " is byte 0x20 = id 32 */
        MG_EXPECT(v.n == 5 && !memcmp(v.ids, want, sizeof want), "ids (%zu)", v.n);
        MG_EXPECT(mg_tokenizer_vocab_size(tok) == 259 && mg_tokenizer_eod(tok) == 257, "sizes");
        free(v.ids);
    }
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
    unlink(f.vocab);
    unlink(f.merges);
    rmdir(f.dir);
}

MG_TEST(tokenizer_bad_files_fail_with_one_line) {
    tok_files f;
    snprintf(f.dir, sizeof f.dir, "/tmp/mg_tok_XXXXXX");
    if (!mkdtemp(f.dir)) {
        MG_EXPECT(0, "mkdtemp %s failed", f.dir);
        return;
    }
    snprintf(f.vocab, sizeof f.vocab, "%s/encoder.json", f.dir);
    snprintf(f.merges, sizeof f.merges, "%s/vocab.bpe", f.dir);
    const char *ok = "#version: 0.2\nh e\n";
    struct {
        const char *raw_vocab, *swap, *extra;
        int eod;
        const char *merges;
        mg_status code;
        const char *file, *msg;
    } cases[] = {
        {"{\"a\": 0,", NULL, "", 1, ok, MG_ERR_FORMAT, "encoder.json", "not valid JSON (line 1"},
        {"[0, 1]", NULL, "", 1, ok, MG_ERR_FORMAT, "encoder.json", "not a JSON object"},
        {"{}", NULL, "", 1, ok, MG_ERR_FORMAT, "encoder.json", "vocabulary is empty"},
        {NULL, NULL, ", \"x\": \"258\"", 1, ok, MG_ERR_FORMAT, "encoder.json", "not a number"},
        {NULL, NULL, ", \"x\": 2.5", 1, ok, MG_ERR_FORMAT, "encoder.json",
         "entry 257 ('x'): id 2.5 is not"},
        {NULL, NULL, ", \"x\": 300", 1, ok, MG_ERR_FORMAT, "encoder.json", "id 300 is not"},
        {NULL, NULL, ", \"x\": 7", 1, ok, MG_ERR_FORMAT, "encoder.json", "already belongs"},
        {NULL, NULL, ", \"he\": 258", 1, ok, MG_ERR_FORMAT, "encoder.json", "appears twice"},
        {NULL, NULL, ", \"\": 258", 1, ok, MG_ERR_FORMAT, "encoder.json", "token is empty"},
        {NULL, NULL, ", \"\xe2\x82\xac\": 258", 1, ok, MG_ERR_FORMAT, "id 258", "alphabet"},
        {NULL, "QQ", "", 1, ok, MG_ERR_FORMAT, "encoder.json", "single byte 0x51"},
        {NULL, NULL, "", 0, ok, MG_ERR_FORMAT, "encoder.json", "no '<|endoftext|>'"},
        {NULL, NULL, "", 1, "#version: 0.2\nhe\n", MG_ERR_FORMAT, "vocab.bpe:2", "no space"},
        {NULL, NULL, "", 1, "h  e\n", MG_ERR_FORMAT, "vocab.bpe:1", "one space"},
        {NULL, NULL, "", 1, "h e \n", MG_ERR_FORMAT, "vocab.bpe:1", "one space"},
        {NULL, NULL, "", 1, "h e\nh x\n", MG_ERR_FORMAT, "vocab.bpe:2", "result is not"},
        {NULL, NULL, "", 1, "#version\nh e\nzz e\n", MG_ERR_FORMAT, "bpe:3", "left part"},
        {NULL, NULL, "", 1, "h e\nh ee\n", MG_ERR_FORMAT, "vocab.bpe:2", "right part"},
        {NULL, NULL, "", 1, "#version: 0.2\nh e\nh e\n", MG_ERR_FORMAT, "bpe:3", "repeats line 2"},
        {NULL, NULL, "", 1, "h e\n\nh e\n", MG_ERR_FORMAT, "vocab.bpe:2", "empty line"},
        {"", NULL, "", 1, ok, MG_ERR_IO, "encoder.json", "cannot open"},
        {NULL, NULL, "", 1, NULL, MG_ERR_IO, "vocab.bpe", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_files(&f, cases[i].swap, cases[i].extra, cases[i].eod,
                    cases[i].merges ? cases[i].merges : "");
        if (cases[i].raw_vocab) {
            FILE *v = fopen(f.vocab, "wb");
            fputs(cases[i].raw_vocab, v);
            fclose(v);
            if (!cases[i].raw_vocab[0]) unlink(f.vocab);
        }
        if (!cases[i].merges) unlink(f.merges);
        mg_tokenizer *tok = (mg_tokenizer *)&f;
        mg_status s = mg_tokenizer_gpt2_load(&tok, f.vocab, f.merges);
        const char *msg = mg_error_message();
        MG_EXPECT(s == cases[i].code && !tok && strstr(msg, cases[i].file) &&
                      strstr(msg, cases[i].msg) && !strchr(msg, '\n'),
                  "case %zu: status %s, message '%s' (want '%s' ... '%s')", i, mg_status_name(s),
                  msg, cases[i].file, cases[i].msg);
        mg_tokenizer_free(tok == (mg_tokenizer *)&f ? NULL : tok);
        unlink(f.vocab);
        unlink(f.merges);
    }
    rmdir(f.dir);
}
