/* `megatron convert --loader hf --saver megatron`: a Hugging Face model directory (what
 * save_pretrained writes) becomes iteration 0 of a Megatron checkpoint.
 *   config.json                        -> the model flags (convert/hf_config.h: gpt2, llama,
 *                                         mistral, mixtral; anything else refused)
 *   model.safetensors, or the shards   -> the weights (convert/hf_names.h), F32, BF16 or F16, read
 *   model.safetensors.index.json names    into the fp32 parameters of the whole model
 *   vocab.json + merges.txt (if any)   -> copied next to the checkpoint and recorded as
 *                                         --tokenizer-type GPT2BPETokenizer; else
 *   tokenizer.json (byte-level BPE)    -> with tokenizer_config.json, special_tokens_map.json:
 *                                         HuggingFaceTokenizer; else
 *   tokenizer.model (SentencePiece)    -> Llama2Tokenizer
 * The checkpoint holds the weights only: training from it starts Adam afresh. Its recorded
 * layout is --target-tensor-parallel-size / --target-pipeline-parallel-size (checked against the
 * model as training would), so `megatron train --load` and `megatron generate --load` need no
 * model flags. */
#include "cli/cli.h"
#include "cli/convert.h"

#include "core/file.h"
#include "config/flags.h"
#include "core/safetensors.h"
#include "data/tokenizer.h"
#include "data/tokenizer_gpt2.h"
#include "convert/hf_config.h"
#include "convert/hf_names.h"
#include "parallel/pipeline/layers.h"
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_CAP 2300

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The model flags of load_dir/config.json, and the target layout checked as training would. */
static mg_status read_config(const mg_convert_args *a, mg_config *cfg, const char **family) {
    char path[PATH_CAP], *text;
    snprintf(path, sizeof path, "%s/config.json", a->load_dir);
    if (!is_file(path))
        return MG_FAIL(MG_ERR_IO,
                       "%s has no config.json; --loader hf reads a Hugging Face model directory "
                       "(what save_pretrained writes)",
                       a->load_dir);
    MG_CHECK(mg_file_read(path, &text, NULL));
    mg_config_defaults(cfg);
    cfg->tensor_model_parallel_size = a->target_tp;
    cfg->pipeline_model_parallel_size = a->target_pp;
    mg_status st = mg_hf_config_parse(text, path, cfg, family);
    free(text);
    MG_CHECK(st);
    MG_CHECK(mg_config_resolve_model(cfg));
    mg_layers_params lp = mg_layers_params_of(cfg);
    st = mg_config_check_tp(cfg);
    if (st == MG_OK) st = mg_layers_check(&lp, NULL);
    if (st != MG_OK) { /* the checks speak of the training flags: say which flags set them */
        char why[1024];
        snprintf(why, sizeof why, "%s", mg_error_message());
        return MG_FAIL(st,
                       "--target-tensor-parallel-size %d --target-pipeline-parallel-size %d "
                       "do not fit %s: %s",
                       a->target_tp, a->target_pp, path, why);
    }
    return MG_OK;
}

/* The weight files: model.safetensors.index.json's weight_map (save_pretrained's shards), else
 * model.safetensors. */
typedef struct {
    mg_safetensors *files;
    char (*paths)[PATH_CAP];
    const char **names;
    int n, cap;
} hf_weights;

static void weights_free(hf_weights *w) {
    for (int k = 0; k < w->n; k++) mg_safetensors_close(&w->files[k]);
    free(w->files);
    free(w->paths);
    free(w->names);
    memset(w, 0, sizeof *w);
}

static mg_status weights_add(hf_weights *w, const char *dir, const char *file) {
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    for (int k = 0; k < w->n; k++)
        if (!strcmp(w->paths[k], path)) return MG_OK;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 8;
        mg_safetensors *f = realloc(w->files, (size_t)cap * sizeof *f);
        if (f) w->files = f;
        char(*p)[PATH_CAP] = realloc(w->paths, (size_t)cap * sizeof *p);
        if (p) w->paths = p;
        if (!f || !p) return MG_FAIL(MG_ERR_NOMEM, "out of memory listing the weight files");
        w->cap = cap;
    }
    snprintf(w->paths[w->n], PATH_CAP, "%s", path);
    MG_CHECK(mg_safetensors_open(&w->files[w->n], path));
    w->n++;
    return MG_OK;
}

