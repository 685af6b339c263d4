/* The common layer of src/comm (see comm_backend.h): argument checks, per-group call numbers,
 * groups from Megatron-style lists, dispatch to the backend's table, and the world's life cycle
 * (the failure channel, the MPI bootstrap, the SIGTERM line). The wait step and the one-line
 * MG_ERR_COMM messages that the backends share are comm_wait.c's.
 *
 * Why validation lives here: a bad argument on one rank must fail on that rank with MG_ERR_USAGE
 * before anything is posted, identically for both backends (a mismatched call that reaches the
 * network shows up on the *other* ranks as a hang or garbage). What one rank cannot see (its
 * peers' counts) is left to the backend and, in the worst case, to the timeout. */
#include "comm/comm_backend.h"
#include "comm/comm_record.h"
#include "comm/comm_wait.h"
#include "comm/health.h"
#include "comm/mpi_bootstrap.h"
#include "comm/rendezvous.h"
#include "comm/signals.h"
#include "core/status.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mg_reduce_op_name(mg_reduce_op op) {
    switch (op) {
    case MG_REDUCE_SUM:
        return "sum";
    case MG_REDUCE_AVG:
        return "avg";
    case MG_REDUCE_MAX:
        return "max";
    }
    return "unknown";
}

int mg_comm_world_rank(const mg_comm_world *w) {
    return w ? w->rank : 0;
}
int mg_comm_world_size(const mg_comm_world *w) {
    return w ? w->size : 1;
}
mg_comm *mg_comm_world_comm(mg_comm_world *w) {
    return w ? w->world : NULL;
}
int mg_comm_rank(const mg_comm *c) {
    return c ? c->rank : -1;
}
int mg_comm_size(const mg_comm *c) {
    return c ? c->size : 0;
}
bool mg_comm_device_buffers(const mg_comm *c) {
    return !strcmp(c->w->ops->name, "nccl");
}

const char *mg_comm_name(const mg_comm *c) {
    return c ? c->name : "(none)";
}
int mg_comm_global_rank(const mg_comm *c, int group_rank) {
    return c && group_rank >= 0 && group_rank < c->size ? c->global_ranks[group_rank] : -1;
}

/* ---- calls: numbering and argument checks ---- */

#define USAGE(c, fmt, ...)                                                                         \
    MG_FAIL(MG_ERR_USAGE, "%s #%llu on group '%s': " fmt, (c)->call, (unsigned long long)(c)->seq, \
            (c)->name, __VA_ARGS__)

/* Numbers the call and refuses it when the world already failed or a peer's notice is waiting. */
static mg_status call_begin(mg_comm *c, const char *call) {
    if (!c)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s: the group is NULL (this rank is in no group of that list, or the "
                       "group was never created)",
                       call);
    c->seq++;
    c->call = call;
    mg_comm_world *w = c->w;
    if (w->failed)
        return MG_FAIL(MG_ERR_COMM,
                       "%s #%llu on group '%s' on rank %d: refused after an earlier communication "
                       "error (only mg_comm_world_fail and mg_comm_world_finalize remain)",
                       call, (unsigned long long)c->seq, c->name, w->rank);
    MG_CHECK(mg_comm_peer_check(c));
    mg_comm_signals_note(c, true);
    return MG_OK;
}

static mg_status call_end(mg_comm *c, mg_status st) {
    mg_comm_signals_note(c, false);
    return st;
}

static mg_status check_dtype(mg_comm *c, mg_dtype dt) {
    if ((unsigned)dt > (unsigned)MG_DTYPE_LAST)
        return USAGE(c, "unknown dtype %d (F32, BF16, F16, I32, I64, U8 are supported)", (int)dt);
    return MG_OK;
}

static mg_status check_op(mg_comm *c, mg_reduce_op op, mg_dtype dt) {
    if ((unsigned)op > (unsigned)MG_REDUCE_MAX)
        return USAGE(c, "unknown reduce op %d (sum, avg, max)", (int)op);
    if (op == MG_REDUCE_AVG && (dt == MG_I32 || dt == MG_I64 || dt == MG_U8))
        return USAGE(c, "avg is defined for F32, BF16 and F16 only, not %s (sum, then divide)",
                     mg_dtype_name(dt));
    return MG_OK;
}

