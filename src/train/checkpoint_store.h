/* The tensor store under a checkpoint (format version 2): tensors known by their global names and
 * shapes, each writer's pieces placed by their global offsets (the idea of Megatron's distributed
 * checkpointing), so that any layout reads exactly the slices it needs from any other's.
 *
 * A checkpoint directory holds
 *   rank-00003.safetensors   one file per writing rank: each of its tensors is one piece, a run
 *                            of the rank's local elements, 1-D fp32
 *   index.json               for every global tensor its shape and pieces; for every file its
 *                            size in bytes:
 *     {"format": "megatron.c tensor store", "version": 2,
 *      "files": {"rank-00003.safetensors": {"size": 123456}},
 *      "tensors": {"decoder.layers.0.mlp.linear_fc1.weight": {"shape": [256, 64], "pieces": [
 *          {"file": "rank-00003.safetensors", "key": "decoder.layers.0.mlp.linear_fc1.weight",
 *           "start": 0, "offset": [0, 0], "block": [64, 64], "range": [0, 4096],
 *           "xxh3": "0123456789abcdef"}, ...]}}}
 * A piece is the elements [range) of the row-major block of the global tensor at `offset` with
 * extent `block`, stored as elements [start, start + range length) of the file's tensor `key`,
 * with the XXH3-64 hash of those bytes. A rank's local tensor is one block (replicated, or split
 * by tensor parallelism along one dimension) or, with stacked chunks (SwiGLU's [gate; up]), one
 * block per chunk; its run [a, b) of local elements (a distributed-optimizer shard) becomes one
 * piece per block it meets. 1-D tensors are blocks of one column.
 *
 * Writing: every rank calls mg_ckpt_store_write with its pieces (it writes its safetensors file
 * and a small rank-N.json listing them), then one rank merges the lists into index.json
 * (mg_ckpt_store_index) once all have written: a shared file system, as Megatron's checkpoints
 * need. Reading: mg_ckpt_store_open maps nothing until a piece is needed; mg_ckpt_store_read fills
 * a local run from whatever pieces cover it, after checking the file's size against the index
 * and the piece's hash, and fails unless every element was found exactly once. Every error names
 * the file and the tensor.
 * Exports: mg_ckpt_piece, mg_ckpt_store, mg_ckpt_store_*. Needs: model/params, core/safetensors,
 * cJSON, xxHash. */
#ifndef MG_TRAIN_CHECKPOINT_STORE_H
#define MG_TRAIN_CHECKPOINT_STORE_H

#include "model/params.h"

#include <stdbool.h>

/* The local elements [a, b) (row-major, the holder's shape) of the tensor `name` held as `meta`
 * describes it (local and global shapes, tensor-parallel split, vocab_rows): written from data,
 * or read into it. Only those fields of meta are used. A tensor whose rows are a padded
 * vocabulary (meta->vocab_rows) may have another number of rows in the store: the rows both
 * have are read, the others left as they are. */
typedef struct {
    const char *name;
    const mg_param_meta *meta;
    int64_t a, b;
    float *data; /* (b - a) */
} mg_ckpt_piece;

/* Writes dir/rank-<id>.safetensors (when n > 0) and dir/rank-<id>.json, the list of its pieces. */
mg_status mg_ckpt_store_write(const char *dir, int id, const mg_ckpt_piece *pieces, int n);
/* Merges dir/rank-0..n_ids-1.json into dir/index.json (atomically) and removes them. */
mg_status mg_ckpt_store_index(const char *dir, int n_ids);

typedef struct mg_ckpt_store mg_ckpt_store;
mg_status mg_ckpt_store_open(const char *dir, mg_ckpt_store **out);
/* The number of rows (first dimension) of the store's tensor `name`, or -1 when it has none. */
int64_t mg_ckpt_store_rows(const mg_ckpt_store *s, const char *name);
/* Fills p->data from the store: the tensor must exist with meta's global shape (rows aside, for
 * a padded vocabulary), and its pieces must cover [a, b) (its rows the store has) exactly once. */
mg_status mg_ckpt_store_read(mg_ckpt_store *s, const mg_ckpt_piece *p);
/* The same for n pieces, on several threads where the build has OpenMP; the error is the first
 * failing piece's. */
mg_status mg_ckpt_store_read_all(mg_ckpt_store *s, const mg_ckpt_piece *pieces, int n);
void mg_ckpt_store_close(mg_ckpt_store *s);

#endif
