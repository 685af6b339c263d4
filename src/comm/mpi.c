/* The Open MPI backend: host buffers, a world of more than one rank (one rank uses self.c).
 *
 * No rank hangs: every operation is a non-blocking MPI-3 call completed by test_all, which tests
 * the requests and, between tests, calls mg_comm_wait_step (a peer's failure notice, the
 * deadline) with a backoff that lets oversubscribed ranks (8 ranks on 2 cores in CI) run: a short
 * spin for the latency of small messages, then sched_yield, then sleeps growing to 1 ms. Every
 * communicator has MPI_ERRORS_RETURN, so an MPI error becomes one MG_ERR_COMM line
 * (mg_comm_fail_call) instead of MPI's default abort of the whole job.
 *
 * Reductions on BF16/F16 are user-defined ops on a 2-byte contiguous type: each pairwise combine
 * widens to fp32, combines and rounds to nearest even once. avg = sum, then divide by the group
 * size on each rank. Counts beyond MPI's int: all-reduce, broadcast and point-to-point are cut
 * into chunks; reduce-scatter, all-gather and all-to-all refuse with MG_ERR_UNSUPPORTED (their
 * per-rank blocks would need derived types; nothing in training sends 2^31 elements per rank).
 *
 * The MPI bootstrap that opens the failure channel for both backends, MPI_Init/MPI_Finalize and
 * the pacing between two MPI_Tests are mpi_bootstrap.c's. */
#ifdef MG_HAVE_MPI

#include "comm/comm_backend.h"
#include "comm/comm_wait.h"
#include "comm/mpi_bootstrap.h"
#include "core/status.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A peer window's MPI objects (mpi_peer_alloc), found again by its base at the free. */
typedef struct {
    void *base;
    MPI_Win win;
    MPI_Comm shm;
} mpi_window;

typedef struct {
    MPI_Comm comm;
    mpi_window wins[8]; /* the group's peer windows (a trainer maps a few) */
    int n_wins;
    MPI_Request *reqs; /* scratch for batched point-to-point, grown as needed */
    int cap_reqs;
    MPI_Request *tickets; /* non-blocking point-to-point in flight (MPI_REQUEST_NULL: free) */
    int cap_tickets;
    void *tmp; /* scratch for in-place reduce-scatter, grown as needed */
    size_t tmp_bytes;
    int *a2a; /* 4 * size ints: MPI's counts and displacements for all-to-all */
} mpi_group;

typedef struct {
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD: the parent of every split */
} mpi_world;

/* Process-wide MPI objects: the 2-byte type and the four user ops (BF16/F16 x sum/max). */
static MPI_Datatype g_half = MPI_DATATYPE_NULL;
static MPI_Op g_ops[2][2] = {{MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL}};

/* ---- errors and waiting ---- */

static mg_status mpi_error(mg_comm *c, const char *fn, int rc) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    char what[MPI_MAX_ERROR_STRING + 64];
    snprintf(what, sizeof what, "%s: %s", fn, text);
    return mg_comm_fail_call(c, what);
}

#define MPI_TRY(c, call)                                                                           \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_error((c), #call, mpi_rc_);                         \
    } while (0)

static mg_status test_all(mg_comm *c, int n, MPI_Request *reqs) {
    double start = mg_clock_seconds(), deadline = start + c->w->timeout_s;
    for (int iter = 0;; iter++) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_error(c, "MPI_Testall", rc);
        if (done) return MG_OK;
        /* On an error the requests stay posted: collectives cannot be cancelled, and after
         * MG_ERR_COMM only fail/finalize remain, neither of which touches MPI again. */
        MG_CHECK(mg_comm_wait_step(c, deadline));
        mg_comm_mpi_backoff(iter, mg_clock_seconds() - start);
    }
}

