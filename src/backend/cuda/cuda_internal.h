/* Internal to src/backend/cuda: the backend's private state and the helpers every op file uses.
 * Usable from C (cuda_backend.c) and CUDA C++ (*.cu). Needs: CUDA runtime, cuBLASLt. */
#ifndef MG_BACKEND_CUDA_INTERNAL_H
#define MG_BACKEND_CUDA_INTERNAL_H

#include "backend/cuda/cuda_ops.h"
#include "core/status.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_cuda_staging mg_cuda_staging; /* staging.c */

#define MG_CUDA_COPY_STREAMS 4 /* the most streams a copy into a peer's memory is split over */

/* be->ctx of the CUDA backend. Created once by mg_backend_cuda_create_dtype; nothing in it changes
 * size after creation, so a step allocates nothing. */
typedef struct {
    int device;
    cudaStream_t stream;      /* compute stream: every op runs here */
    cudaStream_t comm_stream; /* communication stream (stream_handle(MG_STREAM_COMM)) */
    cudaStream_t tp_stream;   /* tensor-parallel overlap stream (MG_STREAM_TP) */
    cudaStream_t pp_stream;   /* the pipeline's messages (MG_STREAM_PP) */
    /* peer_reduce.cu: a copy into a peer's memory split over copy_split streams
     * (MG_PEER_COPY_STREAMS > 1), so that several copy engines move it; a set for each calling
     * stream (a TP copy never queues behind a data-parallel one), forked from and joined to it
     * by the events; created only where copy_split > 1 */
    cudaStream_t copy_stream[MG_STREAMS][MG_CUDA_COPY_STREAMS];
    cudaEvent_t copy_fork[MG_STREAMS], copy_join[MG_STREAMS][MG_CUDA_COPY_STREAMS];
    int copy_split;
    cudaEvent_t order_event[MG_STREAMS]; /* stream_wait\'s, one per signalling stream */
    cudaEvent_t marks[MG_STREAM_MARKS];  /* stream_mark's slots */
    cudaEvent_t timer[MG_TIMER_POINTS];  /* timer_mark's points (timing events) */
    cublasLtHandle_t lt;                 /* cuBLASLt handle (GEMMs) */
    void *workspace;                     /* device scratch: cuBLASLt workspace and op temporaries */
    size_t workspace_bytes;   /* reserved at creation (MG_CUDA_WORKSPACE_MB, default 2048 MiB) */
    int num_sms;              /* multiprocessors, for grid sizing */
    void *cudnn_attn;         /* attention_cudnn.cu's state (cuDNN handle, plans), or NULL */
    mg_cuda_staging *staging; /* pinned ring for small host-to-device copies (staging.c) */
    /* Debug counters, read by the tests to prove a step allocates and synchronises nothing:
     * every cudaMalloc/cudaFree and every host synchronisation done through the backend. */
    uint64_t n_device_allocs, n_device_frees, n_host_syncs;
    uint64_t n_graph_launches; /* graph.c: the graphs launched */
    /* graph.c: the first refusal inside the capture under way (MG_OK: none), and its message */
    mg_status capture_err;
    char capture_msg[256];
} mg_cuda_ctx;

/* graph.c: whether the compute stream is being captured into a graph; the refusal of an entry
 * that a graph cannot hold (backend_ops.h's list): MG_ERR_UNSUPPORTED naming it, remembered so
 * that graph_end fails with it. */
bool mg_cuda_capturing(mg_backend *be);
mg_status mg_cuda_refuse_in_capture(mg_backend *be, const char *op);

/* staging.c: small copies through pinned memory, no stream synchronisation; *done = false
 * (nothing enqueued) for copies larger than a slot. */
mg_status mg_cuda_staging_init(mg_cuda_ctx *c);
void mg_cuda_staging_destroy(mg_cuda_ctx *c);
mg_status mg_cuda_staging_copy_h2d(mg_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                                   bool *done);

static inline mg_cuda_ctx *mg_cuda_ctx_of(mg_backend *be) {
    return (mg_cuda_ctx *)be->ctx;
}
static inline cudaStream_t mg_cuda_stream(mg_backend *be) {
    return mg_cuda_ctx_of(be)->stream;
}

/* cuda_table.c: mg_cuda_table_fill sets every entry of the table (backend_ops.h) to the
 * launchers of be's compute dtype (no device work: called first at creation); mg_cuda_ops_init
 * runs their one-time set-up once the context (stream, cuBLASLt handle, workspace) exists:
 * attention kernels' shared memory, the grouped GEMM's choice, MG_ATTENTION. */
void mg_cuda_table_fill(mg_backend *be);
mg_status mg_cuda_ops_init(mg_backend *be);
/* peer_reduce.cu: loads the kernels of peer_push and peer_sum (their first launch may not wait
 * for the device). */
mg_status mg_cuda_peer_reduce_load(void);

#ifndef __CUDACC__
/* For code built once (cuda_backend.c, cuda_table.c, tests/cuda): MG_CUDA_BY_DTYPE(be, op) is
 * the one of mg_cuda_<op> and mg_cuda_f16_<op> that serves be's compute dtype (both are declared
 * in C, cuda_ops.h). MG_CUDA_F16_DECLARE(op) only redeclares mg_cuda_f16_<op> with the type of
 * mg_cuda_<op> (kept for tests/cuda/cuda_test_util.h). */
#define MG_CUDA_F16_DECLARE(op)  extern __typeof__(mg_cuda_##op) mg_cuda_f16_##op
#define MG_CUDA_BY_DTYPE(be, op) ((be)->compute_dtype == MG_F16 ? mg_cuda_f16_##op : mg_cuda_##op)
#endif

/* Turns a CUDA error into an mg_status with the call's text, the CUDA error name and string. */
mg_status mg_cuda_error(cudaError_t e, const char *expr, const char *func, const char *file,
                        int line);
mg_status mg_cublas_error(cublasStatus_t s, const char *expr, const char *func, const char *file,
                          int line);

#define MG_CUDA_CHECK(expr)                                                                        \
    do {                                                                                           \
        cudaError_t mg_cuda_e_ = (expr);                                                           \
        if (mg_cuda_e_ != cudaSuccess)                                                             \
            return mg_cuda_error(mg_cuda_e_, #expr, __func__, __FILE__, __LINE__);                 \
    } while (0)

/* After a kernel launch: the launch's own error (bad configuration), not the kernel's result. */
#define MG_CUDA_CHECK_LAUNCH() MG_CUDA_CHECK(cudaGetLastError())

#define MG_CUBLAS_CHECK(expr)                                                                      \
    do {                                                                                           \
        cublasStatus_t mg_cublas_s_ = (expr);                                                      \
        if (mg_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return mg_cublas_error(mg_cublas_s_, #expr, __func__, __FILE__, __LINE__);             \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
