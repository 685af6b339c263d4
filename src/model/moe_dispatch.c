/* Expert-parallel token dispatch (Megatron's MoEAlltoAllTokenDispatcher) over the group of
 * model/moe.h: the counts exchange, then all-to-all of the rows there and back.
 * Graph-safe without a budget (no host sync, no per-step size on the host): the collectives move
 * fixed sizes from the plan. The counts travel as E_l values per peer; the rows as one slab of
 * R / ep rows per peer (the most one rank may send another), placed into and taken out of the
 * slabs by moe_regroup, which reads the counts where they lie (device memory on CUDA). A slab's
 * rows past its block travel unread: the price of never asking the host how many rows there are.
 *
 * The receive budget (--moe-expert-rank-capacity-factor) makes the slabs smaller than the worst
 * case. A block larger than its slab then travels in rounds through the same slabs: round r moves
 * rows [r slab, (r + 1) slab) of every block (moe_round_counts gives each expert's share of the
 * window), so nothing is dropped and each row meets the same expert as without a budget. The
 * number of rounds is the largest block's, agreed by a maximum over the group and read by the
 * host, which loops (model/moe.c).
 *
 * Where the group's memory is peer-mapped (w->peer, the trainer's; core/peer_window.h) the rows go
 * straight from this rank's packed blocks into the peers' receive slabs (the backend's
 * moe_put_rows): only the rows there are travel, with no send slab and no collective. The slabs
 * then hold what the all-to-all would have left there, and the way out of them is the same. */
#include "model/moe_dispatch.h"

/* One all-to-all of sizes fixed by the plan (splits: counts then displacements per peer, the
 * same both ways) started on the communication stream; mg_backend_comm_end waits for it. */
static mg_status all_to_all_begin(const mg_block_ctx *x, void *dst, const void *src,
                                  const size_t *splits, mg_dtype dt) {
    int P = x->c->moe.ep;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(x->be, &stream));
    return mg_comm_all_to_all(x->moe->ep, src, splits, splits + P, dst, splits, splits + P, dt,
                              stream);
}

static mg_status all_to_all(const mg_block_ctx *x, void *dst, const void *src, const size_t *splits,
                            mg_dtype dt) {
    MG_CHECK(all_to_all_begin(x, dst, src, splits, dt));
    return mg_backend_comm_end(x->be);
}

/* Rows of one peer's slab: the plan's R over the group. */
static int slab_rows(const mg_block_ctx *x) {
    return x->moe->R / x->c->moe.ep;
}

mg_status mg_moe_exchange_counts(const mg_block_ctx *x, const mg_layer_slot *s) {
    const mg_moe_ws *w = x->moe;
    int32_t *counts = mg_block_act(x, s->counts);
    MG_CHECK(all_to_all(x, counts, mg_block_act(x, s->lcounts), w->count_splits, MG_I32));
    if (!w->budget) return MG_OK;
    /* the rounds the largest block received here needs, then the most over the group: every
     * block is some rank's received block */
    mg_backend *be = x->be;
    int32_t *rounds = mg_block_act(x, s->rounds);
    MG_CHECK(
        be->moe_round_counts(be, NULL, rounds, counts, x->c->moe.ep, x->moe->El, slab_rows(x), 0));
    void *stream;
    MG_CHECK(mg_backend_comm_begin(be, &stream));
    MG_CHECK(mg_comm_all_reduce(w->ep, rounds, rounds, 1, MG_I32, MG_REDUCE_MAX, stream));
    return mg_backend_comm_end(be);
}

mg_status mg_moe_rounds(const mg_block_ctx *x, const mg_layer_slot *s, int *rounds) {
    *rounds = 1;
    if (!x->moe->budget) return MG_OK;
    int32_t n;
    MG_CHECK(x->be->copy_d2h(x->be, &n, mg_block_act(x, s->rounds), sizeof n));
    if (n < 1) return MG_FAIL(MG_ERR_INTERNAL, "MoE dispatch: %d rounds", (int)n);
    *rounds = n;
    return MG_OK;
}

mg_status mg_moe_round(const mg_block_ctx *x, const mg_layer_slot *s, int r,
                       const int32_t **counts) {
    const mg_moe_ws *w = x->moe;
    *counts = mg_block_act(x, s->counts);
    if (!w->budget) return MG_OK;
    int32_t *rc = mg_block_ws_ptr(x, w->rcounts);
    int slab = slab_rows(x);
    MG_CHECK(x->be->moe_round_counts(x->be, rc, NULL, *counts, x->c->moe.ep, x->moe->El, slab,
                                     r * slab));
    *counts = rc;
    return MG_OK;
}

/* Rows between this rank's packed blocks (src, `from` counts, window `from_first` of each block)
 * and the peers' (dst, `to` counts, window `to_first`), P blocks of El experts each: packed ->
 * slabs (moe_regroup), the all-to-all of whole slabs, slabs -> packed. Every size the collective
 * sees is the plan's slab: nothing is read back. */
