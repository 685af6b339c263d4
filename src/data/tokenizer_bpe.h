/* The byte-level BPE engine shared by GPT2BPETokenizer (tokenizer_gpt2.c: encoder.json,
 * vocab.bpe) and HuggingFaceTokenizer (tokenizer_hf.c: tokenizer.json). Encoding
 * (tokenizer_encode.c, tokenizer_split.c), in the order of Hugging Face `tokenizers`:
 *   1. added tokens whose "normalized" is false are cut out of the raw text (leftmost, longest);
 *   2. each piece between them is normalised (NFC or nothing), then the added tokens whose
 *      "normalized" is true are cut out of it;
 *   3. each remaining piece is split by the pre-tokenisation patterns in turn (each pattern
 *      splits the pieces of the one before; matches and the gaps between them are pieces);
 *   4. each final piece (a pre-token) is merged byte pair by byte pair, lowest merge rank first
 *      (with ignore_merges, a pre-token that is a whole vocabulary entry is that entry);
 *   5. the post-processor's ids (Llama 3's <|begin_of_text|>) go before and after.
 * Loading helpers (tokenizer_bpe.c) build the tables from token strings written in GPT-2's
 * byte-to-unicode alphabet. Not part of the module's interface: include data/tokenizer.h.
 * Needs: PCRE2 (8-bit), utf8proc (NFC, optional). */
#ifndef MG_DATA_TOKENIZER_BPE_H
#define MG_DATA_TOKENIZER_BPE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/tokenizer_impl.h"

/* One merge rule: the pair (left, right) of ids, packed as left << 32 | right, merges into id at
 * rank (its 0-based place among the merges). Empty slots have key MG_TOK_EMPTY. */
typedef struct {
    uint64_t key;
    uint32_t rank;
    int32_t id;
} mg_tok_merge;

#define MG_TOK_EMPTY UINT64_MAX

enum { MG_BPE_MAX_PATTERNS = 8, MG_BPE_MAX_AFFIX = 8 };

/* Added tokens matched before pre-tokenisation, leftmost first, the longest at a position. */
typedef struct {
    int n;
    char *bytes;         /* contents, concatenated */
    uint32_t *off;       /* (n + 1): token i is bytes[off[i] .. off[i + 1]) */
    int32_t *id;         /* (n) */
    int32_t *next;       /* (n) next candidate with the same first byte (shorter or equal), -1 */
    int32_t head[256];   /* first candidate per first byte (the longest), -1: none */
    uint8_t pair[8192];  /* bit (b0 << 8 | b1): some token starts with bytes b0 b1 */
    uint8_t single[256]; /* 1: a one-byte token is this byte */
} mg_tok_added;

/* Whole tokens by their bytes (ignore_merges): open addressing over token ids, -1 empty. */
typedef struct {
    int32_t *slot;
    uint32_t mask;
} mg_tok_words;

typedef struct {
    mg_tokenizer base;
    int32_t byte_id[256]; /* id of the one-byte token for each byte value */
    char *bytes;          /* raw bytes of every token, concatenated in id order */
    uint32_t *off;        /* (vocab_size + 1): token i is bytes[off[i] .. off[i + 1]); an id
                             without a token (a hole in the ids) has no bytes */
    mg_tok_merge *merges; /* (1 << merge_bits) open-addressing table, linear probing */
    int merge_bits;
    int n_merges;
    /* pre-tokenisation, applied in order: re with PCRE2_MATCH_INVALID_UTF (JIT-compiled when
       jit != 0); re_valid the same without it, for the interpreter on valid UTF-8 runs */
    pcre2_code *re[MG_BPE_MAX_PATTERNS], *re_valid[MG_BPE_MAX_PATTERNS];
    int n_re;
    int jit;
    mg_tok_added added[2]; /* [0]: matched in the raw text, [1]: after normalisation */
    int nfc;               /* normalizer NFC */
    mg_tok_words words;    /* ignore_merges: slot == NULL when off */
    int32_t prefix[MG_BPE_MAX_AFFIX], suffix[MG_BPE_MAX_AFFIX]; /* post-processor ids */
    int n_prefix, n_suffix;
} mg_bpe;

