/* NCCL's copy-engine collectives (comm/comm.h's mg_comm_sym_*, MG_NCCL_COPY_ENGINE=1): memory
 * from ncclMemAlloc, registered as symmetric windows of a zero-CTA split of each group, on which
 * NCCL >= 2.28 runs all-gathers and equal all-to-alls with the copy engines instead of the
 * multiprocessors (nccl.c sends the calls whose buffers lie in a window there). Part of the NCCL
 * backend: nccl_internal.h. Compiled only with MG_HAVE_NCCL. */
#ifdef MG_HAVE_NCCL

#include "comm/nccl_internal.h"

#include <stdlib.h>

/* Whether [p, p + bytes) lies inside one of g's copy-engine windows. */
bool mg_nccl_in_window(const nccl_group *g, const void *p, size_t bytes) {
    const char *q = p;
    for (int i = 0; i < g->n_wins; i++)
        if (q >= g->wins[i].base && bytes <= g->wins[i].bytes &&
            (size_t)(q - g->wins[i].base) <= g->wins[i].bytes - bytes)
            return true;
    return false;
}

bool mg_nccl_copy_engine(const mg_comm_world *w) {
    const nccl_world *nw = w->impl;
    return nw && nw->copy_engine;
}

#if MG_NCCL_CE
/* ncclMemAlloc's memory (what a symmetric window takes), zeroed on a private stream: the legacy
 * default stream would also wait for collectives enqueued before (nccl.c's group_resources). */
mg_status mg_nccl_mem_alloc(mg_comm_world *w, size_t bytes, void **out) {
    *out = NULL;
    ncclResult_t r = ncclMemAlloc(out, bytes);
    if (r != ncclSuccess || !*out) {
        *out = NULL;
        return MG_FAIL(MG_ERR_NOMEM, "ncclMemAlloc of %.1f MiB on rank %d: %s",
                       (double)bytes / 1048576.0, w->rank, ncclGetErrorString(r));
    }
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaMemsetAsync(*out, 0, bytes, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    if (e != cudaSuccess) {
        ncclMemFree(*out);
        *out = NULL;
        return MG_FAIL(MG_ERR_INTERNAL, "zeroing %zu bytes from ncclMemAlloc: %s", bytes,
                       cudaGetErrorString(e));
    }
    return MG_OK;
}

void mg_nccl_mem_free(mg_comm_world *w, void *ptr) {
    (void)w;
    if (ptr) ncclMemFree(ptr);
}

/* Registers [base, base + bytes) as a symmetric window of c's copy-engine communicator, which
 * the first registration splits from the group's own with the zero-CTA policy. Collective over
 * c. */
mg_status mg_nccl_window_register(mg_comm *c, void *base, size_t bytes) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    nccl_world *nw = c->w->impl;
    mg_status st = MG_OK;
    if (!g->ce) {
        ncclConfig_t cfg = mg_nccl_comm_config(c->name, 1);
        cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
        ncclComm_t ce = NULL;
        ncclResult_t r = ncclCommSplit(g->comm, 0, c->rank, &ce, &cfg);
        if (r != ncclSuccess || !ce)
            st = mg_nccl_fail(c, g->comm, r != ncclSuccess ? r : ncclInternalError,
                              "ncclCommSplit (copy engines)", __func__, __FILE__, __LINE__);
        pthread_mutex_lock(&nw->mu);
        g->ce = ce;
        pthread_mutex_unlock(&nw->mu);
    }
    if (st == MG_OK && g->n_wins == g->cap_wins) {
        int cap = g->cap_wins ? 2 * g->cap_wins : 8;
        nccl_window *w = realloc(g->wins, (size_t)cap * sizeof *w);
        if (!w)
            st = MG_FAIL(MG_ERR_NOMEM, "out of memory for %d windows", cap);
        else
            g->wins = w, g->cap_wins = cap;
    }
    if (st == MG_OK) {
        ncclWindow_t win = NULL;
        ncclResult_t r = ncclCommWindowRegister(g->ce, base, bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
        if (r != ncclSuccess)
            st = mg_nccl_fail(c, g->ce, r, "ncclCommWindowRegister", __func__, __FILE__, __LINE__);
        else
            g->wins[g->n_wins++] = (nccl_window){base, bytes, win};
    }
    mg_nccl_wd_leave(nw, NULL, c, NULL, false);
    return st;
}

/* Forgets the window at base (deregistered while the world is healthy). */
void mg_nccl_window_deregister(mg_comm *c, void *base) {
    nccl_group *g = c->impl;
    nccl_world *nw = c->w->impl;
    if (!g || !nw) return;
    for (int i = 0; i < g->n_wins; i++) {
        if (g->wins[i].base != base) continue;
        if (mg_nccl_wd_enter(nw, c)) {
            if (g->ce && !c->w->failed) ncclCommWindowDeregister(g->ce, g->wins[i].win);
            mg_nccl_wd_leave(nw, NULL, c, NULL, false);
        }
        g->wins[i] = g->wins[--g->n_wins];
        return;
    }
}
#endif

#else
/* Built without NCCL. ISO C wants at least one declaration in a file. */
typedef int mg_comm_nccl_copy_engine_unused;
#endif
