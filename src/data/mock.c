#include "data/mock.h"

#include "core/rng.h"

#include <stdlib.h>
#include <string.h>

mg_status mg_mock_init(mg_mock_data *d, uint64_t seed, uint32_t stream, int vocab, int seq_length) {
    memset(d, 0, sizeof *d);
    if (vocab < 3) return MG_FAIL(MG_ERR_USAGE, "--mock-data needs --vocab-size of at least 3");
    d->seed = seed;
    d->stream = stream;
    d->vocab = vocab;
    d->seq_length = seq_length;
    d->scratch = malloc((size_t)(seq_length + 1) * sizeof *d->scratch);
    if (!d->scratch) return MG_FAIL(MG_ERR_NOMEM, "mock data: out of memory");
    return MG_OK;
}

/* Document lengths in [2, 2*seq_length], capped below the vocabulary so tokens stay distinct. */
static int64_t doc_length(const mg_mock_data *d, int64_t doc) {
    int64_t max = 2 * (int64_t)d->seq_length;
    if (max > d->vocab - 1) max = d->vocab - 1;
    if (max < 2) max = 2;
    float u = mg_rng_uniform(d->seed, 0x6d6f636bu + d->stream, (uint64_t)doc);
    return 2 + (int64_t)(u * (float)(max - 1));
}

static mg_status grow_to(mg_mock_data *d, int64_t end_token) {
    while (d->num_docs == 0 || d->doc_end[d->num_docs - 1] < end_token) {
        if (d->num_docs == d->cap) {
            int64_t cap = d->cap ? 2 * d->cap : 1024;
            int64_t *p = realloc(d->doc_end, (size_t)cap * sizeof *p);
            if (!p) return MG_FAIL(MG_ERR_NOMEM, "mock data: cannot grow the document index");
            d->doc_end = p;
            d->cap = cap;
        }
        int64_t start = d->num_docs ? d->doc_end[d->num_docs - 1] : 0;
        d->doc_end[d->num_docs] = start + doc_length(d, d->num_docs);
        d->num_docs++;
    }
    return MG_OK;
}

mg_status mg_mock_sample(mg_mock_data *d, int64_t index, int32_t *tokens) {
    int64_t first = index * d->seq_length, n = d->seq_length + 1;
    MG_CHECK(grow_to(d, first + n));
    /* binary search for the document holding `first` */
    int64_t lo = 0, hi = d->num_docs - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (d->doc_end[mid] > first)
            hi = mid;
        else
            lo = mid + 1;
    }
    int64_t doc = lo;
    for (int64_t k = 0; k < n; k++) {
        int64_t pos = first + k;
        while (d->doc_end[doc] <= pos) doc++;
        int64_t start = doc ? d->doc_end[doc - 1] : 0;
        int64_t in_doc = pos - start, len = d->doc_end[doc] - start;
        tokens[k] = in_doc == len - 1 ? d->vocab - 1 /* end of document */ : (int32_t)(in_doc + 1);
    }
    return MG_OK;
}

mg_status mg_mock_source(void *ctx, int64_t index, int32_t *tokens, int32_t *targets) {
    mg_mock_data *d = ctx;
    MG_CHECK(mg_mock_sample(d, index, d->scratch));
    memcpy(tokens, d->scratch, (size_t)d->seq_length * sizeof *tokens);
    memcpy(targets, d->scratch + 1, (size_t)d->seq_length * sizeof *targets);
    return MG_OK;
}

void mg_mock_free(mg_mock_data *d) {
    free(d->doc_end);
    free(d->scratch);
    memset(d, 0, sizeof *d);
}
