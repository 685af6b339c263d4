/* What the byte-level BPE engine does before pre-tokenisation (tokenizer_bpe.h, steps 1-2):
 * finding added tokens in a text (Hugging Face's AddedVocabulary: leftmost match first, the
 * longest one at a position, as its Aho-Corasick automaton in LeftmostLongest mode) and NFC
 * normalisation (through utf8proc, the normalizer of Qwen2 and GPT-NeoX tokenizer.json files). */
#include "data/tokenizer_split.h"

#include <stdlib.h>
#include <string.h>

#ifdef MG_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

mg_status mg_bpe_added_set(mg_bpe *t, int which, const char *const *s, const size_t *len,
                           const int32_t *id, int n) {
    mg_tok_added *a = &t->added[which];
    size_t total = 0;
    for (int i = 0; i < n; i++) total += len[i];
    a->bytes = malloc(total + 1);
    a->off = malloc(((size_t)n + 1) * sizeof *a->off);
    a->id = malloc(((size_t)n + 1) * sizeof *a->id);
    a->next = malloc(((size_t)n + 1) * sizeof *a->next);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!a->bytes || !a->off || !a->id || !a->next || !order) {
        free(order);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate %d added tokens", n);
    }
    a->n = n;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        a->off[i] = (uint32_t)at;
        memcpy(a->bytes + at, s[i], len[i]);
        at += len[i];
        a->id[i] = id[i];
        order[i] = i;
    }
    a->off[n] = (uint32_t)at;
    /* candidates of each first byte, longest first (a stable insertion sort: n is small) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && len[order[j]] > len[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    int32_t tail[256];
    for (int b = 0; b < 256; b++) a->head[b] = tail[b] = -1;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        if (len[i] == 0) continue; /* matches nothing */
        const unsigned char *p = (const unsigned char *)a->bytes + a->off[i];
        a->next[i] = -1;
        if (tail[p[0]] < 0)
            a->head[p[0]] = i;
        else
            a->next[tail[p[0]]] = i;
        tail[p[0]] = i;
        if (len[i] == 1)
            a->single[p[0]] = 1;
        else
            a->pair[(p[0] << 8 | p[1]) >> 3] |= (uint8_t)(1u << (p[1] & 7));
    }
    free(order);
    return MG_OK;
}

int mg_bpe_added_find(const mg_tok_added *a, const unsigned char *s, size_t len, size_t from,
                      size_t *start, size_t *tlen, int32_t *id) {
    if (a->n == 0) return 0;
    for (size_t p = from; p < len; p++) {
        unsigned b0 = s[p];
        if (a->head[b0] < 0) continue;
        if (!a->single[b0]) {
            if (p + 1 >= len) continue;
            unsigned key = b0 << 8 | s[p + 1];
            if (!(a->pair[key >> 3] & (1u << (key & 7)))) continue;
        }
        for (int32_t k = a->head[b0]; k >= 0; k = a->next[k]) {
            size_t l = a->off[k + 1] - a->off[k];
            if (l <= len - p && !memcmp(s + p, a->bytes + a->off[k], l)) {
                *start = p, *tlen = l, *id = a->id[k];
                return 1;
            }
        }
    }
    return 0;
}

#ifdef MG_HAVE_UTF8PROC
int mg_bpe_nfc_available(void) {
    return 1;
}

static mg_status nfc_reserve(mg_nfc_buf *w, size_t more) {
    if (w->len + more <= w->cap) return MG_OK;
    size_t cap = 2 * (w->len + more) + 64;
    unsigned char *p = realloc(w->buf, cap);
    if (!p) return MG_FAIL(MG_ERR_NOMEM, "NFC: cannot allocate %zu bytes", cap);
    w->buf = p, w->cap = cap;
    return MG_OK;
}

static mg_status nfc_copy(mg_nfc_buf *w, const unsigned char *s, size_t n) {
    if (n == 0) return MG_OK; /* w->buf may still be NULL */
    MG_CHECK(nfc_reserve(w, n));
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    return MG_OK;
}

/* Appends the NFC form of the valid UTF-8 s[0..n) to w's buffer. */
static mg_status nfc_valid(mg_nfc_buf *w, const unsigned char *s, size_t n) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t cps = utf8proc_decompose(s, (utf8proc_ssize_t)n, NULL, 0, opt);
    if (cps < 0) return MG_FAIL(MG_ERR_INTERNAL, "NFC: utf8proc: %s", utf8proc_errmsg(cps));
    size_t need = (size_t)cps + 1;
    if (need > w->cp_cap) {
        int32_t *p = realloc(w->cp, need * sizeof *p);
        if (!p) return MG_FAIL(MG_ERR_NOMEM, "NFC: cannot allocate %zu code points", need);
        w->cp = p, w->cp_cap = need;
    }
    cps = utf8proc_decompose(s, (utf8proc_ssize_t)n, (utf8proc_int32_t *)w->cp, cps, opt);
    utf8proc_ssize_t bytes = cps < 0 ? cps : utf8proc_reencode((utf8proc_int32_t *)w->cp, cps, opt);
    if (bytes < 0) return MG_FAIL(MG_ERR_INTERNAL, "NFC: utf8proc: %s", utf8proc_errmsg(bytes));
    return nfc_copy(w, (const unsigned char *)w->cp, (size_t)bytes);
}

