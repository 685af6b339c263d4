/* One GPTDataset: description, cache, indices and samples (see gpt_split.h). */
#include "data/gpt_split.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mg_gpt_split_describe(mg_pyjson *j, const mg_gpt_split_config *c) {
    /* MegatronDataset.unique_identifiers + _key_config_attributes, in their order */
    mg_pyjson_begin(j, '{');
    mg_pyjson_key(j, "class");
    mg_pyjson_str(j, "GPTDataset");
    mg_pyjson_key(j, "dataset_path");
    mg_pyjson_str(j, c->prefix);
    mg_pyjson_key(j, "num_samples");
    if (c->num_samples < 0)
        mg_pyjson_null(j);
    else
        mg_pyjson_int(j, c->num_samples);
    mg_pyjson_key(j, "index_split");
    mg_pyjson_str(j, mg_split_names[c->index_split]);
    mg_pyjson_key(j, "random_seed");
    mg_pyjson_int(j, c->seed);
    mg_pyjson_key(j, "sequence_length");
    mg_pyjson_int(j, c->seq_length);
    mg_pyjson_key(j, "split");
    mg_pyjson_str(j, c->split_text);
    mg_pyjson_key(j, "split_matrix");
    mg_pyjson_begin(j, '[');
    for (int i = 0; i < MG_SPLIT_COUNT; i++) {
        if (!c->split->present[i]) {
            mg_pyjson_null(j);
            continue;
        }
        mg_pyjson_begin(j, '[');
        if (i == 0)
            mg_pyjson_int(j, 0); /* Python's int 0 starts the cumulative sum */
        else
            mg_pyjson_float(j, c->split->matrix[i][0]);
        mg_pyjson_float(j, c->split->matrix[i][1]);
        mg_pyjson_end(j, ']');
    }
    mg_pyjson_end(j, ']');
    mg_pyjson_key(j, "tokenizer");
    mg_pyjson_null(j);
    mg_pyjson_end(j, '}');
}

static const char *const k_affix[4] = {"description.txt", "document_index.npy", "sample_index.npy",
                                       "shuffle_index.npy"};

/* Whether a loaded index set is the one `g` (planned, not built) expects; "" when it is. */
static const char *check_loaded(const mg_gpt_split *g, int32_t max_len) {
    const mg_gpt_epoch_plan *p = &g->plan;
    int64_t ndocs = g->doc_end - g->doc_begin, ndi = p->num_epochs * ndocs, n = p->num_samples;
    const mg_npy *d = &g->document_index, *s = &g->sample_index, *sh = &g->shuffle_index;
    if (d->dtype != MG_NPY_I4 || d->ndim != 1 || d->shape[0] != ndi)
        return "document index dtype or shape";
    mg_npy_dtype st = mg_gpt_sample_index_is_int64(ndi, max_len) ? MG_NPY_I8 : MG_NPY_I4;
    if (s->dtype != st || s->ndim != 2 || s->shape[0] != n + 1 || s->shape[1] != 2)
        return "sample index dtype or shape";
    mg_npy_dtype ht = mg_gpt_shuffle_index_is_int64(n) ? MG_NPY_I8 : MG_NPY_U4;
    if (sh->dtype != ht || sh->ndim != 1 || sh->shape[0] != n)
        return "shuffle index dtype or shape";
    for (int64_t i = 0; i < ndi; i++) {
        int64_t v = mg_npy_get(d, i);
        if (v < g->doc_begin || v >= g->doc_end) return "document index values";
    }
    for (int64_t i = 0; i < 2 * (n + 1); i += 2) {
        int64_t pos = mg_npy_get(s, i), off = mg_npy_get(s, i + 1);
        if (pos < 0 || pos >= ndi || off < 0) return "sample index values";
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v = mg_npy_get(sh, i);
        if (v < 0 || v >= n) return "shuffle index values";
    }
    return "";
}

