/* The rendezvous server: a thread of rank 0 that every rank, rank 0 included, talks to over TCP
 * (see rendezvous_wire.h for the frames). One poll() loop serves all connections without
 * blocking, so a rank that stops reading can never stall the others.
 *
 * Invariants:
 *   member[r] is the connection that said HELLO as rank r and has neither said BYE nor dropped;
 *   state[r] records what became of rank r (absent, present, left with a goodbye, dropped).
 *   Rounds: each rank has at most one OP pending (its calls block), so the pending OPs all belong
 *   to the same round; the round completes when every rank has one.
 *   Once `fatal` is set the job cannot go on: every rank got an ABORT and newcomers are rejected.
 *   `troubled` (a failure notice was relayed, or fatal) makes stopping quick: the ranks already
 * know. Nothing here calls MG_FAIL: errors go to the ranks as frames, and the thread owns no
 * status. */
#include "comm/rendezvous_server.h"

#include "comm/rendezvous_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

enum { ABSENT = 0, PRESENT, LEFT, DROPPED };

typedef struct {
    mg_rv_conn c;
    int rank; /* -1 until HELLO */
    double since;
    bool doomed;      /* close once the output is flushed (rejected, or said BYE) */
    int acks_pending; /* FAILs to ACK once every other rank's kernel holds the notice */
    bool has_op;
    uint32_t op_kind;
    uint64_t op_n;
    mg_rv_frame op; /* payload = u64 n followed by the data */
    char host[64];
} peer;

struct mg_rv_server {
    int listen_fd, wake_rd, wake_wr;
    int world;
    double timeout_s;
    uint64_t nonce;
    char where[300];
    pthread_t thread;
    atomic_int stop; /* set by mg_rv_server_stop, then the wake pipe is written */
    char stop_abort[MG_RV_TEXT_MAX];
    /* owned by the thread */
    peer **peers;
    int n_peers, cap_peers;
    peer **member;
    unsigned char *state;
    int arrived;
    bool ready, troubled;
    char fatal[MG_RV_TEXT_MAX];
    uint64_t round;
};

static void queue_text(peer *p, uint16_t type, uint32_t aux, const char *text) {
    size_t n = strlen(text);
    if (!mg_rv_conn_queue(&p->c, type, aux, text, n < MG_RV_TEXT_MAX ? n : MG_RV_TEXT_MAX, NULL, 0))
        p->doomed = true;
}

/* The job cannot go on: tell every rank why, once. */
static void abort_all(mg_rv_server *s, uint32_t rank, const char *text) {
    if (s->fatal[0]) return;
    snprintf(s->fatal, sizeof s->fatal, "%s", text);
    s->troubled = true;
    for (int i = 0; i < s->n_peers; i++)
        if (s->peers[i]->rank >= 0) queue_text(s->peers[i], MG_RV_ABORT, rank, s->fatal);
}

/* Relays (rank, text) to every other rank. Informational texts (a leading \x01) are no failure. */
static void relay_notice(mg_rv_server *s, int rank, const char *text) {
    if (text[0] != '\x01') s->troubled = true;
    for (int i = 0; i < s->n_peers; i++)
        if (s->peers[i]->rank >= 0 && s->peers[i]->rank != rank)
            queue_text(s->peers[i], MG_RV_NOTICE, (uint32_t)rank, text);
}

static void reject(peer *p, uint32_t kind, const char *text) {
    queue_text(p, MG_RV_REJECT, kind, text);
    p->doomed = true;
}

/* Ranks that have not arrived (before READY) or not reached the current round (after). */
static size_t missing_ranks(const mg_rv_server *s, uint32_t *out) {
    size_t n = 0;
    for (int r = 0; r < s->world; r++) {
        bool there = s->ready ? (s->member[r] && s->member[r]->has_op) : s->state[r] == PRESENT;
        if (!there) out[n++] = (uint32_t)r;
    }
    return n;
}

static const char *op_name(uint32_t kind) {
    return kind == MG_RV_OP_BROADCAST    ? "broadcast"
           : kind == MG_RV_OP_ALL_GATHER ? "all_gather"
           : kind == MG_RV_OP_BARRIER    ? "barrier"
                                         : "unknown";
}

