#include "model/params.h"

#include "core/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mg_params_set_tp(mg_param_table *t, int tp_rank, int tp_size) {
    t->tp_rank = tp_rank;
    t->tp_size = tp_size;
}

mg_status mg_params_add(mg_param_table *t, const char *name, int ndim, int64_t d0, int64_t d1,
                        int split_dim, int split_chunks, bool weight_decay, mg_init_kind init,
                        float std, int *index_out) {
    if (strlen(name) >= sizeof t->p[0].name)
        return MG_FAIL(MG_ERR_INTERNAL, "parameter name too long: %s", name);
    if (mg_params_find(t, name) >= 0)
        return MG_FAIL(MG_ERR_INTERNAL, "parameter %s registered twice", name);
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        mg_param_meta *p = realloc(t->p, (size_t)cap * sizeof *p);
        if (!p) return MG_FAIL(MG_ERR_NOMEM, "cannot grow the parameter table");
        t->p = p;
        t->cap = cap;
    }
    mg_param_meta *m = &t->p[t->n];
    memset(m, 0, sizeof *m);
    m->fp8_tensor = -1;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->ndim = ndim;
    m->global_shape[0] = m->shape[0] = d0;
    m->global_shape[1] = m->shape[1] = ndim == 2 ? d1 : 1;
    m->tp_split_dim = split_dim;
    m->tp_split_chunks = split_chunks < 1 ? 1 : split_chunks;
    m->tp_size = t->tp_size > 0 ? t->tp_size : 1;
    m->tp_rank = m->tp_size > 1 ? t->tp_rank : 0;
    if (split_dim >= 0 && m->tp_size > 1) {
        int64_t dim = m->global_shape[split_dim], parts = (int64_t)m->tp_size * m->tp_split_chunks;
        if (dim % parts)
            return MG_FAIL(MG_ERR_USAGE,
                           "%s: dimension %d of size %lld does not split over "
                           "--tensor-model-parallel-size %d%s",
                           name, split_dim, (long long)dim, m->tp_size,
                           m->tp_split_chunks > 1 ? " in each of its stacked blocks" : "");
        m->shape[split_dim] = dim / m->tp_size;
    }
    m->numel = m->shape[0] * m->shape[1];
    m->weight_decay = weight_decay;
    m->init = init;
    m->init_std = std;
    m->id = mg_param_id(name);
    if (index_out) *index_out = t->n;
    t->n++;
    return MG_OK;
}

void mg_params_layout(mg_param_table *t) {
    size_t off = 0;
    for (int i = 0; i < t->n; i++) {
        off = (off + MG_PARAM_ALIGN - 1) / MG_PARAM_ALIGN * MG_PARAM_ALIGN;
        t->p[i].offset = off;
        off += (size_t)t->p[i].numel;
    }
    t->numel = (off + MG_PARAM_ALIGN - 1) / MG_PARAM_ALIGN * MG_PARAM_ALIGN;
    t->fp8_from = t->numel;
}

static int by_offset(const void *a, const void *b) {
    size_t x = **(const size_t *const *)a, y = **(const size_t *const *)b;
    return (x > y) - (x < y);
}

mg_status mg_params_relayout(mg_param_table *t, const size_t *offset, size_t numel) {
    if (t->n == 0) return MG_FAIL(MG_ERR_INTERNAL, "relayout of an empty parameter table");
    /* sorted pointers into offset[]: neighbours in the new buffer must not overlap */
    const size_t **order = malloc((size_t)t->n * sizeof *order);
    if (!order) return MG_FAIL(MG_ERR_NOMEM, "cannot sort %d parameter offsets", t->n);
    for (int i = 0; i < t->n; i++) order[i] = &offset[i];
    qsort(order, (size_t)t->n, sizeof *order, by_offset);
    mg_status st = MG_OK;
    for (int k = 0; k < t->n && st == MG_OK; k++) {
        int i = (int)(order[k] - offset);
        size_t end = offset[i] + (size_t)t->p[i].numel;
        size_t next = k + 1 < t->n ? *order[k + 1] : numel;
        if (end > next)
            st =
                MG_FAIL(MG_ERR_INTERNAL, "relayout: %s at [%zu, %zu) %s", t->p[i].name, offset[i],
                        end, k + 1 < t->n ? "overlaps the next parameter" : "ends past the buffer");
    }
    free(order);
    if (st != MG_OK) return st;
    for (int i = 0; i < t->n; i++) t->p[i].offset = offset[i];
    t->numel = t->fp8_from = numel;
    return MG_OK;
}

int64_t mg_params_count(const mg_param_table *t) {
    int64_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->p[i].numel;
    return n;
}

int64_t mg_param_global_index(const mg_param_meta *m, int64_t j) {
    if (m->tp_split_dim < 0 || m->tp_size == 1) return j;
    int64_t cols = m->shape[1], i = j / cols, k = j % cols;
    if (m->tp_split_dim == 1) return i * m->global_shape[1] + (int64_t)m->tp_rank * cols + k;
    int64_t block = m->global_shape[0] / m->tp_split_chunks, local = block / m->tp_size;
    int64_t row = (i / local) * block + (int64_t)m->tp_rank * local + i % local;
    return row * cols + k;
}

int mg_params_find(const mg_param_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return i;
    return -1;
}

void mg_params_init(const mg_param_table *t, uint64_t seed, float *buf) {
    for (int i = 0; i < t->n; i++) {
        const mg_param_meta *m = &t->p[i];
        float *dst = buf + m->offset;
        switch (m->init) {
        case MG_INIT_ZEROS:
            memset(dst, 0, (size_t)m->numel * sizeof *dst);
            break;
        case MG_INIT_ONES:
            for (int64_t j = 0; j < m->numel; j++) dst[j] = 1.0f;
            break;
        case MG_INIT_NORMAL:
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < m->numel; j++)
                dst[j] =
                    m->init_std * mg_rng_normal(seed, m->id, (uint64_t)mg_param_global_index(m, j));
            break;
        }
    }
}

void mg_params_free(mg_param_table *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}
