/* The NCCL backend: device buffers, every operation enqueued on the caller's stream.
 *
 * Two kinds of communicator. The world's own communicator is nonblocking (config.blocking = 0):
 * NCCL runs its init, every ncclCommSplit from it and its finalize in a thread of its own, and
 * wait_ready polls ncclCommGetAsyncError between mg_comm_wait_step calls (a peer's failure
 * notice, the deadline), so set-up and teardown are bounded by the timeout. Every group, the
 * "world" group included, is a split child with config.blocking = 1: a nonblocking communicator
 * makes NCCL start a thread for every collective (~150 us of host time per call, measured by
 * bench/comm.c), a blocking one enqueues in the caller's thread as raw NCCL does. The split
 * itself stays nonblocking: NCCL runs it in the parent's mode whatever the child's config.
 *
 * No rank hangs, without a wait per call: a call enqueues, records the group's `last` event
 * behind it and returns. Hangs are bounded in two places.
 *   - mg_comm_sync polls an event with the deadline and the health channel (main thread).
 *   - A watchdog thread per world (nccl_watchdog.c) watches the `last` events and the health
 *     channel while the main thread is outside this file (computing, or stuck in a
 *     cudaStreamSynchronize of its own); on a deadline miss or a peer's notice it
 *     ncclCommAborts every communicator, and the main thread's next call or sync returns
 *     MG_ERR_COMM with its message. Every entry here is bracketed by mg_nccl_wd_enter and
 *     mg_nccl_wd_leave, which hand the communicators to the main thread and back
 *     (nccl_internal.h says who may free what, when).
 * The watchdog's last resort aborts under a blocking NCCL call stuck far beyond the timeout.
 * To keep that path rare, NCCL_RUNTIME_CONNECT defaults to 0 here (set in the environment
 * before NCCL starts unless the user set it): collectives' connections are made inside the
 * bounded, nonblocking split, not lazily by the first blocking call. Send/recv connections are
 * still made by their first call.
 *
 * Set-up: rank 0's ncclUniqueId reaches every rank over the world's TCP rendezvous, which comm.c
 * opens for every world of more than one rank, MPI launches included (comm_backend.h); unlike
 * MPI_Bcast it is bounded by the timeout. Every group is ncclCommSplit from the world's
 * communicator (color = group index, key = position; NCCL_SPLIT_NOCOLOR for a rank in no
 * group). Each group owns a device int, zeroed at creation, that the barrier all-reduces, so no
 * call allocates.
 *
 * Mapping: F32, BF16, F16, I32, I64, U8 -> ncclFloat32, ncclBfloat16, ncclFloat16, ncclInt32,
 * ncclInt64, ncclUint8; sum, avg, max -> ncclSum, ncclAvg, ncclMax (comm.c refuses avg on
 * integers). All-to-all with per-peer counts and batched point-to-point are ncclSend/ncclRecv
 * inside ncclGroupStart/End (zero-count segments are skipped on both sides, as the counts agree).
 * All-gathers and equal all-to-alls inside a group's copy-engine windows go to its copy-engine
 * communicator (nccl_copy_engine.c).
 *
 * Needs: CUDA runtime, NCCL >= 2.19 (ncclCommSplit, nonblocking communicators, ncclAvg,
 * ncclBfloat16), pthreads, comm/comm_backend, comm/comm_wait, comm/health, comm/rendezvous,
 * comm/nccl_internal.h (the watchdog and the abort: nccl_watchdog.c). Compiled only with
 * MG_HAVE_NCCL. */
#ifdef MG_HAVE_NCCL

#include "comm/nccl_internal.h"

#include "comm/comm_wait.h"
#include "comm/health.h"
#include "comm/rendezvous.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 19, 0)
#error "the NCCL backend needs NCCL 2.19 or newer (ncclCommSplit with nonblocking communicators)"
#endif

/* ---- errors ---- */

/* ncclGetLastError's text on one line (it may hold newlines), or "". */
static const char *last_error(ncclComm_t comm, char *buf, size_t cap) {
    const char *s = ncclGetLastError(comm);
    snprintf(buf, cap, "%s", s ? s : "");
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    size_t n = strlen(buf);
    while (n && buf[n - 1] == ' ') buf[--n] = '\0';
    return buf;
}

/* An NCCL call or a communicator's asynchronous state failed: the one MG_ERR_COMM line (through
 * mg_comm_fail_call), a trace frame at the call site, then every communicator is aborted. */
