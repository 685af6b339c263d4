/* comm/rendezvous: every rank is a forked process talking over 127.0.0.1, so an abrupt death is
 * a real one (_exit with the connection open). Children report through their exit code and a
 * pipe carrying their error line, which the parent turns into an expectation of the test. */
#include "test.h"

#include "comm/rendezvous.h"
#include "comm/rendezvous_wire.h" /* mg_rv_sleep */
#include "core/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { DIES = 77, MAX_CHILDREN = 16 };

/* A socket bound to 127.0.0.1 on a free port, listening when asked; *port tells which. */
static int bound_socket(bool do_listen, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        (do_listen && listen(fd, 4) != 0) || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A port nobody uses right now (bound and released; the rendezvous binds with SO_REUSEADDR). */
static int free_port(void) {
    int port = 0, fd = bound_socket(false, &port);
    if (fd >= 0) close(fd);
    return port;
}

/* LeakSanitizer's check, present in `make asan` builds: children end with _exit, which skips the
 * check at exit, so they ask for it themselves. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* One rank's part: 0 on success, DIES when it was meant to die, else 1 with a line in err. */
typedef int (*rank_fn)(int rank, int world, int port, const void *arg, char *err, size_t cap);

#define CHILD_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf(err, cap, __VA_ARGS__);                                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHILD_OK(expr)                                                                             \
    CHILD_CHECK((expr) == MG_OK, "line %d: %s failed: %s", __LINE__, #expr, mg_error_message())
/* Expects a failure with MG_ERR_COMM whose line contains substr. */
#define CHILD_FAILS(expr, substr)                                                                  \
    do {                                                                                           \
        mg_error_clear();                                                                          \
        mg_status s_ = (expr);                                                                     \
        CHILD_CHECK(s_ == MG_ERR_COMM && strstr(mg_error_message(), (substr)),                     \
                    "line %d: %s gave %s '%s', want '%s'", __LINE__, #expr, mg_status_name(s_),    \
                    mg_error_message(), (substr));                                                 \
    } while (0)

/* Forks one process per entry of ranks (a rank may repeat, or be left out), waits for all (at
 * most limit_s; a hung child is killed) and expects each to end with 0 or DIES. */
static void run_ranks(mg_test_ctx *t, const char *what, int n, const int *ranks, int world,
                      int port, rank_fn fn, const void *arg) {
    pid_t pid[MAX_CHILDREN];
    int rd[MAX_CHILDREN];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        int p[2];
        if (pipe(p) != 0) {
            MG_EXPECT(0, "%s: pipe: %s", what, strerror(errno));
            return;
        }
        pid[i] = fork();
        if (pid[i] == 0) {
            close(p[0]);
            char err[2048] = "";
            int rc = fn(ranks[i], world, port, arg, err, sizeof err);
            if (rc == 0 && __lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check())
                rc = 1, snprintf(err, sizeof err, "leaks (the sanitizer's report is above)");
            if (rc && err[0] && write(p[1], err, strlen(err)) < 0) rc = 1;
            _exit(rc);
        }
        close(p[1]);
        rd[i] = p[0];
    }
    int code[MAX_CHILDREN];
    bool done[MAX_CHILDREN] = {false};
    const double deadline = mg_clock_seconds() + 8.0;
    for (int left = n; left > 0;) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            int st = 0;
            if (waitpid(pid[i], &st, WNOHANG) == pid[i]) {
                code[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                done[i] = true;
                left--;
            } else if (mg_clock_seconds() > deadline) {
                kill(pid[i], SIGKILL);
                waitpid(pid[i], &st, 0);
                code[i] = -1;
                done[i] = true;
                left--;
            }
        }
        if (left) mg_rv_sleep(0.002);
    }
    for (int i = 0; i < n; i++) {
        char msg[2048] = "";
        ssize_t got = read(rd[i], msg, sizeof msg - 1);
        msg[got > 0 ? got : 0] = '\0';
        close(rd[i]);
        MG_EXPECT(code[i] == 0 || code[i] == DIES, "%s: rank %d (process %d) %s %d: %s", what,
                  ranks[i], i, code[i] < 0 ? "hung, killed after 8 s; code" : "exited with",
                  code[i], msg);
    }
}

static void run_world(mg_test_ctx *t, const char *what, int world, int port, rank_fn fn,
                      const void *arg) {
    int ranks[MAX_CHILDREN];
    for (int i = 0; i < world; i++) ranks[i] = i;
    run_ranks(t, what, world, ranks, world, port, fn, arg);
}

