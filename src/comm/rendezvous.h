/* A small TCP store for torchrun-style launches (MASTER_ADDR/MASTER_PORT): it bootstraps NCCL (the
 * unique id), gathers small per-rank facts (host names, local ranks), and carries the failure
 * notices of comm_backend.h's side channel, including the death of a rank that could not say so.
 *
 * Rank 0 runs a server thread listening on every interface at `port` (torch's TCPStore does the
 * same, so MASTER_ADDR may be any name of rank 0's host); every rank, rank 0 included, is a client
 * of it over TCP (IPv4 or IPv6, whatever MASTER_ADDR resolves to). Calls are collective over all
 * ranks and must be made in the same order everywhere; each blocks at most timeout_s and fails
 * with one MG_ERR_COMM line saying what happened and what to do. A handle is used by one thread.
 *
 * Liveness: a rank whose connection drops without mg_rendezvous_close (it exited, crashed or was
 * killed) is reported to every other rank as (K, "rank K disconnected without a goodbye (it exited
 * or was killed)"); when rank 0's process dies, every other rank's poll reports rank 0 alike. A
 * host that vanishes without a reset is noticed by TCP keep-alive within about 30 s.
 *
 * Exports: mg_rendezvous_*. Needs: core/status, POSIX sockets, pthreads. */
#ifndef MG_RENDEZVOUS_H
#define MG_RENDEZVOUS_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mg_rendezvous mg_rendezvous;

/* Rank 0 listens on port (0 = pick a free one; mg_rendezvous_port tells which) and serves from a
 * background thread; the others connect to addr:port, retrying with backoff until timeout_s.
 * Returns once all world_size ranks have arrived. */
mg_status mg_rendezvous_open(const char *addr, int port, int rank, int world_size, double timeout_s,
                             mg_rendezvous **out);
int mg_rendezvous_port(const mg_rendezvous *r);

/* n bytes of rank 0's buf to every rank's buf (the NCCL unique id). n must agree on all ranks. */
mg_status mg_rendezvous_broadcast(mg_rendezvous *r, void *buf, size_t n);
/* all (world_size * n) = every rank's n bytes of mine, in rank order. */
mg_status mg_rendezvous_all_gather(mg_rendezvous *r, const void *mine, size_t n, void *all);
mg_status mg_rendezvous_barrier(mg_rendezvous *r);

/* Notices: (rank, message) lines relayed by rank 0's server to every other rank, in order.
 * A message starting with '\x01' is informational (health.c's wait notices): relayed the same way,
 * but it fails no call and is not waited on. Any other message is a failure: it fails this rank's
 * rendezvous calls from then on (the first failure seen is the one they report) and makes rank
 * 0's close quick.
 * post_failure: sends (this rank, message). For a failure it waits until the notice has reached
 * the other hosts' kernels, at most min(timeout_s, 5 s), so the rank may exit right after; it
 * never fails (best effort). May be called many times. */
void mg_rendezvous_post_failure(mg_rendezvous *r, const char *message);
/* Non-blocking. Returns the next notice not yet returned (each once, in arrival order): the rank
 * it is about and its message, which is what that rank posted or, for a rank that vanished, a
 * line the rendezvous wrote naming it, "rank 3 disconnected without a goodbye (it exited or was
 * killed)" (rank 0's loss is seen by the others as such a line about rank 0). A job-wide abort
 * (ranks made different calls, a rank never arrived) reads as a notice about the rank at fault,
 * or -1. Keeping the first one latched is the caller's business. r may be NULL (false). */
bool mg_rendezvous_poll_failure(mg_rendezvous *r, int *failed_rank, char *message, size_t cap);
/* Orderly goodbye: a rank that closes is not reported. Rank 0 then waits, at most timeout_s,
 * until every rank has closed before it stops serving (the others could not tell its leaving from
 * its death); after a failure notice it stops within a second. Frees everything; r may be NULL. */
void mg_rendezvous_close(mg_rendezvous *r);

#endif
