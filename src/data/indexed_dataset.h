/* Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py): a PREFIX.bin of
 * token ids back to back and a PREFIX.idx describing where each sequence starts.
 *
 * .idx layout (little endian), as Megatron's _IndexWriter writes it:
 *   9 bytes  magic "MMIDIDX\0\0"
 *   u64      version (1)
 *   u8       dtype code (the enum below)
 *   u64      sequence count S
 *   u64      document count D + 1 (length of document_indices)
 *   i32[S]   sequence lengths (tokens)
 *   i64[S]   sequence pointers (byte offsets into .bin)
 *   i64[D+1] document indices (sequence index where each document starts; first 0, last S)
 * Megatron appends no sequence modes unless multimodal; we neither write nor accept them.
 *
 * Exports: the reader (mmap, validated on open), the writer (Megatron's IndexedDatasetBuilder),
 * mg_indexed_optimal_dtype. Needs: core/status. */
#ifndef MG_DATA_INDEXED_DATASET_H
#define MG_DATA_INDEXED_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Megatron's DType codes */
enum {
    MG_IDX_UINT8 = 1,
    MG_IDX_INT8 = 2,
    MG_IDX_INT16 = 3,
    MG_IDX_INT32 = 4,
    MG_IDX_INT64 = 5,
    MG_IDX_FLOAT64 = 6,
    MG_IDX_FLOAT32 = 7,
    MG_IDX_UINT16 = 8
};

typedef struct {
    char prefix[1024];
    int dtype_code;
    size_t dtype_size;
    int64_t num_sequences;            /* len(sequence_lengths) */
    int64_t num_documents;            /* len(document_indices) - 1 */
    const int32_t *sequence_lengths;  /* (num_sequences) tokens per sequence */
    const int64_t *sequence_pointers; /* (num_sequences) byte offsets into .bin */
    const int64_t *document_indices;  /* (num_documents + 1) sequence index where each document
                                         starts */
    /* private: mappings */
    void *idx_map, *bin_map;
    size_t idx_size, bin_size;
} mg_indexed_dataset;

/* Opens PREFIX.idx + PREFIX.bin (mmap) and validates everything: magic, version, dtype, counts
 * against the file size, lengths, pointers inside .bin, document indices. On failure `d` holds
 * nothing to close. A dataset with zero documents is an error (nothing to train on). */
mg_status mg_indexed_dataset_open(mg_indexed_dataset *d, const char *prefix);
/* Tokens [offset, offset + length) of sequence `seq`, widened to int32 (integer dtypes only).
 * out: (length) */
mg_status mg_indexed_dataset_read(const mg_indexed_dataset *d, int64_t seq, int64_t offset,
                                  int64_t length, int32_t *out);
void mg_indexed_dataset_close(mg_indexed_dataset *d); /* safe on a zeroed or closed dataset */

/* Writer: as Megatron's IndexedDatasetBuilder. */
typedef struct mg_indexed_writer mg_indexed_writer;
mg_status mg_indexed_writer_open(mg_indexed_writer **w, const char *prefix, int dtype_code);
/* One document made of sequences (one sequence per document without sentence splitting).
 * tokens: (sum(sequence_lengths)). Tokens must fit the dtype (checked). */
mg_status mg_indexed_writer_add_document(mg_indexed_writer *w, const int32_t *tokens,
                                         const int32_t *sequence_lengths, int64_t num_sequences);
/* Writes .idx; .bin/.idx go through temporary names + rename, so a failed run leaves no output. */
mg_status mg_indexed_writer_finish(mg_indexed_writer *w);
void mg_indexed_writer_free(mg_indexed_writer *w); /* removes the temporaries if not finished */

/* Megatron's DType.optimal_dtype: uint16 when vocab < 65500, else int32 */
int mg_indexed_optimal_dtype(int64_t vocab_size);
/* Bytes per element of a dtype code, 0 when the code is unknown. */
size_t mg_indexed_dtype_size(int dtype_code);

#endif
