/* One graph capture of a piece of work that may hold collectives: the backend's capture
 * (backend_ops.h's graph entries) with, on a backend that records its ops (the CPU's,
 * backend/graph_record.h), the calls on host-buffer groups (MPI) recorded in order with the ops
 * (comm.h's mg_comm_record); NCCL calls go to the streams a CUDA capture holds. Used by the
 * trainer's full-iteration graphs (train/trainer_graph.h) and the per-layer graphs
 * (model/layer_graphs.h).
 * Exports: mg_graph_capture. Needs: backend, comm. */
#ifndef MG_PARALLEL_GRAPH_CAPTURE_H
#define MG_PARALLEL_GRAPH_CAPTURE_H

#include "backend/backend.h"

/* Captures fn(ctx) (which runs nothing while captured) into *out; the capture always ends, and
 * *out is NULL with fn's or the capture's first error. info (may be NULL): the graph's size. */
mg_status mg_graph_capture(mg_backend *be, mg_status (*fn)(void *ctx), void *ctx, mg_graph **out,
                           mg_graph_info *info);

#endif