static uint8_t pattern(int who, size_t i) {
    return (uint8_t)(who * 131 + i * 7 + (i >> 8) + 3);
}

/* Broadcast, all-gather and barrier with exactly predictable bytes, small and large (the large
 * ones take many partial reads and writes). */
static int collectives(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    mg_rendezvous *r;
    CHILD_OK(mg_rendezvous_open("127.0.0.1", port, rank, world, 5.0, &r));
    CHILD_CHECK(mg_rendezvous_port(r) == port, "port %d, want %d", mg_rendezvous_port(r), port);
    const size_t sizes[] = {128, 0, 100000};
    for (size_t k = 0; k < 3; k++) {
        size_t n = sizes[k];
        uint8_t *buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) buf[i] = rank == 0 ? pattern(1000 + (int)k, i) : 0xEE;
        CHILD_OK(mg_rendezvous_broadcast(r, buf, n));
        for (size_t i = 0; i < n; i++)
            CHILD_CHECK(buf[i] == pattern(1000 + (int)k, i), "broadcast %zu: byte %zu is %u", n, i,
                        buf[i]);
        free(buf);
    }
    const size_t gsizes[] = {37, 65536};
    for (size_t k = 0; k < 2; k++) {
        size_t n = gsizes[k];
        uint8_t *mine = malloc(n), *all = malloc(n * (size_t)world);
        for (size_t i = 0; i < n; i++) mine[i] = pattern(rank, i);
        memset(all, 0xEE, n * (size_t)world);
        CHILD_OK(mg_rendezvous_all_gather(r, mine, n, all));
        for (int q = 0; q < world; q++)
            for (size_t i = 0; i < n; i++)
                CHILD_CHECK(all[(size_t)q * n + i] == pattern(q, i),
                            "all_gather %zu: rank %d's byte %zu is %u", n, q, i,
                            all[(size_t)q * n + i]);
        free(mine);
        free(all);
    }
    for (int k = 0; k < 3; k++) CHILD_OK(mg_rendezvous_barrier(r));
    int who;
    char msg[256];
    CHILD_CHECK(!mg_rendezvous_poll_failure(r, &who, msg, sizeof msg), "notice %d: %s", who, msg);
    mg_rendezvous_close(r);
    return 0;
}

MG_TEST(rendezvous_collectives_2_4_8_ranks_exact) {
    /* The same port three times in a row also proves a quick restart binds (SO_REUSEADDR). */
    int port = free_port();
    run_world(t, "2 ranks", 2, port, collectives, NULL);
    run_world(t, "4 ranks", 4, port, collectives, NULL);
    run_world(t, "8 ranks", 8, port, collectives, NULL);
}

MG_TEST(rendezvous_single_rank_picks_a_port) {
    const char *addrs[] = {"127.0.0.1", "localhost", "::1"};
    for (int k = 0; k < 3; k++) {
        if (k == 2) { /* IPv6 only where the host has it */
            int fd = socket(AF_INET6, SOCK_STREAM, 0);
            struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
            bool v6 = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
            if (fd >= 0) close(fd);
            if (!v6) continue;
        }
        mg_rendezvous *r = NULL;
        MG_EXPECT_OK(mg_rendezvous_open(addrs[k], 0, 0, 1, 2.0, &r));
        if (!r) continue;
        MG_EXPECT(mg_rendezvous_port(r) > 0, "%s: port %d", addrs[k], mg_rendezvous_port(r));
        uint64_t id = 0x0123456789abcdefu, all = 0;
        MG_EXPECT_OK(mg_rendezvous_broadcast(r, &id, sizeof id));
        MG_EXPECT_OK(mg_rendezvous_all_gather(r, &id, sizeof id, &all));
        MG_EXPECT_OK(mg_rendezvous_barrier(r));
        MG_EXPECT(id == 0x0123456789abcdefu && all == id, "%s: id %llx all %llx", addrs[k],
                  (unsigned long long)id, (unsigned long long)all);
        MG_EXPECT(!mg_rendezvous_poll_failure(r, NULL, NULL, 0), "%s: a notice", addrs[k]);
        mg_rendezvous_close(r);
    }
    mg_rendezvous_close(NULL);
    MG_EXPECT(!mg_rendezvous_poll_failure(NULL, NULL, NULL, 0), "NULL handle");
}

