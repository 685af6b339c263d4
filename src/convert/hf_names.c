#include "convert/hf_names.h"

#include "core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One HF tensor feeding a parameter: `rows` x `cols` in Linear (out, in) orientation; stored
 * transposed in the file when `transposed` (GPT-2's Conv1D). */
typedef struct {
    char name[128];
    int64_t rows, cols;
    int ndim;
    bool transposed;
} hf_src;

typedef enum { PERM_IDENTITY = 0, PERM_QKV } row_perm;

typedef struct {
    hf_src src[3];
    int nsrc;
    row_perm perm;
    float offset; /* HF value = ours + offset: 1 for a norm weight under --apply-layernorm-1p */
} hf_map;

static bool gpt2_family(const mg_model_config *c) {
    return c->norm == MG_NORM_LAYERNORM && c->pos == MG_POS_LEARNED && !c->swiglu && c->bias;
}

static void add_src(hf_map *m, const char *name, int64_t rows, int64_t cols, int ndim, bool tr) {
    hf_src *s = &m->src[m->nsrc++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rows = rows;
    s->cols = cols;
    s->ndim = ndim;
    s->transposed = tr;
}

/* fc1 of an MLP under prefix `pre` (GPT-2: c_fc, Conv1D; Llama: [gate; up] or up). */
static void add_fc1(const mg_model_config *c, hf_map *m, const char *pre, const char *gate,
                    const char *up, const char *suffix, int64_t rows, int64_t cols, bool vec,
                    bool gpt2) {
    char buf[128];
    if (gpt2) {
        snprintf(buf, sizeof buf, "%s.c_fc.%s", pre, suffix);
        add_src(m, buf, rows, cols, vec ? 1 : 2, !vec);
    } else if (c->swiglu) {
        snprintf(buf, sizeof buf, "%s.%s.%s", pre, gate, suffix);
        add_src(m, buf, rows / 2, cols, vec ? 1 : 2, false);
        snprintf(buf, sizeof buf, "%s.%s.%s", pre, up, suffix);
        add_src(m, buf, rows / 2, cols, vec ? 1 : 2, false);
    } else {
        snprintf(buf, sizeof buf, "%s.%s.%s", pre, up, suffix);
        add_src(m, buf, rows, cols, vec ? 1 : 2, false);
    }
}

/* An MoE layer's tensors, Mixtral's Hub names: block_sparse_moe.gate (the router),
 * block_sparse_moe.experts.E.w1 / w3 / w2 (gate / up / down; a GELU expert has w1 and w2), the
 * shared experts as block_sparse_moe.shared_expert.gate_proj / up_proj / down_proj. GPT-2-shaped
 * models keep GPT-2's Conv1D names inside: experts.E.c_fc / c_proj, shared_expert.c_fc / c_proj.
 * false when parameter i is not one of them. */
static bool describe_moe(const mg_gpt *g, int i, const mg_moe_params *mp, const char *layer,
                         bool gpt2, hf_map *m) {
    const mg_model_config *c = &g->cfg;
    const mg_param_meta *p = &g->params.p[i];
    int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
    const char *suffix = strrchr(p->name, '.') + 1;
    bool vec = p->ndim == 1;
    char pre[96], buf[128];
    if (i == mp->router_w) {
        snprintf(buf, sizeof buf, "%s.block_sparse_moe.gate.weight", layer);
        add_src(m, buf, rows, cols, 2, false);
        return true;
    }
    /* the suffix of an expert's parameter ends in its number: weight7 -> weight */
    char sfx[16];
    snprintf(sfx, sizeof sfx, "%s", suffix);
    for (char *q = sfx; *q; q++)
        if (*q >= '0' && *q <= '9') *q = '\0';
    for (int j = 0; j < c->moe.E_l; j++) {
        bool fc1 = i == mp->fc1_w[j] || (mp->fc1_b && i == mp->fc1_b[j]);
        bool fc2 = i == mp->fc2_w[j] || (mp->fc2_b && i == mp->fc2_b[j]);
        if (!fc1 && !fc2) continue;
        snprintf(pre, sizeof pre, "%s.block_sparse_moe.experts.%d", layer, c->moe.e0 + j);
        if (fc1) {
            add_fc1(c, m, pre, "w1", c->swiglu ? "w3" : "w1", sfx, rows, cols, vec, gpt2);
        } else {
            snprintf(buf, sizeof buf, "%s.%s.%s", pre, gpt2 ? "c_proj" : "w2", sfx);
            add_src(m, buf, rows, cols, vec ? 1 : 2, gpt2 && !vec);
        }
        return true;
    }
    snprintf(pre, sizeof pre, "%s.block_sparse_moe.shared_expert", layer);
    if (i == mp->sh_fc1_w || i == mp->sh_fc1_b) {
        add_fc1(c, m, pre, "gate_proj", "up_proj", suffix, rows, cols, vec, gpt2);
        return true;
    }
    if (i == mp->sh_fc2_w || i == mp->sh_fc2_b) {
        snprintf(buf, sizeof buf, "%s.%s.%s", pre, gpt2 ? "c_proj" : "down_proj", suffix);
        add_src(m, buf, rows, cols, vec ? 1 : 2, gpt2 && !vec);
        return true;
    }
    return false;
}

/* Describes which HF tensors make up parameter `i`. */
static mg_status describe(const mg_gpt *g, int i, hf_map *m) {
    const mg_model_config *c = &g->cfg;
    const mg_param_meta *p = &g->params.p[i];
    bool gpt2 = gpt2_family(c);
    memset(m, 0, sizeof *m);
    int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
    const char *suffix = strrchr(p->name, '.') + 1; /* "weight" or "bias" */
    bool vec = p->ndim == 1;
    char buf[128];
    /* the embedding, or a pipeline stage's copy of the tied embedding (the same tensor) */
    if (i == g->wte || p->shared) {
        add_src(m, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", rows, cols, 2, 0);
        return MG_OK;
    }
    if (i == g->wpe) {
        add_src(m, gpt2 ? "transformer.wpe.weight" : "model.embed_positions.weight", rows, cols, 2,
                0);
        return MG_OK;
    }
    /* zero-centred norm weights (--apply-layernorm-1p): Hugging Face's are 1 + w */
    if (c->norm_1p && i == g->lnf_w) m->offset = 1.0f;
    if (i == g->lnf_w || i == g->lnf_b) {
        snprintf(buf, sizeof buf, "%s.%s", gpt2 ? "transformer.ln_f" : "model.norm", suffix);
        add_src(m, buf, rows, 1, 1, 0);
        return MG_OK;
    }
    if (i == g->out_w) {
        add_src(m, "lm_head.weight", rows, cols, 2, 0);
        return MG_OK;
    }
    for (int k = 0; k < g->n_layers; k++) {
        const mg_layer_params *lp = &g->layers[k];
        int l = k; /* the global layer number of local layer k */
        for (int v = 0; v < g->n_chunks; v++)
            if (k >= g->chunks[v].first && k < g->chunks[v].first + g->chunks[v].count)
                l = g->chunks[v].offset + (k - g->chunks[v].first);
        char pre[64];
        snprintf(pre, sizeof pre, gpt2 ? "transformer.h.%d" : "model.layers.%d", l);
        const char *mod = NULL;
        if (c->norm_1p && (i == lp->ln1_w || i == lp->ln2_w)) m->offset = 1.0f;
        if (i == lp->ln1_w || i == lp->ln1_b)
            mod = gpt2 ? "ln_1" : "input_layernorm";
        else if (i == lp->ln2_w || i == lp->ln2_b)
            mod = gpt2 ? "ln_2" : "post_attention_layernorm";
        else if (i == lp->proj_w || i == lp->proj_b)
            mod = gpt2 ? "attn.c_proj" : "self_attn.o_proj";
        else if (i == lp->fc2_w || i == lp->fc2_b)
            mod = gpt2 ? "mlp.c_proj" : "mlp.down_proj";
        if (mod) {
            snprintf(buf, sizeof buf, "%s.%s.%s", pre, mod, suffix);
            add_src(m, buf, rows, cols, vec ? 1 : 2, gpt2 && !vec && strstr(mod, "c_proj"));
            return MG_OK;
        }
        if (lp->moe && describe_moe(g, i, lp->moe, pre, gpt2, m)) return MG_OK;
        if (i == lp->qkv_w || i == lp->qkv_b) {
            m->perm = PERM_QKV;
            if (gpt2) {
                snprintf(buf, sizeof buf, "%s.attn.c_attn.%s", pre, suffix);
                add_src(m, buf, rows, cols, vec ? 1 : 2, !vec);
            } else {
                static const char *qkv[3] = {"q_proj", "k_proj", "v_proj"};
                for (int k = 0; k < 3; k++) {
                    snprintf(buf, sizeof buf, "%s.self_attn.%s.%s", pre, qkv[k], suffix);
                    int64_t r = (int64_t)(k == 0 ? c->nq : c->ng) * c->hd;
                    add_src(m, buf, r, cols, vec ? 1 : 2, false);
                }
            }
            return MG_OK;
        }
        if (i == lp->fc1_w || i == lp->fc1_b) {
            if (gpt2) {
                snprintf(buf, sizeof buf, "%s.mlp.c_fc.%s", pre, suffix);
                add_src(m, buf, rows, cols, vec ? 1 : 2, !vec);
            } else if (c->swiglu) {
                snprintf(buf, sizeof buf, "%s.mlp.gate_proj.%s", pre, suffix);
                add_src(m, buf, rows / 2, cols, vec ? 1 : 2, false);
                snprintf(buf, sizeof buf, "%s.mlp.up_proj.%s", pre, suffix);
                add_src(m, buf, rows / 2, cols, vec ? 1 : 2, false);
            } else {
                snprintf(buf, sizeof buf, "%s.mlp.up_proj.%s", pre, suffix);
                add_src(m, buf, rows, cols, vec ? 1 : 2, false);
            }
            return MG_OK;
        }
    }
    return MG_FAIL(MG_ERR_INTERNAL, "no Hugging Face name for parameter %s", p->name);
}

/* Row r of our parameter comes from row *j of source *k (rows of the [src0; src1; ...] stack). */
static void row_source(const mg_gpt *g, const hf_map *m, int64_t r, int *k, int64_t *j) {
    int64_t t = r;
    if (m->perm == PERM_QKV) {
        const mg_model_config *c = &g->cfg;
        int64_t rq = c->nq / c->ng, hd = c->hd, per = (rq + 2) * hd;
        int64_t grp = r / per, rem = r % per, slot = rem / hd, d = rem % hd;
        if (slot < rq)
            t = (grp * rq + slot) * hd + d;
        else if (slot == rq)
            t = (int64_t)c->nq * hd + grp * hd + d;
        else
            t = (int64_t)(c->nq + c->ng) * hd + grp * hd + d;
    }
    int s = 0;
    while (t >= m->src[s].rows) t -= m->src[s++].rows;
    *k = s;
    *j = t;
}

/* Index of element (row, col) of a source inside its file layout. */
static int64_t file_index(const hf_src *s, int64_t row, int64_t col) {
    return s->transposed ? col * s->rows + row : row * s->cols + col;
}

static void file_shape(const hf_src *s, int64_t shape[2]) {
    if (s->ndim == 1)
        shape[0] = s->rows, shape[1] = 1;
    else if (s->transposed)
        shape[0] = s->cols, shape[1] = s->rows;
    else
        shape[0] = s->rows, shape[1] = s->cols;
}

static float load_elem(const mg_st_entry *e, int64_t idx) {
    switch (e->dtype) {
    case MG_BF16:
        return mg_bf16_to_f32(((const uint16_t *)e->data)[idx]);
    case MG_F16:
        return mg_f16_to_f32(((const uint16_t *)e->data)[idx]);
    default:
        return ((const float *)e->data)[idx];
    }
}

mg_status mg_hf_import(const mg_gpt *g, const mg_safetensors *st, const char *path, float *params) {
    return mg_hf_import_files(g, st, &path, 1, params);
}

mg_status mg_hf_import_files(const mg_gpt *g, const mg_safetensors *files, const char *const *paths,
                             int n_files, float *params) {
    for (int i = 0; i < g->params.n; i++) {
        const mg_param_meta *p = &g->params.p[i];
        hf_map m;
        MG_CHECK(describe(g, i, &m));
        const mg_st_entry *e[3];
        const char *path = paths[0];
        for (int k = 0; k < m.nsrc; k++) {
            e[k] = NULL;
            for (int f = 0; f < n_files && !e[k]; f++)
                if ((e[k] = mg_safetensors_find(&files[f], m.src[k].name))) path = paths[f];
            if (!e[k])
                return MG_FAIL(MG_ERR_FORMAT, "%s%s: tensor '%s' is missing (needed for %s)",
                               paths[0], n_files > 1 ? " and the other weight files" : "",
                               m.src[k].name, p->name);
            int64_t want[2];
            file_shape(&m.src[k], want);
            int64_t got1 = e[k]->ndim == 2 ? e[k]->shape[1] : 1;
            if (e[k]->ndim != m.src[k].ndim || e[k]->shape[0] != want[0] || got1 != want[1])
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s: tensor '%s' has shape [%lld, %lld], the model expects "
                               "[%lld, %lld]; check --hidden-size, --num-attention-heads, "
                               "--vocab-size and --make-vocab-size-divisible-by",
                               path, m.src[k].name, (long long)e[k]->shape[0], (long long)got1,
                               (long long)want[0], (long long)want[1]);
            if (e[k]->dtype != MG_F32 && e[k]->dtype != MG_BF16 && e[k]->dtype != MG_F16)
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s: tensor '%s' has dtype %s; weights must be "
                               "F32, BF16 or F16",
                               path, m.src[k].name, mg_dtype_name(e[k]->dtype));
        }
        int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
        float *dst = params + p->offset;
        for (int64_t r = 0; r < rows; r++) {
            int k;
            int64_t j;
            row_source(g, &m, r, &k, &j);
            for (int64_t col = 0; col < cols; col++)
                dst[r * cols + col] = load_elem(e[k], file_index(&m.src[k], j, col)) - m.offset;
        }
    }
    return MG_OK;
}

mg_status mg_hf_export(const mg_gpt *g, const float *params, mg_hf_export_set *out) {
    return mg_hf_export_parts(g, params, true, true, out);
}

mg_status mg_hf_export_parts(const mg_gpt *g, const float *params, bool dense, bool experts,
                             mg_hf_export_set *out) {
    memset(out, 0, sizeof *out);
    int cap = 3 * g->params.n;
    out->tensors = calloc((size_t)cap, sizeof *out->tensors);
    hf_src *srcs = calloc((size_t)cap, sizeof *srcs);
    out->storage = malloc(g->params.numel * sizeof(float));
    if (!out->tensors || !srcs || !out->storage) {
        free(srcs);
        mg_hf_export_free(out);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the checkpoint export buffers");
    }
    size_t used = 0;
    mg_status st = MG_OK;
    for (int i = 0; i < g->params.n && st == MG_OK; i++) {
        const mg_param_meta *p = &g->params.p[i];
        hf_map m;
        if (p->shared) continue; /* the first stage writes the embedding */
        if (!(p->expert ? experts : dense)) continue;
        if ((st = describe(g, i, &m)) != MG_OK) break;
        float *base[3];
        for (int k = 0; k < m.nsrc; k++) {
            base[k] = out->storage + used;
            used += (size_t)(m.src[k].rows * m.src[k].cols);
            srcs[out->n] = m.src[k];
            mg_st_tensor *t = &out->tensors[out->n++];
            t->dtype = MG_F32;
            t->ndim = m.src[k].ndim;
            file_shape(&m.src[k], t->shape);
            t->data = base[k];
        }
        int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
        const float *src = params + p->offset;
        for (int64_t r = 0; r < rows; r++) {
            int k;
            int64_t j;
            row_source(g, &m, r, &k, &j);
            for (int64_t col = 0; col < cols; col++)
                base[k][file_index(&m.src[k], j, col)] = src[r * cols + col] + m.offset;
        }
    }
    /* names live in srcs; copy them next to the tensors so the set owns them */
    if (st == MG_OK) {
        char *names = malloc((size_t)out->n * sizeof srcs[0].name);
        if (!names) st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate tensor names");
        for (int k = 0; st == MG_OK && k < out->n; k++) {
            memcpy(names + (size_t)k * sizeof srcs[0].name, srcs[k].name, sizeof srcs[0].name);
            out->tensors[k].name = names + (size_t)k * sizeof srcs[0].name;
        }
    }
    free(srcs);
    if (st != MG_OK) mg_hf_export_free(out);
    return st;
}

void mg_hf_export_free(mg_hf_export_set *s) {
    if (s->tensors && s->n) free((void *)s->tensors[0].name);
    free(s->tensors);
    free(s->storage);
    memset(s, 0, sizeof *s);
}

void mg_hf_weights_file(char *out, size_t cap, int i, int n) {
    if (n > 1)
        snprintf(out, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
    else
        snprintf(out, cap, "model.safetensors");
}