static mg_status weights_open_index(hf_weights *w, const char *dir, const char *index) {
    char *text;
    MG_CHECK(mg_file_read(index, &text, NULL));
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *e;
    mg_status st = MG_OK;
    if (!cJSON_IsObject(map) || !map->child) {
        st =
            MG_FAIL(MG_ERR_FORMAT, "%s: expected a JSON object with a non-empty weight_map", index);
        goto done;
    }
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/')) {
            st = MG_FAIL(MG_ERR_FORMAT, "%s: weight_map['%s'] should name a file in %s", index,
                         e->string, dir);
            goto done;
        }
        MG_CHECK_GOTO(weights_add(w, dir, e->valuestring), st, done);
    }
done:
    cJSON_Delete(j);
    return st;
}

static mg_status weights_open(hf_weights *w, const char *dir) {
    char index[PATH_CAP], single[PATH_CAP];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    if (is_file(index))
        MG_CHECK(weights_open_index(w, dir, index));
    else if (is_file(single))
        MG_CHECK(weights_add(w, dir, "model.safetensors"));
    else
        return MG_FAIL(MG_ERR_IO,
                       "%s has neither model.safetensors nor model.safetensors.index.json; "
                       "convert reads safetensors (save_pretrained's default), not "
                       "pytorch_model.bin",
                       dir);
    w->names = calloc((size_t)w->n, sizeof *w->names);
    if (!w->names) return MG_FAIL(MG_ERR_NOMEM, "out of memory listing the weight files");
    for (int k = 0; k < w->n; k++) w->names[k] = w->paths[k];
    return MG_OK;
}

static bool weights_have(const hf_weights *w, const char *name) {
    for (int k = 0; k < w->n; k++)
        if (mg_safetensors_find(&w->files[k], name)) return true;
    return false;
}

/* Files saved from the base model (GPT2Model, as the Hub's gpt2) name tensors without the
 * causal LM's prefix ("wte.weight" for "transformer.wte.weight"): add it, as from_pretrained
 * does, to every name but the head's. */
static void weights_add_prefix(hf_weights *w, bool gpt2) {
    const char *prefix = gpt2 ? "transformer." : "model.";
    const char *embedding = gpt2 ? "wte.weight" : "embed_tokens.weight";
    char full[MG_ST_NAME_CAP];
    snprintf(full, sizeof full, "%s%s", prefix, embedding);
    if (weights_have(w, full) || !weights_have(w, embedding)) return;
    size_t np = strlen(prefix);
    for (int k = 0; k < w->n; k++)
        for (int i = 0; i < w->files[k].n; i++) {
            char *name = w->files[k].entries[i].name;
            size_t n = strlen(name);
            if (!strncmp(name, "lm_head.", 8) || np + n >= MG_ST_NAME_CAP) continue;
            memmove(name + np, name, n + 1);
            memcpy(name, prefix, np);
        }
}

/* dir as an absolute path (its parent must exist), without trailing slashes. */
static mg_status absolute_dir(const char *dir, char *out, size_t cap) {
    char d[PATH_CAP], parent[PATH_MAX];
    snprintf(d, sizeof d, "%s", dir);
    for (size_t n = strlen(d); n > 1 && d[n - 1] == '/'; n--) d[n - 1] = '\0';
    char *slash = strrchr(d, '/');
    const char *base = slash ? slash + 1 : d;
    if (slash) *slash = '\0';
    const char *up = slash ? (d[0] ? d : "/") : ".";
    if (!realpath(up, parent))
        return MG_FAIL(MG_ERR_IO, "cannot resolve %s: %s", up, strerror(errno));
    size_t np = strcmp(parent, "/") ? strlen(parent) : 0, nb = strlen(base);
    if (np + nb + 2 > cap) return MG_FAIL(MG_ERR_USAGE, "the path of %s is too long", dir);
    memcpy(out, parent, np);
    out[np] = '/';
    memcpy(out + np + 1, base, nb + 1);
    return MG_OK;
}

