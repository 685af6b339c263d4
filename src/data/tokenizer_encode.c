/* Byte-level BPE encoding (steps in tokenizer_bpe.h): added tokens and normalisation
 * (tokenizer_split.c), pre-tokenisation through PCRE2, a per-worker word cache and byte-pair
 * merges by rank. Megatron's gpt2_tokenization.py does the same with Python's `regex` module and a
 * dictionary of merge ranks; Hugging Face `tokenizers` with Oniguruma and a heap. */
#include "data/tokenizer_split.h"

#include <stdlib.h>
#include <string.h>

/* With PCRE2_UCP, \s \p{L} \p{N} are Unicode properties as in Python's `regex` and Oniguruma;
 * with PCRE2_MATCH_INVALID_UTF, bytes that are not valid UTF-8 match nothing and end up in the
 * gaps between matches (see split_level). */
enum {
    SHORT_WORD = 48,         /* words up to this many bytes merge by rescanning; longer: heap */
    CACHE_WORD = 64,         /* words up to this many bytes go through the cache */
    CACHE_BITS = 16,         /* slots; the cache is emptied when half of them are used */
    CACHE_BYTES = 1 << 20,   /* bytes of cached words, at most */
    CACHE_IDS = 1 << 18,     /* ids of cached words, at most */
    JIT_STACK_MAX = 8 << 20, /* bytes; the patterns' backtracking needs little */
};

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t byte_off, id_off;
    uint16_t len, n_ids;
} cache_slot;

typedef struct {
    mg_tokenizer_worker base;
    const mg_bpe *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    /* the interpreter's current valid-UTF-8 run of the subject, per pattern level */
    size_t run_lo[MG_BPE_MAX_PATTERNS], run_hi[MG_BPE_MAX_PATTERNS];
    mg_nfc_buf nfc;
    /* scratch for one word of up to cap bytes: pair ranks and results (merge_short), list links
     * and heap (merge_long); the symbols themselves live in the caller's id array */
    int32_t *rank, *merged, *link;
    uint64_t *heap;
    size_t cap;
    /* word cache: bytes -> ids, emptied when full so its size stays bounded */
    cache_slot *slots;
    uint32_t used;
    unsigned char *cbytes;
    int32_t *cids;
    uint32_t cbytes_used, cids_used;
} bpe_worker;

mg_status mg_bpe_worker_create(const mg_tokenizer *base, mg_tokenizer_worker **out) {
    *out = NULL;
    const mg_bpe *t = (const mg_bpe *)base;
    bpe_worker *w = calloc(1, sizeof *w);
    if (!w) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate a tokenizer worker");
    w->base.t = base;
    w->t = t;
    w->md = pcre2_match_data_create(1, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    w->stack = t->jit ? pcre2_jit_stack_create(32 << 10, JIT_STACK_MAX, NULL) : NULL;
    w->slots = calloc((size_t)1 << CACHE_BITS, sizeof *w->slots);
    w->cbytes = malloc(CACHE_BYTES);
    w->cids = malloc(CACHE_IDS * sizeof *w->cids);
    if (!w->md || !w->mctx || (t->jit && !w->stack) || !w->slots || !w->cbytes || !w->cids) {
        mg_bpe_worker_free(&w->base);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate a tokenizer worker");
    }
    if (w->stack) pcre2_jit_stack_assign(w->mctx, NULL, w->stack);
    *out = &w->base;
    return MG_OK;
}

void mg_bpe_worker_free(mg_tokenizer_worker *base) {
    bpe_worker *w = (bpe_worker *)base;
    if (!w) return;
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->stack);
    mg_bpe_nfc_free(&w->nfc);
    free(w->rank);
    free(w->merged);
    free(w->link);
    free(w->heap);
    free(w->slots);
    free(w->cbytes);
    free(w->cids);
    free(w);
}

