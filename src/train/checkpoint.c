#include "train/checkpoint.h"

#include "core/env.h"
#include "core/file.h"
#include "core/flags.h"
#include "core/safetensors.h"
#include "model/hf_names.h"
#include "train/checkpoint_optim.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *TRACKER = "latest_checkpointed_iteration.txt";

static mg_status make_dir(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return MG_OK;
    return MG_FAIL(MG_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
}

static mg_status fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return MG_FAIL(MG_ERR_IO, "cannot open %s to flush it: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL)
        return MG_FAIL(MG_ERR_IO, "cannot flush %s: %s", path, strerror(errno));
    return MG_OK;
}

/* Writes text to path through a temporary and a rename. */
static mg_status write_text_atomic(const char *path, const char *text) {
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return mg_file_write_atomic(path, parts, sizes, 1);
}

static mg_status write_state(const char *path, const mg_train_state *s, const mg_config *cfg,
                             int n_shards, int n_stages, int n_files) {
    char *config_json = NULL;
    MG_CHECK(mg_config_to_json(cfg, &config_json));
    size_t cap = strlen(config_json) + 1024;
    char *text = malloc(cap);
    if (!text) {
        free(config_json);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the checkpoint state");
    }
    snprintf(text, cap,
             "{\n  \"format\": \"megatron.c checkpoint\", \"version\": 1,\n"
             "  \"iteration\": %" PRId64 ",\n  \"consumed_train_samples\": %" PRId64 ",\n"
             "  \"consumed_valid_samples\": %" PRId64 ",\n  \"lr_num_steps\": %" PRId64 ",\n"
             "  \"optimizer_step\": %" PRId64 ",\n  \"optimizer_shards\": %d,\n"
             "  \"pipeline_stages\": %d,\n  \"model_files\": %d,\n"
             "  \"rng\": {\"generator\": \"philox4x32-10\", \"seed\": %" PRId64 "},\n"
             "  \"config\": %s\n}\n",
             s->iteration, s->consumed_train_samples, s->consumed_valid_samples, s->lr_num_steps,
             s->optimizer_step, n_shards, n_stages, n_files, cfg->seed, config_json);
    free(config_json);
    mg_status st = write_text_atomic(path, text);
    free(text);
    return st;
}

static void iter_dir(char *out, size_t cap, const char *dir, int64_t it) {
    snprintf(out, cap, "%s/iter_%07" PRId64, dir, it);
}

/* The name MoE layer k's expert bias is stored under: its router weight's, with expert_bias for
 * weight (megatron-core's TopKRouter buffer). */
static void bias_name(const mg_gpt *g, int k, char *out) {
    const char *w = "";
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].moe && g->layers[l].moe->index == k)
            w = g->params.p[g->layers[l].moe->router_w].name;
    size_t n = strlen(w), suffix = strlen("weight");
    if (n >= suffix) n -= suffix;
    snprintf(out, MG_ST_NAME_CAP, "%.*sexpert_bias", (int)n, w);
}

/* This rank's files of the checkpoint, into tmp: data-parallel rank 0 of each pipeline stage the
 * stage's weights and whole optimizer file (unsharded), the first stage's also the state; every
 * rank its optimizer shard. */
static mg_status write_parts(const char *tmp, int rank, const mg_train_state *s,
                             const mg_config *cfg, const mg_gpt *g,
                             const mg_checkpoint_tensors *t) {
    char path[2200], file[64];
    mg_status st = MG_OK;
    mg_hf_export_set set;
    const int n_stages = t->n_stages > 1 ? t->n_stages : 1, ep = t->ep_size > 1 ? t->ep_size : 1;
    if ((t->owns[0] || t->owns[1]) &&
        (st = mg_hf_export_parts(g, t->params, t->owns[0], t->owns[1], &set)) == MG_OK) {
        char meta[128];
        snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"iteration\": \"%" PRId64 "\"}",
                 s->iteration);
        mg_hf_weights_file(file, sizeof file, t->stage * ep + t->ep_rank, n_stages * ep);
        snprintf(path, sizeof path, "%s/%s", tmp, file);
        int n_bias = t->owns[0] && t->expert_bias ? t->n_bias : 0;
        mg_st_tensor *all = calloc((size_t)(set.n + n_bias) + 1, sizeof *all);
        char(*names)[MG_ST_NAME_CAP] = calloc((size_t)n_bias + 1, sizeof *names);
        if (!all || !names) st = MG_FAIL(MG_ERR_NOMEM, "out of memory writing %s", path);
        for (int k = 0; st == MG_OK && k < set.n; k++) all[k] = set.tensors[k];
        for (int k = 0; st == MG_OK && k < n_bias; k++) {
            bias_name(g, k, names[k]);
            all[set.n + k] = (mg_st_tensor){.name = names[k],
                                            .dtype = MG_F32,
                                            .ndim = 1,
                                            .shape = {t->n_experts},
                                            .data = t->expert_bias + (size_t)k * t->n_experts};
        }
        if (st == MG_OK) st = mg_safetensors_write(path, all, set.n + n_bias, meta);
        free(all);
        free(names);
        mg_hf_export_free(&set);
    }
    /* fault injection for the crash-safety test: fail as a full disk would, mid-checkpoint */
    if (st == MG_OK && strcmp(mg_env_str("MG_FAULT_CHECKPOINT", ""), "after-model") == 0)
        st = MG_FAIL(MG_ERR_IO,
                     "cannot write the optimizer state in %s: injected fault "
                     "(MG_FAULT_CHECKPOINT=after-model)",
                     tmp);
    if (st == MG_OK && (rank == 0 || t->n_shards > 0)) {
        mg_checkpoint_optim_name(file, sizeof file, t->stage, n_stages, rank, t->n_shards);
        snprintf(path, sizeof path, "%s/%s", tmp, file);
        st = mg_checkpoint_optim_write(path, g, t, rank);
    }
    if (st == MG_OK && rank == 0 && t->stage == 0) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        st = write_state(path, s, cfg, t->n_shards, n_stages, n_stages * ep);
    }
    if (st == MG_OK) st = fsync_path(tmp);
    return st;
}

