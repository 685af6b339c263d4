/* The step's end of fp8 linears (train/trainer_fp8.h). */
#include "train/trainer_fp8.h"

#include "core/fp8.h"

mg_status mg_trainer_fp8_step_end(mg_trainer *t) {
    const mg_block_ws *w = &t->model.ws;
    const mg_model_config *c = &t->model.cfg;
    int n = w->fp8_tensors;
    if (n == 0 || c->fp8_current) return MG_OK; /* tensorwise: each cast its own scale */
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
