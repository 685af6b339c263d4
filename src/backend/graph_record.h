/* Graph capture for a backend that runs each op when it is called (the CPU backend): the
 * implementation of backend_ops.h's graph entries by recording calls.
 *
 * mg_graph_rec_begin swaps every entry of the table that does work (the compute ops and the
 * memory, copy and stream ops) for a recorder that stores the call's arguments by value, as a
 * CUDA kernel launch stores its parameters: the scalars, the pointers, and copies of the dropout,
 * routing and step-rule structures the pointers designate (they usually live on the caller's
 * stack). mg_graph_rec_end puts the table back and returns the calls in order; a launch calls the
 * same entries with the same arguments again. So a value the caller passed by argument is frozen
 * into the graph and a value read from backend memory is read anew, exactly as in a CUDA graph:
 * replaying on this backend shows, without a GPU, whether a step depends on anything but its
 * buffers. The entries backend_ops.h refuses inside a capture fail with MG_ERR_UNSUPPORTED naming
 * the op and spoil the capture (mg_graph_rec_end returns the same error). The queries (memory
 * info, attention's saved bytes, the stream handles) and the frees pass through.
 * Exports: mg_graph_rec_begin, mg_graph_rec_end, mg_graph_rec_launch, mg_graph_rec_free,
 * mg_graph_rec_refuse, mg_graph_rec_accept_host_calls, mg_graph_rec_takes_host_calls,
 * mg_graph_rec_host_call.
 * Needs: backend/backend.h. */
#ifndef MG_BACKEND_GRAPH_RECORD_H
#define MG_BACKEND_GRAPH_RECORD_H

#include "backend/backend.h"

mg_status mg_graph_rec_begin(mg_backend *be);
/* Ends the capture (always) and restores the table; *out the graph, or NULL and the first error
 * of the capture. info (may be NULL): the calls, and the bytes of their stored arguments. */
mg_status mg_graph_rec_end(mg_backend *be, mg_graph **out, mg_graph_info *info);
mg_status mg_graph_rec_launch(mg_backend *be, mg_graph *g);
void mg_graph_rec_free(mg_graph *g);
/* Refuses `what` inside the capture under way on be (MG_ERR_UNSUPPORTED naming it) and spoils
 * the capture; for callers outside the table (a collective, backend.c). */
mg_status mg_graph_rec_refuse(mg_backend *be, const char *what);
/* Host calls in the capture under way: once accepted (mg_graph_rec_accept_host_calls, by whoever
 * also routes the collectives there: comm.h's mg_comm_record), mg_graph_rec_host_call appends
 * fn(args) (args copied, size bytes) to the graph in order with the recorded ops, and
 * mg_backend_comm_begin no longer refuses a collective. */
void mg_graph_rec_accept_host_calls(mg_backend *be);
bool mg_graph_rec_takes_host_calls(const mg_backend *be);
mg_status mg_graph_rec_host_call(mg_backend *be, mg_status (*fn)(const void *args),
                                 const void *args, size_t size);

#endif