static int never_complete(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    mg_rendezvous *r = NULL;
    double t0 = mg_clock_seconds();
    CHILD_FAILS(mg_rendezvous_open("127.0.0.1", port, rank, world, 1.0, &r),
                "rank 3 of 4 did not arrive within 1 s; check that every rank was launched with "
                "WORLD_SIZE=4 and the same MASTER_ADDR/MASTER_PORT");
    double dt = mg_clock_seconds() - t0;
    CHILD_CHECK(dt < 2.5, "gave up after %.2f s, timeout 1 s", dt);
    CHILD_CHECK(r == NULL, "handle set on failure");
    return 0;
}

MG_TEST(rendezvous_missing_rank_is_named) {
    const int ranks[] = {0, 1, 2}; /* of 4: rank 3 never comes */
    run_ranks(t, "missing rank", 3, ranks, 4, free_port(), never_complete, NULL);
}

MG_TEST(rendezvous_port_in_use_and_unreachable_master) {
    int port = 0, fd = bound_socket(true, &port);
    MG_EXPECT(fd >= 0, "no listening socket");
    mg_rendezvous *r = NULL;
    char want[128];
    snprintf(want, sizeof want, "rendezvous port %d on host 127.0.0.1 is in use", port);
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", port, 0, 2, 1.0, &r), MG_ERR_COMM, want);
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", port, 0, 2, 1.0, &r), MG_ERR_COMM,
                    "choose another MASTER_PORT");
    close(fd);

    /* Nothing listens: connection refused until the timeout. */
    fd = bound_socket(false, &port);
    double t0 = mg_clock_seconds();
    snprintf(want, sizeof want,
             "could not reach MASTER_ADDR:MASTER_PORT=127.0.0.1:%d within 0.5 s: Connection "
             "refused",
             port);
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", port, 1, 2, 0.5, &r), MG_ERR_COMM, want);
    double dt = mg_clock_seconds() - t0;
    MG_EXPECT(dt >= 0.45 && dt < 1.5, "retried for %.2f s, timeout 0.5 s", dt);
    close(fd);
    MG_EXPECT(r == NULL, "handle set on failure");

    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", 0, 1, 2, 0.5, &r), MG_ERR_USAGE,
                    "port 0 (any) is for rank 0 only");
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", 1234, 2, 2, 0.5, &r), MG_ERR_USAGE,
                    "rank 2 of 2");
}

/* Waits (at most 3 s) for the first notice. */
static bool wait_notice(mg_rendezvous *r, int *who, char *msg, size_t cap) {
    for (double end = mg_clock_seconds() + 3.0; mg_clock_seconds() < end; mg_rv_sleep(0.001))
        if (mg_rendezvous_poll_failure(r, who, msg, cap)) return true;
    return false;
}

typedef struct {
    int victim;
    const char *posts; /* NULL: the victim dies abruptly; else it posts this, then dies */
} death;

static int one_dies(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    const death *d = arg;
    mg_rendezvous *r;
    CHILD_OK(mg_rendezvous_open("127.0.0.1", port, rank, world, 2.0, &r));
    mg_status st = mg_rendezvous_barrier(r);
    if (rank == d->victim) {
        CHILD_OK(st);
        if (d->posts) mg_rendezvous_post_failure(r, d->posts);
        _exit(DIES); /* no goodbye: the process is simply gone */
    }
    if (st != MG_OK) {
        /* A rank 0 killed right after the barrier may take its server down before that passed
         * the barrier's result on: then the barrier itself names the death, equally right. */
        CHILD_CHECK(d->victim == 0 && !d->posts &&
                        strstr(mg_error_message(), "rank 0 disconnected without a goodbye (it "
                                                   "exited or was killed) (this rank"),
                    "barrier: %s", mg_error_message());
        mg_rendezvous_close(r);
        return 0;
    }
    int who = -9;
    char msg[512], want[512];
    double t0 = mg_clock_seconds();
    CHILD_CHECK(wait_notice(r, &who, msg, sizeof msg), "no notice within 3 s");
    CHILD_CHECK(mg_clock_seconds() - t0 < 1.0, "the notice took %.2f s", mg_clock_seconds() - t0);
    if (d->posts)
        snprintf(want, sizeof want, "%s", d->posts);
    else
        snprintf(want, sizeof want,
                 "rank %d disconnected without a goodbye (it exited or was killed)", d->victim);
    CHILD_CHECK(who == d->victim && !strcmp(msg, want), "notice (%d, '%s'), want (%d, '%s')", who,
                msg, d->victim, want);
    /* The next call fails at once with the first failure, whatever else arrived since. */
    if (d->posts)
        snprintf(want, sizeof want,
                 "rank %d failed: %s (this rank, %d, was in rendezvous barrier #2)", d->victim,
                 d->posts, rank);
    else
        snprintf(want, sizeof want,
                 "rank %d disconnected without a goodbye (it exited or was killed) (this rank, %d, "
                 "was in rendezvous barrier #2)",
                 d->victim, rank);
    t0 = mg_clock_seconds();
    CHILD_FAILS(mg_rendezvous_barrier(r), want);
    mg_rendezvous_close(r);
    CHILD_CHECK(mg_clock_seconds() - t0 < 1.5, "barrier + close took %.2f s after a failure",
                mg_clock_seconds() - t0);
    return 0;
}

