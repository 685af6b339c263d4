/* The trainer's weights as host values (train/trainer_weights.h). */
#include "train/trainer_weights.h"

mg_status mg_trainer_set_weights(mg_trainer *t, const float *host) {
    mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    if (m->master) /* this rank's shards, from the full host copy */
        for (int s = 0; s < t->opt.n_shards; s++) {
            const mg_optim_shard *sh = &t->opt.shards[s];
            MG_CHECK(
                be->copy_h2d(be, m->master + sh->local, host + sh->world, sh->n * sizeof(float)));
        }
    /* the same rounding (to nearest even) as AdamW's write of the updated master */
    return be->upload_f32(be, m->params, host, t->model.params.numel);
}

mg_status mg_trainer_sync_params(mg_trainer *t) {
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_finish_param_sync(&t->ddp[b]));
    return MG_OK;
}

mg_status mg_trainer_get_weights(mg_trainer *t, float *host) {
    mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    MG_CHECK(mg_trainer_sync_params(t));
    if (!m->master) return be->download_f32(be, host, m->params, t->model.params.numel);
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_optimizer *o = &t->opt;
        float *dst = host + t->bufs.b[b].base, *src = m->master + o->buf_local[b];
        /* sharded fp32 masters: every rank's shards, gathered; unsharded, the buffer's local
         * coordinates are its own */
        if (o->buf_sharded[b])
            MG_CHECK(mg_ddp_gather_shards_f32(&t->ddp[b], src, dst));
        else
            MG_CHECK(be->copy_d2h(be, dst, src, o->buf_numel[b] * sizeof(float)));
    }
    return MG_OK;
}
