/* HuggingFaceTokenizer and the SentencePiece types: ids equal to Hugging Face `tokenizers` and
 * `sentencepiece` on tricky strings and a seeded varied sample (tests/golden/tokenizers/, written
 * by tools/reference/make_tokenizer_models.py with the tokenizers it trains), vocab size, EOD and
 * BOS as Megatron reports them, the JIT and the interpreter, two threads, decode round trips;
 * hand-built tokenizer.json files for what the goldens do not isolate (post-processor suffix,
 * literal Split, ignore_merges, added tokens matched before or after NFC, leftmost-longest
 * matching, special_tokens_map.json); every refusal of a bad or unsupported file. */
#include "test.h"

#include "core/status.h"
#include "data/tokenizer.h"
#include "data/tokenizer_bpe.h" /* to force the interpreter */
#include "golden_io.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOKDIR MG_GOLDEN_DIR "/tokenizers"
#define GOLDEN TOKDIR "/ids.golden"

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_vec;

static mg_status load_kind(const char *kind, const char *type, mg_tokenizer **tok) {
    char model[256];
    if (!strcmp(kind, "spm_bpe"))
        snprintf(model, sizeof model, "%s/spm_bpe.model", TOKDIR);
    else
        snprintf(model, sizeof model, "%s/%s", TOKDIR, kind);
    mg_tokenizer_spec spec = {.type = type, .model = model};
    return mg_tokenizer_load(tok, &spec);
}

/* Encodes every golden string with w and compares with <kind>.str.NN.ids; returns the number of
 * strings that matched. decode_prefix != NULL: decode(ids) must be decode_prefix + text too. */
static int check_strings(mg_test_ctx *t, const mg_golden *g, const char *kind,
                         mg_tokenizer_worker *w, const mg_tokenizer *tok,
                         const char *decode_prefix) {
    int matched = 0;
    for (int i = 0; i < g->n; i++) {
        const mg_golden_record *text = &g->records[i];
        if (strncmp(text->name, "str.", 4) != 0) continue;
        char name[200];
        snprintf(name, sizeof name, "%s.%.*s.ids", kind, (int)(strlen(text->name) - 5), text->name);
        const mg_golden_record *want = mg_golden_find(g, name);
        MG_EXPECT(want && want->dtype == MG_GOLDEN_U16, "%s missing", name);
        if (!want) continue;
        id_vec v = {0};
        MG_EXPECT_OK(mg_tokenizer_encode(w, text->data, (size_t)text->numel, &v.ids, &v.n, &v.cap));
        const uint16_t *ids = want->data;
        size_t k = 0;
        while (k < v.n && k < (size_t)want->numel && v.ids[k] == ids[k]) k++;
        if (k == v.n && v.n == (size_t)want->numel)
            matched++;
        else
            MG_EXPECT(0, "%s: %zu ids, want %lld; first difference at %zu: %d vs %d", name, v.n,
                      (long long)want->numel, k, k < v.n ? v.ids[k] : -1,
                      k < (size_t)want->numel ? ids[k] : -1);
        if (decode_prefix) {
            char *dec = NULL;
            size_t len = 0, pl = strlen(decode_prefix);
            MG_EXPECT_OK(mg_tokenizer_decode(tok, v.ids, v.n, &dec, &len));
            MG_EXPECT(dec && len == pl + (size_t)text->numel && !memcmp(dec, decode_prefix, pl) &&
                          !memcmp(dec + pl, text->data, (size_t)text->numel),
                      "%s: decode(encode(text)) != text", text->name);
            free(dec);
        }
        free(v.ids);
    }
    return matched;
}

