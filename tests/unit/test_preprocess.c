/* JSONL reader (Python json.loads semantics) and `megatron preprocess`'s pipeline: extraction
 * cases and every rejection, preprocess -> read -> detokenize gives the documents back, the
 * output does not depend on the worker count, invalid lines are skipped or stop --strict runs. */
#include "test.h"

#include "core/status.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/preprocess.h"
#include "data/tokenizer_gpt2.h"
#include "indexed_test_util.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_text[] = {"text"};

/* Extracts `line` with key "text"; returns the error and copies string `idx` into out. */
static mg_jsonl_error ex(const char *line, size_t idx, char *out, size_t cap, size_t *n_out) {
    mg_jsonl_doc doc;
    memset(&doc, 0, sizeof doc);
    mg_jsonl_error e = mg_jsonl_extract(&doc, line, strlen(line), k_text, 1);
    if (out) out[0] = 0;
    if (e == MG_JSONL_OK && idx < doc.key_count[0] && out) {
        size_t s = doc.key_first[0] + idx, n = doc.str_len[s] < cap ? doc.str_len[s] : cap - 1;
        memcpy(out, doc.text + doc.str_off[s], n);
        out[n] = 0;
        if (n_out) *n_out = doc.str_len[s];
    }
    if (e == MG_JSONL_OK && n_out && !out) *n_out = doc.key_count[0];
    mg_jsonl_doc_free(&doc);
    return e;
}

MG_TEST(indexed_jsonl_lines_split_like_python) {
    const char buf[] = "a\nbb\r\nc\rd\n\nlast";
    const char *want[] = {"a", "bb", "c", "d", "", "last"};
    size_t pos = 0, len, i = 0;
    for (const char *l; (l = mg_jsonl_next_line(buf, sizeof buf - 1, &pos, &len)); i++) {
        MG_EXPECT(i < 6 && len == strlen(want[i]) && !memcmp(l, want[i], len), "line %zu", i);
    }
    MG_EXPECT(i == 6, "%zu lines, expected 6", i);
    pos = 0, i = 0;
    while (mg_jsonl_next_line("x\n", 2, &pos, &len)) i++;
    MG_EXPECT(i == 1, "a final newline makes no extra line (%zu)", i);
}

MG_TEST(indexed_jsonl_extracts_as_json_loads) {
    char s[256];
    size_t n = 0;
    MG_EXPECT(ex("{\"text\": \"hi\"}", 0, s, sizeof s, NULL) == MG_JSONL_OK && !strcmp(s, "hi"),
              "plain: %s", s);
    MG_EXPECT(ex("{\"text\":\"\\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}", 0, s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "\" \\ / \b\f\n\r\t"),
              "escapes: %s", s);
    MG_EXPECT(ex("{\"text\":\"\\u00e9\\u00E9\\ud83d\\ude00\"}", 0, s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "\xc3\xa9\xc3\xa9\xf0\x9f\x98\x80"),
              "\\u escapes and a surrogate pair: %s", s);
    MG_EXPECT(ex("{\"text\":\"a\\u0000b\"}", 0, s, sizeof s, &n) == 0 && n == 3 && s[1] == 0,
              "\\u0000 kept (length %zu)", n);
    MG_EXPECT(ex("{\"text\":\"first\",\"text\":\"last\"}", 0, s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "last"),
              "duplicate keys: the last wins (%s)", s);
    MG_EXPECT(ex("{\"te\\u0078t\":\"escaped key\"}", 0, s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "escaped key"),
              "escaped key: %s", s);
    MG_EXPECT(ex(" {\"n\":NaN,\"i\":-Infinity,\"x\":[1,-0.5e+3,{\"y\":null}],\"text\":\"ok\"} ", 0,
                 s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "ok"),
              "NaN, Infinity, nesting: %s", s);
    MG_EXPECT(ex("{\"other\":\"\\ud800\",\"text\":\"x\"}", 0, s, sizeof s, NULL) == 0,
              "an unpaired surrogate elsewhere is fine (Python decodes it)");
    MG_EXPECT(ex("{\"text\":[\"a\", \"\", \"b\"]}", 2, s, sizeof s, NULL) == 0 && !strcmp(s, "b"),
              "sentences: %s", s);
    MG_EXPECT(ex("{\"text\":[]}", 0, NULL, 0, &n) == 0 && n == 0, "empty array: %zu strings", n);
    MG_EXPECT(ex("{\"text\":\"caf\xc3\xa9 \xf0\x9f\x90\x8b\"}", 0, s, sizeof s, NULL) == 0 &&
                  !strcmp(s, "caf\xc3\xa9 \xf0\x9f\x90\x8b"),
              "raw UTF-8: %s", s);
}

