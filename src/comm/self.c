/* The MPI backend for a world of one rank: every collective is a host copy (a reduction over one
 * rank is its input, also for avg: x / 1 == x exactly), so `megatron train` without mpirun and
 * builds without Open MPI run the same code path as a multi-rank CPU run. comm.c has validated
 * every argument already; what is left here is what only one rank can check: a batch of
 * point-to-point operations must pair each send to itself with a receive of the same size, in
 * order (a real backend would hang on an unmatched one). */
#include "comm/comm_backend.h"

#include <string.h>

static mg_status self_world_init(mg_comm_world *w, const mg_launch_info *li) {
    return MG_OK;
}
static void self_world_abort(mg_comm_world *w) {}
static void self_world_finalize(mg_comm_world *w) {}

static mg_status self_group_split(mg_comm_world *w, mg_comm *c, int color, int key) {
    c->impl = NULL;
    return MG_OK;
}

static void self_group_free(mg_comm *c) {}

static void copy(void *dst, const void *src, size_t count, mg_dtype dt) {
    if (dst != src && count) memmove(dst, src, count * mg_dtype_size(dt));
}

static mg_status self_all_reduce(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, mg_reduce_op op, void *stream) {
    copy(recv, send, count, dt);
    return MG_OK;
}

static mg_status self_reduce_scatter(mg_comm *c, const void *send, void *recv, size_t count,
                                     mg_dtype dt, mg_reduce_op op, void *stream) {
    copy(recv, send, count, dt);
    return MG_OK;
}

static mg_status self_all_gather(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, void *stream) {
    copy(recv, send, count, dt);
    return MG_OK;
}

static mg_status self_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, mg_dtype dt, void *stream) {
    size_t es = mg_dtype_size(dt);
    copy((char *)recv + recv_displs[0] * es, (const char *)send + send_displs[0] * es,
         send_counts[0], dt);
    return MG_OK;
}

static mg_status self_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                                void *stream) {
    return MG_OK;
}

/* The k-th send pairs with the k-th receive, as MPI and NCCL match messages between one pair. */
static mg_status self_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream) {
    int n_send = 0, n_recv = 0;
    for (int i = 0; i < n_ops; i++) ops[i].is_send ? n_send++ : n_recv++;
    if (n_send != n_recv)
        return MG_FAIL(MG_ERR_USAGE,
                       "batch_p2p #%llu on group '%s': %d sends and %d receives with this rank "
                       "itself; on one rank every send needs its receive in the same batch",
                       (unsigned long long)c->seq, c->name, n_send, n_recv);
    int r = 0;
    for (int s = 0; s < n_ops; s++) {
        if (!ops[s].is_send) continue;
        while (ops[r].is_send) r++;
        const mg_p2p_op *a = &ops[s], *b = &ops[r];
        if (a->count != b->count || a->dt != b->dt)
            return MG_FAIL(MG_ERR_USAGE,
                           "batch_p2p #%llu on group '%s': op %d sends %zu %s but its matching "
                           "receive (op %d) expects %zu %s",
                           (unsigned long long)c->seq, c->name, s, a->count, mg_dtype_name(a->dt),
                           r, b->count, mg_dtype_name(b->dt));
        copy(b->buf, a->buf, a->count, a->dt);
        r++;
    }
    return MG_OK;
}

static mg_status self_barrier(mg_comm *c, void *stream) {
    return MG_OK;
}
static mg_status self_sync(mg_comm *c, void *stream) {
    return MG_OK;
}

const mg_comm_ops mg_comm_self_ops = {
    .name = "self",
    .world_init = self_world_init,
    .world_abort = self_world_abort,
    .world_finalize = self_world_finalize,
    .group_split = self_group_split,
    .group_free = self_group_free,
    .all_reduce = self_all_reduce,
    .reduce_scatter = self_reduce_scatter,
    .all_gather = self_all_gather,
    .all_to_all = self_all_to_all,
    .broadcast = self_broadcast,
    .batch_p2p = self_batch_p2p,
    .barrier = self_barrier,
    .sync = self_sync,
};
