/* Optimizer files of a checkpoint: this rank's pieces out, any file set's pieces in (format in
 * train/checkpoint.h). */
#include "train/checkpoint_optim.h"

#include "core/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *const MOMENT[2] = {"exp_avg", "exp_avg_sq"};

void mg_checkpoint_optim_name(char *out, size_t cap, int stage, int n_stages, int shard,
                              int n_shards) {
    char pp[32] = "";
    if (n_stages > 1) snprintf(pp, sizeof pp, "-pp%03d", stage);
    if (n_shards == 0)
        snprintf(out, cap, "optimizer%s.safetensors", pp);
    else
        snprintf(out, cap, "optimizer%s-%05d-of-%05d.safetensors", pp, shard + 1, n_shards);
}

/* The name a parameter's moments are stored under: a pipeline stage's copy of the tied
 * embedding has the embedding's (the first stage writes them; every copy reads them). */
static const char *ckpt_name(const mg_param_meta *p) {
    return p->shared ? "embedding.word_embeddings.weight" : p->name;
}

/* Whether this rank writes the piece's moments (checkpoint.h: owns, sharded). */
static bool writes(const mg_checkpoint_tensors *t, const mg_param_meta *p) {
    int k = p->expert ? 1 : 0;
    return !p->shared && (t->owns[k] || t->sharded[k]);
}

static bool whole(const mg_optim_piece *pc, const mg_param_meta *p) {
    return pc->param_start == 0 && pc->param_end == p->numel;
}

/* The shard file's __metadata__: its place, and "<name>": "a:b" for every piece. */
static mg_status shard_metadata(const mg_gpt *g, const mg_checkpoint_tensors *t, int shard,
                                char **out) {
    cJSON *m = cJSON_CreateObject();
    char v[64];
    bool ok = m && cJSON_AddStringToObject(m, "format", "megatron.c optimizer shard");
    snprintf(v, sizeof v, "%d", shard + 1);
    ok = ok && cJSON_AddStringToObject(m, "shard", v);
    snprintf(v, sizeof v, "%d", t->n_shards);
    ok = ok && cJSON_AddStringToObject(m, "shards", v);
    for (int i = 0; ok && i < t->n_pieces; i++) {
        const mg_optim_piece *pc = &t->pieces[i];
        snprintf(v, sizeof v, "%" PRId64 ":%" PRId64, pc->param_start, pc->param_end);
        if (!writes(t, &g->params.p[pc->index])) continue;
        ok = cJSON_AddStringToObject(m, g->params.p[pc->index].name, v) != NULL;
    }
    *out = ok ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    return *out ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "cannot build the optimizer shard's metadata");
}

mg_status mg_checkpoint_optim_write(const char *path, const mg_gpt *g,
                                    const mg_checkpoint_tensors *t, int shard) {
    int n = t->n_pieces;
    mg_st_tensor *ts = calloc((size_t)(2 * n) + 1, sizeof *ts);
    char *names = calloc((size_t)(2 * n) + 1, MG_ST_NAME_CAP);
    char *meta = NULL;
    mg_status st =
        ts && names ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "cannot allocate the optimizer table");
    if (st == MG_OK && t->n_shards > 0) st = shard_metadata(g, t, shard, &meta);
    int w = 0; /* tensors written */
    for (int i = 0; st == MG_OK && i < n; i++) {
        const mg_optim_piece *pc = &t->pieces[i];
        const mg_param_meta *p = &g->params.p[pc->index];
        if (!writes(t, p)) continue;
        for (int k = 0; k < 2; k++, w++) {
            mg_st_tensor *x = &ts[w];
            char *nm = names + (size_t)w * MG_ST_NAME_CAP;
            snprintf(nm, MG_ST_NAME_CAP, "%s.%s", MOMENT[k], p->name);
            x->name = nm;
            x->dtype = MG_F32;
            if (whole(pc, p)) {
                x->ndim = p->ndim;
                x->shape[0] = p->shape[0];
                x->shape[1] = p->shape[1];
            } else {
                x->ndim = 1;
                x->shape[0] = pc->param_end - pc->param_start;
            }
            x->data = (k ? t->exp_avg_sq : t->exp_avg) + pc->local;
        }
    }
    if (st == MG_OK) st = mg_safetensors_write(path, ts, w, meta);
    free(ts);
    free(names);
    cJSON_free(meta);
    return st;
}

/* [a, b) of a shard file's tensor for parameter p: its metadata entry, else the whole tensor. */
static mg_status piece_range(const cJSON *meta, const char *path, const mg_param_meta *p,
                             const mg_st_entry *e, int64_t *a, int64_t *b) {
    const cJSON *r = meta ? cJSON_GetObjectItemCaseSensitive(meta, ckpt_name(p)) : NULL;
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
            snprintf(name, sizeof name, "%s.%s", MOMENT[k], ckpt_name(p));
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

mg_status mg_checkpoint_optim_load(const char *iter_dir, int n_stages, int n_shards,
                                   const mg_gpt *g, mg_checkpoint_tensors *t) {
    int64_t *covered = calloc((size_t)t->n_pieces + 1, sizeof *covered);
    if (!covered) return MG_FAIL(MG_ERR_NOMEM, "out of memory loading the optimizer state");
    mg_status st = MG_OK;
    char file[64], path[2300];
    for (int r = 0; st == MG_OK && r < (n_stages > 1 ? n_stages : 1); r++)
        for (int k = 0; st == MG_OK && k < (n_shards ? n_shards : 1); k++) {
            mg_checkpoint_optim_name(file, sizeof file, r, n_stages, k, n_shards);
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
