/* Internal to the rendezvous: rank 0's server thread (rendezvous_server.c), which rendezvous.c
 * starts and stops; it speaks the frames of rendezvous_wire.h.
 * Exports: mg_rv_server_*. Needs: comm/rendezvous_wire, core/status, pthreads. */
#ifndef MG_RENDEZVOUS_SERVER_H
#define MG_RENDEZVOUS_SERVER_H

#include "core/status.h"

#include <stdint.h>

/* The server thread of rank 0. It listens on every interface at `port`
 * (0: a free one) and serves until mg_rv_server_stop. */
typedef struct mg_rv_server mg_rv_server;
/* where: "addr:port" for messages. On failure returns MG_ERR_COMM with the one-line message. */
mg_status mg_rv_server_start(const char *addr, int port, int world, double timeout_s,
                             uint64_t nonce, mg_rv_server **out, int *bound_port);
/* Stops serving and frees the server. Without trouble it first waits, bounded by the timeout, until
 * every rank has said goodbye; after a failure notice or an abort it only flushes what is queued
 * (bounded by a second). abort_message (may be NULL) is first sent to every rank as an ABORT
 * unless the server already aborted. */
void mg_rv_server_stop(mg_rv_server *s, const char *abort_message);

#endif