/* Every member of the data-parallel and pipeline groups learns whether all wrote their part
 * (MPI: host memory): the maximum over dp, then over pp, is the maximum over both. */
static mg_status agree(mg_comm *dp, mg_comm *pp, mg_status mine, bool *all_ok) {
    int32_t bad = mine != MG_OK;
    if (dp) MG_CHECK(mg_comm_all_reduce(dp, &bad, &bad, 1, MG_I32, MG_REDUCE_MAX, NULL));
    if (pp) MG_CHECK(mg_comm_all_reduce(pp, &bad, &bad, 1, MG_I32, MG_REDUCE_MAX, NULL));
    *all_ok = !bad;
    return MG_OK;
}

/* Rank 0: iter_N.tmp becomes iter_N (an older one of the same iteration is replaced only now),
 * then the tracker names it. */
static mg_status commit(const char *dir, const char *tmp, const char *final, int64_t it) {
    char old[2100], path[2200];
    snprintf(old, sizeof old, "%s.old-%d", final, (int)getpid());
    bool had_old = rename(final, old) == 0;
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (had_old) rename(old, final);
        mg_file_remove_dir(tmp);
        return MG_FAIL(MG_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    if (had_old) mg_file_remove_dir(old);
    MG_CHECK(fsync_path(dir));
    char text[32];
    snprintf(text, sizeof text, "%" PRId64 "\n", it);
    snprintf(path, sizeof path, "%s/%s", dir, TRACKER);
    return write_text_atomic(path, text);
}

mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t, mg_comm *dp,
                             mg_comm *pp) {
    const int rank = dp ? mg_comm_rank(dp) : 0;
    const bool first = rank == 0 && t->stage == 0; /* the world's rank 0 */
    char final[2048], tmp[2100];
    iter_dir(final, sizeof final, dir, s->iteration);
    /* rank 0 makes the temporary directory; its PID names it for everyone (over the pipeline
     * group of data-parallel rank 0, then over each data-parallel group) */
    int64_t id = getpid();
    if (first) {
        MG_CHECK(make_dir(dir));
        snprintf(tmp, sizeof tmp, "%s.tmp-%" PRId64, final, id);
        mg_file_remove_dir(tmp);
        MG_CHECK(make_dir(tmp));
    }
    if (pp) MG_CHECK(mg_comm_broadcast(pp, &id, 1, MG_I64, 0, NULL));
    if (dp) MG_CHECK(mg_comm_broadcast(dp, &id, 1, MG_I64, 0, NULL));
    snprintf(tmp, sizeof tmp, "%s.tmp-%" PRId64, final, id);
    mg_status st = write_parts(tmp, rank, s, cfg, g, t);
    bool all_ok;
    MG_CHECK(agree(dp, pp, st, &all_ok)); /* keeps this rank's error message when it succeeds */
    if (!all_ok) {
        if (first) mg_file_remove_dir(tmp);
        if (st == MG_OK)
            return MG_FAIL(MG_ERR_IO,
                           "checkpoint %s not saved: another rank could not write its part "
                           "(its own error says why)",
                           final);
        mg_error_frame(__func__, __FILE__, __LINE__, "writing the checkpoint");
        return st;
    }
    if (first) st = commit(dir, tmp, final, s->iteration);
    /* nobody returns before rank 0 has committed (or failed, which its peers then hear) */
    if (pp && st == MG_OK) st = mg_comm_barrier(pp, NULL);
    if (dp && st == MG_OK) st = mg_comm_barrier(dp, NULL);
    return st;
}

