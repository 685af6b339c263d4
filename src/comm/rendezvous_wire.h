/* Internal to the rendezvous (rendezvous.c, rendezvous_server.c): the frame format on the wire,
 * a non-blocking connection with an input frame assembler and an output queue, socket helpers.
 *
 * Every frame starts with a 16-byte header, big-endian:
 *   u32 magic "MGRV" | u16 type | u16 protocol version | u32 aux | u32 payload length
 * The magic on every frame lets either side tell a foreign peer (another service on the port, a
 * port scanner) from a rank at the first bytes; the version in every header makes a build mismatch
 * between ranks an error that names itself instead of a garbled exchange.
 *
 * Conversation (C = a rank's client, S = rank 0's server thread):
 *   C HELLO(aux=rank; u32 world, u64 nonce, host)   S WELCOME | REJECT(aux=kind; text)
 *   S READY                     every rank has said hello
 *   C OP(aux=kind; u64 n, data) S RESULT(data)      one collective round over all ranks
 *   C WHO                       S MISSING(u32 ranks) who has not arrived / not reached the round
 *   C FAIL(text)                S NOTICE(aux=rank; text) to every other rank, then ACK to C
 *                               (no ACK for informational texts, those starting with \x01)
 *   S NOTICE(aux=rank; "rank K disconnected without a goodbye ...")   a connection dropped
 *   S ABORT(aux=rank|~0; text)  the job cannot go on (mismatched ranks, duplicate rank, ...)
 *   C BYE                       S closes that connection: an orderly goodbye
 *   S BYE                       the server stops serving */
#ifndef MG_RENDEZVOUS_WIRE_H
#define MG_RENDEZVOUS_WIRE_H

#include "core/clock.h" /* deadlines are mg_clock_seconds values */
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RV_MAGIC   0x4d475256u /* "MGRV" */
#define RV_VERSION 1
#define RV_HEADER  16
#define RV_MAX_PAYLOAD                                                                             \
    (64u << 20) /* bootstrap data is small; a larger length is a foreign peer                      \
                 */
#define RV_NO_RANK  0xffffffffu
#define RV_TEXT_MAX 1024 /* failure and abort texts are cut to this */

enum {
    RV_HELLO = 1,
    RV_WELCOME,
    RV_REJECT,
    RV_READY,
    RV_OP,
    RV_RESULT,
    RV_WHO,
    RV_MISSING,
    RV_FAIL,
    RV_NOTICE,
    RV_ACK,
    RV_ABORT,
    RV_BYE,
};
enum { RV_OP_BROADCAST = 1, RV_OP_ALL_GATHER, RV_OP_BARRIER };
/* REJECT kinds: a fatal job error (the text says it), or a rank 0 that is not this server's own. */
enum { RV_REJECT_FATAL = 1, RV_REJECT_FOREIGN_ROOT, RV_REJECT_VERSION, RV_REJECT_LATE };

typedef struct {
    uint16_t type, version;
    uint32_t aux, len;
    uint8_t *payload; /* len bytes + a NUL, malloc'd; the receiver frees it */
} rv_frame;

typedef struct {
    int fd;
    uint8_t hdr[RV_HEADER];
    size_t hdr_got;
    uint8_t *payload; /* the frame being assembled */
    size_t payload_got;
    uint8_t *out; /* queued output: out[out_off .. out_len) is still to send */
    size_t out_off, out_len, out_cap;
} rv_conn;

typedef enum {
    RV_IO_FRAME = 0, /* a whole frame arrived */
    RV_IO_AGAIN,     /* nothing more now */
    RV_IO_EOF,       /* the peer closed (or reset) the connection */
    RV_IO_ERROR,     /* a socket error; errno says which */
    RV_IO_PROTO,     /* bytes that are not our protocol (bad magic or length) */
    RV_IO_TIMEOUT,   /* rv_conn_wait only: the deadline passed */
} rv_io;

void rv_conn_init(rv_conn *c, int fd);
/* Closes the socket and frees the buffers. */
void rv_conn_close(rv_conn *c);
/* Reads what is available without blocking; RV_IO_FRAME hands one frame to *f. */
rv_io rv_conn_recv(rv_conn *c, rv_frame *f);
/* Appends one frame (payload = a followed by b) to the output queue; false when out of memory. */
bool rv_conn_queue(rv_conn *c, uint16_t type, uint32_t aux, const void *a, size_t na, const void *b,
                   size_t nb);
/* Sends what the socket takes now: 0 all sent, 1 some left, -1 error (errno). */
int rv_conn_flush(rv_conn *c);
static inline bool rv_conn_pending(const rv_conn *c) {
    return c->out_off < c->out_len;
}
/* Flushes and receives until a frame arrives or the deadline (mg_clock_seconds) passes. */
rv_io rv_conn_wait(rv_conn *c, double deadline, rv_frame *f);
/* Flushes the whole output queue or gives up at the deadline; true when all was sent. */
bool rv_conn_drain(rv_conn *c, double deadline);

int rv_ms_until(double deadline); /* for poll(): >= 0, rounded up */
void rv_sleep(double seconds);
/* TCP_NODELAY (small frames must not wait for Nagle), keep-alive (a peer host that vanishes
 * without a FIN or RST is noticed in ~30 s), non-blocking, close-on-exec. */
void rv_socket_tune(int fd);

void rv_put32(uint8_t *p, uint32_t v);
void rv_put64(uint8_t *p, uint64_t v);
uint32_t rv_get32(const uint8_t *p);
uint64_t rv_get64(const uint8_t *p);

/* "rank 3 of 8", "ranks 3, 5 of 8", at most 16 named then "and N more". */
void rv_format_ranks(const uint32_t *ranks, size_t n, int world, char *buf, size_t cap);

/* The server thread of rank 0 (rendezvous_server.c). It listens on every interface at `port`
 * (0: a free one) and serves until rv_server_stop. */
typedef struct rv_server rv_server;
/* where: "addr:port" for messages. On failure returns MG_ERR_COMM with the one-line message. */
mg_status rv_server_start(const char *addr, int port, int world, double timeout_s, uint64_t nonce,
                          rv_server **out, int *bound_port);
/* Stops serving and frees the server. Without trouble it first waits, bounded by the timeout, until
 * every rank has said goodbye; after a failure notice or an abort it only flushes what is queued
 * (bounded by a second). abort_message (may be NULL) is first sent to every rank as an ABORT
 * unless the server already aborted. */
void rv_server_stop(rv_server *s, const char *abort_message);

#endif
