/* The three indices of Megatron's GPTDataset (megatron/core/datasets/gpt_dataset.py and
 * helpers.cpp build_sample_idx), with add_extra_token_to_sequence = True and
 * drop_last_partial_sequence = True (Megatron's defaults for every split):
 *
 * - num_epochs: 1 when num_samples is None (-1), else the fewest epochs whose tokens cover
 *   num_samples * seq_length + 1.
 * - separate final epoch: with more than one epoch, the last one is shuffled apart when it
 *   contributes fewer than int(0.80 * samples per epoch) samples.
 * - document index (int32, num_epochs * documents): the split's document ids repeated per epoch and
 *   shuffled with RandomState(seed); with a separate final epoch, epochs 1..E-1 are shuffled
 *   together and the last epoch alone, from the same RandomState.
 * - sample index ((num_samples + 1) x 2, int32 unless a document position or a document length
 *   exceeds int32): [position in the document index, token offset] where each sample starts;
 *   samples are seq_length + 1 tokens long and overlap their successor by one token.
 * - shuffle index (uint32 unless the size reaches 2^32 - 2, then int64): a permutation of the
 *   samples drawn after the document index from the same RandomState; with a separate final
 *   epoch the samples of the final epoch are permuted among themselves.
 * Exports: mg_gpt_epoch_plan, mg_gpt_plan_epochs, mg_gpt_build_*. Needs: core, data/npy,
 * data/numpy_random. */
#ifndef MG_DATA_GPT_INDEX_H
#define MG_DATA_GPT_INDEX_H

#include "core/status.h"
#include "data/npy.h"
#include "data/numpy_random.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t tokens_per_epoch;
    int64_t num_epochs;
    int64_t num_samples; /* rows of the sample index minus one: the dataset's length */
    bool separate_final_epoch;
    int64_t samples_sans_final; /* with a separate final epoch: samples of the first E-1 epochs */
} mg_gpt_epoch_plan;

/* tokens_per_epoch: the split's token count (> 0); num_samples: -1 for one epoch (None). */
mg_status mg_gpt_plan_epochs(mg_gpt_epoch_plan *p, int64_t tokens_per_epoch, int64_t num_samples,
                             int seq_length);

/* Document ids [begin, end) per epoch, shuffled. out: (num_epochs * (end - begin)), malloc'd. */
mg_status mg_gpt_build_document_index(int64_t begin, int64_t end, const mg_gpt_epoch_plan *p,
                                      mg_np_random *rng, int32_t **out);

/* Whether the sample index must be int64: Megatron's max(len(document_index), sizes.max()). */
bool mg_gpt_sample_index_is_int64(int64_t document_index_len, int32_t max_sequence_length);

/* sizes: the dataset's sequence lengths (indexed by document id). out: (num_samples + 1, 2). */
mg_status mg_gpt_build_sample_index(const int32_t *sizes, const int32_t *document_index,
                                    int64_t document_index_len, int seq_length,
                                    const mg_gpt_epoch_plan *p, bool int64, mg_npy *out);

/* Whether the shuffle index is int64 (else uint32). */
bool mg_gpt_shuffle_index_is_int64(int64_t num_samples);
/* out: (num_samples) permutation. */
mg_status mg_gpt_build_shuffle_index(const mg_gpt_epoch_plan *p, mg_np_random *rng, mg_npy *out);

#endif