MG_TEST(rendezvous_abrupt_death_is_named) {
    death d = {2, NULL};
    run_world(t, "rank 2 dies", 4, free_port(), one_dies, &d);
    d.victim = 0; /* the server's own process */
    run_world(t, "rank 0 dies", 3, free_port(), one_dies, &d);
}

MG_TEST(rendezvous_posted_failure_reaches_every_rank) {
    death d = {1, "CUDA out of memory on device 1 (tried to allocate 2.00 GiB)"};
    run_world(t, "rank 1 posts", 3, free_port(), one_dies, &d);
    /* Rank 0 posts and exits at once: its server must have delivered the notice first. */
    d.victim = 0;
    d.posts = "loss is NaN at iteration 17";
    run_world(t, "rank 0 posts", 4, free_port(), one_dies, &d);
}

/* An orderly close is not a failure; an informational notice is relayed but fails nothing. */
static int orderly(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    mg_rendezvous *r;
    CHILD_OK(mg_rendezvous_open("127.0.0.1", port, rank, world, 2.0, &r));
    if (rank == 1) mg_rendezvous_post_failure(r, "\x01wait all_reduce #3 on group 'dp'");
    CHILD_OK(mg_rendezvous_barrier(r));
    int who = -9;
    char msg[256];
    if (rank != 1) {
        CHILD_CHECK(wait_notice(r, &who, msg, sizeof msg), "informational notice lost");
        CHILD_CHECK(who == 1 && !strcmp(msg, "\x01wait all_reduce #3 on group 'dp'"),
                    "notice (%d, '%s')", who, msg);
    }
    CHILD_OK(mg_rendezvous_barrier(r)); /* an informational notice fails no call */
    if (rank == world - 1) {            /* leaves first; the others must not hear of it */
        mg_rendezvous_close(r);
        return 0;
    }
    mg_rv_sleep(0.3);
    CHILD_CHECK(!mg_rendezvous_poll_failure(r, &who, msg, sizeof msg), "notice (%d, '%s')", who,
                msg);
    mg_rendezvous_close(r);
    return 0;
}

MG_TEST(rendezvous_orderly_close_reports_nothing) {
    double t0 = mg_clock_seconds();
    run_world(t, "orderly", 4, free_port(), orderly, NULL);
    MG_EXPECT(mg_clock_seconds() - t0 < 1.5, "took %.2f s", mg_clock_seconds() - t0);
}

/* Rank 1 believes in another world size, or two processes claim the same rank: every process
 * fails fast with the same line. */
typedef struct {
    bool world_3;
    const char *want[2];
} misconfig;

static int misconfigured(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    const misconfig *m = arg;
    mg_rendezvous *r = NULL;
    double t0 = mg_clock_seconds();
    CHILD_FAILS(
        mg_rendezvous_open("127.0.0.1", port, rank, m->world_3 && rank == 1 ? 3 : world, 3.0, &r),
        m->want[0]);
    CHILD_CHECK(strstr(mg_error_message(), m->want[1]), "'%s' lacks '%s'", mg_error_message(),
                m->want[1]);
    CHILD_CHECK(mg_clock_seconds() - t0 < 1.0, "failed only after %.2f s", mg_clock_seconds() - t0);
    return 0;
}

MG_TEST(rendezvous_world_size_mismatch_and_duplicate_rank) {
    misconfig m = {true,
                   {"rank 1 (host ", "was launched with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2; "
                                     "launch every rank with the same WORLD_SIZE"}};
    run_world(t, "world size", 2, free_port(), misconfigured, &m);
    const int ranks[] = {0, 1, 1};
    misconfig d = {
        false, {"rank 1 joined the rendezvous at 127.0.0.1:", "give every process its own RANK"}};
    run_ranks(t, "duplicate", 3, ranks, 3, free_port(), misconfigured, &d);
}

