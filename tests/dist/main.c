/* dist_tests: the multi-rank test binary, run under mpirun by tests/dist/test_dist.sh.
 *   dist_tests [--backend mpi|nccl] [--timeout S] [--filter NAME[,NAME...]]
 *   dist_tests --scenario fail|exit|hang[-blocking] [--victim R] [--timeout S]
 *   dist_tests --backend nccl --scenario peer [--victim R]    (scenario_peer.c: the victim dies
 *              while the others wait on the device for its copy into a peer window)
 *   dist_tests --features      prints "mpi=yes|no device_buffers=yes|no" (what the build has)
 * Without --scenario every rank runs every test (or those whose name contains one of the NAMEs) and
 * rank 0 prints "PASS name" / "FAIL name" and "N passed, N failed"; the exit status is 1 when
 * anything failed. A scenario injects one failure on rank R (default 1) while the others wait in an
 * all-reduce on the world (its call number is 2: a barrier comes first so every rank is in):
 *   fail  R calls mg_comm_world_fail with a message and exits 1
 *   exit  R dies with _exit(3), telling nobody
 *   hang  R sleeps 3x the timeout and never makes the call
 * The others wait inside mg_comm_sync, whose own wait is bounded. With "-blocking" appended they
 * first block the host in a plain, unbounded cudaStreamSynchronize behind the all-reduce (NCCL;
 * a no-op on host buffers, where the all-reduce itself fails) and only then call mg_comm_sync:
 * the wait returns only when the NCCL watchdog (src/comm/nccl_watchdog.c) aborts the
 * communicators, on the peer's notice or the deadline, so a line within the bound proves it.
 * Every other rank must then exit 1 with one line naming the failure and the call; the script
 * checks the lines, the exit status and the time it took. */
#include "dist.h"
#include "core/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct {
    const char *name;
    dist_test_fn fn;
} g_tests[] = {
    {"barrier_and_queries", test_barrier_and_queries},
    {"all_reduce", test_all_reduce},
    {"all_reduce_large", test_all_reduce_large},
    {"all_reduce_many", test_all_reduce_many},
    {"reduce_scatter", test_reduce_scatter},
    {"all_gather", test_all_gather},
    {"all_to_all_uneven", test_all_to_all_uneven},
    {"broadcast", test_broadcast},
    {"count_limits", test_count_limits},
    {"copy_engine", test_copy_engine},
    {"p2p_ring", test_p2p_ring},
    {"p2p_pairs", test_p2p_pairs},
    {"p2p_tagged", test_p2p_tagged},
    {"groups_tp_dp", test_groups_tp_dp},
    {"groups_partial_and_order", test_groups_partial_and_order},
    {"ddp_bf16", test_ddp_bf16},
    {"train_dp", test_train_dp},
    {"train_distopt", test_train_distopt},
    {"train_resume", test_train_resume},
    {"train_memory", test_train_memory},
    {"train_tp", test_train_tp},
    {"train_rng", test_train_rng},
    {"train_pp", test_train_pp},
    {"train_ep", test_train_ep},
    {"train_loss", test_train_loss},
    {"train_graph", test_train_graph},
};

void dist_fail(dist_ctx *t, const char *file, int line, const char *fmt, ...) {
    t->failures++;
    if (t->failures > 5) return; /* keep the report short */
    fprintf(stderr, "  rank %d: %s:%d: ", t->rank, file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

_Noreturn void dist_fatal(dist_ctx *t, const char *file, int line, const char *expr) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_error_message());
    fprintf(stderr, "dist_tests: rank %d: FATAL in %s (%s:%d): %s: %s\n", t->rank, t->name, file,
            line, expr, msg);
    fflush(stderr);
    mg_comm_world_fail(t->w, msg);
    mg_comm_world_finalize(t->w);
    exit(1);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* One injected failure (scenario: "fail", "exit" or "hang"; blocking: the "-blocking" form);
 * returns the exit status of this rank. */
static int run_scenario(mg_comm_world *w, const dist_buf_ops *B, const char *scenario,
                        bool blocking, int victim, double timeout_s) {
    int rank = mg_comm_world_rank(w);
    mg_comm *world = mg_comm_world_comm(w);
    dist_ctx ctx = {w, B, rank, mg_comm_world_size(w), 0, scenario};
    dist_ctx *t = &ctx;
    DOK(mg_comm_barrier(world, B->stream()));
    if (rank == victim) {
        if (!strcmp(scenario, "fail")) {
            sleep_s(0.3); /* the others are in the all-reduce by now */
            mg_comm_world_fail(w, "injected failure on purpose (dist test scenario 'fail')");
            mg_comm_world_finalize(w);
            return 1;
        }
        if (!strcmp(scenario, "exit")) {
            sleep_s(0.3);
            _exit(3);
        }
        sleep_s(3 * timeout_s); /* hang: the launcher kills this rank once the others failed */
        mg_comm_world_finalize(w);
        return 0;
    }
    int32_t host[4] = {rank, 1, 2, 3};
    void *buf = dist_alloc(t, 4, MG_I32);
    dist_put(t, buf, host, 4, MG_I32);
    double t0 = mg_clock_seconds();
    mg_status st = mg_comm_all_reduce(world, buf, buf, 4, MG_I32, MG_REDUCE_SUM, B->stream());
    /* Its status is not the point: after the watchdog's abort the stream may report an error,
     * and mg_comm_sync must word the failure either way. */
    if (st == MG_OK && blocking) (void)B->stream_wait_blocking();
    if (st == MG_OK) st = mg_comm_sync(world, B->stream());
    /* buf stays allocated after a failure: the backend may still own it */
    if (st == MG_OK) dist_free(t, buf);
    char unnoticed[160];
    snprintf(unnoticed, sizeof unnoticed, "the all-reduce succeeded although rank %d %s", victim,
             scenario);
    return dist_scenario_end(w, st, t0, unnoticed);
}

/* scenario_peer.c (weak: built only with CUDA and NCCL). */
int dist_scenario_peer(mg_comm_world *w, const dist_buf_ops *B, int victim) __attribute__((weak));

static void usage(void) {
    fprintf(stderr,
            "usage: dist_tests [--backend mpi|nccl] [--timeout SECONDS] [--filter NAME[,NAME...]]\n"
            "                  [--scenario fail|exit|hang[-blocking]|peer] [--victim RANK]\n");
    exit(2);
}

/* Whether test `name` contains one of the comma-separated NAMEs of --filter. */
static bool selected(const char *name, const char *filter) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", filter);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (strstr(name, tok)) return true;
    return false;
}

