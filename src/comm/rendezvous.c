/* The rendezvous client: every rank's side of the conversation in rendezvous_wire.h. Calls block
 * with a deadline; frames that arrive unasked (notices, aborts, the server's goodbye) are queued
 * for poll_failure, and the first failure among them is kept: every later call returns it. */
#include "comm/rendezvous.h"

#include "comm/rendezvous_server.h"
#include "comm/rendezvous_wire.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int rank;
    char msg[MG_RV_TEXT_MAX];
} kept_notice;

struct mg_rendezvous {
    mg_rv_conn c;
    int rank, world, port;
    double timeout_s;
    char addr[256];
    mg_rv_server *server;     /* rank 0 only */
    unsigned long long calls; /* collectives made, for messages ("barrier #3") */
    bool broken;              /* a call failed: later calls fail at once (the order is lost) */
    bool gone;                /* the connection to rank 0's server ended */
    bool server_bye;          /* ... and it said goodbye first */
    bool failed;              /* a failure notice arrived: the first one, kept for every call */
    int failed_rank;
    char failed_msg[MG_RV_TEXT_MAX];
    kept_notice
        *queue; /* notices not yet returned by poll_failure: queue[head .. head+len) mod cap */
    size_t q_head, q_len, q_cap;
};

/* Notices waiting for poll_failure; beyond this (nobody polls) informational ones are dropped. */
enum { QUEUE_MAX = 1024 };

static void keep_notice(mg_rendezvous *r, int rank, const char *msg) {
    bool info = msg[0] == '\x01';
    if (!info && !r->failed) { /* the first failure is the cause; later ones are consequences */
        r->failed = true;
        r->failed_rank = rank;
        snprintf(r->failed_msg, sizeof r->failed_msg, "%s", msg);
    }
    if (r->q_len == r->q_cap) {
        size_t cap = r->q_cap ? 2 * r->q_cap : 8;
        kept_notice *q = cap <= QUEUE_MAX ? malloc(cap * sizeof *q) : NULL;
        if (!q) {
            if (info || !r->q_cap) return;
            r->q_head = (r->q_head + 1) % r->q_cap; /* the oldest goes; a failure never */
            r->q_len--;
        } else {
            for (size_t i = 0; i < r->q_len; i++) q[i] = r->queue[(r->q_head + i) % r->q_cap];
            free(r->queue);
            r->queue = q;
            r->q_cap = cap;
            r->q_head = 0;
        }
    }
    kept_notice *n = &r->queue[(r->q_head + r->q_len++) % r->q_cap];
    n->rank = rank;
    snprintf(n->msg, sizeof n->msg, "%s", msg);
}

/* Whether msg is a line the rendezvous worded itself about rank ("rank 3 disconnected ..."). */
static bool starts_with_rank(const char *msg, uint32_t rank) {
    char head[32];
    snprintf(head, sizeof head, "rank %u ", rank);
    return strncmp(msg, head, strlen(head)) == 0;
}

/* Frames that may arrive at any time; false for a frame that has no business here. */
static bool absorb(mg_rendezvous *r, const mg_rv_frame *f) {
    switch (f->type) {
    case MG_RV_NOTICE:
        keep_notice(r, (int)f->aux, (const char *)f->payload);
        return true;
    case MG_RV_ABORT:
        r->broken = true;
        keep_notice(r, f->aux == MG_RV_NO_RANK ? -1 : (int)f->aux, (const char *)f->payload);
        return true;
    case MG_RV_BYE:
        r->server_bye = true;
        return true;
    case MG_RV_RESULT: /* late answers to a call that already gave up */
    case MG_RV_MISSING:
    case MG_RV_ACK:
        return true;
    default:
        return false;
    }
}

/* The connection to rank 0 ended: that is rank 0's failure as far as this rank can tell. The
 * line names rank 0 itself, like the server's "rank K disconnected ..." notices. */
static void lost(mg_rendezvous *r, mg_rv_io io) {
    if (r->gone) return;
    int err = errno;
    r->gone = r->broken = true;
    char msg[MG_RV_TEXT_MAX];
    if (r->server_bye)
        snprintf(msg, sizeof msg,
                 "rank 0 closed the rendezvous before this rank did (it finished, or stopped "
                 "waiting for this rank's goodbye)");
    else if (io == MG_RV_IO_PROTO)
        snprintf(msg, sizeof msg, "rank 0 sent bytes that are not the rendezvous protocol");
    else if (io == MG_RV_IO_ERROR)
        snprintf(msg, sizeof msg, "rank 0 is unreachable: connection lost (%s)", strerror(err));
    else
        snprintf(msg, sizeof msg,
                 "rank 0 disconnected without a goodbye (it exited or was killed)");
    keep_notice(r, 0, msg);
}

