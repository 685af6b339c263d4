/* One Megatron GPTDataset: the documents of one split of one indexed dataset, with its document,
 * sample and shuffle indices (data/gpt_index.h) built or loaded from the index cache exactly as
 * GPTDataset._build_document_sample_shuffle_indices does:
 *
 *   <cache dir>/<md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,
 *   shuffle_index.npy}
 *
 * where <md5> hashes the unique description (class, dataset_path, num_samples, index_split,
 * random_seed, sequence_length, split, split_matrix, tokenizer) and the cache dir is
 * --data-cache-path or, without it, <prefix>/cache/GPTDataset_indices (Megatron joins the prefix
 * itself with "cache"). A cache hit needs all four files; they are then checked (description
 * text, dtype and shape, every index value in range) and rebuilt with a warning when they do not
 * pass. Files are written through temporary names, the description last.
 *
 * "tokenizer" is null in our description: the indices do not depend on it, and the tokenizer's
 * identifiers are Megatron-version specific, so the md5 (and thus the file names) differ from
 * Megatron's while the description otherwise matches json.dumps(indent=4) byte for byte.
 * Exports: mg_gpt_split, mg_gpt_split_*. Needs: data/indexed_dataset, data/gpt_index,
 * data/index_cache, data/blend, data/npy. */
#ifndef MG_DATA_GPT_SPLIT_H
#define MG_DATA_GPT_SPLIT_H

#include "data/blend.h"
#include "data/gpt_index.h"
#include "data/index_cache.h"
#include "data/indexed_dataset.h"
#include "data/npy.h"

typedef struct {
    const char *prefix;     /* the --data-path prefix as given (dataset_path) */
    const char *split_text; /* --split as given */
    const mg_split *split;  /* parsed --split */
    int index_split;        /* MG_SPLIT_TRAIN, ... */
    int64_t num_samples;    /* -1: None (one epoch) */
    bool may_be_empty;      /* no documents give an empty split even when samples are asked */
    int seq_length;
    uint32_t seed;
    const char *cache_dir; /* NULL: <prefix>/cache/GPTDataset_indices */
} mg_gpt_split_config;

typedef struct {
    const mg_indexed_dataset *ds; /* not owned */
    int seq_length;
    int64_t doc_begin, doc_end; /* document (sequence) ids of this split */
    int64_t num_samples_requested;
    mg_gpt_epoch_plan plan; /* plan.num_samples: the length; 0 for an empty split */
    mg_npy document_index;  /* (num_epochs * documents) int32 */
    mg_npy sample_index;    /* (len + 1, 2) int32 or int64 */
    mg_npy shuffle_index;   /* (len) uint32 or int64 */
    char md5[33];
    bool loaded_from_cache;
} mg_gpt_split;

/* Appends this dataset's unique_identifiers object to j (also used inside blend descriptions). */
void mg_gpt_split_describe(mg_pyjson *j, const mg_gpt_split_config *c);

/* Builds or loads the indices. A split without tokens is empty (length 0) when no samples are
 * requested (num_samples 0 or -1) or c->may_be_empty, and an error otherwise. */
mg_status mg_gpt_split_build(mg_gpt_split *g, const mg_indexed_dataset *ds,
                             int32_t max_sequence_length, const mg_gpt_split_config *c);
static inline int64_t mg_gpt_split_len(const mg_gpt_split *g) {
    return g->plan.num_samples;
}
/* tokens: (seq_length + 1) ids of sample `index` (0 <= index < len). */
mg_status mg_gpt_split_sample(const mg_gpt_split *g, int64_t index, int32_t *tokens);
void mg_gpt_split_free(mg_gpt_split *g);

#endif