static MPI_Datatype mpi_type(mg_dtype dt) {
    switch (dt) {
    case MG_F32:
        return MPI_FLOAT;
    case MG_BF16:
    case MG_F16:
        return g_half;
    case MG_I32:
        return MPI_INT32_T;
    case MG_I64:
        return MPI_INT64_T;
    case MG_U8:
        return MPI_UINT8_T;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(mg_dtype dt, mg_reduce_op op) {
    bool max = op == MG_REDUCE_MAX;
    if (dt == MG_BF16 || dt == MG_F16) return g_ops[dt == MG_F16][max];
    return max ? MPI_MAX : MPI_SUM;
}

static mpi_group *G(mg_comm *c) {
    return c->impl;
}

/* Counts beyond MPI's int travel in chunks of INT_MAX elements: the length of the chunk at off.
 * The loops over chunks run once also for count 0 (off == 0), so the call is still made. */
static int chunk(size_t count, size_t off) {
    return (int)(count - off < (size_t)INT_MAX ? count - off : (size_t)INT_MAX);
}

/* ---- BF16 / F16 user ops ---- */

#define HALF_OP(name, to_f, combine)                                                               \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {                          \
        const uint16_t *a = in;                                                                    \
        uint16_t *b = inout;                                                                       \
        for (int i = 0; i < *len; i++) {                                                           \
            float x = to_f(a[i]), y = to_f(b[i]);                                                  \
            b[i] = combine;                                                                        \
        }                                                                                          \
    }
/* max keeps the winner's bits (no rounding) and lets a NaN win, so it is not lost. */
HALF_OP(bf16_sum, mg_bf16_to_f32, mg_f32_to_bf16(x + y))
HALF_OP(f16_sum, mg_f16_to_f32, mg_f32_to_f16(x + y))
HALF_OP(bf16_max, mg_bf16_to_f32, (x != x || x > y) ? a[i] : b[i])
HALF_OP(f16_max, mg_f16_to_f32, (x != x || x > y) ? a[i] : b[i])

static mg_status make_types(mg_comm_world *w) {
    MPI_User_function *fns[2][2] = {{bf16_sum, bf16_max}, {f16_sum, f16_max}};
    if (g_half == MPI_DATATYPE_NULL && (MPI_Type_contiguous(2, MPI_BYTE, &g_half) != MPI_SUCCESS ||
                                        MPI_Type_commit(&g_half) != MPI_SUCCESS))
        return MG_FAIL(MG_ERR_COMM, "rank %d: MPI could not create the 2-byte BF16/F16 type",
                       w->rank);
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 2; o++)
            if (g_ops[t][o] == MPI_OP_NULL &&
                MPI_Op_create(fns[t][o], 1, &g_ops[t][o]) != MPI_SUCCESS)
                return MG_FAIL(MG_ERR_COMM, "rank %d: MPI could not create the BF16/F16 ops",
                               w->rank);
    return MG_OK;
}

static void free_types(void) {
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 2; o++)
            if (g_ops[t][o] != MPI_OP_NULL) MPI_Op_free(&g_ops[t][o]);
    if (g_half != MPI_DATATYPE_NULL) MPI_Type_free(&g_half);
}

/* avg = sum / size, computed in fp32 and rounded once into the element type. */
static void divide(void *buf, size_t count, mg_dtype dt, int size) {
    float s = (float)size;
    if (dt == MG_F32) {
        float *p = buf;
        for (size_t i = 0; i < count; i++) p[i] /= s;
    } else if (dt == MG_BF16) {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] = mg_f32_to_bf16(mg_bf16_to_f32(p[i]) / s);
    } else if (dt == MG_F16) {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++) p[i] = mg_f32_to_f16(mg_f16_to_f32(p[i]) / s);
    }
}

/* ---- world and groups ---- */