/* Reads whatever has arrived without blocking. */
static void pump(mg_rendezvous *r) {
    if (r->gone) return;
    mg_rv_conn_flush(&r->c); /* a send error shows up as EOF or an error on the read below */
    for (;;) {
        mg_rv_frame f;
        mg_rv_io io = mg_rv_conn_recv(&r->c, &f);
        if (io == MG_RV_IO_AGAIN) return;
        if (io == MG_RV_IO_FRAME) {
            bool ok = absorb(r, &f);
            free(f.payload);
            if (ok) continue;
            io = MG_RV_IO_PROTO;
        }
        lost(r, io);
        return;
    }
}

/* Asks the server who is missing (not arrived, or not in the current round); "" when it does not
 * answer within a second. */
static void ask_missing(mg_rendezvous *r, char *buf, size_t cap) {
    buf[0] = '\0';
    if (r->gone || !mg_rv_conn_queue(&r->c, MG_RV_WHO, 0, NULL, 0, NULL, 0)) return;
    double deadline = mg_clock_seconds() + (r->timeout_s < 1 ? r->timeout_s : 1);
    for (;;) {
        mg_rv_frame f;
        mg_rv_io io = mg_rv_conn_wait(&r->c, deadline, &f);
        if (io != MG_RV_IO_FRAME) {
            if (io != MG_RV_IO_TIMEOUT) lost(r, io);
            return;
        }
        if (f.type == MG_RV_MISSING) {
            size_t n = f.len / 4;
            uint32_t *ranks = malloc(sizeof *ranks * (n ? n : 1));
            if (ranks) {
                for (size_t i = 0; i < n; i++) ranks[i] = mg_rv_get32(f.payload + 4 * i);
                mg_rv_format_ranks(ranks, n, r->world, buf, cap);
            }
            free(ranks);
            free(f.payload);
            return;
        }
        bool ok = absorb(r, &f);
        free(f.payload);
        if (!ok) {
            lost(r, MG_RV_IO_PROTO);
            return;
        }
    }
}

static uint64_t make_nonce(const void *salt) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)salt;
    x += 0x9e3779b97f4a7c15u; /* splitmix64 finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    x ^= x >> 31;
    return x ? x : 1; /* 0 is what the other ranks send */
}

static mg_status connect_retry(mg_rendezvous *r, double deadline) {
    char port_s[16], why[256] = "no attempt was made";
    snprintf(port_s, sizeof port_s, "%d", r->port);
    double backoff = 0.01;
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(r->addr, port_s, &hints, &res);
        if (g != 0)
            snprintf(why, sizeof why, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
            if (fd < 0) {
                snprintf(why, sizeof why, "%s", strerror(errno));
                continue;
            }
            int rc = connect(fd, ai->ai_addr, ai->ai_addrlen), err = rc ? errno : 0;
            if (rc != 0 && (err == EINPROGRESS || err == EINTR)) {
                struct pollfd p = {fd, POLLOUT, 0};
                int pr;
                do pr = poll(&p, 1, mg_rv_ms_until(deadline));
                while (pr < 0 && errno == EINTR);
                socklen_t len = sizeof err;
                if (pr <= 0)
                    err = ETIMEDOUT;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                    err = errno;
            }
            if (err == 0) {
                freeaddrinfo(res);
                mg_rv_socket_tune(fd);
                mg_rv_conn_init(&r->c, fd);
                return MG_OK;
            }
            snprintf(why, sizeof why, "%s", strerror(err));
            close(fd);
        }
        if (res) freeaddrinfo(res);
        double left = deadline - mg_clock_seconds();
        if (left <= 0) break;
        /* Rank 0 may simply not be listening yet: back off, up to half a second between tries. */
        mg_rv_sleep(backoff < left ? backoff : left);
        backoff = backoff * 2 < 0.5 ? backoff * 2 : 0.5;
    }
    if (r->rank == 0)
        return MG_FAIL(MG_ERR_COMM,
                       "rank 0 could not reach its own rendezvous at MASTER_ADDR:MASTER_PORT=%s:%d "
                       "within %g s: %s; MASTER_ADDR must name rank 0's host",
                       r->addr, r->port, r->timeout_s, why);
    return MG_FAIL(MG_ERR_COMM,
                   "could not reach MASTER_ADDR:MASTER_PORT=%s:%d within %g s: %s; check that rank "
                   "0 is running and that MASTER_ADDR names its host",
                   r->addr, r->port, r->timeout_s, why);
}

