/* Internal to src/comm: what a waiting call needs, shared by the common layer (comm.c) and the
 * backends (mpi.c, nccl.c, nccl_watchdog.c): comm_wait.c. It reads the world's health channel
 * (health.c) and calls nothing of comm.c or of a backend, so the backends that comm.c dispatches
 * to never call back into comm.c.
 * Exports: mg_comm_wait_step, mg_comm_peer_check, mg_comm_fail_call, mg_comm_rank_list,
 * mg_comm_sleep. Needs: comm/comm_backend (the world and group structs), comm/health. */
#ifndef MG_COMM_WAIT_H
#define MG_COMM_WAIT_H

#include "comm/comm_backend.h"
#include "core/status.h"

#include <stddef.h>

/* Between two tests of an unfinished operation: polls the health channel and the deadline, and
 * answers a peer that timed out and asks where this rank waits. Returns MG_OK to keep waiting, or
 * MG_ERR_COMM with the message of comm.h (marks w failed). */
mg_status mg_comm_wait_step(mg_comm *c, double deadline);
/* Whether a peer's failure notice is waiting (non-blocking, rate-limited like the health poll):
 * MG_ERR_COMM "rank K failed: ... (this rank, R, was in <call>)" (marks w failed), else MG_OK. */
mg_status mg_comm_peer_check(mg_comm *c);
/* A backend call failed with the library's text: MG_ERR_COMM "<call> #<seq> on group '<name>'
 * failed on rank <r>: <what>" (marks w failed). */
mg_status mg_comm_fail_call(mg_comm *c, const char *what);
/* The group's world ranks, "0,2,4,6", shortened to "0,2,4,...,62" when they do not fit in cap. */
void mg_comm_rank_list(const mg_comm *c, char *buf, size_t cap);
/* Sleeps s seconds (s >= 0), resumed after a signal. */
void mg_comm_sleep(double s);

#endif