mg_status mg_checkpoint_latest(const char *dir, int64_t *iteration) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, TRACKER);
    *iteration = -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return MG_OK;
        return MG_FAIL(MG_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++) /* keep the error message on one line */
        if (buf[i] < ' ' && buf[i] != '\n') buf[i] = '?';
    char *end;
    long long it = strtoll(buf, &end, 10);
    while (*end == '\n' || *end == ' ' || *end == '\r') end++;
    if (end == buf || *end || it < 0) {
        buf[strcspn(buf, "\n")] = 0;
        return MG_FAIL(MG_ERR_FORMAT, "%s: expected an iteration number, found '%.20s'", path, buf);
    }
    *iteration = it;
    return MG_OK;
}

static mg_status json_i64(const cJSON *root, const char *key, const char *path, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v)) return MG_FAIL(MG_ERR_FORMAT, "%s: missing integer '%s'", path, key);
    *out = (int64_t)v->valuedouble;
    return MG_OK;
}

/* The checkpoint must describe the same model as the command line. */
static mg_status check_same_model(const mg_config *saved, const mg_config *now, const char *path) {
#define SAME(field, flag)                                                                          \
    if (saved->field != now->field)                                                                \
        return MG_FAIL(MG_ERR_USAGE,                                                               \
                       "%s was saved with " flag " %lld but this run has %lld; "                   \
                       "use the checkpoint's value",                                               \
                       path, (long long)saved->field, (long long)now->field);
    SAME(num_layers, "--num-layers")
    SAME(hidden_size, "--hidden-size")
    SAME(ffn_hidden_size, "--ffn-hidden-size")
    SAME(num_attention_heads, "--num-attention-heads")
    SAME(num_query_groups, "--num-query-groups")
    SAME(kv_channels, "--kv-channels")
    SAME(max_position_embeddings, "--max-position-embeddings")
    SAME(vocab_size, "--vocab-size")
    SAME(make_vocab_size_divisible_by, "--make-vocab-size-divisible-by")
    SAME(position_embedding, "--position-embedding-type (enum)")
    SAME(normalization, "--normalization (enum)")
    SAME(swiglu, "--swiglu")
    SAME(disable_bias_linear, "--disable-bias-linear")
    SAME(untie_embeddings, "--untie-embeddings-and-output-weights")
#undef SAME
    return MG_OK;
}

static mg_status parse_state(const char *path, cJSON **root) {
    char *text;
    MG_CHECK(mg_file_read(path, &text, NULL));
    *root = cJSON_Parse(text);
    free(text);
    return *root ? MG_OK : MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON", path);
}

static mg_status saved_config(const cJSON *root, const char *path, mg_config *saved) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (!cJSON_IsObject(c)) return MG_FAIL(MG_ERR_FORMAT, "%s: missing the 'config' object", path);
    mg_config_defaults(saved);
    return mg_config_from_cjson(saved, c);
}

/* "pipeline_stages" and "model_files" of a state.json (absent before pipeline and expert
 * parallelism: 1 stage, one file per stage). */
static mg_status json_stages(const cJSON *root, const char *path, int *n_stages, int *n_files) {
    const char *keys[2] = {"pipeline_stages", "model_files"};
    int64_t v[2] = {1, 0};
    for (int k = 0; k < 2; k++) {
        if (cJSON_GetObjectItemCaseSensitive(root, keys[k]))
            MG_CHECK(json_i64(root, keys[k], path, &v[k]));
        else if (k == 1)
            v[1] = v[0];
        if (v[k] < 1 || v[k] > 1 << 16)
            return MG_FAIL(MG_ERR_FORMAT, "%s: %s %" PRId64 " is out of range", path, keys[k],
                           v[k]);
    }
    *n_stages = (int)v[0];
    *n_files = (int)v[1];
    return MG_OK;
}

