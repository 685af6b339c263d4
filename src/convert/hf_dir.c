/* A Hugging Face model directory, written from a model or read into one (hf_dir.h). */
#include "convert/hf_dir.h"

#include "config/flags.h"
#include "convert/hf_config.h"
#include "convert/hf_names.h"
#include "core/file.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "data/tokenizer.h"
#include "data/tokenizer_gpt2.h"
#include "parallel/pipeline/layers.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_CAP 2300

/* dir/name holding text / a copy of file `from`, each written atomically. */
static mg_status write_text(const char *dir, const char *name, const char *text) {
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return mg_file_write_atomic(path, parts, sizes, 1);
}

static mg_status copy_file(const char *from, const char *dir, const char *name) {
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

/* ---- writing ---- */

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
        st = text ? write_text(dir, "model.safetensors.index.json", text)
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
    MG_CHECK(copy_file(vocab, dir, "vocab.json"));
    MG_CHECK(copy_file(merges, dir, "merges.txt"));
    char text[512];
    snprintf(text, sizeof text,
             "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
             "  \"add_prefix_space\": false,\n  \"bos_token\": \"<|endoftext|>\",\n"
             "  \"eos_token\": \"<|endoftext|>\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n",
             S);
    MG_CHECK(write_text(dir, "tokenizer_config.json", text));
    return write_text(
        dir, "special_tokens_map.json",
        "{\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
        "  \"unk_token\": \"<|endoftext|>\"\n}\n");
}

mg_status mg_hf_dir_write(const char *dir, const mg_gpt *g, const float *params,
                          const mg_config *cfg, const mg_hf_dir_write_options *o,
                          mg_hf_dir_written *out) {
    const char *vocab = o->vocab_file ? o->vocab_file : "";
    const char *merges = o->merge_file ? o->merge_file : "";
    bool tokenizer = vocab[0] && merges[0];
    char *config;
    MG_CHECK(mg_hf_config_json(g, cfg, o->bf16 ? "bfloat16" : "float32", tokenizer, &config,
                               &out->family));
    mg_status st = mkdir(dir, 0755) == 0
                       ? MG_OK
                       : MG_FAIL(MG_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    if (st == MG_OK) st = write_text(dir, "config.json", config);
    free(config);
    MG_CHECK(st);
    MG_CHECK(write_text(dir, "generation_config.json",
                        tokenizer ? "{\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256\n}\n"
                                  : "{}\n"));
    mg_hf_export_set set = {0};
    MG_CHECK(mg_hf_export(g, params, &set));
    st = write_weights(dir, &set, o->bf16 ? MG_BF16 : MG_F32, o->max_shard);
    out->n_tensors = set.n;
    mg_hf_export_free(&set);
    MG_CHECK(st);
    if (tokenizer) MG_CHECK(write_tokenizer(dir, vocab, merges, cfg->seq_length));
    out->tokenizer = tokenizer;
    return MG_OK;
}

/* ---- reading ---- */

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The model flags of dir/config.json, and the target layout checked as training would. */
static mg_status read_config(const mg_hf_dir_read_options *o, mg_config *cfg, const char **family) {
    char path[PATH_CAP], *text;
    snprintf(path, sizeof path, "%s/config.json", o->dir);
    if (!is_file(path))
        return MG_FAIL(MG_ERR_IO,
                       "%s has no config.json; --loader hf reads a Hugging Face model directory "
                       "(what save_pretrained writes)",
                       o->dir);
    MG_CHECK(mg_file_read(path, &text, NULL));
    mg_config_defaults(cfg);
    cfg->tensor_model_parallel_size = o->tp;
    cfg->pipeline_model_parallel_size = o->pp;
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
                       o->tp, o->pp, path, why);
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

/* The tokenizer tok, read from path, has no token outside the model's vocabulary (tok is
 * freed). */
static mg_status check_fits(mg_tokenizer *tok, const char *path, const mg_config *cfg) {
    int n = mg_tokenizer_vocab_size(tok);
    mg_tokenizer_free(tok);
    if (n > cfg->vocab_size)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s has %d tokens but the model's vocab_size is %d; give the model's own "
                       "tokenizer",
                       path, n, cfg->vocab_size);
    return MG_OK;
}

/* A tokenizer.json (HuggingFaceTokenizer) or tokenizer.model (Llama2Tokenizer) of the
 * directory, when one loads: checked against the model's vocabulary, copied into out_dir with its
 * companions and recorded in cfg. *name: what the summary says; why none loaded goes into why. */