/* Not every rank arrived in time (by the server's clock, or a rank's own: see MG_RV_WHO): the job
 * cannot start, and every rank, late ones included, is told who was missing. */
static void gather_timed_out(mg_rv_server *s) {
    if (s->fatal[0]) return;
    uint32_t *miss = malloc(sizeof *miss * (size_t)s->world);
    char list[256], msg[MG_RV_TEXT_MAX];
    if (miss) mg_rv_format_ranks(miss, missing_ranks(s, miss), s->world, list, sizeof list);
    snprintf(msg, sizeof msg,
             "rendezvous at %s: %s did not arrive within %g s; check that every rank was "
             "launched with WORLD_SIZE=%d and the same MASTER_ADDR/MASTER_PORT",
             s->where, miss ? list : "some ranks", s->timeout_s, s->world);
    free(miss);
    abort_all(s, MG_RV_NO_RANK, msg);
}

/* Rank p's rendezvous call timed out waiting for the ranks that have not made it. */
static void round_timed_out(mg_rv_server *s, const peer *p) {
    uint32_t *miss = malloc(sizeof *miss * (size_t)s->world);
    size_t n = miss ? missing_ranks(s, miss) : 0;
    if (miss && n && !s->fatal[0]) {
        char list[256], msg[MG_RV_TEXT_MAX];
        mg_rv_format_ranks(miss, n, s->world, list, sizeof list);
        snprintf(msg, sizeof msg,
                 "rendezvous %s #%llu timed out after %g s on rank %d; ranks that did not reach "
                 "it: %s",
                 p->has_op ? op_name(p->op_kind) : "call", (unsigned long long)s->round + 1,
                 s->timeout_s, p->rank, list);
        abort_all(s, MG_RV_NO_RANK, msg);
    }
    free(miss);
}

static void try_complete_round(mg_rv_server *s) {
    int pending = 0;
    for (int r = 0; r < s->world; r++) pending += s->member[r] && s->member[r]->has_op;
    if (pending == 0) return;
    for (int r = 0; r < s->world; r++)
        if (s->state[r] == LEFT) {
            char msg[MG_RV_TEXT_MAX];
            snprintf(
                msg, sizeof msg,
                "rank %d closed the rendezvous while other ranks wait in rendezvous call #%llu; "
                "every rank must make the same rendezvous calls",
                r, (unsigned long long)s->round + 1);
            abort_all(s, (uint32_t)r, msg);
            return;
        }
    if (pending < s->world) return;
    const peer *p0 = s->member[0];
    size_t total = p0->op_kind == MG_RV_OP_ALL_GATHER  ? (size_t)p0->op_n * (size_t)s->world
                   : p0->op_kind == MG_RV_OP_BROADCAST ? (size_t)p0->op_n
                                                       : 0;
    for (int r = 1; r < s->world; r++) {
        const peer *p = s->member[r];
        if (p->op_kind != p0->op_kind || p->op_n != p0->op_n) {
            char msg[MG_RV_TEXT_MAX];
            snprintf(msg, sizeof msg,
                     "rendezvous call #%llu differs between ranks: rank 0 called %s(%llu bytes), "
                     "rank %d called %s(%llu bytes); every rank must make the same calls",
                     (unsigned long long)s->round + 1, op_name(p0->op_kind),
                     (unsigned long long)p0->op_n, r, op_name(p->op_kind),
                     (unsigned long long)p->op_n);
            abort_all(s, (uint32_t)r, msg);
            return;
        }
    }
    if (total > MG_RV_MAX_PAYLOAD) {
        abort_all(s, MG_RV_NO_RANK,
                  "rendezvous all_gather result exceeds 64 MiB; it carries "
                  "bootstrap data only");
        return;
    }
    /* Broadcast sends rank 0's bytes; all_gather every rank's, in rank order. */
    uint8_t *gathered = NULL;
    const uint8_t *result = p0->op.payload + 8;
    if (p0->op_kind == MG_RV_OP_ALL_GATHER && total) {
        gathered = malloc(total);
        if (!gathered) {
            abort_all(s, MG_RV_NO_RANK, "rendezvous server out of memory");
            return;
        }
        for (int r = 0; r < s->world; r++)
            memcpy(gathered + (size_t)r * p0->op_n, s->member[r]->op.payload + 8, (size_t)p0->op_n);
        result = gathered;
    }
    for (int r = 0; r < s->world; r++)
        if (!mg_rv_conn_queue(&s->member[r]->c, MG_RV_RESULT, 0, result, total, NULL, 0))
            s->member[r]->doomed = true;
    free(gathered);
    for (int r = 0; r < s->world; r++) {
        peer *p = s->member[r];
        free(p->op.payload);
        p->op.payload = NULL;
        p->has_op = false;
    }
    s->round++;
}

