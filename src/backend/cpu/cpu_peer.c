/* The exchanges over peer-mapped memory on the CPU backend (contract: backend_ops.h, peer_push,
 * peer_sum, peer_take; the memory: core/peer_window.h), for ranks that share a node's memory (the
 * MPI backend's shared windows). The same hand-offs as the CUDA backend's (cuda/peer_reduce.cu):
 * READY raised in a receiver's buffer by a sender after its copy, FREE raised in a sender's buffer
 * by a receiver once it has taken in the copy, the counts in the owner's epochs; the flags are
 * read with acquire and written with release ordering, so the copy before a flag is seen with it.
 * The host waits, yielding the core now and then, and gives up after the window's timeout with
 * MG_ERR_COMM (a peer that is gone). Streams do not exist here: every call completes in order. */
#include "backend/cpu/cpu_ops.h"

#include "core/clock.h"

#include <sched.h>

#define PR_READY 0
#define PR_FREE  1

static uint32_t *flag_of(const mg_peer_window *pw, int owner, int q, int b) {
    return (uint32_t *)((char *)pw->base[owner] + pw->bytes) + (size_t)q * MG_PEER_BARRIERS + b;
}

static mg_status check(const mg_peer_window *pw, const char *what, size_t slot) {
    if (!pw || pw->n < 1 || pw->n > MG_PEER_MAX || pw->rank < 0 || pw->rank >= pw->n)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: no peer window", what);
    if ((size_t)pw->n * slot > pw->bytes)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: %d blocks of %zu bytes exceed the window", what, pw->n,
                       slot);
    return MG_OK;
}

/* Every other rank q has raised entry `wait` in this rank's buffer to `epoch` (wrapping
 * compare); MG_ERR_COMM after the window's timeout. */
static mg_status wait_all(const mg_peer_window *pw, int wait, uint32_t epoch, const char *what) {
    const double deadline = pw->timeout_s > 0 ? mg_clock_seconds() + pw->timeout_s : 0;
    for (int q = 0; q < pw->n; q++) {
        if (q == pw->rank) continue;
        const uint32_t *f = flag_of(pw, pw->rank, q, wait);
        for (unsigned i = 1; (int32_t)(__atomic_load_n(f, __ATOMIC_ACQUIRE) - epoch) < 0; i++) {
            if ((i & 255u) != 0) continue;
            if (pw->progress) pw->progress(pw->progress_ctx);
            sched_yield();
            if (pw->abort && *pw->abort)
                return MG_FAIL(MG_ERR_COMM, "%s: the world failed while rank %d waited for rank %d",
                               what, pw->rank, q);
            if (deadline > 0 && mg_clock_seconds() > deadline)
                return MG_FAIL(MG_ERR_COMM,
                               "%s: rank %d waited %.0f s for rank %d's copy, which never came",
                               what, pw->rank, pw->timeout_s, q);
        }
    }
    return MG_OK;
}

/* This rank's count of entry b goes up by one and is raised in every peer's buffer. */
static void raise_all(const mg_peer_window *pw, int b) {
    uint32_t *own = flag_of(pw, pw->rank, MG_PEER_MAX, b);
    const uint32_t e = *own + 1;
    for (int q = 0; q < pw->n; q++)
        if (q != pw->rank) __atomic_store_n(flag_of(pw, q, pw->rank, b), e, __ATOMIC_RELEASE);
    *own = e;
}

mg_status mg_cpu_peer_push(mg_backend *be, const mg_peer_window *pw, const void *src, size_t stride,
                           size_t bytes, mg_stream_id s) {
    (void)be, (void)s;
    MG_CHECK(check(pw, "peer_push", bytes));
    if (pw->n == 1 || bytes == 0) return MG_OK;
    const int r = pw->rank;
    /* every receiver has taken in this rank's previous push */
    MG_CHECK(wait_all(pw, PR_FREE, *flag_of(pw, r, MG_PEER_MAX, PR_READY), "peer_push"));
    for (int i = 1; i < pw->n; i++) {
        const int q = (r + i) % pw->n;
        memcpy((char *)pw->base[q] + (size_t)r * bytes, (const char *)src + (size_t)q * stride,
               bytes);
    }
    raise_all(pw, PR_READY);
    return MG_OK;
}

/* Waits for every sender's next push (READY one past this rank's takes). */
static mg_status wait_pushes(const mg_peer_window *pw, const char *what) {
    return wait_all(pw, PR_READY, *flag_of(pw, pw->rank, MG_PEER_MAX, PR_FREE) + 1, what);
}

mg_status mg_cpu_peer_sum(mg_backend *be, const mg_peer_window *pw, void *dst, const void *own,
                          size_t n, mg_dtype dt, const void *bias, const void *residual, int H,
                          mg_stream_id s) {
    (void)be, (void)s;
    if (dt != MG_F32) /* the compute dtype here, and the gradients' */
        return MG_FAIL(MG_ERR_INTERNAL, "peer_sum: %s values on the cpu backend (fp32 only)",
                       mg_dtype_name(dt));
    MG_CHECK(mg_peer_sum_rows_check(n, bias, residual, H));
    MG_CHECK(check(pw, "peer_sum", n * sizeof(float)));
    if (n == 0) return MG_OK;
    if (pw->n > 1) MG_CHECK(wait_pushes(pw, "peer_sum"));
    const int P = pw->n, r = pw->rank;
    const char *mine = pw->base[r];
    float *d = dst;
    const float *o = own, *b = bias, *res = residual;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int p = 0; p < P; p++)
            acc += p == r ? o[i] : ((const float *)(mine + (size_t)p * n * sizeof(float)))[i];
        if (b) acc += b[i % (size_t)H]; /* bias_residual_add's order */
        if (res) acc += res[i];
        d[i] = acc;
    }
    if (pw->n > 1) raise_all(pw, PR_FREE);
    return MG_OK;
}

mg_status mg_cpu_peer_take(mg_backend *be, const mg_peer_window *pw, void *dst, const void *own,
                           size_t bytes, mg_stream_id s) {
    (void)be, (void)s;
    MG_CHECK(check(pw, "peer_take", bytes));
    if (bytes == 0) return MG_OK;
    const int r = pw->rank;
    char *mine = (char *)dst + (size_t)r * bytes;
    if (own && own != mine) memmove(mine, own, bytes);
    if (pw->n == 1) return MG_OK;
    MG_CHECK(wait_pushes(pw, "peer_take"));
    for (int q = 0; q < pw->n; q++)
        if (q != r)
            memcpy((char *)dst + (size_t)q * bytes, (char *)pw->base[r] + (size_t)q * bytes, bytes);
    raise_all(pw, PR_FREE);
    return MG_OK;
}
