/* GPT-2 byte-level BPE tokenizer (what Megatron-LM's --tokenizer-type GPT2BPETokenizer does):
 * the text is split into pre-tokens by GPT-2's regular expression (through PCRE2, JIT-compiled),
 * each pre-token's bytes are mapped to printable code points (the byte-to-unicode table) and
 * merged pairwise by rank (lowest rank first) into vocabulary ids.
 *
 * "<|endoftext|>" written in the text is the special token 50256, as Hugging Face's
 * GPT2TokenizerFast (and so current Megatron-LM's GPT2BPETokenizer, built on it) encodes it; the
 * text around it is encoded normally. Callers append mg_tokenizer_eod() themselves
 * (preprocess's --append-eod).
 *
 * Threads: an mg_tokenizer is immutable after load and shared; each thread encodes through its
 * own mg_tokenizer_worker (PCRE2 match data, a bounded word cache, scratch buffers).
 * Exports: mg_tokenizer, mg_tokenizer_worker, mg_tokenizer_*. Needs: core/status, PCRE2, cJSON. */
#ifndef MG_DATA_TOKENIZER_GPT2_H
#define MG_DATA_TOKENIZER_GPT2_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

/* Immutable after load; share between threads. */
typedef struct mg_tokenizer mg_tokenizer;
/* Per-thread: PCRE2 match data, word cache. */
typedef struct mg_tokenizer_worker mg_tokenizer_worker;

/* vocab_file: encoder.json ({"token": id, ...}); merge_file: vocab.bpe ("#version" line, then
 * "left right" per line, in rank order). Errors name the file and the entry or line. */
mg_status mg_tokenizer_gpt2_load(mg_tokenizer **out, const char *vocab_file,
                                 const char *merge_file);
void mg_tokenizer_free(mg_tokenizer *t);
int mg_tokenizer_vocab_size(const mg_tokenizer *t); /* 50257 for GPT-2 */
int32_t mg_tokenizer_eod(const mg_tokenizer *t);    /* id of <|endoftext|>, 50256 */

mg_status mg_tokenizer_worker_create(const mg_tokenizer *t, mg_tokenizer_worker **out);
void mg_tokenizer_worker_free(mg_tokenizer_worker *w);

/* Appends the ids of text[0..len) to *ids (realloc-grown; *n and *cap updated). Text is UTF-8;
 * invalid UTF-8 must not crash (encode its bytes as the byte-level BPE does).
 * Here: each run of bytes that is not valid UTF-8 is a pre-token of its own (the pattern matches
 * no part of it), so the ids always spell the input byte for byte. Errors: MG_ERR_NOMEM. */
mg_status mg_tokenizer_encode(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                              size_t *n, size_t *cap);
/* Decodes ids into a malloc'd NUL-terminated UTF-8 string (bytes that do not form valid UTF-8 are
 * emitted as U+FFFD, like Python's errors='replace'); ids outside the vocabulary are an error. */
mg_status mg_tokenizer_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len);
/* The raw bytes of token id (not NUL-terminated; *len set), or NULL when id is outside the
 * vocabulary. Concatenating the bytes of encode's ids gives back the input exactly, even where
 * the input is not valid UTF-8. */
const char *mg_tokenizer_id_bytes(const mg_tokenizer *t, int32_t id, size_t *len);

#endif
