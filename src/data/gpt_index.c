/* GPTDataset's document, sample and shuffle indices (see gpt_index.h). */
#include "data/gpt_index.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

mg_status mg_gpt_plan_epochs(mg_gpt_epoch_plan *p, int64_t tokens, int64_t num_samples,
                             int seq_length) {
    memset(p, 0, sizeof *p);
    if (seq_length < 2)
        return MG_FAIL(MG_ERR_USAGE, "--seq-length must be at least 2 for a GPT dataset, got %d",
                       seq_length);
    if (tokens <= 0)
        return MG_FAIL(MG_ERR_INTERNAL, "planning epochs over %lld tokens", (long long)tokens);
    const int64_t L = seq_length;
    int64_t epochs = 1;
    if (num_samples >= 0) {
        /* _get_num_epochs: the fewest epochs with epochs * tokens >= num_samples * L + 1 */
        if (num_samples > (INT64_MAX - 1) / L)
            return MG_FAIL(MG_ERR_USAGE, "%lld samples of %d tokens overflow a 64-bit count",
                           (long long)num_samples, seq_length);
        int64_t want = num_samples * L + 1;
        epochs = want / tokens + (want % tokens != 0);
        if (epochs < 1) epochs = 1;
    }
    if (epochs > INT32_MAX || epochs > INT64_MAX / tokens)
        return MG_FAIL(MG_ERR_USAGE,
                       "%lld samples need %lld epochs of a %lld-token split; request fewer "
                       "samples or use more data",
                       (long long)num_samples, (long long)epochs, (long long)tokens);
    p->tokens_per_epoch = tokens;
    p->num_epochs = epochs;
    p->num_samples = (epochs * tokens - 1) / L;
    if (epochs > 1) {
        int64_t sans = ((epochs - 1) * tokens - 1) / L;
        int64_t from_final = num_samples - sans;
        int64_t per_epoch = (tokens - 1) / L;
        if (from_final < 0 || from_final > per_epoch + 1)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "final epoch contributes %lld samples, outside [0, %lld + 1]",
                           (long long)from_final, (long long)per_epoch);
        p->separate_final_epoch = from_final < (int64_t)(0.80 * (double)per_epoch);
        p->samples_sans_final = sans;
    }
    return MG_OK;
}

/* _build_document_index(documents, epochs, rng, separate=False) appended at out. */
static void document_epochs(int64_t begin, int64_t end, int64_t epochs, mg_np_random *rng,
                            int32_t *out) {
    int64_t n = end - begin, k = 0;
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t d = begin; d < end; d++) out[k++] = (int32_t)d;
    mg_np_shuffle_int32(rng, out, epochs * n);
}

mg_status mg_gpt_build_document_index(int64_t begin, int64_t end, const mg_gpt_epoch_plan *p,
                                      mg_np_random *rng, int32_t **out) {
    int64_t n = end - begin, total = p->num_epochs * n;
    if (end > INT32_MAX)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "document ids above 2^31 do not fit the int32 index");
    int32_t *idx = malloc(sizeof *idx * (size_t)(total > 0 ? total : 1));
    if (!idx)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the document index (%lld entries)",
                       (long long)total);
    if (!p->separate_final_epoch || p->num_epochs == 1) {
        document_epochs(begin, end, p->num_epochs, rng, idx);
    } else {
        document_epochs(begin, end, p->num_epochs - 1, rng, idx);
        document_epochs(begin, end, 1, rng, idx + (p->num_epochs - 1) * n);
    }
    *out = idx;
    return MG_OK;
}

bool mg_gpt_sample_index_is_int64(int64_t document_index_len, int32_t max_sequence_length) {
    int64_t m = document_index_len > max_sequence_length ? document_index_len : max_sequence_length;
    return m > INT32_MAX;
}

mg_status mg_gpt_build_sample_index(const int32_t *sizes, const int32_t *document_index,
                                    int64_t document_index_len, int seq_length,
                                    const mg_gpt_epoch_plan *p, bool int64, mg_npy *out) {
    const int64_t n = p->num_samples;
    int64_t shape[2] = {n + 1, 2};
    size_t item = int64 ? 8 : 4;
    void *buf = malloc(item * (size_t)(2 * (n + 1)));
    if (!buf)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the sample index (%lld samples)",
                       (long long)n);
    int64_t *b64 = buf;
    int32_t *b32 = buf;
#define PUT(i, v) (int64 ? (void)(b64[i] = (v)) : (void)(b32[i] = (int32_t)(v)))
    /* helpers.cpp build_sample_idx with add_extra_token_to_sequence = 1 */
    int64_t row = 0, doc_pos = 0, doc_offset = 0;
    PUT(0, doc_pos);
    PUT(1, doc_offset);
    row++;
    while (row <= n) {
        int64_t remaining = seq_length + 1;
        while (remaining != 0) {
            int64_t doc_len = sizes[document_index[doc_pos]] - doc_offset;
            remaining -= doc_len;
            if (remaining <= 0) {
                doc_offset += remaining + doc_len - 1;
                remaining = 0;
            } else {
                if (doc_pos == document_index_len - 1) {
                    /* only reachable when keeping a last partial sample, which we never do */
                    free(buf);
                    return MG_FAIL(MG_ERR_INTERNAL,
                                   "sample index ran out of documents at "
                                   "sample %lld of %lld",
                                   (long long)row, (long long)n);
                }
                doc_pos++;
                doc_offset = 0;
            }
        }
        PUT(2 * row, doc_pos);
        PUT(2 * row + 1, doc_offset);
        row++;
    }
#undef PUT
    mg_npy_adopt(out, int64 ? MG_NPY_I8 : MG_NPY_I4, 2, shape, buf);
    return MG_OK;
}

bool mg_gpt_shuffle_index_is_int64(int64_t num_samples) {
    return num_samples >= (int64_t)UINT32_MAX - 1;
}

mg_status mg_gpt_build_shuffle_index(const mg_gpt_epoch_plan *p, mg_np_random *rng, mg_npy *out) {
    int64_t total = p->num_samples;
    int64_t first = p->separate_final_epoch ? p->samples_sans_final : total;
    bool int64 = mg_gpt_shuffle_index_is_int64(total);
    void *buf = malloc((int64 ? 8 : 4) * (size_t)(total > 0 ? total : 1));
    if (!buf)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the shuffle index (%lld samples)",
                       (long long)total);
    if (int64) {
        int64_t *a = buf;
        for (int64_t i = 0; i < total; i++) a[i] = i;
        mg_np_shuffle_int64(rng, a, first);
        if (first != total) mg_np_shuffle_int64(rng, a + first, total - first);
    } else {
        uint32_t *a = buf;
        for (int64_t i = 0; i < total; i++) a[i] = (uint32_t)i;
        mg_np_shuffle_uint32(rng, a, first);
        if (first != total) mg_np_shuffle_uint32(rng, a + first, total - first);
    }
    mg_npy_adopt(out, int64 ? MG_NPY_I8 : MG_NPY_U4, 1, &total, buf);
    return MG_OK;
}