MG_TEST(indexed_jsonl_rejects_invalid_lines) {
    static const struct {
        const char *line;
        mg_jsonl_error want;
    } cases[] = {
        {"", MG_JSONL_EMPTY},
        {" \t ", MG_JSONL_EMPTY},
        {"{", MG_JSONL_SYNTAX},
        {"{\"text\": \"a\"", MG_JSONL_SYNTAX},
        {"{\"text\": \"a\"} x", MG_JSONL_SYNTAX},
        {"{\"text\": \"a\",}", MG_JSONL_SYNTAX},
        {"{'text': 'a'}", MG_JSONL_SYNTAX},
        {"{\"text\": \"a\tb\"}", MG_JSONL_SYNTAX},
        {"{\"text\": \"\\x\"}", MG_JSONL_SYNTAX},
        {"{\"text\": \"\\u12\"}", MG_JSONL_SYNTAX},
        {"{\"a\": 01, \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"{\"a\": 1., \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"{\"a\": -, \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"{\"a\": 1e, \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"{\"a\": -NaN, \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"{\"a\": tru, \"text\": \"x\"}", MG_JSONL_SYNTAX},
        {"\xef\xbb\xbf{\"text\": \"BOM\"}", MG_JSONL_SYNTAX}, /* Python: "Unexpected UTF-8 BOM" */
        {"{\"text\": \"\xff\"}", MG_JSONL_UTF8},
        {"{\"text\": \"\xc0\xaf\"}", MG_JSONL_UTF8},
        {"{\"text\": \"\xed\xa0\x80\"}", MG_JSONL_UTF8},
        {"{\"text\": \"\xe2\x82\"}", MG_JSONL_UTF8},
        {"[\"text\"]", MG_JSONL_NOT_OBJECT},
        {"\"text\"", MG_JSONL_NOT_OBJECT},
        {"42", MG_JSONL_NOT_OBJECT},
        {"{\"title\": \"x\"}", MG_JSONL_KEY_MISSING},
        {"{\"a\": {\"text\": \"nested does not count\"}}", MG_JSONL_KEY_MISSING},
        {"{\"text\": 5}", MG_JSONL_NOT_STRING},
        {"{\"text\": null}", MG_JSONL_NOT_STRING},
        {"{\"text\": {\"a\": \"b\"}}", MG_JSONL_NOT_STRING},
        {"{\"text\": [\"a\", 1]}", MG_JSONL_NOT_STRING},
        {"{\"text\": [[\"a\"]]}", MG_JSONL_NOT_STRING},
        {"{\"text\": \"\\ud800\"}", MG_JSONL_SURROGATE},
        {"{\"text\": \"\\udc00\\ud800\"}", MG_JSONL_SURROGATE},
        {"{\"text\": [\"ok\", \"\\ud83d\"]}", MG_JSONL_SURROGATE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mg_jsonl_error e = ex(cases[i].line, 0, NULL, 0, NULL);
        MG_EXPECT(e == cases[i].want, "case %zu '%s': got '%s', expected '%s'", i, cases[i].line,
                  mg_jsonl_error_text(e), mg_jsonl_error_text(cases[i].want));
    }
    /* nesting: 512 levels parse, 513 do not (and nothing recurses without bound) */
    char deep[4096];
    for (int depth = 511; depth <= 2000; depth += 1489) {
        int n = snprintf(deep, sizeof deep, "{\"text\":\"x\",\"a\":");
        for (int k = 0; k < depth; k++) deep[n++] = '[';
        for (int k = 0; k < depth; k++) deep[n++] = ']';
        deep[n++] = '}', deep[n] = 0;
        mg_jsonl_error e = ex(deep, 0, NULL, 0, NULL);
        MG_EXPECT(e == (depth == 511 ? MG_JSONL_OK : MG_JSONL_DEPTH), "depth %d: %s", depth,
                  mg_jsonl_error_text(e));
    }
    mg_jsonl_doc doc;
    memset(&doc, 0, sizeof doc);
    const char *bad = "{\"text\": \"ok\", x}";
    MG_EXPECT(mg_jsonl_extract(&doc, bad, strlen(bad), k_text, 1) == MG_JSONL_SYNTAX &&
                  doc.err_col == 15,
              "error column %zu, expected 15", doc.err_col);
    mg_jsonl_doc_free(&doc);
}

/* ---- preprocess end to end (needs the tokenizer files in data/gpt2) */

static const char *k_docs[] = {
    "Call me Ishmael.",
    "",
    "Unicode: na\xc3\xafve caf\xc3\xa9, \xe9\xaf\xa8, \xf0\x9f\x90\x8b, e\xcc\x81.",
    "  leading spaces\n\nand\ttabs  ",
    "quotes \" and backslashes \\ survive",
};

static void write_jsonl(const char *path, int copies, const char *junk_every) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    for (int c = 0; c < copies; c++)
        for (size_t i = 0; i < sizeof k_docs / sizeof *k_docs; i++) {
            if (junk_every && i == 2) fprintf(f, "%s\n", junk_every);
            fputs("{\"id\": 1, \"text\": \"", f);
            for (const char *p = k_docs[i]; *p; p++) {
                if (*p == '"' || *p == '\\')
                    fputc('\\', f), fputc(*p, f);
                else if (*p == '\n')
                    fputs("\\n", f);
                else if (*p == '\t')
                    fputs("\\t", f);
                else
                    fputc(*p, f);
            }
            fprintf(f, " %d\"}\n", c);
        }
    fclose(f);
}

static mg_preprocess_config config(const char *in, const char *out, int workers) {
    mg_preprocess_config c;
    memset(&c, 0, sizeof c);
    c.input = in, c.output_prefix = out, c.json_keys[0] = "text", c.num_keys = 1;
    c.tokenizer = (mg_tokenizer_spec){.type = "GPT2BPETokenizer",
                                      .vocab_file = "data/gpt2/encoder.json",
                                      .merge_file = "data/gpt2/vocab.bpe"};
    c.append_eod = true, c.workers = workers, c.log_interval = 1000;
    return c;
}

MG_TEST(indexed_preprocess_detokenizes_to_the_input) {
    char dir[64], in[128], out[128];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(in, sizeof in, "%s/in.jsonl", dir), snprintf(out, sizeof out, "%s/out", dir);
    write_jsonl(in, 3, NULL);
    mg_preprocess_config c = config(in, out, 2);
    mg_preprocess_stats s;
    MG_EXPECT_OK(mg_preprocess_run(&c, &s, NULL));
    MG_EXPECT(s.documents == 15 && s.invalid_lines == 0, "%lld documents, %lld invalid",
              (long long)s.documents, (long long)s.invalid_lines);
    mg_tokenizer *tok = NULL;
    mg_indexed_dataset d;
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s_text_document", out);
    MG_EXPECT_OK(mg_tokenizer_load(&tok, &c.tokenizer));
    MG_EXPECT_OK(mg_indexed_dataset_open(&d, prefix));
    if (tok && d.num_documents == 15) {
        for (int64_t doc = 0; doc < 15; doc++) {
            char want[256], got[256];
            snprintf(want, sizeof want, "%s %lld", k_docs[doc % 5], (long long)(doc / 5));
            int64_t s0 = d.document_indices[doc], s1 = d.document_indices[doc + 1];
            MG_EXPECT(s1 - s0 == 1, "document %lld has %lld sequences", (long long)doc,
                      (long long)(s1 - s0));
            int32_t ids[256];
            int32_t n = d.sequence_lengths[s0];
            if (s1 - s0 != 1 || n > 256) continue;
            MG_EXPECT_OK(mg_indexed_dataset_read(&d, s0, 0, n, ids));
            MG_EXPECT(ids[n - 1] == mg_tokenizer_eod(tok), "document %lld lacks EOD",
                      (long long)doc);
            size_t len = 0;
            for (int32_t i = 0; i + 1 < n; i++) {
                size_t bl = 0;
                const char *b = mg_tokenizer_id_bytes(tok, ids[i], &bl);
                if (b && len + bl < sizeof got) memcpy(got + len, b, bl), len += bl;
            }
            got[len] = 0;
            MG_EXPECT(!strcmp(got, want), "document %lld: '%s' != '%s'", (long long)doc, got, want);
        }
    }
    mg_indexed_dataset_close(&d);
    mg_tokenizer_free(tok);
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_preprocess_output_independent_of_workers) {
    char dir[64], in[128], a[128], b[128], pa[160], pb[160];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    write_jsonl(in, 400, NULL); /* 2000 lines: several batches in flight */
    snprintf(a, sizeof a, "%s/one", dir), snprintf(b, sizeof b, "%s/four", dir);
    mg_preprocess_config c1 = config(in, a, 1), c4 = config(in, b, 4);
    mg_preprocess_stats s;
    MG_EXPECT_OK(mg_preprocess_run(&c1, &s, NULL));
    MG_EXPECT_OK(mg_preprocess_run(&c4, &s, NULL));
    MG_EXPECT(s.documents == 2000, "%lld documents", (long long)s.documents);
    for (int e = 0; e < 2; e++) {
        const char *ext = e ? "idx" : "bin";
        snprintf(pa, sizeof pa, "%s_text_document.%s", a, ext);
        snprintf(pb, sizeof pb, "%s_text_document.%s", b, ext);
        MG_EXPECT(mg_idx_test_same_files(pa, pb), "--workers 1 and 4 differ in .%s", ext);
    }
    mg_idx_test_rmdir(dir);
}

MG_TEST(indexed_preprocess_skips_invalid_lines_or_stops) {
    char dir[64], clean[128], dirty[128], a[128], b[128], pa[160], pb[160];
    if (!mg_idx_test_tmpdir(t, dir)) return;
    snprintf(clean, sizeof clean, "%s/clean.jsonl", dir);
    snprintf(dirty, sizeof dirty, "%s/dirty.jsonl", dir);
    write_jsonl(clean, 2, NULL);
    write_jsonl(dirty, 2, "{\"title\": \"no text\"}\nnot json"); /* 2 bad lines per copy */
    snprintf(a, sizeof a, "%s/clean", dir), snprintf(b, sizeof b, "%s/dirty", dir);
    mg_preprocess_config c = config(clean, a, 2), d = config(dirty, b, 2);
    mg_preprocess_stats s;
    MG_EXPECT_OK(mg_preprocess_run(&c, &s, NULL));
    MG_EXPECT_OK(mg_preprocess_run(&d, &s, NULL));
    MG_EXPECT(s.documents == 10 && s.invalid_lines == 4 && s.first_invalid_line == 3 &&
                  s.lines == 14,
              "%lld docs, %lld invalid, first at %lld", (long long)s.documents,
              (long long)s.invalid_lines, (long long)s.first_invalid_line);
    MG_EXPECT(strstr(s.first_invalid, "key 'text' missing"), "reason: %s", s.first_invalid);
    for (int e = 0; e < 2; e++) {
        snprintf(pa, sizeof pa, "%s_text_document.%s", a, e ? "idx" : "bin");
        snprintf(pb, sizeof pb, "%s_text_document.%s", b, e ? "idx" : "bin");
        MG_EXPECT(mg_idx_test_same_files(pa, pb), "skipping changed the output (.%s)",
                  e ? "idx" : "bin");
    }
    /* --strict: the first bad line is an error naming file:line; nothing is written */
    int before = mg_idx_test_count_files(dir);
    snprintf(b, sizeof b, "%s/strict", dir);
    d = config(dirty, b, 3);
    d.strict = true;
    MG_EXPECT_ERROR(mg_preprocess_run(&d, &s, NULL), MG_ERR_FORMAT,
                    "dirty.jsonl:3: key 'text' missing (--strict stops");
    MG_EXPECT(mg_idx_test_count_files(dir) == before, "a failed run left files behind");
    /* a missing input: an I/O error naming it, nothing written */
    d = config("no/such/input.jsonl", b, 1);
    MG_EXPECT_ERROR(mg_preprocess_run(&d, &s, NULL), MG_ERR_IO,
                    "no/such/input.jsonl: cannot open: No such file");
    MG_EXPECT(mg_idx_test_count_files(dir) == before, "a failed run left files behind");
    mg_idx_test_rmdir(dir);
}
