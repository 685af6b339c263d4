/* The MPI process around both backends under mpirun/srun (mpi_bootstrap.h): MPI_Init_thread and
 * MPI_Finalize, the broadcast of rank 0's rendezvous address that opens the world's failure
 * channel (health.c) before any backend starts, and the pacing between two MPI_Tests that the
 * bootstrap and the MPI backend (mpi.c) share. comm.c calls the bootstrap and the shutdown for
 * every MPI launch, whichever backend moves the data; it calls nothing back. */
#ifdef MG_HAVE_MPI

#include "comm/mpi_bootstrap.h"

#include "comm/health.h"
#include "core/clock.h"
#include "core/status.h"

#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static bool g_we_initialised; /* bootstrap called MPI_Init_thread, so shutdown finalises */

/* ---- pacing ---- */

/* Between tests (waited: seconds since the operation started): spin 64 tests (a small message
 * completes in microseconds), then yield for the first millisecond (an oversubscribed rank hands
 * its core to a peer that has work; an idle core returns at once), then, where this host has more
 * ranks than cores (g_oversubscribed), sleep waited/16, at least 20 us and at most 1 ms: a long
 * wait (a slow peer) costs little CPU while the sleeps add at most ~6% to it. Open MPI makes
 * progress only inside MPI_Test here, so a sleeping rank delays its peers by up to one sleep;
 * with a core each, ranks keep yielding instead, so a pipeline's messages arrive sooner (2 CPU
 * ranks on 2 cores, P 2: bubble summed over the stages 12-13% against 16-18% with sleeps).
 * Until the MPI backend's world_init sets it, g_oversubscribed is true (the bootstrap's own
 * broadcast sleeps while rank 0 starts). */
static bool g_oversubscribed = true;

void mg_comm_mpi_backoff_setup(int local_world_size) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g_oversubscribed = cores < 1 || local_world_size > cores;
}

void mg_comm_mpi_backoff(int iter, double waited) {
    if (iter < 64) return;
    if (waited < 1e-3 || !g_oversubscribed) {
        sched_yield();
        return;
    }
    double s = waited / 16;
    s = s < 20e-6 ? 20e-6 : s > 1e-3 ? 1e-3 : s;
    struct timespec ts = {0, (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- bootstrap ---- */

/* Ibcast bounded by a deadline, before any group or failure channel exists. */
static mg_status bcast_bounded(void *buf, int n, double timeout_s, int rank) {
    MPI_Request req;
    if (MPI_Ibcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
        return MG_FAIL(MG_ERR_COMM, "rank %d: MPI_Ibcast of the rendezvous address failed", rank);
    double start = mg_clock_seconds(), deadline = start + timeout_s;
    for (int iter = 0;; iter++) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return MG_FAIL(MG_ERR_COMM, "rank %d: MPI_Ibcast of the rendezvous address failed",
                           rank);
        if (done) return MG_OK;
        if (mg_clock_seconds() > deadline)
            return MG_FAIL(MG_ERR_COMM,
                           "rank %d: rank 0 did not send the rendezvous address within %g s "
                           "(did it start? is it stuck before MPI_Init?)",
                           rank, timeout_s);
        mg_comm_mpi_backoff(iter, mg_clock_seconds() - start);
    }
}

/* A free port for rank 0's rendezvous, which only returns once every rank has connected, so the
 * port must be known (and broadcast) before it listens. The probe socket stays bound, not
 * listening, until the server listens: with SO_REUSEADDR on both (the server sets it), Linux lets
 * the server bind the same port, while no other process is handed it meanwhile. */
static int reserve_port(int *port) {
    for (int v6 = 1; v6 >= 0; v6--) {
        int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1, zero = 0, rc;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        socklen_t len = sizeof ss;
        if (v6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        } else {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        }
        if (rc == 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
            return fd;
        }
        close(fd);
    }
    return -1;
}

mg_status mg_comm_mpi_bootstrap(const mg_launch_info *li, double timeout_s, mg_comm_health **out) {
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* FUNNELED: only the thread that made the world calls MPI (the rendezvous has its own
         * sockets and thread). */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return MG_FAIL(MG_ERR_COMM, "MPI_Init_thread failed on rank %d of %d", li->rank,
                           li->world_size);
        g_we_initialised = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = -1, size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != li->rank || size != li->world_size)
        return MG_FAIL(MG_ERR_USAGE,
                       "the %s launch says rank %d of %d but MPI says rank %d of %d (mixed "
                       "launchers, or a binary built against another MPI than mpirun's?)",
                       li->launcher, li->rank, li->world_size, rank, size);

    /* Rank 0 tells the others where to connect: "host port", or "- 0" when it found no port,
     * so they fail at once instead of timing out. */
    char where[300] = "- 0", host[256] = "";
    int probe = -1, port = 0;
    if (rank == 0) {
        if (gethostname(host, sizeof host - 1) != 0 || !host[0])
            snprintf(host, sizeof host, "localhost");
        probe = reserve_port(&port);
        if (probe >= 0) snprintf(where, sizeof where, "%s %d", host, port);
    }
    mg_status st = bcast_bounded(where, (int)sizeof where, timeout_s, rank);
    if (st == MG_OK && (sscanf(where, "%255s %d", host, &port) != 2 || !strcmp(host, "-")))
        st = rank == 0 ? MG_FAIL(MG_ERR_COMM,
                                 "rank 0 found no free TCP port for the rendezvous (socket/bind "
                                 "failed)")
                       : MG_FAIL(MG_ERR_COMM,
                                 "rank %d: rank 0 found no free TCP port for the rendezvous (its "
                                 "own error says more)",
                                 rank);
    if (st == MG_OK) st = mg_comm_health_open(host, port, rank, size, timeout_s, out);
    if (probe >= 0) close(probe);
    return st;
}

void mg_comm_mpi_shutdown(bool clean) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (g_we_initialised && clean && !finalized) MPI_Finalize();
    g_we_initialised = false;
}

#else
/* Without Open MPI there is no MPI launch to bootstrap (comm.c says how to get one). ISO C wants a
 * translation unit to declare something. */
typedef int mg_comm_mpi_bootstrap_unused;
#endif