/* A tokenizer.json (HuggingFaceTokenizer) or tokenizer.model (Llama2Tokenizer) of the
 * directory, when one loads: checked against the model's vocabulary, copied into tmp with its
 * companions and recorded in cfg. *name: what the summary says; why none loaded goes into why. */
static mg_status add_model_tokenizer(const mg_convert_args *a, const char *tmp, mg_config *cfg,
                                     const char **name, char *why, size_t why_cap) {
    static const char *const files[2] = {"tokenizer.json", "tokenizer.model"};
    static const char *const types[2] = {"HuggingFaceTokenizer", "Llama2Tokenizer"};
    for (int k = 0; k < 2; k++) {
        char path[PATH_CAP], final[sizeof cfg->tokenizer_model - 32];
        snprintf(path, sizeof path, "%s/%s", a->load_dir, files[k]);
        if (!is_file(path)) continue;
        mg_tokenizer *tok = NULL;
        mg_tokenizer_spec spec = {.type = types[k], .model = k ? path : a->load_dir};
        if (mg_tokenizer_load(&tok, &spec) != MG_OK) { /* not ours to read: say why, go on */
            snprintf(why, why_cap, "%s", mg_error_message());
            mg_error_clear();
            continue;
        }
        int n = mg_tokenizer_vocab_size(tok);
        mg_tokenizer_free(tok);
        if (n > cfg->vocab_size)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s has %d tokens but the model's vocab_size is %d; give the model's "
                           "own tokenizer",
                           path, n, cfg->vocab_size);
        MG_CHECK(mg_convert_copy_file(path, tmp, files[k]));
        static const char *const companions[] = {"tokenizer_config.json",
                                                 "special_tokens_map.json"};
        for (int c = 0; k == 0 && c < 2; c++) {
            snprintf(path, sizeof path, "%s/%s", a->load_dir, companions[c]);
            if (is_file(path)) MG_CHECK(mg_convert_copy_file(path, tmp, companions[c]));
        }
        MG_CHECK(absolute_dir(a->save_dir, final, sizeof final));
        snprintf(cfg->tokenizer_type, sizeof cfg->tokenizer_type, "%s", types[k]);
        snprintf(cfg->tokenizer_model, sizeof cfg->tokenizer_model, "%s%s", final,
                 k ? "/tokenizer.model" : "");
        *name = k ? "SentencePiece tokenizer (Llama2Tokenizer)"
                  : "tokenizer.json (HuggingFaceTokenizer)";
        return MG_OK;
    }
    return MG_OK;
}

/* The tokenizer: GPT-2's files (the flags', else the directory's vocab.json and merges.txt),
 * else the directory's tokenizer.json or tokenizer.model; checked, copied into tmp and recorded
 * in cfg under the final directory's absolute path. *name: what the summary says. */
