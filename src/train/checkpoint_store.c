/* The tensor store under a checkpoint (format in train/checkpoint_store.h). */
#include "train/checkpoint_store.h"

#include "core/file.h"
#include "core/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL /* header-only: nothing to link, on machines without libxxhash */
#include <xxhash.h>

#define MAX_BLOCKS 8
#define PATH_CAP   2300

static const char FORMAT[] = "megatron.c tensor store";

/* A whole number >= 0 (exact in a double), or false. */
static bool count(const cJSON *x, int64_t *v) {
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9.0e15 ||
        x->valuedouble != (double)(int64_t)x->valuedouble)
        return false;
    *v = (int64_t)x->valuedouble;
    return true;
}

/* n such numbers of array j into v, or false. */
static bool ints(const cJSON *j, int64_t *v, int n) {
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != n) return false;
    for (int i = 0; i < n; i++)
        if (!count(cJSON_GetArrayItem(j, i), &v[i])) return false;
    return true;
}

/* ---------------------------------------------------------------- geometry */

/* A block of the global tensor (2-D; a 1-D tensor has one column) and where it starts among the
 * holder's local elements. */
typedef struct {
    int64_t off[2], ext[2], local;
} block;

static int64_t block_numel(const block *k) {
    return k->ext[0] * k->ext[1];
}

/* The global shape of m as rows x columns. */
static void global_2d(const mg_param_meta *m, int64_t g[2]) {
    g[0] = m->global_shape[0];
    g[1] = m->ndim == 2 ? m->global_shape[1] : 1;
}

/* The blocks m's local tensor is made of, in local order (model/params.h: a split along rows
 * keeps its chunks stacked, rank r holding rows [r*c/T, (r+1)*c/T) of each chunk of c rows). */
static mg_status local_blocks(const mg_param_meta *m, block *out, int *n) {
    int64_t g[2];
    global_2d(m, g);
    const int T = m->tp_size > 1 ? m->tp_size : 1, r = m->tp_size > 1 ? m->tp_rank : 0;
    const int C = m->tp_split_chunks > 1 ? m->tp_split_chunks : 1;
    if (m->tp_split_dim < 0 || T == 1) {
        out[0] = (block){{0, 0}, {g[0], g[1]}, 0};
        *n = 1;
    } else if (m->tp_split_dim == 0 && C <= MAX_BLOCKS) {
        const int64_t rows = g[0] / C / T;
        for (int c = 0; c < C; c++)
            out[c] = (block){{c * (g[0] / C) + r * rows, 0}, {rows, g[1]}, c * rows * g[1]};
        *n = C;
    } else if (m->tp_split_dim == 1 && m->ndim == 2 && C == 1) {
        out[0] = (block){{0, r * (g[1] / T)}, {g[0], g[1] / T}, 0};
        *n = 1;
    } else {
        return MG_FAIL(MG_ERR_INTERNAL,
                       "%s: no checkpoint layout for split dimension %d in %d chunks", m->name,
                       m->tp_split_dim, C);
    }
    int64_t total = 0;
    for (int k = 0; k < *n; k++) total += block_numel(&out[k]);
    if (total != m->numel)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: its %d blocks hold %" PRId64 " elements, not %" PRId64,
                       m->name, *n, total, m->numel);
    return MG_OK;
}

/* ---------------------------------------------------------------- writing */

static void hash_hex(char out[17], const void *data, size_t bytes) {
    snprintf(out, 17, "%016" PRIx64, (uint64_t)XXH3_64bits(data, bytes));
}

