/* Byte-level BPE: the tables the loaders fill (token bytes, merges, patterns, whole words), the
 * ops table, decoding. Contract in tokenizer_bpe.h. */
#include "data/tokenizer_bpe.h"
#include "core/utf8.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

enum { ALPHABET = 324 }; /* code points 0..323 hold GPT-2's byte-to-unicode alphabet */

const char mg_bpe_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
 * themselves; the other 68 bytes map, in increasing order, to U+0100..U+0143. */
static void byte_alphabet(int cp_of_byte[256], int byte_of_cp[ALPHABET]) {
    int next = 256;
    for (int i = 0; i < ALPHABET; i++) byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        cp_of_byte[b] = printable ? b : next++;
        byte_of_cp[cp_of_byte[b]] = b;
    }
}

/* Decodes one UTF-8 code point at *p (advancing it); -1 on a malformed sequence. */
static int next_cp(const unsigned char **p) {
    const unsigned char *s = *p;
    int c = s[0], need = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2 : 3;
    if (c >= 0x80 && (c < 0xc2 || c > 0xf4)) return -1;
    int cp = need == 0 ? c : c & (0x3f >> need);
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const int min_cp[] = {0, 0x80, 0x800, 0x10000}; /* shorter forms are overlong */
    if (cp < min_cp[need]) return -1;
    *p = s + need + 1;
    return cp;
}

mg_status mg_tok_json_parse(const char *path, const char *buf, size_t size, cJSON **out) {
    *out = cJSON_ParseWithLength(buf, size);
    if (*out) return MG_OK;
    const char *ep = cJSON_GetErrorPtr();
    size_t at = ep && ep >= buf && ep <= buf + size ? (size_t)(ep - buf) : 0, line = 1;
    for (size_t i = 0; i < at; i++) line += buf[i] == '\n';
    return MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON (line %zu, byte %zu)", path, line, at);
}

/* ---- string -> id map ---- */

static uint32_t str_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

mg_status mg_tok_strmap_init(mg_tok_strmap *m, int n_ids, int n_strings) {
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n_strings) cap <<= 1;
    m->n = n_ids;
    m->str = calloc((size_t)n_ids + 1, sizeof *m->str);
    m->slot = malloc(cap * sizeof *m->slot);
    m->mask = cap - 1;
    if (!m->str || !m->slot)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the map of %d tokens", n_strings);
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    return MG_OK;
}

int32_t mg_tok_strmap_find(const mg_tok_strmap *m, const char *s, size_t n) {
    for (uint32_t i = str_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (strncmp(m->str[id], s, n) == 0 && m->str[id][n] == '\0') return id;
    }
}

int32_t mg_tok_strmap_add(mg_tok_strmap *m, const char *s, int32_t id) {
    size_t len = strlen(s);
    uint32_t i = str_hash(s, len) & m->mask;
    for (; m->slot[i] >= 0; i = (i + 1) & m->mask)
        if (strcmp(m->str[m->slot[i]], s) == 0) return m->slot[i];
    m->str[id] = s;
    m->slot[i] = id;
    return -1;
}

