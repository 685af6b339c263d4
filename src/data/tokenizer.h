/* Text tokenizers behind one interface, chosen by Megatron-LM's --tokenizer-type:
 *   GPT2BPETokenizer      --vocab-file encoder.json --merge-file vocab.bpe (tokenizer_gpt2.c)
 *   HuggingFaceTokenizer  --tokenizer-model DIR or DIR/tokenizer.json: byte-level BPE
 *                         tokenizer.json files (Llama 3, Qwen2, GPT-NeoX, Mistral-Nemo style;
 *                         tokenizer_hf.c)
 *   SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer
 *                         --tokenizer-model FILE.model, through libsentencepiece (tokenizer_spm.c)
 * Each encodes as current Megatron-LM's tokenizer.tokenize(text) does (see each loader's notes);
 * vocab_size and eod are what Megatron reports as tokenizer.vocab_size and tokenizer.eod.
 *
 * Threads: an mg_tokenizer is immutable after load and shared; each thread encodes through its
 * own mg_tokenizer_worker (scratch buffers, caches).
 * Exports: mg_tokenizer, mg_tokenizer_worker, mg_tokenizer_spec, mg_tokenizer_*.
 * Needs: core/status (the implementations: PCRE2, cJSON, utf8proc, libsentencepiece). */
#ifndef MG_DATA_TOKENIZER_H
#define MG_DATA_TOKENIZER_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Immutable after load; share between threads. */
typedef struct mg_tokenizer mg_tokenizer;
/* Per-thread encoding state. */
typedef struct mg_tokenizer_worker mg_tokenizer_worker;

/* What to load: Megatron's tokenizer flags. Unused fields may be NULL. */
typedef struct {
    const char *type;       /* --tokenizer-type */
    const char *vocab_file; /* --vocab-file (GPT2BPETokenizer) */
    const char *merge_file; /* --merge-file (GPT2BPETokenizer) */
    const char *model;      /* --tokenizer-model (HuggingFaceTokenizer, SentencePiece types) */
    bool no_special_tokens; /* --tokenizer-hf-no-include-special-tokens: no BOS/EOS from the
                               tokenizer.json post-processor (HuggingFaceTokenizer only) */
} mg_tokenizer_spec;

/* The --tokenizer-type values mg_tokenizer_load knows, for messages. */
#define MG_TOKENIZER_TYPES                                                                         \
    "GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "                             \
    "GPTSentencePieceTokenizer or Llama2Tokenizer"

/* 1 when type is one of MG_TOKENIZER_TYPES (whether or not this build can load it). */
int mg_tokenizer_known_type(const char *type);
/* 1 when type reads --tokenizer-model (every known type but GPT2BPETokenizer). */
int mg_tokenizer_type_uses_model(const char *type);

/* Loads the tokenizer spec names. Errors are one line naming the file and the field or entry;
 * a file feature that is not implemented is MG_ERR_UNSUPPORTED naming it. */
mg_status mg_tokenizer_load(mg_tokenizer **out, const mg_tokenizer_spec *spec);
void mg_tokenizer_free(mg_tokenizer *t);

int mg_tokenizer_vocab_size(const mg_tokenizer *t); /* Megatron's tokenizer.vocab_size */
int32_t mg_tokenizer_eod(const mg_tokenizer *t);    /* Megatron's tokenizer.eod; -1: none */
int32_t mg_tokenizer_bos(const mg_tokenizer *t);    /* beginning of sequence; -1: none */
/* "HuggingFaceTokenizer tests/x/tokenizer.json": the type and the file, for messages. */
const char *mg_tokenizer_name(const mg_tokenizer *t);

mg_status mg_tokenizer_worker_create(const mg_tokenizer *t, mg_tokenizer_worker **out);
void mg_tokenizer_worker_free(mg_tokenizer_worker *w);

/* Appends the ids of text[0..len) (UTF-8) to *ids (realloc-grown; *n and *cap updated): one
 * call is one Megatron tokenizer.tokenize(text) call, so ids a tokenizer adds to every text
 * (Llama 3's <|begin_of_text|>) appear once per call. Invalid UTF-8 must not crash. */
mg_status mg_tokenizer_encode(mg_tokenizer_worker *w, const char *text, size_t len, int32_t **ids,
                              size_t *n, size_t *cap);
/* Decodes ids into a malloc'd NUL-terminated UTF-8 string; ids outside the vocabulary are an
 * error. Special tokens are kept as their text (Megatron's detokenize does). */
mg_status mg_tokenizer_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len);
/* The raw bytes of token id (not NUL-terminated; *len set), or NULL when id is outside the
 * vocabulary or the tokenizer has no byte-level form (SentencePiece). */
const char *mg_tokenizer_id_bytes(const mg_tokenizer *t, int32_t id, size_t *len);

#endif
