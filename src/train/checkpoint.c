#include "train/checkpoint.h"

#include "core/env.h"
#include "core/file.h"
#include "core/flags.h"
#include "model/hf_names.h"

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

static mg_status write_optimizer(const char *path, const mg_gpt *g, const mg_checkpoint_tensors *t) {
    int n = g->params.n;
    mg_st_tensor *ts = calloc((size_t)(2 * n), sizeof *ts);
    char *names = calloc((size_t)(2 * n), 128);
    if (!ts || !names) {
        free(ts), free(names);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the optimizer checkpoint table");
    }
    for (int i = 0; i < n; i++) {
        const mg_param_meta *p = &g->params.p[i];
        for (int k = 0; k < 2; k++) {
            mg_st_tensor *x = &ts[2 * i + k];
            char *nm = names + (size_t)(2 * i + k) * 128;
            snprintf(nm, 128, "%s.%s", k ? "exp_avg_sq" : "exp_avg", p->name);
            x->name = nm;
            x->dtype = MG_F32;
            x->ndim = p->ndim;
            x->shape[0] = p->shape[0];
            x->shape[1] = p->shape[1];
            x->data = (k ? t->exp_avg_sq : t->exp_avg) + p->offset;
        }
    }
    mg_status st = mg_safetensors_write(path, ts, 2 * n, NULL);
    free(ts);
    free(names);
    return st;
}

static mg_status write_state(const char *path, const mg_train_state *s, const mg_config *cfg) {
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
             "  \"optimizer_step\": %" PRId64 ",\n"
             "  \"rng\": {\"generator\": \"philox4x32-10\", \"seed\": %" PRId64 "},\n"
             "  \"config\": %s\n}\n",
             s->iteration, s->consumed_train_samples, s->consumed_valid_samples, s->lr_num_steps,
             s->optimizer_step, cfg->seed, config_json);
    free(config_json);
    mg_status st = write_text_atomic(path, text);
    free(text);
    return st;
}

static void iter_dir(char *out, size_t cap, const char *dir, int64_t it) {
    snprintf(out, cap, "%s/iter_%07" PRId64, dir, it);
}

/* Best-effort removal of a checkpoint directory's known files and the directory itself. */
static void remove_ckpt_dir(const char *path) {
    static const char *files[] = {"model.safetensors", "optimizer.safetensors", "state.json"};
    char f[2200];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(f, sizeof f, "%s/%s", path, files[i]);
        unlink(f);
    }
    rmdir(path);
}

mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t) {
    char final[2048], tmp[2100], path[2200], old[2100];
    MG_CHECK(make_dir(dir));
    iter_dir(final, sizeof final, dir, s->iteration);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", final, (int)getpid());
    remove_ckpt_dir(tmp);
    MG_CHECK(make_dir(tmp));

    mg_hf_export_set set;
    MG_CHECK(mg_hf_export(g, t->params, &set));
    char meta[128];
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"iteration\": \"%" PRId64 "\"}", s->iteration);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    mg_status st = mg_safetensors_write(path, set.tensors, set.n, meta);
    mg_hf_export_free(&set);
    /* fault injection for the crash-safety test: fail as a full disk would, mid-checkpoint */
    if (st == MG_OK && strcmp(mg_env_str("MG_FAULT_CHECKPOINT", ""), "after-model") == 0)
        st = MG_FAIL(MG_ERR_IO, "cannot write %s/optimizer.safetensors: injected fault "
                                "(MG_FAULT_CHECKPOINT=after-model)", tmp);
    if (st == MG_OK) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        st = write_optimizer(path, g, t);
    }
    if (st == MG_OK) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        st = write_state(path, s, cfg);
    }
    if (st == MG_OK) st = fsync_path(tmp);
    if (st != MG_OK) {
        remove_ckpt_dir(tmp);
        mg_error_frame(__func__, __FILE__, __LINE__, "writing the checkpoint");
        return st;
    }
    /* an older checkpoint of the same iteration is replaced only once the new one is complete */
    snprintf(old, sizeof old, "%s.old-%d", final, (int)getpid());
    bool had_old = rename(final, old) == 0;
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (had_old) rename(old, final);
        remove_ckpt_dir(tmp);
        return MG_FAIL(MG_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    if (had_old) remove_ckpt_dir(old);
    MG_CHECK(fsync_path(dir));
    char text[32];
    snprintf(text, sizeof text, "%" PRId64 "\n", s->iteration);
    snprintf(path, sizeof path, "%s/%s", dir, TRACKER);
    MG_CHECK(write_text_atomic(path, text));
    return MG_OK;
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
        return MG_FAIL(MG_ERR_USAGE, "%s was saved with " flag " %lld but this run has %lld; "     \
                                     "use the checkpoint's value",                                 \
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

static mg_status load_state(const char *path, mg_train_state *s, const mg_config *cfg) {
    cJSON *root = NULL;
    MG_CHECK(parse_state(path, &root));
    mg_status st = json_i64(root, "iteration", path, &s->iteration);
    if (st == MG_OK) st = json_i64(root, "consumed_train_samples", path, &s->consumed_train_samples);
    if (st == MG_OK) st = json_i64(root, "consumed_valid_samples", path, &s->consumed_valid_samples);
    if (st == MG_OK) st = json_i64(root, "lr_num_steps", path, &s->lr_num_steps);
    if (st == MG_OK) st = json_i64(root, "optimizer_step", path, &s->optimizer_step);
    if (st == MG_OK) {
        mg_config saved;
        st = saved_config(root, path, &saved);
        if (st == MG_OK) st = check_same_model(&saved, cfg, path);
    }
    cJSON_Delete(root);
    return st;
}

static mg_status load_optimizer(const char *path, const mg_gpt *g, mg_checkpoint_tensors *t) {
    mg_safetensors sf;
    MG_CHECK(mg_safetensors_open(&sf, path));
    mg_status st = MG_OK;
    for (int i = 0; i < g->params.n && st == MG_OK; i++) {
        const mg_param_meta *p = &g->params.p[i];
        for (int k = 0; k < 2 && st == MG_OK; k++) {
            char name[160];
            snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", p->name);
            const mg_st_entry *e = mg_safetensors_find(&sf, name);
            if (!e) st = MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
            else if (e->dtype != MG_F32 || e->nbytes != (size_t)p->numel * sizeof(float))
                st = MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' has the wrong dtype or size", path,
                             name);
            else memcpy((k ? t->exp_avg_sq : t->exp_avg) + p->offset, e->data, e->nbytes);
        }
    }
    mg_safetensors_close(&sf);
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

mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params) {
    char path[2200];
    snprintf(path, sizeof path, "%s/iter_%07" PRId64 "/model.safetensors", dir, it);
    mg_safetensors sf;
    MG_CHECK(mg_safetensors_open(&sf, path));
    mg_status st = mg_hf_import(g, &sf, path, params);
    mg_safetensors_close(&sf);
    return st;
}

mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t) {
    char base[2048], path[2200];
    iter_dir(base, sizeof base, dir, it);
    snprintf(path, sizeof path, "%s/state.json", base);
    MG_CHECK(load_state(path, s, cfg));
    if (s->iteration != it)
        return MG_FAIL(MG_ERR_FORMAT, "%s: iteration %" PRId64 " does not match the directory name",
                       path, s->iteration);
    MG_CHECK(mg_checkpoint_load_weights(dir, it, g, t->params));
    snprintf(path, sizeof path, "%s/optimizer.safetensors", base);
    MG_CHECK(load_optimizer(path, g, t));
    return MG_OK;
}
