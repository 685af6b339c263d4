/* Megatron's BlendedMegatronDatasetBuilder and BlendedDataset over GPTDataset (see
 * gpt_dataset.h). */
#include "data/gpt_dataset.h"

#include "core/log.h"
#include "data/blend.h"
#include "data/gpt_split.h"
#include "data/index_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool present; /* the split has weight in --split */
    bool blended; /* a BlendedDataset over one GPTDataset per prefix */
    int nparts;
    mg_gpt_split *parts;         /* (nparts) */
    mg_npy dataset_index;        /* (len) int16: blended only */
    mg_npy dataset_sample_index; /* (len) int64: blended only */
    int64_t len;
} split_data;

struct mg_gpt_data {
    mg_blend blend;
    mg_indexed_dataset *ds; /* (blend.n) */
    int32_t *max_len;       /* (blend.n) longest sequence of each dataset */
    mg_split split;
    char *split_text, *cache_path;
    int seq_length;
    uint32_t seed;
    split_data s[MG_SPLIT_COUNT];
    bool may_be_empty[MG_SPLIT_COUNT]; /* mg_gpt_data_config's */
    int32_t *scratch;                  /* (seq_length + 1) */
};

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

static mg_status open_prefix(mg_gpt_data *d, int k) {
    const char *prefix = d->blend.prefixes[k];
    const char *ext[2] = {".idx", ".bin"};
    for (int e = 0; e < 2; e++) {
        char path[MG_CACHE_PATH_MAX];
        MG_CHECK(mg_cache_path(path, sizeof path, prefix, ext[e]));
        if (!mg_cache_is_file(path))
            return USAGE("--data-path prefix '%s' not found: %s does not exist (give the path "
                         "without .bin/.idx)",
                         prefix, path);
    }
    MG_CHECK(mg_indexed_dataset_open(&d->ds[k], prefix));
    int32_t m = 0;
    for (int64_t i = 0; i < d->ds[k].num_sequences; i++)
        if (d->ds[k].sequence_lengths[i] > m) m = d->ds[k].sequence_lengths[i];
    d->max_len[k] = m;
    return MG_OK;
}

static mg_gpt_split_config part_config(const mg_gpt_data *d, int k, int split, int64_t n) {
    return (mg_gpt_split_config){.prefix = d->blend.prefixes[k],
                                 .split_text = d->split_text,
                                 .split = &d->split,
                                 .index_split = split,
                                 .num_samples = n,
                                 .may_be_empty = d->may_be_empty[split],
                                 .seq_length = d->seq_length,
                                 .seed = d->seed,
                                 .cache_dir = d->cache_path};
}

/* The BlendedDataset's description (unique_identifiers). */
static mg_status blend_description(const mg_gpt_data *d, int split, const int64_t *part_n,
                                   const double *w, const int64_t *wi, int64_t size, char **out) {
    mg_pyjson j;
    mg_pyjson_init(&j);
    mg_pyjson_begin(&j, '{');
    mg_pyjson_key(&j, "class");
    mg_pyjson_str(&j, "BlendedDataset");
    mg_pyjson_key(&j, "datasets");
    mg_pyjson_begin(&j, '[');
    for (int k = 0; k < d->blend.n; k++) {
        mg_gpt_split_config pc = part_config(d, k, split, part_n[k]);
        mg_gpt_split_describe(&j, &pc);
    }
    mg_pyjson_end(&j, ']');
    mg_pyjson_key(&j, "split");
    mg_pyjson_str(&j, mg_split_names[split]);
    mg_pyjson_key(&j, "weights");
    mg_pyjson_begin(&j, '[');
    for (int k = 0; k < d->blend.n; k++) {
        if (w)
            mg_pyjson_float(&j, w[k]);
        else
            mg_pyjson_int(&j, wi[k]);
    }
    mg_pyjson_end(&j, ']');
    mg_pyjson_key(&j, "size");
    if (size < 0)
        mg_pyjson_null(&j);
    else
        mg_pyjson_int(&j, size);
    mg_pyjson_end(&j, '}');
    return mg_pyjson_finish(&j, out);
}