static mg_status mpi_world_init(mg_comm_world *w, const mg_launch_info *li) {
    mg_comm_mpi_backoff_setup(li->local_world_size);
    mpi_world *mw = calloc(1, sizeof *mw);
    if (!mw) return MG_FAIL(MG_ERR_NOMEM, "out of memory initialising MPI");
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mw->comm) != MPI_SUCCESS) {
        free(mw);
        return MG_FAIL(MG_ERR_COMM, "rank %d: MPI_Comm_dup(MPI_COMM_WORLD) failed", w->rank);
    }
    MPI_Comm_set_errhandler(mw->comm, MPI_ERRORS_RETURN);
    mg_status st = make_types(w);
    if (st != MG_OK) { /* a failed world_init cleans up after itself */
        MPI_Comm_free(&mw->comm);
        free(mw);
        return st;
    }
    w->impl = mw;
    return MG_OK;
}

/* After a failure peers may be gone: freeing MPI objects could wait for them, so it is skipped
 * (the process is about to exit). */
static void mpi_world_abort(mg_comm_world *w) {}

static void mpi_world_finalize(mg_comm_world *w) {
    mpi_world *mw = w->impl;
    if (!mw) return;
    if (!w->failed) {
        MPI_Comm_free(&mw->comm);
        free_types();
    }
    free(mw);
    w->impl = NULL;
}

/* Blocking split: comm.c has already met every rank over the rendezvous (bounded by the
 * timeout), so all of them are here. */
static mg_status mpi_group_split(mg_comm_world *w, mg_comm *c, int color, int key) {
    mpi_world *mw = w->impl;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_TRY(c, MPI_Comm_split(mw->comm, color < 0 ? MPI_UNDEFINED : color, key, &comm));
    c->impl = NULL;
    if (comm == MPI_COMM_NULL) return MG_OK;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    mpi_group *g = calloc(1, sizeof *g);
    int *a2a = calloc(4 * (size_t)c->size, sizeof *a2a);
    if (!g || !a2a) {
        free(g);
        free(a2a);
        MPI_Comm_free(&comm);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", c->name);
    }
    g->comm = comm;
    g->a2a = a2a;
    c->impl = g;
    return MG_OK;
}

static void mpi_group_free(mg_comm *c) {
    mpi_group *g = c->impl;
    if (!g) return;
    if (!c->w->failed) MPI_Comm_free(&g->comm);
    free(g->reqs);
    free(g->tickets);
    free(g->tmp);
    free(g->a2a);
    free(g);
    c->impl = NULL;
}

/* ---- collectives ---- */

static mg_status too_large(mg_comm *c, size_t n, const char *what) {
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "%s #%llu on group '%s': %s of %zu elements exceeds MPI's limit of %d per rank; "
                   "split the call",
                   c->call, (unsigned long long)c->seq, c->name, what, n, INT_MAX);
}

static mg_status mpi_all_reduce(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                                mg_reduce_op op, void *stream) {
    size_t es = mg_dtype_size(dt);
    for (size_t off = 0; off == 0 || off < count; off += (size_t)INT_MAX) {
        int n = chunk(count, off);
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
        MPI_Request req;
        MPI_TRY(c, MPI_Iallreduce(s, (char *)recv + off * es, n, mpi_type(dt), mpi_op(dt, op),
                                  G(c)->comm, &req));
        MG_CHECK(test_all(c, 1, &req));
    }
    if (op == MG_REDUCE_AVG) divide(recv, count, dt, c->size);
    return MG_OK;
}