/* count elements of dt times mult must fit in size_t bytes. */
static mg_status check_count(mg_comm *c, size_t count, size_t mult, mg_dtype dt, size_t *bytes) {
    size_t es = mg_dtype_size(dt);
    if (count && (mult > SIZE_MAX / count || count * mult > SIZE_MAX / es))
        return USAGE(c, "count %zu x %zu elements of %s overflows the address space", count, mult,
                     mg_dtype_name(dt));
    *bytes = count * mult * es;
    return MG_OK;
}

static mg_status check_buf(mg_comm *c, const void *p, size_t bytes, const char *what) {
    if (!p && bytes) return USAGE(c, "%s buffer is NULL with a non-zero count", what);
    return MG_OK;
}

static bool overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

mg_status mg_comm_all_reduce(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                             mg_reduce_op op, void *stream) {
    MG_CHECK(call_begin(c, "all_reduce"));
    size_t bytes = 0;
    mg_status st = check_dtype(c, dt);
    if (!st) st = check_op(c, op, dt);
    if (!st) st = check_count(c, count, 1, dt, &bytes);
    if (!st) st = check_buf(c, send, bytes, "send");
    if (!st) st = check_buf(c, recv, bytes, "recv");
    if (!st && send != recv && overlap(send, bytes, recv, bytes))
        st = USAGE(c, "send and recv overlap without being equal (in place means send == recv)%s",
                   "");
    if (!st)
        st = mg_comm_rec_on(c)
                 ? mg_comm_rec_reduce(MG_COMM_REC_ALL_REDUCE, c, send, recv, count, dt, op)
                 : c->w->ops->all_reduce(c, send, recv, count, dt, op, stream);
    return call_end(c, st);
}

mg_status mg_comm_all_reduce_many(mg_comm *c, void *const *bufs, const size_t *counts, int n,
                                  mg_dtype dt, mg_reduce_op op, void *stream) {
    /* a recorded graph (MPI) and a backend without groups take the calls one by one */
    if (!c->w->ops->all_reduce_many || mg_comm_rec_on(c) || n <= 1) {
        for (int k = 0; k < n; k++)
            MG_CHECK(mg_comm_all_reduce(c, bufs[k], bufs[k], counts[k], dt, op, stream));
        return MG_OK;
    }
    MG_CHECK(call_begin(c, "all_reduce_many"));
    mg_status st = check_dtype(c, dt);
    if (!st) st = check_op(c, op, dt);
    for (int k = 0; k < n && !st; k++) {
        size_t bytes = 0;
        st = check_count(c, counts[k], 1, dt, &bytes);
        if (!st) st = check_buf(c, bufs[k], bytes, "a");
    }
    if (!st) st = c->w->ops->all_reduce_many(c, bufs, counts, n, dt, op, stream);
    return call_end(c, st);
}

mg_status mg_comm_reduce_scatter(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, mg_reduce_op op, void *stream) {
    MG_CHECK(call_begin(c, "reduce_scatter"));
    size_t in_bytes = 0, bytes = 0;
    mg_status st = check_dtype(c, dt);
    if (!st) st = check_op(c, op, dt);
    if (!st) st = check_count(c, count, (size_t)c->size, dt, &in_bytes);
    bytes = count * (st ? 0 : mg_dtype_size(dt));
    if (!st) st = check_buf(c, send, in_bytes, "send");
    if (!st) st = check_buf(c, recv, bytes, "recv");
    const char *in_place = (const char *)send + bytes * (size_t)c->rank;
    if (!st && (const void *)in_place != recv && overlap(send, in_bytes, recv, bytes))
        st = USAGE(c,
                   "recv overlaps send; in place means recv == send + rank*count (rank %d, "
                   "count %zu)",
                   c->rank, count);
    if (!st)
        st = mg_comm_rec_on(c)
                 ? mg_comm_rec_reduce(MG_COMM_REC_REDUCE_SCATTER, c, send, recv, count, dt, op)
                 : c->w->ops->reduce_scatter(c, send, recv, count, dt, op, stream);
    return call_end(c, st);
}

