/* The CUDA backend: bf16 or fp16 compute on one GPU, chosen at creation. This file owns the
 * backend's state (stream, cuBLASLt handle, workspace) and the memory and stream entries, which do
 * not depend on the compute dtype; the ops live in one .cu file per family (cuda_ops.h),
 * each built once per dtype, and cuda_table.c fills the table with the set of the backend's
 * dtype. They are reached only through the table.
 *
 * Ordering: every op runs on the one compute stream (collectives on the communication stream,
 * ordered against it by stream_wait's events), so the entries are ordered among
 * themselves without any host synchronisation (small copy_h2d calls included: staging.c). Only
 * copy_d2h, download_f32 and synchronize wait for the device (each counts one host sync in the
 * context); alloc and free call cudaMalloc and cudaFree, which belong to set-up and tear-down (each
 * counted). A training step uses neither, and tests/cuda checks that through the counters. */
#include "backend/cuda/convert.h"
#include "backend/cuda/cuda_internal.h"
#include "core/env.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

/* This file is built once and serves both compute dtypes: what depends on the dtype comes from
 * the objects built per dtype (convert.cu for upload_f32 and download_f32, attention_cudnn.cu's
 * state at destroy), MG_CUDA_BY_DTYPE picking the one of the backend's dtype. */

/* Every allocation is at least this large, so 0 bytes still gives a distinct pointer (as on the
 * CPU backend); cudaMalloc's own alignment (256 bytes) is the arena's. */
#define MG_CUDA_MIN_ALLOC 256
/* 2 GiB: cuDNN's deterministic attention backward needs B*nq*S*S*2 bytes of it (GPT-2 1.5B at
 * micro-batch 32 and sequence 1024: 1.6 GiB); a larger shape fails with a message naming
 * MG_CUDA_WORKSPACE_MB. */
#define MG_CUDA_WORKSPACE_DEFAULT_MB 2048

/* ---------------------------------------------------------------- errors */

static mg_status cuda_code(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return MG_ERR_NOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDevice:
        return MG_ERR_UNSUPPORTED;
    default:
        return MG_ERR_INTERNAL;
    }
}

mg_status mg_cuda_error(cudaError_t e, const char *expr, const char *func, const char *file,
                        int line) {
    return mg_error_set(cuda_code(e), func, file, line, "%s: %s: %s (%s)", func, expr,
                        cudaGetErrorName(e), cudaGetErrorString(e));
}

mg_status mg_cublas_error(cublasStatus_t s, const char *expr, const char *func, const char *file,
                          int line) {
    mg_status code = s == CUBLAS_STATUS_ALLOC_FAILED ? MG_ERR_NOMEM
                     : s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH ||
                             s == CUBLAS_STATUS_NOT_INITIALIZED
                         ? MG_ERR_UNSUPPORTED
                         : MG_ERR_INTERNAL;
    return mg_error_set(code, func, file, line, "%s: %s: %s (%s)", func, expr,
                        cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

/* ---------------------------------------------------------------- memory */

mg_status mg_cuda_alloc(mg_backend *be, size_t bytes, void **out) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    *out = NULL;
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "alloc");
    size_t n = bytes < MG_CUDA_MIN_ALLOC ? MG_CUDA_MIN_ALLOC : bytes;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        return mg_error_set(cuda_code(e), __func__, __FILE__, __LINE__,
                            "cuda alloc: cannot allocate %zu bytes on device %d (%zu MiB free of "
                            "%zu MiB): %s (%s)",
                            n, c->device, free_b >> 20, total_b >> 20, cudaGetErrorName(e),
                            cudaGetErrorString(e));
    }
    c->n_device_allocs++;
    /* Zeroed in stream order: every later entry (all on this stream) sees zeros. */
    cudaError_t z = cudaMemsetAsync(p, 0, n, c->stream);
    if (z != cudaSuccess) {
        (void)cudaFree(p);
        c->n_device_frees++;
        MG_CUDA_CHECK(z);
    }
    *out = p;
    return MG_OK;
}

