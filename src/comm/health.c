/* The failure side channel over the TCP rendezvous (health.h). A leaf of src/comm: it calls the
 * rendezvous only, and knows nothing of worlds, groups or backends.
 *
 * Notices come in two kinds (rendezvous.h): failures, of which the first is latched and returned
 * by every poll from then on, and informational ones (a leading \x01), which health.c consumes
 * itself and never returns from a poll, so no caller (comm_wait.c, the NCCL watchdog's try_poll)
 * can mistake one for a failure. The informational ones carry "who waits where", for the timeout
 * line's "ranks that did not reach it":
 *   "\x01who? <call>"  a rank's wait timed out (mg_comm_health_ask); every other rank that polls
 *                      sets `asked`.
 *   "\x01in <call>"    the answer of a rank waiting in a call (mg_comm_wait_step, which checks
 *                      mg_comm_health_asked between two tests): "all_reduce #17 on group 'dp'".
 *                      Kept per rank while this rank collects (since its own ask).
 * A rank busy elsewhere (in its own code, or dead) does not answer: the asker names the members of
 * the group that did not. Whichever thread polls (the main thread, the watchdog) files what it
 * reads here, under the lock, so no answer or question is lost to the other thread. */
#include "comm/health.h"

#include "core/clock.h"
#include "core/status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mg_comm_health {
    /* The NCCL backend's watchdog thread polls too (try_poll); the rendezvous is not
     * thread-safe, so every use of it from a live world holds this lock. */
    pthread_mutex_t lock;
    mg_rendezvous *rv;
    double next_poll; /* mg_clock_seconds() before which poll does not look at the socket */
    bool latched;
    int rank;
    char
        message[1024]; /* the latched failure (rendezvous texts are cut to MG_RV_TEXT_MAX = 1024) */
    char scratch[1024]; /* the notice being read */
    int world;
    bool asked;      /* a peer asked who waits where since this rank last answered */
    bool collecting; /* answers are kept (since mg_comm_health_ask) */
    char (*answers)[MG_COMM_HEALTH_WHERE_MAX]; /* world entries: "" or where that rank waits */
};

#define ASK "\x01who? "
#define IN  "\x01in "

mg_status mg_comm_health_open(const char *addr, int port, int rank, int world_size,
                              double timeout_s, mg_comm_health **out) {
    *out = NULL;
    mg_comm_health *h = calloc(1, sizeof *h);
    if (h) h->answers = calloc((size_t)(world_size > 0 ? world_size : 1), sizeof *h->answers);
    if (!h || !h->answers) {
        free(h);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory opening the rendezvous");
    }
    h->world = world_size;
    mg_status st = mg_rendezvous_open(addr, port, rank, world_size, timeout_s, &h->rv);
    if (st != MG_OK) {
        free(h->answers);
        free(h);
        return st;
    }
    pthread_mutex_init(&h->lock, NULL);
    *out = h;
    return MG_OK;
}

mg_rendezvous *mg_comm_health_rendezvous(mg_comm_health *h) {
    return h ? h->rv : NULL;
}

void mg_comm_health_post_failure(mg_comm_health *h, const char *message) {
    if (!h) return;
    pthread_mutex_lock(&h->lock);
    mg_rendezvous_post_failure(h->rv, message);
    pthread_mutex_unlock(&h->lock);
}

void mg_comm_health_lock(mg_comm_health *h) {
    if (h) pthread_mutex_lock(&h->lock);
}

void mg_comm_health_unlock(mg_comm_health *h) {
    if (h) pthread_mutex_unlock(&h->lock);
}

/* An informational notice from rank (its whole text, the leading \x01 included). */
static void take_info(mg_comm_health *h, int rank, const char *msg) {
    if (!strncmp(msg, ASK, strlen(ASK))) {
        h->asked = true;
    } else if (!strncmp(msg, IN, strlen(IN)) && h->collecting && rank >= 0 && rank < h->world) {
        snprintf(h->answers[rank], sizeof h->answers[rank], "%s", msg + strlen(IN));
    } /* anything else informational: not ours to read */
}

static bool poll_locked(mg_comm_health *h, bool now_or_never, int *rank, const char **message) {
    if (!h->latched) {
        double now = mg_clock_seconds();
        if (now < h->next_poll && !now_or_never) return false;
        h->next_poll = now + 2e-4;
        /* Bounded: the rendezvous holds at most 1024 notices; the rest waits for the next poll. */
        for (int k = 0; k < 64 && !h->latched; k++) {
            int from;
            if (!mg_rendezvous_poll_failure(h->rv, &from, h->scratch, sizeof h->scratch))
                return false;
            if (h->scratch[0] == '\x01') {
                take_info(h, from, h->scratch);
            } else {
                h->latched = true;
                h->rank = from;
                memcpy(h->message, h->scratch, sizeof h->message);
            }
        }
        if (!h->latched) return false;
    }
    *rank = h->rank;
    *message = h->message;
    return true;
}

bool mg_comm_health_poll(mg_comm_health *h, bool now_or_never, int *rank, const char **message) {
    if (!h) return false;
    pthread_mutex_lock(&h->lock);
    bool got = poll_locked(h, now_or_never, rank, message);
    pthread_mutex_unlock(&h->lock);
    return got;
}

bool mg_comm_health_try_poll(mg_comm_health *h, int *rank, const char **message) {
    if (!h || pthread_mutex_trylock(&h->lock) != 0) return false;
    bool got = poll_locked(h, false, rank, message);
    pthread_mutex_unlock(&h->lock);
    return got;
}

/* Posts the informational notice prefix + text (sent, not acknowledged). Under the lock. */
static void post_info_locked(mg_comm_health *h, const char *prefix, const char *text) {
    char m[MG_COMM_HEALTH_WHERE_MAX + 16];
    snprintf(m, sizeof m, "%s%s", prefix, text);
    mg_rendezvous_post_failure(h->rv, m);
}

void mg_comm_health_ask(mg_comm_health *h, const char *what) {
    if (!h) return;
    pthread_mutex_lock(&h->lock);
    memset(h->answers, 0, (size_t)h->world * sizeof *h->answers);
    h->collecting = true;
    post_info_locked(h, ASK, what);
    pthread_mutex_unlock(&h->lock);
}

bool mg_comm_health_answer_of(mg_comm_health *h, int rank, char *where, size_t cap) {
    if (!h || rank < 0 || rank >= h->world || !cap) return false;
    pthread_mutex_lock(&h->lock);
    bool got = h->collecting && h->answers[rank][0];
    if (got) snprintf(where, cap, "%s", h->answers[rank]);
    pthread_mutex_unlock(&h->lock);
    return got;
}

bool mg_comm_health_asked(mg_comm_health *h) {
    if (!h) return false;
    pthread_mutex_lock(&h->lock);
    bool asked = h->asked;
    h->asked = false;
    pthread_mutex_unlock(&h->lock);
    return asked;
}

void mg_comm_health_answer(mg_comm_health *h, const char *where) {
    if (!h) return;
    pthread_mutex_lock(&h->lock);
    post_info_locked(h, IN, where);
    pthread_mutex_unlock(&h->lock);
}

void mg_comm_health_close(mg_comm_health *h) {
    if (!h) return;
    mg_rendezvous_close(h->rv);
    pthread_mutex_destroy(&h->lock);
    free(h->answers);
    free(h);
}