mg_status mg_comm_all_gather(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                             void *stream) {
    MG_CHECK(call_begin(c, "all_gather"));
    size_t out_bytes = 0, bytes = 0;
    mg_status st = check_dtype(c, dt);
    if (!st) st = check_count(c, count, (size_t)c->size, dt, &out_bytes);
    bytes = count * (st ? 0 : mg_dtype_size(dt));
    if (!st) st = check_buf(c, send, bytes, "send");
    if (!st) st = check_buf(c, recv, out_bytes, "recv");
    const char *in_place = (const char *)recv + bytes * (size_t)c->rank;
    if (!st && (const void *)in_place != send && overlap(send, bytes, recv, out_bytes))
        st = USAGE(c,
                   "send overlaps recv; in place means send == recv + rank*count (rank %d, "
                   "count %zu)",
                   c->rank, count);
    if (!st)
        st = mg_comm_rec_on(c) ? mg_comm_rec_reduce(MG_COMM_REC_ALL_GATHER, c, send, recv, count,
                                                    dt, MG_REDUCE_SUM)
                               : c->w->ops->all_gather(c, send, recv, count, dt, stream);
    return call_end(c, st);
}

/* Extent in elements of the segments (displs[p], counts[p]); false on overflow. */
static bool extent(const size_t *counts, const size_t *displs, int n, size_t *out) {
    size_t end = 0;
    for (int p = 0; p < n; p++) {
        if (!counts[p]) continue;
        if (displs[p] > SIZE_MAX - counts[p]) return false;
        if (displs[p] + counts[p] > end) end = displs[p] + counts[p];
    }
    *out = end;
    return true;
}

mg_status mg_comm_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv, const size_t *recv_counts,
                             const size_t *recv_displs, mg_dtype dt, void *stream) {
    MG_CHECK(call_begin(c, "all_to_all"));
    mg_status st = check_dtype(c, dt);
    if (!st && (!send_counts || !send_displs || !recv_counts || !recv_displs))
        st = USAGE(c, "%s is NULL (each needs one entry per group rank)",
                   !send_counts   ? "send_counts"
                   : !send_displs ? "send_displs"
                   : !recv_counts ? "recv_counts"
                                  : "recv_displs");
    size_t send_n = 0, recv_n = 0, send_bytes = 0, recv_bytes = 0;
    if (!st && (!extent(send_counts, send_displs, c->size, &send_n) ||
                !extent(recv_counts, recv_displs, c->size, &recv_n)))
        st = USAGE(c, "a displacement plus its count overflows%s", "");
    if (!st && send_counts[c->rank] != recv_counts[c->rank])
        st = USAGE(c,
                   "this rank (group rank %d) sends %zu elements to itself but expects to "
                   "receive %zu",
                   c->rank, send_counts[c->rank], recv_counts[c->rank]);
    if (!st) st = check_count(c, send_n, 1, dt, &send_bytes);
    if (!st) st = check_count(c, recv_n, 1, dt, &recv_bytes);
    if (!st) st = check_buf(c, send, send_bytes, "send");
    if (!st) st = check_buf(c, recv, recv_bytes, "recv");
    if (!st && overlap(send, send_bytes, recv, recv_bytes))
        st = USAGE(c, "send and recv overlap (all_to_all has no in-place form)%s", "");
    if (!st)
        st = mg_comm_rec_on(c) ? mg_comm_rec_all_to_all(c, send, send_counts, send_displs, recv,
                                                        recv_counts, recv_displs, dt)
                               : c->w->ops->all_to_all(c, send, send_counts, send_displs, recv,
                                                       recv_counts, recv_displs, dt, stream);
    return call_end(c, st);
}

mg_status mg_comm_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                            void *stream) {
    MG_CHECK(call_begin(c, "broadcast"));
    size_t bytes = 0;
    mg_status st = check_dtype(c, dt);
    if (!st && (root < 0 || root >= c->size))
        st = USAGE(c, "root %d is out of range (group size %d; roots are group ranks)", root,
                   c->size);
    if (!st) st = check_count(c, count, 1, dt, &bytes);
    if (!st) st = check_buf(c, buf, bytes, "the");
    if (!st)
        st = mg_comm_rec_on(c) ? mg_comm_rec_broadcast(c, buf, count, dt, root)
                               : c->w->ops->broadcast(c, buf, count, dt, root, stream);
    return call_end(c, st);
}

