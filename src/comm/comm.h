/* Communication: one interface over two backends.
 *   MPI  (Open MPI; host buffers)   — the CPU path and every multi-rank CPU test.
 *   NCCL (device buffers)           — the GPU path; groups are made with ncclCommSplit.
 *
 * Life cycle (src/cli/train.c, tests/dist/):
 *   mg_launch_info li;  MG_CHECK(mg_launch_detect(&li));          // env only: mpirun, srun,
 * torchrun mg_comm_world *w;   MG_CHECK(mg_comm_world_init(&li, MG_COMM_MPI, timeout_s, &w));
 *   mg_comm *dp;        MG_CHECK(mg_comm_group_create(w, "dp", n_groups, offsets, ranks, &dp));
 *   MG_CHECK(mg_comm_all_reduce(dp, buf, buf, n, MG_F32, MG_REDUCE_SUM, stream));
 *   ...
 *   on any error on the way to main(): mg_comm_world_fail(w, mg_error_message());  // tells peers
 *   mg_comm_group_free(dp); mg_comm_world_finalize(w);
 *
 * Groups: every rank calls mg_comm_group_create with the same full list of groups (Megatron's
 * new_group style, e.g. all tp groups from parallel_state), in the same order on every rank. The
 * rank gets the communicator of the group holding it (ranks inside keep the list's order: group
 * rank i is ranks[offsets[g] + i]); a rank in no group gets *out == NULL. Collective over the
 * world.
 *
 * Calls: every operation names a group and a stream (cudaStream_t as void*; NULL = the default
 * stream; ignored by MPI). Counts are in elements. send == recv is allowed (in place) for
 * all-reduce and broadcast; for reduce-scatter recv may be send + rank*count, for all-gather send
 * may be recv + rank*count (NCCL's in-place conventions). MPI calls complete before returning;
 * NCCL calls are enqueued on the stream (mg_comm_sync waits, with the timeout).
 *
 * Reductions: sum, avg, max for F32, BF16, F16 (accumulated in fp32 inside MPI's user op and
 * rounded to nearest even once per pairwise combine), I32, I64 (avg on integers is an error).
 *
 * Failures: no rank hangs. Every wait is bounded by the timeout (--distributed-timeout-minutes,
 * default 10). A rank whose run fails calls mg_comm_world_fail, which tells every peer (rank and
 * message) before exiting; a peer waiting in any call then returns MG_ERR_COMM with one line like
 *   "rank 1 failed: <its message> (this rank, 2, was in all_reduce #17 on group 'dp')"
 * and a call that times out returns, after asking every rank where it waits (up to min(1 s,
 * timeout/4) more; health.c)
 *   "all_reduce #17 on group 'dp' (ranks 0,2,4,6) timed out after 600 s on rank 2; ranks that did
 *    not reach it: 4,6 (rank 6 is in broadcast #3 on group 'tp')"
 * naming the members not waiting in this call (busy elsewhere, dead, or already past it: a
 * broadcast's root), and where those waiting in another call are; "none (...)" when all wait in
 * it. The peers print that line as the failure of the rank that timed out first.
 * After MG_ERR_COMM the communicators are aborted (NCCL: ncclCommAbort); the only valid calls
 * are mg_comm_world_fail and mg_comm_world_finalize.
 *
 * Exports: mg_comm_world_*, mg_comm_group_*, the collectives below; mg_launch_* through
 * comm/launch.h (launch.c), which this header includes.
 * Needs: comm/launch, core/status, core/tensor; Open MPI and NCCL when the build found them
 * (MG_HAVE_MPI, MG_HAVE_NCCL); without them the backend's init returns MG_ERR_UNSUPPORTED naming
 * the fix. */
#ifndef MG_COMM_H
#define MG_COMM_H

#include "comm/launch.h" /* mg_launch_info, mg_launch_detect (launch.c) */
#include "core/peer_window.h"
#include "core/status.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- the world and its groups ---- */
typedef enum { MG_COMM_MPI = 0, MG_COMM_NCCL } mg_comm_backend;
typedef enum { MG_REDUCE_SUM = 0, MG_REDUCE_AVG, MG_REDUCE_MAX } mg_reduce_op;

typedef struct mg_comm_world mg_comm_world;
typedef struct mg_comm mg_comm;

