/* `megatron convert`: checkpoints to and from Hugging Face (Megatron's tools/checkpoint/convert.py
 * flag names).
 *   megatron convert --loader megatron --saver hf --load-dir CKPT --save-dir HF_DIR
 *                    [--saver-dtype fp32|bf16] [--max-shard-size BYTES]
 *                    [--vocab-file F --merge-file F]
 * writes a directory that transformers' AutoModelForCausalLM.from_pretrained and (with the GPT-2
 * tokenizer) AutoTokenizer.from_pretrained open: config.json (convert/hf_config.h: GPT-2, Llama or
 * Mixtral), generation_config.json, the weights under Hugging Face names (convert/hf_names.h) as
 * model.safetensors, or above --max-shard-size (5 GB, as save_pretrained) as
 * model-0000i-of-0000n.safetensors with model.safetensors.index.json, and the tokenizer: the
 * run's vocab.json and merges.txt (or the flags'), tokenizer_config.json and
 * special_tokens_map.json.
 *   megatron convert --loader hf --saver megatron --load-dir HF_DIR --save-dir CKPT
 *                    [--target-tensor-parallel-size T] [--target-pipeline-parallel-size P]
 *                    [--vocab-file F --merge-file F]
 * reads a save_pretrained directory (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
 * MixtralForCausalLM; F32, BF16 or F16 safetensors, sharded or not) into iteration 0 of a
 * checkpoint holding the weights and the model's flags, for the layout T x P, so
 * `megatron train --load CKPT` and `megatron generate --load CKPT` need no model flags.
 * The Hugging Face directory is read and written by convert/hf_dir.h; this file parses the flags,
 * guards the save directory and reads or writes the Megatron checkpoint.
 * Either way everything is written into SAVE_DIR.tmp-PID and renamed to SAVE_DIR at the end, so
 * a failed conversion leaves nothing half-written; a SAVE_DIR that holds files is refused. */
#include "cli/cli.h"

#include "config/flags.h"
#include "config/flags_command.h"
#include "convert/hf_dir.h"
#include "core/file.h"
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_DEFAULT 5000000000ll /* save_pretrained's "5GB" */

typedef struct {
    const char *loader, *saver, *load_dir, *save_dir, *dtype, *vocab_file, *merge_file;
    int64_t max_shard;        /* --max-shard-size, bytes */
    int target_tp, target_pp; /* --target-tensor/pipeline-parallel-size (--saver megatron) */
} convert_args;

static const char usage[] =
    "usage: megatron convert --loader megatron --saver hf --load-dir CKPT --save-dir HF_DIR\n"
    "                        [--saver-dtype fp32|bf16] [--max-shard-size BYTES]\n"
    "                        [--vocab-file F --merge-file F]\n"
    "       megatron convert --loader hf --saver megatron --load-dir HF_DIR --save-dir CKPT\n"
    "                        [--target-tensor-parallel-size T] [--target-pipeline-parallel-size "
    "P]\n"
    "                        [--vocab-file F --merge-file F]\n\n"
    "--saver hf writes CKPT's newest iteration as a Hugging Face directory (GPT2LMHeadModel,\n"
    "LlamaForCausalLM or MixtralForCausalLM, chosen from the model's flags; config.json, weights\n"
    "in --saver-dtype, default the training dtype, sharded above --max-shard-size, default 5 GB;\n"
    "the GPT-2 tokenizer's files when the run had them or the flags give them).\n"
    "--saver megatron reads a save_pretrained directory (model_type gpt2, llama, mistral or\n"
    "mixtral; safetensors weights, F32, BF16 or F16, sharded or not) into iteration 0 of a\n"
    "checkpoint: the weights (no optimizer state) and the model's flags for the layout T x P\n"
    "(default 1 x 1), plus its vocab.json and merges.txt (or the flags') as the GPT-2 tokenizer.\n"
    "`megatron train --load CKPT` and `megatron generate --load CKPT` then need no model flags.\n"
    "SAVE_DIR must be new or empty; it is written under a temporary name and renamed at the end.\n";

static const char *const formats[] = {"megatron", "hf", NULL};
static const char *const dtypes[] = {"fp32", "bf16", NULL};
enum { G_DIRECTION, G_TO_HF, G_TO_MEGATRON, G_TOKENIZER };
static const char *const groups[] = {"direction and directories", "--saver hf", "--saver megatron",
                                     "tokenizer"};
