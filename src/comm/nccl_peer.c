/* Peer-mapped memory on the NCCL backend (comm.h's mg_comm_peer_window_alloc): each rank
 * allocates its buffer with cudaMalloc, the ranks all-gather their CUDA IPC handles and host
 * names over the group's communicator, and every rank opens the others' handles, so its kernels
 * address the peers' buffers directly (NVLink or PCIe peer-to-peer). Whether that worked is agreed
 * by a second all-gather, so every rank gets the same answer: the window, or MG_ERR_UNSUPPORTED
 * with the first failing rank's reason. Part of the NCCL backend: nccl_internal.h. Compiled only
 * with MG_HAVE_NCCL. */
#ifdef MG_HAVE_NCCL

#include "comm/nccl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What one rank tells the others. */
typedef struct {
    cudaIpcMemHandle_t handle;
    char host[64];
    uint64_t bytes; /* the data bytes asked for: the same on every rank (the flags follow them) */
    int32_t ok;
    char why[124]; /* the reason when !ok */
} peer_card;

/* all (c->size records of `bytes`) = every rank's `mine`, in group rank order: an all-gather over
 * c's communicator through a device buffer, waited for. */
static mg_status gather(mg_comm *c, const void *mine, void *all, size_t bytes) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    nccl_world *nw = c->w->impl;
    size_t n = bytes * (size_t)c->size;
    char *d = NULL;
    cudaStream_t s = NULL;
    mg_status st = MG_OK;
    if (cudaMalloc((void **)&d, n) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        st = MG_FAIL(MG_ERR_NOMEM, "peer window: no device memory or stream for %zu bytes", n);
    char *slot = d + bytes * (size_t)c->rank;
    if (!st && cudaMemcpyAsync(slot, mine, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess)
        st = MG_FAIL(MG_ERR_INTERNAL, "peer window: copy to the device failed");
    if (!st) {
        ncclResult_t r = ncclAllGather(slot, d, bytes, ncclUint8, g->comm, s);
        st = r != ncclSuccess ? mg_nccl_fail(c, g->comm, r, "ncclAllGather (peer window)", __func__,
                                             __FILE__, __LINE__)
                              : mg_nccl_sync_wait(c, g, s);
    }
    if (!st && (cudaMemcpyAsync(all, d, n, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                cudaStreamSynchronize(s) != cudaSuccess))
        st = MG_FAIL(MG_ERR_INTERNAL, "peer window: copy from the device failed");
    mg_nccl_wd_leave(nw, NULL, c, NULL, false);
    if (s) cudaStreamDestroy(s);
    if (d) cudaFree(d);
    return st;
}

/* Closes the peers' mappings; then, with free_own, frees this rank's buffer. */
static void release(mg_peer_window *pw, bool free_own) {
    for (int q = 0; q < pw->n; q++)
        if (q != pw->rank && pw->base[q]) cudaIpcCloseMemHandle(pw->base[q]), pw->base[q] = NULL;
    if (free_own && pw->n > 0 && pw->base[pw->rank]) cudaFree(pw->base[pw->rank]);
    if (free_own) memset(pw, 0, sizeof *pw);
}

/* card->ok = 0 with the reason (the first one kept). */
static void refuse(peer_card *card, const char *what, cudaError_t e) {
    if (!card->ok) return;
    card->ok = 0;
    snprintf(card->why, sizeof card->why, "%s: %s", what,
             e == cudaSuccess ? "no" : cudaGetErrorString(e));
    cudaGetLastError(); /* the runtime keeps the failed call's error: clear it */
}

/* The first refusal among the cards, as the one-line reason; NULL when every card is ok. */
static mg_status first_refusal(mg_comm *c, const peer_card *cards) {
    for (int q = 0; q < c->size; q++)
        if (!cards[q].ok)
            return MG_FAIL(MG_ERR_UNSUPPORTED, "peer-mapped memory on group '%s': rank %d: %.*s",
                           mg_comm_name(c), q, (int)sizeof cards[q].why, cards[q].why);
    return MG_OK;
}

/* The world's abort word for its windows (nccl_internal.h), made once: its device address. */
static mg_status abort_word(mg_comm *c, const volatile uint32_t **out) {
    nccl_world *nw = c->w->impl;
    *out = NULL;
    pthread_mutex_lock(&nw->mu);
    cudaError_t e = cudaSuccess;
    if (!nw->abort_word) {
        e = cudaHostAlloc((void **)&nw->abort_word, sizeof *nw->abort_word, cudaHostAllocMapped);
        if (e == cudaSuccess)
            *nw->abort_word = nw->aborted ? 1u : 0u;
        else
            nw->abort_word = NULL;
    }
    void *dev = NULL;
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, nw->abort_word, 0);
    pthread_mutex_unlock(&nw->mu);
    if (e != cudaSuccess)
        return MG_FAIL(MG_ERR_NOMEM, "peer window: no mapped host word for the abort: %s",
                       cudaGetErrorString(e));
    *out = dev;
    return MG_OK;
}

mg_status mg_nccl_peer_alloc(mg_comm *c, size_t bytes, mg_peer_window *out) {
    memset(out, 0, sizeof *out);
    if (c->size > MG_PEER_MAX)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "peer-mapped memory over %d ranks (at most %d)", c->size,
                       MG_PEER_MAX);
    peer_card *cards = calloc((size_t)c->size, sizeof *cards);
    if (!cards) return MG_FAIL(MG_ERR_NOMEM, "out of memory (peer window)");
    peer_card mine = {.bytes = bytes, .ok = 1};
    if (gethostname(mine.host, sizeof mine.host - 1) != 0)
        refuse(&mine, "gethostname", cudaSuccess);
    size_t total = bytes + MG_PEER_FLAG_BYTES;
    void *local = NULL;
    cudaError_t e = cudaMalloc(&local, total);
    if (e != cudaSuccess) {
        local = NULL;
        refuse(&mine, "cudaMalloc", e);
    }
    if (local && (e = cudaMemset(local, 0, total)) != cudaSuccess) refuse(&mine, "cudaMemset", e);
    if (local && (e = cudaDeviceSynchronize()) != cudaSuccess) refuse(&mine, "cudaMemset", e);
    if (local && (e = cudaIpcGetMemHandle(&mine.handle, local)) != cudaSuccess)
        refuse(&mine, "cudaIpcGetMemHandle", e);
    mg_status st = gather(c, &mine, cards, sizeof mine);
    if (!st) st = first_refusal(c, cards);
    for (int q = 0; !st && q < c->size; q++)
        if (cards[q].bytes != bytes)
            st = MG_FAIL(MG_ERR_UNSUPPORTED,
                         "peer-mapped memory on group '%s': rank %d asked for %llu bytes, rank %d "
                         "for %llu",
                         mg_comm_name(c), c->rank, (unsigned long long)bytes, q,
                         (unsigned long long)cards[q].bytes);
        else if (strncmp(cards[q].host, cards[c->rank].host, sizeof mine.host) != 0)
            st = MG_FAIL(MG_ERR_UNSUPPORTED,
                         "peer-mapped memory on group '%s': ranks on several hosts (%.64s, %.64s)",
                         mg_comm_name(c), cards[c->rank].host, cards[q].host);
    if (st) {
        free(cards);
        if (local) cudaFree(local);
        return st;
    }
    /* every card is good: open the peers' buffers, then agree on the outcome */
    out->n = c->size, out->rank = c->rank, out->bytes = bytes;
    if (abort_word(c, &out->abort) != MG_OK) {
        mg_error_clear();
        refuse(&mine, "cudaHostAlloc (the windows' abort word)", cudaErrorMemoryAllocation);
    }
    out->base[c->rank] = local;
    for (int q = 0; q < c->size && mine.ok; q++) {
        if (q == c->rank) continue;
        e = cudaIpcOpenMemHandle(&out->base[q], cards[q].handle, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            out->base[q] = NULL;
            refuse(&mine, "cudaIpcOpenMemHandle", e);
        }
    }
    st = gather(c, &mine, cards, sizeof mine);
    if (!st) st = first_refusal(c, cards);
    free(cards);
    if (st) release(out, true);
    return st;
}

void mg_nccl_peer_free(mg_comm *c, mg_peer_window *pw, bool abandon) {
    /* every rank unmaps its peers' buffers, then (a barrier) frees its own */
    release(pw, false);
    cudaStream_t s = NULL;
    if (!abandon && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
        if (c->w->ops->barrier(c, s) != MG_OK) mg_error_clear();
        cudaStreamDestroy(s);
    }
    release(pw, true);
}

#else
/* Built without NCCL. ISO C wants at least one declaration in a file. */
typedef int mg_comm_nccl_peer_unused;
#endif