static inline uint32_t mg_tok_merge_slot(uint64_t key, int bits) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

/* The merge rule for the adjacent pair (a, b), or NULL when the pair never merges. */
static inline const mg_tok_merge *mg_tok_merge_find(const mg_bpe *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t mask = (1u << t->merge_bits) - 1;
    for (uint32_t i = mg_tok_merge_slot(key, t->merge_bits);; i = (i + 1) & mask) {
        const mg_tok_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == MG_TOK_EMPTY) return NULL;
    }
}

/* ---- loading (tokenizer_bpe.c) ---- */

struct cJSON;
/* Parses buf[0..size) (path's contents); an error names the line and byte. */
mg_status mg_tok_json_parse(const char *path, const char *buf, size_t size, struct cJSON **out);

/* A new engine with its ops table set; the loader fills the rest. */
mg_status mg_bpe_create(mg_bpe **out);
/* A string -> id map over token strings (pointers kept, not copied). */
typedef struct {
    const char **str; /* (n) the string of each id, NULL: none */
    int32_t *slot;    /* (mask + 1) ids, -1 empty */
    uint32_t mask;
    int n;
} mg_tok_strmap;
mg_status mg_tok_strmap_init(mg_tok_strmap *m, int n_ids, int n_strings);
/* -1 when s[0..n) is absent */
int32_t mg_tok_strmap_find(const mg_tok_strmap *m, const char *s, size_t n);
/* Adds id -> s; the id of an equal string already there, or -1 when added. */
int32_t mg_tok_strmap_add(mg_tok_strmap *m, const char *s, int32_t id);
void mg_tok_strmap_free(mg_tok_strmap *m);
/* Sets t->bytes and t->off from id_str[0..vocab_size) (NULL: no token has that id), strings
 * written in the byte-to-unicode alphabet; strict: a character outside the alphabet is an error,
 * else such a string's own UTF-8 bytes are the token's (what Hugging Face's ByteLevel decoder
 * does). Sets t->byte_id from vocab (the model's vocabulary). */
mg_status mg_bpe_token_bytes(mg_bpe *t, const char *path, const char *const *id_str,
                             const mg_tok_strmap *vocab, int strict);
/* Adds merge (a, b) -> id at the next rank; 0 when the pair is already there (*rank set). */
int mg_bpe_merge_add(mg_bpe *t, int32_t a, int32_t b, int32_t id, uint32_t *rank);
/* Allocates the merge table for up to n merges. */
mg_status mg_bpe_merges_alloc(mg_bpe *t, size_t n, const char *path);
/* Compiles a pre-tokenisation pattern (Oniguruma syntax as Hugging Face writes it; PCRE2 with
 * UTF, UCP and invalid-UTF matching) or a literal string, appended to t->re. */
mg_status mg_bpe_add_pattern(mg_bpe *t, const char *pattern, int literal, const char *path);
/* GPT-2's pattern (ByteLevel's use_regex). */
extern const char mg_bpe_gpt2_pattern[];
/* Adds the added tokens (contents s[i] of lengths len[i], ids id[i]) to matcher which. */
mg_status mg_bpe_added_set(mg_bpe *t, int which, const char *const *s, const size_t *len,
                           const int32_t *id, int n);
/* Builds t->words from the ids of the model's vocabulary (ignore_merges), after
 * mg_bpe_token_bytes; mg_bpe_word_find: the id whose bytes are s[0..n), or -1. */
mg_status mg_bpe_words_build(mg_bpe *t, const mg_tok_strmap *m, const char *path);
int32_t mg_bpe_word_find(const mg_bpe *t, const unsigned char *s, size_t n);

/* ---- encoding (tokenizer_encode.c) ---- */
mg_status mg_bpe_worker_create(const mg_tokenizer *t, mg_tokenizer_worker **out);
void mg_bpe_worker_free(mg_tokenizer_worker *w);
mg_status mg_bpe_encode(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                        size_t *n, size_t *cap);

#endif
