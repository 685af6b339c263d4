/* Device buffers for the multi-rank tests (--backend nccl): cudaMalloc'd memory, copies through
 * one non-blocking stream per rank, the stream every collective of the tests is enqueued on.
 * Copies are stream-ordered with the collectives before them and waited for with a bounded poll,
 * so a hung collective fails the test instead of hanging it. The device is chosen as the NCCL
 * backend chooses it (src/comm/nccl.c): local rank, or the only GPU a process sees. */
#ifdef MG_HAVE_NCCL

#include "dist_buf.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>

/* Longer than any test's collectives take; mg_comm_sync bounds the waits inside the tests. */
#define DIST_COPY_TIMEOUT_S 120.0

static cudaStream_t g_stream;

static mg_status cuda_error(cudaError_t e, const char *what) {
    return MG_FAIL(MG_ERR_COMM, "test buffers: %s: %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

static mg_status cuda_init(const mg_launch_info *li) {
    /* Runs before the world exists, so before NCCL reads its environment: the GPU machines
     * must never use NVLink multicast (NVLS); off unless set explicitly (run_nccl.sh sets 0). */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cuda_error(e, "cudaGetDeviceCount");
    if (n == 0) return MG_FAIL(MG_ERR_UNSUPPORTED, "test buffers: no CUDA device visible");
    int device = n == 1 ? 0 : li->local_rank;
    if (device < 0 || device >= n)
        return MG_FAIL(MG_ERR_USAGE, "test buffers: local rank %d but %d GPUs visible",
                       li->local_rank, n);
    if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_error(e, "cudaSetDevice");
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_error(e, "cudaStreamCreateWithFlags");
    return MG_OK;
}

/* Waits for everything on the test stream, at most DIST_COPY_TIMEOUT_S. */
static mg_status stream_wait(const char *what) {
    struct timespec t0, now, nap = {0, 20000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery(g_stream);
        if (e == cudaSuccess) return MG_OK;
        if (e != cudaErrorNotReady) return cuda_error(e, what);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double s = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (s > DIST_COPY_TIMEOUT_S)
            return MG_FAIL(MG_ERR_COMM,
                           "test buffers: %s did not finish in %g s (a collective before it on "
                           "the stream never completed)",
                           what, DIST_COPY_TIMEOUT_S);
        nanosleep(&nap, NULL);
    }
}

static mg_status cuda_alloc(size_t bytes, void **out) {
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256); /* cudaMalloc aligns to 256 bytes */
    if (e != cudaSuccess) {
        *out = NULL;
        return cuda_error(e, "cudaMalloc");
    }
    return MG_OK;
}

/* Host memory is pageable, for which cudaMemcpyAsync may block until the stream reaches the
 * copy: the stream is first waited for with the bounded poll, and the copy afterwards, before
 * the caller may reuse or read the host buffer. */
static mg_status cuda_upload(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return MG_OK;
    mg_status st = stream_wait("the work before an upload");
    if (st != MG_OK) return st;
    cudaError_t e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, g_stream);
    if (e != cudaSuccess) return cuda_error(e, "cudaMemcpyAsync (upload)");
    return stream_wait("upload");
}

static mg_status cuda_download(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return MG_OK;
    mg_status st = stream_wait("the work before a download");
    if (st != MG_OK) return st;
    cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, g_stream);
    if (e != cudaSuccess) return cuda_error(e, "cudaMemcpyAsync (download)");
    return stream_wait("download");
}

static void cuda_free(void *p) {
    if (p) cudaFree(p);
}

static void *cuda_stream(void) {
    return (void *)g_stream;
}

/* Deliberately unbounded (see dist_buf.h): the test is that it returns at all. */
static mg_status cuda_wait_blocking(void) {
    cudaError_t e = cudaStreamSynchronize(g_stream);
    if (e != cudaSuccess) return cuda_error(e, "cudaStreamSynchronize");
    return MG_OK;
}

static void cuda_shutdown(void) {
    if (g_stream) cudaStreamDestroy(g_stream);
    g_stream = NULL;
}

const dist_buf_ops dist_buf_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .alloc = cuda_alloc,
    .upload = cuda_upload,
    .download = cuda_download,
    .free = cuda_free,
    .stream = cuda_stream,
    .stream_wait_blocking = cuda_wait_blocking,
    .shutdown = cuda_shutdown,
};

#else
typedef int dist_buf_cuda_unused; /* built without NCCL: the tests run on host buffers only */
#endif