static mg_status add_tokenizer(const mg_convert_args *a, const char *tmp, mg_config *cfg,
                               const char **name) {
    char vocab[PATH_CAP], merges[PATH_CAP], final[sizeof cfg->vocab_file - 16];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", a->load_dir);
    snprintf(merges, sizeof merges, "%s/merges.txt", a->load_dir);
    if (a->vocab_file) {
        snprintf(vocab, sizeof vocab, "%s", a->vocab_file);
        snprintf(merges, sizeof merges, "%s", a->merge_file);
    } else if (!is_file(vocab) || !is_file(merges)) {
        static char none[700];
        char why[512] = "";
        *name = NULL;
        MG_CHECK(add_model_tokenizer(a, tmp, cfg, name, why, sizeof why));
        if (*name) return MG_OK;
        snprintf(none, sizeof none,
                 "no tokenizer (%s%s; --vocab-file and --merge-file add GPT-2's)",
                 why[0] ? ""
                        : "the directory has no vocab.json and merges.txt, tokenizer.json "
                          "or tokenizer.model",
                 why);
        *name = none;
        return MG_OK;
    }
    mg_tokenizer *tok;
    MG_CHECK(mg_tokenizer_gpt2_load(&tok, vocab, merges));
    int n = mg_tokenizer_vocab_size(tok);
    mg_tokenizer_free(tok);
    if (n > cfg->vocab_size)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s has %d tokens but the model's vocab_size is %d; give the model's own "
                       "tokenizer",
                       vocab, n, cfg->vocab_size);
    MG_CHECK(mg_convert_copy_file(vocab, tmp, "vocab.json"));
    MG_CHECK(mg_convert_copy_file(merges, tmp, "merges.txt"));
    MG_CHECK(absolute_dir(a->save_dir, final, sizeof final));
    snprintf(cfg->tokenizer_type, sizeof cfg->tokenizer_type, "GPT2BPETokenizer");
    snprintf(cfg->vocab_file, sizeof cfg->vocab_file, "%s/vocab.json", final);
    snprintf(cfg->merge_file, sizeof cfg->merge_file, "%s/merges.txt", final);
    *name = "GPT-2 tokenizer";
    return MG_OK;
}

mg_status mg_convert_from_hf(const mg_convert_args *a, const char *tmp) {
    mg_config cfg, one;
    const char *family, *tokenizer = "";
    hf_weights w = {0};
    mg_gpt g = {0};
    float *params = NULL;
    mg_status st = MG_OK;
    MG_CHECK(read_config(a, &cfg, &family));
    MG_CHECK_GOTO(weights_open(&w, a->load_dir), st, fail);
    weights_add_prefix(&w, !strcmp(family, "GPT2LMHeadModel"));
    /* the whole model on one process, whatever layout the checkpoint records */
    one = cfg;
    mg_config_single_process(&one);
    MG_CHECK_GOTO(mg_gpt_build(&g, &one, 0, 0, 0), st, fail);
    params = calloc(g.params.numel ? g.params.numel : 1, sizeof *params);
    if (!params) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for %zu parameters", g.params.numel);
        goto fail;
    }
    MG_CHECK_GOTO(mg_hf_import_files(&g, w.files, w.names, w.n, params), st, fail);
    if (mkdir(tmp, 0755) != 0) {
        st = MG_FAIL(MG_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto fail;
    }
    MG_CHECK_GOTO(add_tokenizer(a, tmp, &cfg, &tokenizer), st, fail);
    MG_CHECK_GOTO(mg_checkpoint_save_weights(tmp, &cfg, &g, params), st, fail);
    fprintf(stderr,
            "converted %s (%s, %d layers, %lld parameters, %s weights in %d file%s) to %s: "
            "iteration 0, weights only, TP %d, PP %d, %s\n",
            a->load_dir, family, cfg.num_layers, (long long)mg_model_config_num_params(&g.cfg),
            w.files[0].n ? mg_dtype_name(w.files[0].entries[0].dtype) : "no", w.n,
            w.n > 1 ? "s" : "", a->save_dir, cfg.tensor_model_parallel_size,
            cfg.pipeline_model_parallel_size, tokenizer);
    /* Megatron pads the vocabulary to a multiple of TP: training under a TP that does not divide
     * vocab_size loads the file's rows and starts the padding rows from initialisation */
    if (mg_config_padded_vocab(&cfg) != cfg.vocab_size)
        fprintf(stderr,
                "note: vocab_size %d pads to %d rows under tensor parallelism %d; training adds "
                "the %d padding rows from initialisation\n",
                cfg.vocab_size, mg_config_padded_vocab(&cfg), cfg.tensor_model_parallel_size,
                mg_config_padded_vocab(&cfg) - cfg.vocab_size);
fail:
    free(params);
    mg_gpt_free(&g);
    weights_free(&w);
    return st;
}