int main(int argc, char **argv) {
    const char *backend_name = "mpi", *filter = NULL, *scenario = NULL;
    double timeout_s = 60;
    int victim = 1;
    if (argc == 2 && !strcmp(argv[1], "--features")) {
        /* For test_dist.sh: what this build can run. */
#ifdef MG_HAVE_MPI
        const char *mpi = "yes";
#else
        const char *mpi = "no";
#endif
        printf("mpi=%s device_buffers=%s\n", mpi, &dist_buf_cuda ? "yes" : "no");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--backend"))
            backend_name = v;
        else if (!strcmp(a, "--timeout"))
            timeout_s = atof(v);
        else if (!strcmp(a, "--filter"))
            filter = v;
        else if (!strcmp(a, "--scenario"))
            scenario = v;
        else if (!strcmp(a, "--victim"))
            victim = atoi(v);
        else
            usage();
        i++;
    }
    /* "exit-blocking" -> "exit" and blocking */
    char base[16] = "";
    bool blocking = false;
    if (scenario) {
        size_t n = strlen(scenario), k = strlen("-blocking");
        blocking = n > k && !strcmp(scenario + n - k, "-blocking");
        snprintf(base, sizeof base, "%.*s", (int)(blocking ? n - k : n), scenario);
        if (strcmp(base, "fail") && strcmp(base, "exit") && strcmp(base, "hang") &&
            strcmp(base, "peer"))
            usage();
    }
    mg_comm_backend backend;
    const dist_buf_ops *B = &dist_buf_host;
    if (!strcmp(backend_name, "mpi")) {
        backend = MG_COMM_MPI;
    } else if (!strcmp(backend_name, "nccl")) {
        backend = MG_COMM_NCCL;
        if (!&dist_buf_cuda) {
            fprintf(stderr, "dist_tests: --backend nccl needs device buffers "
                            "(tests/dist/dist_buf_cuda.c), which this build lacks\n");
            return 1;
        }
        B = &dist_buf_cuda;
    } else {
        usage();
    }

    mg_launch_info li = {0}; /* the rank printed when detection itself fails */
    mg_comm_world *w = NULL;
    mg_status st = mg_launch_detect(&li);
    if (st == MG_OK && B->init) st = B->init(&li);
    if (st == MG_OK) st = mg_comm_world_init(&li, backend, timeout_s, &w);
    if (st != MG_OK) {
        fprintf(stderr, "dist_tests: rank %d: error: %s\n", li.rank, mg_error_message());
        return 1;
    }
    int rank = mg_comm_world_rank(w);
    if (scenario && !strcmp(base, "peer")) { /* scenario_peer.c: device waits, nccl only */
        int rc = 2;
        if (!dist_scenario_peer || backend != MG_COMM_NCCL)
            fprintf(stderr, "dist_tests: --scenario peer needs --backend nccl and CUDA\n");
        else
            rc = dist_scenario_peer(w, B, victim);
        if (B->shutdown) B->shutdown();
        return rc;
    }
    if (scenario) {
        int rc = run_scenario(w, B, base, blocking, victim, timeout_s);
        if (B->shutdown) B->shutdown();
        return rc;
    }

    int passed = 0, failed = 0;
    mg_comm *world = mg_comm_world_comm(w);
    dist_ctx ctx = {w, B, rank, mg_comm_world_size(w), 0, "setup"};
    dist_ctx *t = &ctx;
    int32_t *verdict = dist_alloc(t, 1, MG_I32);
    for (size_t i = 0; i < sizeof g_tests / sizeof g_tests[0]; i++) {
        if (filter && !selected(g_tests[i].name, filter)) continue;
        ctx.failures = 0;
        ctx.name = g_tests[i].name;
        g_tests[i].fn(&ctx);
        /* The verdict is the worst rank's: a mismatch anywhere fails the test. */
        int32_t mine = ctx.failures, all = 0;
        dist_put(t, verdict, &mine, 1, MG_I32);
        DOK(mg_comm_all_reduce(world, verdict, verdict, 1, MG_I32, MG_REDUCE_MAX, B->stream()));
        DOK(mg_comm_sync(world, B->stream()));
        dist_get(t, &all, verdict, 1, MG_I32);
        all ? failed++ : passed++;
        if (rank == 0) printf("%s %s\n", all ? "FAIL" : "PASS", g_tests[i].name);
        fflush(stdout);
    }
    dist_free(t, verdict);
    if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    mg_comm_world_finalize(w);
    if (B->shutdown) B->shutdown();
    return failed ? 1 : 0;
}
