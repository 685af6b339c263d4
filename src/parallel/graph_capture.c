/* One graph capture with its collectives (parallel/graph_capture.h). */
#include "parallel/graph_capture.h"

#include "backend/graph_record.h"
#include "comm/comm.h"

/* mg_comm_record's recorder on a recording backend: each collective a host call of its graph. */
static mg_status record_collective(void *ctx, mg_status (*call)(const void *args), const void *args,
                                   size_t size) {
    return mg_graph_rec_host_call(ctx, call, args, size);
}

mg_status mg_graph_capture(mg_backend *be, mg_status (*fn)(void *ctx), void *ctx, mg_graph **out,
                           mg_graph_info *info) {
    *out = NULL;
    MG_CHECK(be->graph_begin(be));
    const mg_comm_recorder rec = {record_collective, be};
    if (be->recording) {
        mg_graph_rec_accept_host_calls(be);
        mg_comm_record(&rec);
    }
    mg_status st = fn(ctx);
    mg_comm_record(NULL);
    mg_status end = be->graph_end(be, out, info); /* ends the capture in every case */
    if (st != MG_OK && *out) {
        be->graph_free(be, *out);
        *out = NULL;
    }
    return st != MG_OK ? st : end;
}
