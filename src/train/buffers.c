#include "train/buffers.h"

#include <stdlib.h>
#include <string.h>

/* Whether parameter m belongs to the buffer of `expert` and `fp8` weights (only
 * --fp8-param-gather tags fp8 weights: model/fp8.h's mg_fp8_mark_weights). */
static bool in_buffer(const mg_param_meta *m, bool expert, bool fp8) {
    return m->expert == expert && (m->fp8_tensor >= 0) == fp8;
}

/* One buffer over the parameters of pt in_buffer (none: *made false). */
static mg_status build_one(const mg_param_table *pt, const mg_config *c, bool expert, bool fp8,
                           int D, int pp_rank, size_t base, mg_train_buffer *b, bool *made) {
    mg_grad_buffer_config gc = {
        .data_parallel_size = D,
        .use_distributed_optimizer = c->use_distributed_optimizer,
        .overlap_grad_reduce = c->overlap_grad_reduce,
        .bucket_size = c->ddp_bucket_size > 0 ? c->ddp_bucket_size : 0,
        .pad_for_high_nccl_busbw = c->ddp_pad_buckets_for_high_nccl_busbw,
        /* Megatron's: the embedding's copy on the first or last stage gets a bucket of its own
         * (its gradient is complete only after the embedding-group sum), and the stages after
         * the first use one bucket */
        .shared_embedding = NULL, /* set below */
        .disable_bucketing = pp_rank > 0,
        .align_param_starts = true,
    };
    memset(b, 0, sizeof *b);
    int n = 0;
    for (int i = 0; i < pt->n; i++) n += in_buffer(&pt->p[i], expert, fp8);
    *made = n > 0;
    if (!n) return MG_OK;
    int64_t *sizes = malloc((size_t)n * sizeof *sizes);
    bool *shared = calloc((size_t)n, sizeof *shared);
    b->index = malloc((size_t)n * sizeof *b->index);
    if (!sizes || !shared || !b->index) {
        free(sizes);
        free(shared);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    }
    for (int i = 0, k = 0; i < pt->n; i++) {
        if (!in_buffer(&pt->p[i], expert, fp8)) continue;
        shared[k] = pt->p[i].embedding_group;
        b->index[k] = i;
        sizes[k++] = pt->p[i].numel;
    }
    gc.shared_embedding = shared;
    static const char *const names[2][2] = {{"dense", "dense fp8"}, {"expert", "expert fp8"}};
    b->name = names[expert][fp8];
    b->expert = expert;
    b->fp8 = fp8;
    b->base = base;
    mg_status st = mg_grad_buffer_layout_build(sizes, n, &gc, &b->layout);
    free(sizes);
    free(shared);
    return st;
}

mg_status mg_train_buffers_build(mg_param_table *pt, const mg_config *c, int dp_size, int edp_size,
                                 int pp_rank, mg_train_buffers *out) {
    memset(out, 0, sizeof *out);
    size_t *offsets = malloc((size_t)(pt->n ? pt->n : 1) * sizeof *offsets);
    mg_status st = offsets ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory");
    size_t fp8_from = 0;
    for (int k = 0; st == MG_OK && k < MG_TRAIN_BUFFERS_MAX; k++) {
        bool made = false, expert = k % 2 == 1, fp8 = k >= 2; /* the fp8 buffers last */
        mg_train_buffer *b = &out->b[out->n];
        if (k == 2) fp8_from = out->numel;
        st = build_one(pt, c, expert, fp8, expert ? edp_size : dp_size, pp_rank, out->numel, b,
                       &made);
        if (st != MG_OK || !made) continue;
        for (int r = 0; r < b->layout.n_params; r++)
            offsets[b->index[b->layout.params[r].index]] =
                b->base + (size_t)b->layout.params[r].range.start;
        out->numel += (size_t)b->layout.numel;
        out->n++;
    }
    if (st == MG_OK) st = mg_params_relayout(pt, offsets, out->numel);
    if (st == MG_OK) pt->fp8_from = fp8_from;
    free(offsets);
    if (st != MG_OK) mg_train_buffers_free(out);
    return st;
}

size_t mg_train_buffers_bf16_stage(const mg_train_buffers *b, const mg_config *c) {
    int64_t most = 0;
    for (int i = 0; c->grad_reduce_in_bf16 && i < b->n; i++) {
        const mg_grad_buffer_layout *l = &b->b[i].layout;
        const int64_t n = l->cfg.data_parallel_size > 1 ? mg_grad_buffer_largest_bucket(l) : 0;
        if (n > most) most = n;
    }
    return (size_t)most * sizeof(uint16_t);
}

void mg_train_buffers_free(mg_train_buffers *b) {
    for (int i = 0; i < MG_TRAIN_BUFFERS_MAX; i++) {
        mg_grad_buffer_layout_free(&b->b[i].layout);
        free(b->b[i].index);
    }
    memset(b, 0, sizeof *b);
}