/* Checks a blend's indices: dtypes, shape, datasets in range, no dataset oversampled. */
static mg_status check_blend(const mg_gpt_data *d, int split, const split_data *s, int64_t size) {
    const mg_npy *di = &s->dataset_index, *dsi = &s->dataset_sample_index;
    if (di->dtype != MG_NPY_I2 || di->ndim != 1 || di->shape[0] != size ||
        dsi->dtype != MG_NPY_I8 || dsi->ndim != 1 || dsi->shape[0] != size)
        return MG_FAIL(MG_ERR_FORMAT, "blend indices have the wrong dtype or shape");
    for (int64_t i = 0; i < size; i++) {
        int64_t k = mg_npy_get(di, i), x = mg_npy_get(dsi, i);
        if (k < 0 || k >= s->nparts || x < 0)
            return MG_FAIL(MG_ERR_FORMAT, "blend index %lld is out of range", (long long)i);
        if (x >= mg_gpt_split_len(&s->parts[k]))
            return USAGE("the %s blend oversamples %s: it needs sample %lld of a dataset of %lld "
                         "samples (Megatron's mid_level_dataset_surplus is too small for it)",
                         mg_split_names[split], d->blend.prefixes[k], (long long)x,
                         (long long)mg_gpt_split_len(&s->parts[k]));
    }
    return MG_OK;
}

static mg_status build_blend_indices(const mg_gpt_data *d, int split, split_data *s,
                                     const int64_t *part_n, int64_t target, double *w,
                                     int64_t *lens) {
    const int n = d->blend.n;
    int64_t size = 0;
    bool exhaustive = false;
    if (d->blend.weights) {
        for (int k = 0; k < n; k++) size += mg_blend_dataset_size(target, d->blend.weights[k], 0.0);
        mg_normalize(d->blend.weights, n, w); /* BlendedDataset normalises once more */
    } else {
        int64_t total = 0;
        for (int k = 0; k < n; k++) {
            lens[k] = mg_gpt_split_len(&s->parts[k]);
            if (lens[k] <= 0)
                return USAGE("the %s split of %s has no samples, so it cannot be blended by "
                             "size; change --split or drop the prefix",
                             mg_split_names[split], d->blend.prefixes[k]);
            total += lens[k];
            w[k] = (double)lens[k];
        }
        exhaustive = target < 0;
        size = exhaustive ? total : (target < total ? target : total);
        if (!exhaustive) mg_normalize(w, n, w);
    }
    char *description = NULL;
    MG_CHECK(blend_description(d, split, part_n, exhaustive ? NULL : w, lens,
                               exhaustive ? -1 : size, &description));
    char base[MG_CACHE_PATH_MAX], md5[33], path[3][MG_CACHE_PATH_MAX];
    const char *affix[3] = {"description.txt", "dataset_index.npy", "dataset_sample_index.npy"};
    mg_status st = MG_OK;
    bool cached = d->cache_path != NULL, hit = false;
    if (cached) {
        st = mg_cache_base(base, sizeof base, d->cache_path, description, "BlendedDataset",
                           mg_split_names[split], md5);
        hit = st == MG_OK;
        for (int k = 0; k < 3 && st == MG_OK; k++) {
            st = mg_cache_path(path[k], sizeof path[k], base, affix[k]);
            hit = hit && st == MG_OK && mg_cache_is_file(path[k]);
        }
    }
    if (hit) {
        char *text = NULL;
        const char *why = NULL;
        if (mg_cache_read_text(path[0], &text) != MG_OK || strcmp(text, description))
            why = "description.txt differs";
        else if (mg_npy_load(&s->dataset_index, path[1]) != MG_OK ||
                 mg_npy_load(&s->dataset_sample_index, path[2]) != MG_OK ||
                 check_blend(d, split, s, size) != MG_OK)
            why = mg_error_message();
        free(text);
        if (why) {
            mg_log_warn("blend index cache %s* is unusable (%s); rebuilding it", base, why);
            mg_error_clear();
            mg_npy_free(&s->dataset_index);
            mg_npy_free(&s->dataset_sample_index);
            hit = false;
        }
    }
    if (!hit && st == MG_OK) {
        int16_t *di = malloc(sizeof *di * (size_t)(size > 0 ? size : 1));
        int64_t *dsi = malloc(sizeof *dsi * (size_t)(size > 0 ? size : 1));
        mg_npy_adopt(&s->dataset_index, MG_NPY_I2, 1, &size, di);
        mg_npy_adopt(&s->dataset_sample_index, MG_NPY_I8, 1, &size, dsi);
        if (!di || !dsi)
            st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate %lld blend indices", (long long)size);
        if (st == MG_OK)
            st = exhaustive ? mg_blend_build_exhaustive(lens, n, di, dsi)
                            : mg_blend_build_indices(w, n, size, di, dsi);
        if (st == MG_OK) st = check_blend(d, split, s, size);
        if (st == MG_OK && cached) {
            st = mg_cache_mkdirs(d->cache_path);
            if (st == MG_OK) st = mg_npy_save(path[1], MG_NPY_I2, 1, &size, di);
            if (st == MG_OK) st = mg_npy_save(path[2], MG_NPY_I8, 1, &size, dsi);
            if (st == MG_OK) st = mg_cache_write_text(path[0], description);
        }
    }
    free(description);
    s->len = size;
    return st;
}