static void on_hello(mg_rv_server *s, peer *p, const mg_rv_frame *f) {
    char msg[MG_RV_TEXT_MAX];
    if (f->version != MG_RV_VERSION) {
        snprintf(msg, sizeof msg, "%u", MG_RV_VERSION);
        reject(p, MG_RV_REJECT_VERSION, msg);
        return;
    }
    if (f->len < 12) {
        p->doomed = true; /* not one of ours */
        return;
    }
    int rank = (int)f->aux, world = (int)mg_rv_get32(f->payload);
    uint64_t nonce = mg_rv_get64(f->payload + 4);
    snprintf(p->host, sizeof p->host, "%.*s", (int)(f->len - 12), (const char *)f->payload + 12);
    if (s->fatal[0]) {
        reject(p, MG_RV_REJECT_FATAL, s->fatal);
        return;
    }
    if (rank == 0 && nonce != s->nonce) {
        /* Another job's rank 0 whose MASTER_ADDR/MASTER_PORT lead here: turn it away without
         * harming this job. */
        reject(p, MG_RV_REJECT_FOREIGN_ROOT, s->where);
        return;
    }
    if (world != s->world || rank < 0 || rank >= s->world) {
        snprintf(msg, sizeof msg,
                 "rank %d (host %s) was launched with WORLD_SIZE=%d but rank 0 with WORLD_SIZE=%d; "
                 "launch every rank with the same WORLD_SIZE",
                 rank, p->host, world, s->world);
        reject(p, MG_RV_REJECT_FATAL, msg);
        abort_all(s, (uint32_t)rank, msg);
        return;
    }
    if (s->state[rank] != ABSENT) {
        if (s->state[rank] == PRESENT && !s->ready) {
            snprintf(msg, sizeof msg,
                     "rank %d joined the rendezvous at %s twice (hosts %s and %s); give every "
                     "process its own RANK",
                     rank, s->where, s->member[rank]->host, p->host);
            reject(p, MG_RV_REJECT_FATAL, msg);
            abort_all(s, (uint32_t)rank, msg);
        } else {
            snprintf(msg, sizeof msg,
                     "rank %d already joined the rendezvous at %s (the job is running or over); "
                     "restart the whole job, or choose another MASTER_PORT for a new one",
                     rank, s->where);
            reject(p, MG_RV_REJECT_LATE, msg);
        }
        return;
    }
    p->rank = rank;
    s->member[rank] = p;
    s->state[rank] = PRESENT;
    uint8_t nb[8];
    mg_rv_put64(nb, s->nonce);
    if (!mg_rv_conn_queue(&p->c, MG_RV_WELCOME, 0, nb, 8, NULL, 0)) p->doomed = true;
    if (++s->arrived == s->world) {
        s->ready = true;
        for (int r = 0; r < s->world; r++)
            if (!mg_rv_conn_queue(&s->member[r]->c, MG_RV_READY, 0, NULL, 0, NULL, 0))
                s->member[r]->doomed = true;
    }
}