static mg_status load_state(const char *path, mg_train_state *s, const mg_config *cfg,
                            int *n_shards, int *n_stages, int *n_files) {
    cJSON *root = NULL;
    MG_CHECK(parse_state(path, &root));
    mg_status st = json_i64(root, "iteration", path, &s->iteration);
    if (st == MG_OK)
        st = json_i64(root, "consumed_train_samples", path, &s->consumed_train_samples);
    if (st == MG_OK)
        st = json_i64(root, "consumed_valid_samples", path, &s->consumed_valid_samples);
    if (st == MG_OK) st = json_i64(root, "lr_num_steps", path, &s->lr_num_steps);
    if (st == MG_OK) st = json_i64(root, "optimizer_step", path, &s->optimizer_step);
    /* absent before the distributed optimizer: one whole file */
    int64_t shards = 0;
    if (st == MG_OK && cJSON_GetObjectItemCaseSensitive(root, "optimizer_shards"))
        st = json_i64(root, "optimizer_shards", path, &shards);
    if (st == MG_OK && (shards < 0 || shards > 1 << 20))
        st = MG_FAIL(MG_ERR_FORMAT, "%s: optimizer_shards %" PRId64 " is out of range", path,
                     shards);
    *n_shards = (int)shards;
    if (st == MG_OK) st = json_stages(root, path, n_stages, n_files);
    if (st == MG_OK) {
        mg_config saved;
        st = saved_config(root, path, &saved);
        if (st == MG_OK) st = check_same_model(&saved, cfg, path);
    }
    cJSON_Delete(root);
    return st;
}

mg_status mg_checkpoint_load_config(const char *dir, int64_t it, mg_config *cfg) {
    char path[2200];
    snprintf(path, sizeof path, "%s/iter_%07" PRId64 "/state.json", dir, it);
    cJSON *root = NULL;
    MG_CHECK(parse_state(path, &root));
    mg_status st = saved_config(root, path, cfg);
    cJSON_Delete(root);
    return st;
}

/* This stage's expert biases (t->expert_bias) from whichever of the n files holds them. */
static mg_status load_biases(const mg_safetensors *sf, const char (*paths)[2200], int n,
                             const mg_gpt *g, mg_checkpoint_tensors *t) {
    for (int k = 0; t->expert_bias && k < t->n_bias; k++) {
        char name[MG_ST_NAME_CAP];
        bias_name(g, k, name);
        const mg_st_entry *e = NULL;
        int f = 0;
        for (; f < n && !e; f++) e = mg_safetensors_find(&sf[f], name);
        if (!e)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: the checkpoint has no '%s' (saved without "
                           "--moe-router-enable-expert-bias?)",
                           paths[0], name);
        if (e->dtype != MG_F32 || e->nbytes != (size_t)t->n_experts * sizeof(float))
            return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be %d fp32 values", paths[f - 1], name,
                           t->n_experts);
        memcpy(t->expert_bias + (size_t)k * t->n_experts, e->data, e->nbytes);
    }
    return MG_OK;
}

/* The weights this model needs from the n_stages model files of iteration directory base
 * (each file holds its own tensors: any layout reads any other's), and t's expert biases (t may
 * be NULL: the weights alone). */
static mg_status load_weights(const char *base, int n_files, const mg_gpt *g, float *params,
                              mg_checkpoint_tensors *t) {
    mg_safetensors *sf = calloc((size_t)n_files, sizeof *sf);
    char(*paths)[2200] = calloc((size_t)n_files, sizeof *paths);
    const char **names = calloc((size_t)n_files, sizeof *names);
    mg_status st = sf && paths && names ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory");
    int opened = 0;
    for (; st == MG_OK && opened < n_files; opened++) {
        char file[64];
        mg_hf_weights_file(file, sizeof file, opened, n_files);
        snprintf(paths[opened], sizeof paths[opened], "%s/%s", base, file);
        names[opened] = paths[opened];
        if ((st = mg_safetensors_open(&sf[opened], paths[opened])) != MG_OK) break;
    }
    if (st == MG_OK) st = mg_hf_import_files(g, sf, names, n_files, params);
    if (st == MG_OK && t) st = load_biases(sf, (const char(*)[2200])paths, n_files, g, t);
    for (int k = 0; k < opened; k++) mg_safetensors_close(&sf[k]);
    free(sf);
    free(paths);
    free(names);
    return st;
}

mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params) {
    char base[2048], path[2200];
    iter_dir(base, sizeof base, dir, it);
    snprintf(path, sizeof path, "%s/state.json", base);
    cJSON *root = NULL;
    int n_stages = 1, n_files = 1;
    MG_CHECK(parse_state(path, &root));
    mg_status st = json_stages(root, path, &n_stages, &n_files);
    cJSON_Delete(root);
    MG_CHECK(st);
    return load_weights(base, n_files, g, params, NULL);
}

mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t) {
    char base[2048], path[2200];
    iter_dir(base, sizeof base, dir, it);
    snprintf(path, sizeof path, "%s/state.json", base);
    int n_shards = 0, n_stages = 1, n_files = 1;
    MG_CHECK(load_state(path, s, cfg, &n_shards, &n_stages, &n_files));
    if (s->iteration != it)
        return MG_FAIL(MG_ERR_FORMAT, "%s: iteration %" PRId64 " does not match the directory name",
                       path, s->iteration);
    MG_CHECK(load_weights(base, n_files, g, t->params, t));
    return mg_checkpoint_optim_load(base, n_stages, n_shards, g, t);
}
