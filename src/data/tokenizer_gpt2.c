/* GPT-2 tokenizer: loading encoder.json and vocab.bpe, decoding, accessors. Encoding is in
 * tokenizer_encode.c. The files are those Megatron-LM reads for GPT2BPETokenizer: the vocabulary
 * maps token strings, written in GPT-2's byte-to-unicode alphabet, to ids; the merge file lists
 * one "left right" pair per line in rank order after a "#version" line. */
#include "data/tokenizer_gpt2_internal.h"

#include "core/file.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALPHABET = 324 }; /* code points 0..323 hold GPT-2's byte-to-unicode alphabet */

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

/* ---- string -> id map used while loading (token strings as written in the vocabulary) ---- */

typedef struct {
    const char **str; /* (n) token string of each id, pointing into the cJSON tree */
    int32_t *slot;    /* (mask + 1) ids, -1 empty */
    uint32_t mask;
} str_map;

static uint32_t str_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The id of the token s[0..n), or -1. */
static int32_t str_map_find(const str_map *m, const char *s, size_t n) {
    for (uint32_t i = str_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (strncmp(m->str[id], s, n) == 0 && m->str[id][n] == '\0') return id;
    }
}

/* ---- encoder.json ---- */

static void json_error_position(const char *buf, size_t size, size_t *line, size_t *byte) {
    const char *ep = cJSON_GetErrorPtr();
    size_t at = ep && ep >= buf && ep <= buf + size ? (size_t)(ep - buf) : 0;
    *line = 1;
    for (size_t i = 0; i < at; i++) *line += buf[i] == '\n';
    *byte = at;
}

/* Fills t->vocab_size and m (str, slot) from the parsed vocabulary. */
static mg_status load_vocab(const char *path, cJSON *root, str_map *m, mg_tokenizer *t) {
    if (!cJSON_IsObject(root))
        return MG_FAIL(MG_ERR_FORMAT, "%s: not a JSON object mapping tokens to ids", path);
    int n = cJSON_GetArraySize(root);
    if (n <= 0) return MG_FAIL(MG_ERR_FORMAT, "%s: the vocabulary is empty", path);
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap <<= 1;
    m->str = calloc((size_t)n, sizeof *m->str);
    m->slot = malloc(cap * sizeof *m->slot);
    m->mask = cap - 1;
    if (!m->str || !m->slot)
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the map of %d tokens", path, n);
    memset(m->slot, 0xff, cap * sizeof *m->slot);
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
        size_t len = strlen(s);
        uint32_t i = str_hash(s, len) & m->mask;
        for (; m->slot[i] >= 0; i = (i + 1) & m->mask)
            if (strcmp(m->str[m->slot[i]], s) == 0)
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s: entry %d: token '%.40s' appears twice (ids %d "
                               "and %d)",
                               path, entry, s, m->slot[i], id);
        m->str[id] = s;
        m->slot[i] = id;
    }
    t->vocab_size = n;
    return MG_OK;
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

/* Raw bytes of every token (t->bytes, t->off), the one-byte tokens and <|endoftext|>. */
static mg_status token_bytes(const char *path, const str_map *m, mg_tokenizer *t) {
    int cp_of_byte[256], byte_of_cp[ALPHABET];
    byte_alphabet(cp_of_byte, byte_of_cp);
    size_t total = 0;
    for (int id = 0; id < t->vocab_size; id++) total += strlen(m->str[id]);
    t->bytes = malloc(total + 1);
    t->off = malloc(((size_t)t->vocab_size + 1) * sizeof *t->off);
    if (!t->bytes || !t->off || total > UINT32_MAX)
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %zu bytes of tokens", path, total);
    size_t at = 0;
    for (int id = 0; id < t->vocab_size; id++) {
        t->off[id] = (uint32_t)at;
        const unsigned char *p = (const unsigned char *)m->str[id];
        while (*p) {
            int cp = next_cp(&p);
            if (cp < 0 || cp >= ALPHABET || byte_of_cp[cp] < 0)
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s: token '%.40s' (id %d) has a character outside GPT-2's "
                               "byte-to-unicode alphabet",
                               path, m->str[id], id);
            t->bytes[at++] = (char)byte_of_cp[cp];
        }
    }
    t->off[t->vocab_size] = (uint32_t)at;
    for (int b = 0; b < 256; b++) {
        char u[3];
        int cp = cp_of_byte[b], n = cp < 0x80 ? 1 : 2;
        if (n == 1)
            u[0] = (char)cp;
        else
            u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f));
        t->byte_id[b] = str_map_find(m, u, (size_t)n);
        if (t->byte_id[b] < 0)
            return MG_FAIL(MG_ERR_FORMAT, "%s: no token for the single byte 0x%02x ('%.*s')", path,
                           b, n, u);
    }
    t->eod = str_map_find(m, "<|endoftext|>", 13);
    if (t->eod < 0) return MG_FAIL(MG_ERR_FORMAT, "%s: no '<|endoftext|>' token", path);
    return MG_OK;
}

/* ---- vocab.bpe ---- */

