/* fp8 linears in the trainer (train/trainer_fp8.h). */
#include "train/trainer_fp8.h"

#include "core/fp8.h"
#include "model/fp8.h"

mg_status mg_trainer_fp8_step_end(mg_trainer *t) {
    const mg_block_ws *w = &t->model.ws;
    const mg_model_config *c = &t->model.cfg;
    int n = w->fp8_tensors;
    /* tensorwise and blockwise: each cast its own scales */
    if (n == 0 || c->fp8_current || c->fp8_block) return MG_OK;
    mg_backend *be = t->be;
    float *state = mg_block_ws_ptr(&t->model.blk, w->fp8_state); /* amaxes first */
    mg_comm *groups[] = {t->layout.tp, t->layout.dp};
    if (groups[0] || groups[1]) {
        void *stream;
        MG_CHECK(mg_backend_comm_begin(be, &stream));
        for (int g = 0; g < 2; g++)
            if (groups[g])
                MG_CHECK(mg_comm_all_reduce(groups[g], state, state, (size_t)n, MG_F32,
                                            MG_REDUCE_MAX, stream));
        MG_CHECK(mg_backend_comm_end(be));
    }
    return be->fp8_update(be, state, n, c->fp8_len, c->fp8_margin, c->fp8_algo,
                          mg_fp8_max(MG_FP8_E4M3), mg_fp8_max((mg_fp8_format)c->fp8_bwd));
}

/* Tensorwise: the dense weights' amaxes over the tensor- and data-parallel groups, the experts'
 * over the tensor- and expert-data-parallel groups (where their parts are). */
static mg_status reduce_param_amaxes(mg_trainer *t) {
    const mg_block_ctx *x = &t->model.blk;
    mg_comm *groups[2][2] = {{t->layout.tp, t->layout.dp}, {t->layout.tp, t->layout.edp}};
    void *stream = NULL;
    for (int k = 0; k < 2; k++)
        for (int g = 0; g < 2; g++) {
            if (!groups[k][g] || (k == 1 && !t->opt.experts)) continue;
            if (!stream) MG_CHECK(mg_backend_comm_begin(t->be, &stream));
            float *a = mg_fp8_param_amaxes(x, k == 1);
            MG_CHECK(mg_comm_all_reduce(groups[k][g], a, a, (size_t)t->model.ws.fp8_tensors, MG_F32,
                                        MG_REDUCE_MAX, stream));
        }
    return stream ? mg_backend_comm_end(t->be) : MG_OK;
}

mg_status mg_trainer_fp8_params(mg_trainer *t) {
    if (!t->mem.params8) return MG_OK;
    const mg_block_ctx *x = &t->model.blk;
    const mg_param_table *pt = &t->model.params;
    const size_t esz = mg_dtype_size(t->be->compute_dtype);
    for (int pass = t->model.cfg.fp8_current ? 0 : 1; pass < 2; pass++) {
        /* tensorwise: first the amaxes (pass 0), reduced, and the scales from them */
        for (int k = 0; k < t->opt.n_pieces; k++) {
            const mg_optim_piece *p = &t->opt.pieces[k];
            const mg_param_meta *m = &pt->p[p->index];
            if (m->fp8_tensor < 0) continue;
            const char *in = (const char *)t->mem.params +
                             mg_optimizer_param_at(&t->opt, p->world, p->local) * esz;
            size_t n = (size_t)(p->param_end - p->param_start);
            if (pass == 0)
                MG_CHECK(mg_fp8_param_amax(x, m->fp8_tensor, m->expert, in, n));
            else
                MG_CHECK(mg_fp8_param_cast(x, m->fp8_tensor, m->expert,
                                           t->mem.params8 + (p->world - pt->fp8_from), in, n));
        }
        if (pass == 0) {
            MG_CHECK(reduce_param_amaxes(t));
            MG_CHECK(mg_fp8_param_scales(x));
        }
    }
    return MG_OK;
}

mg_status mg_trainer_fp8_params_prime(mg_trainer *t) {
    if (!t->mem.params8) return MG_OK;
    MG_CHECK(mg_trainer_fp8_params(t));
    for (int b = 0; b < t->bufs.n; b++)
        if (t->bufs.b[b].fp8 && t->opt.buf_sharded[b]) {
            MG_CHECK(mg_ddp_start_param_sync(&t->ddp[b]));
            MG_CHECK(mg_ddp_finish_param_sync(&t->ddp[b]));
        }
    return MG_OK;
}
