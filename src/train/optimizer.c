#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The pieces of bucket b of buffer bf this rank updates, appended to o->pieces; returns the
 * shard. Pieces and shards are in the parameter arrays' coordinates (the buffer's base added)
 * and name parameter-table indices. */
static mg_status bucket_pieces(mg_optimizer *o, const mg_train_buffer *bf, int buf, int b,
                               int dp_rank, size_t local, mg_grad_shard_param *scratch) {
    const mg_grad_buffer_layout *l = &bf->layout;
    const mg_grad_buffer_bucket *q = &l->buckets[b];
    mg_grad_range r = q->range;
    if (l->cfg.use_distributed_optimizer) {
        MG_CHECK(mg_grad_buffer_shard_range(l, b, dp_rank, &r));
        int n;
        MG_CHECK(mg_grad_buffer_shard_params(l, b, dp_rank, scratch, &n));
        for (int k = 0; k < n; k++) {
            const mg_grad_shard_param *s = &scratch[k];
            o->pieces[o->n_pieces++] = (mg_optim_piece){
                .index = bf->index[s->index],
                .param_start = s->param.start,
                .param_end = s->param.end,
                .world = bf->base + (size_t)s->world.start,
                .local = local + (size_t)s->local.start,
            };
        }
    } else {
        for (int row = q->first; row < q->first + q->count; row++) {
            const mg_grad_buffer_param *p = &l->params[row];
            o->pieces[o->n_pieces++] = (mg_optim_piece){
                .index = bf->index[p->index],
                .param_start = 0,
                .param_end = p->range.end - p->range.start,
                .world = bf->base + (size_t)p->range.start,
                .local = local + (size_t)(p->range.start - r.start),
            };
        }
    }
    o->shards[o->n_shards++] =
        (mg_optim_shard){bf->base + (size_t)r.start, local, (size_t)(r.end - r.start), buf};
    return MG_OK;
}

/* Whether the gradient norm of tensor-parallel rank tp_rank counts parameter m (optimizer.h). */
static bool norm_counts(const mg_param_meta *m, int tp_rank) {
    return !m->shared && (tp_rank == 0 || m->tp_split_dim >= 0);
}

bool mg_optimizer_counts(const mg_param_meta *m, int tp_rank) {
    return norm_counts(m, tp_rank);
}

/* Spans: neighbouring pieces of one shard with the same weight decay and lr group, gaps included
 * (they hold zeros in every buffer, which AdamW keeps at zero): ~100 at GPT-2 124M, all updated
 * by one adamw call. With `for_norm`, only the pieces the gradient norm counts (norm_counts),
 * merged whatever their weight decay and group. */
static int build_spans(const mg_optimizer *o, const mg_param_table *t, bool for_norm, int tp_rank,
                       mg_optim_span *spans) {
    int shard = 0, n = 0;
    for (int k = 0; k < o->n_pieces; k++) {
        const mg_optim_piece *p = &o->pieces[k];
        while (p->local >= o->shards[shard].local + o->shards[shard].n) shard++;
        if (for_norm && !norm_counts(&t->p[p->index], tp_rank)) continue;
        size_t len = (size_t)(p->param_end - p->param_start);
        bool wd = for_norm || t->p[p->index].weight_decay;
        bool dec = !for_norm && t->p[p->index].embedding_or_output;
        mg_optim_span *last = n ? &spans[n - 1] : NULL;
        /* a run may swallow the gaps between pieces, never a piece it must not hold */
        bool adjacent = !for_norm || (k > 0 && norm_counts(&t->p[o->pieces[k - 1].index], tp_rank));
        if (last && last->weight_decay == wd && last->decoupled == dec &&
            last->local >= o->shards[shard].local && p->world >= last->world + last->n &&
            adjacent) {
            last->n = p->world + len - last->world;
            continue;
        }
        spans[n++] = (mg_optim_span){p->world, p->local, len, wd, dec, o->shards[shard].buf};
    }
    return n;
}