void mg_cuda_free(mg_backend *be, void *ptr) {
    if (!ptr) return;
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    /* cudaFree waits for the device, so work still queued on the buffer finishes first. */
    cudaError_t e = cudaFree(ptr);
    c->n_device_frees++;
    if (e != cudaSuccess)
        mg_log_warn("cuda free: cudaFree: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
}

mg_status mg_cuda_workspace_reserve(mg_backend *be, size_t need, const char *who) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    if (need <= c->workspace_bytes) return MG_OK;
    const size_t mib = (need >> 20) + 1;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    MG_CUDA_CHECK(cudaStreamIsCapturing(c->stream, &cap));
    if (mg_env_str("MG_CUDA_WORKSPACE_MB", NULL) || cap != cudaStreamCaptureStatusNone)
        return MG_FAIL(MG_ERR_NOMEM,
                       "%s needs %zu bytes of workspace, have %zu%s; raise MG_CUDA_WORKSPACE_MB "
                       "(to %zu)",
                       who, need, c->workspace_bytes,
                       cap != cudaStreamCaptureStatusNone ? " (inside a CUDA graph capture)" : "",
                       mib);
    /* whole 64 MiB: a few shapes' growth does not reallocate each time */
    const size_t bytes = ((need + (64u << 20) - 1) >> 26) << 26;
    mg_log_info("> %s needs %zu MiB of workspace: grown from %zu MiB", who, mib,
                c->workspace_bytes >> 20);
    mg_cuda_free(be, c->workspace); /* waits for the work queued on it */
    c->workspace = NULL;
    c->workspace_bytes = 0;
    MG_CHECK(mg_cuda_alloc(be, bytes, &c->workspace));
    c->workspace_bytes = bytes;
    return MG_OK;
}

/* src may be reused at once: small copies (token ids) go through the pinned ring of staging.c,
 * with no stream synchronisation; larger ones (set-up) through the driver's staging of pageable
 * memory, which synchronises the stream first. */
mg_status mg_cuda_copy_h2d(mg_backend *be, void *dst, const void *src, size_t bytes) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "copy_h2d");
    if (!bytes) return MG_OK;
    bool done = false;
    MG_CHECK(mg_cuda_staging_copy_h2d(mg_cuda_ctx_of(be), dst, src, bytes, &done));
    if (!done)
        MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, mg_cuda_stream(be)));
    return MG_OK;
}

/* The caller reads dst on return, so this waits for the stream (one counted host sync). */
mg_status mg_cuda_copy_d2h(mg_backend *be, void *dst, const void *src, size_t bytes) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "copy_d2h");
    if (!bytes) return MG_OK;
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    c->n_host_syncs++;
    MG_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return MG_OK;
}

mg_status mg_cuda_copy_d2d(mg_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return MG_OK;
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, mg_cuda_stream(be)));
    return MG_OK;
}

mg_status mg_cuda_convert_bf16(mg_backend *be, void *dst, const void *src, size_t n, bool to_bf16,
                               mg_stream_id stream) {
    cudaStream_t s = (cudaStream_t)mg_cuda_stream_handle(be, stream);
    /* bf16 whatever the compute dtype: the bf16 instantiation of convert.cu's kernels */
    return to_bf16 ? mg_cuda_f32_to_h16(dst, src, n, s) : mg_cuda_h16_to_f32(dst, src, n, s);
}

mg_status mg_cuda_memset_zero(mg_backend *be, void *dst, size_t bytes) {
    if (!bytes) return MG_OK;
    MG_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, mg_cuda_stream(be)));
    return MG_OK;
}

/* fp32 values staged through the workspace, a chunk at a time, and rounded to the compute dtype
 * on the device. Stream order keeps a chunk's copy from overwriting the staging area before the
 * previous chunk's conversion has read it. */
mg_status mg_cuda_upload_f32(mg_backend *be, void *dst_, const float *src, size_t n) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "upload_f32");
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    uint16_t *dst = dst_; // (n) bf16 or fp16
    float *stage = c->workspace;
    size_t chunk = c->workspace_bytes / sizeof(float);
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        MG_CUDA_CHECK(
            cudaMemcpyAsync(stage, src + i, m * sizeof(float), cudaMemcpyHostToDevice, c->stream));
        MG_CHECK(MG_CUDA_BY_DTYPE(be, f32_to_h16)(dst + i, stage, m, c->stream));
    }
    return MG_OK;
}

/* The compute dtype widened to fp32 on the device (exact), then copied to the host; waits for
 * the stream once at the end (one counted host sync). */