static mg_status build_split(mg_gpt_data *d, int split, const mg_gpt_data_config *c) {
    split_data *s = &d->s[split];
    s->present = true;
    const bool single = d->blend.n == 1 && !d->blend.weights;
    s->nparts = single ? 1 : d->blend.n;
    s->parts = calloc((size_t)s->nparts, sizeof *s->parts);
    int64_t *part_n = calloc((size_t)s->nparts, sizeof *part_n);
    mg_status st = s->parts && part_n ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "cannot allocate datasets");
    for (int k = 0; k < s->nparts && st == MG_OK; k++) {
        int64_t n = c->num_samples[split];
        if (!single) /* the per-dataset request, with Megatron's surplus */
            n = d->blend.weights ? mg_blend_dataset_size(n, d->blend.weights[k], MG_BLEND_SURPLUS)
                                 : -1;
        part_n[k] = n;
        mg_gpt_split_config pc = part_config(d, k, split, n);
        st = mg_gpt_split_build(&s->parts[k], &d->ds[k], d->max_len[k], &pc);
    }
    if (st == MG_OK && single) s->len = mg_gpt_split_len(&s->parts[0]);
    /* may_be_empty: a weighted blend whose every part has no documents is empty; a blend with
     * some empty parts would draw from them */
    int empty = 0;
    for (int k = 0; st == MG_OK && !single && d->may_be_empty[split] && k < s->nparts; k++)
        empty += part_n[k] > 0 && mg_gpt_split_len(&s->parts[k]) == 0;
    if (empty > 0 && empty < s->nparts)
        st = USAGE("the %s split of %d of the %d --data-path datasets holds no documents with "
                   "--split %s, the others' does; change --split",
                   mg_split_names[split], empty, s->nparts, d->split_text);
    if (st == MG_OK && !single && empty == s->nparts)
        s->len = 0;
    else if (st == MG_OK && !single) {
        s->blended = true;
        double *w = malloc(sizeof *w * (size_t)s->nparts);
        int64_t *lens = calloc((size_t)s->nparts, sizeof *lens);
        st = w && lens ? build_blend_indices(d, split, s, part_n, c->num_samples[split], w, lens)
                       : MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blend");
        free(w), free(lens);
    }
    free(part_n);
    return st;
}