static cJSON *int_array(const int64_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* The index entries of one piece: one per block of the holder it meets. */
static mg_status describe(cJSON *tensors, const char *file, const mg_ckpt_piece *p) {
    block bl[MAX_BLOCKS];
    int nb;
    MG_CHECK(local_blocks(p->meta, bl, &nb));
    cJSON *t = cJSON_GetObjectItemCaseSensitive(tensors, p->name);
    if (!t) {
        t = cJSON_AddObjectToObject(tensors, p->name);
        const int64_t *s = p->meta->global_shape;
        if (t) cJSON_AddItemToObject(t, "shape", int_array(s, p->meta->ndim));
        if (t) cJSON_AddArrayToObject(t, "pieces");
    }
    cJSON *list = t ? cJSON_GetObjectItemCaseSensitive(t, "pieces") : NULL;
    for (int k = 0; list && k < nb; k++) {
        const int64_t b0 = bl[k].local, b1 = b0 + block_numel(&bl[k]);
        const int64_t lo = p->a > b0 ? p->a : b0, hi = p->b < b1 ? p->b : b1;
        if (hi <= lo) continue;
        char h[17];
        hash_hex(h, p->data + (lo - p->a), (size_t)(hi - lo) * sizeof(float));
        const int64_t range[2] = {lo - b0, hi - b0};
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddItemToArray(list, e);
        cJSON_AddStringToObject(e, "file", file);
        cJSON_AddStringToObject(e, "key", p->name);
        cJSON_AddNumberToObject(e, "start", (double)(lo - p->a));
        cJSON_AddItemToObject(e, "offset", int_array(bl[k].off, p->meta->ndim));
        cJSON_AddItemToObject(e, "block", int_array(bl[k].ext, p->meta->ndim));
        cJSON_AddItemToObject(e, "range", int_array(range, 2));
        cJSON_AddStringToObject(e, "xxh3", h);
    }
    return list ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory describing %s", p->name);
}

static mg_status write_json(const char *path, const cJSON *j) {
    char *text = cJSON_Print(j);
    if (!text) return MG_FAIL(MG_ERR_NOMEM, "out of memory writing %s", path);
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    mg_status st = mg_file_write_atomic(path, parts, sizes, 1);
    cJSON_free(text);
    return st;
}

mg_status mg_ckpt_store_write(const char *dir, int id, const mg_ckpt_piece *pieces, int n) {
    char file[32], path[PATH_CAP];
    snprintf(file, sizeof file, "rank-%05d.safetensors", id);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    mg_status st = MG_OK;
    mg_st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    cJSON *list = cJSON_CreateObject(), *tensors = cJSON_AddObjectToObject(list, "tensors");
    if (!ts || !tensors) st = MG_FAIL(MG_ERR_NOMEM, "out of memory writing %s", path);
    for (int i = 0; st == MG_OK && i < n; i++) {
        const mg_ckpt_piece *p = &pieces[i];
        ts[i] = (mg_st_tensor){
            .name = p->name, .dtype = MG_F32, .ndim = 1, .shape = {p->b - p->a}, .data = p->data};
        st = describe(tensors, file, p);
    }
    if (st == MG_OK && n > 0) st = mg_safetensors_write(path, ts, n, NULL);
    struct stat sb;
    if (st == MG_OK && n > 0 && stat(path, &sb) != 0)
        st = MG_FAIL(MG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    if (st == MG_OK && n > 0) {
        cJSON *f = cJSON_AddObjectToObject(list, "file");
        cJSON_AddStringToObject(f, "name", file);
        cJSON_AddNumberToObject(f, "size", (double)sb.st_size);
    }
    if (st == MG_OK) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", dir, id);
        st = write_json(path, list);
    }
    cJSON_Delete(list);
    free(ts);
    return st;
}

/* Moves rank list r's files and pieces into the index. */
static mg_status merge(cJSON *files, cJSON *tensors, cJSON *r, const char *path) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "file");
    if (f) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        int64_t size;
        if (!cJSON_IsString(name) || !count(cJSON_GetObjectItemCaseSensitive(f, "size"), &size))
            return MG_FAIL(MG_ERR_FORMAT, "%s: a file without a name or size", path);
        cJSON *entry = cJSON_AddObjectToObject(files, name->valuestring);
        if (!entry || !cJSON_AddNumberToObject(entry, "size", (double)size))
            return MG_FAIL(MG_ERR_NOMEM, "out of memory merging %s", path);
    }
    cJSON *mine = cJSON_GetObjectItemCaseSensitive(r, "tensors"), *t;
    cJSON_ArrayForEach(t, mine) {
        cJSON *have = cJSON_GetObjectItemCaseSensitive(tensors, t->string);
        if (!have) {
            cJSON_AddItemToObject(tensors, t->string, cJSON_Duplicate(t, 1));
            continue;
        }
        char *a = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(have, "shape"));
        char *b = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "shape"));
        bool same = a && b && !strcmp(a, b);
        cJSON_free(a);
        cJSON_free(b);
        if (!same)
            return MG_FAIL(MG_ERR_INTERNAL, "%s: ranks disagree on the shape of %s", path,
                           t->string);
        cJSON *dst = cJSON_GetObjectItemCaseSensitive(have, "pieces"), *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(t, "pieces"))
            cJSON_AddItemToArray(dst, cJSON_Duplicate(e, 1));
    }
    return MG_OK;
}

