/* The trainer's weights as host values (train/trainer_weights.h). */
#include "train/trainer_weights.h"
#include "train/trainer_fp8.h"

mg_status mg_trainer_set_weights(mg_trainer *t, const float *host) {
    mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    const mg_optimizer *o = &t->opt;
    if (m->master) /* this rank's shards, from the full host copy */
        for (int s = 0; s < o->n_shards; s++) {
            const mg_optim_shard *sh = &o->shards[s];
            MG_CHECK(
                be->copy_h2d(be, m->master + sh->local, host + sh->world, sh->n * sizeof(float)));
        }
    /* the same rounding (to nearest even) as AdamW's write of the updated master: every element
     * before the fp8 buffers, and of those (--fp8-param-gather) this rank's shards alone, where
     * train/optimizer.h's mg_optimizer_param_at puts them */
    const size_t esz = mg_dtype_size(be->compute_dtype);
    MG_CHECK(be->upload_f32(be, m->params, host, o->fp8_from));
    for (int s = 0; s < o->n_shards; s++) {
        const mg_optim_shard *sh = &o->shards[s];
        if (sh->world < o->fp8_from) continue;
        MG_CHECK(be->upload_f32(
            be, (char *)m->params + mg_optimizer_param_at(o, sh->world, sh->local) * esz,
            host + sh->world, sh->n));
    }
    return mg_trainer_fp8_params_prime(t); /* --fp8-param-gather: the weights' fp8 bytes */
}

mg_status mg_trainer_sync_params(mg_trainer *t) {
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_finish_param_sync(&t->ddp[b]));
    return MG_OK;
}

mg_status mg_trainer_params_graph_edge(mg_trainer *t) {
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_graph_boundary(&t->ddp[b]));
    return MG_OK;
}

mg_status mg_trainer_get_weights(mg_trainer *t, float *host) {
    mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    const mg_optimizer *o = &t->opt;
    MG_CHECK(mg_trainer_sync_params(t));
    /* without masters (fp32 parameters) the parameters are the masters: the whole array before
     * the fp8 buffers, and of those (--fp8-param-gather) this rank's shards, in local coordinates
     * after fp8_from (train/optimizer.h) */
    if (!m->master) MG_CHECK(be->download_f32(be, host, m->params, o->fp8_from));
    for (int b = 0; b < t->bufs.n; b++) {
        if (!m->master && !t->bufs.b[b].fp8) continue;
        float *dst = host + t->bufs.b[b].base;
        const float *src =
            m->master ? m->master + o->buf_local[b]
                      : (const float *)m->params + o->fp8_from + (o->buf_local[b] - o->fp8_local);
        /* sharded fp32 masters: every rank's shards, gathered; unsharded, the buffer's local
         * coordinates are its own */
        if (o->buf_sharded[b])
            MG_CHECK(mg_ddp_gather_shards_f32(&t->ddp[b], src, dst));
        else
            MG_CHECK(be->copy_d2h(be, dst, src, o->buf_numel[b] * sizeof(float)));
    }
    return MG_OK;
}