/* The whole golden check of one tokenizer: Megatron's vocab_size, eod and bos, then the ids. */
static void check_kind(mg_test_ctx *t, const char *kind, const char *type, int force_interpreter,
                       const char *decode_prefix) {
    mg_golden g = {0};
    mg_tokenizer *tok = NULL;
    mg_tokenizer_worker *w = NULL;
    MG_EXPECT_OK(mg_golden_load(&g, GOLDEN));
    MG_EXPECT_OK(load_kind(kind, type, &tok));
    if (tok && force_interpreter) {
        MG_EXPECT(((mg_bpe *)tok)->jit, "%s: PCRE2 JIT is not available here", kind);
        ((mg_bpe *)tok)->jit = 0;
    }
    if (tok) MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &w));
    char name[64];
    snprintf(name, sizeof name, "%s.meta", kind);
    const mg_golden_record *meta = mg_golden_find(&g, name);
    MG_EXPECT(meta && meta->numel == 4, "%s missing", name);
    if (tok && w && meta) {
        const int32_t *m = meta->data; /* vocab_size, eod, bos, pad */
        MG_EXPECT(mg_tokenizer_vocab_size(tok) == m[0] && mg_tokenizer_eod(tok) == m[1] &&
                      mg_tokenizer_bos(tok) == m[2],
                  "%s: vocab %d eod %d bos %d, want %d %d %d", kind, mg_tokenizer_vocab_size(tok),
                  mg_tokenizer_eod(tok), mg_tokenizer_bos(tok), m[0], m[1], m[2]);
        int matched = check_strings(t, &g, kind, w, tok, decode_prefix);
        MG_EXPECT(matched >= 57, "%s: %d strings matched", kind, matched);
    }
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
    mg_golden_free(&g);
}

/* ---------------------------------------------------------------- the golden files */

MG_TEST(tokenizers_hf_llama3_matches_golden) {
    check_kind(t, "llama3", "HuggingFaceTokenizer", 0, "<|begin_of_text|>");
}

MG_TEST(tokenizers_hf_qwen2_matches_golden) {
#ifdef MG_HAVE_UTF8PROC
    check_kind(t, "qwen2", "HuggingFaceTokenizer", 0, NULL);
#else
    mg_tokenizer *tok = NULL;
    MG_EXPECT_ERROR(load_kind("qwen2", "HuggingFaceTokenizer", &tok), MG_ERR_UNSUPPORTED,
                    "install libutf8proc-dev");
#endif
}

MG_TEST(tokenizers_hf_neox_matches_golden) {
#ifdef MG_HAVE_UTF8PROC
    check_kind(t, "neox", "HuggingFaceTokenizer", 0, NULL);
#endif
}

/* Without PCRE2's JIT, each valid UTF-8 run is matched by the interpreter (see next_match). */
MG_TEST(tokenizers_hf_interpreter_matches_golden) {
    check_kind(t, "llama3", "HuggingFaceTokenizer", 1, NULL);
#ifdef MG_HAVE_UTF8PROC
    check_kind(t, "neox", "HuggingFaceTokenizer", 1, NULL);
#endif
}

/* Current Megatron-LM builds SentencePieceTokenizer, GPTSentencePieceTokenizer and
 * Llama2Tokenizer alike: encode_as_ids, nothing added, eod = eos_id. */
MG_TEST(tokenizers_spm_matches_golden) {
    static const char *const types[] = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                        "Llama2Tokenizer"};
