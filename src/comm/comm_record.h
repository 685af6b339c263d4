/* Internal to src/comm: recording calls into a graph capture (comm.h's mg_comm_record). While a
 * recorder is set on this thread, a call on a group that moves host buffers (MPI) is validated by
 * comm.c as always, then handed to the recorder as a closure (its arguments copied, the count
 * arrays and operation lists included) instead of running; the closure, replayed, makes the same
 * public call again. Groups with device buffers (NCCL) are not recorded: their calls go to the
 * stream, which a CUDA graph capture holds. Non-blocking point-to-point: a recorded post hands the
 * caller a virtual ticket (2^30 and up, never a real one) that a recorded wait names; at replay the
 * post's real ticket is kept under the virtual one for the wait.
 * Exports: mg_comm_rec_on, mg_comm_rec_ticket and one mg_comm_rec_<call> per recorded call. */
#ifndef MG_COMM_RECORD_H
#define MG_COMM_RECORD_H

#include "comm/comm_backend.h"

/* Whether calls on c are recorded now (a recorder is set on this thread; c moves host buffers). */
bool mg_comm_rec_on(const mg_comm *c);
/* The recorded calls, after comm.c's checks (no stream: MPI takes none; a replay calls the public
 * function again with the arguments given here). */
typedef mg_status (*mg_comm_rec_fn)(const void *args);
mg_status mg_comm_rec_call(mg_comm_rec_fn fn, const void *args, size_t size);
typedef enum {
    MG_COMM_REC_ALL_REDUCE,
    MG_COMM_REC_REDUCE_SCATTER,
    MG_COMM_REC_ALL_GATHER
} mg_comm_rec_kind;
/* op is unused by all_gather */
mg_status mg_comm_rec_reduce(mg_comm_rec_kind kind, mg_comm *c, const void *send, void *recv,
                             size_t count, mg_dtype dt, mg_reduce_op op);
mg_status mg_comm_rec_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, mg_dtype dt);
mg_status mg_comm_rec_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root);
mg_status mg_comm_rec_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops);
mg_status mg_comm_rec_p2p_wait(mg_comm *c, mg_p2p_ticket ticket);
mg_status mg_comm_rec_barrier(mg_comm *c);
/* A post recorded: *ticket receives a virtual ticket for the recorded wait. */
mg_status mg_comm_rec_p2p_post(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket);
/* The real ticket behind a ticket a wait names: a virtual one's post's, at replay; others as they
 * are. MG_ERR_USAGE for a virtual ticket no replayed post has filled. */
mg_status mg_comm_rec_ticket(mg_comm *c, mg_p2p_ticket ticket, mg_p2p_ticket *real);

#endif
