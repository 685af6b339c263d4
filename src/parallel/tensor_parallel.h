/* Tensor-parallel communication (Megatron's tensor_parallel/mappings.py), as explicit calls: the
 * model calls the forward half of a mapping in its forward and the backward half in its backward.
 *   Megatron's mapping                          forward              backward
 *   copy_to_tensor_model_parallel_region        identity             mg_tp_all_reduce
 *   reduce_from_tensor_model_parallel_region    mg_tp_all_reduce     identity
 *   gather_from_sequence_parallel_region        mg_tp_all_gather     mg_tp_reduce_scatter
 *   reduce_scatter_to_sequence_parallel_region  mg_tp_reduce_scatter mg_tp_all_gather
 * Sequence-parallel tensors are split by rows: rank r holds rows [r*n, (r+1)*n) of the (T*n, w)
 * whole (the microbatch's tokens, contiguous). Any split of the tokens gives the same model,
 * since everything between the all-gather and the reduce-scatter is row-wise.
 *
 * Streams: every call goes to the backend's compute stream (NULL on the CPU backend, whose MPI
 * calls complete before returning): most tensor-parallel collectives sit between two GEMMs that
 * need their result, so there is nothing to overlap them with there and no event pair to pay.
 * The exceptions run on the tensor-parallel stream (MG_STREAM_TP) beside a GEMM that does not
 * need their result, and mg_tp_join makes the compute stream wait for them (Megatron's
 * --tp-comm-overlap): the backward of a column-parallel linear (QKV, fc1) reduces its input
 * gradient (mg_tp_reduce_begin) while its weight gradient's GEMM runs; under SP the forward
 * gathers the norm's rows (mg_tp_gather_begin) while the linear computes the rows of this rank's
 * own tokens, and the row-parallel backward gathers its output gradient while the input gradient
 * of this rank's rows is computed.
 * Where the group's ranks map each other's memory (a peer window bound by mg_tp_bind_peer), the
 * exchanges of sequence parallelism can go as copies instead of collectives: every all-gather
 * whose blocks fit the window's slots (each rank's block copied into every peer's memory, then
 * into place; not where NCCL gathers on the copy engines itself), and the reduce-scatters asked for
 * by mg_tp_push_begin / mg_tp_push_end, where each rank computes the other ranks' rows of a partial
 * product first and copies them into the owners' memory on the tensor-parallel stream while it
 * computes its own rows, each then adding what arrived to its own rows. The copy engines move them
 * on CUDA: no multiprocessor is taken from the GEMMs beside them. The data-parallel reductions run
 * on the communication stream (parallel/ddp.h) and order themselves after the compute stream's
 * work. With one rank (size 1, or no group) every call is a copy where source and destination
 * differ, else nothing. Exports: mg_tp, mg_tp_init, mg_tp_all_reduce, mg_tp_all_reduce_many,
 * mg_tp_all_gather, mg_tp_reduce_scatter, mg_tp_reduce, mg_tp_reduce_begin, mg_tp_gather_begin,
 * mg_tp_join, mg_tp_bind_peer, mg_tp_bind_direct, mg_tp_pushes, mg_tp_push_begin, mg_tp_push_end.
 * Needs: comm, backend, core/peer_window. */
#ifndef MG_PARALLEL_TENSOR_PARALLEL_H
#define MG_PARALLEL_TENSOR_PARALLEL_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/peer_window.h"

typedef struct {
    mg_comm *group;                  /* not owned; NULL: one rank */
    mg_backend *be;                  /* not owned */
    const mg_peer_window *peer;      /* not owned; NULL: the reduce-scatters by the collective */
    const mg_peer_window *direct[2]; /* not owned: memory the gathers write straight into (NULL:
                                        none), mg_tp_bind_direct */
    int rank, size;
} mg_tp;

