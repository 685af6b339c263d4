/* The Adam moments of a checkpoint (format in train/checkpoint.h), for checkpoint.c: writing this
 * rank's pieces, and loading them back from a whole file or from shard files of any count.
 * Exports: mg_checkpoint_optim_name, mg_checkpoint_optim_write, mg_checkpoint_optim_load.
 * Needs: train/checkpoint, core/safetensors, cJSON. */
#ifndef MG_TRAIN_CHECKPOINT_OPTIM_H
#define MG_TRAIN_CHECKPOINT_OPTIM_H

#include "train/checkpoint.h"

/* The file name of shard `shard` (0-based) of n_shards, or of the whole file (n_shards 0), of
 * pipeline stage `stage` of n_stages: "optimizer-00001-of-00004.safetensors",
 * "optimizer.safetensors"; with n_stages > 1 "optimizer-pp001-00001-of-00004.safetensors". */
void mg_checkpoint_optim_name(char *out, size_t cap, int stage, int n_stages, int shard,
                              int n_shards);

/* Writes t's pieces to path: the whole file's format (every tensor in its shape) when
 * t->n_shards == 0, else shard `shard`'s (1-D runs with their ranges). */
mg_status mg_checkpoint_optim_write(const char *path, const mg_gpt *g,
                                    const mg_checkpoint_tensors *t, int shard);

/* Fills t's pieces from the optimizer files of checkpoint directory iter_dir, which holds, for
 * each of n_stages pipeline stages, n_shards shard files (0: the whole file). */
mg_status mg_checkpoint_optim_load(const char *iter_dir, int n_stages, int n_shards,
                                   const mg_gpt *g, mg_checkpoint_tensors *t);

#endif