mg_status mg_optimizer_init(mg_optimizer *o, const mg_config *c, const mg_param_table *t,
                            const mg_train_buffers *bufs, const mg_optim_groups *g) {
    memset(o, 0, sizeof *o);
    o->beta1 = c->adam_beta1;
    o->beta2 = c->adam_beta2;
    o->eps = c->adam_eps;
    o->weight_decay = c->weight_decay;
    o->clip_grad = c->clip_grad;
    o->n_bufs = bufs->n;
    o->tp = g->tp && mg_comm_size(g->tp) > 1 ? g->tp : NULL;
    o->pp = g->pp && mg_comm_size(g->pp) > 1 ? g->pp : NULL;
    o->ep = g->ep && mg_comm_size(g->ep) > 1 ? g->ep : NULL;
    int n_params = 0, n_buckets = 0;
    for (int b = 0; b < bufs->n; b++) {
        const mg_grad_buffer_layout *l = &bufs->b[b].layout;
        n_params += l->n_params;
        n_buckets += l->n_buckets;
        o->buf_sharded[b] = l->cfg.use_distributed_optimizer && l->cfg.data_parallel_size > 1;
        o->sharded |= o->buf_sharded[b];
        o->buf_expert[b] = bufs->b[b].expert;
        o->experts |= o->buf_expert[b];
        /* the distributed optimizer's gradient norm sums the shards over the buffer's group (an
         * fp8 buffer's is its kind's) */
        o->norm_group[o->buf_expert[b]] = o->buf_sharded[b] ? g->group[b] : NULL;
    }
    if (n_params != t->n)
        return MG_FAIL(MG_ERR_INTERNAL, "optimizer: buffers of %d parameters for a table of %d",
                       n_params, t->n);
    o->shards = calloc((size_t)n_buckets, sizeof *o->shards);
    /* a parameter lies in one bucket and meets a shard in one run: at most one piece each */
    o->pieces = calloc((size_t)t->n, sizeof *o->pieces);
    o->updates = calloc((size_t)t->n, sizeof *o->updates);
    o->norm_spans = calloc((size_t)t->n, sizeof *o->norm_spans);
    mg_grad_shard_param *scratch = calloc((size_t)t->n, sizeof *scratch);
    mg_optim_span *spans = calloc((size_t)t->n, sizeof *spans); /* the update's, as built */
    mg_status st = MG_OK;
    if (!o->shards || !o->pieces || !o->updates || !o->norm_spans || !scratch || !spans)
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the optimizer's %d parameters", t->n);
    size_t local = 0;
    for (int bf = 0; st == MG_OK && bf < bufs->n; bf++) {
        o->buf_local[bf] = local;
        for (int b = 0; st == MG_OK && b < bufs->b[bf].layout.n_buckets; b++) {
            st = bucket_pieces(o, &bufs->b[bf], bf, b, g->rank[bf], local, scratch);
            if (st == MG_OK) local += o->shards[o->n_shards - 1].n;
        }
        o->buf_numel[bf] = local - o->buf_local[bf];
    }
    free(scratch);
    o->numel = local;
    /* the fp8 buffers come last (train/buffers.h): their local elements follow fp8_from */
    o->fp8_from = t->numel;
    o->fp8_local = local;
    for (int bf = bufs->n - 1; bf >= 0 && bufs->b[bf].fp8; bf--) {
        o->fp8_local = o->buf_local[bf];
        o->fp8_from = t->fp8_from;
    }
    o->params_numel = o->fp8_from + (local - o->fp8_local);
    for (int k = 0; st == MG_OK && k < o->n_pieces; k++) {
        const mg_optim_piece *p = &o->pieces[k];
        if (t->p[p->index].offset + (size_t)p->param_start != p->world)
            st = MG_FAIL(MG_ERR_INTERNAL, "optimizer: %s is at %zu, the layout says %zu",
                         t->p[p->index].name, t->p[p->index].offset,
                         p->world - (size_t)p->param_start);
    }
    int tp_rank = o->tp ? mg_comm_rank(o->tp) : 0;
    for (int i = 0; i < t->n; i++)
        if (!norm_counts(&t->p[i], tp_rank)) o->norm_filtered = true;
    if (st == MG_OK) o->n_spans = build_spans(o, t, false, tp_rank, spans);
    for (int i = 0; st == MG_OK && i < o->n_spans; i++) { /* as adamw takes them: rates by group */
        const mg_optim_span *sp = &spans[i];
        o->updates[i] = (mg_adamw_span){mg_optimizer_param_at(o, sp->world, sp->local),
                                        sp->world,
                                        sp->local,
                                        sp->n,
                                        sp->decoupled ? MG_RATE_DECOUPLED_LR : MG_RATE_LR,
                                        sp->weight_decay ? MG_RATE_WD : -1};
    }
    free(spans);
    if (st == MG_OK && o->norm_filtered)
        o->n_norm_spans = build_spans(o, t, true, tp_rank, o->norm_spans);
    if (st != MG_OK) mg_optimizer_free(o);
    return st;
}

size_t mg_optimizer_param_at(const mg_optimizer *o, size_t world, size_t local) {
    return world >= o->fp8_from ? o->fp8_from + (local - o->fp8_local) : world;
}

