/* HuggingFaceTokenizer: a byte-level BPE tokenizer.json (Llama 3, Qwen2, GPT-NeoX, Mistral-Nemo
 * style) read into the byte-level BPE engine (tokenizer_bpe.h), encoding as Megatron-LM's
 * HuggingFaceTokenizer does: transformers' AutoTokenizer(text).input_ids, i.e. Hugging Face
 * `tokenizers` with the post-processor's special tokens (Llama 3's <|begin_of_text|>).
 *
 * Read: model (type BPE, vocab, merges as "a b" strings or [a, b] lists, ignore_merges),
 * added_tokens, normalizer (none or NFC), pre_tokenizer (Split with a regular expression or a
 * string, behavior Isolated, and ByteLevel, alone or in a Sequence ending with ByteLevel),
 * post_processor (none, ByteLevel, TemplateProcessing, or a Sequence of them), decoder (none or
 * ByteLevel). Anything else is refused with one line naming the field.
 * vocab_size is the highest id + 1 (len(tokenizer) of transformers when the ids have no holes);
 * eod and bos are the ids of eos_token and bos_token in tokenizer_config.json (or
 * special_tokens_map.json) next to tokenizer.json, where transformers reads them; -1 without. */
#include "data/tokenizer_split.h"

#include "core/file.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_ID = 1 << 24 };

typedef struct {
    const char *path;
    cJSON *root;
    mg_tok_strmap vocab;
    const char **id_str; /* (vocab_size) */
    mg_bpe *t;
    int no_special_tokens;
    int vocab_count; /* entries of model.vocab */
} hf_load;

#define BAD(...)         MG_FAIL(MG_ERR_FORMAT, __VA_ARGS__)
#define UNSUPPORTED(...) MG_FAIL(MG_ERR_UNSUPPORTED, __VA_ARGS__)

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int is_set(const cJSON *o, const char *key) { /* present, not null/false/""/0 */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) &&
           !(cJSON_IsString(v) && !v->valuestring[0]) &&
           !(cJSON_IsNumber(v) && v->valuedouble == 0);
}

static bool valid_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < MAX_ID &&
           v->valuedouble == floor(v->valuedouble);
}

static mg_status read_id(const char *path, const char *what, const cJSON *v, int32_t *id) {
    *id = -1;
    if (!valid_id(v))
        return BAD("%s: %s: the id is not an integer in 0..%d", path, what, MAX_ID - 1);
    *id = (int32_t)v->valuedouble;
    return MG_OK;
}

/* ---- model ---- */

static mg_status check_model(hf_load *L, const cJSON *model) {
    const char *p = L->path, *type = type_of(model);
    if (!cJSON_IsObject(model)) return BAD("%s: no \"model\" object", p);
    if (type && strcmp(type, "BPE"))
        return UNSUPPORTED("%s: model.type %s is not supported: HuggingFaceTokenizer reads "
                           "byte-level BPE tokenizer.json files",
                           p, type);
    static const char *const unsupported[] = {"dropout", "continuing_subword_prefix",
                                              "end_of_word_suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (is_set(model, unsupported[i]))
            return UNSUPPORTED("%s: model.%s is set; it is not supported (byte-level BPE "
                               "without it only)",
                               p, unsupported[i]);
    if (is_set(model, "byte_fallback"))
        return UNSUPPORTED("%s: model.byte_fallback is true: a SentencePiece-style BPE; use "
                           "--tokenizer-type SentencePieceTokenizer with its tokenizer.model",
                           p);
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(model, "vocab")))
        return BAD("%s: model.vocab is not an object of token: id", p);
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(model, "merges")))
        return BAD("%s: model.merges is not a list", p);
    return MG_OK;
}

/* The highest id of the vocabulary and the added tokens, + 1. */
static mg_status count_ids(hf_load *L, const cJSON *vocab, const cJSON *added, int *n_ids) {
    int32_t top = -1, id;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!valid_id(e))
            return BAD("%s: model.vocab '%.40s': the id is not an integer in 0..%d", L->path,
                       e->string, MAX_ID - 1);
        id = (int32_t)e->valuedouble;
        if (!e->string[0]) return BAD("%s: model.vocab has an empty token (id %d)", L->path, id);
        top = id > top ? id : top;
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        MG_CHECK(
            read_id(L->path, "added_tokens[].id", cJSON_GetObjectItemCaseSensitive(a, "id"), &id));
        top = id > top ? id : top;
    }
    if (top < 0) return BAD("%s: model.vocab is empty", L->path);
    *n_ids = top + 1;
    return MG_OK;
}

