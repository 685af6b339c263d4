/* Internal to cli/convert*.c: `megatron convert`'s arguments and the pieces both directions use.
 * convert.c parses the flags, guards the save directory and renames the finished temporary;
 * convert_hf.c reads a Hugging Face directory into a Megatron checkpoint.
 * Exports: mg_convert_args, mg_convert_from_hf, mg_convert_write_text, mg_convert_copy_file.
 * Needs: core/status. */
#ifndef MG_CLI_CONVERT_H
#define MG_CLI_CONVERT_H

#include "core/status.h"

typedef struct {
    const char *loader, *saver, *load_dir, *save_dir, *dtype, *vocab_file, *merge_file;
    int64_t max_shard;        /* --max-shard-size, bytes */
    int target_tp, target_pp; /* --target-tensor/pipeline-parallel-size (--saver megatron) */
} mg_convert_args;

/* `--loader hf --saver megatron`: a.load_dir's config.json and safetensors weights become
 * iteration 0 of a checkpoint written into the new directory tmp (renamed to a->save_dir by the
 * caller on success). */
mg_status mg_convert_from_hf(const mg_convert_args *a, const char *tmp);

/* dir/name holding text / a copy of file `from`, each written atomically. */
mg_status mg_convert_write_text(const char *dir, const char *name, const char *text);
mg_status mg_convert_copy_file(const char *from, const char *dir, const char *name);

#endif