mg_status mg_ckpt_store_index(const char *dir, int n_ids) {
    cJSON *index = cJSON_CreateObject();
    cJSON_AddStringToObject(index, "format", FORMAT);
    cJSON_AddNumberToObject(index, "version", 2);
    cJSON *files = cJSON_AddObjectToObject(index, "files");
    cJSON *tensors = cJSON_AddObjectToObject(index, "tensors");
    mg_status st = files && tensors ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory (index)");
    char path[PATH_CAP];
    for (int id = 0; st == MG_OK && id < n_ids; id++) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", dir, id);
        char *text = NULL;
        st = mg_file_read(path, &text, NULL);
        cJSON *r = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (st == MG_OK && !r) st = MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON", path);
        if (st == MG_OK) st = merge(files, tensors, r, path);
        cJSON_Delete(r);
    }
    snprintf(path, sizeof path, "%s/index.json", dir);
    if (st == MG_OK) st = write_json(path, index);
    cJSON_Delete(index);
    for (int id = 0; st == MG_OK && id < n_ids; id++) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", dir, id);
        remove(path);
    }
    return st;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    char *name;
    int64_t size;
    mg_safetensors st;
    bool open;
} sfile;

typedef struct {
    int file;
    const char *key;
    int64_t start, r[2];
    block k;
    char hash[17];
    atomic_bool verified;
} spiece;

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
    int first, n; /* pieces [first, first + n) */
} stensor;

struct mg_ckpt_store {
    char dir[PATH_CAP - 64];
    pthread_mutex_t opening; /* readers on several threads open the files once */
    cJSON *index;            /* owns the strings the tables point at */
    sfile *files;
    spiece *pieces;
    stensor *tensors;
    int n_files, n_pieces, n_tensors;
};

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const stensor *)a)->name, ((const stensor *)b)->name);
}

static int find_file(const mg_ckpt_store *s, const char *name) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].name, name)) return i;
    return -1;
}

/* One piece of tensor t from its index entry e. */
static mg_status parse_piece(mg_ckpt_store *s, const stensor *t, const cJSON *e, spiece *p,
                             const char *path) {
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(e, "key");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(e, "xxh3");
    int64_t off[2] = {0, 0}, ext[2] = {1, 1}, start;
    const int nd = t->ndim;
    bool ok = cJSON_IsString(file) && cJSON_IsString(key) && cJSON_IsString(hash) &&
              strlen(hash->valuestring) == 16 &&
              ints(cJSON_GetObjectItemCaseSensitive(e, "offset"), off, nd) &&
              ints(cJSON_GetObjectItemCaseSensitive(e, "block"), ext, nd) &&
              ints(cJSON_GetObjectItemCaseSensitive(e, "range"), p->r, 2);
    ok = ok && count(cJSON_GetObjectItemCaseSensitive(e, "start"), &start);
    if (!ok)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: a piece of tensor '%s' lacks file, key, start, offset, block, range "
                       "or xxh3, or has a bad value",
                       path, t->name);
    p->k = (block){{off[0], nd == 2 ? off[1] : 0}, {ext[0], nd == 2 ? ext[1] : 1}, 0};
    int64_t g1 = nd == 2 ? t->shape[1] : 1;
    if (p->k.off[0] + p->k.ext[0] > t->shape[0] || p->k.off[1] + p->k.ext[1] > g1 ||
        p->r[0] >= p->r[1] || p->r[1] > block_numel(&p->k))
        return MG_FAIL(MG_ERR_FORMAT, "%s: a piece of tensor '%s' lies outside its shape", path,
                       t->name);
    p->file = find_file(s, file->valuestring);
    if (p->file < 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' names file '%.100s', which 'files' lacks",
                       path, t->name, file->valuestring);
    p->key = key->valuestring;
    p->start = start;
    memcpy(p->hash, hash->valuestring, 17);
    atomic_init(&p->verified, false);
    return MG_OK;
}

