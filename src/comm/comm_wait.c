/* What a waiting call needs, for comm.c and every backend alike (comm_wait.h): the wait step
 * between two tests of an unfinished operation (a peer's failure notice, the deadline, a peer's
 * question who waits where), the timeout line that names the members that did not reach the call,
 * and the one-line MG_ERR_COMM messages. Reads the world's health channel (health.c); calls
 * nothing of comm.c or of a backend. */
#include "comm/comm_wait.h"

#include "comm/health.h"
#include "core/clock.h"
#include "core/status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "all_reduce #17 on group 'dp'" */
static void describe(const mg_comm *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s #%llu on group '%s'", c->call ? c->call : "no call",
             (unsigned long long)c->seq, c->name);
}

/* "0,2,4,6", shortened to "0,2,4,...,62" when it does not fit. */
static void format_ranks(const int *ranks, int n, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        char one[16];
        int k = snprintf(one, sizeof one, "%s%d", i ? "," : "", ranks[i]);
        if (used + (size_t)k + 16 >= cap && i + 1 < n) {
            snprintf(buf + used, cap - used, ",...,%d", ranks[n - 1]);
            return;
        }
        memcpy(buf + used, one, (size_t)k + 1);
        used += (size_t)k;
    }
}

void mg_comm_rank_list(const mg_comm *c, char *buf, size_t cap) {
    format_ranks(c->global_ranks, c->size, buf, cap);
}

static mg_status peer_failure(mg_comm *c, int rank, const char *message) {
    c->w->failed = true;
    char where[128];
    describe(c, where, sizeof where);
    if (rank < 0)
        return MG_FAIL(MG_ERR_COMM, "the rendezvous stopped the job: %s (this rank, %d, was in %s)",
                       message, c->w->rank, where);
    /* The rendezvous words an abrupt death itself: "rank K disconnected without a goodbye". */
    char head[32];
    snprintf(head, sizeof head, "rank %d ", rank);
    if (strncmp(message, head, strlen(head)) == 0)
        return MG_FAIL(MG_ERR_COMM, "%s (this rank, %d, was in %s)", message, c->w->rank, where);
    return MG_FAIL(MG_ERR_COMM, "rank %d failed: %s (this rank, %d, was in %s)", rank, message,
                   c->w->rank, where);
}

mg_status mg_comm_peer_check(mg_comm *c) {
    int rank;
    const char *message;
    if (mg_comm_health_poll(c->w->health, false, &rank, &message))
        return peer_failure(c, rank, message);
    return MG_OK;
}

mg_status mg_comm_fail_call(mg_comm *c, const char *what) {
    c->w->failed = true;
    char where[128], copy[512];
    describe(c, where, sizeof where);
    snprintf(copy, sizeof copy, "%s", what); /* `what` may be mg_error_message() itself */
    return MG_FAIL(MG_ERR_COMM, "%s failed on rank %d: %s", where, c->w->rank, copy);
}

void mg_comm_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Which members of c did not reach the call `where` (health.c has the protocol): asks every rank
 * where it waits and listens for a window of min(1 s, timeout/4), answering peers that time out
 * alongside. Fills missing ("2,5", "none (...)") and elsewhere (" (rank 5 is in ...)" for the
 * members that wait in another call). MG_OK, or a peer's failure notice that arrived meanwhile
 * (its line already names the ranks: this rank reports that one instead). */
static mg_status who_is_missing(mg_comm *c, const char *where, char *missing, size_t cap_missing,
                                char *elsewhere, size_t cap_elsewhere) {
    mg_comm_world *w = c->w;
    double window = w->timeout_s / 4 < 1.0 ? w->timeout_s / 4 : 1.0;
    double until = mg_clock_seconds() + window;
    mg_comm_health_ask(w->health, where);
    do {
        int rank;
        const char *message;
        if (mg_comm_health_poll(w->health, true, &rank, &message))
            return peer_failure(c, rank, message);
        if (mg_comm_health_asked(w->health)) mg_comm_health_answer(w->health, where);
        mg_comm_sleep(1e-3);
    } while (mg_clock_seconds() < until);

    int *miss = malloc((size_t)c->size * sizeof *miss), n_miss = 0, n_else = 0;
    size_t used = 0;
    elsewhere[0] = '\0';
    for (int i = 0; i < c->size; i++) {
        int r = c->global_ranks[i];
        char at[MG_COMM_HEALTH_WHERE_MAX];
        if (r == w->rank) continue;
        bool answered = mg_comm_health_answer_of(w->health, r, at, sizeof at);
        if (answered && !strcmp(at, where)) continue;
        if (miss) miss[n_miss] = r;
        n_miss++;
        if (!answered) continue;
        /* At most three, so the line (and the notice carrying it) stays readable. */
        if (n_else++ < 3 && used < cap_elsewhere)
            used += (size_t)snprintf(elsewhere + used, cap_elsewhere - used, "%srank %d is in %s",
                                     used ? "; " : " (", r, at);
    }
    if (used && used < cap_elsewhere)
        snprintf(elsewhere + used, cap_elsewhere - used, "%s)", n_else > 3 ? "; ..." : "");
    if (!miss)
        snprintf(missing, cap_missing, "unknown (out of memory)");
    else if (!n_miss)
        snprintf(missing, cap_missing,
                 "none (every rank of the group is waiting in it: the data path is stuck)");
    else
        format_ranks(miss, n_miss, missing, cap_missing);
    free(miss);
    return MG_OK;
}

/* Timeout: this rank gave up on the call, naming the members that did not reach it. */
static mg_status timed_out(mg_comm *c) {
    mg_comm_world *w = c->w;
    w->failed = true;
    char where[MG_COMM_HEALTH_WHERE_MAX], ranks[256], missing[256] = "unknown", elsewhere[384] = "";
    describe(c, where, sizeof where);
    mg_comm_rank_list(c, ranks, sizeof ranks);
    if (w->health && c->size > 1)
        MG_CHECK(who_is_missing(c, where, missing, sizeof missing, elsewhere, sizeof elsewhere));
    return MG_FAIL(MG_ERR_COMM,
                   "%s (ranks %s) timed out after %g s on rank %d; ranks that did not reach it: "
                   "%s%s",
                   where, ranks, w->timeout_s, w->rank, missing, elsewhere);
}

mg_status mg_comm_wait_step(mg_comm *c, double deadline) {
    mg_comm_world *w = c->w;
    double now = mg_clock_seconds();
    MG_CHECK(mg_comm_peer_check(c));
    if (now >= deadline) return timed_out(c);
    if (mg_comm_health_asked(w->health)) { /* a peer timed out and asks who waits where */
        char where[MG_COMM_HEALTH_WHERE_MAX];
        describe(c, where, sizeof where);
        mg_comm_health_answer(w->health, where);
    }
    return MG_OK;
}