mg_status mg_comm_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream) {
    MG_CHECK(call_begin(c, "batch_p2p"));
    mg_status st = MG_OK;
    if (n_ops < 0 || (n_ops > 0 && !ops)) st = USAGE(c, "%d ops at %p", n_ops, (const void *)ops);
    for (int i = 0; !st && i < n_ops; i++) {
        const mg_p2p_op *o = &ops[i];
        size_t bytes = 0;
        if (o->peer < 0 || o->peer >= c->size)
            st = USAGE(c,
                       "op %d (%s) names peer %d, out of range (group size %d; peers are "
                       "group ranks)",
                       i, o->is_send ? "send" : "recv", o->peer, c->size);
        if (!st) st = check_dtype(c, o->dt);
        if (!st) st = check_count(c, o->count, 1, o->dt, &bytes);
        if (!st) st = check_buf(c, o->buf, bytes, o->is_send ? "a send" : "a recv");
    }
    if (!st)
        st = mg_comm_rec_on(c) ? mg_comm_rec_batch_p2p(c, ops, n_ops)
                               : c->w->ops->batch_p2p(c, ops, n_ops, stream);
    return call_end(c, st);
}

bool mg_comm_p2p_async(const mg_comm *c) {
    return c && c->w->ops->p2p_post && c->w->ops->p2p_wait;
}

mg_status mg_comm_p2p_post(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket) {
    MG_CHECK(call_begin(c, op && op->is_send ? "p2p_send" : "p2p_recv"));
    mg_status st = MG_OK;
    size_t bytes = 0;
    if (!mg_comm_p2p_async(c))
        st = USAGE(c, "%s", "non-blocking point-to-point is not available on this backend");
    else if (!op || op->peer < 0 || op->peer >= c->size || op->peer == c->rank)
        st = USAGE(c, "peer %d is out of range or this rank (group size %d; peers are group ranks)",
                   op ? op->peer : -1, c->size);
    else if (tag < 0 || tag >= MG_P2P_TAGS)
        st = USAGE(c, "tag %d is out of range [0, %d)", tag, MG_P2P_TAGS);
    if (!st) st = check_dtype(c, op->dt);
    if (!st) st = check_count(c, op->count, 1, op->dt, &bytes);
    if (!st) st = check_buf(c, op->buf, bytes, op->is_send ? "a send" : "a recv");
    if (!st)
        st = mg_comm_rec_on(c) ? mg_comm_rec_p2p_post(c, op, tag, ticket)
                               : c->w->ops->p2p_post(c, op, tag, ticket);
    return call_end(c, st);
}

mg_status mg_comm_p2p_wait(mg_comm *c, mg_p2p_ticket ticket) {
    MG_CHECK(call_begin(c, "p2p_wait"));
    mg_p2p_ticket real = ticket;
    mg_status st = !mg_comm_p2p_async(c) ? USAGE(c, "%s", "no non-blocking point-to-point here")
                   : mg_comm_rec_on(c)   ? mg_comm_rec_p2p_wait(c, ticket)
                                         : mg_comm_rec_ticket(c, ticket, &real);
    if (!st && !mg_comm_rec_on(c)) st = c->w->ops->p2p_wait(c, real);
    return call_end(c, st);
}

bool mg_comm_copy_engine(const mg_comm *c) {
    return c && c->w->ops->copy_engine && c->w->ops->copy_engine(c->w);
}

