/* Small host-to-device copies without a host synchronisation: a ring of pinned staging slots.
 *
 * Why: cudaMemcpyAsync from pageable memory first synchronises the stream (CUDA's documented
 * behaviour for pageable host-to-device copies), so the token and target uploads of every
 * microbatch made the host wait for the device to drain, and the device then idled while the
 * host enqueued the next microbatch (~2 ms of launches per GPT-2 124M step on an H200). From
 * pinned memory the copy is truly asynchronous. The caller may reuse its buffer at once (the
 * copy_h2d contract), so the data is first copied into the next slot of the ring, and the slot's
 * event, recorded after its copy, is waited on before the slot is reused: that wait only blocks
 * when the host is a whole ring of copies (MG_STAGING_SLOTS, several steps) ahead of the device,
 * which is flow control, not a synchronisation of the stream (not counted in n_host_syncs).
 * Copies larger than a slot take the pageable path (checkpoint loads, parameter uploads: set-up).
 * Exports (cuda_internal.h): mg_cuda_staging_init, mg_cuda_staging_destroy,
 * mg_cuda_staging_copy_h2d. */
#include "backend/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>

#define MG_STAGING_SLOTS      32
#define MG_STAGING_SLOT_BYTES ((size_t)1 << 20) /* a microbatch of 256k int32 token ids */

struct mg_cuda_staging {
    char *host; /* (MG_STAGING_SLOTS * MG_STAGING_SLOT_BYTES) pinned */
    cudaEvent_t done[MG_STAGING_SLOTS];
    int used[MG_STAGING_SLOTS]; /* the slot's event has been recorded */
    int next;
};

mg_status mg_cuda_staging_init(mg_cuda_ctx *c) {
    mg_cuda_staging *s = calloc(1, sizeof *s);
    if (!s) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the CUDA staging ring");
    c->staging = s;
    MG_CUDA_CHECK(cudaHostAlloc((void **)&s->host, MG_STAGING_SLOTS * MG_STAGING_SLOT_BYTES,
                                cudaHostAllocDefault));
    for (int i = 0; i < MG_STAGING_SLOTS; i++)
        MG_CUDA_CHECK(cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming));
    return MG_OK;
}

void mg_cuda_staging_destroy(mg_cuda_ctx *c) {
    mg_cuda_staging *s = c->staging;
    if (!s) return;
    for (int i = 0; i < MG_STAGING_SLOTS; i++)
        if (s->done[i]) (void)cudaEventDestroy(s->done[i]);
    if (s->host) (void)cudaFreeHost(s->host);
    free(s);
    c->staging = NULL;
}

mg_status mg_cuda_staging_copy_h2d(mg_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                                   bool *done) {
    mg_cuda_staging *s = c->staging;
    *done = false;
    if (!s || bytes > MG_STAGING_SLOT_BYTES) return MG_OK;
    int k = s->next;
    if (s->used[k]) MG_CUDA_CHECK(cudaEventSynchronize(s->done[k])); /* a ring behind: done */
    char *slot = s->host + (size_t)k * MG_STAGING_SLOT_BYTES;
    memcpy(slot, src, bytes);
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, c->stream));
    MG_CUDA_CHECK(cudaEventRecord(s->done[k], c->stream));
    s->used[k] = 1;
    s->next = (k + 1) % MG_STAGING_SLOTS;
    *done = true;
    return MG_OK;
}