/* HELLO, then WELCOME, then READY once every rank has arrived. */
static mg_status hello(mg_rendezvous *r, uint64_t nonce, double deadline) {
    uint8_t hb[12];
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    mg_rv_put32(hb, (uint32_t)r->world);
    mg_rv_put64(hb + 4, nonce);
    if (!mg_rv_conn_queue(&r->c, MG_RV_HELLO, (uint32_t)r->rank, hb, 12, host, strlen(host)))
        return MG_FAIL(MG_ERR_NOMEM, "rendezvous: out of memory");
    const char *a = r->addr;
    int p = r->port;
    bool welcomed = false;
    for (;;) {
        mg_rv_frame f;
        mg_rv_io io = mg_rv_conn_wait(&r->c, deadline, &f);
        if (io == MG_RV_IO_TIMEOUT && !welcomed)
            return MG_FAIL(MG_ERR_COMM,
                           "MASTER_ADDR:MASTER_PORT=%s:%d accepted the connection but did not "
                           "answer within %g s (another service on that port?); choose another "
                           "MASTER_PORT",
                           a, p, r->timeout_s);
        if (io == MG_RV_IO_TIMEOUT) {
            char list[256];
            ask_missing(r, list, sizeof list);
            if (r->failed && r->failed_rank < 0) return MG_FAIL(MG_ERR_COMM, "%s", r->failed_msg);
            return MG_FAIL(MG_ERR_COMM,
                           "rendezvous at %s:%d: %s did not arrive within %g s; check that every "
                           "rank was launched with WORLD_SIZE=%d and the same "
                           "MASTER_ADDR/MASTER_PORT",
                           a, p, list[0] ? list : "some ranks (rank 0 did not say which)",
                           r->timeout_s, r->world);
        }
        if (io == MG_RV_IO_PROTO)
            return MG_FAIL(MG_ERR_COMM,
                           "MASTER_ADDR:MASTER_PORT=%s:%d is not a megatron.c rendezvous (it "
                           "answered with other bytes: another service on that port?); choose "
                           "another MASTER_PORT",
                           a, p);
        if (io == MG_RV_IO_EOF)
            return MG_FAIL(MG_ERR_COMM,
                           "rendezvous at %s:%d: the connection was closed before all ranks "
                           "arrived (%s); check rank 0's error, or for another service on that "
                           "port",
                           a, p, welcomed ? "rank 0 stopped" : "no answer");
        if (io == MG_RV_IO_ERROR)
            return MG_FAIL(MG_ERR_COMM, "rendezvous at %s:%d: %s", a, p, strerror(errno));
        mg_status st = MG_OK;
        if (f.version != MG_RV_VERSION)
            st = MG_FAIL(MG_ERR_COMM,
                         "rendezvous at %s:%d speaks protocol version %u, this rank version %d; "
                         "run the same megatron.c build on every rank",
                         a, p, f.version, MG_RV_VERSION);
        else if (f.type == MG_RV_REJECT && f.aux == MG_RV_REJECT_FOREIGN_ROOT)
            st = MG_FAIL(MG_ERR_COMM,
                         "MASTER_ADDR:MASTER_PORT=%s:%d leads to another job's rendezvous, not "
                         "this rank 0's own; set MASTER_ADDR to this host and choose a "
                         "MASTER_PORT no other job uses",
                         a, p);
        else if (f.type == MG_RV_REJECT || f.type == MG_RV_ABORT)
            st = MG_FAIL(MG_ERR_COMM, "%s", (const char *)f.payload);
        else if (f.type == MG_RV_NOTICE && f.payload[0] == '\x01')
            keep_notice(r, (int)f.aux, (const char *)f.payload); /* informational: poll's */
        else if (f.type == MG_RV_NOTICE && starts_with_rank((const char *)f.payload, f.aux))
            st = MG_FAIL(MG_ERR_COMM, "rendezvous at %s:%d: %s, before all ranks arrived", a, p,
                         (const char *)f.payload);
        else if (f.type == MG_RV_NOTICE)
            st = MG_FAIL(MG_ERR_COMM,
                         "rendezvous at %s:%d: rank %u failed before all ranks arrived: %s", a, p,
                         f.aux, (const char *)f.payload);
        else if (f.type == MG_RV_WELCOME && !welcomed)
            welcomed = true;
        else if (f.type != MG_RV_READY || !welcomed)
            st = MG_FAIL(MG_ERR_COMM,
                         "rendezvous at %s:%d: unexpected message %u from rank 0; "
                         "run the same megatron.c build on every rank",
                         a, p, f.type);
        bool ready = f.type == MG_RV_READY && st == MG_OK;
        free(f.payload);
        if (st != MG_OK || ready) return st;
    }
}