mg_status mg_comm_sym_alloc(mg_comm *const *groups, int n_groups, size_t bytes, void **out) {
    *out = NULL;
    mg_comm *first = n_groups > 0 ? groups[0] : NULL;
    for (int i = 0; i < n_groups; i++)
        if (!groups[i] || groups[i]->w != first->w)
            return MG_FAIL(MG_ERR_USAGE, "sym_alloc: group %d is NULL or of another world", i);
    if (!mg_comm_copy_engine(first))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "copy-engine collectives need the NCCL backend (>= 2.28) and "
                       "MG_NCCL_COPY_ENGINE=1");
    mg_comm_world *w = first->w;
    if (w->failed) return MG_FAIL(MG_ERR_COMM, "sym_alloc: the world has failed");
    MG_CHECK(w->ops->mem_alloc(w, bytes, out));
    for (int i = 0; i < n_groups; i++) {
        mg_comm *c = groups[i];
        mg_status st = call_begin(c, "window_register");
        if (!st) st = call_end(c, w->ops->window_register(c, *out, bytes));
        if (st) {
            mg_comm_sym_free(groups, i, *out);
            *out = NULL;
            return st;
        }
    }
    return MG_OK;
}

static void sym_release(mg_comm *const *groups, int n_groups, void *ptr, bool deregister) {
    if (!ptr || n_groups < 1 || !groups[0]) return;
    mg_comm_world *w = groups[0]->w;
    for (int i = 0; deregister && i < n_groups; i++)
        if (groups[i] && w->ops->window_deregister) w->ops->window_deregister(groups[i], ptr);
    if (w->ops->mem_free) w->ops->mem_free(w, ptr);
}

void mg_comm_sym_free(mg_comm *const *groups, int n_groups, void *ptr) {
    sym_release(groups, n_groups, ptr, true);
}

void mg_comm_sym_abandon(mg_comm *const *groups, int n_groups, void *ptr) {
    sym_release(groups, n_groups, ptr, false);
}

mg_status mg_comm_peer_window_alloc(mg_comm *c, size_t bytes, mg_peer_window *out) {
    memset(out, 0, sizeof *out);
    if (!c) return MG_FAIL(MG_ERR_USAGE, "peer_window_alloc: no group");
    if (!c->w->ops->peer_alloc)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "peer-mapped memory needs the NCCL or MPI backend (this is %s)",
                       c->w->ops->name);
    if (c->w->failed) return MG_FAIL(MG_ERR_COMM, "peer_window_alloc: the world has failed");
    MG_CHECK(call_begin(c, "peer_window_alloc"));
    return call_end(c, c->w->ops->peer_alloc(c, bytes, out));
}

void mg_comm_peer_window_free(mg_comm *c, mg_peer_window *pw, bool abandon) {
    if (c && pw->n > 0 && c->w->ops->peer_free)
        c->w->ops->peer_free(c, pw, abandon || c->w->failed);
    memset(pw, 0, sizeof *pw);
}

mg_status mg_comm_barrier(mg_comm *c, void *stream) {
    MG_CHECK(call_begin(c, "barrier"));
    return call_end(c, mg_comm_rec_on(c) ? mg_comm_rec_barrier(c) : c->w->ops->barrier(c, stream));
}

/* Not numbered: a sync is no call of its own but the wait for the ones enqueued before it, and
 * its messages name the last of those. */
mg_status mg_comm_sync(mg_comm *c, void *stream) {
    if (!c) return MG_FAIL(MG_ERR_USAGE, "sync: the group is NULL");
    if (c->w->failed)
        return MG_FAIL(MG_ERR_COMM,
                       "sync on group '%s' on rank %d: refused after an earlier communication "
                       "error (only mg_comm_world_fail and mg_comm_world_finalize remain)",
                       c->name, c->w->rank);
    mg_comm_signals_note(c, true);
    return call_end(c, c->w->ops->sync(c, stream));
}

/* ---- groups ---- */

/* FNV-1a over everything that defines the list, to compare lists across ranks cheaply. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void comm_free(mg_comm *c) {
    if (!c) return;
    free(c->global_ranks);
    free(c);
}

/* Every rank must pass the same list: a different one would silently build other groups or hang
 * the split. The hashes go over the rendezvous (host memory, any backend) and bound the wait for
 * peers that never come by the timeout, so the split after it finds every rank present. */
