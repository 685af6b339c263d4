/* GPT2BPETokenizer: loading encoder.json and vocab.bpe into the byte-level BPE engine
 * (tokenizer_bpe.h). The files are those Megatron-LM reads for GPT2BPETokenizer: the vocabulary
 * maps token strings, written in GPT-2's byte-to-unicode alphabet, to ids; the merge file lists
 * one "left right" pair per line in rank order after a "#version" line.
 *
 * "<|endoftext|>" written in the text is the special token (50256 for GPT-2), as Hugging Face's
 * GPT2TokenizerFast (and so current Megatron-LM's GPT2BPETokenizer, built on it) encodes it; the
 * text around it is encoded normally. vocab_size is the number of entries; eod the id of
 * <|endoftext|>. Callers append the eod themselves (preprocess's --append-eod). */
#include "data/tokenizer_bpe.h"

#include "core/file.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoder.json ---- */

/* Fills t->base.vocab_size and m from the parsed vocabulary (ids dense 0..n-1). */
static mg_status load_vocab(const char *path, cJSON *root, mg_tok_strmap *m, mg_bpe *t) {
    if (!cJSON_IsObject(root))
        return MG_FAIL(MG_ERR_FORMAT, "%s: not a JSON object mapping tokens to ids", path);
    int n = cJSON_GetArraySize(root);
    if (n <= 0) return MG_FAIL(MG_ERR_FORMAT, "%s: the vocabulary is empty", path);
    MG_CHECK(mg_tok_strmap_init(m, n, n));
    int entry = 0;
    for (cJSON *e = root->child; e; e = e->next, entry++) {
        const char *s = e->string;
        if (!cJSON_IsNumber(e))
            return MG_FAIL(MG_ERR_FORMAT, "%s: entry %d ('%.40s'): the id is not a number", path,
                           entry, s);
        double d = e->valuedouble;
        if (!(d >= 0 && d < n) || d != floor(d))
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: entry %d ('%.40s'): id %g is not an integer in 0..%d (ids must "
                           "number the %d tokens densely)",
                           path, entry, s, d, n - 1, n);
        int32_t id = (int32_t)d;
        if (s[0] == '\0')
            return MG_FAIL(MG_ERR_FORMAT, "%s: entry %d (id %d): the token is empty", path, entry,
                           id);
        if (m->str[id])
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: entry %d ('%.40s'): id %d already belongs to '%.40s'", path, entry,
                           s, id, m->str[id]);
        int32_t had = mg_tok_strmap_add(m, s, id);
        if (had >= 0)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: entry %d: token '%.40s' appears twice (ids %d "
                           "and %d)",
                           path, entry, s, had, id);
    }
    t->base.vocab_size = n;
    return MG_OK;
}

/* ---- vocab.bpe ---- */

static mg_status load_merges(const char *path, const char *vocab_path, char *buf, size_t size,
                             const mg_tok_strmap *m, mg_bpe *t) {
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += buf[i] == '\n';
    MG_CHECK(mg_bpe_merges_alloc(t, lines, path));
    char *cat = malloc(size + 1);
    if (!cat) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the merge table", path);
    mg_status s = MG_OK;
    int first = 1; /* the line number of rank 0 */
    char *p = buf, *end = buf + size;
    if (size >= 8 && memcmp(buf, "#version", 8) == 0) {
        p = memchr(buf, '\n', size);
        p = p ? p + 1 : end;
        first = 2;
    }
    for (int line = first; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        size_t len = (size_t)(e - p);
        if (len && p[len - 1] == '\r') len--;
        char *sp = memchr(p, ' ', len);
        int shown = (int)(len < 40 ? len : 40);
        if (len == 0 && !nl) break; /* no newline at the end */
        if (len == 0) {
            if (e + 1 >= end) break; /* the final newline */
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: empty line (expected 'left right')", path, line);
            goto done;
        }
        if (!sp) {
            s = MG_FAIL(MG_ERR_FORMAT,
                        "%s:%d: merge line '%.*s' has no space (expected 'left right')", path, line,
                        shown, p);
            goto done;
        }
        size_t ll = (size_t)(sp - p), rl = len - ll - 1;
        if (ll == 0 || rl == 0 || memchr(sp + 1, ' ', rl)) {
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: '%.*s' is not two tokens separated by one space",
                        path, line, shown, p);
            goto done;
        }
        memcpy(cat, p, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t a = mg_tok_strmap_find(m, p, ll), b = mg_tok_strmap_find(m, sp + 1, rl);
        int32_t id = mg_tok_strmap_find(m, cat, ll + rl);
        const char *missing = a < 0 ? "left part" : b < 0 ? "right part" : id < 0 ? "result" : NULL;
        if (missing) {
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: merge '%.*s': its %s is not in the vocabulary %s",
                        path, line, shown, p, missing, vocab_path);
            goto done;
        }
        uint32_t rank;
        if (!mg_bpe_merge_add(t, a, b, id, &rank)) {
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: merge '%.*s' repeats line %u", path, line, shown, p,
                        rank + (uint32_t)first);
            goto done;
        }
        p = nl ? nl + 1 : end;
    }
done:
    free(cat);
    return s;
}

mg_status mg_tokenizer_gpt2_load(mg_tokenizer **out, const char *vocab_file,
                                 const char *merge_file) {
    *out = NULL;
    mg_status s = MG_OK;
    char *vbuf = NULL, *mbuf = NULL;
    size_t vsize = 0, msize = 0;
    cJSON *root = NULL;
    mg_tok_strmap m = {0};
    mg_bpe *t = NULL;
    MG_CHECK(mg_bpe_create(&t));
    snprintf(t->base.name, sizeof t->base.name, "GPT2BPETokenizer %s", vocab_file);
    MG_CHECK_GOTO(mg_file_read(vocab_file, &vbuf, &vsize), s, fail);
    MG_CHECK_GOTO(mg_file_read(merge_file, &mbuf, &msize), s, fail);
    MG_CHECK_GOTO(mg_tok_json_parse(vocab_file, vbuf, vsize, &root), s, fail);
    MG_CHECK_GOTO(load_vocab(vocab_file, root, &m, t), s, fail);
    MG_CHECK_GOTO(mg_bpe_token_bytes(t, vocab_file, m.str, &m, 1), s, fail);
    t->base.eod = mg_tok_strmap_find(&m, "<|endoftext|>", 13);
    if (t->base.eod < 0) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: no '<|endoftext|>' token", vocab_file);
        goto fail;
    }
    MG_CHECK_GOTO(load_merges(merge_file, vocab_file, mbuf, msize, &m, t), s, fail);
    MG_CHECK_GOTO(mg_bpe_add_pattern(t, mg_bpe_gpt2_pattern, 0, vocab_file), s, fail);
    const char *eot = "<|endoftext|>";
    size_t eot_len = 13;
    MG_CHECK_GOTO(mg_bpe_added_set(t, 0, &eot, &eot_len, &t->base.eod, 1), s, fail);
    *out = &t->base;
    t = NULL;
fail:
    cJSON_Delete(root);
    mg_tok_strmap_free(&m);
    free(vbuf);
    free(mbuf);
    mg_tokenizer_free(t ? &t->base : NULL);
    return s;
}
