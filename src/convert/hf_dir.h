/* A Hugging Face model directory (what save_pretrained writes and from_pretrained reads), written
 * from a model or read into one: the library of `megatron convert` (cli/convert.c parses the
 * flags, guards the directories and reads or writes the Megatron checkpoint).
 *
 * Written (mg_hf_dir_write), a directory that transformers' AutoModelForCausalLM and (with the
 * GPT-2 tokenizer) AutoTokenizer open:
 *   config.json, generation_config.json  <- the family and fields of convert/hf_config.h
 *   model.safetensors, or above max_shard bytes model-0000i-of-0000n.safetensors with
 *   model.safetensors.index.json          <- the weights under Hugging Face names
 *                                            (convert/hf_names.h), fp32 or bf16
 *   vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json  <- the GPT-2
 *                                            tokenizer's files, when given
 * Read (mg_hf_dir_read):
 *   config.json                        -> the model flags (gpt2, llama, mistral, mixtral;
 *                                         anything else refused), checked for the target layout
 *                                         as training would check them
 *   model.safetensors, or the shards   -> the fp32 parameters of the whole model (F32, BF16 or
 *   model.safetensors.index.json names    F16 files)
 *   vocab.json + merges.txt (if any)   -> copied and recorded as --tokenizer-type
 *                                         GPT2BPETokenizer; else
 *   tokenizer.json (byte-level BPE)    -> with tokenizer_config.json, special_tokens_map.json:
 *                                         HuggingFaceTokenizer; else
 *   tokenizer.model (SentencePiece)    -> Llama2Tokenizer
 * Errors are one line; where a flag of `megatron convert` is the fix they name it.
 *
 * Exports: mg_hf_dir_write_options, mg_hf_dir_written, mg_hf_dir_write, mg_hf_dir_read_options,
 * mg_hf_model, mg_hf_dir_read, mg_hf_model_free. Needs: convert/hf_config, convert/hf_names,
 * model/gpt, config (flags), parallel/pipeline/layers, data/tokenizer, core/file,
 * core/safetensors, cJSON. */
#ifndef MG_CONVERT_HF_DIR_H
#define MG_CONVERT_HF_DIR_H

#include "model/gpt.h"

#include <stdbool.h>

typedef struct {
    bool bf16;                    /* weights in bf16, else fp32 */
    unsigned long long max_shard; /* bytes of weights per file (a larger tensor: a file alone) */
    const char *vocab_file;       /* the GPT-2 tokenizer's vocab.json and merges.txt to add; */
    const char *merge_file;       /* "" or NULL: no tokenizer */
} mg_hf_dir_write_options;

typedef struct {
    const char *family; /* the transformers class */
    int n_tensors;
    bool tokenizer; /* the GPT-2 tokenizer's files were written */
} mg_hf_dir_written;

/* Creates the directory dir holding g (its fp32 host parameters `params`, Megatron layout) under
 * cfg (the run's flags: tokenizer ids, init std, sequence length). */
mg_status mg_hf_dir_write(const char *dir, const mg_gpt *g, const float *params,
                          const mg_config *cfg, const mg_hf_dir_write_options *o,
                          mg_hf_dir_written *out);

typedef struct {
    const char *dir; /* the Hugging Face directory */
    int tp, pp;      /* the layout the model's flags record (--target-*-parallel-size) */
    /* GPT-2 tokenizer files to take instead of the directory's tokenizer (NULL: the directory's) */
    const char *vocab_file, *merge_file;
    const char *out_dir;   /* created here, receives the tokenizer's files */
    const char *final_dir; /* what out_dir will be called: the flags name the files there */
} mg_hf_dir_read_options;

typedef struct {
    mg_config cfg;             /* the model's flags, the layout and the tokenizer */
    const char *family;        /* the transformers class */
    mg_gpt g;                  /* the whole model, on one process */
    float *params;             /* (g.params.numel) fp32, Megatron layout */
    int n_files;               /* weight files read */
    const char *weights_dtype; /* of the first tensor read ("no": none) */
    char tokenizer[700];       /* what became of the tokenizer, for a summary line */
} mg_hf_model;

/* Reads o->dir into *m (free with mg_hf_model_free, also after a failure). */
mg_status mg_hf_dir_read(const mg_hf_dir_read_options *o, mg_hf_model *m);
void mg_hf_model_free(mg_hf_model *m);

#endif
