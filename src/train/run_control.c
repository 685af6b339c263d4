#include "train/run_control.h"
#include "core/clock.h"

#include "core/log.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t g_signal_received;

static void on_signal(int sig) {
    (void)sig;
    g_signal_received = 1;
}

mg_status mg_run_control_init(mg_run_control *rc, const mg_config *c) {
    memset(rc, 0, sizeof *rc);
    rc->start_s = mg_clock_seconds();
    rc->minutes = c->exit_duration_in_mins;
    rc->last_global = -1;
    if (!c->exit_signal_handler) return MG_OK;
    g_signal_received = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a blocking read or collective goes on; the loop looks later */
    if (sigaction(SIGTERM, &sa, &rc->old) != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "--exit-signal-handler: cannot install a SIGTERM handler");
    rc->signals = true;
    return MG_OK;
}

mg_status mg_run_control_bind(mg_run_control *rc, mg_trainer *t) {
    rc->last_global = mg_batch_schedule_global(&t->batch, t->state.consumed_train_samples);
    bool agree = rc->signals || rc->minutes > 0;
    mg_comm *g = t->layout.dp ? t->layout.dp : t->layout.tp ? t->layout.tp : t->layout.pp;
    if (agree && g && mg_comm_device_buffers(g)) {
        rc->be = t->be;
        MG_CHECK(t->be->alloc(t->be, 2 * sizeof(int64_t), &rc->scratch));
    }
    return MG_OK;
}

bool mg_run_control_batch_changes(mg_run_control *rc, const mg_trainer *t) {
    int64_t g = mg_batch_schedule_global(&t->batch, t->state.consumed_train_samples);
    bool changed = g != rc->last_global && t->state.iteration != 0;
    rc->last_global = g;
    return changed;
}

/* v[0..1] = their maximum over group c (host values; through the scratch on device buffers). */
static mg_status max_over(mg_run_control *rc, mg_comm *c, int64_t *v) {
    if (!c) return MG_OK;
    if (!mg_comm_device_buffers(c))
        return mg_comm_all_reduce(c, v, v, 2, MG_I64, MG_REDUCE_MAX, NULL);
    mg_backend *be = rc->be;
    void *stream = be->stream_handle ? be->stream_handle(be, MG_STREAM_COMPUTE) : NULL;
    MG_CHECK(be->copy_h2d(be, rc->scratch, v, 2 * sizeof *v));
    MG_CHECK(mg_comm_all_reduce(c, rc->scratch, rc->scratch, 2, MG_I64, MG_REDUCE_MAX, stream));
    return be->copy_d2h(be, v, rc->scratch, 2 * sizeof *v);
}

mg_status mg_run_control_stop(mg_run_control *rc, mg_trainer *t, mg_stop_reason *why) {
    *why = MG_STOP_NONE;
    if (!rc->signals && !(rc->minutes > 0)) return MG_OK;
    rc->elapsed_min = (mg_clock_seconds() - rc->start_s) / 60.0;
    int64_t v[2] = {rc->signals && g_signal_received,
                    rc->minutes > 0 && rc->elapsed_min > rc->minutes};
    /* dp, tp and pp together span every rank (context parallelism is 1) */
    mg_comm *groups[3] = {t->layout.dp, t->layout.tp, t->layout.pp};
    for (int i = 0; i < 3; i++) MG_CHECK(max_over(rc, groups[i], v));
    *why = v[0] ? MG_STOP_SIGNAL : v[1] ? MG_STOP_DURATION : MG_STOP_NONE;
    return MG_OK;
}

void mg_run_control_log_stop(const mg_run_control *rc, mg_stop_reason why) {
    if (why == MG_STOP_SIGNAL) mg_log_info("exiting program after receiving SIGTERM.");
    if (why == MG_STOP_DURATION)
        mg_log_info("exiting program after %.6f minutes (--exit-duration-in-mins %g)",
                    rc->elapsed_min, rc->minutes);
}

void mg_run_control_free(mg_run_control *rc) {
    if (rc->signals) sigaction(SIGTERM, &rc->old, NULL);
    if (rc->scratch) rc->be->free(rc->be, rc->scratch);
    memset(rc, 0, sizeof *rc);
}