#ifdef MG_HAVE_SENTENCEPIECE
    for (int i = 0; i < 3; i++) check_kind(t, "spm_bpe", types[i], 0, NULL);
    mg_tokenizer *tok = NULL;
    mg_tokenizer_worker *w = NULL;
    MG_EXPECT_OK(load_kind("spm_bpe", "Llama2Tokenizer", &tok));
    if (tok) MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &w));
    if (!w) {
        mg_tokenizer_free(tok);
        return;
    }
    static const char *const texts[] = {"Hello world", "Call me Ishmael.  Two  spaces",
                                        "日本語 123 🐳"};
    for (int i = 0; i < 3; i++) {
        id_vec v = {0};
        char *dec = NULL;
        size_t len = 0;
        MG_EXPECT_OK(mg_tokenizer_encode(w, texts[i], strlen(texts[i]), &v.ids, &v.n, &v.cap));
        MG_EXPECT(v.n > 0 && v.ids[0] != mg_tokenizer_bos(tok), "'%s': %zu ids, BOS first",
                  texts[i], v.n);
        MG_EXPECT_OK(mg_tokenizer_decode(tok, v.ids, v.n, &dec, &len));
        MG_EXPECT(dec && len == strlen(texts[i]) && !strcmp(dec, texts[i]), "decode '%s': '%s'",
                  texts[i], dec ? dec : "(null)");
        MG_EXPECT(!mg_tokenizer_id_bytes(tok, v.ids[0], &len), "SentencePiece has no id bytes");
        free(dec);
        free(v.ids);
    }
    int32_t bad = 3000;
    char *dec = NULL;
    size_t len = 0;
    MG_EXPECT_ERROR(mg_tokenizer_decode(tok, &bad, 1, &dec, &len), MG_ERR_FORMAT,
                    "outside the vocabulary (0..2999)");
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
#else
    mg_tokenizer *tok = NULL;
    MG_EXPECT_ERROR(load_kind("spm_bpe", types[2], &tok), MG_ERR_UNSUPPORTED,
                    "install libsentencepiece-dev");
#endif
}

/* The file itself instead of its directory; --tokenizer-hf-no-include-special-tokens drops the
 * post-processor's BOS and nothing else. */
MG_TEST(tokenizers_hf_file_path_and_no_special_tokens) {
    mg_tokenizer *a = NULL, *b = NULL;
    mg_tokenizer_worker *wa = NULL, *wb = NULL;
    mg_tokenizer_spec sa = {.type = "HuggingFaceTokenizer", .model = TOKDIR "/llama3"};
    mg_tokenizer_spec sb = {.type = "HuggingFaceTokenizer",
                            .model = TOKDIR "/llama3/tokenizer.json",
                            .no_special_tokens = true};
    MG_EXPECT_OK(mg_tokenizer_load(&a, &sa));
    MG_EXPECT_OK(mg_tokenizer_load(&b, &sb));
    if (!a || !b) goto done;
    MG_EXPECT(mg_tokenizer_eod(b) == mg_tokenizer_eod(a) && mg_tokenizer_eod(a) == 3001,
              "tokenizer_config.json next to the file: eod %d", mg_tokenizer_eod(b));
    MG_EXPECT_OK(mg_tokenizer_worker_create(a, &wa));
    MG_EXPECT_OK(mg_tokenizer_worker_create(b, &wb));
    if (!wa || !wb) goto done;
    const char *text = "Hi <|eot_id|> there<|end_of_text|>";
    id_vec va = {0}, vb = {0};
    MG_EXPECT_OK(mg_tokenizer_encode(wa, text, strlen(text), &va.ids, &va.n, &va.cap));
    MG_EXPECT_OK(mg_tokenizer_encode(wb, text, strlen(text), &vb.ids, &vb.n, &vb.cap));
    MG_EXPECT(va.n == vb.n + 1 && va.ids[0] == 3000 && !memcmp(va.ids + 1, vb.ids, vb.n * 4) &&
                  vb.ids[vb.n - 1] == 3001,
              "with BOS %zu ids, without %zu", va.n, vb.n);
    free(va.ids);
    free(vb.ids);
done:
    mg_tokenizer_worker_free(wa);
    mg_tokenizer_worker_free(wb);
    mg_tokenizer_free(a);
    mg_tokenizer_free(b);
}

/* ---------------------------------------------------------------- threads */

typedef struct {
    const mg_tokenizer *tok;
    const char *text;
    size_t len;
    id_vec out;
    mg_status st;
} job;

static void *encode_job(void *arg) {
    job *j = arg;
    mg_tokenizer_worker *w = NULL;
    j->st = mg_tokenizer_worker_create(j->tok, &w);
    for (int pass = 0; pass < 3 && j->st == MG_OK; pass++) {
        j->out.n = 0;
        j->st = mg_tokenizer_encode(w, j->text, j->len, &j->out.ids, &j->out.n, &j->out.cap);
    }
    mg_tokenizer_worker_free(w);
    return NULL;
}