static mg_status add_model_tokenizer(const mg_hf_dir_read_options *o, mg_config *cfg,
                                     const char **name, char *why, size_t why_cap) {
    static const char *const files[2] = {"tokenizer.json", "tokenizer.model"};
    static const char *const types[2] = {"HuggingFaceTokenizer", "Llama2Tokenizer"};
    for (int k = 0; k < 2; k++) {
        char path[PATH_CAP], final[sizeof cfg->tokenizer_model - 32];
        snprintf(path, sizeof path, "%s/%s", o->dir, files[k]);
        if (!is_file(path)) continue;
        mg_tokenizer *tok = NULL;
        mg_tokenizer_spec spec = {.type = types[k], .model = k ? path : o->dir};
        if (mg_tokenizer_load(&tok, &spec) != MG_OK) { /* not ours to read: say why, go on */
            snprintf(why, why_cap, "%s", mg_error_message());
            mg_error_clear();
            continue;
        }
        MG_CHECK(check_fits(tok, path, cfg));
        MG_CHECK(copy_file(path, o->out_dir, files[k]));
        static const char *const companions[] = {"tokenizer_config.json",
                                                 "special_tokens_map.json"};
        for (int c = 0; k == 0 && c < 2; c++) {
            snprintf(path, sizeof path, "%s/%s", o->dir, companions[c]);
            if (is_file(path)) MG_CHECK(copy_file(path, o->out_dir, companions[c]));
        }
        MG_CHECK(absolute_dir(o->final_dir, final, sizeof final));
        snprintf(cfg->tokenizer_type, sizeof cfg->tokenizer_type, "%s", types[k]);
        snprintf(cfg->tokenizer_model, sizeof cfg->tokenizer_model, "%s%s", final,
                 k ? "/tokenizer.model" : "");
        *name = k ? "SentencePiece tokenizer (Llama2Tokenizer)"
                  : "tokenizer.json (HuggingFaceTokenizer)";
        return MG_OK;
    }
    return MG_OK;
}

/* The tokenizer: GPT-2's files (the options', else the directory's vocab.json and merges.txt),
 * else the directory's tokenizer.json or tokenizer.model; checked, copied into out_dir and
 * recorded in m->cfg under the final directory's absolute path; m->tokenizer says what. */
static mg_status add_tokenizer(const mg_hf_dir_read_options *o, mg_hf_model *m) {
    mg_config *cfg = &m->cfg;
    char vocab[PATH_CAP], merges[PATH_CAP], final[sizeof cfg->vocab_file - 16];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", o->dir);
    snprintf(merges, sizeof merges, "%s/merges.txt", o->dir);
    if (o->vocab_file) {
        snprintf(vocab, sizeof vocab, "%s", o->vocab_file);
        snprintf(merges, sizeof merges, "%s", o->merge_file);
    } else if (!is_file(vocab) || !is_file(merges)) {
        char why[512] = "";
        const char *name = NULL;
        MG_CHECK(add_model_tokenizer(o, cfg, &name, why, sizeof why));
        if (name) {
            snprintf(m->tokenizer, sizeof m->tokenizer, "%s", name);
            return MG_OK;
        }
        snprintf(m->tokenizer, sizeof m->tokenizer,
                 "no tokenizer (%s%s; --vocab-file and --merge-file add GPT-2's)",
                 why[0] ? ""
                        : "the directory has no vocab.json and merges.txt, tokenizer.json "
                          "or tokenizer.model",
                 why);
        return MG_OK;
    }
    mg_tokenizer *tok;
    MG_CHECK(mg_tokenizer_gpt2_load(&tok, vocab, merges));
    MG_CHECK(check_fits(tok, vocab, cfg));
    MG_CHECK(copy_file(vocab, o->out_dir, "vocab.json"));
    MG_CHECK(copy_file(merges, o->out_dir, "merges.txt"));
    MG_CHECK(absolute_dir(o->final_dir, final, sizeof final));
    snprintf(cfg->tokenizer_type, sizeof cfg->tokenizer_type, "GPT2BPETokenizer");
    snprintf(cfg->vocab_file, sizeof cfg->vocab_file, "%s/vocab.json", final);
    snprintf(cfg->merge_file, sizeof cfg->merge_file, "%s/merges.txt", final);
    snprintf(m->tokenizer, sizeof m->tokenizer, "GPT-2 tokenizer");
    return MG_OK;
}

mg_status mg_hf_dir_read(const mg_hf_dir_read_options *o, mg_hf_model *m) {
    memset(m, 0, sizeof *m);
    hf_weights w = {0};
    mg_status st = MG_OK;
    MG_CHECK(read_config(o, &m->cfg, &m->family));
    MG_CHECK_GOTO(weights_open(&w, o->dir), st, done);
    weights_add_prefix(&w, !strcmp(m->family, "GPT2LMHeadModel"));
    m->n_files = w.n;
    m->weights_dtype = w.files[0].n ? mg_dtype_name(w.files[0].entries[0].dtype) : "no";
    /* the whole model on one process, whatever layout the checkpoint records */
    mg_config one = m->cfg;
    mg_config_single_process(&one);
    MG_CHECK_GOTO(mg_gpt_build(&m->g, &one, 0, 0, 0), st, done);
    m->params = calloc(m->g.params.numel ? m->g.params.numel : 1, sizeof *m->params);
    if (!m->params) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for %zu parameters", m->g.params.numel);
        goto done;
    }
    MG_CHECK_GOTO(mg_hf_import_files(&m->g, w.files, w.names, w.n, m->params), st, done);
    if (mkdir(o->out_dir, 0755) != 0) {
        st = MG_FAIL(MG_ERR_IO, "cannot create %s: %s", o->out_dir, strerror(errno));
        goto done;
    }
    MG_CHECK_GOTO(add_tokenizer(o, m), st, done);
done:
    weights_free(&w);
    return st;
}

void mg_hf_model_free(mg_hf_model *m) {
    free(m->params);
    mg_gpt_free(&m->g);
    m->params = NULL;
}