#define ARG(f) MG_FLAG_FIELD(convert_args, f)
static const mg_flag_spec flags[] = {
    {"--loader", MG_FLAG_GROUP(G_DIRECTION), .kind = MG_FLAG_STRING_REF, ARG(loader),
     .arg = "FORMAT", .choices = formats, .def = "required",
     .help = "megatron or hf: what to read"},
    {"--saver", MG_FLAG_GROUP(G_DIRECTION), .kind = MG_FLAG_STRING_REF, ARG(saver), .arg = "FORMAT",
     .choices = formats, .def = "required",
     .help = "hf or megatron: what to write (the other one)"},
    {"--load-dir", MG_FLAG_GROUP(G_DIRECTION), .kind = MG_FLAG_STRING_REF, ARG(load_dir),
     .arg = "DIR", .def = "required",
     .help = "a checkpoint (--loader megatron) or a Hugging "
             "Face directory (--loader hf)"},
    {"--save-dir", MG_FLAG_GROUP(G_DIRECTION), .kind = MG_FLAG_STRING_REF, ARG(save_dir),
     .arg = "DIR", .def = "required", .help = "a new or empty directory"},
    {"--saver-dtype", MG_FLAG_GROUP(G_TO_HF), .kind = MG_FLAG_STRING_REF, ARG(dtype),
     .arg = "DTYPE", .choices = dtypes, .def = "the run's",
     .help = "fp32 or bf16 weights (default: bf16 for a CUDA run, else fp32)"},
    {"--max-shard-size", MG_FLAG_GROUP(G_TO_HF), .kind = MG_FLAG_INT64, ARG(max_shard),
     .arg = "BYTES", .help = "bytes of weights per safetensors file (save_pretrained's 5 GB)"},
    {"--target-tensor-parallel-size", MG_FLAG_GROUP(G_TO_MEGATRON), .kind = MG_FLAG_INT,
     ARG(target_tp), .arg = "T", .help = "the checkpoint's tensor-parallel size"},
    {"--target-pipeline-parallel-size", MG_FLAG_GROUP(G_TO_MEGATRON), .kind = MG_FLAG_INT,
     ARG(target_pp), .arg = "P", .help = "the checkpoint's pipeline-parallel size"},
    {"--vocab-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(vocab_file),
     .arg = "PATH", .def = "the input's", .help = "GPT-2 vocab.json to write (with --merge-file)"},
    {"--merge-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(merge_file),
     .arg = "PATH", .def = "the input's", .help = "GPT-2 merges.txt to write (with --vocab-file)"},
};
#undef ARG

static mg_status check_size(const char *flag, int v) {
    if (v < 1 || v > 4096)
        return MG_FAIL(MG_ERR_USAGE, "%s expects a positive integer (at most 4096), got %d", flag,
                       v);
    return MG_OK;
}

static void convert_prepare(mg_cli_context *cx) {
    convert_args *a = cx->args;
    *a = (convert_args){.max_shard = SHARD_DEFAULT, .target_tp = 1, .target_pp = 1};
    cx->flags = MG_FLAG_COMMAND("convert", usage, flags, groups, a);
}

/* What the parser cannot say: required flags, ranges and the flags of the other direction. */
static mg_status check_args(const convert_args *a, const mg_flag_command *cmd) {
    bool target = mg_flags_command_seen(cmd, "--target-tensor-parallel-size") ||
                  mg_flags_command_seen(cmd, "--target-pipeline-parallel-size");
    bool hf_only = mg_flags_command_seen(cmd, "--saver-dtype") ||
                   mg_flags_command_seen(cmd, "--max-shard-size");
    if (a->max_shard < 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "--max-shard-size expects a positive number of bytes, got %lld",
                       (long long)a->max_shard);
    MG_CHECK(check_size("--target-tensor-parallel-size", a->target_tp));
    MG_CHECK(check_size("--target-pipeline-parallel-size", a->target_pp));
    if (!a->loader || !a->saver || !a->load_dir || !a->save_dir)
        return MG_FAIL(MG_ERR_USAGE, "`megatron convert` needs --loader, --saver, --load-dir and "
                                     "--save-dir (e.g. --loader megatron --saver hf)");
    if (!strcmp(a->loader, a->saver))
        return MG_FAIL(MG_ERR_USAGE,
                       "--loader %s --saver %s converts nothing; one of them is hf, the other "
                       "megatron",
                       a->loader, a->saver);
    bool to_hf = !strcmp(a->saver, "hf");
    if (to_hf && target)
        return MG_FAIL(MG_ERR_USAGE, "--target-tensor-parallel-size and "
                                     "--target-pipeline-parallel-size are for --saver megatron");
    if (!to_hf && hf_only)
        return MG_FAIL(MG_ERR_USAGE, "--saver-dtype and --max-shard-size are for --saver hf (a "
                                     "Megatron checkpoint holds fp32 weights in one file)");
    if (!a->vocab_file != !a->merge_file)
        return MG_FAIL(MG_ERR_USAGE, "give --vocab-file and --merge-file together");
    return MG_OK;
}