/* Initialises the backend over all ranks of the launch. MPI: MPI_Init_thread (needs an MPI launch
 * or a single rank). NCCL: selects device local_rank, exchanges the unique id over MPI (MPI
 * launch) or the TCP rendezvous at MASTER_ADDR:MASTER_PORT (env launch). timeout_s bounds every
 * wait, the rendezvous included. */
mg_status mg_comm_world_init(const mg_launch_info *li, mg_comm_backend backend, double timeout_s,
                             mg_comm_world **out);
int mg_comm_world_rank(const mg_comm_world *w);
int mg_comm_world_size(const mg_comm_world *w);
mg_comm *mg_comm_world_comm(mg_comm_world *w); /* the group of all ranks, named "world" */

/* This rank failed with `message`: tell every peer (best effort, bounded), abort the
 * communicators. Safe to call in any state, also before init finished (w may be NULL). */
void mg_comm_world_fail(mg_comm_world *w, const char *message);
/* Frees the groups still open and finalises the backend (MPI_Finalize). w may be NULL. */
void mg_comm_world_finalize(mg_comm_world *w);

/* See "Groups" above. name is copied ("tp", "dp_cp", ...) and appears in error messages. */
mg_status mg_comm_group_create(mg_comm_world *w, const char *name, int n_groups, const int *offsets,
                               const int *ranks, mg_comm **out);
void mg_comm_group_free(mg_comm *c);
int mg_comm_rank(const mg_comm *c); /* rank inside the group */
int mg_comm_size(const mg_comm *c);
int mg_comm_global_rank(const mg_comm *c, int group_rank);
const char *mg_comm_name(const mg_comm *c);
/* Whether the group moves device buffers (NCCL) rather than host buffers (MPI). */
bool mg_comm_device_buffers(const mg_comm *c);

/* ---- collectives (see "Calls" above for buffer and stream rules) ---- */
/* recv[i] = op over ranks of send[i], i < count. */
mg_status mg_comm_all_reduce(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                             mg_reduce_op op, void *stream);
/* In place, several buffers at once: bufs[k] (counts[k] elements each) = op over ranks of
 * bufs[k], k < n, as n calls of mg_comm_all_reduce would leave them, in one launch where the
 * backend groups calls (NCCL); a loop elsewhere. */
mg_status mg_comm_all_reduce_many(mg_comm *c, void *const *bufs, const size_t *counts, int n,
                                  mg_dtype dt, mg_reduce_op op, void *stream);
/* send holds size*count elements; rank r receives op over ranks of send[r*count .. +count). */
mg_status mg_comm_reduce_scatter(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, mg_reduce_op op, void *stream);
/* recv (size*count) = concatenation of every rank's send (count) in group-rank order. */
mg_status mg_comm_all_gather(mg_comm *c, const void *send, void *recv, size_t count, mg_dtype dt,
                             void *stream);
/* Per-peer counts and displacements, in elements, each an array of mg_comm_size(c) entries:
 * send_counts[p] elements from send + send_displs[p] go to peer p, which stores them at its
 * recv + recv_displs[me]. */
mg_status mg_comm_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv, const size_t *recv_counts,
                             const size_t *recv_displs, mg_dtype dt, void *stream);
/* buf (count) from group rank root to all. */
mg_status mg_comm_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                            void *stream);

/* Batched point-to-point: all ops are posted together and complete together (ncclGroupStart/End,
 * MPI_Isend/Irecv + wait), so a send and a receive with the same peer cannot deadlock. */
typedef struct {
    bool is_send;
    int peer; /* group rank */
    void *buf;
    size_t count;
    mg_dtype dt;
} mg_p2p_op;
mg_status mg_comm_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream);

/* Non-blocking point-to-point, on backends whose messages need no stream order (MPI, host
 * buffers; mg_comm_p2p_async says whether the group has them): mg_comm_p2p_post posts one send
 * or receive and returns at once with a ticket; mg_comm_p2p_wait completes it (bounded by the
 * timeout and interrupted by a peer's failure notice, as every call). Messages match by peer and
 * tag (0 <= tag < 32768, MPI's least upper bound), so posting order between different tags does
 * not matter; with one tag they match in posting order. A buffer is the caller's until its
 * ticket is waited. Every ticket must be waited before the group is freed. */
