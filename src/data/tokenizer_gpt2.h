/* GPT2BPETokenizer's loader (tokenizer_gpt2.c): GPT-2's encoder.json and vocab.bpe into a
 * tokenizer of the data/tokenizer.h interface. Most callers go through mg_tokenizer_load with
 * --tokenizer-type; this is for code that handles GPT-2 files as such (convert).
 * Exports: mg_tokenizer_gpt2_load. Needs: data/tokenizer. */
#ifndef MG_DATA_TOKENIZER_GPT2_H
#define MG_DATA_TOKENIZER_GPT2_H

#include "data/tokenizer.h"

/* vocab_file: encoder.json ({"token": id, ...}); merge_file: vocab.bpe ("#version" line, then
 * "left right" per line, in rank order). Errors name the file and the entry or line. */
mg_status mg_tokenizer_gpt2_load(mg_tokenizer **out, const char *vocab_file,
                                 const char *merge_file);

#endif