static mg_status check_same_list(mg_comm_world *w, const char *name, uint64_t h) {
    if (!w->health) return MG_OK;
    uint64_t *all = calloc((size_t)w->size, sizeof *all);
    if (!all) return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", name);
    mg_comm_health_lock(w->health); /* the NCCL watchdog polls the same socket */
    mg_status st =
        mg_rendezvous_all_gather(mg_comm_health_rendezvous(w->health), &h, sizeof h, all);
    mg_comm_health_unlock(w->health);
    if (st != MG_OK) {
        free(all);
        w->failed = true;
        char what[512];
        snprintf(what, sizeof what, "%s", mg_error_message());
        return MG_FAIL(MG_ERR_COMM, "creating group '%s' failed on rank %d: %s", name, w->rank,
                       what);
    }
    for (int r = 0; r < w->size; r++)
        if (all[r] != all[0]) {
            free(all);
            return MG_FAIL(MG_ERR_USAGE,
                           "creating group '%s': rank %d passed a different list of groups than "
                           "rank 0 (every rank must pass the same full list, in the same order)",
                           name, r);
        }
    free(all);
    return MG_OK;
}

static mg_status add_group(mg_comm_world *w, mg_comm *c) {
    if (w->n_groups == w->cap_groups) {
        int cap = w->cap_groups ? 2 * w->cap_groups : 16;
        mg_comm **g = realloc(w->groups, (size_t)cap * sizeof *g);
        if (!g) return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", c->name);
        w->groups = g;
        w->cap_groups = cap;
    }
    w->groups[w->n_groups++] = c;
    return MG_OK;
}

mg_status mg_comm_group_create(mg_comm_world *w, const char *name, int n_groups, const int *offsets,
                               const int *ranks, mg_comm **out) {
    if (!out) return MG_FAIL(MG_ERR_USAGE, "mg_comm_group_create: out is NULL");
    *out = NULL;
    if (!w) return MG_FAIL(MG_ERR_USAGE, "mg_comm_group_create: the world is NULL");
    if (!name || !*name || strlen(name) >= sizeof((mg_comm *)0)->name)
        return MG_FAIL(MG_ERR_USAGE, "group name '%s' is empty or longer than %zu characters",
                       name ? name : "(null)", sizeof((mg_comm *)0)->name - 1);
    if (w->failed)
        return MG_FAIL(MG_ERR_COMM,
                       "creating group '%s' on rank %d: refused after an earlier communication "
                       "error",
                       name, w->rank);
    if (n_groups < 1 || !offsets || !ranks)
        return MG_FAIL(MG_ERR_USAGE,
                       "group '%s': %d groups (offsets %p, ranks %p); a list needs at least one "
                       "group, offsets with n_groups + 1 entries and the ranks",
                       name, n_groups, (const void *)offsets, (const void *)ranks);
    unsigned char *seen = calloc((size_t)w->size, 1);
    if (!seen) return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", name);
    int color = -1, key = -1;
    uint64_t h = fnv(14695981039346656037ull, name, strlen(name) + 1);
    h = fnv(h, &n_groups, sizeof n_groups);
    mg_status st = MG_OK;
    for (int g = 0; g < n_groups && !st; g++) {
        int lo = offsets[g], hi = offsets[g + 1];
        if (lo < 0 || hi <= lo) {
            st = MG_FAIL(MG_ERR_USAGE,
                         "group '%s': group %d is empty or its offsets decrease (offsets[%d] = %d, "
                         "offsets[%d] = %d)",
                         name, g, g, lo, g + 1, hi);
            break;
        }
        h = fnv(h, &hi, sizeof hi);
        h = fnv(h, ranks + lo, (size_t)(hi - lo) * sizeof *ranks);
        for (int i = lo; i < hi; i++) {
            int r = ranks[i];
            if (r < 0 || r >= w->size) {
                st = MG_FAIL(MG_ERR_USAGE,
                             "group '%s': rank %d in group %d is out of range (world size %d)",
                             name, r, g, w->size);
                break;
            }
            if (seen[r]) {
                st = MG_FAIL(MG_ERR_USAGE,
                             "group '%s': rank %d appears twice in the list (a rank belongs to "
                             "at most one group of a list)",
                             name, r);
                break;
            }
            seen[r] = 1;
            if (r == w->rank) color = g, key = i - lo;
        }
    }
    free(seen);
    if (st) return st;
    MG_CHECK(check_same_list(w, name, h));

    mg_comm *c = calloc(1, sizeof *c);
    if (!c) return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", name);
    c->w = w;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->call = "group_create";
    c->rank = key;
    c->size = color < 0 ? 0 : offsets[color + 1] - offsets[color];
    if (color >= 0) {
        c->global_ranks = malloc((size_t)c->size * sizeof *c->global_ranks);
        if (!c->global_ranks) {
            comm_free(c);
            return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", name);
        }
        memcpy(c->global_ranks, ranks + offsets[color], (size_t)c->size * sizeof *ranks);
    }
    /* Every rank takes part in the split, also one in no group (color -1). */
    st = w->ops->group_split(w, c, color, key);
    if (st != MG_OK) {
        comm_free(c);
        MG_CHECK(st);
    }
    if (color < 0) {
        w->ops->group_free(c);
        comm_free(c);
        return MG_OK;
    }
    st = add_group(w, c);
    if (st != MG_OK) {
        w->ops->group_free(c);
        comm_free(c);
        return st;
    }
    *out = c;
    return MG_OK;
}