static mg_status parse_index(mg_ckpt_store *s, const char *path) {
    const cJSON *ix = s->index;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(ix, "format");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(ix, "files");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(ix, "tensors");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) || !cJSON_IsObject(files) ||
        !cJSON_IsObject(tensors))
        return MG_FAIL(MG_ERR_FORMAT, "%s: not a megatron.c tensor index (format, files, tensors)",
                       path);
    s->n_files = cJSON_GetArraySize(files);
    s->n_tensors = cJSON_GetArraySize(tensors);
    const cJSON *x, *e;
    int n_pieces = 0;
    cJSON_ArrayForEach(x, tensors) n_pieces +=
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(x, "pieces"));
    s->files = calloc((size_t)s->n_files + 1, sizeof *s->files);
    s->tensors = calloc((size_t)s->n_tensors + 1, sizeof *s->tensors);
    s->pieces = calloc((size_t)n_pieces + 1, sizeof *s->pieces);
    if (!s->files || !s->tensors || !s->pieces)
        return MG_FAIL(MG_ERR_NOMEM, "out of memory reading %s", path);
    int i = 0;
    cJSON_ArrayForEach(x, files) {
        int64_t size;
        if (!count(cJSON_GetObjectItemCaseSensitive(x, "size"), &size))
            return MG_FAIL(MG_ERR_FORMAT, "%s: file '%s' has no size", path, x->string);
        if (strchr(x->string, '/') || !strcmp(x->string, ".."))
            return MG_FAIL(MG_ERR_FORMAT, "%s: file name '%.100s' leaves the directory", path,
                           x->string);
        s->files[i].name = x->string;
        s->files[i++].size = size;
    }
    i = 0;
    cJSON_ArrayForEach(x, tensors) {
        stensor *t = &s->tensors[i++];
        t->name = x->string;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(x, "shape");
        t->ndim = cJSON_GetArraySize(shape);
        t->shape[1] = 1;
        if (t->ndim < 1 || t->ndim > 2 || !ints(shape, t->shape, t->ndim))
            return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' needs a shape of 1 or 2 sizes", path,
                           t->name);
        t->first = s->n_pieces;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(x, "pieces")) {
            MG_CHECK(parse_piece(s, t, e, &s->pieces[s->n_pieces], path));
            s->n_pieces++;
        }
        t->n = s->n_pieces - t->first;
    }
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_tensor);
    return MG_OK;
}

mg_status mg_ckpt_store_open(const char *dir, mg_ckpt_store **out) {
    *out = NULL;
    mg_ckpt_store *s = calloc(1, sizeof *s);
    if (!s) return MG_FAIL(MG_ERR_NOMEM, "out of memory opening %s", dir);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    pthread_mutex_init(&s->opening, NULL);
    char path[PATH_CAP], *text = NULL;
    snprintf(path, sizeof path, "%s/index.json", dir);
    mg_status st = mg_file_read(path, &text, NULL);
    if (st == MG_OK) {
        s->index = cJSON_Parse(text);
        if (!s->index) st = MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON", path);
    }
    free(text);
    if (st == MG_OK) st = parse_index(s, path);
    if (st != MG_OK) {
        mg_ckpt_store_close(s);
        return st;
    }
    *out = s;
    return MG_OK;
}

static const stensor *find_tensor(const mg_ckpt_store *s, const char *name) {
    stensor key = {.name = name};
    return bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof key, cmp_tensor);
}

int64_t mg_ckpt_store_rows(const mg_ckpt_store *s, const char *name) {
    const stensor *t = find_tensor(s, name);
    return t ? t->shape[0] : -1;
}

/* Opens file f of the store (under s->opening), checking its size against the index. */
static mg_status open_file(mg_ckpt_store *s, sfile *f, const char *path, const char *tensor) {
    if (!f->open) {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return MG_FAIL(MG_ERR_FORMAT,
                           "checkpoint file %s is missing (%s), tensor '%s' needs it", path,
                           strerror(errno), tensor);
        if ((int64_t)sb.st_size != f->size)
            return MG_FAIL(MG_ERR_FORMAT,
                           "checkpoint file %s is %lld bytes but its index records %" PRId64
                           ": truncated or replaced (tensor '%s')",
                           path, (long long)sb.st_size, f->size, tensor);
        if (mg_safetensors_open(&f->st, path) != MG_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mg_error_message());
            return MG_FAIL(MG_ERR_FORMAT, "%s (reading tensor '%s')", msg, tensor);
        }
        f->open = true;
    }
    return MG_OK;
}