static mg_status reserve_scratch(bpe_worker *w, size_t n) {
    if (n <= w->cap) return MG_OK;
    size_t cap = n < 256 ? 256 : n;
    if (n > INT32_MAX / 2)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "encode: a %zu-byte pre-token is too long", n);
    int32_t *rank = realloc(w->rank, cap * sizeof *rank);
    if (rank) w->rank = rank;
    int32_t *merged = realloc(w->merged, cap * sizeof *merged);
    if (merged) w->merged = merged;
    int32_t *link = realloc(w->link, 2 * cap * sizeof *link);
    if (link) w->link = link;
    uint64_t *heap = realloc(w->heap, 3 * cap * sizeof *heap);
    if (heap) w->heap = heap;
    if (!rank || !merged || !link || !heap)
        return MG_FAIL(MG_ERR_NOMEM, "encode: cannot allocate scratch for a %zu-byte word", n);
    w->cap = cap;
    return MG_OK;
}

/* ---- byte-pair merges ---- */

/* Merges sym[0..n) in place: repeatedly the adjacent pair of lowest rank, the leftmost one on a
 * tie, until no pair merges. Rescans an array of pair ranks: quadratic, fast for short words.
 * Returns the number of symbols left. */
static size_t merge_short(const mg_bpe *t, int32_t *sym, size_t n, int32_t *rank, int32_t *merged) {
    for (size_t i = 0; i + 1 < n; i++) {
        const mg_tok_merge *m = mg_tok_merge_find(t, sym[i], sym[i + 1]);
        rank[i] = m ? (int32_t)m->rank : INT32_MAX;
        merged[i] = m ? m->id : -1;
    }
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = merged[best];
        n--;
        memmove(sym + best + 1, sym + best + 2, (n - best - 1) * sizeof *sym);
        if (best + 1 < n) {
            memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof *rank);
            memmove(merged + best + 1, merged + best + 2, (n - best - 2) * sizeof *merged);
        }
        for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < n; i++) {
            const mg_tok_merge *m = mg_tok_merge_find(t, sym[i], sym[i + 1]);
            rank[i] = m ? (int32_t)m->rank : INT32_MAX;
            merged[i] = m ? m->id : -1;
        }
    }
    return n;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c], i = c;
    }
    h[i] = v;
    return top;
}

/* Pushes the pair starting at symbol i (rank << 32 | i: lowest rank, then leftmost, first). */
static void push_pair(const mg_bpe *t, const int32_t *sym, const int32_t *next, size_t n, int32_t i,
                      uint64_t *heap, size_t *hn) {
    if (i < 0 || next[i] >= (int32_t)n) return;
    const mg_tok_merge *m = mg_tok_merge_find(t, sym[i], sym[next[i]]);
    if (m) heap_push(heap, hn, (uint64_t)m->rank << 32 | (uint32_t)i);
}

/* The same merges as merge_short in O(n log n): symbols form a linked list over their original
 * positions, pairs wait in a min-heap and are checked against the list when popped. Every merge
 * pushes at most two pairs, so the heap holds fewer than 3n entries. */
static size_t merge_long(const mg_bpe *t, int32_t *sym, size_t n, int32_t *link, uint64_t *heap) {
    int32_t *next = link, *prev = link + n;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) next[i] = (int32_t)i + 1, prev[i] = (int32_t)i - 1;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, sym, next, n, (int32_t)i, heap, &hn);
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t i = (int32_t)(uint32_t)top;
        if (sym[i] < 0 || next[i] >= (int32_t)n) continue;
        const mg_tok_merge *m = mg_tok_merge_find(t, sym[i], sym[next[i]]);
        if (!m || m->rank != top >> 32) continue; /* stale: a neighbour merged since */
        int32_t j = next[i];
        sym[i] = m->id;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] < (int32_t)n) prev[next[j]] = i;
        push_pair(t, sym, next, n, prev[i], heap, &hn);
        push_pair(t, sym, next, n, i, heap, &hn);
    }
    size_t k = 0;
    for (int32_t i = 0; i < (int32_t)n; i = next[i]) sym[k++] = sym[i];
    return k;
}

/* ---- the word cache ---- */

static uint64_t hash_word(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 32;
    return h | 1; /* never 0, the empty mark */
}

/* ---- encoding ---- */

