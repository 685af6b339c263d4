/* The model's dropout streams (model/rng.h). */
#include "model/rng.h"

#include <string.h>

void mg_model_rng_seeds(uint64_t seed, int pp_rank, int tp_rank, uint64_t out[MG_RNG_STREAMS]) {
    out[MG_RNG_DEFAULT] = seed + 100u * (uint64_t)pp_rank;
    out[MG_RNG_MODEL_PARALLEL] = out[MG_RNG_DEFAULT] + 2718u + (uint64_t)tp_rank;
}

/* Writes both streams' {seed, offset} to the backend. */
static mg_status upload(mg_model_rng *r, uint64_t offset) {
    uint64_t v[2 * MG_RNG_STREAMS];
    for (int k = 0; k < MG_RNG_STREAMS; k++) v[2 * k] = r->seed[k], v[2 * k + 1] = offset;
    return r->be->copy_h2d(r->be, r->state, v, sizeof v);
}

mg_status mg_model_rng_bind(mg_model_rng *r, mg_backend *be, uint64_t seed, int pp_rank,
                            int tp_rank) {
    mg_model_rng_free(r);
    mg_model_rng_seeds(seed, pp_rank, tp_rank, r->seed);
    void *p = NULL;
    MG_CHECK(be->alloc(be, 2 * MG_RNG_STREAMS * sizeof(uint64_t), &p));
    r->be = be;
    r->state = p;
    return upload(r, 0);
}

mg_status mg_model_rng_offset(const mg_model_rng *r, uint64_t *offset) {
    *offset = 0;
    if (!r->state) return MG_OK;
    return r->be->copy_d2h(r->be, offset, r->state + 1, sizeof *offset);
}

mg_status mg_model_rng_set_offset(mg_model_rng *r, uint64_t offset) {
    if (!r->state) return MG_FAIL(MG_ERR_INTERNAL, "the dropout streams are not bound");
    return upload(r, offset);
}

mg_status mg_model_rng_advance(mg_model_rng *r, uint64_t by) {
    if (!r->state) return MG_FAIL(MG_ERR_INTERNAL, "the dropout streams are not bound");
    return r->be->rng_advance(r->be, r->state, MG_RNG_STREAMS, by);
}

void mg_model_rng_free(mg_model_rng *r) {
    if (r->state) r->be->free(r->be, r->state);
    memset(r, 0, sizeof *r);
}