void mg_optimizer_free(mg_optimizer *o) {
    free(o->shards);
    free(o->pieces);
    free(o->updates);
    free(o->norm_spans);
    o->shards = NULL;
    o->pieces = NULL;
    o->updates = NULL;
    o->norm_spans = NULL;
    o->n_shards = o->n_pieces = o->n_spans = o->n_norm_spans = 0;
}

mg_status mg_optimizer_plan(mg_optimizer *o, mg_arena *arena) {
    MG_CHECK(mg_arena_reserve(arena, o->numel * sizeof(float), 0, &o->off_m));
    MG_CHECK(mg_arena_reserve(arena, o->numel * sizeof(float), 0, &o->off_v));
    MG_CHECK(mg_arena_reserve(arena, 4 * sizeof(float), 0, &o->off_scalars));
    return MG_OK;
}

void mg_optimizer_bind(mg_optimizer *o, mg_arena *arena) {
    o->m = mg_arena_ptr(arena, o->off_m);
    o->v = mg_arena_ptr(arena, o->off_v);
    o->scalars = mg_arena_ptr(arena, o->off_scalars);
}

/* Sums scalar which[i] over groups[i] (NULL: none) on the communication stream; the compute
 * stream waits for them. */
static mg_status all_reduce_sums(mg_backend *be, mg_comm *const *groups, float *const *which,
                                 int n) {
    void *stream = NULL;
    for (int i = 0; i < n; i++) {
        if (!groups[i]) continue;
        if (!stream) MG_CHECK(mg_backend_comm_begin(be, &stream));
        MG_CHECK(
            mg_comm_all_reduce(groups[i], which[i], which[i], 1, MG_F32, MG_REDUCE_SUM, stream));
    }
    return stream ? mg_backend_comm_end(be) : MG_OK;
}

mg_status mg_optimizer_norm(mg_optimizer *o, mg_backend *be, const float *grads,
                            const float *unscale) {
    /* per kind of buffer: [0] dense, [3] expert (optimizer.h) */
    float *sumsq = &o->scalars[0], *norm = &o->scalars[1], *coef = &o->scalars[2];
    float *sums[2] = {&o->scalars[0], &o->scalars[3]};
    MG_CHECK(be->memset_zero(be, o->scalars, 4 * sizeof(float)));
    /* the unscaled gradients' squares (train/grad_scaler.h): sumsq_f32 scales by unscale^2 in
     * double (2^-252 at a scale of 2^126), no false overflow */
    /* padding inside a shard is zero in the gradient buffer, so one pass per shard covers all;
     * TP ranks > 0 leave out the replicated parameters TP rank 0 counts, and the embedding's
     * pipeline copy is left out */
    if (o->norm_filtered)
        for (int s = 0; s < o->n_norm_spans; s++)
            MG_CHECK(be->sumsq_f32(be, sums[o->buf_expert[o->norm_spans[s].buf]],
                                   grads + o->norm_spans[s].world, o->norm_spans[s].n, unscale));
    else
        for (int s = 0; s < o->n_shards; s++)
            MG_CHECK(be->sumsq_f32(be, sums[o->buf_expert[o->shards[s].buf]],
                                   grads + o->shards[s].world, o->shards[s].n, unscale));
    /* the experts' sum over their shards (expert-data-parallel) and the experts of the other
     * expert-parallel ranks; the dense sum over its shards; then both over the model-parallel
     * ranks, which hold other parameters */
    mg_comm *groups[5] = {o->norm_group[0], o->experts ? o->norm_group[1] : NULL,
                          o->experts ? o->ep : NULL, o->tp, o->pp};
    float *which[5] = {sums[0], sums[1], sums[1], sumsq, sumsq};
    MG_CHECK(all_reduce_sums(be, groups, which, 3));
    if (o->experts) MG_CHECK(be->sum_f32(be, sumsq, sums[1], NULL, 1, 1.0f));
    MG_CHECK(all_reduce_sums(be, groups + 3, which + 3, 2));
    return be->clip_coef(be, coef, norm, sumsq, (float)o->clip_grad, unscale);
}

mg_status mg_optimizer_update(mg_optimizer *o, mg_backend *be, void *params, float *master,
                              const float *grads, const float *rates) {
    return be->adamw(be, params, master, grads, o->m, o->v, o->updates, o->n_spans, rates,
                     &rates[MG_RATE_BC1], (float)o->beta1, (float)o->beta2, (float)o->eps,
                     &o->scalars[2]);
}