void mg_comm_group_free(mg_comm *c) {
    if (!c || c == c->w->world) return; /* the world group belongs to the world */
    mg_comm_world *w = c->w;
    for (int i = 0; i < w->n_groups; i++)
        if (w->groups[i] == c) {
            w->groups[i] = w->groups[--w->n_groups];
            break;
        }
    mg_comm_signals_forget(c);
    w->ops->group_free(c);
    comm_free(c);
}

/* ---- the world ---- */

static mg_status pick_ops(const mg_launch_info *li, mg_comm_backend backend,
                          const mg_comm_ops **ops) {
    if (backend == MG_COMM_MPI) {
        if (li->world_size == 1) {
            /* No MPI_Init for one rank: works without mpirun and in builds without MPI. */
            *ops = &mg_comm_self_ops;
            return MG_OK;
        }
        if (li->kind != MG_LAUNCH_MPI)
            return MG_FAIL(
                MG_ERR_UNSUPPORTED,
                "the MPI backend needs an MPI launch (mpirun or srun) for %d ranks; "
                "this is a %s launch (use the NCCL backend, or start with mpirun -np %d)",
                li->world_size, li->launcher, li->world_size);
#ifdef MG_HAVE_MPI
        *ops = &mg_comm_mpi_ops;
        return MG_OK;
#else
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "this build has no MPI, needed for %d ranks on the CPU: install "
                       "libopenmpi-dev (apt-get install -y libopenmpi-dev openmpi-bin) and rebuild "
                       "with make",
                       li->world_size);
#endif
    }
    if (backend == MG_COMM_NCCL) {
#ifdef MG_HAVE_NCCL
        *ops = &mg_comm_nccl_ops;
        return MG_OK;
#else
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "this build has no NCCL: install CUDA and NCCL (nccl.h, libnccl) and "
                       "rebuild with make");
#endif
    }
    return MG_FAIL(MG_ERR_USAGE, "unknown communication backend %d", (int)backend);
}

/* Opens the failure channel of a multi-rank world before the backend starts. */
static mg_status open_health(mg_comm_world *w, const mg_launch_info *li) {
    if (li->kind == MG_LAUNCH_ENV)
        return mg_comm_health_open(li->master_addr, li->master_port, li->rank, li->world_size,
                                   w->timeout_s, &w->health);
#ifdef MG_HAVE_MPI
    if (li->kind == MG_LAUNCH_MPI) return mg_comm_mpi_bootstrap(li, w->timeout_s, &w->health);
#endif
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "%d ranks started by %s need MPI to exchange the rendezvous address, and this "
                   "build has none: install libopenmpi-dev and rebuild, or launch with "
                   "torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT",
                   li->world_size, li->launcher);
}

