/* Internal to the rendezvous (rendezvous_wire.c; used by rendezvous.c and rendezvous_server.c): the
 * frame format on the wire, a non-blocking connection with an input frame assembler and an output
 * queue, socket helpers.
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
 *   S BYE                       the server stops serving
 *
 * Exports: mg_rv_* (types mg_rv_frame, mg_rv_conn, mg_rv_io; constants MG_RV_*): the internal
 * prefix of the rendezvous module, whose public interface is rendezvous.h's mg_rendezvous_*.
 * Needs: core/clock, core/status, POSIX sockets. */
#ifndef MG_RENDEZVOUS_WIRE_H
#define MG_RENDEZVOUS_WIRE_H

#include "core/clock.h" /* deadlines are mg_clock_seconds values */
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_RV_MAGIC   0x4d475256u /* "MGRV" */
#define MG_RV_VERSION 1
#define MG_RV_HEADER  16
/* bootstrap data is small; a larger length is a foreign peer */
#define MG_RV_MAX_PAYLOAD (64u << 20)
#define MG_RV_NO_RANK     0xffffffffu
#define MG_RV_TEXT_MAX    1024 /* failure and abort texts are cut to this */

enum {
    MG_RV_HELLO = 1,
    MG_RV_WELCOME,
    MG_RV_REJECT,
    MG_RV_READY,
    MG_RV_OP,
    MG_RV_RESULT,
    MG_RV_WHO,
    MG_RV_MISSING,
    MG_RV_FAIL,
    MG_RV_NOTICE,
    MG_RV_ACK,
    MG_RV_ABORT,
    MG_RV_BYE,
};
enum { MG_RV_OP_BROADCAST = 1, MG_RV_OP_ALL_GATHER, MG_RV_OP_BARRIER };
/* REJECT kinds: a fatal job error (the text says it), or a rank 0 that is not this server's own. */
enum { MG_RV_REJECT_FATAL = 1, MG_RV_REJECT_FOREIGN_ROOT, MG_RV_REJECT_VERSION, MG_RV_REJECT_LATE };

typedef struct {
    uint16_t type, version;
    uint32_t aux, len;
    uint8_t *payload; /* len bytes + a NUL, malloc'd; the receiver frees it */
} mg_rv_frame;

typedef struct {
    int fd;
    uint8_t hdr[MG_RV_HEADER];
    size_t hdr_got;
    uint8_t *payload; /* the frame being assembled */
    size_t payload_got;
    uint8_t *out; /* queued output: out[out_off .. out_len) is still to send */
    size_t out_off, out_len, out_cap;
} mg_rv_conn;

typedef enum {
    MG_RV_IO_FRAME = 0, /* a whole frame arrived */
    MG_RV_IO_AGAIN,     /* nothing more now */
    MG_RV_IO_EOF,       /* the peer closed (or reset) the connection */
    MG_RV_IO_ERROR,     /* a socket error; errno says which */
    MG_RV_IO_PROTO,     /* bytes that are not our protocol (bad magic or length) */
    MG_RV_IO_TIMEOUT,   /* mg_rv_conn_wait only: the deadline passed */
} mg_rv_io;

void mg_rv_conn_init(mg_rv_conn *c, int fd);
/* Closes the socket and frees the buffers. */
void mg_rv_conn_close(mg_rv_conn *c);
/* Reads what is available without blocking; MG_RV_IO_FRAME hands one frame to *f. */
mg_rv_io mg_rv_conn_recv(mg_rv_conn *c, mg_rv_frame *f);
/* Appends one frame (payload = a followed by b) to the output queue; false when out of memory. */
bool mg_rv_conn_queue(mg_rv_conn *c, uint16_t type, uint32_t aux, const void *a, size_t na,
                      const void *b, size_t nb);
/* Sends what the socket takes now: 0 all sent, 1 some left, -1 error (errno). */
int mg_rv_conn_flush(mg_rv_conn *c);
static inline bool mg_rv_conn_pending(const mg_rv_conn *c) {
    return c->out_off < c->out_len;
}
/* Flushes and receives until a frame arrives or the deadline (mg_clock_seconds) passes. */
mg_rv_io mg_rv_conn_wait(mg_rv_conn *c, double deadline, mg_rv_frame *f);
/* Flushes the whole output queue or gives up at the deadline; true when all was sent. */
bool mg_rv_conn_drain(mg_rv_conn *c, double deadline);

int mg_rv_ms_until(double deadline); /* for poll(): >= 0, rounded up */
void mg_rv_sleep(double seconds);
/* TCP_NODELAY (small frames must not wait for Nagle), keep-alive (a peer host that vanishes
 * without a FIN or RST is noticed in ~30 s), non-blocking, close-on-exec. */
void mg_rv_socket_tune(int fd);

void mg_rv_put32(uint8_t *p, uint32_t v);
void mg_rv_put64(uint8_t *p, uint64_t v);
uint32_t mg_rv_get32(const uint8_t *p);
uint64_t mg_rv_get64(const uint8_t *p);

/* "rank 3 of 8", "ranks 3, 5 of 8", at most 16 named then "and N more". */
void mg_rv_format_ranks(const uint32_t *ranks, size_t n, int world, char *buf, size_t cap);

#endif