mg_status mg_cuda_download_f32(mg_backend *be, float *dst, const void *src_, size_t n) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "download_f32");
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    const uint16_t *src = src_; // (n) bf16 or fp16
    float *stage = c->workspace;
    size_t chunk = c->workspace_bytes / sizeof(float);
    if (!n) return MG_OK;
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        MG_CHECK(MG_CUDA_BY_DTYPE(be, h16_to_f32)(stage, src + i, m, c->stream));
        MG_CUDA_CHECK(
            cudaMemcpyAsync(dst + i, stage, m * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    }
    c->n_host_syncs++;
    MG_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return MG_OK;
}

mg_status mg_cuda_synchronize(mg_backend *be) {
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "synchronize");
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    c->n_host_syncs++;
    MG_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return MG_OK;
}

mg_status mg_cuda_memory_info(mg_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    *free_bytes = *total_bytes = 0;
    MG_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return MG_OK;
}

mg_status mg_cuda_alloc_pinned(mg_backend *be, size_t bytes, void **out) {
    *out = NULL;
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "alloc_pinned");
    if (cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        return MG_FAIL(MG_ERR_NOMEM,
                       "cannot allocate %.1f GiB of pinned host memory for "
                       "checkpoint staging",
                       (double)bytes / 1073741824.0);
    }
    memset(*out, 0, bytes);
    return MG_OK;
}

void mg_cuda_free_pinned(mg_backend *be, void *ptr) {
    (void)be;
    if (ptr) cudaFreeHost(ptr);
}

/* ---------------------------------------------------------------- streams */

static cudaStream_t stream_of(mg_cuda_ctx *c, mg_stream_id s) {
    switch (s) {
    case MG_STREAM_COMM:
        return c->comm_stream;
    case MG_STREAM_TP:
        return c->tp_stream;
    case MG_STREAM_PP:
        return c->pp_stream;
    default:
        return c->stream;
    }
}

void *mg_cuda_stream_handle(mg_backend *be, mg_stream_id s) {
    return (void *)stream_of(mg_cuda_ctx_of(be), s);
}

/* The event captures the signaller's work enqueued so far; cudaStreamWaitEvent takes that state
 * at call time, so one event per signalling stream can be recorded again at once. */
mg_status mg_cuda_stream_wait(mg_backend *be, mg_stream_id waiter, mg_stream_id signaller) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    if (waiter == signaller) return MG_OK;
    cudaEvent_t ev = c->order_event[signaller];
    MG_CUDA_CHECK(cudaEventRecord(ev, stream_of(c, signaller)));
    MG_CUDA_CHECK(cudaStreamWaitEvent(stream_of(c, waiter), ev, 0));
    return MG_OK;
}

/* A stream mark's slot or a timer point in range (n of them). */
static mg_status check_index(int i, int n, const char *what) {
    if (i < 0 || i >= n) return MG_FAIL(MG_ERR_INTERNAL, "%s %d (%ss 0..%d)", what, i, what, n - 1);
    return MG_OK;
}

mg_status mg_cuda_stream_mark(mg_backend *be, mg_stream_id s, int slot) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    MG_CHECK(check_index(slot, MG_STREAM_MARKS, "stream mark"));
    MG_CUDA_CHECK(cudaEventRecord(c->marks[slot], stream_of(c, s)));
    return MG_OK;
}

mg_status mg_cuda_stream_wait_mark(mg_backend *be, mg_stream_id waiter, int slot) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    MG_CHECK(check_index(slot, MG_STREAM_MARKS, "stream mark"));
    MG_CUDA_CHECK(cudaStreamWaitEvent(stream_of(c, waiter), c->marks[slot], 0));
    return MG_OK;
}

mg_status mg_cuda_timer_mark(mg_backend *be, int slot) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    MG_CHECK(check_index(slot, MG_TIMER_POINTS, "timer point"));
    MG_CUDA_CHECK(cudaEventRecord(c->timer[slot], c->stream));
    return MG_OK;
}

mg_status mg_cuda_timer_seconds(mg_backend *be, int a, int b, double *seconds) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    MG_CHECK(check_index(a, MG_TIMER_POINTS, "timer point"));
    MG_CHECK(check_index(b, MG_TIMER_POINTS, "timer point"));
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "timer_seconds");
    float ms = 0;
    MG_CUDA_CHECK(cudaEventSynchronize(c->timer[b]));
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, c->timer[a], c->timer[b]));
    *seconds = ms * 1e-3;
    return MG_OK;
}

