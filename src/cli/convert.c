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
 * checkpoint holding the weights and the model's flags, for the layout T x P (convert_hf.c), so
 * `megatron train --load CKPT` and `megatron generate --load CKPT` need no model flags.
 * Either way everything is written into SAVE_DIR.tmp-PID and renamed to SAVE_DIR at the end, so
 * a failed conversion leaves nothing half-written; a SAVE_DIR that holds files is refused. */
#include "cli/cli.h"
#include "cli/convert.h"

#include "core/file.h"
#include "config/flags_command.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "convert/hf_config.h"
#include "convert/hf_names.h"
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_DEFAULT 5000000000ll /* save_pretrained's "5GB" */

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
#define ARG(f) MG_FLAG_FIELD(mg_convert_args, f)
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

/* *help: --help or -h was given (nothing else is parsed). */
static mg_status parse_args(int argc, char **argv, mg_convert_args *a, mg_flag_command *cmd,
                            bool *help) {
    *a = (mg_convert_args){.max_shard = SHARD_DEFAULT, .target_tp = 1, .target_pp = 1};
    *cmd = MG_FLAG_COMMAND("convert", usage, flags, groups, a);
    MG_CHECK(mg_flags_parse_command(cmd, argc, argv, help));
    if (*help) return MG_OK;
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

mg_status mg_convert_write_text(const char *dir, const char *name, const char *text) {
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return mg_file_write_atomic(path, parts, sizes, 1);
}

mg_status mg_convert_copy_file(const char *from, const char *dir, const char *name) {
    char *buf;
    size_t n;
    MG_CHECK(mg_file_read(from, &buf, &n));
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *parts[1] = {buf};
    size_t sizes[1] = {n};
    mg_status st = mg_file_write_atomic(path, parts, sizes, 1);
    free(buf);
    return st;
}

/* The weights, converted to `dt`, in files of at most max_shard bytes of data (a tensor larger
 * than that gets a file of its own); model.safetensors.index.json when there is more than one. */
static mg_status write_weights(const char *dir, const mg_hf_export_set *set, mg_dtype dt,
                               unsigned long long max_shard) {
    size_t esz = mg_dtype_size(dt);
    int *shard = calloc((size_t)set->n + 1, sizeof *shard), n_shards = 1;
    mg_st_tensor *t = calloc((size_t)set->n + 1, sizeof *t);
    void **conv = calloc((size_t)set->n + 1, sizeof *conv);
    if (!shard || !t || !conv) {
        free(shard), free(t), free(conv);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory converting the weights");
    }
    mg_status st = MG_OK;
    unsigned long long used = 0, total = 0;
    for (int k = 0; k < set->n && st == MG_OK; k++) {
        t[k] = set->tensors[k];
        size_t numel = 1;
        for (int d = 0; d < t[k].ndim; d++) numel *= (size_t)t[k].shape[d];
        if (dt == MG_BF16) {
            uint16_t *b = malloc(numel * sizeof *b + 1);
            if (!b) st = MG_FAIL(MG_ERR_NOMEM, "out of memory converting %s", t[k].name);
            for (size_t i = 0; b && i < numel; i++)
                b[i] = mg_f32_to_bf16(((const float *)set->tensors[k].data)[i]);
            conv[k] = b;
            t[k].data = b;
            t[k].dtype = MG_BF16;
        }
        unsigned long long bytes = (unsigned long long)(numel * esz);
        if (used > 0 && used + bytes > max_shard) n_shards++, used = 0;
        shard[k] = n_shards - 1;
        used += bytes;
        total += bytes;
    }
    char path[2300], file[64];
    for (int s = 0, k0 = 0; st == MG_OK && s < n_shards; s++) {
        int k1 = k0;
        while (k1 < set->n && shard[k1] == s) k1++;
        mg_hf_weights_file(file, sizeof file, s, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        st = mg_safetensors_write(path, t + k0, k1 - k0, "{\"format\": \"pt\"}");
        k0 = k1;
    }
    if (st == MG_OK && n_shards > 1) { /* save_pretrained's index: the total and each file */
        cJSON *idx = cJSON_CreateObject();
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size",
                                (double)total);
        cJSON *map = cJSON_AddObjectToObject(idx, "weight_map");
        for (int k = 0; k < set->n; k++) {
            mg_hf_weights_file(file, sizeof file, shard[k], n_shards);
            cJSON_AddStringToObject(map, t[k].name, file);
        }
        char *text = cJSON_Print(idx);
        cJSON_Delete(idx);
        st = text ? mg_convert_write_text(dir, "model.safetensors.index.json", text)
                  : MG_FAIL(MG_ERR_NOMEM, "out of memory writing the shard index");
        free(text);
    }
    for (int k = 0; k < set->n; k++) free(conv[k]);
    free(shard), free(t), free(conv);
    return st;
}

/* The GPT-2 tokenizer's files and settings (AutoTokenizer: GPT2Tokenizer from vocab.json and
 * merges.txt, its one special token <|endoftext|>). */
static mg_status write_tokenizer(const char *dir, const char *vocab, const char *merges, int S) {
    MG_CHECK(mg_convert_copy_file(vocab, dir, "vocab.json"));
    MG_CHECK(mg_convert_copy_file(merges, dir, "merges.txt"));
    char text[512];
    snprintf(text, sizeof text,
             "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
             "  \"add_prefix_space\": false,\n  \"bos_token\": \"<|endoftext|>\",\n"
             "  \"eos_token\": \"<|endoftext|>\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n",
             S);
    MG_CHECK(mg_convert_write_text(dir, "tokenizer_config.json", text));
    return mg_convert_write_text(
        dir, "special_tokens_map.json",
        "{\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
        "  \"unk_token\": \"<|endoftext|>\"\n}\n");
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

typedef struct {
    mg_config cfg;
    mg_gpt g;
    float *host;
    mg_hf_export_set set;
} conv_state;

static mg_status to_hf(const mg_convert_args *a, conv_state *s, const char *tmp) {
    int64_t it;
    MG_CHECK(mg_checkpoint_latest(a->load_dir, &it));
    if (it < 0)
        return MG_FAIL(MG_ERR_IO, "%s holds no checkpoint (no latest_checkpointed_iteration.txt)",
                       a->load_dir);
    MG_CHECK(mg_checkpoint_load_config(a->load_dir, it, &s->cfg));
    mg_config one = s->cfg;
    mg_config_single_process(&one);
    MG_CHECK(mg_gpt_build(&s->g, &one, 0, 0, 0));
    s->host = calloc(s->g.params.numel ? s->g.params.numel : 1, sizeof *s->host);
    if (!s->host) return MG_FAIL(MG_ERR_NOMEM, "out of memory loading %s", a->load_dir);
    MG_CHECK(mg_checkpoint_load_weights(a->load_dir, it, &s->g, s->host));
    /* the training dtype unless asked: bf16 for a CUDA run, fp32 on the CPU */
    bool bf16 = a->dtype ? !strcmp(a->dtype, "bf16") : !strcmp(s->cfg.device, "cuda");
    const char *vocab = a->vocab_file ? a->vocab_file : s->cfg.vocab_file;
    const char *merges = a->merge_file ? a->merge_file : s->cfg.merge_file;
    bool tokenizer = vocab[0] && merges[0];
    char *config;
    const char *family;
    MG_CHECK(mg_hf_config_json(&s->g, &s->cfg, bf16 ? "bfloat16" : "float32", tokenizer, &config,
                               &family));
    mg_status st = mkdir(tmp, 0755) == 0
                       ? MG_OK
                       : MG_FAIL(MG_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    if (st == MG_OK) st = mg_convert_write_text(tmp, "config.json", config);
    free(config);
    MG_CHECK(st);
    MG_CHECK(mg_convert_write_text(
        tmp, "generation_config.json",
        tokenizer ? "{\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256\n}\n" : "{}\n"));
    MG_CHECK(mg_hf_export(&s->g, s->host, &s->set));
    MG_CHECK(
        write_weights(tmp, &s->set, bf16 ? MG_BF16 : MG_F32, (unsigned long long)a->max_shard));
    if (tokenizer) MG_CHECK(write_tokenizer(tmp, vocab, merges, s->cfg.seq_length));
    fprintf(stderr, "converted %s (iteration %" PRId64 ") to %s: %s, %d tensors, %s%s\n",
            a->load_dir, it, a->save_dir, family, s->set.n, bf16 ? "bf16" : "fp32",
            tokenizer ? ", GPT-2 tokenizer"
                      : ", no tokenizer (the run had none: --vocab-file "
                        "and --merge-file add one)");
    return MG_OK;
}

int mg_cli_convert(int argc, char **argv) {
    mg_convert_args a;
    mg_flag_command cmd;
    bool help;
    mg_status st = parse_args(argc, argv, &a, &cmd, &help);
    if (st != MG_OK) return mg_cli_report(st);
    if (help) {
        mg_flags_command_print_help(&cmd, stdout);
        return 0;
    }
    int has = dir_has_files(a.save_dir);
    if (has != 0)
        return mg_cli_report(MG_FAIL(MG_ERR_IO,
                                     "--save-dir %s %s; give a new directory (nothing is "
                                     "overwritten)",
                                     a.save_dir,
                                     has > 0 ? "already holds files" : "is not a directory"));
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", a.save_dir, (int)getpid());
    conv_state s;
    memset(&s, 0, sizeof s);
    st = strcmp(a.saver, "hf") ? mg_convert_from_hf(&a, tmp) : to_hf(&a, &s, tmp);
    if (st == MG_OK) {
        rmdir(a.save_dir); /* an empty one */
        if (rename(tmp, a.save_dir) != 0)
            st = MG_FAIL(MG_ERR_IO, "cannot rename %s to %s: %s", tmp, a.save_dir, strerror(errno));
    }
    if (st != MG_OK) mg_file_remove_dir(tmp);
    mg_hf_export_free(&s.set);
    free(s.host);
    mg_gpt_free(&s.g);
    return mg_cli_report(st);
}
