#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The pieces of bucket b this rank updates, appended to o->pieces; returns the shard. */
static mg_status bucket_pieces(mg_optimizer *o, const mg_param_table *t,
                               const mg_grad_buffer_layout *l, int b, int dp_rank, size_t local,
                               mg_grad_shard_param *scratch) {
    const mg_grad_buffer_bucket *q = &l->buckets[b];
    mg_grad_range r = q->range;
    if (l->cfg.use_distributed_optimizer) {
        MG_CHECK(mg_grad_buffer_shard_range(l, b, dp_rank, &r));
        int n;
        MG_CHECK(mg_grad_buffer_shard_params(l, b, dp_rank, scratch, &n));
        for (int k = 0; k < n; k++) {
            const mg_grad_shard_param *s = &scratch[k];
            o->pieces[o->n_pieces++] = (mg_optim_piece){
                .index = s->index,
                .param_start = s->param.start,
                .param_end = s->param.end,
                .world = (size_t)s->world.start,
                .local = local + (size_t)s->local.start,
            };
        }
    } else {
        for (int row = q->first; row < q->first + q->count; row++) {
            const mg_grad_buffer_param *p = &l->params[row];
            o->pieces[o->n_pieces++] = (mg_optim_piece){
                .index = p->index,
                .param_start = 0,
                .param_end = p->range.end - p->range.start,
                .world = (size_t)p->range.start,
                .local = local + (size_t)(p->range.start - r.start),
            };
        }
    }
    o->shards[b] = (mg_optim_shard){(size_t)r.start, local, (size_t)(r.end - r.start)};
    return MG_OK;
}

/* Whether the gradient norm of tensor-parallel rank tp_rank counts parameter m (optimizer.h). */
static bool norm_counts(const mg_param_meta *m, int tp_rank) {
    return !m->shared && (tp_rank == 0 || m->tp_split_dim >= 0);
}

/* Spans: neighbouring pieces of one shard with the same weight decay, gaps included (they hold
 * zeros in every buffer, which AdamW keeps at zero): one call each (~100 at GPT-2 124M). With
 * `for_norm`, only the pieces the gradient norm counts (norm_counts), merged whatever their
 * weight decay. */
static int build_spans(const mg_optimizer *o, const mg_param_table *t, bool for_norm, int tp_rank,
                       mg_optim_span *spans) {
    int shard = 0, n = 0;
    for (int k = 0; k < o->n_pieces; k++) {
        const mg_optim_piece *p = &o->pieces[k];
        while (p->local >= o->shards[shard].local + o->shards[shard].n) shard++;
        if (for_norm && !norm_counts(&t->p[p->index], tp_rank)) continue;
        size_t len = (size_t)(p->param_end - p->param_start);
        bool wd = for_norm || t->p[p->index].weight_decay;
        mg_optim_span *last = n ? &spans[n - 1] : NULL;
        /* a run may swallow the gaps between pieces, never a piece it must not hold */
        bool adjacent = !for_norm || (k > 0 && norm_counts(&t->p[o->pieces[k - 1].index], tp_rank));
        if (last && last->weight_decay == wd && last->local >= o->shards[shard].local &&
            p->world >= last->world + last->n && adjacent) {
            last->n = p->world + len - last->world;
            continue;
        }
        spans[n++] = (mg_optim_span){p->world, p->local, len, wd};
    }
    return n;
}

