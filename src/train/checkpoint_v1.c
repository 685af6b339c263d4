/* Reading checkpoints of format version 1 (train/checkpoint_v1.h). */
#include "train/checkpoint_v1.h"

#include "core/safetensors.h"
#include "convert/hf_names.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const MOMENT[2] = {"exp_avg", "exp_avg_sq"};

static void optim_name(char *out, size_t cap, int stage, int n_stages, int shard, int n_shards) {
    char pp[32] = "";
    if (n_stages > 1) snprintf(pp, sizeof pp, "-pp%03d", stage);
    if (n_shards == 0)
        snprintf(out, cap, "optimizer%s.safetensors", pp);
    else
        snprintf(out, cap, "optimizer%s-%05d-of-%05d.safetensors", pp, shard + 1, n_shards);
}

/* [a, b) of a shard file's tensor for parameter p: its metadata entry, else the whole tensor. */
static mg_status piece_range(const cJSON *meta, const char *path, const mg_param_meta *p,
                             const mg_st_entry *e, int64_t *a, int64_t *b) {
    const cJSON *r = meta ? cJSON_GetObjectItemCaseSensitive(meta, mg_gpt_saved_name(p)) : NULL;
    if (!r) {
        *a = 0;
        *b = p->numel;
    } else {
        char *end = NULL;
        const char *s = cJSON_IsString(r) ? r->valuestring : "";
        errno = 0;
        long long x = strtoll(s, &end, 10), y = -1;
        if (end != s && *end == ':') y = strtoll(end + 1, &end, 10);
        if (errno || *end || x < 0 || y <= x || y > p->numel)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: metadata '%s' should be the range 'a:b' of its %" PRId64
                           " elements, got '%.40s'",
                           path, p->name, p->numel, s);
        *a = x;
        *b = y;
    }
    if (e->dtype != MG_F32 || e->nbytes != (size_t)(*b - *a) * sizeof(float))
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' has the wrong dtype or size (fp32 elements %" PRId64
                       "..%" PRId64 " of %s expected)",
                       path, e->name, *a, *b, p->name);
    return MG_OK;
}

/* Copies what one file holds of t's pieces; covered[i] counts the elements found for piece i. */
static mg_status load_file(const char *path, const mg_gpt *g, mg_checkpoint_tensors *t,
                           int64_t *covered) {
    mg_safetensors sf;
    MG_CHECK(mg_safetensors_open(&sf, path));
    cJSON *meta = sf.metadata_json ? cJSON_Parse(sf.metadata_json) : NULL;
    mg_status st = MG_OK;
    for (int i = 0; st == MG_OK && i < t->n_pieces; i++) {
        const mg_optim_piece *pc = &t->pieces[i];
        const mg_param_meta *p = &g->params.p[pc->index];
        const mg_st_entry *e[2];
        char name[MG_ST_NAME_CAP];
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "%s.%s", MOMENT[k], mg_gpt_saved_name(p));
            e[k] = mg_safetensors_find(&sf, name);
        }
        if (!e[0] && !e[1]) continue; /* another file's */
        if (!e[0] || !e[1]) {
            st = MG_FAIL(MG_ERR_FORMAT, "%s: '%s.%s' is missing", path, MOMENT[!e[1]], p->name);
            break;
        }
        int64_t a[2], b[2];
        for (int k = 0; st == MG_OK && k < 2; k++)
            st = piece_range(meta, path, p, e[k], &a[k], &b[k]);
        int64_t lo = a[0] > pc->param_start ? a[0] : pc->param_start;
        int64_t hi = b[0] < pc->param_end ? b[0] : pc->param_end;
        if (st != MG_OK || hi <= lo) continue;
        for (int k = 0; k < 2; k++) {
            float *dst = (k ? t->exp_avg_sq : t->exp_avg) + pc->local + (lo - pc->param_start);
            memcpy(dst, (const float *)e[k]->data + (lo - a[0]), (size_t)(hi - lo) * sizeof(float));
        }
        covered[i] += hi - lo;
    }
    cJSON_Delete(meta);
    mg_safetensors_close(&sf);
    return st;
}

static mg_status optim_load(const char *iter_dir, int n_stages, int n_shards, const mg_gpt *g,
                            mg_checkpoint_tensors *t) {
    int64_t *covered = calloc((size_t)t->n_pieces + 1, sizeof *covered);
    if (!covered) return MG_FAIL(MG_ERR_NOMEM, "out of memory loading the optimizer state");
    mg_status st = MG_OK;
    char file[64], path[2300];
    for (int r = 0; st == MG_OK && r < (n_stages > 1 ? n_stages : 1); r++)
        for (int k = 0; st == MG_OK && k < (n_shards ? n_shards : 1); k++) {
            optim_name(file, sizeof file, r, n_stages, k, n_shards);
            snprintf(path, sizeof path, "%s/%s", iter_dir, file);
            st = load_file(path, g, t, covered);
        }
    for (int i = 0; st == MG_OK && i < t->n_pieces; i++) {
        const mg_optim_piece *pc = &t->pieces[i];
        int64_t want = pc->param_end - pc->param_start;
        if (covered[i] != want)
            st = MG_FAIL(MG_ERR_FORMAT,
                         "%s: the optimizer files hold %" PRId64 " of the %" PRId64
                         " moment elements [%" PRId64 ", %" PRId64 ") of %s this rank needs",
                         iter_dir, covered[i], want, pc->param_start, pc->param_end,
                         g->params.p[pc->index].name);
    }
    free(covered);
    return st;
}

/* This stage's expert biases (t->expert_bias) from whichever of the n files holds them. */
static mg_status load_biases(const mg_safetensors *sf, const char (*paths)[2200], int n,
                             const mg_gpt *g, mg_checkpoint_tensors *t) {
    for (int k = 0; t->expert_bias && k < t->n_bias; k++) {
        char name[MG_ST_NAME_CAP];
        mg_gpt_moe_bias_name(g, k, name, sizeof name);
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

/* The weights this model needs from the n model files of iteration directory base (each file
 * holds its own tensors: any pipeline layout reads any other's), and t's expert biases. */
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

mg_status mg_checkpoint_v1_load(const char *iter_dir, int n_stages, int n_files, int n_shards,
                                const mg_gpt *g, float *params, mg_checkpoint_tensors *t) {
    if (g->params.tp_size > 1)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s is a version 1 checkpoint (written before 2026-11-26), which loads only "
                       "with --tensor-model-parallel-size 1; resume it on TP 1 and save again to "
                       "reshard it",
                       iter_dir);
    MG_CHECK(load_weights(iter_dir, n_files, g, params, t));
    return t ? optim_load(iter_dir, n_stages, n_shards, g, t) : MG_OK;
}
