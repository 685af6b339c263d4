/* Recording communication calls into a graph capture (comm_record.h, comm.h's mg_comm_record). */
#include "comm/comm_record.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local const mg_comm_recorder *g_rec;
/* Virtual tickets are MG_COMM_REC_TICKETS + k: above every real one (indices of a backend's
 * requests), and not negative, which callers keep for "no ticket" */
#define MG_COMM_REC_TICKETS (1 << 30)
/* virtual ticket k -> the real ticket its replayed post got */
static _Thread_local mg_p2p_ticket *g_real;
static _Thread_local int g_n_virtual, g_cap_real;

void mg_comm_record(const mg_comm_recorder *r) {
    g_rec = r;
    if (r) g_n_virtual = 0;
}

bool mg_comm_rec_on(const mg_comm *c) {
    return g_rec && c && !mg_comm_device_buffers(c);
}

mg_status mg_comm_rec_call(mg_comm_rec_fn fn, const void *args, size_t size) {
    return g_rec->record(g_rec->ctx, fn, args, size);
}

typedef struct {
    mg_comm *c;
    mg_p2p_op op;
    int tag, k;
} rec_post;

static mg_status grow(int n) {
    if (n <= g_cap_real) return MG_OK;
    int cap = g_cap_real ? 2 * g_cap_real : 64;
    while (cap < n) cap *= 2;
    mg_p2p_ticket *t = realloc(g_real, (size_t)cap * sizeof *t);
    if (!t) return MG_FAIL(MG_ERR_NOMEM, "recording point-to-point: out of memory");
    for (int i = g_cap_real; i < cap; i++) t[i] = -1;
    g_real = t, g_cap_real = cap;
    return MG_OK;
}

static mg_status replay_post(const void *args) {
    const rec_post *a = args;
    MG_CHECK(grow(a->k + 1));
    return mg_comm_p2p_post(a->c, &a->op, a->tag, &g_real[a->k]);
}

mg_status mg_comm_rec_p2p_post(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket) {
    rec_post a = {c, *op, tag, g_n_virtual};
    MG_CHECK(mg_comm_rec_call(replay_post, &a, sizeof a));
    *ticket = MG_COMM_REC_TICKETS + g_n_virtual++;
    return MG_OK;
}

mg_status mg_comm_rec_ticket(mg_comm *c, mg_p2p_ticket ticket, mg_p2p_ticket *real) {
    *real = ticket;
    if (ticket < MG_COMM_REC_TICKETS) return MG_OK;
    int k = ticket - MG_COMM_REC_TICKETS;
    if (k >= g_cap_real || g_real[k] < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "p2p_wait on group '%s': ticket %d is a recorded post's, which no replay "
                       "has posted (wait for it inside the same graph)",
                       c->name, ticket);
    *real = g_real[k];
    g_real[k] = -1;
    return MG_OK;
}

/* ---- the recorded calls: each replays the public call (comm.h) with the arguments it had ---- */

typedef struct {
    mg_comm *c;
    const void *send;
    void *recv;
    size_t count;
    mg_dtype dt;
    mg_reduce_op op;
} rec_reduce;

static mg_status replay_all_reduce(const void *args) {
    const rec_reduce *a = args;
    return mg_comm_all_reduce(a->c, a->send, a->recv, a->count, a->dt, a->op, NULL);
}
static mg_status replay_reduce_scatter(const void *args) {
    const rec_reduce *a = args;
    return mg_comm_reduce_scatter(a->c, a->send, a->recv, a->count, a->dt, a->op, NULL);
}
static mg_status replay_all_gather(const void *args) {
    const rec_reduce *a = args;
    return mg_comm_all_gather(a->c, a->send, a->recv, a->count, a->dt, NULL);
}

mg_status mg_comm_rec_reduce(mg_comm_rec_kind kind, mg_comm *c, const void *send, void *recv,
                             size_t count, mg_dtype dt, mg_reduce_op op) {
    const rec_reduce a = {c, send, recv, count, dt, op};
    const mg_comm_rec_fn fn[] = {replay_all_reduce, replay_reduce_scatter, replay_all_gather};
    return mg_comm_rec_call(fn[kind], &a, sizeof a);
}