/* The data of piece p (elements [range) of its block), opened and verified on first use. */
static mg_status piece_data(mg_ckpt_store *s, spiece *p, const char *tensor, const float **data) {
    sfile *f = &s->files[p->file];
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/%s", s->dir, f->name);
    pthread_mutex_lock(&s->opening);
    mg_status st = open_file(s, f, path, tensor);
    pthread_mutex_unlock(&s->opening);
    MG_CHECK(st);
    const mg_st_entry *e = mg_safetensors_find(&f->st, p->key);
    const int64_t n = p->r[1] - p->r[0];
    if (!e || e->dtype != MG_F32 || e->ndim != 1 || p->start + n > e->shape[0])
        return MG_FAIL(MG_ERR_FORMAT,
                       "checkpoint file %s: tensor '%s' lacks its piece '%s' (fp32 elements "
                       "%" PRId64 "..%" PRId64 ")",
                       path, tensor, p->key, p->start, p->start + n);
    *data = (const float *)e->data + p->start;
    if (!atomic_load(&p->verified)) { /* two threads may both check it: the same answer */
        char h[17];
        hash_hex(h, *data, (size_t)n * sizeof(float));
        if (strcmp(h, p->hash))
            return MG_FAIL(MG_ERR_FORMAT,
                           "checkpoint file %s: tensor '%s' (elements %" PRId64 "..%" PRId64
                           " of its block at [%" PRId64 ", %" PRId64 "]) fails its checksum: "
                           "the file is corrupted",
                           path, tensor, p->r[0], p->r[1], p->k.off[0], p->k.off[1]);
        atomic_store(&p->verified, true);
    }
    return MG_OK;
}

/* A block's elements [r0, r1) as global rows: the columns row g covers. */
static void row_cols(const block *k, int64_t r0, int64_t r1, int64_t g, int64_t *lo, int64_t *hi) {
    const int64_t tr = g - k->off[0], w = k->ext[1];
    int64_t a = r0 - tr * w, b = r1 - tr * w;
    *lo = k->off[1] + (a > 0 ? a : 0);
    *hi = k->off[1] + (b < w ? b : w);
}

/* Copies the overlap of source piece p (data: its elements) into target block t's elements
 * [t0, t1) (dst: element t0); returns the elements copied. */
static int64_t copy_overlap(const block *t, int64_t t0, int64_t t1, float *dst, const spiece *p,
                            const float *src) {
    const block *k = &p->k;
    if (t->off[1] >= k->off[1] + k->ext[1] || k->off[1] >= t->off[1] + t->ext[1]) return 0;
    int64_t g0 = t->off[0] + t0 / t->ext[1], g1 = t->off[0] + (t1 - 1) / t->ext[1];
    int64_t s0 = k->off[0] + p->r[0] / k->ext[1], s1 = k->off[0] + (p->r[1] - 1) / k->ext[1];
    if (s0 > g0) g0 = s0;
    if (s1 < g1) g1 = s1;
    int64_t copied = 0;
    for (int64_t g = g0; g <= g1; g++) {
        int64_t tl, th, sl, sh;
        row_cols(t, t0, t1, g, &tl, &th);
        row_cols(k, p->r[0], p->r[1], g, &sl, &sh);
        const int64_t lo = tl > sl ? tl : sl, hi = th < sh ? th : sh;
        if (hi <= lo) continue;
        const int64_t ti = (g - t->off[0]) * t->ext[1] + (lo - t->off[1]) - t0;
        const int64_t si = (g - k->off[0]) * k->ext[1] + (lo - k->off[1]) - p->r[0];
        memcpy(dst + ti, src + si, (size_t)(hi - lo) * sizeof(float));
        copied += hi - lo;
    }
    return copied;
}

