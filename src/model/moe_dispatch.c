/* Expert-parallel token dispatch (Megatron's MoEAlltoAllTokenDispatcher) over the group of
 * model/moe.h: the counts exchange, then all-to-all of the rows there and back.
 * The groups' sizes come from the counts in backend memory. On a group that moves host buffers
 * (MPI, the cpu backend) that memory is the host's and is read where it lies; a group of device
 * buffers needs the device-side exchange, which this build does not have yet (refused at bind
 * time by gpt.c). */
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

/* Rows per peer of the permuted side (lcounts: rank r's experts are [r E_l, (r+1) E_l)) and of
 * the experts' side (counts: source r's rows for the local experts), in elements of H. */
static mg_status row_splits(const mg_block_ctx *x, const mg_layer_slot *s, size_t *a) {
    const mg_moe_config *m = &x->c->moe;
    int P = m->ep, El = m->E_l;
    const int32_t *lc = mg_block_act(x, s->lcounts), *rc = mg_block_act(x, s->counts);
    size_t H = (size_t)x->c->H, at_l = 0, at_r = 0;
    for (int r = 0; r < P; r++) {
        size_t nl = 0, nr = 0;
        for (int j = 0; j < El; j++) {
            nl += (size_t)lc[r * El + j];
            nr += (size_t)rc[r * El + j];
        }
        a[r] = nl * H;         /* permuted side: counts */
        a[P + r] = at_l * H;   /* and displacements */
        a[2 * P + r] = nr * H; /* experts' side */
        a[3 * P + r] = at_r * H;
        at_l += nl;
        at_r += nr;
    }
    if (at_r > (size_t)x->moe->R)
        return MG_FAIL(MG_ERR_INTERNAL, "expert parallelism: %zu rows arrived, the plan holds %d",
                       at_r, x->moe->R);
    return MG_OK;
}

static mg_status exchange(const mg_block_ctx *x, const mg_layer_slot *s, void *dst, const void *src,
                          bool to_experts) {
    int P = x->c->moe.ep;
    size_t *a = malloc((size_t)4 * P * sizeof *a);
    if (!a) return MG_FAIL(MG_ERR_NOMEM, "out of memory (token dispatch)");
    mg_status st = row_splits(x, s, a);
    size_t *send = to_experts ? a : a + 2 * P, *recv = to_experts ? a + 2 * P : a;
    void *stream;
    if (st == MG_OK) st = mg_backend_comm_begin(x->be, &stream);
    if (st == MG_OK)
        st = mg_comm_all_to_all(x->moe->ep, src, send, send + P, dst, recv, recv + P,
                                x->be->compute_dtype, stream);
    if (st == MG_OK) st = mg_backend_comm_end(x->be);
    free(a);
    return st;
}

mg_status mg_moe_dispatch(const mg_block_ctx *x, const mg_layer_slot *s, void *dst,
                          const void *src) {
    return exchange(x, s, dst, src, true);
}

mg_status mg_moe_combine(const mg_block_ctx *x, const mg_layer_slot *s, void *dst,
                         const void *src) {
    return exchange(x, s, dst, src, false);
}