/* Tears down whatever part of the state exists, so it also cleans up a failed creation. */
void mg_cuda_destroy(mg_backend *be) {
    if (!be) return;
    mg_cuda_ctx *c = be->ctx;
    if (c) {
        if (c->stream) (void)cudaStreamSynchronize(c->stream);
        if (c->comm_stream) (void)cudaStreamSynchronize(c->comm_stream);
        if (c->tp_stream) (void)cudaStreamSynchronize(c->tp_stream);
        if (c->pp_stream) (void)cudaStreamSynchronize(c->pp_stream);
        for (int s = 0; s < MG_STREAMS; s++)
            for (int i = 0; i < MG_CUDA_COPY_STREAMS; i++)
                if (c->copy_stream[s][i]) (void)cudaStreamSynchronize(c->copy_stream[s][i]);
        MG_CUDA_BY_DTYPE(be, attention_cudnn_destroy)(be);
        mg_cuda_staging_destroy(c);
        if (c->workspace) (void)cudaFree(c->workspace);
        if (c->lt) (void)cublasLtDestroy(c->lt);
        if (c->stream) (void)cudaStreamDestroy(c->stream);
        if (c->comm_stream) (void)cudaStreamDestroy(c->comm_stream);
        if (c->tp_stream) (void)cudaStreamDestroy(c->tp_stream);
        if (c->pp_stream) (void)cudaStreamDestroy(c->pp_stream);
        for (int s = 0; s < MG_STREAMS; s++) {
            for (int i = 0; i < MG_CUDA_COPY_STREAMS; i++) {
                if (c->copy_stream[s][i]) (void)cudaStreamDestroy(c->copy_stream[s][i]);
                if (c->copy_join[s][i]) (void)cudaEventDestroy(c->copy_join[s][i]);
            }
            if (c->copy_fork[s]) (void)cudaEventDestroy(c->copy_fork[s]);
        }
        for (int i = 0; i < MG_STREAMS; i++)
            if (c->order_event[i]) (void)cudaEventDestroy(c->order_event[i]);
        for (int i = 0; i < MG_STREAM_MARKS; i++)
            if (c->marks[i]) (void)cudaEventDestroy(c->marks[i]);
        for (int i = 0; i < MG_TIMER_POINTS; i++)
            if (c->timer[i]) (void)cudaEventDestroy(c->timer[i]);
        free(c);
    }
    free(be);
}

/* ---------------------------------------------------------------- creation */

/* Device checks before anything is created: a machine without a usable GPU gets one clear line. */
mg_status mg_backend_cuda_probe(int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "no CUDA device: cudaGetDeviceCount: %s (%s); check the driver, "
                       "CUDA_VISIBLE_DEVICES, or use the cpu backend",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (n == 0)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount found none; check "
                                           "CUDA_VISIBLE_DEVICES, or use the cpu backend");
    if (device < 0 || device >= n)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "no CUDA device %d: %d visible (device ids 0..%d; see CUDA_VISIBLE_DEVICES)",
                       device, n, n - 1);
    int major = 0, minor = 0;
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    /* The kernels are built for sm_90a with compute_90 PTX (Makefile CUDA_ARCH): older GPUs could
     * load neither. */
    if (major < 9)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "CUDA device %d has compute capability %d.%d; this build's kernels need "
                       "9.0 (Hopper) or newer (Makefile CUDA_ARCH)",
                       device, major, minor);
    return MG_OK;
}