mg_status mg_nccl_fail(mg_comm *c, ncclComm_t comm, ncclResult_t r, const char *expr,
                       const char *func, const char *file, int line) {
    char last[384], what[640];
    last_error(comm, last, sizeof last);
    snprintf(what, sizeof what, "%s: %s%s%s", expr, ncclGetErrorString(r), *last ? ": " : "", last);
    mg_status st = mg_comm_fail_call(c, what);
    mg_error_frame(func, file, line, expr);
    mg_nccl_abort_all(c->w);
    return st;
}

static mg_status cuda_fail(mg_comm *c, cudaError_t e, const char *expr, const char *func,
                           const char *file, int line) {
    char what[512];
    snprintf(what, sizeof what, "%s: %s (%s)", expr, cudaGetErrorString(e), cudaGetErrorName(e));
    mg_status st = mg_comm_fail_call(c, what);
    mg_error_frame(func, file, line, expr);
    mg_nccl_abort_all(c->w);
    return st;
}

static mg_status wait_ready(mg_comm *c, ncclComm_t comm, const char *what);

/* After an NCCL call on a nonblocking communicator: an error fails the call; otherwise the
 * communicator's own state says when the work NCCL took over has been done (enqueued, created,
 * flushed). NCCL answers ncclInProgress or, for some calls (ncclCommSplit, 2.28), ncclSuccess
 * while its thread still runs, so the state is always waited for; it costs one atomic load when
 * the work is already done. */
static mg_status nccl_done(mg_comm *c, ncclComm_t comm, ncclResult_t r, const char *expr,
                           const char *func, const char *file, int line) {
    if (r != ncclSuccess && r != ncclInProgress)
        return mg_nccl_fail(c, comm, r, expr, func, file, line);
    mg_status st = wait_ready(c, comm, expr);
    if (st != MG_OK) mg_error_frame(func, file, line, expr);
    return st;
}

#define CUDA_TRY(c, expr)                                                                          \
    do {                                                                                           \
        cudaError_t mg_cuda_e_ = (expr);                                                           \
        if (mg_cuda_e_ != cudaSuccess)                                                             \
            return cuda_fail((c), mg_cuda_e_, #expr, __func__, __FILE__, __LINE__);                \
    } while (0)

/* ---- waiting ---- */

/* Between two polls of an operation that started at `start`: yield for the first 0.2 ms (NCCL's
 * enqueue thread needs tens of microseconds, and a collective of a few MB about as long), then
 * sleep 10 us, after 2 ms 100 us (plus the kernel's timer slack), so a finished operation is seen
 * within ~0.2 ms and a rank that waits long costs little CPU. From the 32nd poll on each step
 * also asks mg_comm_wait_step about peers' failure notices and the deadline (it rate-limits the
 * real poll of the channel); on either every communicator is aborted. */
static mg_status pause_step(mg_comm *c, int iter, double start, double deadline) {
    if (iter < 32) return MG_OK;
    mg_status st = mg_comm_wait_step(c, deadline);
    if (st != MG_OK) {
        mg_nccl_abort_all(c->w);
        return st;
    }
    double waited = mg_clock_seconds() - start;
    if (waited < 2e-4) {
        sched_yield();
        return MG_OK;
    }
    struct timespec ts = {0, waited < 2e-3 ? 10000L : 100000L};
    nanosleep(&ts, NULL);
    return MG_OK;
}

/* An asynchronous failure (a communicator's state turned to an error, or a CUDA error surfaced
 * while collectives ran) is most often a peer that died or aborted: NCCL words that as a remote,
 * system or CUDA error without naming the rank, and intra-node transports may not notice at all.
 * The side channel names the rank, usually within milliseconds, so it gets up to 0.5 s to speak
 * first: MG_OK when it stayed silent, else its MG_ERR_COMM (every communicator aborted). */
static mg_status peer_first(mg_comm *c) {
    double now = mg_clock_seconds(), until = now + 0.5, deadline = now + c->w->timeout_s;
    struct timespec ts = {0, 5000000L};
    while (mg_clock_seconds() < until) {
        mg_status st = mg_comm_wait_step(c, deadline);
        if (st != MG_OK) {
            mg_nccl_abort_all(c->w);
            return st;
        }
        nanosleep(&ts, NULL);
    }
    return MG_OK;
}

static mg_status async_error(mg_comm *c, ncclComm_t comm, ncclResult_t state, const char *what) {
    if (state == ncclRemoteError || state == ncclSystemError || state == ncclUnhandledCudaError)
        MG_CHECK(peer_first(c));
    return mg_nccl_fail(c, comm, state, what, __func__, __FILE__, __LINE__);
}

/* Polls comm until the operation it has in flight (init, split, finalize, an enqueue) has left
 * ncclInProgress. NCCL refuses any call on a communicator still in progress, so every
 * ncclInProgress answer is followed by this before the next call. */
static mg_status wait_ready(mg_comm *c, ncclComm_t comm, const char *what) {
    double start = mg_clock_seconds(), deadline = start + c->w->timeout_s;
    for (int iter = 0;; iter++) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) state = r;
        if (state == ncclSuccess) return MG_OK;
        if (state != ncclInProgress) return async_error(c, comm, state, what);
        mg_status st = pause_step(c, iter, start, deadline);
        if (st != MG_OK) return st;
    }
}

