#include "parallel/tensor_parallel.h"

void mg_tp_init(mg_tp *tp, mg_comm *group, mg_backend *be) {
    tp->group = group;
    tp->be = be;
    tp->peer = NULL;
    tp->direct[0] = tp->direct[1] = NULL;
    tp->rank = group ? mg_comm_rank(group) : 0;
    tp->size = group ? mg_comm_size(group) : 1;
}

static void *compute_stream(const mg_tp *tp) {
    return tp->be->stream_handle ? tp->be->stream_handle(tp->be, MG_STREAM_COMPUTE) : NULL;
}

/* One rank: the part is the whole. */
static mg_status copy_if_apart(const mg_tp *tp, void *dst, const void *src, size_t n, mg_dtype dt) {
    return dst == src ? MG_OK : tp->be->copy_d2d(tp->be, dst, src, n * mg_dtype_size(dt));
}

mg_status mg_tp_all_reduce(const mg_tp *tp, void *buf, size_t n, mg_dtype dt, mg_reduce_op op) {
    if (tp->size == 1) return MG_OK;
    return mg_comm_all_reduce(tp->group, buf, buf, n, dt, op, compute_stream(tp));
}

mg_status mg_tp_all_reduce_many(const mg_tp *tp, void *const *bufs, const size_t *counts, int n,
                                mg_dtype dt, mg_reduce_op op) {
    if (tp->size == 1 || n == 0) return MG_OK;
    return mg_comm_all_reduce_many(tp->group, bufs, counts, n, dt, op, compute_stream(tp));
}

/* Whether a gather of `bytes` per rank goes by copies: a bound window whose slots hold it (the
 * same answer on every rank: the sizes are the group's), unless NCCL gathers on the copy engines
 * itself (MG_NCCL_COPY_ENGINE=1), straight into the destination, which measured faster than a
 * copy into the window and then into place. */
static bool by_copies(const mg_tp *tp, size_t bytes) {
    return mg_tp_pushes(tp) && tp->be->peer_take && !mg_comm_copy_engine(tp->group) &&
           bytes <= tp->peer->bytes / (size_t)tp->size;
}

/* dst[q]: where rank q holds block `rank` of the whole (size blocks of bytes) at `whole`, where
 * that lies in memory mapped at the same offsets on every rank (mg_tp_bind_direct); false
 * where it does not. */
static bool direct_dst(const mg_tp *tp, const void *whole, size_t bytes, void **dst) {
    if (!tp->peer || !tp->be->peer_put || mg_comm_copy_engine(tp->group)) return false;
    const char *w = whole;
    const size_t total = bytes * (size_t)tp->size;
    for (int k = 0; k < 2; k++) {
        const mg_peer_window *m = tp->direct[k];
        const char *base = m ? m->base[m->rank] : NULL;
        if (!base || w < base || total > m->bytes || (size_t)(w - base) > m->bytes - total)
            continue;
        const size_t at = (size_t)(w - base) + (size_t)tp->rank * bytes;
        for (int q = 0; q < tp->size; q++) dst[q] = (char *)m->base[q] + at;
        return true;
    }
    return false;
}

/* The gather of the calls below, on stream s (MG_STREAM_COMPUTE or MG_STREAM_TP): by copies into
 * the peers' memory where it can, else the group's all-gather. */
static mg_status gather_on(const mg_tp *tp, void *whole, const void *part, size_t n, mg_dtype dt,
                           mg_stream_id s) {
    if (tp->size == 1) return copy_if_apart(tp, whole, part, n, dt);
    mg_backend *be = tp->be;
    const size_t bytes = n * mg_dtype_size(dt);
    void *dst[MG_PEER_MAX];
    if (direct_dst(tp, whole, bytes, dst)) return be->peer_put(be, tp->peer, dst, part, bytes, s);
    if (by_copies(tp, bytes)) return mg_backend_peer_gather(be, tp->peer, whole, part, bytes, s);
    void *stream = be->stream_handle ? be->stream_handle(be, s) : NULL;
    return mg_comm_all_gather(tp->group, part, whole, n, dt, stream);
}