/* backend: whether the backend's world_init succeeded (a failed one cleaned up after itself). */
static void world_free(mg_comm_world *w, bool backend, bool clean) {
    while (w->n_groups > 0) {
        mg_comm *c = w->groups[--w->n_groups];
        mg_comm_signals_forget(c);
        w->ops->group_free(c);
        comm_free(c);
    }
    free(w->groups);
    if (backend) w->ops->world_finalize(w);
    if (w->size > 1) mg_comm_signals_remove();
    mg_comm_health_close(w->health);
#ifdef MG_HAVE_MPI
    if (w->size > 1 && w->launch.kind == MG_LAUNCH_MPI) mg_comm_mpi_shutdown(clean);
#endif
    free(w);
}

mg_status mg_comm_world_init(const mg_launch_info *li, mg_comm_backend backend, double timeout_s,
                             mg_comm_world **out) {
    if (!out) return MG_FAIL(MG_ERR_USAGE, "mg_comm_world_init: out is NULL");
    *out = NULL;
    if (!li) return MG_FAIL(MG_ERR_USAGE, "mg_comm_world_init: launch info is NULL");
    if (li->world_size < 1 || li->rank < 0 || li->rank >= li->world_size)
        return MG_FAIL(MG_ERR_USAGE, "launch says rank %d of %d ranks (needs 0 <= rank < size)",
                       li->rank, li->world_size);
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return MG_FAIL(MG_ERR_USAGE, "communication timeout %g s must be positive and finite",
                       timeout_s);
    const mg_comm_ops *ops = NULL;
    MG_CHECK(pick_ops(li, backend, &ops));
    mg_comm_world *w = calloc(1, sizeof *w);
    if (!w) return MG_FAIL(MG_ERR_NOMEM, "out of memory initialising the world");
    w->ops = ops;
    w->launch = *li;
    w->rank = li->rank;
    w->size = li->world_size;
    w->timeout_s = timeout_s;
    mg_status st = MG_OK;
    bool backend_up = false;
    if (w->size > 1) {
        MG_CHECK_GOTO(open_health(w, li), st, fail);
        /* After MPI_Init, so MPI's own handlers (if any) come first and ours is not replaced. */
        mg_comm_signals_install(w->rank);
    }
    MG_CHECK_GOTO(ops->world_init(w, li), st, fail);
    backend_up = true;
    int *ranks = malloc((size_t)w->size * sizeof *ranks);
    if (!ranks) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory initialising the world");
        goto fail;
    }
    for (int r = 0; r < w->size; r++) ranks[r] = r;
    int offsets[2] = {0, w->size};
    st = mg_comm_group_create(w, "world", 1, offsets, ranks, &w->world);
    free(ranks);
    if (st != MG_OK) goto fail;
    *out = w;
    return MG_OK;
fail:
    /* Peers may already wait for this rank: tell them why it will not come. */
    if (w->health) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", mg_error_message());
        mg_comm_health_post_failure(w->health, copy);
    }
    w->failed = true;
    world_free(w, backend_up, false);
    return st;
}

void mg_comm_world_fail(mg_comm_world *w, const char *message) {
    if (!w) return;
    int rank;
    const char *notice;
    /* This rank has said (or will say) everything: the SIGTERM line would only add noise. */
    mg_comm_signals_remove();
    /* A rank failing because of a peer's notice does not repost: the job already knows. */
    bool from_peer = mg_comm_health_poll(w->health, true, &rank, &notice);
    w->failed = true;
    if (!w->health) {
        w->ops->world_abort(w);
        return;
    }
    if (!from_peer) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", message && *message ? message : "unknown error");
        mg_comm_health_post_failure(w->health, copy);
    }
    /* The notice is in every peer's socket now, and a peer waiting in a call prints its line
     * within milliseconds. The launcher stops the whole job as soon as one rank exits non-zero,
     * so linger (bounded) to let the others print first: the failing rank 2 s, a rank that only
     * relays a peer's failure 0.5 s (its peers heard the same notice at the same time). */
    double linger = from_peer ? 0.5 : 2.0;
    mg_comm_sleep(w->timeout_s < linger ? w->timeout_s : linger);
    w->ops->world_abort(w);
}

void mg_comm_world_finalize(mg_comm_world *w) {
    if (!w) return;
    world_free(w, true, !w->failed);
}