/* Handles one frame; false when the peer broke the protocol and must be dropped. */
static bool on_frame(mg_rv_server *s, peer *p, mg_rv_frame *f) {
    if (p->rank < 0) {
        if (f->type != MG_RV_HELLO) return false;
        on_hello(s, p, f);
        return true;
    }
    switch (f->type) {
    case MG_RV_WHO: {
        /* A WHO means that rank's own wait ran out and it gives up; the round (or the start) can
         * no longer complete, and the others would only hear of its leaving, so they are all told
         * the cause now, in the same line. */
        if (!s->ready)
            gather_timed_out(s);
        else
            round_timed_out(s, p);
        uint32_t *miss = malloc(sizeof *miss * (size_t)s->world);
        uint8_t *wire = malloc(4 * (size_t)s->world + 1);
        size_t n = miss && wire ? missing_ranks(s, miss) : 0;
        for (size_t i = 0; i < n; i++) mg_rv_put32(wire + 4 * i, miss[i]);
        if (!miss || !wire || !mg_rv_conn_queue(&p->c, MG_RV_MISSING, 0, wire, 4 * n, NULL, 0))
            p->doomed = true;
        free(miss);
        free(wire);
        return true;
    }
    case MG_RV_OP: {
        if (!s->ready || p->has_op || f->len < 8) return false;
        uint64_t n = mg_rv_get64(f->payload);
        uint32_t kind = f->aux;
        size_t want = kind == MG_RV_OP_ALL_GATHER || (kind == MG_RV_OP_BROADCAST && p->rank == 0)
                          ? (size_t)n
                          : 0;
        if (kind < MG_RV_OP_BROADCAST || kind > MG_RV_OP_BARRIER || f->len - 8 != want)
            return false;
        p->op = *f;
        f->payload = NULL; /* the peer keeps it until the round completes */
        p->op_kind = kind;
        p->op_n = n;
        p->has_op = true;
        try_complete_round(s);
        return true;
    }
    case MG_RV_FAIL:
        relay_notice(s, p->rank, (const char *)f->payload);
        if (f->payload[0] != '\x01') p->acks_pending++; /* informational ones are not waited on */
        return true;
    case MG_RV_BYE:
        s->state[p->rank] = LEFT;
        s->member[p->rank] = NULL;
        p->rank = -1;
        p->doomed = true;
        try_complete_round(s); /* ranks waiting in a round the leaver never joined are told */
        return true;
    default:
        return false;
    }
}

/* Forgets a connection; a rank that drops without a goodbye is reported to every other rank. */
static void drop(mg_rv_server *s, int i) {
    peer *p = s->peers[i];
    if (p->rank >= 0) {
        s->member[p->rank] = NULL;
        s->state[p->rank] = DROPPED;
        /* Also after a FAIL of its own: the receivers keep the first failure they saw. */
        char msg[96];
        snprintf(msg, sizeof msg,
                 "rank %d disconnected without a goodbye (it exited or was killed)", p->rank);
        relay_notice(s, p->rank, msg);
    }
    mg_rv_conn_close(&p->c);
    free(p->op.payload);
    free(p);
    s->peers[i] = s->peers[--s->n_peers];
}

static void accept_all(mg_rv_server *s) {
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return; /* EAGAIN, or out of descriptors: try again on the next wake-up */
        }
        peer *p = s->n_peers < s->cap_peers ? calloc(1, sizeof *p) : NULL;
        if (!p) { /* full: a flood of foreign connections must not exhaust memory */
            close(fd);
            continue;
        }
        mg_rv_socket_tune(fd);
        mg_rv_conn_init(&p->c, fd);
        p->rank = -1;
        p->since = mg_clock_seconds();
        s->peers[s->n_peers++] = p;
    }
}

/* Output still queued here, or sent but not yet acknowledged by the peer's kernel (SIOCOUTQ):
 * a FAIL is ACKed only when its notices have reached the other hosts, so a rank 0 that posts a
 * failure and exits at once cannot take the notices down with it. */
static bool any_output(const mg_rv_server *s, const peer *except, bool unacked) {
    for (int i = 0; i < s->n_peers; i++) {
        const peer *p = s->peers[i];
        if (p == except) continue;
        if (mg_rv_conn_pending(&p->c)) return true;
        int q = 0;
        if (unacked && p->rank >= 0 && ioctl(p->c.fd, SIOCOUTQ, &q) == 0 && q > 0) return true;
    }
    return false;
}