MG_TEST(tokenizers_two_threads_share_one_tokenizer) {
    mg_golden g = {0};
    MG_EXPECT_OK(mg_golden_load(&g, GOLDEN));
    size_t len = 0;
    for (int i = 0; i < g.n; i++)
        if (!strncmp(g.records[i].name, "str.", 4)) len += (size_t)g.records[i].numel;
    char *text = malloc(len + 1);
    len = 0;
    for (int i = 0; text && i < g.n; i++)
        if (!strncmp(g.records[i].name, "str.", 4))
            memcpy(text + len, g.records[i].data, (size_t)g.records[i].numel),
                len += (size_t)g.records[i].numel;
    static const char *const kinds[] = {"llama3", "spm_bpe"};
    static const char *const types[] = {"HuggingFaceTokenizer", "SentencePieceTokenizer"};
    for (int k = 0; k < 2 && text; k++) {
        mg_tokenizer *tok = NULL;
#ifndef MG_HAVE_SENTENCEPIECE
        if (k == 1) break;
#endif
        MG_EXPECT_OK(load_kind(kinds[k], types[k], &tok));
        if (!tok) continue;
        job jobs[3] = {{tok, text, len, {0}, MG_OK},
                       {tok, text, len, {0}, MG_OK},
                       {tok, text, len, {0}, MG_OK}};
        encode_job(&jobs[0]); /* the single-threaded reference */
        pthread_t th[2];
        int started = 0;
        for (int i = 0; i < 2; i++)
            started += pthread_create(&th[i], NULL, encode_job, &jobs[1 + i]) == 0;
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        MG_EXPECT(started == 2 && jobs[0].st == MG_OK && jobs[0].out.n > len / 8, "%s: threads",
                  kinds[k]);
        for (int i = 1; i <= started; i++) {
            MG_EXPECT(jobs[i].st == MG_OK && jobs[i].out.n == jobs[0].out.n &&
                          !memcmp(jobs[i].out.ids, jobs[0].out.ids, jobs[0].out.n * 4),
                      "%s: thread %d differs", kinds[k], i);
            free(jobs[i].out.ids);
        }
        free(jobs[0].out.ids);
        mg_tokenizer_free(tok);
    }
    free(text);
    mg_golden_free(&g);
}

/* ---------------------------------------------------------------- small hand-built files */

typedef struct {
    char dir[64], json[128], config[128];
} tok_dir;

static int make_dir(mg_test_ctx *t, tok_dir *d) {
    snprintf(d->dir, sizeof d->dir, "/tmp/mg_toks_XXXXXX");
    if (!mkdtemp(d->dir)) {
        MG_EXPECT(0, "mkdtemp failed");
        return 0;
    }
    snprintf(d->json, sizeof d->json, "%s/tokenizer.json", d->dir);
    snprintf(d->config, sizeof d->config, "%s/tokenizer_config.json", d->dir);
    return 1;
}

static void remove_dir(tok_dir *d) {
    char p[128];
    unlink(d->json);
    unlink(d->config);
    snprintf(p, sizeof p, "%s/special_tokens_map.json", d->dir);
    unlink(p);
    rmdir(d->dir);
}

/* The parts of a tokenizer.json; NULL: the default of each. */
typedef struct {
    const char *model_extra, *vocab_extra, *merges, *added, *normalizer, *pretok, *post, *decoder,
        *raw;
} tok_json;

/* Writes a byte-level BPE tokenizer.json: the 256 one-byte tokens are ids 0..255 in byte order
 * (written in GPT-2's byte-to-unicode alphabet), then "he" 256, "hel" 257, "hello" 258, "a-" 259,
 * then vocab_extra. */