static void free_indices(mg_gpt_split *g) {
    mg_npy_free(&g->document_index);
    mg_npy_free(&g->sample_index);
    mg_npy_free(&g->shuffle_index);
}

/* Loads a cache hit; false (with a warning) when a file does not pass. */
static bool load_cached(mg_gpt_split *g, const char *base, const char *description,
                        int32_t max_len) {
    char path[MG_CACHE_PATH_MAX];
    char *text = NULL;
    const char *why = "";
    mg_npy *arr[3] = {&g->document_index, &g->sample_index, &g->shuffle_index};
    if (mg_cache_path(path, sizeof path, base, k_affix[0]) != MG_OK ||
        mg_cache_read_text(path, &text) != MG_OK || strcmp(text, description) != 0)
        why = "description.txt differs";
    free(text);
    for (int k = 0; k < 3 && !*why; k++)
        if (mg_cache_path(path, sizeof path, base, k_affix[k + 1]) != MG_OK ||
            mg_npy_load(arr[k], path) != MG_OK)
            why = mg_error_message();
    if (!*why) why = check_loaded(g, max_len);
    if (!*why) return true;
    mg_log_warn("dataset index cache %s* is unusable (%s); rebuilding it", base, why);
    mg_error_clear();
    free_indices(g);
    return false;
}

static mg_status build_and_save(mg_gpt_split *g, const mg_gpt_split_config *c, const char *dir,
                                const char *base, const char *description, int32_t max_len) {
    mg_np_random rng;
    mg_np_random_seed(&rng, c->seed);
    int32_t *doc = NULL;
    MG_CHECK(mg_gpt_build_document_index(g->doc_begin, g->doc_end, &g->plan, &rng, &doc));
    int64_t ndi = g->plan.num_epochs * (g->doc_end - g->doc_begin);
    mg_npy_adopt(&g->document_index, MG_NPY_I4, 1, &ndi, doc);
    MG_CHECK(mg_gpt_build_sample_index(g->ds->sequence_lengths, doc, ndi, c->seq_length, &g->plan,
                                       mg_gpt_sample_index_is_int64(ndi, max_len),
                                       &g->sample_index));
    MG_CHECK(mg_gpt_build_shuffle_index(&g->plan, &rng, &g->shuffle_index));
    MG_CHECK(mg_cache_mkdirs(dir));
    const mg_npy *arr[3] = {&g->document_index, &g->sample_index, &g->shuffle_index};
    char path[MG_CACHE_PATH_MAX];
    for (int k = 0; k < 3; k++) {
        MG_CHECK(mg_cache_path(path, sizeof path, base, k_affix[k + 1]));
        MG_CHECK(mg_npy_save(path, arr[k]->dtype, arr[k]->ndim, arr[k]->shape, arr[k]->data));
    }
    MG_CHECK(mg_cache_path(path, sizeof path, base, k_affix[0]));
    MG_CHECK(mg_cache_write_text(path, description));
    return MG_OK;
}