static mg_status load_vocab(hf_load *L, const cJSON *vocab) {
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        if (L->vocab.str[id])
            return BAD("%s: model.vocab: id %d belongs to both '%.40s' and '%.40s'", L->path, id,
                       L->vocab.str[id], e->string);
        int32_t had = mg_tok_strmap_add(&L->vocab, e->string, id);
        if (had >= 0)
            return BAD("%s: model.vocab: token '%.40s' appears twice (ids %d and %d)", L->path,
                       e->string, had, id);
    }
    return MG_OK;
}

/* One merge: "left right" or ["left", "right"]; ids of both parts and of their concatenation. */
static mg_status load_merge(hf_load *L, const cJSON *m, int index, char *cat, size_t cat_cap) {
    const char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1])
            return BAD("%s: model.merges[%d] '%.40s' is not two tokens separated by one space",
                       L->path, index, s);
        a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(b);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
        a = m->child->valuestring, la = strlen(a);
        b = m->child->next->valuestring, lb = strlen(b);
    } else {
        return BAD("%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", L->path, index);
    }
    if (la + lb + 1 > cat_cap)
        return BAD("%s: model.merges[%d] is longer than any token", L->path, index);
    memcpy(cat, a, la);
    memcpy(cat + la, b, lb);
    int32_t ia = mg_tok_strmap_find(&L->vocab, a, la), ib = mg_tok_strmap_find(&L->vocab, b, lb);
    int32_t id = mg_tok_strmap_find(&L->vocab, cat, la + lb);
    const char *missing = ia < 0 ? "left part" : ib < 0 ? "right part" : id < 0 ? "result" : NULL;
    if (missing)
        return BAD("%s: model.merges[%d] '%.*s %.*s': its %s is not in model.vocab", L->path, index,
                   (int)(la < 40 ? la : 40), a, (int)(lb < 40 ? lb : 40), b, missing);
    uint32_t rank;
    if (!mg_bpe_merge_add(L->t, ia, ib, id, &rank))
        return BAD("%s: model.merges[%d] repeats model.merges[%u]", L->path, index, rank);
    return MG_OK;
}

static mg_status load_merges(hf_load *L, const cJSON *merges) {
    size_t longest = 0;
    for (int id = 0; id < L->vocab.n; id++)
        if (L->vocab.str[id] && strlen(L->vocab.str[id]) > longest)
            longest = strlen(L->vocab.str[id]);
    MG_CHECK(mg_bpe_merges_alloc(L->t, (size_t)cJSON_GetArraySize(merges), L->path));
    char *cat = malloc(longest + 2);
    if (!cat) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the merge table", L->path);
    mg_status st = MG_OK;
    int i = 0;
    for (const cJSON *m = merges->child; m && st == MG_OK; m = m->next, i++)
        st = load_merge(L, m, i, cat, longest + 2);
    free(cat);
    return st;
}

/* ---- added tokens ---- */

typedef struct {
    int32_t id;
    int index;
} id_index;

static int by_id(const void *a, const void *b) {
    const id_index *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id ? 1 : x->index - y->index;
}

/* Hugging Face `tokenizers` does not take the ids of added_tokens from the file: it adds them in
 * id order, giving each the model.vocab id of its content, or else the next free id (the size of
 * model.vocab, then one past the highest added id). A file whose ids differ from that would
 * encode otherwise than it says: refused. */
static mg_status check_added_ids(hf_load *L, const char *const *s, const int32_t *ids, int n) {
    id_index *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return MG_FAIL(MG_ERR_NOMEM, "%s: out of memory", L->path);
    for (int i = 0; i < n; i++) order[i] = (id_index){ids[i], i};
    qsort(order, (size_t)n, sizeof *order, by_id);
    int64_t top = -1;
    mg_status st = MG_OK;
    for (int k = 0; k < n && st == MG_OK; k++) {
        int i = order[k].index;
        int32_t in_vocab = mg_tok_strmap_find(&L->vocab, s[i], strlen(s[i]));
        int64_t id = in_vocab >= 0                                  ? in_vocab
                     : top >= L->vocab_count || L->vocab_count == 0 ? top + 1
                                                                    : L->vocab_count;
        if (id != ids[i])
            st = BAD("%s: added_tokens[%d] '%.40s' has id %d, but Hugging Face tokenizers gives "
                     "it id %lld (%s): fix the file",
                     L->path, i, s[i], ids[i], (long long)id,
                     in_vocab >= 0 ? "its id in model.vocab" : "the next free id");
        top = id > top ? id : top;
    }
    free(order);
    return st;
}