static void write_json(const tok_dir *d, const tok_json *j) {
    FILE *f = fopen(d->json, "wb");
    if (!f) return;
    if (j->raw) {
        fputs(j->raw, f);
        fclose(f);
        return;
    }
    fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s,\n",
            j->added ? j->added : "[]", j->normalizer ? j->normalizer : "null");
    fprintf(f, "\"pre_tokenizer\": %s,\n\"post_processor\": %s, \"decoder\": %s,\n",
            j->pretok ? j->pretok
                      : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
                        "true}",
            j->post ? j->post : "null", j->decoder ? j->decoder : "{\"type\": \"ByteLevel\"}");
    fprintf(f, "\"model\": {\"type\": \"BPE\"%s,\n",
            j->model_extra ? j->model_extra : ", \"dropout\": null, \"byte_fallback\": false");
    fputs("\"vocab\": {", f);
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        int cp = printable ? b : next++;
        if (cp == '"' || cp == '\\')
            fprintf(f, "\"\\%c\": %d, ", cp, b);
        else if (cp < 0x80)
            fprintf(f, "\"%c\": %d, ", cp, b);
        else
            fprintf(f, "\"%c%c\": %d, ", 0xc0 | cp >> 6, 0x80 | (cp & 0x3f), b);
    }
    fprintf(f, "\"he\": 256, \"hel\": 257, \"hello\": 258, \"a-\": 259%s},\n",
            j->vocab_extra ? j->vocab_extra : "");
    fprintf(f, "\"merges\": %s}}\n", j->merges ? j->merges : "[\"h e\", [\"he\", \"l\"], \"a -\"]");
    fclose(f);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

/* Encodes text with the tokenizer of d; 1 when the ids are want[0..n). */
static int encodes_to(mg_test_ctx *t, const tok_dir *d, bool no_special, const char *text,
                      const int32_t *want, size_t n) {
    mg_tokenizer_spec spec = {
        .type = "HuggingFaceTokenizer", .model = d->dir, .no_special_tokens = no_special};
    mg_tokenizer *tok = NULL;
    mg_tokenizer_worker *w = NULL;
    id_vec v = {0};
    MG_EXPECT_OK(mg_tokenizer_load(&tok, &spec));
    if (tok) MG_EXPECT_OK(mg_tokenizer_worker_create(tok, &w));
    if (w) MG_EXPECT_OK(mg_tokenizer_encode(w, text, strlen(text), &v.ids, &v.n, &v.cap));
    int ok = w && v.n == n && !memcmp(v.ids, want, n * sizeof *want);
    if (w && !ok) {
        char got[256] = "";
        for (size_t i = 0, at = 0; i < v.n && at < 200; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, " %d", v.ids[i]);
        MG_EXPECT(0, "'%s': ids%s", text, got);
    }
    free(v.ids);
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
    return ok;
}

