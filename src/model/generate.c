#include "model/generate.h"

#include "core/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Index of the next token from one row of logits. */
static int32_t pick(const float *logits, int V, const mg_generate_options *o, uint64_t step,
                    int *scratch /* (V) */) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    int k = o->top_k < 1 ? 1 : o->top_k > V ? V : o->top_k;
    if (k == 1) return best;
    /* the k largest logits, kept sorted by insertion (k is small) */
    int m = 0;
    for (int i = 0; i < V; i++) {
        if (m == k && logits[i] <= logits[scratch[k - 1]]) continue;
        int pos = m < k ? m++ : k - 1;
        while (pos > 0 && logits[i] > logits[scratch[pos - 1]]) {
            scratch[pos] = scratch[pos - 1];
            pos--;
        }
        scratch[pos] = i;
    }
    double total = 0, *p = malloc((size_t)k * sizeof *p);
    if (!p) return best;
    for (int j = 0; j < k; j++) {
        p[j] = exp((logits[scratch[j]] - logits[best]) / o->temperature);
        total += p[j];
    }
    double u = mg_rng_uniform(o->seed, 0x67656e31u, step) * total;
    int chosen = scratch[k - 1];
    for (int j = 0; j < k; j++) {
        if (u < p[j]) {
            chosen = scratch[j];
            break;
        }
        u -= p[j];
    }
    free(p);
    return chosen;
}

mg_status mg_gpt_generate(mg_gpt *g, mg_backend *be, int32_t *tokens_dev, int32_t *ids, size_t *n,
                          const mg_generate_options *o) {
    int S = g->cfg.S, V = g->cfg.V;
    int Vs = o->vocab_limit > 0 && o->vocab_limit < V ? o->vocab_limit : V;
    if (g->blk.N != S)
        return MG_FAIL(MG_ERR_INTERNAL, "generation needs a model planned for batch 1");
    if (*n == 0) return MG_FAIL(MG_ERR_USAGE, "the prompt is empty: give at least one token");
    if (o->temperature <= 0)
        return MG_FAIL(MG_ERR_USAGE, "--temperature must be positive, got %g", o->temperature);
    int32_t *window = calloc((size_t)S, sizeof *window);
    float *logits = malloc((size_t)V * sizeof *logits);
    int *scratch = malloc((size_t)V * sizeof *scratch);
    mg_status st =
        window && logits && scratch ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "generation: out of memory");
    for (int step = 0; st == MG_OK && step < o->max_new_tokens; step++) {
        size_t len = *n < (size_t)S ? *n : (size_t)S, first = *n - len;
        memset(window, 0, (size_t)S * sizeof *window);
        memcpy(window, ids + first, len * sizeof *window);
        st = be->copy_h2d(be, tokens_dev, window, (size_t)S * sizeof *window);
        if (st == MG_OK) st = mg_gpt_forward(g, be, tokens_dev);
        size_t esz = mg_dtype_size(be->compute_dtype);
        if (st == MG_OK)
            st = be->download_f32(be, logits, (char *)mg_gpt_logits(g) + (len - 1) * V * esz,
                                  (size_t)V);
        if (st != MG_OK) break;
        int32_t next = pick(logits, Vs, o, (uint64_t)step, scratch);
        ids[(*n)++] = next;
        if (next == o->stop_token) break;
    }
    free(window);
    free(logits);
    free(scratch);
    return st;
}

mg_status mg_gpt_prompt_logits(mg_gpt *g, mg_backend *be, int32_t *tokens_dev, const int32_t *ids,
                               size_t n, int vocab, float *out) {
    int S = g->cfg.S, V = g->cfg.V;
    if (g->blk.N != S) return MG_FAIL(MG_ERR_INTERNAL, "logits need a model planned for batch 1");
    if (n == 0 || n > (size_t)S)
        return MG_FAIL(MG_ERR_USAGE,
                       "the prompt has %zu tokens; logits take 1 to %d (the sequence length)", n,
                       S);
    if (vocab <= 0 || vocab > V)
        return MG_FAIL(MG_ERR_INTERNAL, "vocabulary %d outside the model's %d rows", vocab, V);
    mg_status st = MG_OK;
    size_t esz = mg_dtype_size(be->compute_dtype);
    int32_t *window = calloc((size_t)S, sizeof *window);
    float *row = malloc((size_t)V * sizeof *row);
    if (!window || !row) {
        st = MG_FAIL(MG_ERR_NOMEM, "logits: out of memory");
        goto done;
    }
    memcpy(window, ids, n * sizeof *window);
    MG_CHECK_GOTO(be->copy_h2d(be, tokens_dev, window, (size_t)S * sizeof *window), st, done);
    MG_CHECK_GOTO(mg_gpt_forward(g, be, tokens_dev), st, done);
    for (size_t i = 0; i < n; i++) { /* row i of the (S, V) logits, its first vocab columns */
        MG_CHECK_GOTO(be->download_f32(be, row, (char *)mg_gpt_logits(g) + i * V * esz, (size_t)V),
                      st, done);
        memcpy(out + i * (size_t)vocab, row, (size_t)vocab * sizeof *row);
    }
done:
    free(window);
    free(row);
    return st;
}