typedef int mg_p2p_ticket;
#define MG_P2P_TAGS 32768
bool mg_comm_p2p_async(const mg_comm *c);
mg_status mg_comm_p2p_post(mg_comm *c, const mg_p2p_op *op, int tag, mg_p2p_ticket *ticket);
mg_status mg_comm_p2p_wait(mg_comm *c, mg_p2p_ticket ticket);

mg_status mg_comm_barrier(mg_comm *c, void *stream);

/* ---- copy-engine collectives (NCCL >= 2.28, one node, MG_NCCL_COPY_ENGINE=1) ----
 * NCCL runs an all-gather, and an all-to-all of equal parts in peer order, on the GPU's copy
 * engines, with no multiprocessors (the GEMMs beside it keep them all), when both buffers lie in
 * memory from ncclMemAlloc registered as a symmetric window on a communicator with its zero-CTA
 * policy (measured on 2 H200s: 1.2-1.5x faster than its kernels at 64-256 MiB; bench/comm.c
 * --zero-cta). mg_comm_copy_engine says whether the world of c does that. Then
 * mg_comm_sym_alloc gives memory (zeroed) registered on each of `groups` (collective over each,
 * in the order given: every member allocates the same sizes in the same order, and calls on the
 * group must use equal offsets into it on every member, as a plan's arenas do), and those
 * groups' all-gathers and equal all-to-alls whose buffers lie inside it go to the copy engines;
 * the other calls and other memory are unchanged. mg_comm_sym_free deregisters (collective too)
 * and frees. Elsewhere mg_comm_copy_engine is false and mg_comm_sym_alloc MG_ERR_UNSUPPORTED. */
bool mg_comm_copy_engine(const mg_comm *c);
mg_status mg_comm_sym_alloc(mg_comm *const *groups, int n_groups, size_t bytes, void **out);
void mg_comm_sym_free(mg_comm *const *groups, int n_groups, void *ptr);
/* The same without the collective deregistration, for a rank that stops on an error (its peers
 * may never come to deregister; the communicators are aborted next). */
void mg_comm_sym_abandon(mg_comm *const *groups, int n_groups, void *ptr);

/* ---- peer-mapped memory (NCCL or MPI backend, the group's ranks on one node) ----
 * mg_comm_peer_window_alloc (collective over c) gives each rank `bytes` of zeroed memory and a
 * barrier's flags (core/peer_window.h), and maps every other rank's into this process, so the
 * backend's ops read and write the peers' memory with no collective call: on NCCL device memory
 * mapped by CUDA IPC, on MPI host memory from one of MPI's shared-memory windows. The NCCL
 * window's abort word (core/peer_window.h) is set when the world fails (the watchdog: a peer
 * gone, a timeout), so that kernels waiting for a peer give up and the streams drain; a host
 * wait gives up after the window's timeout (the world's). Every rank must ask for the same bytes.
 * MG_ERR_UNSUPPORTED, on every rank alike, where that cannot be: ranks that asked for different
 * sizes, the one-rank backend, more than MG_PEER_MAX ranks, ranks on several hosts, a device that
 * cannot map a peer's memory.
 * mg_comm_peer_window_free unmaps and frees (collective unless `abandon`: a rank that stops on
 * an error frees without waiting for its peers). */
mg_status mg_comm_peer_window_alloc(mg_comm *c, size_t bytes, mg_peer_window *out);
void mg_comm_peer_window_free(mg_comm *c, mg_peer_window *pw, bool abandon);

/* Waits until every operation enqueued on `stream` through c has finished, bounded by the
 * timeout and interrupted by a peer's failure notice. MPI: returns at once. */
mg_status mg_comm_sync(mg_comm *c, void *stream);

const char *mg_reduce_op_name(mg_reduce_op op); /* "sum", "avg", "max" */

/* Recording into a graph capture (a backend that records its ops, backend/graph_record.h): while
 * r is set on this thread, every call on a group that moves host buffers (MPI) is checked as
 * always and then handed to r->record as a closure, call(args) with its arguments copied, instead
 * of running; replaying the closure makes the same call. NULL stops recording. Groups with device
 * buffers (NCCL) are never recorded: their calls go to a stream a CUDA graph capture holds. A
 * recorded non-blocking post gives a virtual ticket, which only a wait recorded in the same
 * capture may name. */
typedef struct {
    mg_status (*record)(void *ctx, mg_status (*call)(const void *args), const void *args,
                        size_t size);
    void *ctx;
} mg_comm_recorder;
void mg_comm_record(const mg_comm_recorder *r);

#endif
