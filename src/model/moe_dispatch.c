/* Expert-parallel token dispatch (Megatron's MoEAlltoAllTokenDispatcher) over the group of
 * model/moe.h: the counts exchange, then all-to-all of the rows there and back.
 * Graph-safe (no host sync, no per-step size on the host): the collectives move fixed sizes from
 * the plan. The counts travel as E_l values per peer; the rows as one slab of R / ep rows per peer
 * (the most one rank can send another), placed into and taken out of the slabs by moe_regroup,
 * which reads the counts where they lie (device memory on CUDA). A slab's rows past its block
 * travel unread: the price of never asking the host how many rows there are. */
#include "model/moe_dispatch.h"

/* One all-to-all of sizes fixed by the plan (splits: counts then displacements per peer, the
 * same both ways) on the communication stream. */
static mg_status all_to_all(const mg_block_ctx *x, void *dst, const void *src, const size_t *splits,
                            mg_dtype dt) {
    int P = x->c->moe.ep;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(x->be, &stream));
    MG_CHECK(mg_comm_all_to_all(x->moe->ep, src, splits, splits + P, dst, splits, splits + P, dt,
                                stream));
    return mg_backend_comm_end(x->be);
}

mg_status mg_moe_exchange_counts(const mg_block_ctx *x, const mg_layer_slot *s) {
    return all_to_all(x, mg_block_act(x, s->counts), mg_block_act(x, s->lcounts),
                      x->moe->count_splits, MG_I32);
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
    MG_CHECK(all_to_all(x, b, a, w->row_splits, be->compute_dtype));
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