/* A call whose arguments are a header followed by n variable parts (copied after it in order). */
static mg_status rec_call_parts(mg_comm_rec_fn fn, const void *head, size_t head_size, int n,
                                const void *const *parts, const size_t *part_sizes) {
    size_t size = head_size;
    for (int i = 0; i < n; i++) size += part_sizes[i];
    unsigned char *a = malloc(size);
    if (!a) return MG_FAIL(MG_ERR_NOMEM, "recording a communication call: out of memory");
    memcpy(a, head, head_size);
    for (size_t at = head_size, i = 0; i < (size_t)n; at += part_sizes[i++])
        if (part_sizes[i]) memcpy(a + at, parts[i], part_sizes[i]);
    mg_status st = mg_comm_rec_call(fn, a, size);
    free(a);
    return st;
}

/* all_to_all: the header, then send_counts, send_displs, recv_counts, recv_displs (P each) */
typedef struct {
    mg_comm *c;
    const void *send;
    void *recv;
    mg_dtype dt;
    int P;
} rec_a2a;

static mg_status replay_all_to_all(const void *args) {
    const rec_a2a *a = args;
    const size_t *n = (const size_t *)(a + 1), P = (size_t)a->P;
    return mg_comm_all_to_all(a->c, a->send, n, n + P, a->recv, n + 2 * P, n + 3 * P, a->dt, NULL);
}

mg_status mg_comm_rec_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, mg_dtype dt) {
    const rec_a2a a = {c, send, recv, dt, c->size};
    const void *parts[4] = {send_counts, send_displs, recv_counts, recv_displs};
    const size_t n = (size_t)c->size * sizeof(size_t), sizes[4] = {n, n, n, n};
    return rec_call_parts(replay_all_to_all, &a, sizeof a, 4, parts, sizes);
}

typedef struct {
    mg_comm *c;
    void *buf;
    size_t count;
    mg_dtype dt;
    int root;
} rec_bcast;

static mg_status replay_broadcast(const void *args) {
    const rec_bcast *a = args;
    return mg_comm_broadcast(a->c, a->buf, a->count, a->dt, a->root, NULL);
}

mg_status mg_comm_rec_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root) {
    const rec_bcast a = {c, buf, count, dt, root};
    return mg_comm_rec_call(replay_broadcast, &a, sizeof a);
}

/* batch_p2p: the header, then the n operations */
typedef struct {
    mg_comm *c;
    int n;
} rec_batch;

static mg_status replay_batch_p2p(const void *args) {
    const rec_batch *a = args;
    return mg_comm_batch_p2p(a->c, (const mg_p2p_op *)(a + 1), a->n, NULL);
}

mg_status mg_comm_rec_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops) {
    const rec_batch a = {c, n_ops};
    const void *parts[1] = {ops};
    const size_t sizes[1] = {n_ops > 0 ? (size_t)n_ops * sizeof *ops : 0};
    return rec_call_parts(replay_batch_p2p, &a, sizeof a, 1, parts, sizes);
}

typedef struct {
    mg_comm *c;
    mg_p2p_ticket ticket;
} rec_wait;

static mg_status replay_p2p_wait(const void *args) {
    const rec_wait *a = args;
    return mg_comm_p2p_wait(a->c, a->ticket);
}

mg_status mg_comm_rec_p2p_wait(mg_comm *c, mg_p2p_ticket ticket) {
    const rec_wait a = {c, ticket};
    return mg_comm_rec_call(replay_p2p_wait, &a, sizeof a);
}

static mg_status replay_barrier(const void *args) {
    return mg_comm_barrier(*(mg_comm *const *)args, NULL);
}

mg_status mg_comm_rec_barrier(mg_comm *c) {
    return mg_comm_rec_call(replay_barrier, &c, sizeof c);
}
