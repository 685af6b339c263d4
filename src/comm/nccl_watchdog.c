/* The NCCL backend's watchdog and the abort of every communicator (a part of nccl.c, split off
 * to keep files small; shared state in nccl_internal.h).
 *
 * nccl.c's calls do not wait: a call enqueues, records the group's `last` event behind it and
 * returns, and mg_comm_sync bounds its own wait (the deadline, the health channel). What is
 * left is the time the main thread spends outside nccl.c (computing, or stuck in a
 * cudaStreamSynchronize of its own behind a collective whose peer is gone). For that a
 * watchdog thread per world (as PyTorch's ProcessGroupNCCL) wakes every 2 ms while the main
 * thread is outside nccl.c: it queries each group's last event (a deadline miss: the call is
 * older than the timeout and unfinished) and the health channel (a peer's notice). On either it
 * marks the world failed, keeps the one-line message, and ncclCommAborts every communicator,
 * which makes the kernels waiting for a dead peer return. It prints nothing; the main thread's
 * next call or sync returns MG_ERR_COMM with that message.
 * Inside a CUDA-graph capture no event is recorded: it would belong to the graph, and the
 * thread's query of it would break the capture. A captured collective is watched through the
 * graph's launch, by the waits that follow it.
 *
 * Ownership: see nccl_internal.h. One exception, the last resort: an entry of the main thread
 * that lasts longer than the timeout plus WD_GRACE_S (a blocking NCCL call stuck in connection
 * set-up or finalize with a peer that never answers) is aborted anyway; the blocked call then
 * returns with an error, but it ran on a communicator freed under it, a risk taken only on a
 * path that would otherwise hang forever (nccl.c keeps it rare: NCCL_RUNTIME_CONNECT=0).
 *
 * Needs: CUDA runtime, NCCL, pthreads, comm/comm_backend, comm/comm_wait, comm/health. Only with
 * MG_HAVE_NCCL. */
#ifdef MG_HAVE_NCCL

#include "comm/nccl_internal.h"

#include "comm/comm_wait.h"
#include "comm/health.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Seconds an entry of the main thread may last beyond the timeout before the watchdog aborts
 * under it (see the top of the file); the entry's own bounded waits end first. */
#define WD_GRACE_S 5.0
/* The watchdog's period. */
#define WD_PERIOD_NS 2000000L

/* ---- abort ---- */

/* Idempotent; safe at any point (also from mg_comm_world_fail before init finished). Newest
 * groups first, the world's communicator last: ncclCommAbort sets the communicator's abort flag,
 * which the kernels of its pending collectives poll, then frees it. */
static void abort_locked(nccl_world *nw) {
    if (nw->aborted) return;
    nw->aborted = true;
    if (nw->abort_word) { /* the peer windows' waits give up (core/peer_window.h) */
        *(volatile uint32_t *)nw->abort_word = 1;
        __sync_synchronize();
    }
    for (nccl_group *g = nw->groups; g; g = g->next) {
        if (g->ce) ncclCommAbort(g->ce);
        g->ce = NULL;
        if (g->comm) ncclCommAbort(g->comm);
        g->comm = NULL;
        g->pending = false;
    }
    if (nw->closing) ncclCommAbort(nw->closing);
    nw->closing = NULL;
    if (nw->comm) ncclCommAbort(nw->comm);
    nw->comm = NULL;
}

/* The main thread's abort (never called with mu held; nccl_internal.h). */
void mg_nccl_abort_all(mg_comm_world *w) {
    w->failed = true;
    nccl_world *nw = w->impl;
    if (!nw) return;
    pthread_mutex_lock(&nw->mu);
    abort_locked(nw);
    pthread_mutex_unlock(&nw->mu);
}

/* ---- the watchdog ---- */

/* The timeout line of comm_wait.c's mg_comm_wait_step, for a call the main thread is not waiting
 * on. */
static void wd_timeout_msg(nccl_world *nw, const mg_comm *c, const char *call, uint64_t seq,
                           const char *how) {
    char ranks[256];
    mg_comm_rank_list(c, ranks, sizeof ranks);
    snprintf(nw->wd_msg, sizeof nw->wd_msg,
             "%s #%llu on group '%s' (ranks %s) timed out after %g s on rank %d%s; ranks that did "
             "not reach it: unknown",
             call ? call : "no call", (unsigned long long)seq, c->name, ranks, nw->timeout_s,
             c->w->rank, how);
}