/* How many of block k's elements [r0, r1) lie in global rows below `rows`. */
static int64_t elements_below(const block *k, int64_t r0, int64_t r1, int64_t rows) {
    const int64_t w = k->ext[1];
    int64_t n = 0;
    for (int64_t tr = r0 / w; tr <= (r1 - 1) / w && k->off[0] + tr < rows; tr++) {
        const int64_t a = r0 > tr * w ? r0 : tr * w, b = r1 < (tr + 1) * w ? r1 : (tr + 1) * w;
        n += b - a;
    }
    return n;
}

mg_status mg_ckpt_store_read(mg_ckpt_store *s, const mg_ckpt_piece *p) {
    const stensor *t = find_tensor(s, p->name);
    if (!t)
        return MG_FAIL(MG_ERR_FORMAT, "checkpoint %s has no tensor '%s' (a different model?)",
                       s->dir, p->name);
    int64_t g[2];
    global_2d(p->meta, g);
    const bool rows_differ_ok = p->meta->vocab_rows && p->meta->ndim == 2;
    if (t->ndim != p->meta->ndim || (t->shape[0] != g[0] && !rows_differ_ok) || t->shape[1] != g[1])
        return MG_FAIL(MG_ERR_FORMAT,
                       "checkpoint %s: tensor '%s' has shape [%" PRId64 ", %" PRId64
                       "] (%d-D), this model's is [%" PRId64 ", %" PRId64 "] (%d-D)",
                       s->dir, p->name, t->shape[0], t->shape[1], t->ndim, g[0], g[1],
                       p->meta->ndim);
    block bl[MAX_BLOCKS];
    int nb;
    MG_CHECK(local_blocks(p->meta, bl, &nb));
    int64_t found = 0, need = 0;
    for (int k = 0; k < nb; k++) {
        const int64_t b0 = bl[k].local, b1 = b0 + block_numel(&bl[k]);
        const int64_t lo = p->a > b0 ? p->a : b0, hi = p->b < b1 ? p->b : b1;
        if (hi <= lo) continue;
        need += elements_below(&bl[k], lo - b0, hi - b0, t->shape[0]);
        /* the target run is elements [lo - b0, hi - b0) of block k */
        for (int i = t->first; i < t->first + t->n; i++) {
            spiece *sp = &s->pieces[i];
            const float *src = NULL;
            /* cheap rejection before touching the file */
            if (sp->k.off[0] + sp->k.ext[0] <= bl[k].off[0] ||
                bl[k].off[0] + bl[k].ext[0] <= sp->k.off[0] ||
                sp->k.off[1] + sp->k.ext[1] <= bl[k].off[1] ||
                bl[k].off[1] + bl[k].ext[1] <= sp->k.off[1])
                continue;
            MG_CHECK(piece_data(s, sp, p->name, &src));
            found += copy_overlap(&bl[k], lo - b0, hi - b0, p->data + (lo - p->a), sp, src);
        }
    }
    if (found != need)
        return MG_FAIL(MG_ERR_FORMAT,
                       "checkpoint %s: the pieces of tensor '%s' hold %" PRId64 " of the %" PRId64
                       " elements [%" PRId64 ", %" PRId64 ") this rank needs%s",
                       s->dir, p->name, found, need, p->a, p->b,
                       found > need ? " (pieces overlap: a corrupt index)"
                                    : " (a piece is missing from index.json)");
    return MG_OK;
}

mg_status mg_ckpt_store_read_all(mg_ckpt_store *s, const mg_ckpt_piece *p, int n) {
    int failed = n; /* the first piece that failed; its message, from the thread that read it */
    mg_status code = MG_OK;
    char message[1024] = "";
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        mg_status st = mg_ckpt_store_read(s, &p[i]);
        if (st == MG_OK) continue;
#pragma omp critical(mg_ckpt_store_read_all)
        if (i < failed) {
            failed = i;
            code = st;
            snprintf(message, sizeof message, "%s", mg_error_message());
        }
    }
    return code == MG_OK ? MG_OK : MG_FAIL(code, "%s", message);
}

void mg_ckpt_store_close(mg_ckpt_store *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->opening);
    for (int i = 0; s->files && i < s->n_files; i++)
        if (s->files[i].open) mg_safetensors_close(&s->files[i].st);
    free(s->files);
    free(s->pieces);
    free(s->tensors);
    cJSON_Delete(s->index);
    free(s);
}