static mg_status load_merges(const char *path, const char *vocab_path, char *buf, size_t size,
                             const str_map *m, mg_tokenizer *t) {
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += buf[i] == '\n';
    t->merge_bits = 4;
    while ((1ull << t->merge_bits) < 2 * lines) t->merge_bits++;
    size_t cap = (size_t)1 << t->merge_bits;
    t->merges = malloc(cap * sizeof *t->merges);
    char *cat = malloc(size + 1);
    if (!t->merges || !cat) {
        free(cat);
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate the merge table", path);
    }
    for (size_t i = 0; i < cap; i++) t->merges[i].key = MG_TOK_EMPTY;
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
        if (len == 0 && !nl) break; /* no newline at the end */
        if (len == 0) {
            if (e + 1 >= end) break; /* the final newline */
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: empty line (expected 'left right')", path, line);
            goto done;
        }
        if (!sp) {
            s = MG_FAIL(MG_ERR_FORMAT,
                        "%s:%d: merge line '%.*s' has no space (expected 'left right')", path, line,
                        (int)(len < 40 ? len : 40), p);
            goto done;
        }
        size_t ll = (size_t)(sp - p), rl = len - ll - 1;
        if (ll == 0 || rl == 0 || memchr(sp + 1, ' ', rl)) {
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: '%.*s' is not two tokens separated by one space",
                        path, line, (int)(len < 40 ? len : 40), p);
            goto done;
        }
        memcpy(cat, p, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t a = str_map_find(m, p, ll), b = str_map_find(m, sp + 1, rl);
        int32_t id = str_map_find(m, cat, ll + rl);
        const char *missing = a < 0 ? "left part" : b < 0 ? "right part" : id < 0 ? "result" : NULL;
        if (missing) {
            s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: merge '%.*s': its %s is not in the vocabulary %s",
                        path, line, (int)(len < 40 ? len : 40), p, missing, vocab_path);
            goto done;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t i = mg_tok_merge_slot(key, t->merge_bits);
        for (; t->merges[i].key != MG_TOK_EMPTY; i = (i + 1) & (uint32_t)(cap - 1))
            if (t->merges[i].key == key) {
                s = MG_FAIL(MG_ERR_FORMAT, "%s:%d: merge '%.*s' repeats line %u", path, line,
                            (int)(len < 40 ? len : 40), p, t->merges[i].rank + (uint32_t)first);
                goto done;
            }
        t->merges[i] = (mg_tok_merge){key, (uint32_t)t->n_merges++, id};
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
    str_map m = {0};
    mg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the tokenizer");
    MG_CHECK_GOTO(mg_file_read(vocab_file, &vbuf, &vsize), s, fail);
    MG_CHECK_GOTO(mg_file_read(merge_file, &mbuf, &msize), s, fail);
    root = cJSON_ParseWithLength(vbuf, vsize);
    if (!root) {
        size_t line, byte;
        json_error_position(vbuf, vsize, &line, &byte);
        s = MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON (line %zu, byte %zu)", vocab_file, line,
                    byte);
        goto fail;
    }
    MG_CHECK_GOTO(load_vocab(vocab_file, root, &m, t), s, fail);
    MG_CHECK_GOTO(token_bytes(vocab_file, &m, t), s, fail);
    MG_CHECK_GOTO(load_merges(merge_file, vocab_file, mbuf, msize, &m, t), s, fail);
    MG_CHECK_GOTO(mg_tok_compile_pattern(t), s, fail);
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(root);
    free(m.str);
    free(m.slot);
    free(vbuf);
    free(mbuf);
    mg_tokenizer_free(t);
    return s;
}

void mg_tokenizer_free(mg_tokenizer *t) {
    if (!t) return;
    pcre2_code_free(t->re);
    free(t->bytes);
    free(t->off);
    free(t->merges);
    free(t);
}

int mg_tokenizer_vocab_size(const mg_tokenizer *t) {
    return t->vocab_size;
}
int32_t mg_tokenizer_eod(const mg_tokenizer *t) {
    return t->eod;
}

const char *mg_tokenizer_id_bytes(const mg_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

/* ---- decoding ---- */

/* Copies s[0..n) to out, replacing each maximal ill-formed subsequence by U+FFFD (what Python's
 * bytes.decode('utf-8', errors='replace') does). Returns the bytes written (at most 3n). */
static size_t utf8_replace(const unsigned char *s, size_t n, char *out) {
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        int need = 0;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        size_t j = i + 1;
        int got = 0;
        if (need && j < n && s[j] >= lo && s[j] <= hi) {
            j++, got++;
            while (got < need && j < n && (s[j] & 0xc0) == 0x80) j++, got++;
        }
        if (need && got == need) {
            memcpy(out + o, s + i, j - i);
            o += j - i;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
        i = j;
    }
    return o;
}

mg_status mg_tokenizer_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return MG_FAIL(MG_ERR_FORMAT,
                           "decode: id %d at position %zu is outside the vocabulary "
                           "(0..%d)",
                           ids[i], i, t->vocab_size - 1);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
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