static mg_status cuda_setup(mg_backend *be, int device) {
    mg_cuda_ctx *c = be->ctx;
    int mb = mg_env_int("MG_CUDA_WORKSPACE_MB", MG_CUDA_WORKSPACE_DEFAULT_MB);
    if (mb < 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "MG_CUDA_WORKSPACE_MB=%d: the CUDA workspace needs at least "
                       "1 MiB (default %d)",
                       mb, MG_CUDA_WORKSPACE_DEFAULT_MB);
    const char *tune = mg_env_str("MG_CUBLASLT_TUNE", "0"); /* read by linear.cu */
    if (strcmp(tune, "0") != 0 && strcmp(tune, "1") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_CUBLASLT_TUNE=%s: expected 0 or 1 (default 0)", tune);
    c->device = device;
    MG_CUDA_CHECK(cudaSetDevice(device));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&c->num_sms, cudaDevAttrMultiProcessorCount, device));
    /* Non-blocking: the legacy default stream (used by libraries that take no stream) never
     * serialises with our work. */
    MG_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* The communication stream has the highest priority: when compute kernels free
     * multiprocessors, the collectives' blocks are scheduled first, so a bucket's reduction is
     * not queued behind the rest of backward. */
    int least = 0, greatest = 0;
    MG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    MG_CUDA_CHECK(cudaStreamCreateWithPriority(&c->comm_stream, cudaStreamNonBlocking, greatest));
    MG_CUDA_CHECK(cudaStreamCreateWithPriority(&c->tp_stream, cudaStreamNonBlocking, greatest));
    MG_CUDA_CHECK(cudaStreamCreateWithPriority(&c->pp_stream, cudaStreamNonBlocking, greatest));
    c->copy_split = mg_env_int("MG_PEER_COPY_STREAMS", 1);
    if (c->copy_split < 1 || c->copy_split > MG_CUDA_COPY_STREAMS)
        return MG_FAIL(MG_ERR_USAGE, "MG_PEER_COPY_STREAMS=%s: expected 1 to %d (default 1)",
                       mg_env_str("MG_PEER_COPY_STREAMS", ""), MG_CUDA_COPY_STREAMS);
    for (int s = 0; s < MG_STREAMS && c->copy_split > 1; s++) {
        for (int i = 0; i < c->copy_split; i++) {
            MG_CUDA_CHECK(cudaStreamCreateWithPriority(&c->copy_stream[s][i], cudaStreamNonBlocking,
                                                       greatest));
            MG_CUDA_CHECK(cudaEventCreateWithFlags(&c->copy_join[s][i], cudaEventDisableTiming));
        }
        MG_CUDA_CHECK(cudaEventCreateWithFlags(&c->copy_fork[s], cudaEventDisableTiming));
    }
    for (int i = 0; i < MG_STREAMS; i++)
        MG_CUDA_CHECK(cudaEventCreateWithFlags(&c->order_event[i], cudaEventDisableTiming));
    for (int i = 0; i < MG_STREAM_MARKS; i++)
        MG_CUDA_CHECK(cudaEventCreateWithFlags(&c->marks[i], cudaEventDisableTiming));
    for (int i = 0; i < MG_TIMER_POINTS; i++) MG_CUDA_CHECK(cudaEventCreate(&c->timer[i]));
    MG_CUBLAS_CHECK(cublasLtCreate(&c->lt));
    c->workspace_bytes = (size_t)mb << 20;
    MG_CHECK(mg_cuda_alloc(be, c->workspace_bytes, &c->workspace));
    MG_CHECK(mg_cuda_staging_init(c));
    return mg_cuda_ops_init(be); /* the set-up of the ops of the dtype (cuda_table.c) */
}

mg_status mg_backend_cuda_create_dtype(mg_backend **out, int device, mg_dtype compute) {
    *out = NULL;
    if (compute != MG_BF16 && compute != MG_F16)
        return MG_FAIL(MG_ERR_USAGE,
                       "the cuda backend computes in bf16 or fp16, not %s (mg_dtype %d)",
                       mg_dtype_name(compute), (int)compute);
    MG_CHECK(mg_backend_cuda_probe(device));
    mg_backend *be = calloc(1, sizeof *be);
    if (!be) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the cuda backend table");
    be->ctx = calloc(1, sizeof(mg_cuda_ctx));
    if (!be->ctx) {
        free(be);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the cuda backend state");
    }
    be->name = "cuda";
    be->compute_dtype = compute;
    be->device = MG_DEVICE_CUDA;

    /* every entry, the compute ops of the dtype (cuda_table.c); cuda_setup makes the context
     * they run in and their set-up */
    mg_cuda_table_fill(be);

    mg_status st = cuda_setup(be, device);
    if (st == MG_OK) st = mg_backend_validate(be);
    if (st != MG_OK) {
        mg_cuda_destroy(be);
        return st;
    }
    *out = be;
    return MG_OK;
}