static mg_status load_added(hf_load *L, const cJSON *added) {
    int n = added ? cJSON_GetArraySize(added) : 0, cnt[2] = {0, 0};
    const char **s = calloc((size_t)n + 1, sizeof *s);
    size_t *len = calloc((size_t)n + 1, sizeof *len);
    int32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    int *which = calloc((size_t)n + 1, sizeof *which);
    mg_status st = MG_OK;
    if (!s || !len || !ids || !which) {
        st = MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %d added tokens", L->path, n);
        goto done;
    }
    int i = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsString(c) || !c->valuestring[0]) {
            st = BAD("%s: added_tokens[%d].content is not a non-empty string", L->path, i);
            goto done;
        }
        static const char *const flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (is_set(a, flags[f])) {
                st = UNSUPPORTED("%s: added_tokens[%d] ('%.40s') has %s true; it is not "
                                 "supported",
                                 L->path, i, c->valuestring, flags[f]);
                goto done;
            }
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        const char *had = L->vocab.str[id];
        if (had && strcmp(had, c->valuestring)) {
            st = BAD("%s: added_tokens[%d] '%.40s' has id %d, which model.vocab gives to '%.40s'",
                     L->path, i, c->valuestring, id, had);
            goto done;
        }
        if (L->id_str[id] && !had) {
            st = BAD("%s: added_tokens[%d] '%.40s' repeats id %d", L->path, i, c->valuestring, id);
            goto done;
        }
        L->id_str[id] = c->valuestring;
        s[i] = c->valuestring, len[i] = strlen(c->valuestring), ids[i] = id;
        which[i] = is_set(a, "normalized"); /* matched after normalisation */
        cnt[which[i]]++;
    }
    MG_CHECK_GOTO(check_added_ids(L, s, ids, n), st, done);
    for (int k = 0; k < 2; k++) { /* the two matchers, each in file order */
        const char **sk = calloc((size_t)cnt[k] + 1, sizeof *sk);
        size_t *lk = calloc((size_t)cnt[k] + 1, sizeof *lk);
        int32_t *ik = calloc((size_t)cnt[k] + 1, sizeof *ik);
        int m = 0;
        for (int j = 0; sk && lk && ik && j < n; j++)
            if (which[j] == k) sk[m] = s[j], lk[m] = len[j], ik[m] = ids[j], m++;
        st = sk && lk && ik ? mg_bpe_added_set(L->t, k, sk, lk, ik, m)
                            : MG_FAIL(MG_ERR_NOMEM, "%s: out of memory", L->path);
        free(sk), free(lk), free(ik);
        if (st != MG_OK) goto done;
    }
done:
    free(s), free(len), free(ids), free(which);
    return st;
}

/* ---- normalizer, pre-tokenizer, post-processor, decoder ---- */

static mg_status load_normalizer(hf_load *L, const cJSON *n, const char *field) {
    if (!n || cJSON_IsNull(n)) return MG_OK;
    const char *type = type_of(n);
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
            MG_CHECK(load_normalizer(L, e, "normalizer.normalizers[]"));
        return MG_OK;
    }
    if (type && !strcmp(type, "NFC")) {
        if (!mg_bpe_nfc_available())
            return UNSUPPORTED("%s: %s NFC needs utf8proc, which this build lacks: install "
                               "libutf8proc-dev and rebuild",
                               L->path, field);
        L->t->nfc = 1;
        return MG_OK;
    }
    return UNSUPPORTED("%s: %s %s is not supported (none or NFC)", L->path, field,
                       type ? type : "(no type)");
}

/* Appends the patterns of pre-tokenizer p; *byte_level is set by the ByteLevel step, which
 * must come last (it maps the bytes to its alphabet: a Split after it would see that alphabet). */
