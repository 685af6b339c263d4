/* The "peer" failure scenario of dist_tests (main.c): every rank maps a peer window over the
 * world; the victim then dies without a word while the others wait on the device for its push
 * (the backend's peer_sum, whose one-block kernel spins on the victim's flag) and block in a
 * plain cudaStreamSynchronize behind it. Only the world's abort word can end that wait: the
 * NCCL backend's watchdog sets it when it hears the victim is gone, the waiting kernel gives up,
 * the stream drains, and mg_comm_sync reports the failure. Without the word the survivors would
 * hang for ever. Built where CUDA and NCCL are. */
#if defined(MG_HAVE_NCCL) && defined(MG_HAVE_CUDA)

#include "dist.h"

#include "backend/backend.h"
#include "core/clock.h"
#include "core/status.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int dist_scenario_peer(mg_comm_world *w, const dist_buf_ops *B, int victim) {
    const int rank = mg_comm_world_rank(w);
    mg_comm *world = mg_comm_world_comm(w);
    mg_peer_window pw;
    mg_status st = mg_comm_peer_window_alloc(world, 4096, &pw);
    if (st != MG_OK) {
        fprintf(stderr, "dist_tests: rank %d: no peer window: %s\n", rank, mg_error_message());
        mg_comm_world_finalize(w);
        return 2;
    }
    if (rank == victim) {
        struct timespec ts = {0, 300 * 1000 * 1000}; /* the others wait on the device by now */
        nanosleep(&ts, NULL);
        _exit(3);
    }
    int device = 0;
    mg_backend *be = NULL;
    if (cudaGetDevice(&device) == cudaSuccess)
        st = mg_backend_cuda_create_dtype(&be, device, MG_BF16);
    void *buf = NULL;
    if (st == MG_OK && be) st = be->alloc(be, 1024 * 2, &buf);
    double t0 = mg_clock_seconds();
    if (st == MG_OK && be)
        st = be->peer_sum(be, &pw, buf, buf, 1024, MG_BF16, NULL, NULL, 0, MG_STREAM_COMPUTE);
    if (st == MG_OK && be) { /* unbounded: the test is that it returns at all */
        cudaError_t e =
            cudaStreamSynchronize((cudaStream_t)be->stream_handle(be, MG_STREAM_COMPUTE));
        (void)e; /* after the abort the stream may report an error; the sync below words it */
    }
    if (st == MG_OK) st = mg_comm_sync(world, B->stream());
    char unnoticed[128];
    snprintf(unnoticed, sizeof unnoticed, "the peer's push arrived although rank %d exited",
             victim);
    return dist_scenario_end(w, st, t0, unnoticed);
}

#else
typedef int dist_scenario_peer_unused; /* built without CUDA: main.c refuses the scenario */
#endif