mg_status mg_optimizer_init(mg_optimizer *o, const mg_config *c, const mg_param_table *t,
                            const mg_grad_buffer_layout *l, int dp_rank, mg_comm *norm_group,
                            mg_comm *tp, mg_comm *pp) {
    memset(o, 0, sizeof *o);
    o->beta1 = c->adam_beta1;
    o->beta2 = c->adam_beta2;
    o->eps = c->adam_eps;
    o->weight_decay = c->weight_decay;
    o->clip_grad = c->clip_grad;
    o->sharded = l->cfg.use_distributed_optimizer && l->cfg.data_parallel_size > 1;
    o->norm_group = norm_group;
    o->tp = tp && mg_comm_size(tp) > 1 ? tp : NULL;
    o->pp = pp && mg_comm_size(pp) > 1 ? pp : NULL;
    if (l->n_params != t->n)
        return MG_FAIL(MG_ERR_INTERNAL, "optimizer: a layout of %d parameters for a table of %d",
                       l->n_params, t->n);
    o->shards = calloc((size_t)l->n_buckets, sizeof *o->shards);
    /* a parameter lies in one bucket and meets a shard in one run: at most one piece each */
    o->pieces = calloc((size_t)t->n, sizeof *o->pieces);
    o->spans = calloc((size_t)t->n, sizeof *o->spans);
    o->norm_spans = calloc((size_t)t->n, sizeof *o->norm_spans);
    mg_grad_shard_param *scratch = calloc((size_t)t->n, sizeof *scratch);
    mg_status st = MG_OK;
    if (!o->shards || !o->pieces || !o->spans || !o->norm_spans || !scratch)
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the optimizer's %d parameters", t->n);
    size_t local = 0;
    for (int b = 0; st == MG_OK && b < l->n_buckets; b++) {
        st = bucket_pieces(o, t, l, b, dp_rank, local, scratch);
        local += o->shards[b].n;
    }
    free(scratch);
    o->n_shards = l->n_buckets;
    o->numel = local;
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
    if (st == MG_OK) o->n_spans = build_spans(o, t, false, tp_rank, o->spans);
    if (st == MG_OK && o->norm_filtered)
        o->n_norm_spans = build_spans(o, t, true, tp_rank, o->norm_spans);
    if (st != MG_OK) mg_optimizer_free(o);
    return st;
}

void mg_optimizer_free(mg_optimizer *o) {
    free(o->shards);
    free(o->pieces);
    free(o->spans);
    free(o->norm_spans);
    o->shards = NULL;
    o->pieces = NULL;
    o->spans = NULL;
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

mg_status mg_optimizer_step(mg_optimizer *o, mg_backend *be, void *params, float *master,
                            const float *grads, double lr) {
    float *sumsq = &o->scalars[0], *norm = &o->scalars[1], *coef = &o->scalars[2];
    MG_CHECK(be->memset_zero(be, sumsq, sizeof(float)));
    /* padding inside a shard is zero in the gradient buffer, so one pass per shard covers all;
     * TP ranks > 0 leave out the replicated parameters TP rank 0 counts, and the embedding's
     * pipeline copy is left out */
    if (o->norm_filtered)
        for (int s = 0; s < o->n_norm_spans; s++)
            MG_CHECK(be->sumsq_f32(be, sumsq, grads + o->norm_spans[s].world, o->norm_spans[s].n));
    else
        for (int s = 0; s < o->n_shards; s++)
            MG_CHECK(be->sumsq_f32(be, sumsq, grads + o->shards[s].world, o->shards[s].n));
    if (o->norm_group || o->tp || o->pp) {
        void *stream;
        MG_CHECK(mg_backend_comm_begin(be, &stream));
        mg_comm *groups[3] = {o->norm_group, o->tp, o->pp};
        for (int i = 0; i < 3; i++)
            if (groups[i])
                MG_CHECK(
                    mg_comm_all_reduce(groups[i], sumsq, sumsq, 1, MG_F32, MG_REDUCE_SUM, stream));
        MG_CHECK(mg_backend_comm_end(be));
    }
    MG_CHECK(be->clip_coef(be, coef, norm, sumsq, (float)o->clip_grad));
    o->step++;
    float bc1 = (float)(1.0 - pow(o->beta1, (double)o->step));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)o->step));
    size_t esz = mg_dtype_size(be->compute_dtype);
    for (int i = 0; i < o->n_spans; i++) {
        const mg_optim_span *s = &o->spans[i];
        float wd = s->weight_decay ? (float)o->weight_decay : 0.0f;
        MG_CHECK(be->adamw(be, (char *)params + s->world * esz, master ? master + s->local : NULL,
                           grads + s->world, o->m + s->local, o->v + s->local, s->n, (float)lr,
                           (float)o->beta1, (float)o->beta2, (float)o->eps, wd, bc1, bc2, coef));
    }
    return MG_OK;
}