/* A doomed peer is only written to: reading it would spin on input nobody wants. */
static short poll_events(const peer *p) {
    return (short)((p->doomed ? 0 : POLLIN) | (mg_rv_conn_pending(&p->c) ? POLLOUT : 0));
}

static void *serve(void *arg) {
    mg_rv_server *s = arg;
    const double start = mg_clock_seconds();
    double stop_deadline = 0;
    struct pollfd *pf = calloc((size_t)s->cap_peers + 2, sizeof *pf);
    if (!pf) abort_all(s, MG_RV_NO_RANK, "rendezvous server out of memory");
    for (;;) {
        double now = mg_clock_seconds();
        if (!stop_deadline && atomic_load(&s->stop)) {
            if (s->stop_abort[0]) abort_all(s, MG_RV_NO_RANK, s->stop_abort);
            stop_deadline =
                now + (s->troubled ? (s->timeout_s < 1 ? s->timeout_s : 1) : s->timeout_s);
        }
        if (!s->ready && now >= start + s->timeout_s) gather_timed_out(s);
        for (int i = 0; i < s->n_peers; i++) { /* ACK a FAIL once its notices are on the wire */
            peer *p = s->peers[i];
            for (; p->acks_pending > 0 && !any_output(s, p, true); p->acks_pending--)
                if (!mg_rv_conn_queue(&p->c, MG_RV_ACK, 0, NULL, 0, NULL, 0)) p->doomed = true;
        }
        for (int i = s->n_peers - 1; i >= 0; i--) { /* flush, and retire what is finished */
            peer *p = s->peers[i];
            int fl = mg_rv_conn_flush(&p->c);
            bool idle_stranger = p->rank < 0 && !p->doomed && now - p->since > s->timeout_s;
            if (fl < 0 || (p->doomed && fl == 0) || idle_stranger) drop(s, i);
        }
        if (stop_deadline) {
            bool anyone = false;
            for (int r = 0; r < s->world; r++) anyone |= s->member[r] != NULL;
            bool flushed = !any_output(s, NULL, false);
            if ((!anyone && flushed) || (s->troubled && flushed) || now >= stop_deadline) break;
        }
        if (!pf) break;
        int n = 0;
        pf[n++] = (struct pollfd){s->wake_rd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->listen_fd, POLLIN, 0};
        for (int i = 0; i < s->n_peers; i++)
            pf[n++] = (struct pollfd){s->peers[i]->c.fd, poll_events(s->peers[i]), 0};
        double next = stop_deadline ? stop_deadline : now + 1.0;
        if (!s->ready && !s->fatal[0] && start + s->timeout_s < next) next = start + s->timeout_s;
        if (now + 0.25 < next) next = now + 0.25; /* re-check strangers' age and deadlines */
        for (int i = 0; i < s->n_peers; i++) /* an ACK waits on the peers' kernels: look often */
            if (s->peers[i]->acks_pending && now + 0.005 < next) next = now + 0.005;
        if (poll(pf, (nfds_t)n, mg_rv_ms_until(next)) < 0 && errno != EINTR) break;
        if (pf[0].revents) {
            char buf[64];
            while (read(s->wake_rd, buf, sizeof buf) > 0) {
            }
        }
        /* pf[k] is peers[k - 2]: going down, a drop (which moves the last peer into the hole)
         * never disturbs the peers still to visit; new peers are accepted after the loop. */
        for (int k = n - 1; k >= 2; k--) {
            if (!pf[k].revents) continue;
            int i = k - 2;
            peer *p = s->peers[i];
            mg_rv_io r = MG_RV_IO_AGAIN;
            mg_rv_frame f;
            while (!p->doomed && (r = mg_rv_conn_recv(&p->c, &f)) == MG_RV_IO_FRAME) {
                bool ok = on_frame(s, p, &f);
                free(f.payload);
                if (!ok) {
                    r = MG_RV_IO_PROTO;
                    break;
                }
            }
            if (!p->doomed && r != MG_RV_IO_AGAIN) drop(s, i);
        }
        if (pf[1].revents) accept_all(s);
    }
    /* Stopping: ranks still connected learn that the server is gone on purpose. */
    for (int i = 0; i < s->n_peers; i++)
        if (s->peers[i]->rank >= 0)
            mg_rv_conn_queue(&s->peers[i]->c, MG_RV_BYE, 0, NULL, 0, NULL, 0);
    for (int i = 0; i < s->n_peers; i++) mg_rv_conn_flush(&s->peers[i]->c);
    while (s->n_peers) {
        s->peers[0]->rank = -1; /* no notices while closing down */
        drop(s, 0);
    }
    free(pf);
    return NULL;
}