/* 1: path is a directory with entries; 0: absent or empty; -1: something else is there. */
static int dir_has_files(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (!S_ISDIR(sb.st_mode)) return -1;
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)) != NULL)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* The newest iteration of the checkpoint a->load_dir as the Hugging Face directory tmp. */
static mg_status to_hf(const convert_args *a, const char *tmp) {
    int64_t it;
    MG_CHECK(mg_checkpoint_latest(a->load_dir, &it));
    if (it < 0)
        return MG_FAIL(MG_ERR_IO, "%s holds no checkpoint (no latest_checkpointed_iteration.txt)",
                       a->load_dir);
    mg_config cfg;
    MG_CHECK(mg_checkpoint_load_config(a->load_dir, it, &cfg));
    mg_config one = cfg;
    mg_config_single_process(&one);
    mg_gpt g = {0};
    float *host = NULL;
    mg_status st = MG_OK;
    MG_CHECK_GOTO(mg_gpt_build(&g, &one, 0, 0, 0), st, done);
    host = calloc(g.params.numel ? g.params.numel : 1, sizeof *host);
    if (!host) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory loading %s", a->load_dir);
        goto done;
    }
    MG_CHECK_GOTO(mg_checkpoint_load_weights(a->load_dir, it, &g, host), st, done);
    /* the training dtype unless asked: bf16 for a CUDA run, fp32 on the CPU */
    mg_hf_dir_write_options o = {.bf16 = a->dtype ? !strcmp(a->dtype, "bf16")
                                                  : !strcmp(cfg.device, "cuda"),
                                 .max_shard = (unsigned long long)a->max_shard,
                                 .vocab_file = a->vocab_file ? a->vocab_file : cfg.vocab_file,
                                 .merge_file = a->merge_file ? a->merge_file : cfg.merge_file};
    mg_hf_dir_written out;
    MG_CHECK_GOTO(mg_hf_dir_write(tmp, &g, host, &cfg, &o, &out), st, done);
    fprintf(stderr, "converted %s (iteration %" PRId64 ") to %s: %s, %d tensors, %s%s\n",
            a->load_dir, it, a->save_dir, out.family, out.n_tensors, o.bf16 ? "bf16" : "fp32",
            out.tokenizer ? ", GPT-2 tokenizer"
                          : ", no tokenizer (the run had none: --vocab-file "
                            "and --merge-file add one)");
done:
    free(host);
    mg_gpt_free(&g);
    return st;
}

/* The Hugging Face directory a->load_dir as iteration 0 of a checkpoint in tmp. */
static mg_status from_hf(const convert_args *a, const char *tmp) {
    mg_hf_dir_read_options o = {.dir = a->load_dir,
                                .tp = a->target_tp,
                                .pp = a->target_pp,
                                .vocab_file = a->vocab_file,
                                .merge_file = a->merge_file,
                                .out_dir = tmp,
                                .final_dir = a->save_dir};
    mg_hf_model m;
    mg_status st = MG_OK;
    MG_CHECK_GOTO(mg_hf_dir_read(&o, &m), st, done);
    const mg_config *cfg = &m.cfg;
    MG_CHECK_GOTO(mg_checkpoint_save_weights(tmp, cfg, &m.g, m.params), st, done);
    fprintf(stderr,
            "converted %s (%s, %d layers, %lld parameters, %s weights in %d file%s) to %s: "
            "iteration 0, weights only, TP %d, PP %d, %s\n",
            a->load_dir, m.family, cfg->num_layers, (long long)mg_model_config_num_params(&m.g.cfg),
            m.weights_dtype, m.n_files, m.n_files > 1 ? "s" : "", a->save_dir,
            cfg->tensor_model_parallel_size, cfg->pipeline_model_parallel_size, m.tokenizer);
    /* Megatron pads the vocabulary to a multiple of TP: training under a TP that does not divide
     * vocab_size loads the file's rows and starts the padding rows from initialisation */
    if (mg_config_padded_vocab(cfg) != cfg->vocab_size)
        fprintf(stderr,
                "note: vocab_size %d pads to %d rows under tensor parallelism %d; training adds "
                "the %d padding rows from initialisation\n",
                cfg->vocab_size, mg_config_padded_vocab(cfg), cfg->tensor_model_parallel_size,
                mg_config_padded_vocab(cfg) - cfg->vocab_size);
done:
    mg_hf_model_free(&m);
    return st;
}

/* Everything is written into SAVE_DIR.tmp-PID and renamed at the end. */
static mg_status convert_run(mg_cli_context *cx) {
    const convert_args *a = cx->args;
    MG_CHECK(check_args(a, &cx->flags));
    int has = dir_has_files(a->save_dir);
    if (has != 0)
        return MG_FAIL(MG_ERR_IO, "--save-dir %s %s; give a new directory (nothing is overwritten)",
                       a->save_dir, has > 0 ? "already holds files" : "is not a directory");
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", a->save_dir, (int)getpid());
    mg_status st = strcmp(a->saver, "hf") ? from_hf(a, tmp) : to_hf(a, tmp);
    if (st == MG_OK) {
        rmdir(a->save_dir); /* an empty one */
        if (rename(tmp, a->save_dir) != 0)
            st =
                MG_FAIL(MG_ERR_IO, "cannot rename %s to %s: %s", tmp, a->save_dir, strerror(errno));
    }
    if (st != MG_OK) mg_file_remove_dir(tmp);
    return st;
}

const mg_cli_command mg_cli_convert = {sizeof(convert_args), convert_prepare, convert_run};
