/* Checkpoints of format version 1 (written before 2026-11-26), read so that they still resume:
 *   model.safetensors, or model-0000i-of-0000n.safetensors per pipeline stage (x expert-parallel
 *       rank): the weights under Hugging Face names (convert/hf_names.h), whole (tensor
 *       parallelism 1), the expert biases under megatron-core's buffer names;
 *   optimizer[-ppSSS].safetensors: exp_avg.<name>, exp_avg_sq.<name> whole, or, with the
 *       distributed optimizer, optimizer[-ppSSS]-0000k-of-0000D.safetensors: one per data-parallel
 *       rank, each tensor the 1-D run [a, b) of the flattened moments, "<name>": "a:b" in the
 *       file's __metadata__.
 * They load under any pipeline, data- and expert-parallel layout with tensor parallelism 1.
 * Exports: mg_checkpoint_v1_load. Needs: train/checkpoint_tensors, convert/hf_names,
 * core/safetensors. */
#ifndef MG_TRAIN_CHECKPOINT_V1_H
#define MG_TRAIN_CHECKPOINT_V1_H

#include "model/gpt.h"
#include "train/checkpoint_tensors.h"

/* Fills params (fp32 host, g->params.numel) and, when t is not NULL, t's expert biases and the
 * moments of t's pieces, from version 1 iteration directory iter_dir with n_stages pipeline
 * stages, n_files model files and n_shards optimizer shard files per stage (0: one whole file). */
mg_status mg_checkpoint_v1_load(const char *iter_dir, int n_stages, int n_files, int n_shards,
                                const mg_gpt *g, float *params, mg_checkpoint_tensors *t);

#endif