/* Listens on every interface, IPv6 with IPv4 mapped where the host has IPv6, like torch's
 * TCPStore: MASTER_ADDR may then be any name or address of rank 0's host. */
static int listen_any(int port, int *err) {
    for (int v6 = 1; v6 >= 0; v6--) {
        int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *err = errno;
            continue;
        }
        int one = 1, zero = 0;
        /* SO_REUSEADDR: a job restarted at once may bind while the old sockets sit in TIME_WAIT
         * (it still refuses a port that another process listens on). */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int rc;
        if (v6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                                     .sin6_port = htons((uint16_t)port),
                                     .sin6_addr = in6addr_any};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        } else {
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_ANY)};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        }
        if (rc == 0 && listen(fd, SOMAXCONN) == 0) return fd;
        *err = errno;
        close(fd);
        if (*err == EADDRINUSE || *err == EACCES) return -1; /* IPv4 would say the same */
    }
    return -1;
}

mg_status mg_rv_server_start(const char *addr, int port, int world, double timeout_s,
                             uint64_t nonce, mg_rv_server **out, int *bound_port) {
    *out = NULL;
    int err = 0, fd = listen_any(port, &err);
    if (fd < 0 && err == EADDRINUSE)
        return MG_FAIL(MG_ERR_COMM,
                       "rendezvous port %d on host %s is in use (another job?); choose another "
                       "MASTER_PORT",
                       port, addr);
    if (fd < 0)
        return MG_FAIL(MG_ERR_COMM, "rendezvous could not listen on port %d on host %s: %s; %s",
                       port, addr, strerror(err),
                       err == EACCES ? "choose a MASTER_PORT above 1023"
                                     : "choose another MASTER_PORT");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    mg_rv_server *s = calloc(1, sizeof *s);
    int pipefd[2] = {-1, -1};
    if (s) {
        s->cap_peers = world + 64;
        s->peers = calloc((size_t)s->cap_peers, sizeof *s->peers);
        s->member = calloc((size_t)world, sizeof *s->member);
        s->state = calloc((size_t)world, 1);
    }
    if (!s || !s->peers || !s->member || !s->state || pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0) {
        close(fd);
        if (s) free(s->peers), free(s->member), free(s->state);
        free(s);
        return MG_FAIL(MG_ERR_NOMEM, "rendezvous server: out of memory or descriptors");
    }
    s->listen_fd = fd;
    s->wake_rd = pipefd[0];
    s->wake_wr = pipefd[1];
    s->world = world;
    s->timeout_s = timeout_s;
    s->nonce = nonce;
    snprintf(s->where, sizeof s->where, "%s:%d", addr, *bound_port);
    atomic_init(&s->stop, 0);
    int rc = pthread_create(&s->thread, NULL, serve, s);
    if (rc != 0) {
        close(fd), close(pipefd[0]), close(pipefd[1]);
        free(s->peers), free(s->member), free(s->state), free(s);
        return MG_FAIL(MG_ERR_COMM, "rendezvous server: cannot start a thread: %s", strerror(rc));
    }
    *out = s;
    return MG_OK;
}

void mg_rv_server_stop(mg_rv_server *s, const char *abort_message) {
    if (!s) return;
    if (abort_message) snprintf(s->stop_abort, sizeof s->stop_abort, "%s", abort_message);
    atomic_store(&s->stop, 1); /* seq_cst: the thread sees stop_abort once it sees stop */
    ssize_t w;
    do w = write(s->wake_wr, "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    close(s->wake_rd);
    close(s->wake_wr);
    free(s->peers);
    free(s->member);
    free(s->state);
    free(s);
}
