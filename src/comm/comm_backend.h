/* Internal to src/comm: what a backend (mpi.c, nccl.c, self.c) implements, and the world and group
 * structs that the common layer (comm.c) and the backends share. comm.c validates arguments
 * (counts, dtypes, roots, peers), numbers every call per group (for error messages), checks for a
 * peer's failure notice before each call, and dispatches to the backend's table; what a waiting
 * backend needs (the wait step, the one-line MG_ERR_COMM messages) is comm_wait.h, so no backend
 * calls back into comm.c. This header declares types and the backends' tables only.
 *
 * Failure notices travel over a side channel that does not depend on the data path:
 *   mg_comm_health (health.c) — post(rank, message) to every rank; poll() -> a notice or none.
 *   Always over the TCP rendezvous (rendezvous.c), for every world of more than one rank. comm.c
 *   opens it before the backend's world_init: at MASTER_ADDR:MASTER_PORT for torchrun-style
 *   launches; for MPI launches rank 0 listens on a free port and MPI_Bcasts "host port"
 *   (mpi_bootstrap.c, which also owns MPI_Init/MPI_Finalize for both backends). A backend may use
 *   the rendezvous for its own set-up data (NCCL's unique id): mg_comm_health_rendezvous.
 * Backends wait by polling (MPI_Test / cudaEventQuery) with a deadline and poll the health
 * channel between tests (mg_comm_wait_step), so a waiting rank learns of a peer's failure within
 * milliseconds.
 * Exports: mg_comm_ops, struct mg_comm_world, struct mg_comm, the backends' tables.
 * Needs: comm/comm, comm/health, core/clock. */
#ifndef MG_COMM_BACKEND_H
#define MG_COMM_BACKEND_H

#include "comm/comm.h"
#include "comm/health.h"
#include "core/clock.h" /* mg_clock_seconds: the backends' deadlines */

#include <stdint.h>

typedef struct {
    const char *name; /* "mpi", "nccl" */
    /* World set-up after launch detection; stores backend state in w->impl. */
    mg_status (*world_init)(mg_comm_world *w, const mg_launch_info *li);
    void (*world_abort)(mg_comm_world *w);
    void (*world_finalize)(mg_comm_world *w);
    /* color = index of this rank's group or -1; key = position inside it. Collective. */
    mg_status (*group_split)(mg_comm_world *w, mg_comm *c, int color, int key);
    void (*group_free)(mg_comm *c);
    mg_status (*all_reduce)(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                            mg_reduce_op op, void *stream);
    /* Optional (NCCL): comm.h's mg_comm_all_reduce_many in one group; NULL: comm.c loops */
    mg_status (*all_reduce_many)(mg_comm *c, void *const *bufs, const size_t *counts, int n,
                                 mg_dtype dt, mg_reduce_op op, void *stream);
    mg_status (*reduce_scatter)(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                                mg_reduce_op op, void *stream);
    mg_status (*all_gather)(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                            void *stream);
    mg_status (*all_to_all)(mg_comm *c, const void *send, const size_t *send_counts,
                            const size_t *send_displs, void *recv, const size_t *recv_counts,
                            const size_t *recv_displs, mg_dtype dt, void *stream);
    mg_status (*broadcast)(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                           void *stream);
    mg_status (*batch_p2p)(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream);
    /* Optional (MPI): comm.h's non-blocking point-to-point; NULL where messages are ordered on a
     * stream (NCCL) or there is no peer (self). */
    mg_status (*p2p_post)(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket);
    mg_status (*p2p_wait)(mg_comm *c, mg_p2p_ticket ticket);
    mg_status (*barrier)(mg_comm *c, void *stream);
    mg_status (*sync)(mg_comm *c, void *stream);
    /* Optional (NCCL >= 2.28): comm.h's copy-engine collectives. copy_engine says whether the
     * world turned them on; mem_alloc/mem_free hand out memory that can be registered;
     * window_register (collective over c) and window_deregister route c's all-gathers and
     * equal all-to-alls inside registered windows to the copy engines. */
    bool (*copy_engine)(const mg_comm_world *w);
    mg_status (*mem_alloc)(mg_comm_world *w, size_t bytes, void **out);
    void (*mem_free)(mg_comm_world *w, void *ptr);
    mg_status (*window_register)(mg_comm *c, void *base, size_t bytes);
    void (*window_deregister)(mg_comm *c, void *base);
    /* Optional (NCCL): comm.h's peer-mapped memory; NULL answers MG_ERR_UNSUPPORTED. */
    mg_status (*peer_alloc)(mg_comm *c, size_t bytes, mg_peer_window *out);
    void (*peer_free)(mg_comm *c, mg_peer_window *pw, bool abandon);
} mg_comm_ops;

struct mg_comm_world {
    const mg_comm_ops *ops;
    mg_launch_info launch;
    int rank, size;
    double timeout_s;
    mg_comm_health *health;
    bool failed;      /* a call failed or a peer's notice arrived: only fail/finalize remain */
    mg_comm *world;   /* the "world" group */
    mg_comm **groups; /* every open group, the world's included (comm.c; finalize frees them) */
    int n_groups;     /* ... and their count */
    int cap_groups;   /* ... and the array's capacity */
    void *impl;       /* backend state (MPI_Comm dup, ncclComm_t, device, ...) */
};

struct mg_comm {
    mg_comm_world *w;
    char name[32];
    int rank, size;
    int *global_ranks; /* size entries: group rank -> world rank */
    uint64_t seq;      /* calls made on this group, for messages ("all_reduce #17") */
    const char *call;  /* the call in progress, for messages */
    void *impl;        /* backend communicator */
};

extern const mg_comm_ops mg_comm_mpi_ops;  /* mpi.c */
extern const mg_comm_ops mg_comm_nccl_ops; /* nccl.c */
extern const mg_comm_ops mg_comm_self_ops; /* self.c: MPI backend, world of 1, host copies */

#endif