static mg_status exchange_begin(const mg_block_ctx *x, const void *src, const int32_t *from,
                                int from_first) {
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    if (w->peer) /* straight into the peers' receive slabs, on the compute stream */
        return be->moe_put_rows(be, w->peer, src, from, w->El, slab_rows(x), from_first, x->c->H);
    void *a = mg_block_ws_ptr(x, w->slab_send), *b = mg_block_ws_ptr(x, w->slab_recv);
    MG_CHECK(be->moe_regroup(be, a, src, from, x->c->moe.ep, w->El, slab_rows(x), from_first,
                             x->c->H, true));
    return all_to_all_begin(x, b, a, w->row_splits, be->compute_dtype);
}

static mg_status exchange_end(const mg_block_ctx *x, void *dst, const int32_t *to, int to_first) {
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    if (!w->peer) MG_CHECK(mg_backend_comm_end(be));
    const void *recv = w->peer ? w->peer->base[w->peer->rank] : mg_block_ws_ptr(x, w->slab_recv);
    return be->moe_regroup(be, dst, recv, to, x->c->moe.ep, w->El, slab_rows(x), to_first, x->c->H,
                           false);
}

static mg_status exchange(const mg_block_ctx *x, void *dst, const int32_t *to, int to_first,
                          const void *src, const int32_t *from, int from_first) {
    MG_CHECK(exchange_begin(x, src, from, from_first));
    return exchange_end(x, dst, to, to_first);
}

mg_status mg_moe_dispatch_begin(const mg_block_ctx *x, const mg_layer_slot *s, int r,
                                const void *src) {
    return exchange_begin(x, src, mg_block_act(x, s->lcounts), r * slab_rows(x));
}

mg_status mg_moe_dispatch_end(const mg_block_ctx *x, const int32_t *rc, void *dst) {
    return exchange_end(x, dst, rc, 0);
}

mg_status mg_moe_dispatch(const mg_block_ctx *x, const mg_layer_slot *s, int r, const int32_t *rc,
                          void *dst, const void *src) {
    MG_CHECK(mg_moe_dispatch_begin(x, s, r, src));
    return mg_moe_dispatch_end(x, rc, dst);
}

mg_status mg_moe_combine(const mg_block_ctx *x, const mg_layer_slot *s, int r, const int32_t *rc,
                         void *dst, const void *src) {
    int slab = slab_rows(x);
    return exchange(x, dst, mg_block_act(x, s->lcounts), r * slab, src, rc, 0);
}

/* ---- ECHO ---- */

mg_status mg_moe_echo_route(const mg_block_ctx *x, const mg_layer_slot *s, const int32_t *idx,
                            void *xp, float *load, float *after) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    int N = x->N, k = m->k, H = x->c->H;
    int32_t *hcounts = mg_block_ws_ptr(x, w->hcounts), *hpos = mg_block_ws_ptr(x, w->hpos);
    int32_t *gcounts = mg_block_ws_ptr(x, w->gcounts), *plan = mg_block_act(x, s->plan);
    int32_t *idx2 = mg_block_act(x, s->idx2);
    const void *ln2 = mg_block_act(x, s->ln2);
    MG_CHECK(be->moe_permute(be, xp, hpos, hcounts, load, ln2, idx, N, k, m->E, H, 0));
    void *stream;
    MG_CHECK(mg_backend_comm_begin(be, &stream));
    MG_CHECK(mg_comm_all_gather(w->ep, hcounts, gcounts, (size_t)m->E, MG_I32, stream));
    MG_CHECK(mg_backend_comm_end(be));
    MG_CHECK(be->moe_echo_plan(be, plan, after, gcounts, &m->echo_p));
    MG_CHECK(
        be->moe_echo_reroute(be, idx2, idx, hpos, hcounts, plan, &m->echo_p, m->ep_rank, N * k));
    return be->moe_permute(be, xp, mg_block_act(x, s->pos), mg_block_act(x, s->lcounts), NULL, ln2,
                           idx2, N, k, w->Ed, H, 0);
}

/* One ECHO exchange: SEND into the send slab, the all-to-all of fixed size, then the receive
 * mode from the receive slab. */
static mg_status echo_exchange(const mg_block_ctx *x, const mg_layer_slot *s, void *const *table,
                               int send, int take, mg_dtype dt) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    const size_t *seg = w->echo_seg;
    const int32_t *plan = mg_block_act(x, s->plan);
    void *a = mg_block_ws_ptr(x, w->echo_send), *b = mg_block_ws_ptr(x, w->echo_recv);
    MG_CHECK(be->moe_echo_move(be, a, table, plan, &m->echo_p, m->ep_rank, seg[0], seg[1], seg[2],
                               seg[3], send));
    MG_CHECK(all_to_all(x, b, a, w->echo_splits, dt));
    return be->moe_echo_move(be, b, table, plan, &m->echo_p, m->ep_rank, seg[0], seg[1], seg[2],
                             seg[3], take);
}

mg_status mg_moe_echo_weights(const mg_block_ctx *x, const mg_layer_slot *s, void *const *table) {
    return echo_exchange(x, s, table, MG_ECHO_SEND_WEIGHTS, MG_ECHO_TAKE_WEIGHTS,
                         x->be->compute_dtype);
}

mg_status mg_moe_echo_grads(const mg_block_ctx *x, const mg_layer_slot *s, void *const *table) {
    return echo_exchange(x, s, table, MG_ECHO_SEND_GRADS, MG_ECHO_ADD_GRADS, MG_F32);
}
