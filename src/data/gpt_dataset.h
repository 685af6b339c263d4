/* The training data of one --data-path: Megatron's BlendedMegatronDatasetBuilder over GPTDataset
 * (megatron/core/datasets), giving the train, valid and test datasets of a single prefix or a
 * blend, sample for sample as Megatron-LM builds them for the same files, --split, --seq-length,
 * --seed and sample counts.
 *
 * - One prefix without a weight: each split is one GPTDataset (data/gpt_split.h) asked for
 *   num_samples[split] samples (-1: one epoch).
 * - A blend ("0.3 A 0.7 B", or "1 A"): weights are normalised; each prefix's split is a GPTDataset
 *   asked for ceil(ceil(N * w) * 1.005) samples, and the split is a BlendedDataset of
 *   sum(ceil(N * w)) samples drawn by build_blending_indices over the weights normalised again.
 *   Every split needs a sample count (Megatron asserts the same).
 * - Prefixes without weights ("A B"): each GPTDataset is one epoch; the split blends them by their
 *   lengths, min(N, total) samples or, without N, all of them (build_exhaustive_blending_indices).
 * - A BlendedDataset's indices are cached only under --data-cache-path (as Megatron), as
 *   <md5>-BlendedDataset-<split>-{description.txt,dataset_index.npy,dataset_sample_index.npy}.
 *
 * A sample is seq_length + 1 token ids (documents are concatenated across boundaries; the last
 * token is the next sample's first). Index i of a split must be in [0, len): Megatron indexes its
 * arrays directly and does not wrap. Single-threaded (internal scratch); open one per thread.
 * Exports: mg_gpt_data, mg_gpt_data_config, mg_gpt_data_*. Needs: data/gpt_split, data/blend,
 * data/indexed_dataset. */
#ifndef MG_DATA_GPT_DATASET_H
#define MG_DATA_GPT_DATASET_H

#define MG_GPT_SPLIT_UNUSED (-2)

#include "core/status.h"

#include <stdint.h>

typedef struct mg_gpt_data mg_gpt_data; /* train/valid/test datasets of one --data-path */

typedef struct {
    const char *data_path; /* "PREFIX", "W1 P1 W2 P2 ...", or "P1 P2 ..." (space separated) */
    const char *split;     /* --split, e.g. "969, 30, 1" */
    int seq_length;
    uint64_t seed;          /* numpy's seed range: [0, 2^32) */
    const char *cache_path; /* --data-cache-path; NULL or "": Megatron's default per prefix */
    /* per split; -1: one full epoch, as Megatron with None; MG_GPT_SPLIT_UNUSED: not built (a
     * split the caller never reads: the trainer's test split) */
    int64_t num_samples[3];
    /* per split: no documents in the split's share (of every dataset of a blend) give an empty
     * split instead of an error (the trainer's test split, evaluated only where it has data) */
    bool may_be_empty[3];
} mg_gpt_data_config;

mg_status mg_gpt_data_build(mg_gpt_data **out, const mg_gpt_data_config *c);
/* 0 train, 1 valid, 2 test; 0 when the split is empty or has no weight in --split. */
int64_t mg_gpt_data_len(const mg_gpt_data *d, int split);
/* Epochs of the split's GPTDataset (a blend: the most of its datasets); 0 when empty. */
int mg_gpt_data_num_epochs(const mg_gpt_data *d, int split);
/* tokens: (seq_length + 1) */
mg_status mg_gpt_data_sample(mg_gpt_data *d, int split, int64_t index, int32_t *tokens);
/* For mg_sample_source: tokens (S) = sample[0, S), targets (S) = sample[1, S]. */
mg_status mg_gpt_data_sample_pair(mg_gpt_data *d, int split, int64_t index, int32_t *tokens,
                                  int32_t *targets);
void mg_gpt_data_free(mg_gpt_data *d);

#endif
