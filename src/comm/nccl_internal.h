/* Internal to the NCCL backend (nccl.c, nccl_copy_engine.c, nccl_watchdog.c): the state of a world
 * and of its groups, the abort of every communicator, and the watchdog's interface to the main
 * thread.
 *
 * Ownership (nw->mu): the main thread takes the communicators over for the length of each of
 * its entries into nccl.c (mg_nccl_wd_enter ... mg_nccl_wd_leave, "in_call"); the watchdog
 * aborts only while in_call is false, so it never frees a communicator the main thread is
 * using, and group_free / world_finalize unlink or stop it under the same lock (the one
 * exception, an entry stuck far beyond the timeout, is described in nccl_watchdog.c).
 *
 * Needs: CUDA runtime, NCCL, pthreads, comm/comm_backend. Only with MG_HAVE_NCCL. */
#ifndef MG_NCCL_INTERNAL_H
#define MG_NCCL_INTERNAL_H
#ifdef MG_HAVE_NCCL

#include "comm/comm_backend.h"
#include "core/status.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* NCCL runs all-gathers and all-to-alls on the copy engines from 2.28 (zero-CTA policy,
 * symmetric windows); older versions build without that path. */
#define MG_NCCL_CE (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))

/* A symmetric window of a group's copy-engine communicator (mg_comm_window_register). */
typedef struct {
    const char *base;
    size_t bytes;
    ncclWindow_t win;
} nccl_window;

typedef struct nccl_group {
    ncclComm_t comm; /* blocking split child; NULL once destroyed or aborted */
    /* Copy-engine collectives (nccl.c): a split of comm with the zero-CTA policy, made by the
     * first window registration, and the windows registered on it; NULL / 0 without. */
    ncclComm_t ce;
    nccl_window *wins;
    int n_wins, cap_wins;
    int *scratch;     /* (1,) device int, zero: the barrier's all-reduce */
    cudaEvent_t done; /* recorded by sync behind the enqueued work */
    /* The watchdog's view (under nw->mu): `last` is recorded behind the newest call, whose
     * name, number and enqueue time these are; pending until the watchdog saw it complete. */
    cudaEvent_t last;
    bool pending;
    double last_t;
    uint64_t last_seq;
    const char *last_call;
    mg_comm *owner;          /* the group, for the watchdog's message (valid while linked) */
    struct nccl_group *next; /* the world's open groups, newest first (for abort) */
} nccl_group;

typedef struct {
    int device;
    bool copy_engine; /* MG_NCCL_COPY_ENGINE=1 with NCCL >= 2.28 (mg_comm_copy_engine) */
    ncclComm_t comm;  /* all ranks, rank order, nonblocking; the parent of every split */
    bool aborted;     /* every communicator was aborted (under mu) */
    nccl_group *groups;
    /* The watchdog. mu guards aborted, groups (links and watchdog fields) and everything
     * below; comm and the groups' comm are freed only under it. */
    pthread_mutex_t mu;
    pthread_t thread;
    bool thread_on, stop;
    bool in_call;        /* the main thread is inside nccl.c and owns the communicators */
    double in_since;     /* ... since */
    const mg_comm *in_c; /* ... on this group */
    bool wd_failed;      /* the watchdog failed the world */
    char wd_msg[512];    /* ... with this line ("" : a peer's notice, latched in health) */
    double timeout_s;
    ncclComm_t closing; /* being finalized by close_comm, unlinked: abort takes it too */
    /* ncclCommSplit's output: NCCL's split thread stores the child here when it ends, so it lives
     * in the world, never on a stack a timed-out wait may have left. */
    ncclComm_t split_out;
    /* the peer windows' abort word (core/peer_window.h): page-locked, mapped for the device,
     * made at the first window; set to 1 by abort_locked, freed at finalize */
    uint32_t *abort_word;
} nccl_world;

/* The main thread's abort of every communicator (never called with mu held): marks the world
 * failed; idempotent, safe at any point (also before init finished: w->impl NULL). */
void mg_nccl_abort_all(mg_comm_world *w);

/* ---- shared by nccl.c's parts ---- */
/* A communicator's config: blocking or not, resources of its own, the name NCCL keeps. */
ncclConfig_t mg_nccl_comm_config(const char *name, int blocking);
/* Starts a main-thread entry on group c: its live communicator, or MG_ERR_COMM when the world
 * was aborted. On MG_OK the caller ends with mg_nccl_wd_leave. */
mg_status mg_nccl_begin(mg_comm *c, nccl_group **out);
/* An NCCL call failed: the one MG_ERR_COMM line, a trace frame, every communicator aborted. */
mg_status mg_nccl_fail(mg_comm *c, ncclComm_t comm, ncclResult_t r, const char *expr,
                       const char *func, const char *file, int line);

/* Waits, inside an entry (mg_nccl_begin), for everything enqueued on stream so far: bounded by
 * the timeout, interrupted by a peer's failure notice or the communicator's error. */
mg_status mg_nccl_sync_wait(mg_comm *c, nccl_group *g, cudaStream_t stream);

/* ---- peer-mapped memory (nccl_peer.c): comm_backend.h's entries ---- */
mg_status mg_nccl_peer_alloc(mg_comm *c, size_t bytes, mg_peer_window *out);
void mg_nccl_peer_free(mg_comm *c, mg_peer_window *pw, bool abandon);

/* ---- copy-engine collectives (nccl_copy_engine.c): comm_backend.h's entries ---- */
bool mg_nccl_copy_engine(const mg_comm_world *w);
/* Whether [p, p + bytes) lies inside one of g's windows (then its copy engines take the call). */
bool mg_nccl_in_window(const nccl_group *g, const void *p, size_t bytes);
#if MG_NCCL_CE
mg_status mg_nccl_mem_alloc(mg_comm_world *w, size_t bytes, void **out);
void mg_nccl_mem_free(mg_comm_world *w, void *ptr);
mg_status mg_nccl_window_register(mg_comm *c, void *base, size_t bytes);
void mg_nccl_window_deregister(mg_comm *c, void *base);
#endif

/* ---- the watchdog (nccl_watchdog.c) ---- */
/* Starts the thread of a world of more than one rank; w->impl must be set (the thread reads
 * it). MG_ERR_IO when the thread cannot be started. */
mg_status mg_nccl_wd_start(mg_comm_world *w);
/* Stops and joins it (no-op when it never started): from then on the calling thread alone
 * touches the communicators. */
void mg_nccl_wd_stop(nccl_world *nw);
/* The main thread takes the communicators over; false when the watchdog failed the world
 * (then mg_nccl_wd_error words it). Every true is ended by mg_nccl_wd_leave. */
bool mg_nccl_wd_enter(nccl_world *nw, const mg_comm *c);
/* ... and hands them back; enqueued: record `last` behind the call just enqueued on stream. */
void mg_nccl_wd_leave(nccl_world *nw, nccl_group *g, const mg_comm *c, cudaStream_t stream,
                      bool enqueued);
/* Whether the watchdog failed the world. */
bool mg_nccl_wd_failed(nccl_world *nw);
/* The watchdog failed the world: its line, or the peer's notice as mg_comm_wait_step words it
 * for c (every communicator aborted, the world failed). */
mg_status mg_nccl_wd_error(mg_comm *c);

#endif
#endif
