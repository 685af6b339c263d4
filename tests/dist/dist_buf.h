/* Buffers for the multi-rank tests, so the same tests run on host memory (--backend mpi,
 * dist_buf_host.c) and device memory (--backend nccl, dist_buf_cuda.c, built where CUDA is).
 * The tests keep every expected value on the host and move data only through these calls.
 * Exports: dist_buf_ops, dist_buf_host, dist_buf_cuda (where dist_buf_cuda.c is built).
 * Needs: core/status, comm/comm (for the launch info). */
#ifndef MG_DIST_BUF_H
#define MG_DIST_BUF_H

#include "comm/comm.h"
#include "core/status.h"

#include <stddef.h>

typedef struct {
    const char *name; /* "host", "cuda" */
    /* Before the world exists: e.g. select the device local_rank. May be NULL. */
    mg_status (*init)(const mg_launch_info *li);
    mg_status (*alloc)(size_t bytes, void **out); /* 256-byte aligned, contents undefined */
    mg_status (*upload)(void *dst, const void *host_src, size_t bytes);
    mg_status (*download)(void *host_dst, const void *src, size_t bytes);
    void (*free)(void *p);
    void *(*stream)(void); /* the stream the tests pass to every call (NULL for host) */
    /* Blocks the host until everything on the stream has finished, with no bound of its own
     * (cudaStreamSynchronize): only the NCCL watchdog's abort can end a wait behind a collective
     * whose peer is gone (the "-blocking" scenarios of main.c). A no-op on the host. */
    mg_status (*stream_wait_blocking)(void);
    void (*shutdown)(void); /* May be NULL. */
} dist_buf_ops;

extern const dist_buf_ops dist_buf_host;
/* Weak: the binary links before dist_buf_cuda.c exists (and without CUDA); main.c checks that
 * &dist_buf_cuda is not NULL before --backend nccl uses it. */
extern const dist_buf_ops dist_buf_cuda __attribute__((weak));

#endif