static mg_status load_pretok(hf_load *L, const cJSON *p, const char *field, int *byte_level) {
    const char *type = type_of(p);
    if (!type) return BAD("%s: %s has no type", L->path, field);
    if (*byte_level)
        return UNSUPPORTED("%s: %s %s follows ByteLevel; only ByteLevel as the last step is "
                           "supported",
                           L->path, field, type);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
            MG_CHECK(load_pretok(L, e, "pre_tokenizer.pretokenizers[]", byte_level));
        return MG_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        if (is_set(p, "add_prefix_space"))
            return UNSUPPORTED("%s: %s ByteLevel has add_prefix_space true; it is not supported",
                               L->path, field);
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (!re || cJSON_IsTrue(re))
            MG_CHECK(mg_bpe_add_pattern(L->t, mg_bpe_gpt2_pattern, 0, L->path));
        *byte_level = 1;
        return MG_OK;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (!cJSON_IsString(re) && !cJSON_IsString(str))
            return BAD("%s: %s Split has no pattern {\"Regex\": ...} or {\"String\": ...}", L->path,
                       field);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
            return UNSUPPORTED("%s: %s Split behavior %s is not supported (Isolated only)", L->path,
                               field, cJSON_IsString(beh) ? beh->valuestring : "(none)");
        if (is_set(p, "invert"))
            return UNSUPPORTED("%s: %s Split with invert true is not supported", L->path, field);
        return mg_bpe_add_pattern(L->t, re ? re->valuestring : str->valuestring, !re, L->path);
    }
    return UNSUPPORTED("%s: %s %s is not supported (Split, ByteLevel, Sequence)", L->path, field,
                       type);
}

/* The ids of a TemplateProcessing special token named name. */
static mg_status template_ids(hf_load *L, const cJSON *proc, const char *name, int32_t *out, int *n,
                              int cap) {
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(proc, "special_tokens");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    if (!cJSON_IsArray(ids))
        return BAD("%s: post_processor TemplateProcessing: special_tokens has no ids for '%.40s'",
                   L->path, name);
    for (const cJSON *e = ids->child; e; e = e->next) {
        int32_t id;
        MG_CHECK(read_id(L->path, "post_processor special token", e, &id));
        if (id >= L->t->base.vocab_size)
            return BAD("%s: post_processor: special token '%.40s' has id %d past the vocabulary",
                       L->path, name, id);
        if (*n == cap)
            return UNSUPPORTED("%s: post_processor adds more than %d tokens", L->path, cap);
        out[(*n)++] = id;
    }
    return MG_OK;
}

static mg_status load_post(hf_load *L, const cJSON *p, const char *field) {
    if (!p || cJSON_IsNull(p)) return MG_OK;
    const char *type = type_of(p);
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
            MG_CHECK(load_post(L, e, "post_processor.processors[]"));
        return MG_OK;
    }
    if (type && !strcmp(type, "ByteLevel")) return MG_OK; /* offsets only */
    if (!type || strcmp(type, "TemplateProcessing"))
        return UNSUPPORTED("%s: %s %s is not supported (ByteLevel, TemplateProcessing)", L->path,
                           field, type ? type : "(no type)");
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
    int seen_a = 0;
    mg_bpe *t = L->t;
    for (const cJSON *e = cJSON_IsArray(single) ? single->child : NULL; e; e = e->next) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp ? sp : seq, "id");
        if (!cJSON_IsString(id))
            return BAD("%s: %s TemplateProcessing.single: an item is neither SpecialToken nor "
                       "Sequence",
                       L->path, field);
        if (seq) {
            if (seen_a++)
                return UNSUPPORTED("%s: %s TemplateProcessing.single names the sequence twice",
                                   L->path, field);
        } else if (!L->no_special_tokens) {
            MG_CHECK(seen_a ? template_ids(L, p, id->valuestring, t->suffix, &t->n_suffix,
                                           MG_BPE_MAX_AFFIX)
                            : template_ids(L, p, id->valuestring, t->prefix, &t->n_prefix,
                                           MG_BPE_MAX_AFFIX));
        }
    }
    if (!seen_a)
        return BAD("%s: %s TemplateProcessing.single has no Sequence item", L->path, field);
    return MG_OK;
}

/* ---- tokenizer_config.json: bos_token, eos_token ---- */