/* ---- teardown ---- */

/* A healthy communicator's orderly end: ncclCommFinalize flushes its operations (nonblocking:
 * wait_ready, bounded), then ncclCommDestroy frees it locally. Aborted instead on any failure
 * or when the world has failed. c stands for the group in messages. */
static void close_comm(mg_comm *c, ncclComm_t comm) {
    if (!comm) return;
    nccl_world *nw = c->w->impl;
    /* While it closes, an abort (the main thread's or the watchdog's) takes it as well. */
    pthread_mutex_lock(&nw->mu);
    nw->closing = comm;
    pthread_mutex_unlock(&nw->mu);
    bool ok = false;
    if (!c->w->failed) {
        mg_status st = nccl_done(c, comm, ncclCommFinalize(comm), "ncclCommFinalize", __func__,
                                 __FILE__, __LINE__);
        ok = st == MG_OK && ncclCommDestroy(comm) == ncclSuccess;
        if (!ok) c->w->failed = true;
    }
    pthread_mutex_lock(&nw->mu);
    if (!ok && nw->closing == comm) ncclCommAbort(comm); /* else freed by an abort already */
    nw->closing = NULL;
    pthread_mutex_unlock(&nw->mu);
}

/* World-level waits (init, finalize) happen outside any group; this stands in for the world
 * group so that mg_comm_wait_step and mg_comm_fail_call word them like any call. */
static void world_call(mg_comm_world *w, mg_comm *c, int *ranks, const char *call) {
    memset(c, 0, sizeof *c);
    c->w = w;
    snprintf(c->name, sizeof c->name, "world");
    c->rank = w->rank;
    c->size = ranks ? w->size : 0;
    c->global_ranks = ranks;
    for (int r = 0; ranks && r < w->size; r++) ranks[r] = r;
    c->call = call;
}

/* ---- the world ---- */

ncclConfig_t mg_nccl_comm_config(const char *name, int blocking) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    cfg.splitShare = 0;  /* each group its own resources and abort flag */
    cfg.commName = name; /* NCCL keeps the pointer: name lives as long as the communicator */
    return cfg;
}

/* LOCAL_RANK selects the device; a process that sees one GPU (e.g. CUDA_VISIBLE_DEVICES set per
 * rank by the launcher) uses it whatever its local rank. */
static mg_status pick_device(const mg_launch_info *li, int *device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "rank %d: the NCCL backend needs a CUDA GPU and none is visible "
                       "(cudaGetDeviceCount: %s); check the driver and CUDA_VISIBLE_DEVICES",
                       li->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (n == 1) {
        *device = 0;
        return MG_OK;
    }
    if (li->local_rank < 0 || li->local_rank >= n)
        return MG_FAIL(MG_ERR_USAGE,
                       "rank %d has local rank %d but this process sees %d GPUs (devices "
                       "0..%d): start at most %d ranks per node, one per GPU",
                       li->rank, li->local_rank, n, n - 1, n);
    *device = li->local_rank;
    return MG_OK;
}

