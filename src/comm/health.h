/* Internal to src/comm: the failure side channel of a multi-rank world (health.c). See
 * comm_backend.h, "Failure notices". A leaf: it takes ranks, messages and call descriptions as
 * plain arguments and calls nothing of comm.c or of a backend.
 * Exports: mg_comm_health_*. Needs: comm/rendezvous, core/status. */
#ifndef MG_COMM_HEALTH_H
#define MG_COMM_HEALTH_H

#include "comm/rendezvous.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mg_comm_health mg_comm_health;

/* Rank 0 serves on port (which must be free; the call returns once every rank arrived), the
 * others connect to addr:port; bounded by timeout_s. */
mg_status mg_comm_health_open(const char *addr, int port, int rank, int world_size,
                              double timeout_s, mg_comm_health **out);
mg_rendezvous *mg_comm_health_rendezvous(mg_comm_health *h);

/* Tells every peer this rank failed; returns once the notice reached them (bounded). */
void mg_comm_health_post_failure(mg_comm_health *h, const char *message);
/* Non-blocking, rate-limited to one look at the socket per 0.2 ms unless now_or_never: true once
 * a peer's failure notice arrived (rank -1: the rendezvous aborted the job); the first stays
 * latched and *message points into h. Informational notices (who waits where, below) are filed
 * on the way and never returned. */
bool mg_comm_health_poll(mg_comm_health *h, bool now_or_never, int *rank, const char **message);
/* As poll, but returns false at once when another thread holds the channel (the NCCL watchdog:
 * it must never wait behind a rendezvous collective of the main thread). */
bool mg_comm_health_try_poll(mg_comm_health *h, int *rank, const char **message);
/* Hold the channel around a direct use of its rendezvous (mg_rendezvous_all_gather) while a
 * watchdog thread may poll it. */
void mg_comm_health_lock(mg_comm_health *h);
void mg_comm_health_unlock(mg_comm_health *h);
/* Who waits where (comm_wait.c's timeout line; health.c's top comment has the protocol).
 * Informational notices only: they fail nothing, and no poll returns them. `where` is a call as
 * comm_wait.c words it, "all_reduce #17 on group 'dp'", at most MG_COMM_HEALTH_WHERE_MAX - 1
 * characters. ask: forgets the answers kept so far, asks every other rank where it waits (the
 * question names `what`, this rank's call) and keeps the answers that arrive from now on (polls
 * file them). */
#define MG_COMM_HEALTH_WHERE_MAX 128
void mg_comm_health_ask(mg_comm_health *h, const char *what);
/* Where rank said it waits since the last ask (copied into where): false when it did not answer. */
bool mg_comm_health_answer_of(mg_comm_health *h, int rank, char *where, size_t cap);
/* Whether a peer asked since the last call (clears the question: one answer serves every question
 * so far, since answers go to every rank); then the waiting rank calls answer with its call. */
bool mg_comm_health_asked(mg_comm_health *h);
void mg_comm_health_answer(mg_comm_health *h, const char *where);
/* Says goodbye (so no peer reports this rank as dead) and frees h. Also right after a failure:
 * the notice was posted (or received) already, and the rendezvous stops at once after one. */
void mg_comm_health_close(mg_comm_health *h);

#endif