static mg_status grow_ids(int32_t **ids, size_t *cap, size_t need) {
    size_t cap2 = *cap < 1024 ? 1024 : *cap;
    while (cap2 < need) cap2 *= 2;
    int32_t *p = realloc(*ids, cap2 * sizeof *p);
    if (!p) return MG_FAIL(MG_ERR_NOMEM, "encode: cannot grow the id array to %zu ids", cap2);
    *ids = p;
    *cap = cap2;
    return MG_OK;
}

static mg_status push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n + 1 > *cap) MG_CHECK(grow_ids(ids, cap, *n + 1));
    (*ids)[(*n)++] = id;
    return MG_OK;
}

/* Appends the ids of one pre-token s[0..len) at out + *n (room for len ids is there). */
static mg_status encode_word(bpe_worker *w, const unsigned char *s, size_t len, int32_t *out,
                             size_t *n) {
    const mg_bpe *t = w->t;
    if (len == 1) {
        out[(*n)++] = t->byte_id[s[0]];
        return MG_OK;
    }
    uint64_t h = 0;
    uint32_t slot = 0, mask = (1u << CACHE_BITS) - 1;
    if (len <= CACHE_WORD) {
        h = hash_word(s, len);
        for (slot = (uint32_t)(h >> (64 - CACHE_BITS));; slot = (slot + 1) & mask) {
            const cache_slot *c = &w->slots[slot];
            if (c->hash == 0) break;
            if (c->hash == h && c->len == len && memcmp(w->cbytes + c->byte_off, s, len) == 0) {
                memcpy(out + *n, w->cids + c->id_off, c->n_ids * sizeof *out);
                *n += c->n_ids;
                return MG_OK;
            }
        }
    }
    int32_t *sym = out + *n;
    size_t k;
    int32_t whole = t->words.slot ? mg_bpe_word_find(t, s, len) : -1;
    if (whole >= 0) { /* ignore_merges: a pre-token that is a vocabulary entry is that entry */
        sym[0] = whole;
        k = 1;
    } else {
        for (size_t i = 0; i < len; i++) sym[i] = t->byte_id[s[i]];
        MG_CHECK(reserve_scratch(w, len));
        k = len <= SHORT_WORD ? merge_short(t, sym, len, w->rank, w->merged)
                              : merge_long(t, sym, len, w->link, w->heap);
    }
    *n += k;
    if (len > CACHE_WORD) return MG_OK;
    if (w->used >= (1u << (CACHE_BITS - 1)) || w->cbytes_used + len > CACHE_BYTES ||
        w->cids_used + k > CACHE_IDS) {
        memset(w->slots, 0, ((size_t)1 << CACHE_BITS) * sizeof *w->slots);
        w->used = w->cbytes_used = w->cids_used = 0;
        slot = (uint32_t)(h >> (64 - CACHE_BITS)); /* the home slot, free in the empty table */
    }
    cache_slot *c = &w->slots[slot];
    *c = (cache_slot){h, w->cbytes_used, w->cids_used, (uint16_t)len, (uint16_t)k};
    memcpy(w->cbytes + w->cbytes_used, s, len);
    memcpy(w->cids + w->cids_used, sym, k * sizeof *sym);
    w->cbytes_used += (uint32_t)len;
    w->cids_used += (uint32_t)k;
    w->used++;
    return MG_OK;
}

/* The next match of pattern `level` at or after pos in s[0..len): 1 with [*start, *end), 0 when
 * none, or a PCRE2 error code (< 0). pos is 0 for a new subject, else the end of the previous
 * match. The JIT matches the whole subject (PCRE2_MATCH_INVALID_UTF: invalid bytes match
 * nothing). The interpreter would check the subject for invalid UTF-8 from pos to its end on
 * every call (quadratic over a long text), so it matches each valid UTF-8 run of the subject as a
 * subject of its own, without the check: PCRE2 documents invalid sequences as barriers no match
 * or lookaround crosses, which is the same. */