static mg_status mpi_reduce_scatter(mg_comm *c, const void *send, void *recv, size_t count,
                                    mg_dtype dt, mg_reduce_op op, void *stream) {
    if (count > (size_t)INT_MAX) return too_large(c, count, "a block");
    mpi_group *g = G(c);
    size_t bytes = count * mg_dtype_size(dt);
    /* MPI's in-place form leaves the result at block 0 and may scribble over the others; NCCL's
     * (recv == send + rank*count) leaves it at this rank's block. So reduce into scratch. */
    void *out = recv;
    if ((const char *)send + bytes * (size_t)c->rank == recv && bytes) {
        if (g->tmp_bytes < bytes) {
            void *t = realloc(g->tmp, bytes);
            if (!t) return MG_FAIL(MG_ERR_NOMEM, "out of memory in reduce_scatter (%zu B)", bytes);
            g->tmp = t;
            g->tmp_bytes = bytes;
        }
        out = g->tmp;
    }
    MPI_Request req;
    MPI_TRY(c, MPI_Ireduce_scatter_block(send, out, (int)count, mpi_type(dt), mpi_op(dt, op),
                                         g->comm, &req));
    MG_CHECK(test_all(c, 1, &req));
    if (out != recv) memcpy(recv, out, bytes);
    if (op == MG_REDUCE_AVG) divide(recv, count, dt, c->size);
    return MG_OK;
}

static mg_status mpi_all_gather(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                                void *stream) {
    if (count > (size_t)INT_MAX) return too_large(c, count, "a block");
    size_t bytes = count * mg_dtype_size(dt);
    const void *s = (const char *)recv + bytes * (size_t)c->rank == send ? MPI_IN_PLACE : send;
    MPI_Request req;
    MPI_TRY(c, MPI_Iallgather(s, (int)count, mpi_type(dt), recv, (int)count, mpi_type(dt),
                              G(c)->comm, &req));
    return test_all(c, 1, &req);
}

static mg_status mpi_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                                const size_t *send_displs, void *recv, const size_t *recv_counts,
                                const size_t *recv_displs, mg_dtype dt, void *stream) {
    int n = c->size, *a = G(c)->a2a;
    for (int p = 0; p < n; p++) {
        size_t v[4] = {send_counts[p], send_displs[p], recv_counts[p], recv_displs[p]};
        for (int k = 0; k < 4; k++) {
            if (v[k] > (size_t)INT_MAX)
                return too_large(c, v[k], k % 2 ? "a displacement" : "a per-peer count");
            a[k * n + p] = (int)v[k];
        }
    }
    MPI_Request req;
    MPI_TRY(c, MPI_Ialltoallv(send, a, a + n, mpi_type(dt), recv, a + 2 * n, a + 3 * n,
                              mpi_type(dt), G(c)->comm, &req));
    return test_all(c, 1, &req);
}

static mg_status mpi_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                               void *stream) {
    size_t es = mg_dtype_size(dt);
    for (size_t off = 0; off == 0 || off < count; off += (size_t)INT_MAX) {
        int n = chunk(count, off);
        MPI_Request req;
        MPI_TRY(c, MPI_Ibcast((char *)buf + off * es, n, mpi_type(dt), root, G(c)->comm, &req));
        MG_CHECK(test_all(c, 1, &req));
    }
    return MG_OK;
}

/* All sends and receives are posted before any wait, so a pair exchanging in both directions
 * cannot deadlock; messages between one pair match in posting order (MPI's non-overtaking rule),
 * as NCCL matches them. Counts beyond INT_MAX travel as several messages, cut identically on
 * both sides. */
static mg_status mpi_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream) {
    mpi_group *g = G(c);
    size_t need = 0;
    for (int i = 0; i < n_ops; i++) need += ops[i].count / (size_t)INT_MAX + 1;
    if (need > (size_t)INT_MAX) return too_large(c, need, "a batch of messages");
    if ((int)need > g->cap_reqs) {
        MPI_Request *r = realloc(g->reqs, need * sizeof *r);
        if (!r) return MG_FAIL(MG_ERR_NOMEM, "out of memory in batch_p2p");
        g->reqs = r;
        g->cap_reqs = (int)need;
    }
    int k = 0;
    for (int i = 0; i < n_ops; i++) {
        const mg_p2p_op *o = &ops[i];
        size_t es = mg_dtype_size(o->dt);
        for (size_t off = 0; off == 0 || off < o->count; off += (size_t)INT_MAX) {
            int n = chunk(o->count, off);
            char *p = (char *)o->buf + off * es;
            int rc = o->is_send
                         ? MPI_Isend(p, n, mpi_type(o->dt), o->peer, 0, g->comm, &g->reqs[k])
                         : MPI_Irecv(p, n, mpi_type(o->dt), o->peer, 0, g->comm, &g->reqs[k]);
            if (rc != MPI_SUCCESS) return mpi_error(c, o->is_send ? "MPI_Isend" : "MPI_Irecv", rc);
            k++;
        }
    }
    return test_all(c, k, g->reqs);
}