/* Appends the NFC form of s[0..n): each valid UTF-8 run normalised, invalid bytes as they are. */
static mg_status nfc_any(mg_nfc_buf *w, const unsigned char *s, size_t n) {
    size_t at = 0;
    while (at < n) {
        size_t v = mg_utf8_valid_prefix(s + at, n - at);
        if (v) MG_CHECK(nfc_valid(w, s + at, v));
        at += v;
        size_t bad = mg_utf8_invalid_prefix(s + at, n - at);
        if (bad) MG_CHECK(nfc_copy(w, s + at, bad));
        at += bad;
    }
    return MG_OK;
}

/* The length of the character at s[0..n) when NFC leaves it alone whatever its neighbours and
 * no composition crosses the boundary before it (canonical combining class 0, NFC_Quick_Check
 * Yes, never the second character of a composition); 0 otherwise. These are U+0000..U+02FF,
 * kana but the two combining sound marks, CJK ideographs (U+3400..U+4DBF, U+4E00..U+9FFF),
 * Hangul syllables and U+1F300..U+1FAFF (emoji), checked against Python's unicodedata (Unicode
 * 14); the rest goes through utf8proc. */
static size_t stable_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c < 0xcc) /* U+0080..U+02FF */
        return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe3 && c <= 0xed) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
        unsigned cp = (c & 0x0f) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
        return (cp >= 0x3040 && cp < 0x3099) || (cp >= 0x309b && cp < 0x3100) ||
                       (cp >= 0x3400 && cp < 0x4dc0) || (cp >= 0x4e00 && cp < 0xa000) ||
                       (cp >= 0xac00 && cp < 0xd7a4)
                   ? 3
                   : 0;
    }
    if (c == 0xf0 && n >= 4 && s[1] == 0x9f && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80) {
        unsigned cp = 0x1f000 | (s[2] & 0x3fu) << 6 | (s[3] & 0x3fu);
        return cp >= 0x1f300 && cp < 0x1fb00 ? 4 : 0;
    }
    return 0;
}

/* A stable character starts a segment that normalises independently of what comes before, so
 * the text is cut before each one: segments of stable characters only are copied, the others
 * (from the stable character before the first unstable one to the next stable one) go through
 * utf8proc. Text of stable characters only is returned as it is. */
mg_status mg_bpe_nfc(mg_nfc_buf *w, const unsigned char *s, size_t n, const unsigned char **out,
                     size_t *out_len) {
    size_t i = 0, seg = 0, l;
    while (i < n && (l = stable_char(s + i, n - i))) i += l;
    if (i == n) {
        *out = s, *out_len = n;
        return MG_OK;
    }
    w->len = 0;
    int unstable = 0;
    for (i = 0; i < n;) {
        l = stable_char(s + i, n - i);
        if (l) {
            if (unstable) { /* a boundary: the unstable segment ends here */
                MG_CHECK(nfc_any(w, s + seg, i - seg));
                seg = i, unstable = 0;
            }
            i += l;
        } else {
            if (!unstable) { /* the stable characters before the previous one are final */
                size_t last = i;
                while (last > seg && (s[last - 1] & 0xc0) == 0x80) last--;
                if (last > seg) last--;
                MG_CHECK(nfc_copy(w, s + seg, last - seg));
                seg = last;
            }
            unstable = 1;
            i++;
            while (i < n && (s[i] & 0xc0) == 0x80) i++;
        }
    }
    if (unstable)
        MG_CHECK(nfc_any(w, s + seg, n - seg));
    else
        MG_CHECK(nfc_copy(w, s + seg, n - seg));
    *out = w->buf, *out_len = w->len;
    return MG_OK;
}
#else
int mg_bpe_nfc_available(void) {
    return 0;
}

mg_status mg_bpe_nfc(mg_nfc_buf *w, const unsigned char *s, size_t n, const unsigned char **out,
                     size_t *out_len) {
    (void)w, (void)s, (void)n, (void)out, (void)out_len;
    return MG_FAIL(MG_ERR_UNSUPPORTED, "NFC normalisation needs utf8proc: install libutf8proc-dev "
                                       "and rebuild");
}
#endif

void mg_bpe_nfc_free(mg_nfc_buf *w) {
    free(w->buf);
    free(w->cp);
    memset(w, 0, sizeof *w);
}