static const char *token_content(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int32_t token_id(const hf_load *L, const char *s) {
    for (int id = 0; id < L->t->base.vocab_size; id++) /* added tokens first, as transformers */
        if (L->id_str[id] && !L->vocab.str[id] && !strcmp(L->id_str[id], s)) return id;
    for (int id = 0; id < L->t->base.vocab_size; id++)
        if (L->id_str[id] && !strcmp(L->id_str[id], s)) return id;
    return -1;
}

static mg_status load_config(hf_load *L, const char *dir) {
    static const char *const files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    const char *keys[2] = {"eos_token", "bos_token"};
    int32_t *dst[2] = {&L->t->base.eod, &L->t->base.bos};
    for (size_t f = 0; f < 2; f++) {
        char path[1100];
        snprintf(path, sizeof path, "%.1000s/%s", dir, files[f]);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        char *buf = NULL;
        size_t size = 0;
        cJSON *cfg = NULL;
        MG_CHECK(mg_file_read(path, &buf, &size));
        mg_status st = mg_tok_json_parse(path, buf, size, &cfg);
        free(buf);
        MG_CHECK(st);
        int found = 0;
        for (int k = 0; k < 2 && st == MG_OK; k++) {
            const char *s = token_content(cfg, keys[k]);
            found |= s != NULL;
            if (!s) continue;
            *dst[k] = token_id(L, s);
            if (*dst[k] < 0)
                st = BAD("%s: %s '%.40s' is not a token of %s (transformers would add it and "
                         "grow the vocabulary): fix the file",
                         path, keys[k], s, L->path);
        }
        cJSON_Delete(cfg);
        MG_CHECK(st);
        if (found) return MG_OK;
    }
    return MG_OK;
}

/* ---- the whole file ---- */

static mg_status load_tokenizer(hf_load *L) {
    const char *p = L->path;
    cJSON *root = L->root;
    if (!cJSON_IsObject(root)) return BAD("%s: not a JSON object (a tokenizer.json)", p);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    MG_CHECK(check_model(L, model));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return BAD("%s: added_tokens is not a list", p);
    if (!cJSON_IsArray(added)) added = NULL;
    int n_ids = 0;
    MG_CHECK(count_ids(L, vocab, added, &n_ids));
    L->t->base.vocab_size = n_ids;
    L->vocab_count = cJSON_GetArraySize(vocab);
    MG_CHECK(mg_tok_strmap_init(&L->vocab, n_ids, cJSON_GetArraySize(vocab)));
    L->id_str = calloc((size_t)n_ids, sizeof *L->id_str);
    if (!L->id_str) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %d ids", p, n_ids);
    MG_CHECK(load_vocab(L, vocab));
    memcpy(L->id_str, L->vocab.str, (size_t)n_ids * sizeof *L->id_str);
    MG_CHECK(load_added(L, added));
    MG_CHECK(mg_bpe_token_bytes(L->t, p, L->id_str, &L->vocab, 0));
    MG_CHECK(load_merges(L, cJSON_GetObjectItemCaseSensitive(model, "merges")));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges")))
        MG_CHECK(mg_bpe_words_build(L->t, &L->vocab, p));
    MG_CHECK(
        load_normalizer(L, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer"));
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int byte_level = 0;
    if (pre && !cJSON_IsNull(pre)) MG_CHECK(load_pretok(L, pre, "pre_tokenizer", &byte_level));
    if (!byte_level)
        return UNSUPPORTED("%s: pre_tokenizer has no ByteLevel step: not a byte-level BPE (for "
                           "SentencePiece-style files use --tokenizer-type SentencePieceTokenizer "
                           "with the .model)",
                           p);
    MG_CHECK(
        load_post(L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor"));
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel")))
        return UNSUPPORTED("%s: decoder %s is not supported (ByteLevel)", p,
                           type_of(dec) ? type_of(dec) : "(no type)");
    return MG_OK;
}

mg_status mg_tokenizer_hf_load(mg_tokenizer **out, const char *path, bool no_special_tokens) {
    *out = NULL;
    char file[1100], dir[1100];
    struct stat sb;
    if (strlen(path) > 1000)
        return MG_FAIL(MG_ERR_USAGE, "--tokenizer-model: the path is too long: %.60s...", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(dir, sizeof dir, "%.1000s", path);
        snprintf(file, sizeof file, "%.1000s/tokenizer.json", path);
    } else {
        snprintf(file, sizeof file, "%.1000s", path);
        const char *slash = strrchr(path, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
    hf_load L = {.path = file, .no_special_tokens = no_special_tokens};
    char *buf = NULL;
    size_t size = 0;
    mg_status st = MG_OK;
    MG_CHECK(mg_bpe_create(&L.t));
    snprintf(L.t->base.name, sizeof L.t->base.name, "HuggingFaceTokenizer %.1000s", file);
    MG_CHECK_GOTO(mg_file_read(file, &buf, &size), st, fail);
    MG_CHECK_GOTO(mg_tok_json_parse(file, buf, size, &L.root), st, fail);
    MG_CHECK_GOTO(load_tokenizer(&L), st, fail);
    MG_CHECK_GOTO(load_config(&L, dir), st, fail);
    *out = &L.t->base;
    L.t = NULL;
fail:
    cJSON_Delete(L.root);
    mg_tok_strmap_free(&L.vocab);
    free(L.id_str);
    free(buf);
    mg_tokenizer_free(L.t ? &L.t->base : NULL);
    return st;
}
