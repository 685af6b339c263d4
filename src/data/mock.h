/* Synthetic training data in the spirit of Megatron's --mock-data: an endless stream of documents
 * whose tokens count up (1, 2, 3, ... then an end-of-document token), cut into samples of
 * seq_length + 1 tokens that overlap by one, as GPTDataset cuts real documents. Document lengths
 * come from the counter-based RNG, so sample i is a pure function of (seed, split, i).
 * Sample-for-sample equality with Megatron's MockGPTDataset (numpy PCG64) is not a goal here; the
 * --data-path (data/gpt_dataset.h) reproduces GPTDataset's indices exactly.
 * Exports: mg_mock_data, mg_mock_*. Needs: core. */
#ifndef MG_DATA_MOCK_H
#define MG_DATA_MOCK_H

#include "core/status.h"

#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint32_t stream; /* split: 0 train, 1 valid, 2 test */
    int vocab, seq_length;
    int64_t num_docs; /* documents generated so far */
    int64_t *doc_end; /* (num_docs) exclusive end offset of each document in the token stream */
    int64_t cap;
    int32_t *scratch; /* (seq_length + 1) */
} mg_mock_data;

mg_status mg_mock_init(mg_mock_data *d, uint64_t seed, uint32_t stream, int vocab, int seq_length);
/* tokens: (seq_length + 1) ids of sample `index`. */
mg_status mg_mock_sample(mg_mock_data *d, int64_t index, int32_t *tokens);
/* Sample source adapter (ctx = mg_mock_data*): inputs are the sample's tokens [0, S), targets
 * its tokens [1, S]. */
mg_status mg_mock_source(void *ctx, int64_t index, int32_t *tokens, int32_t *targets);
void mg_mock_free(mg_mock_data *d);

#endif