/* group may be NULL (one rank). */
void mg_tp_init(mg_tp *tp, mg_comm *group, mg_backend *be);
/* In place: buf (n) of dtype dt becomes op over the group of every rank's buf. */
mg_status mg_tp_all_reduce(const mg_tp *tp, void *buf, size_t n, mg_dtype dt, mg_reduce_op op);
/* Several buffers in place at once (comm.h's mg_comm_all_reduce_many), on the compute stream. */
mg_status mg_tp_all_reduce_many(const mg_tp *tp, void *const *bufs, const size_t *counts, int n,
                                mg_dtype dt, mg_reduce_op op);
/* whole (size*n) = every rank's part (n) in rank order; part may be whole + rank*n (in place). */
mg_status mg_tp_all_gather(const mg_tp *tp, void *whole, const void *part, size_t n, mg_dtype dt);
/* part (n) = the sum over ranks of rows [rank*n, (rank+1)*n) of each rank's whole (size*n);
 * part may be whole + rank*n (in place). */
mg_status mg_tp_reduce_scatter(const mg_tp *tp, void *part, const void *whole, size_t n,
                               mg_dtype dt);
/* The sum of whole over the group: with sp, part (n) = this rank's rows of it (whole: size*n;
 * mg_tp_reduce_scatter), else whole (n) summed in place (mg_tp_all_reduce; part unused). */
mg_status mg_tp_reduce(const mg_tp *tp, void *part, void *whole, size_t n, mg_dtype dt, bool sp);
/* mg_tp_reduce started behind the compute stream's work so far and running beside what the
 * compute stream does next (part may be whole + rank*n). Until mg_tp_join, the compute stream must
 * neither read part or whole nor write whole. */
mg_status mg_tp_reduce_begin(const mg_tp *tp, void *part, void *whole, size_t n, mg_dtype dt,
                             bool sp);
/* mg_tp_all_gather started the same way: until mg_tp_join the compute stream may read part but
 * must not touch the rest of whole, nor write part. */
mg_status mg_tp_gather_begin(const mg_tp *tp, void *whole, const void *part, size_t n, mg_dtype dt);
/* The compute stream's later work waits for what mg_tp_reduce_begin or mg_tp_gather_begin
 * started. */
mg_status mg_tp_join(const mg_tp *tp);

/* The group's peer-mapped memory (comm.h's mg_comm_peer_window_alloc over the group; NULL: none),
 * at least size blocks as large as any push's. */
void mg_tp_bind_peer(mg_tp *tp, const mg_peer_window *pw);
/* Memory of the group's ranks mapped at the same offsets on each (the activations' and the
 * workspace's arenas, committed in peer-mapped memory from the same plan): a gather whose
 * destination lies in one copies this rank's rows straight into every peer's destination
 * (the backend's peer_put: two meetings of the ranks around the copies, through the bound
 * window's flags), instead of through the window's slots. NULL entries: none. */
void mg_tp_bind_direct(mg_tp *tp, const mg_peer_window *acts, const mg_peer_window *work);
/* Whether reduce-scatters may go as copies: a bound window and a backend with peer_push and
 * peer_sum. */
bool mg_tp_pushes(const mg_tp *tp);
/* whole: size blocks of n values, block q a partial sum of rank q's rows. The other ranks'
 * blocks start toward them on the tensor-parallel stream, after the compute stream's work so
 * far. Every rank pushes and ends in the same order; until mg_tp_push_end the compute stream
 * must not write whole. */
mg_status mg_tp_push_begin(const mg_tp *tp, const void *whole, size_t n, mg_dtype dt);
/* part (n) = own (this rank's block of its push; part may be own) plus what the other ranks
 * pushed to this one, summed in rank order, then with bias (H) or residual (n) closed as the
 * backend's bias_residual_add closes rows of H (in the same pass: the backend's peer_sum; H 0
 * without them); the compute stream's later work then waits for this rank's push. */
mg_status mg_tp_push_end(const mg_tp *tp, void *part, const void *own, size_t n, const void *bias,
                         const void *residual, int H);

#endif
