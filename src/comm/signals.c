/* The line printed on SIGTERM (signals.h): mpirun sends SIGTERM to every rank once one exits
 * early, and without it a rank dies silently mid-call. Reads the group it is told about (its
 * name, call and number) only; calls nothing of comm.c. */
#include "comm/signals.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_sig_rank = -1, g_sig_active;
static const mg_comm *volatile g_sig_comm;
static struct sigaction g_sig_old;
static bool g_sig_installed;

typedef struct {
    char buf[400];
    size_t n;
} sig_line;

static void put_str(sig_line *l, const char *s) {
    while (s && *s && l->n + 1 < sizeof l->buf) l->buf[l->n++] = *s++;
}

static void put_u64(sig_line *l, uint64_t v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (k && l->n + 1 < sizeof l->buf) l->buf[l->n++] = d[--k];
}

/* Only async-signal-safe calls: write, signal, raise. The handler runs once (SA_RESETHAND) and
 * re-raises, so the process still dies of SIGTERM as the launcher expects. */
static void on_sigterm(int sig) {
    sig_line l = {.n = 0};
    const mg_comm *c = g_sig_comm;
    put_str(&l, "megatron: rank ");
    put_u64(&l, (uint64_t)(g_sig_rank < 0 ? 0 : g_sig_rank));
    put_str(&l, ": terminated by SIGTERM ");
    if (c) {
        put_str(&l, g_sig_active ? "while in " : "after ");
        put_str(&l, c->call);
        put_str(&l, " #");
        put_u64(&l, c->seq);
        put_str(&l, " on group '");
        put_str(&l, c->name);
        put_str(&l, "'");
    } else {
        put_str(&l, "before its first communication call");
    }
    put_str(&l, " (the launcher stops every rank once one exits early: see that rank's error)\n");
    ssize_t rc = write(STDERR_FILENO, l.buf, l.n);
    (void)rc;
    signal(sig, SIG_DFL);
    raise(sig);
}

void mg_comm_signals_install(int rank) {
    g_sig_rank = rank;
    if (g_sig_installed) return;
    struct sigaction old;
    if (sigaction(SIGTERM, NULL, &old) != 0) return;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return; /* the program's own */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    if (sigaction(SIGTERM, &sa, &g_sig_old) == 0) g_sig_installed = true;
}

void mg_comm_signals_remove(void) {
    if (!g_sig_installed) return;
    sigaction(SIGTERM, &g_sig_old, NULL);
    g_sig_installed = false;
    g_sig_comm = NULL;
}

void mg_comm_signals_note(const mg_comm *c, bool active) {
    g_sig_active = 0; /* never "while in" a call of another group */
    g_sig_comm = c;
    g_sig_active = active;
}

void mg_comm_signals_forget(const mg_comm *c) {
    if (g_sig_comm == c) g_sig_comm = NULL;
}