mg_status mg_rendezvous_open(const char *addr, int port, int rank, int world_size, double timeout_s,
                             mg_rendezvous **out) {
    *out = NULL;
    if (!addr || !*addr || strlen(addr) >= 256 || world_size < 1 || rank < 0 ||
        rank >= world_size || port < 0 || port > 65535 || (port == 0 && rank != 0) ||
        !(timeout_s > 0))
        return MG_FAIL(MG_ERR_USAGE,
                       "rendezvous: bad arguments (addr '%s', port %d, rank %d of %d, timeout %g "
                       "s); port 0 (any) is for rank 0 only",
                       addr ? addr : "(null)", port, rank, world_size, timeout_s);
    mg_rendezvous *r = calloc(1, sizeof *r);
    if (!r) return MG_FAIL(MG_ERR_NOMEM, "rendezvous: out of memory");
    mg_rv_conn_init(&r->c, -1);
    r->rank = rank;
    r->world = world_size;
    r->port = port;
    r->timeout_s = timeout_s;
    snprintf(r->addr, sizeof r->addr, "%s", addr);
    const double deadline = mg_clock_seconds() + timeout_s;
    uint64_t nonce = 0;
    mg_status st;
    if (rank == 0) {
        nonce = make_nonce(r);
        MG_CHECK_GOTO(
            mg_rv_server_start(addr, port, world_size, timeout_s, nonce, &r->server, &r->port), st,
            fail);
    }
    MG_CHECK_GOTO(connect_retry(r, deadline), st, fail);
    MG_CHECK_GOTO(hello(r, nonce, deadline), st, fail);
    *out = r;
    return MG_OK;
fail:
    /* Rank 0 giving up tells the ranks that did arrive why, instead of leaving them to time out. */
    if (r->server) mg_rv_server_stop(r->server, mg_error_message());
    mg_rv_conn_close(&r->c);
    free(r->queue);
    free(r);
    return st;
}

int mg_rendezvous_port(const mg_rendezvous *r) {
    return r ? r->port : 0;
}

/* The failure a call returns once a failure notice is known. */
static mg_status notice_error(const mg_rendezvous *r, const char *name, unsigned long long k) {
    if (r->failed_rank < 0) return MG_FAIL(MG_ERR_COMM, "%s", r->failed_msg); /* a job abort */
    if (starts_with_rank(r->failed_msg, (uint32_t)r->failed_rank))
        return MG_FAIL(MG_ERR_COMM, "%s (this rank, %d, was in rendezvous %s #%llu)", r->failed_msg,
                       r->rank, name, k);
    return MG_FAIL(MG_ERR_COMM, "rank %d failed: %s (this rank, %d, was in rendezvous %s #%llu)",
                   r->failed_rank, r->failed_msg, r->rank, name, k);
}

/* One collective round: sends OP, waits for RESULT (nout bytes into out). */
static mg_status call(mg_rendezvous *r, uint32_t kind, const char *name, const void *data,
                      size_t nd, uint64_t n, void *out, size_t nout) {
    unsigned long long k = ++r->calls;
    pump(r);
    if (r->failed) return notice_error(r, name, k);
    if (r->broken)
        return MG_FAIL(MG_ERR_COMM,
                       "rendezvous %s #%llu on rank %d: an earlier rendezvous call failed, so the "
                       "ranks are out of step; report the first error",
                       name, k, r->rank);
    if (nout > MG_RV_MAX_PAYLOAD || nd > MG_RV_MAX_PAYLOAD - 8)
        return MG_FAIL(MG_ERR_USAGE, "rendezvous %s of %zu bytes: at most 64 MiB (bootstrap data)",
                       name, nout);
    uint8_t nb[8];
    mg_rv_put64(nb, n);
    if (!mg_rv_conn_queue(&r->c, MG_RV_OP, kind, nb, 8, data, nd))
        return MG_FAIL(MG_ERR_NOMEM, "rendezvous %s: out of memory", name);
    const double deadline = mg_clock_seconds() + r->timeout_s;
    for (;;) {
        mg_rv_frame f;
        mg_rv_io io = mg_rv_conn_wait(&r->c, deadline, &f);
        if (io == MG_RV_IO_FRAME) {
            if (f.type == MG_RV_RESULT && f.len == nout) {
                if (nout) memcpy(out, f.payload, nout);
                free(f.payload);
                return MG_OK;
            }
            bool ok =
                f.type != MG_RV_RESULT && absorb(r, &f); /* a RESULT of another size is garbage */
            free(f.payload);
            if (!ok)
                lost(r, MG_RV_IO_PROTO);
            else if (!r->failed && !r->server_bye)
                continue; /* nothing that stops this call */
        } else if (io == MG_RV_IO_TIMEOUT) {
            r->broken = true;
            char list[256];
            ask_missing(r, list, sizeof list);
            if (!r->failed)
                return MG_FAIL(MG_ERR_COMM,
                               "rendezvous %s #%llu timed out after %g s on rank %d; ranks that "
                               "did not reach it: %s",
                               name, k, r->timeout_s, r->rank, list[0] ? list : "unknown");
        } else {
            lost(r, io);
        }
        r->broken = true;                      /* this call's round is lost */
        if (!r->failed) lost(r, MG_RV_IO_EOF); /* the server said goodbye mid-call */
        return notice_error(r, name, k);
    }
}