void mg_tok_strmap_free(mg_tok_strmap *m) {
    free(m->str);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- token bytes ---- */

mg_status mg_bpe_token_bytes(mg_bpe *t, const char *path, const char *const *id_str,
                             const mg_tok_strmap *vocab, int strict) {
    int cp_of_byte[256], byte_of_cp[ALPHABET];
    byte_alphabet(cp_of_byte, byte_of_cp);
    int n = t->base.vocab_size;
    size_t total = 0;
    for (int id = 0; id < n; id++) total += id_str[id] ? strlen(id_str[id]) : 0;
    t->bytes = malloc(total + 1);
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    if (!t->bytes || !t->off || total > UINT32_MAX)
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %zu bytes of tokens", path, total);
    size_t at = 0;
    for (int id = 0; id < n; id++) {
        t->off[id] = (uint32_t)at;
        if (!id_str[id]) continue;
        const unsigned char *p = (const unsigned char *)id_str[id];
        size_t start = at;
        while (*p) {
            int cp = next_cp(&p);
            if (cp < 0 || cp >= ALPHABET || byte_of_cp[cp] < 0) {
                if (strict)
                    return MG_FAIL(MG_ERR_FORMAT,
                                   "%s: token '%.40s' (id %d) has a character outside GPT-2's "
                                   "byte-to-unicode alphabet",
                                   path, id_str[id], id);
                size_t len = strlen(id_str[id]); /* not byte-level: the string's own bytes */
                memcpy(t->bytes + start, id_str[id], len);
                at = start + len;
                break;
            }
            t->bytes[at++] = (char)byte_of_cp[cp];
        }
    }
    t->off[n] = (uint32_t)at;
    for (int b = 0; b < 256; b++) {
        char u[3];
        int cp = cp_of_byte[b], len = cp < 0x80 ? 1 : 2;
        if (len == 1)
            u[0] = (char)cp;
        else
            u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f));
        t->byte_id[b] = mg_tok_strmap_find(vocab, u, (size_t)len);
        if (t->byte_id[b] < 0)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: no token for the single byte 0x%02x ('%.*s'): not a byte-level "
                           "vocabulary",
                           path, b, len, u);
    }
    return MG_OK;
}

/* ---- merges ---- */

mg_status mg_bpe_merges_alloc(mg_bpe *t, size_t n, const char *path) {
    t->merge_bits = 4;
    while ((1ull << t->merge_bits) < 2 * (uint64_t)n + 2) t->merge_bits++;
    size_t cap = (size_t)1 << t->merge_bits;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the merge table", path);
    for (size_t i = 0; i < cap; i++) t->merges[i].key = MG_TOK_EMPTY;
    return MG_OK;
}

int mg_bpe_merge_add(mg_bpe *t, int32_t a, int32_t b, int32_t id, uint32_t *rank) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t mask = (1u << t->merge_bits) - 1, i = mg_tok_merge_slot(key, t->merge_bits);
    for (; t->merges[i].key != MG_TOK_EMPTY; i = (i + 1) & mask)
        if (t->merges[i].key == key) {
            *rank = t->merges[i].rank;
            return 0;
        }
    t->merges[i] = (mg_tok_merge){key, (uint32_t)t->n_merges++, id};
    return 1;
}

/* ---- patterns ---- */

mg_status mg_bpe_add_pattern(mg_bpe *t, const char *pattern, int literal, const char *path) {
    if (t->n_re == MG_BPE_MAX_PATTERNS)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer patterns", path,
                       MG_BPE_MAX_PATTERNS);
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL refuses UCP */
    for (int k = 0; k < 2; k++) {
        int err;
        PCRE2_SIZE at;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          opts | (k == 0 ? PCRE2_MATCH_INVALID_UTF : 0), &err, &at, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s: PCRE2 cannot compile the pre-tokenizer pattern '%.60s' at "
                           "character %zu: %s",
                           path, pattern, (size_t)at, (char *)msg);
        }
        if (k == 0)
            t->re[t->n_re] = re;
        else
            t->re_valid[t->n_re] = re;
    }
    /* Without JIT (a PCRE2 built without it, or an unsupported CPU) pcre2_match interprets. */
    int jit = pcre2_jit_compile(t->re[t->n_re], PCRE2_JIT_COMPLETE) == 0;
    t->jit = t->n_re == 0 ? jit : t->jit && jit;
    t->n_re++;
    return MG_OK;
}

/* ---- whole words (ignore_merges) ---- */

static uint32_t bytes_hash(const char *s, size_t n) {
    return str_hash(s, n) * 0x9E3779B1u;
}

mg_status mg_bpe_words_build(mg_bpe *t, const mg_tok_strmap *m, const char *path) {
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)m->n) cap <<= 1;
    t->words.slot = malloc(cap * sizeof *t->words.slot);
    if (!t->words.slot) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the word table", path);
    memset(t->words.slot, 0xff, cap * sizeof *t->words.slot);
    t->words.mask = cap - 1;
    for (int32_t id = 0; id < m->n; id++) {
        if (!m->str[id]) continue;
        const char *b = t->bytes + t->off[id];
        size_t len = t->off[id + 1] - t->off[id];
        uint32_t i = bytes_hash(b, len) & t->words.mask;
        while (t->words.slot[i] >= 0) i = (i + 1) & t->words.mask;
        t->words.slot[i] = id; /* equal byte strings: the first id is found first */
    }
    return MG_OK;
}