mg_status mg_gpt_data_build(mg_gpt_data **out, const mg_gpt_data_config *c) {
    *out = NULL;
    if (!c->data_path || !*c->data_path)
        return USAGE("--data-path needs a dataset prefix (or weighted pairs such as 0.3 A 0.7 B)");
    if (c->seq_length < 2)
        return USAGE("--seq-length must be at least 2 for a GPT dataset, got %d", c->seq_length);
    if (c->seed > UINT32_MAX)
        return USAGE("--seed must be in [0, 4294967295] (numpy's RandomState), got %llu",
                     (unsigned long long)c->seed);
    for (int i = 0; i < MG_SPLIT_COUNT; i++)
        if (c->num_samples[i] < -1 && c->num_samples[i] != MG_GPT_SPLIT_UNUSED)
            return USAGE("the %s sample count must be >= 0, got %lld", mg_split_names[i],
                         (long long)c->num_samples[i]);
    mg_gpt_data *d = calloc(1, sizeof *d);
    if (!d) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the dataset");
    mg_status st = mg_split_parse(&d->split, c->split ? c->split : "969, 30, 1");
    if (st == MG_OK) st = mg_blend_parse(&d->blend, c->data_path);
    /* Megatron builds no dataset for a split whose --split weight is 0: it needs no count */
    if (st == MG_OK && d->blend.weights)
        for (int i = 0; i < MG_SPLIT_COUNT && st == MG_OK; i++)
            if (d->split.present[i] && c->num_samples[i] == -1)
                st = USAGE("a weighted --data-path blend needs a sample count for every split; "
                           "the %s split has none",
                           mg_split_names[i]);
    d->split_text = strdup(c->split ? c->split : "969, 30, 1");
    d->cache_path = c->cache_path && *c->cache_path ? strdup(c->cache_path) : NULL;
    d->seq_length = c->seq_length;
    d->seed = (uint32_t)c->seed;
    memcpy(d->may_be_empty, c->may_be_empty, sizeof d->may_be_empty);
    d->scratch = malloc(sizeof *d->scratch * ((size_t)c->seq_length + 1));
    if (st == MG_OK &&
        (!d->split_text || (c->cache_path && *c->cache_path && !d->cache_path) || !d->scratch))
        st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the dataset");
    if (st == MG_OK && d->blend.n >= 32767) /* BlendedDataset's int16 dataset index */
        st = USAGE("--data-path blends %d datasets; at most 32766 are supported", d->blend.n);
    if (st == MG_OK) {
        d->ds = calloc((size_t)d->blend.n, sizeof *d->ds);
        d->max_len = calloc((size_t)d->blend.n, sizeof *d->max_len);
        if (!d->ds || !d->max_len) st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the dataset");
    }
    for (int k = 0; st == MG_OK && k < d->blend.n; k++) st = open_prefix(d, k);
    for (int i = 0; st == MG_OK && i < MG_SPLIT_COUNT; i++)
        if (d->split.present[i] && c->num_samples[i] != MG_GPT_SPLIT_UNUSED)
            st = build_split(d, i, c);
    if (st != MG_OK) {
        mg_gpt_data_free(d);
        return st;
    }
    *out = d;
    return MG_OK;
}

int64_t mg_gpt_data_len(const mg_gpt_data *d, int split) {
    if (split < 0 || split >= MG_SPLIT_COUNT || !d->s[split].present) return 0;
    return d->s[split].len;
}

int mg_gpt_data_num_epochs(const mg_gpt_data *d, int split) {
    if (split < 0 || split >= MG_SPLIT_COUNT || !d->s[split].present) return 0;
    int64_t e = 0;
    for (int k = 0; k < d->s[split].nparts; k++)
        if (d->s[split].parts[k].plan.num_epochs > e) e = d->s[split].parts[k].plan.num_epochs;
    return (int)e;
}

mg_status mg_gpt_data_sample(mg_gpt_data *d, int split, int64_t index, int32_t *tokens) {
    if (split < 0 || split >= MG_SPLIT_COUNT)
        return USAGE("split %d is not 0 (train), 1 (valid) or 2 (test)", split);
    const split_data *s = &d->s[split];
    if (index < 0 || index >= mg_gpt_data_len(d, split))
        return USAGE("sample %lld is outside the %s dataset [0, %lld)", (long long)index,
                     mg_split_names[split], (long long)mg_gpt_data_len(d, split));
    if (!s->blended) return mg_gpt_split_sample(&s->parts[0], index, tokens);
    int64_t k = mg_npy_get(&s->dataset_index, index);
    return mg_gpt_split_sample(&s->parts[k], mg_npy_get(&s->dataset_sample_index, index), tokens);
}

mg_status mg_gpt_data_sample_pair(mg_gpt_data *d, int split, int64_t index, int32_t *tokens,
                                  int32_t *targets) {
    MG_CHECK(mg_gpt_data_sample(d, split, index, d->scratch));
    memcpy(tokens, d->scratch, sizeof *tokens * (size_t)d->seq_length);
    memcpy(targets, d->scratch + 1, sizeof *targets * (size_t)d->seq_length);
    return MG_OK;
}

void mg_gpt_data_free(mg_gpt_data *d) {
    if (!d) return;
    for (int i = 0; i < MG_SPLIT_COUNT; i++) {
        split_data *s = &d->s[i];
        for (int k = 0; s->parts && k < s->nparts; k++) mg_gpt_split_free(&s->parts[k]);
        free(s->parts);
        mg_npy_free(&s->dataset_index);
        mg_npy_free(&s->dataset_sample_index);
    }
    for (int k = 0; d->ds && k < d->blend.n; k++) mg_indexed_dataset_close(&d->ds[k]);
    free(d->ds);
    free(d->max_len);
    mg_blend_free(&d->blend);
    free(d->split_text);
    free(d->cache_path);
    free(d->scratch);
    free(d);
}
