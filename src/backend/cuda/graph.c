/* Graphs on the CUDA backend (backend_ops.h's graph entries): stream capture of the compute
 * stream, with the communication stream forked into the capture at graph_begin and joined back
 * at graph_end, so collectives enqueued on it between the two (NCCL's kernels) are part of the
 * graph; cudaGraphInstantiate, uploaded once, cudaGraphLaunch on the compute stream.
 * Capture mode: thread-local, so a call the capture cannot hold from this thread (a cudaMalloc,
 * a synchronisation) fails at once instead of running outside the graph. The entries that
 * backend_ops.h refuses inside a capture check mg_cuda_capturing first and fail with one line
 * naming the op (mg_cuda_refuse_in_capture), which also spoils the capture: graph_end then ends
 * it and returns that error.
 * Exports: mg_cuda_graph_begin, mg_cuda_graph_end, mg_cuda_graph_launch, mg_cuda_graph_free,
 * mg_cuda_capturing, mg_cuda_refuse_in_capture (cuda_internal.h). */
#include "backend/cuda/cuda_internal.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

struct mg_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

bool mg_cuda_capturing(mg_backend *be) {
    enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(mg_cuda_stream(be), &s) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return s != cudaStreamCaptureStatusNone;
}

mg_status mg_cuda_refuse_in_capture(mg_backend *be, const char *op) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    mg_status st = MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s inside a graph capture: a graph can only hold work that needs no "
                           "host wait or allocation (backend_ops.h)",
                           op);
    if (c->capture_err == MG_OK) {
        c->capture_err = st;
        snprintf(c->capture_msg, sizeof c->capture_msg, "%s", mg_error_message());
    }
    return st;
}

mg_status mg_cuda_graph_begin(mg_backend *be) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "graph_begin");
    c->capture_err = MG_OK;
    c->capture_msg[0] = 0;
    MG_CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    /* the side streams join the capture: they wait for the capture's start */
    const cudaStream_t side[] = {c->comm_stream, c->tp_stream, c->pp_stream};
    cudaError_t e = cudaEventRecord(c->order_event[MG_STREAM_COMPUTE], c->stream);
    for (int i = 0; i < MG_STREAMS - 1 && e == cudaSuccess; i++)
        e = cudaStreamWaitEvent(side[i], c->order_event[MG_STREAM_COMPUTE], 0);
    if (e != cudaSuccess) {
        cudaGraph_t g = NULL;
        (void)cudaStreamEndCapture(c->stream, &g);
        if (g) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        MG_CUDA_CHECK(e);
    }
    return MG_OK;
}

mg_status mg_cuda_graph_end(mg_backend *be, mg_graph **out, mg_graph_info *info) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    *out = NULL;
    if (info) *info = (mg_graph_info){0, 0};
    if (!mg_cuda_capturing(be)) return MG_FAIL(MG_ERR_UNSUPPORTED, "graph_end without graph_begin");
    /* the side streams' captured work joins the compute stream's before the end */
    const cudaStream_t side[] = {c->comm_stream, c->tp_stream, c->pp_stream};
    const mg_stream_id ids[] = {MG_STREAM_COMM, MG_STREAM_TP, MG_STREAM_PP};
    cudaError_t join = cudaSuccess;
    for (int i = 0; i < MG_STREAMS - 1 && join == cudaSuccess; i++) {
        join = cudaEventRecord(c->order_event[ids[i]], side[i]);
        if (join == cudaSuccess) join = cudaStreamWaitEvent(c->stream, c->order_event[ids[i]], 0);
    }
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    mg_status spoilt = c->capture_err;
    c->capture_err = MG_OK;
    if (spoilt != MG_OK || join != cudaSuccess || e != cudaSuccess) {
        if (graph) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        if (spoilt != MG_OK) return MG_FAIL(spoilt, "graph capture abandoned: %s", c->capture_msg);
        MG_CUDA_CHECK(join != cudaSuccess ? join : e);
    }
    size_t free0 = 0, free1 = 0, total = 0;
    MG_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    mg_graph *g = calloc(1, sizeof *g);
    if (!g) {
        (void)cudaGraphDestroy(graph);
        return MG_FAIL(MG_ERR_NOMEM, "graph capture: out of host memory");
    }
    g->graph = graph;
    cudaError_t ie = cudaGraphInstantiateWithFlags(&g->exec, graph, 0);
    if (ie == cudaSuccess) ie = cudaGraphUpload(g->exec, c->stream);
    if (ie != cudaSuccess) {
        mg_cuda_graph_free(be, g);
        MG_CUDA_CHECK(ie);
    }
    size_t nodes = 0;
    MG_CUDA_CHECK(cudaGraphGetNodes(graph, NULL, &nodes));
    MG_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    if (info) *info = (mg_graph_info){nodes, free0 > free1 ? free0 - free1 : 0};
    *out = g;
    return MG_OK;
}

mg_status mg_cuda_graph_launch(mg_backend *be, mg_graph *g) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "graph_launch");
    MG_CUDA_CHECK(cudaGraphLaunch(g->exec, mg_cuda_stream(be)));
    mg_cuda_ctx_of(be)->n_graph_launches++;
    return MG_OK;
}

void mg_cuda_graph_free(mg_backend *be, mg_graph *g) {
    (void)be;
    if (!g) return;
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    free(g);
}
