/* Host buffers for the multi-rank tests (--backend mpi). */
#include "dist_buf.h"

#include <stdlib.h>
#include <string.h>

static mg_status host_alloc(size_t bytes, void **out) {
    size_t rounded = (bytes + 255) / 256 * 256;
    *out = aligned_alloc(256, rounded ? rounded : 256);
    if (!*out) return MG_FAIL(MG_ERR_IO, "out of memory: %zu B of test buffer", bytes);
    return MG_OK;
}

static mg_status host_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
    return MG_OK;
}

static void *host_stream(void) {
    return NULL;
}

/* MPI calls complete before they return: nothing is ever pending. */
static mg_status host_wait_blocking(void) {
    return MG_OK;
}

const dist_buf_ops dist_buf_host = {
    .name = "host",
    .init = NULL,
    .alloc = host_alloc,
    .upload = host_copy,
    .download = host_copy,
    .free = free,
    .stream = host_stream,
    .stream_wait_blocking = host_wait_blocking,
    .shutdown = NULL,
};
