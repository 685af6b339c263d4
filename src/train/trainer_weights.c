/* The trainer's weights as host values (train/trainer_weights.h). */
#include "train/trainer_weights.h"
#include "train/trainer_fp8.h"

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
    MG_CHECK(be->upload_f32(be, m->params, host, t->model.params.numel));
    return mg_trainer_fp8_params_prime(t); /* --fp8-param-gather: the weights' fp8 bytes */
}

mg_status mg_trainer_sync_params(mg_trainer *t) {
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_finish_param_sync(&t->ddp[b]));
    return MG_OK;
}

/* Without masters (fp32 parameters) the parameters are the weights, but an fp8 buffer's
 * (--fp8-param-gather) hold only this rank's shards: the rest were gathered as fp8 bytes. Their
 * fp32 values are gathered here, bucket by bucket. */
static mg_status gather_fp8_buffers(mg_trainer *t) {
    const size_t esz = mg_dtype_size(t->be->compute_dtype);
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_train_buffer *bf = &t->bufs.b[b];
        if (!bf->fp8 || !t->opt.buf_sharded[b]) continue;
        void *stream;
        MG_CHECK(mg_backend_comm_begin(t->be, &stream));
        for (int k = 0; k < bf->layout.n_buckets; k++)
            MG_CHECK(mg_ddp_gather_bucket(&bf->layout, k, mg_trainer_buf_group(t, b),
                                          (char *)t->mem.params + bf->base * esz,
                                          t->be->compute_dtype, stream));
        MG_CHECK(mg_backend_comm_end(t->be));
    }
    return MG_OK;
}

mg_status mg_trainer_get_weights(mg_trainer *t, float *host) {
    mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    MG_CHECK(mg_trainer_sync_params(t));
    if (!m->master) {
        MG_CHECK(gather_fp8_buffers(t));
        return be->download_f32(be, host, m->params, t->model.params.numel);
    }
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