mg_status mg_rendezvous_broadcast(mg_rendezvous *r, void *buf, size_t n) {
    MG_CHECK(call(r, MG_RV_OP_BROADCAST, "broadcast", buf, r->rank == 0 ? n : 0, n, buf, n));
    return MG_OK;
}

mg_status mg_rendezvous_all_gather(mg_rendezvous *r, const void *mine, size_t n, void *all) {
    if (n && (size_t)r->world > MG_RV_MAX_PAYLOAD / n)
        return MG_FAIL(MG_ERR_USAGE,
                       "rendezvous all_gather of %zu bytes x %d ranks: at most 64 MiB", n,
                       r->world);
    MG_CHECK(call(r, MG_RV_OP_ALL_GATHER, "all_gather", mine, n, n, all, n * (size_t)r->world));
    return MG_OK;
}

mg_status mg_rendezvous_barrier(mg_rendezvous *r) {
    MG_CHECK(call(r, MG_RV_OP_BARRIER, "barrier", NULL, 0, 0, NULL, 0));
    return MG_OK;
}

void mg_rendezvous_post_failure(mg_rendezvous *r, const char *message) {
    if (!r || r->gone) return;
    const char *m = message && *message ? message : "failed (no message)";
    size_t n = strlen(m);
    if (!mg_rv_conn_queue(&r->c, MG_RV_FAIL, 0, m, n < MG_RV_TEXT_MAX - 1 ? n : MG_RV_TEXT_MAX - 1,
                          NULL, 0))
        return;
    const double deadline = mg_clock_seconds() + (r->timeout_s < 5 ? r->timeout_s : 5);
    if (m[0] == '\x01') { /* informational: sent, not acknowledged */
        if (!mg_rv_conn_drain(&r->c, deadline)) lost(r, MG_RV_IO_ERROR);
        return;
    }
    /* Wait for the ACK: the server sends it once the notice sits in every other rank's kernel, so
     * this rank may exit right after without the notice dying with it. */
    for (;;) {
        mg_rv_frame f;
        mg_rv_io io = mg_rv_conn_wait(&r->c, deadline, &f);
        if (io == MG_RV_IO_TIMEOUT) return;
        if (io != MG_RV_IO_FRAME) {
            lost(r, io);
            return;
        }
        bool acked = f.type == MG_RV_ACK, ok = absorb(r, &f);
        free(f.payload);
        if (acked) return;
        if (!ok) {
            lost(r, MG_RV_IO_PROTO);
            return;
        }
    }
}

bool mg_rendezvous_poll_failure(mg_rendezvous *r, int *failed_rank, char *message, size_t cap) {
    if (!r) return false;
    pump(r);
    if (!r->q_len) return false;
    const kept_notice *n = &r->queue[r->q_head];
    if (failed_rank) *failed_rank = n->rank;
    if (message && cap) snprintf(message, cap, "%s", n->msg);
    r->q_head = (r->q_head + 1) % r->q_cap;
    r->q_len--;
    return true;
}

void mg_rendezvous_close(mg_rendezvous *r) {
    if (!r) return;
    if (!r->gone && mg_rv_conn_queue(&r->c, MG_RV_BYE, 0, NULL, 0, NULL, 0)) {
        /* The server closes the connection on BYE; reading until then means our goodbye was
         * read before we close (closing with unread input would send a reset instead). */
        const double deadline = mg_clock_seconds() + (r->timeout_s < 5 ? r->timeout_s : 5);
        for (;;) {
            mg_rv_frame f;
            if (mg_rv_conn_wait(&r->c, deadline, &f) != MG_RV_IO_FRAME) break;
            free(f.payload);
        }
    }
    mg_rv_conn_close(&r->c);
    if (r->server) mg_rv_server_stop(r->server, NULL);
    free(r->queue);
    free(r);
}
