/* Internals shared by tokenizer_gpt2.c (loading, decoding) and tokenizer_encode.c (encoding).
 * Not part of the module's interface: include tokenizer_gpt2.h instead.
 * Needs: PCRE2 (8-bit). */
#ifndef MG_DATA_TOKENIZER_GPT2_INTERNAL_H
#define MG_DATA_TOKENIZER_GPT2_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/tokenizer_gpt2.h"

/* One merge rule: the pair (left, right) of ids, packed as left << 32 | right, merges into id at
 * rank (its 0-based line among the merges). Empty slots have key MG_TOK_EMPTY. */
typedef struct {
    uint64_t key;
    uint32_t rank;
    int32_t id;
} mg_tok_merge;

#define MG_TOK_EMPTY UINT64_MAX

struct mg_tokenizer {
    int vocab_size;
    int32_t eod;
    int32_t byte_id[256]; /* id of the one-byte token for each byte value */
    char *bytes;          /* raw bytes of every token, concatenated in id order */
    uint32_t *off;        /* (vocab_size + 1): token i is bytes[off[i] .. off[i + 1]) */
    mg_tok_merge *merges; /* (1 << merge_bits) open-addressing table, linear probing */
    int merge_bits;
    int n_merges;
    pcre2_code *re; /* GPT-2's pre-tokenisation pattern, JIT-compiled when jit != 0 */
    int jit;
};

static inline uint32_t mg_tok_merge_slot(uint64_t key, int bits) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

/* The merge rule for the adjacent pair (a, b), or NULL when the pair never merges. */
static inline const mg_tok_merge *mg_tok_merge_find(const mg_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t mask = (1u << t->merge_bits) - 1;
    for (uint32_t i = mg_tok_merge_slot(key, t->merge_bits);; i = (i + 1) & mask) {
        const mg_tok_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == MG_TOK_EMPTY) return NULL;
    }
}

/* Compiles the pre-tokenisation pattern into t->re (JIT when available). */
mg_status mg_tok_compile_pattern(mg_tokenizer *t);

#endif
