/* Expert-parallel token dispatch (Megatron's MoEAlltoAllTokenDispatcher) over the group of
 * model/moe.h: the counts exchange, then all-to-all of the rows there and back.
 * Graph-safe (seeds 000/001): the collectives move fixed sizes from the plan. The counts travel
 * as E_l values per peer; the rows as one slab of R / ep rows per peer (the most one rank can
 * send another), placed into and taken out of the slabs by moe_regroup, which reads the counts
 * where they lie (device memory on CUDA). A slab's rows past its block travel unread: the price
 * of never asking the host how many rows there are. */
#include "model/moe.h"

#include <stdlib.h>

mg_status mg_moe_exchange_counts(const mg_block_ctx *x, const mg_layer_slot *s) {
    const mg_moe_config *m = &x->c->moe;
    int P = m->ep, El = m->E_l;
    size_t *a = malloc((size_t)4 * P * sizeof *a);
    if (!a) return MG_FAIL(MG_ERR_NOMEM, "out of memory (counts exchange)");
    for (int r = 0; r < P; r++) {
        a[r] = a[2 * P + r] = (size_t)El;                 /* counts */
        a[P + r] = a[3 * P + r] = (size_t)r * (size_t)El; /* displacements */
    }
    void *stream;
    mg_status st = mg_backend_comm_begin(x->be, &stream);
    if (st == MG_OK)
        st = mg_comm_all_to_all(x->moe->ep, mg_block_act(x, s->lcounts), a, a + P,
                                mg_block_act(x, s->counts), a + 2 * P, a + 3 * P, MG_I32, stream);
    if (st == MG_OK) st = mg_backend_comm_end(x->be);
    free(a);
    return st;
}

/* Rows between this rank's packed blocks (src, `from` counts) and the peers' (dst, `to` counts),
 * P blocks of El experts each: packed -> slabs (moe_regroup), the all-to-all of whole slabs,
 * slabs -> packed. Every size the collective sees is the plan's slab: nothing is read back. */
static mg_status exchange(const mg_block_ctx *x, void *dst, const int32_t *to, const void *src,
                          const int32_t *from) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    int P = m->ep, El = m->E_l, H = x->c->H, slab = w->R / P;
    void *a = mg_block_ws_ptr(x, w->slab_send), *b = mg_block_ws_ptr(x, w->slab_recv);
    MG_CHECK(be->moe_regroup(be, a, src, from, P, El, slab, H, true));
    size_t *splits = malloc((size_t)2 * P * sizeof *splits);
    if (!splits) return MG_FAIL(MG_ERR_NOMEM, "out of memory (token dispatch)");
    for (int r = 0; r < P; r++) {
        splits[r] = (size_t)slab * (size_t)H;          /* counts */
        splits[P + r] = (size_t)r * splits[r];         /* and displacements, both ways */
    }
    void *stream;
    mg_status st = mg_backend_comm_begin(be, &stream);
    if (st == MG_OK)
        st = mg_comm_all_to_all(w->ep, a, splits, splits + P, b, splits, splits + P,
                                be->compute_dtype, stream);
    if (st == MG_OK) st = mg_backend_comm_end(be);
    free(splits);
    MG_CHECK(st);
    return be->moe_regroup(be, dst, b, to, P, El, slab, H, false);
}

mg_status mg_moe_dispatch(const mg_block_ctx *x, const mg_layer_slot *s, void *dst,
                          const void *src) {
    return exchange(x, dst, mg_block_act(x, s->counts), src, mg_block_act(x, s->lcounts));
}

mg_status mg_moe_combine(const mg_block_ctx *x, const mg_layer_slot *s, void *dst,
                         const void *src) {
    return exchange(x, dst, mg_block_act(x, s->lcounts), src, mg_block_act(x, s->counts));
}