/* A ticket is an index into g->tickets; a completed request is MPI_REQUEST_NULL again (MPI sets
 * it), so the table is reused without bookkeeping. A few messages are in flight at a time. */
static mg_status mpi_p2p_post(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket) {
    mpi_group *g = G(c);
    if (op->count > (size_t)INT_MAX) return too_large(c, op->count, "a non-blocking message");
    int t = 0;
    while (t < g->cap_tickets && g->tickets[t] != MPI_REQUEST_NULL) t++;
    if (t == g->cap_tickets) {
        int cap = g->cap_tickets ? 2 * g->cap_tickets : 8;
        MPI_Request *r = realloc(g->tickets, (size_t)cap * sizeof *r);
        if (!r) return MG_FAIL(MG_ERR_NOMEM, "out of memory for %d point-to-point tickets", cap);
        for (int i = g->cap_tickets; i < cap; i++) r[i] = MPI_REQUEST_NULL;
        g->tickets = r;
        g->cap_tickets = cap;
    }
    int n = (int)op->count;
    int rc = op->is_send
                 ? MPI_Isend(op->buf, n, mpi_type(op->dt), op->peer, tag, g->comm, &g->tickets[t])
                 : MPI_Irecv(op->buf, n, mpi_type(op->dt), op->peer, tag, g->comm, &g->tickets[t]);
    if (rc != MPI_SUCCESS) return mpi_error(c, op->is_send ? "MPI_Isend" : "MPI_Irecv", rc);
    *ticket = t;
    return MG_OK;
}

static mg_status mpi_p2p_wait(mg_comm *c, mg_p2p_ticket ticket) {
    mpi_group *g = G(c);
    if (ticket < 0 || ticket >= g->cap_tickets)
        return MG_FAIL(MG_ERR_USAGE, "p2p_wait on group '%s': ticket %d was never posted", c->name,
                       ticket);
    return test_all(c, 1, &g->tickets[ticket]);
}

static mg_status mpi_barrier(mg_comm *c, void *stream) {
    MPI_Request req;
    MPI_TRY(c, MPI_Ibarrier(G(c)->comm, &req));
    return test_all(c, 1, &req);
}

static mg_status mpi_sync(mg_comm *c, void *stream) {
    return MG_OK;
}

/* ---- peer-mapped memory: MPI's shared-memory windows (the group's ranks on one node) ---- */

/* mg_peer_window's progress: MPI moves this process's messages in flight while a host waits
 * (Open MPI's progress engine is the process's, so a probe on the group's communicator serves
 * every pending send and receive). */
static void mpi_progress(void *ctx) {
    int flag = 0;
    (void)MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, ((mpi_group *)ctx)->comm, &flag,
                     MPI_STATUS_IGNORE);
}

