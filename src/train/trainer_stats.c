/* The statistics --log-params-norm and --log-num-zeros-in-grad print (train/trainer.h):
 * Megatron's calc_params_l2_norm and count_zeros_fp32. Both walk the pieces of this rank's
 * optimizer shards (train/optimizer.h) that the gradient norm counts, exactly the parameter
 * elements (not the padding between them), and sum over the gradient norm's ranks: a buffer's
 * shards over its group (distributed optimizer), the experts over the expert-parallel ranks,
 * everything over the tensor- and pipeline-parallel ranks. The dense and the expert values are
 * reduced side by side and added on the host. */
#include "train/trainer.h"

#include <math.h>

/* v[0] (dense) and v[1] (experts), backend memory of dtype dt, summed over the ranks above. */
static mg_status reduce_pair(mg_trainer *t, void *v, mg_dtype dt) {
    const mg_optimizer *o = &t->opt;
    char *expert = (char *)v + mg_dtype_size(dt);
    struct {
        mg_comm *g;
        void *at;
        size_t n;
    } r[] = {{o->norm_group[0], v, 1},
             {o->experts ? o->norm_group[1] : NULL, expert, 1},
             {o->experts ? o->ep : NULL, expert, 1},
             {o->tp, v, 2},
             {o->pp, v, 2}};
    void *stream = NULL;
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        if (!r[i].g) continue;
        if (!stream) MG_CHECK(mg_backend_comm_begin(t->be, &stream));
        MG_CHECK(mg_comm_all_reduce(r[i].g, r[i].at, r[i].at, r[i].n, dt, MG_REDUCE_SUM, stream));
    }
    return stream ? mg_backend_comm_end(t->be) : MG_OK;
}

/* Which of the pair a piece's parameter adds to: the experts' buffer or the dense one. */
static int pair_index(const mg_trainer *t, const mg_param_meta *m) {
    return t->opt.experts && m->expert;
}

mg_status mg_trainer_params_norm(mg_trainer *t, double *norm) {
    mg_backend *be = t->be;
    const mg_param_table *pt = &t->model.params;
    float *sums = &t->mem.stats[MG_STAT_PARAMS_SUMSQ]; /* (2) dense, experts */
    _Static_assert(MG_STAT_PARAMS_SUMSQ_EXPERT == MG_STAT_PARAMS_SUMSQ + 1, "adjacent sums");
    MG_CHECK(be->memset_zero(be, sums, 2 * sizeof(float)));
    for (int k = 0; k < t->opt.n_pieces; k++) {
        const mg_optim_piece *p = &t->opt.pieces[k];
        const mg_param_meta *m = &pt->p[p->index];
        if (!mg_optimizer_counts(m, t->layout.tp_rank)) continue;
        /* the fp32 values: the masters (local coordinates), or the parameters themselves */
        const float *x = t->mem.master ? t->mem.master + p->local
                                       : (const float *)t->mem.params +
                                             mg_optimizer_param_at(&t->opt, p->world, p->local);
        MG_CHECK(be->sumsq_f32(be, &sums[pair_index(t, m)], x,
                               (size_t)(p->param_end - p->param_start), NULL));
    }
    MG_CHECK(reduce_pair(t, sums, MG_F32));
    float h[2];
    MG_CHECK(be->copy_d2h(be, h, sums, sizeof h));
    *norm = sqrt((double)h[0] + (double)h[1]);
    return MG_OK;
}

mg_status mg_trainer_num_zeros(mg_trainer *t, int64_t *zeros) {
    mg_backend *be = t->be;
    const mg_param_table *pt = &t->model.params;
    _Static_assert(MG_STAT_ZEROS % 2 == 0 && MG_STAT_ZEROS >= MG_STAT_COUNT &&
                       MG_STAT_ZEROS + 4 <= MG_STAT_END,
                   "two 8-byte aligned counts after the fp32 statistics");
    int64_t *counts = (int64_t *)(void *)&t->mem.stats[MG_STAT_ZEROS]; /* (2) dense, experts */
    MG_CHECK(be->memset_zero(be, counts, 2 * sizeof(int64_t)));
    for (int k = 0; k < t->opt.n_pieces; k++) {
        const mg_optim_piece *p = &t->opt.pieces[k];
        const mg_param_meta *m = &pt->p[p->index];
        if (!mg_optimizer_counts(m, t->layout.tp_rank)) continue;
        MG_CHECK(be->count_zeros_f32(be, &counts[pair_index(t, m)], t->mem.grads + p->world,
                                     (size_t)(p->param_end - p->param_start)));
    }
    MG_CHECK(reduce_pair(t, counts, MG_I64));
    int64_t h[2];
    MG_CHECK(be->copy_d2h(be, h, counts, sizeof h));
    *zeros = h[0] + h[1];
    return MG_OK;
}