static mg_status nccl_world_init(mg_comm_world *w, const mg_launch_info *li) {
    nccl_world *nw = calloc(1, sizeof *nw);
    int *ranks = malloc((size_t)w->size * sizeof *ranks);
    if (!nw || !ranks) {
        free(nw);
        free(ranks);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory initialising NCCL");
    }
    pthread_mutex_init(&nw->mu, NULL);
    nw->timeout_s = w->timeout_s;
    /* Before NCCL reads its environment (see the top of the file); the user's value wins. */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    const char *ce = getenv("MG_NCCL_COPY_ENGINE");
    if (ce && strcmp(ce, "0") != 0 && strcmp(ce, "1") != 0) {
        pthread_mutex_destroy(&nw->mu);
        free(nw);
        free(ranks);
        return MG_FAIL(MG_ERR_USAGE, "MG_NCCL_COPY_ENGINE=%s: expected 0 or 1 (default 0)", ce);
    }
    int version = 0;
    nw->copy_engine = ce && !strcmp(ce, "1") && MG_NCCL_CE &&
                      ncclGetVersion(&version) == ncclSuccess && version >= NCCL_VERSION(2, 28, 0);
    mg_comm c;
    world_call(w, &c, ranks, "nccl_init");
    mg_status st = pick_device(li, &nw->device);
    cudaError_t e = cudaSuccess;
    if (st == MG_OK && (e = cudaSetDevice(nw->device)) != cudaSuccess)
        st = MG_FAIL(MG_ERR_UNSUPPORTED, "rank %d: cudaSetDevice(%d): %s", w->rank, nw->device,
                     cudaGetErrorString(e));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (st == MG_OK && w->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            st = mg_nccl_fail(&c, NULL, r, "ncclGetUniqueId", __func__, __FILE__, __LINE__);
    }
    /* A rank that failed above returns at once: comm.c posts its failure, which ends the
     * others' wait in the broadcast. */
    if (st == MG_OK && w->size > 1) {
        mg_rendezvous *rv = mg_comm_health_rendezvous(w->health);
        if (!rv)
            st = MG_FAIL(MG_ERR_INTERNAL, "NCCL init on rank %d: the world has no rendezvous",
                         w->rank);
        else
            st = mg_rendezvous_broadcast(rv, &id, sizeof id);
        if (st != MG_OK) w->failed = true;
    }
    if (st == MG_OK) {
        ncclConfig_t cfg = mg_nccl_comm_config("world-parent", 0);
        ncclResult_t r = ncclCommInitRankConfig(&nw->comm, w->size, id, w->rank, &cfg);
        if ((r == ncclSuccess || r == ncclInProgress) && !nw->comm) r = ncclInternalError;
        st = nccl_done(&c, nw->comm, r, "ncclCommInitRankConfig", __func__, __FILE__, __LINE__);
    }
    free(ranks);
    w->impl = nw; /* before the thread starts: it reads w->impl */
    if (st == MG_OK && w->size > 1) st = mg_nccl_wd_start(w);
    if (st != MG_OK) {
        w->impl = NULL;
        if (nw->comm) ncclCommAbort(nw->comm); /* also a failed init must be freed */
        pthread_mutex_destroy(&nw->mu);
        free(nw);
        w->failed = true;
        return st;
    }
    return MG_OK;
}

static void nccl_world_abort(mg_comm_world *w) {
    mg_nccl_abort_all(w);
}

static void nccl_world_finalize(mg_comm_world *w) {
    nccl_world *nw = w->impl;
    if (!nw) return;
    mg_nccl_wd_stop(nw); /* from here on this thread alone touches the communicators */
    /* comm.c frees every group first; one still here (it should not be) is aborted. */
    for (nccl_group *g = nw->groups; g; g = g->next) {
        if (g->ce) ncclCommAbort(g->ce);
        if (g->comm) ncclCommAbort(g->comm);
        g->comm = g->ce = NULL;
    }
    ncclComm_t comm = nw->comm;
    nw->comm = NULL; /* detached: a failing finalize's abort_all must not free it twice */
    if (comm) {
        int *ranks = malloc((size_t)w->size * sizeof *ranks);
        mg_comm c;
        world_call(w, &c, ranks, "nccl_finalize");
        close_comm(&c, comm);
        free(ranks);
    }
    if (nw->abort_word) cudaFreeHost(nw->abort_word);
    pthread_mutex_destroy(&nw->mu);
    free(nw);
    w->impl = NULL;
}

/* ---- groups ---- */

static void group_release(nccl_group *g) {
    if (g->scratch) cudaFree(g->scratch);
    if (g->done) cudaEventDestroy(g->done);
    if (g->last) cudaEventDestroy(g->last);
    free(g);
}