static mg_status mpi_peer_alloc(mg_comm *c, size_t bytes, mg_peer_window *out) {
    mpi_group *g = G(c);
    if (c->size > MG_PEER_MAX)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "peer-mapped memory over %d ranks (at most %d)", c->size,
                       MG_PEER_MAX);
    if (g->n_wins == (int)(sizeof g->wins / sizeof g->wins[0]))
        return MG_FAIL(MG_ERR_UNSUPPORTED, "peer-mapped memory: group '%s' maps %d windows already",
                       c->name, g->n_wins);
    /* the ranks that share this one's memory, in the group's order */
    MPI_Comm shm = MPI_COMM_NULL;
    MPI_TRY(c, MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shm));
    int n = 0, all = 0;
    MPI_Comm_size(shm, &n);
    MPI_Request req;
    int rc = MPI_Iallreduce(&n, &all, 1, MPI_INT, MPI_MIN, g->comm, &req);
    mg_status st = rc != MPI_SUCCESS ? mpi_error(c, "MPI_Iallreduce", rc) : test_all(c, 1, &req);
    /* the same size on every rank: the largest of bytes and of its complement */
    unsigned long long sz[2] = {bytes, ~(unsigned long long)bytes}, most[2] = {0, 0};
    if (st == MG_OK) {
        rc = MPI_Iallreduce(sz, most, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, g->comm, &req);
        st = rc != MPI_SUCCESS ? mpi_error(c, "MPI_Iallreduce", rc) : test_all(c, 1, &req);
    }
    if (st != MG_OK || all != c->size || most[0] != bytes || ~most[1] != bytes) {
        MPI_Comm_free(&shm);
        if (st != MG_OK) return st;
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       all != c->size ? "peer-mapped memory on group '%s': its ranks are on "
                                        "several nodes"
                                      : "peer-mapped memory on group '%s': the ranks asked for "
                                        "different sizes",
                       c->name);
    }
    const size_t total = bytes + MG_PEER_FLAG_BYTES;
    void *base = NULL;
    MPI_Win win = MPI_WIN_NULL;
    rc = MPI_Win_allocate_shared((MPI_Aint)total, 1, MPI_INFO_NULL, shm, &base, &win);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&shm);
        return mpi_error(c, "MPI_Win_allocate_shared", rc);
    }
    memset(base, 0, total);
    *out = (mg_peer_window){.n = c->size,
                            .rank = c->rank,
                            .bytes = bytes,
                            .timeout_s = c->w->timeout_s,
                            .progress = mpi_progress,
                            .progress_ctx = g};
    for (int q = 0; q < c->size; q++) {
        MPI_Aint size = 0;
        int disp = 0;
        MPI_Win_shared_query(win, q, &size, &disp, &out->base[q]);
    }
    g->wins[g->n_wins++] = (mpi_window){base, win, shm};
    /* every rank's zeros before anyone's flags */
    MPI_TRY(c, MPI_Ibarrier(g->comm, &req));
    return test_all(c, 1, &req);
}

static void mpi_peer_free(mg_comm *c, mg_peer_window *pw, bool abandon) {
    mpi_group *g = G(c);
    for (int i = 0; g && i < g->n_wins; i++) {
        if (g->wins[i].base != pw->base[pw->rank]) continue;
        if (!abandon) { /* collective */
            MPI_Win_free(&g->wins[i].win);
            MPI_Comm_free(&g->wins[i].shm);
        }
        g->wins[i] = g->wins[--g->n_wins];
        return;
    }
}

const mg_comm_ops mg_comm_mpi_ops = {
    .name = "mpi",
    .world_init = mpi_world_init,
    .world_abort = mpi_world_abort,
    .world_finalize = mpi_world_finalize,
    .group_split = mpi_group_split,
    .group_free = mpi_group_free,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .all_to_all = mpi_all_to_all,
    .broadcast = mpi_broadcast,
    .batch_p2p = mpi_batch_p2p,
    .p2p_post = mpi_p2p_post,
    .p2p_wait = mpi_p2p_wait,
    .barrier = mpi_barrier,
    .sync = mpi_sync,
    .peer_alloc = mpi_peer_alloc,
    .peer_free = mpi_peer_free,
};

#else
/* Without Open MPI the MPI backend serves worlds of one rank only (self.c); comm.c says how to
 * get the rest. ISO C wants a translation unit to declare something. */
typedef int mg_comm_mpi_unused;
#endif