/* One look, under mu. */
static void wd_check(nccl_world *nw, mg_comm_world *w) {
    if (nw->aborted) return;
    double now = mg_clock_seconds();
    bool forced = nw->in_call && now - nw->in_since > nw->timeout_s + WD_GRACE_S;
    if (nw->in_call && !forced) return; /* the main thread's own waits are bounded */
    if (!nw->wd_failed && forced && nw->in_c)
        wd_timeout_msg(nw, nw->in_c, nw->in_c->call, nw->in_c->seq,
                       " (stuck inside NCCL; aborted by the watchdog)");
    if (forced) nw->wd_failed = true;
    for (nccl_group *g = nw->groups; g && !nw->wd_failed; g = g->next) {
        if (!g->pending) continue;
        cudaError_t e = cudaEventQuery(g->last);
        if (e == cudaSuccess) {
            g->pending = false;
        } else if (e != cudaErrorNotReady) {
            snprintf(nw->wd_msg, sizeof nw->wd_msg,
                     "%s #%llu on group '%s' failed on rank %d: cudaEventQuery: %s (%s)",
                     g->last_call, (unsigned long long)g->last_seq, g->owner->name, w->rank,
                     cudaGetErrorString(e), cudaGetErrorName(e));
            nw->wd_failed = true;
        } else if (now - g->last_t > nw->timeout_s) {
            wd_timeout_msg(nw, g->owner, g->last_call, g->last_seq, "");
            nw->wd_failed = true;
        }
    }
    int rank;
    const char *message;
    if (!nw->wd_failed && mg_comm_health_try_poll(w->health, &rank, &message)) {
        nw->wd_msg[0] = '\0'; /* latched in health: the main thread words it */
        nw->wd_failed = true;
    }
    if (nw->wd_failed) abort_locked(nw);
}

static void *wd_main(void *arg) {
    mg_comm_world *w = arg;
    nccl_world *nw = w->impl;
    cudaSetDevice(nw->device);
    for (;;) {
        pthread_mutex_lock(&nw->mu);
        bool stop = nw->stop;
        if (!stop) wd_check(nw, w);
        pthread_mutex_unlock(&nw->mu);
        if (stop) return NULL;
        struct timespec ts = {0, WD_PERIOD_NS};
        nanosleep(&ts, NULL);
    }
}

mg_status mg_nccl_wd_start(mg_comm_world *w) {
    nccl_world *nw = w->impl;
    int e = pthread_create(&nw->thread, NULL, wd_main, w);
    nw->thread_on = e == 0;
    if (e != 0)
        return MG_FAIL(MG_ERR_IO, "rank %d: starting the NCCL watchdog thread: %s", w->rank,
                       strerror(e));
    return MG_OK;
}

void mg_nccl_wd_stop(nccl_world *nw) {
    if (!nw->thread_on) return;
    pthread_mutex_lock(&nw->mu);
    nw->stop = true;
    pthread_mutex_unlock(&nw->mu);
    pthread_join(nw->thread, NULL);
    nw->thread_on = false;
}

/* The main thread takes the communicators over; false when the watchdog failed the world. */
bool mg_nccl_wd_enter(nccl_world *nw, const mg_comm *c) {
    pthread_mutex_lock(&nw->mu);
    bool ok = !nw->wd_failed;
    if (ok) {
        nw->in_call = true;
        nw->in_since = mg_clock_seconds();
        nw->in_c = c;
    }
    pthread_mutex_unlock(&nw->mu);
    return ok;
}

/* Whether `stream` is being captured into a CUDA graph: an event recorded there belongs to the
 * graph, and the watchdog thread's query of it would break the capture. */
static bool capturing(cudaStream_t stream) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone;
}

/* ... and hands them back; enqueued: record `last` behind the call just enqueued on stream
 * (not inside a capture: the graph's launch is watched as a whole by the waits after it). */
void mg_nccl_wd_leave(nccl_world *nw, nccl_group *g, const mg_comm *c, cudaStream_t stream,
                      bool enqueued) {
    pthread_mutex_lock(&nw->mu);
    if (enqueued && g && g->comm && !nw->aborted && !capturing(stream) &&
        cudaEventRecord(g->last, stream) == cudaSuccess) {
        g->pending = true;
        g->last_t = mg_clock_seconds();
        g->last_seq = c->seq;
        g->last_call = c->call;
    }
    nw->in_call = false;
    nw->in_c = NULL;
    pthread_mutex_unlock(&nw->mu);
}

bool mg_nccl_wd_failed(nccl_world *nw) {
    pthread_mutex_lock(&nw->mu);
    bool f = nw->wd_failed;
    pthread_mutex_unlock(&nw->mu);
    return f;
}

/* The watchdog failed the world: its line, or the peer's notice as mg_comm_wait_step words it
 * for c (every communicator aborted, the world failed). */
mg_status mg_nccl_wd_error(mg_comm *c) {
    nccl_world *nw = c->w->impl;
    char msg[512];
    pthread_mutex_lock(&nw->mu);
    snprintf(msg, sizeof msg, "%s", nw->wd_msg);
    pthread_mutex_unlock(&nw->mu);
    mg_nccl_abort_all(c->w);
    if (*msg) return MG_FAIL(MG_ERR_COMM, "%s", msg);
    mg_status st = mg_comm_wait_step(c, INFINITY);
    if (st != MG_OK) return st;
    return mg_comm_fail_call(c, "the NCCL watchdog aborted the communicators");
}

#else
/* Built without NCCL (see nccl.c). ISO C wants at least one declaration in a file. */
typedef int mg_comm_nccl_watchdog_unused;
#endif