MG_TEST(tokenizers_hf_small_files) {
    tok_dir d;
    if (!make_dir(t, &d)) return;
    const char *added = "[{\"id\": 260, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": "
                        "false, \"rstrip\": false, \"normalized\": false, \"special\": true}, "
                        "{\"id\": 261, \"content\": \"</s>\", \"normalized\": false, "
                        "\"special\": true}]";
    const char *post = "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
                       "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                       "{\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
                       "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": "
                       "0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [260], "
                       "\"tokens\": [\"<s>\"]}, \"</s>\": {\"id\": \"</s>\", \"ids\": [261], "
                       "\"tokens\": [\"</s>\"]}}}]}";
    /* 1. the post-processor: BOS before, EOS after; merges h e, he l; "<s>" in the text */
    write_json(&d, &(tok_json){.added = added, .post = post});
    write_file(d.config, "{\"eos_token\": \"</s>\", \"bos_token\": {\"content\": \"<s>\"}}");
    int32_t w1[] = {260, 257, 'l', 'o', 260, 'x', 261};
    encodes_to(t, &d, false, "hello<s>x", w1, 7);
    encodes_to(t, &d, true, "hello<s>x", w1 + 1, 5);
    unlink(d.config);
    /* 2. ignore_merges: "hello" is in the vocabulary, though no merge makes it */
    write_json(&d, &(tok_json){.model_extra = ", \"ignore_merges\": true"});
    int32_t w2[] = {258, ' ', 257, 'l'};
    encodes_to(t, &d, false, "hello hell", w2, 4); /* " hell": not in the vocabulary: merges */
    /* 3. Split by a literal "-" (Isolated) then ByteLevel without its regex: "a-" cannot merge;
     *    without the Split it does */
    write_json(&d, &(tok_json){.pretok = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                                         "\"Split\", \"pattern\": {\"String\": \"-\"}, "
                                         "\"behavior\": \"Isolated\", \"invert\": false}, "
                                         "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                                         "\"use_regex\": false}]}"});
    int32_t w3[] = {'a', '-', 'b', ' ', 'a', '-'};
    encodes_to(t, &d, false, "a-b a-", w3, 6);
    write_json(&d, &(tok_json){.pretok = "{\"type\": \"ByteLevel\", \"use_regex\": false}"});
    int32_t w3b[] = {259, 'b', ' ', 259};
    encodes_to(t, &d, false, "a-b a-", w3b, 4);
    /* 4. leftmost-longest added tokens: "ab" and "abc" */
    write_json(&d, &(tok_json){.added = "[{\"id\": 260, \"content\": \"ab\", \"normalized\": "
                                        "false}, {\"id\": 261, \"content\": \"abc\", "
                                        "\"normalized\": false}]"});
    int32_t w4[] = {'x', 260, 261};
    encodes_to(t, &d, false, "xababc", w4, 3);
#ifdef MG_HAVE_UTF8PROC
    /* 5. NFC: "e" + U+0301 becomes "é" (0xc3 0xa9); an added "éé" with normalized true matches
     *    after normalisation, with normalized false only where the raw text has it */
    const char *nfc = "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}";
    const char *text5 = "xe\xcc\x81"
                        "e\xcc\x81y\xc3\xa9\xc3\xa9";
    write_json(&d, &(tok_json){.normalizer = nfc,
                               .added = "[{\"id\": 260, \"content\": \"\xc3\xa9\xc3\xa9\", "
                                        "\"normalized\": true}]"});
    int32_t w5[] = {'x', 260, 'y', 260};
    encodes_to(t, &d, false, text5, w5, 4);
    write_json(&d, &(tok_json){.normalizer = nfc,
                               .added = "[{\"id\": 260, \"content\": \"\xc3\xa9\xc3\xa9\", "
                                        "\"normalized\": false}]"});
    int32_t w5b[] = {'x', 0xc3, 0xa9, 0xc3, 0xa9, 'y', 260};
    encodes_to(t, &d, false, text5, w5b, 7);
#endif
    /* 6. eos_token from special_tokens_map.json when tokenizer_config.json has none */
    unlink(d.config);
    write_json(&d, &(tok_json){.added = added});
    char map[128];
    snprintf(map, sizeof map, "%s/special_tokens_map.json", d.dir);
    write_file(map, "{\"eos_token\": {\"content\": \"</s>\", \"lstrip\": false}}");
    mg_tokenizer_spec spec = {.type = "HuggingFaceTokenizer", .model = d.dir};
    mg_tokenizer *tok = NULL;
    MG_EXPECT_OK(mg_tokenizer_load(&tok, &spec));
    MG_EXPECT(tok && mg_tokenizer_eod(tok) == 261 && mg_tokenizer_bos(tok) == -1 &&
                  mg_tokenizer_vocab_size(tok) == 262,
              "special_tokens_map.json: eod %d", tok ? mg_tokenizer_eod(tok) : -2);
    mg_tokenizer_free(tok);
    remove_dir(&d);
}

MG_TEST(tokenizers_hf_bad_files_fail_with_one_line) {
    tok_dir d;
    if (!make_dir(t, &d)) return;
    const char *bl = "{\"type\": \"ByteLevel\", \"use_regex\": false}";
    struct {
        tok_json j;
        const char *config;
        mg_status code;
        const char *msg;
    } cases[] = {
        {{.raw = "{\"model\": "}, NULL, MG_ERR_FORMAT, "tokenizer.json: not valid JSON (line 1"},
        {{.raw = "[1]"}, NULL, MG_ERR_FORMAT, "not a JSON object"},
        {{.raw = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "model.type WordPiece is not supported"},
        {{.raw = "{\"model\": {\"type\": \"Unigram\"}}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "model.type Unigram"},
        {{.model_extra = ", \"continuing_subword_prefix\": \"##\""},
         NULL,
         MG_ERR_UNSUPPORTED,
         "model.continuing_subword_prefix is set"},
        {{.model_extra = ", \"dropout\": 0.1"}, NULL, MG_ERR_UNSUPPORTED, "model.dropout is set"},
        {{.model_extra = ", \"byte_fallback\": true"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "model.byte_fallback is true"},
        {{.normalizer = "{\"type\": \"NFKC\"}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "normalizer NFKC is not supported"},
        {{.normalizer = "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
                        "\"prepend\": \"_\"}]}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "normalizer.normalizers[] Prepend is not supported"},
        {{.pretok = "{\"type\": \"Metaspace\", \"replacement\": \"_\"}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "pre_tokenizer Metaspace is not supported"},
        {{.pretok = "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": "
                    "\"Isolated\"}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "pre_tokenizer has no ByteLevel step"},
        {{.pretok = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "add_prefix_space true"},
        {{.pretok = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                    "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}]}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "Split behavior Removed is not supported"},
        {{.pretok = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                    "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\", \"invert\": "
                    "true}]}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "invert true"},
        {{.pretok = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                    "{\"type\": \"Digits\"}]}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "Digits follows ByteLevel"},
        {{.pretok = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                    "\"pattern\": {\"Regex\": \"(?<!\"}, \"behavior\": \"Isolated\"}]}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "PCRE2 cannot compile the pre-tokenizer pattern '(?<!'"},
        {{.post = "{\"type\": \"RobertaProcessing\"}", .pretok = bl},
         NULL,
         MG_ERR_UNSUPPORTED,
         "post_processor RobertaProcessing is not supported"},
        {{.post = "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
                  "\"<x>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\"}}], "
                  "\"special_tokens\": {}}"},
         NULL,
         MG_ERR_FORMAT,
         "special_tokens has no ids for '<x>'"},
        {{.decoder = "{\"type\": \"WordPiece\"}"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "decoder WordPiece is not supported"},
        {{.added = "[{\"id\": 260, \"content\": \"<m>\", \"lstrip\": true}]"},
         NULL,
         MG_ERR_UNSUPPORTED,
         "added_tokens[0] ('<m>') has lstrip true"},
        {{.added = "[{\"id\": 260, \"content\": \"\"}]"},
         NULL,
         MG_ERR_FORMAT,
         "added_tokens[0].content is not a non-empty string"},
        {{.added = "[{\"id\": 5, \"content\": \"<m>\"}]"},
         NULL,
         MG_ERR_FORMAT,
         "'<m>' has id 5, which model.vocab gives to"},
        {{.added = "[{\"id\": 262, \"content\": \"<m>\"}]"},
         NULL,
         MG_ERR_FORMAT,
         "'<m>' has id 262, but Hugging Face tokenizers gives it id 260 (the next free id)"},
        {{.added = "[{\"id\": 260, \"content\": \"\xc3\xa9\"}]"},
         NULL,
         MG_ERR_FORMAT,
         "gives it id 233 (its id in model.vocab)"},
        {{.added = "[{\"id\": -1, \"content\": \"<m>\"}]"},
         NULL,
         MG_ERR_FORMAT,
         "added_tokens[].id: the id is not an integer"},
        {{.vocab_extra = ", \"zz\": 2.5"}, NULL, MG_ERR_FORMAT, "model.vocab 'zz': the id is not"},
        {{.vocab_extra = ", \"zz\": 7"}, NULL, MG_ERR_FORMAT, "id 7 belongs to both"},
        {{.merges = "[\"h e\", \"x q\"]"},
         NULL,
         MG_ERR_FORMAT,
         "model.merges[1] 'x q': its result is not in model.vocab"},
        {{.merges = "[\"h e\", \"he\"]"},
         NULL,
         MG_ERR_FORMAT,
         "model.merges[1] 'he' is not two tokens"},
        {{.merges = "[[\"h\"]]"}, NULL, MG_ERR_FORMAT, "model.merges[0] is neither"},
        {{.merges = "[\"h e\", [\"h\", \"e\"]]"},
         NULL,
         MG_ERR_FORMAT,
         "model.merges[1] repeats model.merges[0]"},
        {{.vocab_extra = ", \"\xe2\x82\xac\": 300"}, NULL, MG_ERR_FORMAT, NULL},
        {{0},
         "{\"eos_token\": \"<|nope|>\"}",
         MG_ERR_FORMAT,
         "eos_token '<|nope|>' is not a token of"},
        {{0}, "{\"eos_token\": ", MG_ERR_FORMAT, "tokenizer_config.json: not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_json(&d, &cases[i].j);
        if (cases[i].config) write_file(d.config, cases[i].config);
        mg_tokenizer_spec spec = {.type = "HuggingFaceTokenizer", .model = d.dir};
        mg_tokenizer *tok = (mg_tokenizer *)&d;
        mg_error_clear();
        mg_status s = mg_tokenizer_load(&tok, &spec);
        const char *msg = mg_error_message();
        if (!cases[i].msg) { /* a character outside the alphabet: its own bytes, loads */
            MG_EXPECT(s == MG_OK && tok, "case %zu: %s", i, msg);
        } else {
            MG_EXPECT(s == cases[i].code && !tok && strstr(msg, cases[i].msg) && !strchr(msg, '\n'),
                      "case %zu: status %s, message '%s' (want '%s')", i, mg_status_name(s), msg,
                      cases[i].msg);
        }
        if (tok != (mg_tokenizer *)&d) mg_tokenizer_free(tok);
        unlink(d.config);
    }
    remove_dir(&d);
}

MG_TEST(tokenizers_load_refuses_bad_specs) {
    mg_tokenizer *tok = NULL;
    mg_tokenizer_spec s1 = {.type = "TikTokenizer", .model = "x"};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s1), MG_ERR_USAGE,
                    "--tokenizer-type TikTokenizer cannot tokenize text; this build has");
    mg_tokenizer_spec s2 = {.type = "HuggingFaceTokenizer"};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s2), MG_ERR_USAGE,
                    "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model DIR");
    mg_tokenizer_spec s3 = {.type = "GPT2BPETokenizer", .vocab_file = "v.json"};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s3), MG_ERR_USAGE, "needs --vocab-file");
    mg_tokenizer_spec s4 = {.type = "HuggingFaceTokenizer", .model = "/no/such/dir"};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s4), MG_ERR_IO, "/no/such/dir: cannot open");
#ifdef MG_HAVE_SENTENCEPIECE
    mg_tokenizer_spec s5 = {.type = "Llama2Tokenizer", .model = "/no/such.model"};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s5), MG_ERR_IO, "/no/such.model: cannot open");
    mg_tokenizer_spec s6 = {.type = "Llama2Tokenizer", .model = GOLDEN};
    MG_EXPECT_ERROR(mg_tokenizer_load(&tok, &s6), MG_ERR_FORMAT, "not a SentencePiece model");
#endif
    MG_EXPECT(!tok, "no tokenizer after failures");
    MG_EXPECT(mg_tokenizer_known_type("Llama2Tokenizer") && !mg_tokenizer_known_type("Null") &&
                  mg_tokenizer_type_uses_model("HuggingFaceTokenizer") &&
                  !mg_tokenizer_type_uses_model("GPT2BPETokenizer"),
              "type predicates");
}
