/* Before pre-tokenisation (tokenizer_bpe.h, steps 1-2): added-token matching, UTF-8 runs, NFC.
 * Internal to the byte-level BPE engine. Needs: data/tokenizer_bpe, utf8proc (optional). */
#ifndef MG_DATA_TOKENIZER_SPLIT_H
#define MG_DATA_TOKENIZER_SPLIT_H

#include "core/utf8.h"
#include "data/tokenizer_bpe.h"

/* The first added token of a in s[from..len): 1 with its start, length and id; 0 when none.
 * Leftmost first; the longest at that position. */
int mg_bpe_added_find(const mg_tok_added *a, const unsigned char *s, size_t len, size_t from,
                      size_t *start, size_t *tlen, int32_t *id);

/* A worker's NFC scratch. */
typedef struct {
    unsigned char *buf; /* (cap) the normalised text */
    size_t len, cap;
    int32_t *cp; /* (cp_cap) code points */
    size_t cp_cap;
} mg_nfc_buf;

/* 1 when this build has utf8proc (NFC). */
int mg_bpe_nfc_available(void);
/* *out: the NFC form of s[0..n): s itself when already NFC by a quick check, else w's buffer
 * (valid until the next call). Runs of invalid UTF-8 are kept as they are. */
mg_status mg_bpe_nfc(mg_nfc_buf *w, const unsigned char *s, size_t n, const unsigned char **out,
                     size_t *out_len);
void mg_bpe_nfc_free(mg_nfc_buf *w);

#endif
