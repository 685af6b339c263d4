#include "train/buffers.h"

#include <stdlib.h>
#include <string.h>

/* One buffer over the parameters of pt whose `expert` flag is `expert` (none: *made false). */
static mg_status build_one(const mg_param_table *pt, const mg_config *c, bool expert, int D,
                           int pp_rank, size_t base, mg_train_buffer *b, bool *made) {
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
    for (int i = 0; i < pt->n; i++) n += pt->p[i].expert == expert;
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
        if (pt->p[i].expert != expert) continue;
        shared[k] = pt->p[i].embedding_group;
        b->index[k] = i;
        sizes[k++] = pt->p[i].numel;
    }
    gc.shared_embedding = shared;
    b->name = expert ? "expert" : "dense";
    b->expert = expert;
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
    for (int e = 0; st == MG_OK && e < 2; e++) {
        bool made = false;
        mg_train_buffer *b = &out->b[out->n];
        st = build_one(pt, c, e == 1, e ? edp_size : dp_size, pp_rank, out->numel, b, &made);
        if (st != MG_OK || !made) continue;
        for (int r = 0; r < b->layout.n_params; r++)
            offsets[b->index[b->layout.params[r].index]] =
                b->base + (size_t)b->layout.params[r].range.start;
        out->numel += (size_t)b->layout.numel;
        out->n++;
    }
    if (st == MG_OK) st = mg_params_relayout(pt, offsets, out->numel);
    free(offsets);
    if (st != MG_OK) mg_train_buffers_free(out);
    return st;
}

void mg_train_buffers_free(mg_train_buffers *b) {
    for (int i = 0; i < MG_TRAIN_BUFFERS_MAX; i++) {
        mg_grad_buffer_layout_free(&b->b[i].layout);
        free(b->b[i].index);
    }
    memset(b, 0, sizeof *b);
}