/* The device int and the event of a new group. */
static mg_status group_resources(mg_comm *c, nccl_group *g) {
    CUDA_TRY(c, cudaMalloc((void **)&g->scratch, sizeof *g->scratch));
    CUDA_TRY(c, cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming));
    CUDA_TRY(c, cudaEventCreateWithFlags(&g->last, cudaEventDisableTiming));
    /* The zero is written on a private non-blocking stream and waited for there: the legacy
     * default stream (cudaMemset) or cudaDeviceSynchronize would also wait for collectives the
     * caller enqueued before, unbounded if a peer never comes. */
    cudaStream_t s;
    CUDA_TRY(c, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaError_t e = cudaMemsetAsync(g->scratch, 0, sizeof *g->scratch, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    CUDA_TRY(c, e);
    return MG_OK;
}

/* Every group, the "world" group included, is a blocking child of the world's nonblocking
 * communicator (see the top of the file). Runs as a main-thread entry (mg_nccl_wd_enter). */
static mg_status split_child(mg_comm_world *w, mg_comm *c, int color, int key) {
    nccl_world *nw = w->impl;
    nccl_group *g = calloc(1, sizeof *g);
    if (!g) return MG_FAIL(MG_ERR_NOMEM, "out of memory creating group '%s'", c->name);
    ncclConfig_t cfg = mg_nccl_comm_config(c->name, 1);
    nw->split_out = NULL;
    ncclResult_t r =
        ncclCommSplit(nw->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nw->split_out, &cfg);
    /* A split of a nonblocking parent runs as a job of the parent, whatever the child's config:
     * the parent's state says when it ended, and only then does the child appear in split_out.
     * A failed wait aborts the parent, which also stops and joins the split. */
    mg_status st = nccl_done(c, nw->comm, r, "ncclCommSplit", __func__, __FILE__, __LINE__);
    ncclComm_t child = nw->split_out;
    nw->split_out = NULL;
    if (st == MG_OK && color >= 0 && !child)
        st = mg_nccl_fail(c, nw->comm, ncclInternalError, "ncclCommSplit (no communicator)",
                          __func__, __FILE__, __LINE__);
    if (st == MG_OK && child) st = wait_ready(c, child, "ncclCommSplit (child)");
    int n = -1, me = -1;
    if (st == MG_OK && child &&
        (ncclCommCount(child, &n) != ncclSuccess || ncclCommUserRank(child, &me) != ncclSuccess ||
         n != c->size || me != c->rank)) {
        char what[160];
        snprintf(what, sizeof what,
                 "ncclCommSplit made a communicator of %d ranks with this rank at %d; the group "
                 "has %d ranks with this rank at %d",
                 n, me, c->size, c->rank);
        st = mg_comm_fail_call(c, what);
        mg_nccl_abort_all(w);
    }
    if (st != MG_OK || color < 0) { /* color < 0: in no group of this list, took part only */
        if (child) ncclCommAbort(child);
        free(g);
        return st;
    }
    g->comm = child;
    g->owner = c;
    st = group_resources(c, g);
    if (st != MG_OK) {
        ncclCommAbort(g->comm);
        group_release(g);
        return st;
    }
    pthread_mutex_lock(&nw->mu);
    g->next = nw->groups;
    nw->groups = g;
    pthread_mutex_unlock(&nw->mu);
    c->impl = g;
    return MG_OK;
}

static mg_status nccl_group_split(mg_comm_world *w, mg_comm *c, int color, int key) {
    nccl_world *nw = w->impl;
    c->impl = NULL;
    if (!nw) return mg_comm_fail_call(c, "the NCCL world communicator was aborted");
    if (!mg_nccl_wd_enter(nw, c)) return mg_nccl_wd_error(c);
    mg_status st = nw->comm && !nw->aborted
                       ? split_child(w, c, color, key)
                       : mg_comm_fail_call(c, "the NCCL world communicator was aborted");
    mg_nccl_wd_leave(nw, NULL, c, NULL, false);
    return st;
}

static void nccl_group_free(mg_comm *c) {
    nccl_group *g = c->impl;
    if (!g) return;
    nccl_world *nw = c->w->impl;
    c->call = "group_free";
    bool mine = mg_nccl_wd_enter(nw, c);
    pthread_mutex_lock(&nw->mu);
    for (nccl_group **p = &nw->groups; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            break;
        }
    ncclComm_t comm = g->comm, ce = g->ce; /* NULL when an abort freed them */
    g->comm = g->ce = NULL;
    pthread_mutex_unlock(&nw->mu);
    if (mine) {
#if MG_NCCL_CE
        for (int i = 0; ce && !c->w->failed && i < g->n_wins; i++)
            ncclCommWindowDeregister(ce, g->wins[i].win);
#endif
        close_comm(c, ce);
        close_comm(c, comm);
        mg_nccl_wd_leave(nw, NULL, c, NULL, false);
    }
    free(g->wins);
    group_release(g);
    c->impl = NULL;
}

/* ---- calls ---- */

static ncclDataType_t nccl_type(mg_dtype dt) {
    switch (dt) {
    case MG_F32:
        return ncclFloat32;
    case MG_BF16:
        return ncclBfloat16;
    case MG_F16:
        return ncclFloat16;
    case MG_I32:
        return ncclInt32;
    case MG_I64:
        return ncclInt64;
    case MG_U8:
        return ncclUint8;
    }
    return ncclFloat32; /* unreachable: comm.c checked dt */
}

static ncclRedOp_t nccl_op(mg_reduce_op op) {
    switch (op) {
    case MG_REDUCE_SUM:
        return ncclSum;
    case MG_REDUCE_AVG:
        return ncclAvg;
    case MG_REDUCE_MAX:
        return ncclMax;
    }
    return ncclSum; /* unreachable: comm.c checked op */
}

/* Starts a main-thread entry on group c: its live communicator, or MG_ERR_COMM when the world
 * was aborted (by the watchdog: its message). On MG_OK the caller ends with mg_nccl_wd_leave. */
mg_status mg_nccl_begin(mg_comm *c, nccl_group **out) {
    nccl_group *g = c->impl;
    nccl_world *nw = c->w->impl;
    if (!g || !nw) return mg_comm_fail_call(c, "the NCCL communicator was aborted");
    if (!mg_nccl_wd_enter(nw, c)) return mg_nccl_wd_error(c);
    if (!g->comm) {
        mg_nccl_wd_leave(nw, NULL, c, NULL, false);
        return mg_comm_fail_call(c, "the NCCL communicator was aborted");
    }
    *out = g;
    return MG_OK;
}

/* Ends an entry that enqueued `expr` (answer r) on stream: no wait, the event `last` is recorded
 * behind it for the watchdog. A blocking communicator answers ncclSuccess; ncclInProgress is
 * waited for all the same (nccl_done). */
static mg_status finish(mg_comm *c, nccl_group *g, ncclComm_t comm, ncclResult_t r,
                        const char *expr, cudaStream_t stream, const char *func, const char *file,
                        int line) {
    nccl_world *nw = c->w->impl;
    mg_status st = MG_OK;
    if (r != ncclSuccess)
        st = mg_nccl_wd_failed(nw) ? mg_nccl_wd_error(c)
                                   : nccl_done(c, comm, r, expr, func, file, line);
    mg_nccl_wd_leave(nw, g, c, stream, st == MG_OK);
    return st;
}

#define ENQUEUE(c, g, stream, expr)                                                                \
    finish((c), (g), (g)->comm, (expr), #expr, (cudaStream_t)(stream), __func__, __FILE__, __LINE__)
/* The same on the group's copy-engine communicator. */
#define ENQUEUE_CE(c, g, stream, expr)                                                             \
    finish((c), (g), (g)->ce, (expr), #expr, (cudaStream_t)(stream), __func__, __FILE__, __LINE__)

static mg_status nothing(mg_comm *c) {
    mg_nccl_wd_leave(c->w->impl, NULL, c, NULL, false);
    return MG_OK;
}

static mg_status nccl_all_reduce(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, mg_reduce_op op, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    if (!count) return nothing(c);
    return ENQUEUE(c, g, stream,
                   ncclAllReduce(send, recv, count, nccl_type(dt), nccl_op(op), g->comm,
                                 (cudaStream_t)stream));
}

static mg_status nccl_reduce_scatter(mg_comm *c, const void *send, void *recv, size_t count,
                                     mg_dtype dt, mg_reduce_op op, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    if (!count) return nothing(c);
    return ENQUEUE(c, g, stream,
                   ncclReduceScatter(send, recv, count, nccl_type(dt), nccl_op(op), g->comm,
                                     (cudaStream_t)stream));
}

static mg_status nccl_all_gather(mg_comm *c, const void *send, void *recv, size_t count,
                                 mg_dtype dt, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    if (!count) return nothing(c);
    size_t bytes = count * mg_dtype_size(dt);
    if (g->ce && mg_nccl_in_window(g, send, bytes) &&
        mg_nccl_in_window(g, recv, bytes * (size_t)c->size))
        return ENQUEUE_CE(
            c, g, stream,
            ncclAllGather(send, recv, count, nccl_type(dt), g->ce, (cudaStream_t)stream));
    return ENQUEUE(c, g, stream,
                   ncclAllGather(send, recv, count, nccl_type(dt), g->comm, (cudaStream_t)stream));
}

static mg_status nccl_broadcast(mg_comm *c, void *buf, size_t count, mg_dtype dt, int root,
                                void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    if (!count) return nothing(c);
    return ENQUEUE(
        c, g, stream,
        ncclBroadcast(buf, buf, count, nccl_type(dt), root, g->comm, (cudaStream_t)stream));
}

/* Ends a group of ncclSend/ncclRecv: ncclGroupEnd is called whatever happened inside (NCCL
 * requires it), and the first error of the group wins. */
static mg_status group_end(mg_comm *c, nccl_group *g, ncclResult_t first, const char *first_expr,
                           cudaStream_t s) {
    ncclResult_t r = ncclGroupEnd();
    if (first != ncclSuccess) {
        mg_status st = mg_nccl_wd_failed(c->w->impl) ? mg_nccl_wd_error(c)
                                                     : mg_nccl_fail(c, g->comm, first, first_expr,
                                                                    __func__, __FILE__, __LINE__);
        mg_nccl_wd_leave(c->w->impl, NULL, c, NULL, false);
        return st;
    }
    return finish(c, g, g->comm, r, "ncclGroupEnd", s, __func__, __FILE__, __LINE__);
}

/* n operations inside one ncclGroupStart/End on c's communicator (g begun by the caller):
 * one(k) enqueues the k-th and says what it called; the first failure wins. */
typedef ncclResult_t (*group_op_fn)(const void *ctx, int k, ncclComm_t comm, cudaStream_t s,
                                    const char **expr);
static mg_status grouped(mg_comm *c, nccl_group *g, int n, group_op_fn one, const void *ctx,
                         cudaStream_t s) {
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return group_end(c, g, first, "ncclGroupStart", s);
    const char *first_expr = "ncclGroupStart";
    for (int k = 0; k < n; k++) {
        const char *expr = NULL;
        ncclResult_t r = one(ctx, k, g->comm, s, &expr);
        if (r != ncclSuccess && first == ncclSuccess) first = r, first_expr = expr;
    }
    return group_end(c, g, first, first_expr, s);
}

/* an uneven all-to-all: operation 2p sends peer p its part, 2p + 1 receives p's */
typedef struct {
    const void *send;
    const size_t *send_counts, *send_displs;
    void *recv;
    const size_t *recv_counts, *recv_displs;
    size_t es;
    ncclDataType_t t;
} a2a_args;

static ncclResult_t a2a_one(const void *ctx, int k, ncclComm_t comm, cudaStream_t s,
                            const char **expr) {
    const a2a_args *a = ctx;
    const int p = k / 2;
    if (k % 2 == 0) {
        *expr = "ncclSend";
        return a->send_counts[p] ? ncclSend((const char *)a->send + a->send_displs[p] * a->es,
                                            a->send_counts[p], a->t, p, comm, s)
                                 : ncclSuccess;
    }
    *expr = "ncclRecv";
    return a->recv_counts[p] ? ncclRecv((char *)a->recv + a->recv_displs[p] * a->es,
                                        a->recv_counts[p], a->t, p, comm, s)
                             : ncclSuccess;
}

#if MG_NCCL_CE
/* The part every peer gets when an all-to-all sends and receives equal parts in peer order
 * (ncclAlltoAll's form, which NCCL can run on the copy engines), else 0. */
static size_t equal_parts(int n, const size_t *send_counts, const size_t *send_displs,
                          const size_t *recv_counts, const size_t *recv_displs) {
    size_t k = send_counts[0];
    for (int p = 0; p < n; p++)
        if (send_counts[p] != k || recv_counts[p] != k || send_displs[p] != (size_t)p * k ||
            recv_displs[p] != (size_t)p * k)
            return 0;
    return k;
}
#endif

static mg_status nccl_all_to_all(mg_comm *c, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, mg_dtype dt, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    size_t es = mg_dtype_size(dt);
    ncclDataType_t t = nccl_type(dt);
    cudaStream_t s = (cudaStream_t)stream;
#if MG_NCCL_CE
    size_t k = g->ce ? equal_parts(c->size, send_counts, send_displs, recv_counts, recv_displs) : 0;
    if (k && mg_nccl_in_window(g, send, k * es * (size_t)c->size) &&
        mg_nccl_in_window(g, recv, k * es * (size_t)c->size))
        return ENQUEUE_CE(c, g, stream, ncclAlltoAll(send, recv, k, t, g->ce, s));
#endif
    const a2a_args a = {send, send_counts, send_displs, recv, recv_counts, recv_displs, es, t};
    return grouped(c, g, 2 * c->size, a2a_one, &a, s);
}

typedef struct {
    void *const *bufs;
    const size_t *counts;
    ncclDataType_t t;
    ncclRedOp_t op;
} many_args;

static ncclResult_t many_one(const void *ctx, int k, ncclComm_t comm, cudaStream_t s,
                             const char **expr) {
    const many_args *a = ctx;
    *expr = "ncclAllReduce";
    return a->counts[k] ? ncclAllReduce(a->bufs[k], a->bufs[k], a->counts[k], a->t, a->op, comm, s)
                        : ncclSuccess;
}

static mg_status nccl_all_reduce_many(mg_comm *c, void *const *bufs, const size_t *counts, int n,
                                      mg_dtype dt, mg_reduce_op op, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    const many_args a = {bufs, counts, nccl_type(dt), nccl_op(op)};
    return grouped(c, g, n, many_one, &a, (cudaStream_t)stream);
}

static ncclResult_t p2p_one(const void *ctx, int k, ncclComm_t comm, cudaStream_t s,
                            const char **expr) {
    const mg_p2p_op *o = (const mg_p2p_op *)ctx + k;
    *expr = o->is_send ? "ncclSend" : "ncclRecv";
    if (!o->count) return ncclSuccess;
    return o->is_send ? ncclSend(o->buf, o->count, nccl_type(o->dt), o->peer, comm, s)
                      : ncclRecv(o->buf, o->count, nccl_type(o->dt), o->peer, comm, s);
}

static mg_status nccl_batch_p2p(mg_comm *c, const mg_p2p_op *ops, int n_ops, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    return grouped(c, g, n_ops, p2p_one, ops, (cudaStream_t)stream);
}

/* Waits for everything enqueued on `stream` so far: an event behind it, polled with the
 * communicator's asynchronous state (a network error shows there, not in the event), the health
 * channel and the deadline. The main thread owns the communicators meanwhile (the watchdog
 * stands aside: this wait is bounded by itself). */
mg_status mg_nccl_sync_wait(mg_comm *c, nccl_group *g, cudaStream_t stream) {
    CUDA_TRY(c, cudaEventRecord(g->done, stream));
    double start = mg_clock_seconds(), deadline = start + c->w->timeout_s;
    for (int iter = 0;; iter++) {
        cudaError_t e = cudaEventQuery(g->done);
        if (e != cudaSuccess && e != cudaErrorNotReady) {
            MG_CHECK(peer_first(c));
            return cuda_fail(c, e, "cudaEventQuery", __func__, __FILE__, __LINE__);
        }
        /* also once the event has completed: a collective that an abort (a peer gone) ended
         * completes too, and only the communicator's state tells it from a success */
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress)
            return async_error(c, g->comm, state, "ncclCommGetAsyncError");
        if (g->ce && (r = ncclCommGetAsyncError(g->ce, &state)) != ncclSuccess) state = r;
        if (g->ce && state != ncclSuccess && state != ncclInProgress)
            return async_error(c, g->ce, state, "ncclCommGetAsyncError (copy engines)");
        if (e == cudaSuccess) return MG_OK;
        MG_CHECK(pause_step(c, iter, start, deadline));
    }
}

static mg_status nccl_sync(mg_comm *c, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    mg_status st = mg_nccl_sync_wait(c, g, (cudaStream_t)stream);
    mg_nccl_wd_leave(c->w->impl, NULL, c, NULL, false);
    return st;
}

/* A barrier is an all-reduce of one int that the host then waits for, so that when it returns
 * every rank of the group has reached it (as MPI_Barrier), not merely enqueued it. */
static mg_status nccl_barrier(mg_comm *c, void *stream) {
    nccl_group *g = NULL;
    MG_CHECK(mg_nccl_begin(c, &g));
    MG_CHECK(ENQUEUE(c, g, stream,
                     ncclAllReduce(g->scratch, g->scratch, 1, ncclInt32, ncclSum, g->comm,
                                   (cudaStream_t)stream)));
    return nccl_sync(c, stream);
}

const mg_comm_ops mg_comm_nccl_ops = {
    .name = "nccl",
    .world_init = nccl_world_init,
    .world_abort = nccl_world_abort,
    .world_finalize = nccl_world_finalize,
    .group_split = nccl_group_split,
    .group_free = nccl_group_free,
    .all_reduce = nccl_all_reduce,
    .all_reduce_many = nccl_all_reduce_many,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .broadcast = nccl_broadcast,
    .batch_p2p = nccl_batch_p2p,
    .barrier = nccl_barrier,
    .sync = nccl_sync,
    .copy_engine = mg_nccl_copy_engine,
#if MG_NCCL_CE
    .mem_alloc = mg_nccl_mem_alloc,
    .mem_free = mg_nccl_mem_free,
    .window_register = mg_nccl_window_register,
    .window_deregister = mg_nccl_window_deregister,
#endif
    .peer_alloc = mg_nccl_peer_alloc,
    .peer_free = mg_nccl_peer_free,
};

#else
/* Built without NCCL: comm.c answers MG_ERR_UNSUPPORTED for the NCCL backend. ISO C wants at
 * least one declaration in a file. */
typedef int mg_comm_nccl_unused;
#endif