mg_status mg_gpt_split_build(mg_gpt_split *g, const mg_indexed_dataset *ds,
                             int32_t max_sequence_length, const mg_gpt_split_config *c) {
    memset(g, 0, sizeof *g);
    g->ds = ds;
    g->seq_length = c->seq_length;
    g->num_samples_requested = c->num_samples;
    mg_split_range(c->split, c->index_split, ds->num_sequences, &g->doc_begin, &g->doc_end);
    int64_t tokens = 0;
    for (int64_t i = g->doc_begin; i < g->doc_end; i++) tokens += ds->sequence_lengths[i];
    if (tokens == 0) {
        /* empty: Megatron would fail; length 0 here */
        if (c->num_samples <= 0 || c->may_be_empty) return MG_OK;
        return MG_FAIL(MG_ERR_USAGE,
                       "the %s split of %s is empty (%lld of %lld documents with --split %s), so "
                       "it cannot give %lld samples; change --split or request no %s samples",
                       mg_split_names[c->index_split], c->prefix,
                       (long long)(g->doc_end - g->doc_begin), (long long)ds->num_sequences,
                       c->split_text, (long long)c->num_samples, mg_split_names[c->index_split]);
    }
    MG_CHECK(mg_gpt_plan_epochs(&g->plan, tokens, c->num_samples, c->seq_length));

    mg_pyjson j;
    mg_pyjson_init(&j);
    mg_gpt_split_describe(&j, c);
    char *description = NULL;
    MG_CHECK(mg_pyjson_finish(&j, &description));
    char dir[MG_CACHE_PATH_MAX], base[MG_CACHE_PATH_MAX];
    mg_status st;
    if (c->cache_dir && *c->cache_dir) /* os.path.join(prefix, "cache", "GPTDataset_indices") */
        st = mg_cache_path(dir, sizeof dir, c->cache_dir, "");
    else
        st = mg_cache_path(dir, sizeof dir, c->prefix,
                           c->prefix[strlen(c->prefix) - 1] == '/' ? "cache/GPTDataset_indices"
                                                                   : "/cache/GPTDataset_indices");
    if (st == MG_OK)
        st = mg_cache_base(base, sizeof base, dir, description, "GPTDataset",
                           mg_split_names[c->index_split], g->md5);
    bool hit = st == MG_OK;
    for (int k = 0; k < 4 && hit; k++) {
        char path[MG_CACHE_PATH_MAX];
        hit = mg_cache_path(path, sizeof path, base, k_affix[k]) == MG_OK && mg_cache_is_file(path);
    }
    if (hit && load_cached(g, base, description, max_sequence_length)) {
        g->loaded_from_cache = true;
    } else if (st == MG_OK) {
        st = build_and_save(g, c, dir, base, description, max_sequence_length);
    }
    free(description);
    if (st != MG_OK) free_indices(g);
    return st;
}

mg_status mg_gpt_split_sample(const mg_gpt_split *g, int64_t index, int32_t *tokens) {
    const int64_t n = g->plan.num_samples, want = (int64_t)g->seq_length + 1;
    if (index < 0 || index >= n)
        return MG_FAIL(MG_ERR_USAGE, "sample %lld is outside the dataset [0, %lld)",
                       (long long)index, (long long)n);
    /* _query_document_sample_shuffle_indices with add_extra_token_to_sequence */
    int64_t s = mg_npy_get(&g->shuffle_index, index);
    int64_t bpos = mg_npy_get(&g->sample_index, 2 * s),
            boff = mg_npy_get(&g->sample_index, 2 * s + 1);
    int64_t epos = mg_npy_get(&g->sample_index, 2 * s + 2);
    int64_t eoff = mg_npy_get(&g->sample_index, 2 * s + 3);
    int64_t got = 0;
    for (int64_t pos = bpos; pos <= epos; pos++) {
        int64_t doc = mg_npy_get(&g->document_index, pos);
        int64_t off = pos == bpos ? boff : 0;
        int64_t len = pos < epos ? g->ds->sequence_lengths[doc] - off : eoff + 1 - off;
        if (len < 0 || got + len > want)
            return MG_FAIL(MG_ERR_FORMAT,
                           "dataset index of %s is corrupt: sample %lld spans more than %lld "
                           "tokens; delete its index cache",
                           g->ds->prefix, (long long)index, (long long)want);
        MG_CHECK(mg_indexed_dataset_read(g->ds, doc, off, len, tokens + got));
        got += len;
    }
    if (got != want)
        return MG_FAIL(MG_ERR_FORMAT,
                       "dataset index of %s is corrupt: sample %lld has %lld tokens, not %lld; "
                       "delete its index cache",
                       g->ds->prefix, (long long)index, (long long)got, (long long)want);
    return MG_OK;
}

void mg_gpt_split_free(mg_gpt_split *g) {
    free_indices(g);
    memset(g, 0, sizeof *g);
}