static int next_match(bpe_worker *w, int level, const unsigned char *s, size_t len, size_t pos,
                      size_t *start, size_t *end) {
    const mg_bpe *t = w->t;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    if (t->jit) {
        int rc = pcre2_jit_match(t->re[level], s, len, pos, 0, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) return rc;
        *start = ov[0], *end = ov[1];
        return 1;
    }
    size_t *lo = &w->run_lo[level], *hi = &w->run_hi[level];
    if (pos == 0) *lo = *hi = 0;
    for (;;) {
        if (pos >= *hi) { /* the next run */
            pos += mg_utf8_invalid_prefix(s + pos, len - pos);
            if (pos >= len) return 0;
            *lo = pos;
            *hi = pos + mg_utf8_valid_prefix(s + pos, len - pos);
        }
        int rc = pcre2_match(t->re_valid[level], s + *lo, *hi - *lo, pos - *lo, PCRE2_NO_UTF_CHECK,
                             w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            pos = *hi;
            continue;
        }
        if (rc < 0) return rc;
        *start = *lo + ov[0], *end = *lo + ov[1];
        return 1;
    }
}

/* Pre-tokenises s[0..len) by the patterns from `level` on (Hugging Face's Split, behavior
 * Isolated: each match and each gap between matches is a piece for the next pattern), then
 * encodes each final piece. Bytes that are not valid UTF-8 match nothing: a run of them between
 * two matches is a piece of its own, merged like any other bytes, so the ids still spell the
 * input byte for byte. */
static mg_status split_level(bpe_worker *w, int level, const unsigned char *s, size_t len,
                             int32_t **ids, size_t *n, size_t *cap) {
    if (len == 0) return MG_OK;
    if (level == w->t->n_re) {
        if (*n + len > *cap) MG_CHECK(grow_ids(ids, cap, *n + len));
        return encode_word(w, s, len, *ids, n);
    }
    size_t pos = 0;
    while (pos < len) {
        size_t start = len, end = len;
        int rc = next_match(w, level, s, len, pos, &start, &end);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return MG_FAIL(MG_ERR_INTERNAL, "encode: PCRE2 match failed at byte %zu: %s", pos,
                           (char *)msg);
        }
        if (rc && end <= start)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "encode: pre-tokenizer pattern %d matched an empty piece at byte %zu; "
                           "empty matches are not supported",
                           level, start);
        MG_CHECK(split_level(w, level + 1, s + pos, start - pos, ids, n, cap));
        MG_CHECK(split_level(w, level + 1, s + start, end - start, ids, n, cap));
        pos = end;
    }
    return MG_OK;
}

/* A piece between the added tokens of the raw text: normalised, then cut at the added tokens
 * that match normalised text, then pre-tokenised. */
static mg_status encode_normalized(bpe_worker *w, const unsigned char *s, size_t len, int32_t **ids,
                                   size_t *n, size_t *cap) {
    const mg_bpe *t = w->t;
    if (len == 0) return MG_OK;
    if (t->nfc) MG_CHECK(mg_bpe_nfc(&w->nfc, s, len, &s, &len));
    size_t from = 0, start, tlen;
    int32_t id;
    while (mg_bpe_added_find(&t->added[1], s, len, from, &start, &tlen, &id)) {
        MG_CHECK(split_level(w, 0, s + from, start - from, ids, n, cap));
        MG_CHECK(push_id(ids, n, cap, id));
        from = start + tlen;
    }
    return split_level(w, 0, s + from, len - from, ids, n, cap);
}

mg_status mg_bpe_encode(mg_tokenizer_worker *base, const char *text, size_t len, int32_t **ids,
                        size_t *n, size_t *cap) {
    bpe_worker *w = (bpe_worker *)base;
    const mg_bpe *t = w->t;
    const unsigned char *s = (const unsigned char *)text;
    for (int i = 0; i < t->n_prefix; i++) MG_CHECK(push_id(ids, n, cap, t->prefix[i]));
    size_t from = 0, start, tlen;
    int32_t id;
    while (mg_bpe_added_find(&t->added[0], s, len, from, &start, &tlen, &id)) {
        MG_CHECK(encode_normalized(w, s + from, start - from, ids, n, cap));
        MG_CHECK(push_id(ids, n, cap, id));
        from = start + tlen;
    }
    MG_CHECK(encode_normalized(w, s + from, len - from, ids, n, cap));
    for (int i = 0; i < t->n_suffix; i++) MG_CHECK(push_id(ids, n, cap, t->suffix[i]));
    return MG_OK;
}