static int mismatch(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    mg_rendezvous *r;
    CHILD_OK(mg_rendezvous_open("127.0.0.1", port, rank, world, 2.0, &r));
    uint8_t buf[32] = {0};
    CHILD_FAILS(mg_rendezvous_broadcast(r, buf, rank == 0 ? 16 : 32),
                "rendezvous call #1 differs between ranks: rank 0 called broadcast(16 bytes), "
                "rank 1 called broadcast(32 bytes)");
    CHILD_FAILS(mg_rendezvous_barrier(r), "differs between ranks");
    mg_rendezvous_close(r);
    return 0;
}

static int late(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    mg_rendezvous *r;
    CHILD_OK(mg_rendezvous_open("127.0.0.1", port, rank, world, 0.5, &r));
    if (rank == 2) { /* never reaches the barrier */
        mg_rv_sleep(0.8);
        mg_rendezvous_close(r);
        return 0;
    }
    CHILD_FAILS(mg_rendezvous_barrier(r), "rendezvous barrier #1 timed out after 0.5 s on rank");
    CHILD_CHECK(strstr(mg_error_message(), "ranks that did not reach it: rank 2 of 3"), "%s",
                mg_error_message());
    mg_rendezvous_close(r);
    return 0;
}

MG_TEST(rendezvous_call_mismatch_and_timeout_are_named) {
    run_world(t, "mismatch", 2, free_port(), mismatch, NULL);
    run_world(t, "timeout", 3, free_port(), late, NULL);
}

/* A stranger connects to rank 0's server and sends HTTP: it is dropped, the job goes on. */
static int with_stranger(int rank, int world, int port, const void *arg, char *err, size_t cap) {
    if (rank == world) { /* the stranger */
        for (double end = mg_clock_seconds() + 2; mg_clock_seconds() < end; mg_rv_sleep(0.01)) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
                const char req[] = "GET / HTTP/1.0\r\n\r\n";
                char buf[64];
                CHILD_CHECK(send(fd, req, sizeof req - 1, MSG_NOSIGNAL) > 0, "send");
                ssize_t got = recv(fd, buf, sizeof buf, 0); /* the server hangs up */
                close(fd);
                CHILD_CHECK(got <= 0, "the server answered a stranger with %zd bytes", got);
                return 0;
            }
            close(fd);
        }
        CHILD_CHECK(0, "the stranger never connected");
    }
    mg_rv_sleep(0.05 * rank); /* let the stranger in early */
    return collectives(rank, world, port, arg, err, cap);
}

MG_TEST(rendezvous_foreign_peers_are_told_apart) {
    const int ranks[] = {0, 1, 2}; /* 2 is the stranger in a world of 2 */
    run_ranks(t, "stranger", 3, ranks, 2, free_port(), with_stranger, NULL);

    /* A service that talks first (like ssh) is not a rendezvous. */
    int port = 0, fd = bound_socket(true, &port);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int c = accept(fd, NULL, NULL);
        const char banner[] = "SSH-2.0-OpenSSH_9.2p1\r\n";
        if (c >= 0 && send(c, banner, sizeof banner - 1, MSG_NOSIGNAL) > 0) mg_rv_sleep(1.0);
        _exit(0);
    }
    mg_rendezvous *r = NULL;
    char want[160];
    snprintf(want, sizeof want,
             "MASTER_ADDR:MASTER_PORT=127.0.0.1:%d is not a megatron.c rendezvous (it answered "
             "with other bytes",
             port);
    double t0 = mg_clock_seconds();
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", port, 1, 2, 2.0, &r), MG_ERR_COMM, want);
    MG_EXPECT(mg_clock_seconds() - t0 < 1.0, "took %.2f s", mg_clock_seconds() - t0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);

    /* A service that accepts and says nothing. */
    fd = bound_socket(true, &port);
    snprintf(want, sizeof want,
             "MASTER_ADDR:MASTER_PORT=127.0.0.1:%d accepted the connection but did not answer "
             "within 0.5 s",
             port);
    MG_EXPECT_ERROR(mg_rendezvous_open("127.0.0.1", port, 1, 2, 0.5, &r), MG_ERR_COMM, want);
    close(fd);
}
