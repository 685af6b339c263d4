/* Frames over non-blocking TCP sockets for the rendezvous (see rendezvous_wire.h). */
#include "comm/rendezvous_wire.h"
#include "core/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void mg_rv_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
void mg_rv_put64(uint8_t *p, uint64_t v) {
    mg_rv_put32(p, (uint32_t)(v >> 32));
    mg_rv_put32(p + 4, (uint32_t)v);
}
uint32_t mg_rv_get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
uint64_t mg_rv_get64(const uint8_t *p) {
    return (uint64_t)mg_rv_get32(p) << 32 | mg_rv_get32(p + 4);
}

int mg_rv_ms_until(double deadline) {
    double ms = ceil((deadline - mg_clock_seconds()) * 1e3);
    return ms <= 0 ? 0 : ms > 1e9 ? 1000000000 : (int)ms;
}

void mg_rv_sleep(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void mg_rv_socket_tune(int fd) {
    int one = 1, idle = 10, intvl = 5, cnt = 4;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void mg_rv_conn_init(mg_rv_conn *c, int fd) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
}

void mg_rv_conn_close(mg_rv_conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->payload);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* One recv into buf; returns bytes (> 0) or an mg_rv_io code as a negative number. EINTR retries.
 */
static long recv_some(int fd, void *buf, size_t n) {
    for (;;) {
        ssize_t k = recv(fd, buf, n, 0);
        if (k > 0) return (long)k;
        if (k == 0) return -MG_RV_IO_EOF;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return -MG_RV_IO_AGAIN;
        if (errno == ECONNRESET || errno == EPIPE) return -MG_RV_IO_EOF;
        return -MG_RV_IO_ERROR;
    }
}

mg_rv_io mg_rv_conn_recv(mg_rv_conn *c, mg_rv_frame *f) {
    for (;;) {
        if (c->hdr_got < MG_RV_HEADER) {
            long k = recv_some(c->fd, c->hdr + c->hdr_got, MG_RV_HEADER - c->hdr_got);
            if (k < 0) return (mg_rv_io)-k;
            size_t before = c->hdr_got;
            c->hdr_got += (size_t)k;
            /* Judge the magic as soon as its bytes are in: a foreign service that sends a short
             * banner and then waits is recognised at once instead of at the timeout. */
            for (size_t i = before; i < c->hdr_got && i < 4; i++)
                if (c->hdr[i] != (uint8_t)(MG_RV_MAGIC >> (24 - 8 * i))) return MG_RV_IO_PROTO;
            if (c->hdr_got < MG_RV_HEADER) continue;
            uint32_t len = mg_rv_get32(c->hdr + 12);
            if (len > MG_RV_MAX_PAYLOAD) return MG_RV_IO_PROTO;
            c->payload = malloc((size_t)len + 1);
            if (!c->payload) {
                errno = ENOMEM;
                return MG_RV_IO_ERROR;
            }
            c->payload_got = 0;
        }
        uint32_t len = mg_rv_get32(c->hdr + 12);
        while (c->payload_got < len) {
            long k = recv_some(c->fd, c->payload + c->payload_got, len - c->payload_got);
            if (k < 0) return (mg_rv_io)-k;
            c->payload_got += (size_t)k;
        }
        f->type = (uint16_t)(mg_rv_get32(c->hdr + 4) >> 16);
        f->version = (uint16_t)(mg_rv_get32(c->hdr + 4) & 0xffffu);
        f->aux = mg_rv_get32(c->hdr + 8);
        f->len = len;
        f->payload = c->payload;
        f->payload[len] = 0;
        c->payload = NULL;
        c->hdr_got = 0;
        return MG_RV_IO_FRAME;
    }
}

bool mg_rv_conn_queue(mg_rv_conn *c, uint16_t type, uint32_t aux, const void *a, size_t na,
                      const void *b, size_t nb) {
    if (na + nb > MG_RV_MAX_PAYLOAD) return false;
    size_t need = c->out_len + MG_RV_HEADER + na + nb;
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0, need = MG_RV_HEADER + na + nb;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        while (cap < need) cap *= 2;
        uint8_t *p = realloc(c->out, cap);
        if (!p) return false;
        c->out = p;
        c->out_cap = cap;
    }
    uint8_t *h = c->out + c->out_len;
    mg_rv_put32(h, MG_RV_MAGIC);
    mg_rv_put32(h + 4, (uint32_t)type << 16 | MG_RV_VERSION);
    mg_rv_put32(h + 8, aux);
    mg_rv_put32(h + 12, (uint32_t)(na + nb));
    if (na) memcpy(h + MG_RV_HEADER, a, na);
    if (nb) memcpy(h + MG_RV_HEADER + na, b, nb);
    c->out_len += MG_RV_HEADER + na + nb;
    return true;
}

int mg_rv_conn_flush(mg_rv_conn *c) {
    while (c->out_off < c->out_len) {
        /* MSG_NOSIGNAL: a peer that died must give EPIPE here, not kill us with SIGPIPE. */
        ssize_t k =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            c->out_off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        return -1;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

mg_rv_io mg_rv_conn_wait(mg_rv_conn *c, double deadline, mg_rv_frame *f) {
    for (;;) {
        int fl = mg_rv_conn_flush(c);
        mg_rv_io r = mg_rv_conn_recv(c, f);
        if (r != MG_RV_IO_AGAIN) return r;
        if (fl < 0) return errno == EPIPE || errno == ECONNRESET ? MG_RV_IO_EOF : MG_RV_IO_ERROR;
        int ms = mg_rv_ms_until(deadline);
        if (ms == 0) return MG_RV_IO_TIMEOUT;
        struct pollfd p = {c->fd, (short)(POLLIN | (fl ? POLLOUT : 0)), 0};
        if (poll(&p, 1, ms) < 0 && errno != EINTR) return MG_RV_IO_ERROR;
    }
}

bool mg_rv_conn_drain(mg_rv_conn *c, double deadline) {
    for (;;) {
        int fl = mg_rv_conn_flush(c);
        if (fl <= 0) return fl == 0;
        int ms = mg_rv_ms_until(deadline);
        if (ms == 0) return false;
        struct pollfd p = {c->fd, POLLOUT, 0};
        if (poll(&p, 1, ms) < 0 && errno != EINTR) return false;
    }
}

void mg_rv_format_ranks(const uint32_t *ranks, size_t n, int world, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "%s ", n == 1 ? "rank" : "ranks");
    for (size_t i = 0; i < n && i < 16 && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%u", i ? ", " : "", ranks[i]);
    if (n > 16 && used < cap)
        used += (size_t)snprintf(buf + used, cap - used, " and %zu more", n - 16);
    if (used < cap) snprintf(buf + used, cap - used, " of %d", world);
}