static mg_status reduce_on(const mg_tp *tp, void *part, void *whole, size_t n, mg_dtype dt, bool sp,
                           void *stream) {
    if (tp->size == 1) return sp ? copy_if_apart(tp, part, whole, n, dt) : MG_OK;
    if (sp) return mg_comm_reduce_scatter(tp->group, whole, part, n, dt, MG_REDUCE_SUM, stream);
    return mg_comm_all_reduce(tp->group, whole, whole, n, dt, MG_REDUCE_SUM, stream);
}

mg_status mg_tp_all_gather(const mg_tp *tp, void *whole, const void *part, size_t n, mg_dtype dt) {
    return gather_on(tp, whole, part, n, dt, MG_STREAM_COMPUTE);
}

mg_status mg_tp_reduce_scatter(const mg_tp *tp, void *part, const void *whole, size_t n,
                               mg_dtype dt) {
    return reduce_on(tp, part, (void *)whole, n, dt, true, compute_stream(tp));
}

mg_status mg_tp_reduce(const mg_tp *tp, void *part, void *whole, size_t n, mg_dtype dt, bool sp) {
    return reduce_on(tp, part, whole, n, dt, sp, compute_stream(tp));
}

/* The tensor-parallel stream, ordered after the compute stream's work so far (NULL: no streams,
 * the collective completes before returning). */
static mg_status side_stream(const mg_tp *tp, void **stream) {
    mg_backend *be = tp->be;
    *stream = NULL;
    if (tp->size == 1 || !be->stream_handle) return MG_OK;
    MG_CHECK(be->stream_wait(be, MG_STREAM_TP, MG_STREAM_COMPUTE));
    *stream = be->stream_handle(be, MG_STREAM_TP);
    return MG_OK;
}

mg_status mg_tp_reduce_begin(const mg_tp *tp, void *part, void *whole, size_t n, mg_dtype dt,
                             bool sp) {
    void *stream;
    MG_CHECK(side_stream(tp, &stream));
    return reduce_on(tp, part, whole, n, dt, sp, stream);
}

mg_status mg_tp_gather_begin(const mg_tp *tp, void *whole, const void *part, size_t n,
                             mg_dtype dt) {
    void *stream;
    MG_CHECK(side_stream(tp, &stream));
    return gather_on(tp, whole, part, n, dt, stream ? MG_STREAM_TP : MG_STREAM_COMPUTE);
}

mg_status mg_tp_join(const mg_tp *tp) {
    mg_backend *be = tp->be;
    if (tp->size == 1 || !be->stream_handle) return MG_OK;
    return be->stream_wait(be, MG_STREAM_COMPUTE, MG_STREAM_TP);
}

void mg_tp_bind_peer(mg_tp *tp, const mg_peer_window *pw) {
    tp->peer = pw;
}

void mg_tp_bind_direct(mg_tp *tp, const mg_peer_window *acts, const mg_peer_window *work) {
    tp->direct[0] = acts;
    tp->direct[1] = work;
}

bool mg_tp_pushes(const mg_tp *tp) {
    return tp->peer && tp->size > 1 && tp->be && tp->be->peer_push && tp->be->peer_sum;
}

mg_status mg_tp_push_begin(const mg_tp *tp, const void *whole, size_t n, mg_dtype dt) {
    mg_backend *be = tp->be;
    void *stream; /* the TP stream after the compute stream's work (NULL: none, the cpu's) */
    MG_CHECK(side_stream(tp, &stream));
    const size_t bytes = n * mg_dtype_size(dt);
    return be->peer_push(be, tp->peer, whole, bytes, bytes, MG_STREAM_TP);
}

mg_status mg_tp_push_end(const mg_tp *tp, void *part, const void *own, size_t n, const void *bias,
                         const void *residual, int H) {
    mg_backend *be = tp->be;
    MG_CHECK(be->peer_sum(be, tp->peer, part, own, n, be->compute_dtype, bias, residual, H,
                          MG_STREAM_COMPUTE));
    return mg_tp_join(tp);
}