int32_t mg_bpe_word_find(const mg_bpe *t, const unsigned char *s, size_t n) {
    for (uint32_t i = bytes_hash((const char *)s, n) & t->words.mask;;
         i = (i + 1) & t->words.mask) {
        int32_t id = t->words.slot[i];
        if (id < 0) return -1;
        if (t->off[id + 1] - t->off[id] == n && !memcmp(t->bytes + t->off[id], s, n)) return id;
    }
}

/* ---- decoding ---- */

/* Copies s[0..n) to out, replacing each maximal ill-formed subsequence by U+FFFD (what Python's
 * bytes.decode('utf-8', errors='replace') and Rust's String::from_utf8_lossy do). Returns the
 * bytes written (at most 3n). */
static size_t utf8_replace(const unsigned char *s, size_t n, char *out) {
    size_t o = 0, i = 0;
    while (i < n) {
        int k = mg_utf8_seq(s + i, n - i);
        if (k > 0) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
        i += (size_t)(k > 0 ? k : -k);
    }
    return o;
}

/* ids are in 0..vocab_size-1 (mg_tokenizer_decode checked). */
static mg_status bpe_decode(const mg_tokenizer *base, const int32_t *ids, size_t n, char **text,
                            size_t *len) {
    const mg_bpe *t = (const mg_bpe *)base;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = t->off[ids[i]], b = t->off[ids[i] + 1];
        if (a == b)
            return MG_FAIL(MG_ERR_FORMAT, "decode: id %d at position %zu is not a token of %s",
                           ids[i], i, t->base.name);
        total += b - a;
    }
    unsigned char *raw = malloc(total + 1);
    char *out = raw && total < SIZE_MAX / 3 ? malloc(3 * total + 1) : NULL;
    if (!out) {
        free(raw);
        return MG_FAIL(MG_ERR_NOMEM, "decode: cannot allocate %zu bytes", 4 * total + 2);
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = t->off[ids[i]], b = t->off[ids[i] + 1];
        memcpy(raw + at, t->bytes + a, b - a);
        at += b - a;
    }
    *len = utf8_replace(raw, total, out);
    out[*len] = '\0';
    free(raw);
    char *shrunk = realloc(out, *len + 1);
    *text = shrunk ? shrunk : out;
    return MG_OK;
}

static const char *bpe_id_bytes(const mg_tokenizer *base, int32_t id, size_t *len) {
    const mg_bpe *t = (const mg_bpe *)base;
    *len = t->off[id + 1] - t->off[id];
    return *len ? t->bytes + t->off[id] : NULL;
}

static void bpe_destroy(mg_tokenizer *base) {
    mg_bpe *t = (mg_bpe *)base;
    for (int i = 0; i < t->n_re; i++) {
        pcre2_code_free(t->re[i]);
        pcre2_code_free(t->re_valid[i]);
    }
    for (int k = 0; k < 2; k++) {
        free(t->added[k].bytes);
        free(t->added[k].off);
        free(t->added[k].id);
        free(t->added[k].next);
    }
    free(t->words.slot);
    free(t->bytes);
    free(t->off);
    free(t->merges);
    free(t);
}

static const mg_tokenizer_ops k_bpe_ops = {
    .destroy = bpe_destroy,
    .worker_create = mg_bpe_worker_create,
    .worker_free = mg_bpe_worker_free,
    .encode = mg_bpe_encode,
    .decode = bpe_decode,
    .id_bytes = bpe_id_bytes,
};

mg_status mg_bpe_create(mg_bpe **out) {
    mg_bpe *t = calloc(1, sizeof *t);
    if (!t) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the tokenizer");
    t->base.ops = &k_bpe_ops;
    t->base.eod = t->base.bos = -1;
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 256; b++) t->added[k].head[b] = -1;
    *out = t;
    return MG_OK;
}
