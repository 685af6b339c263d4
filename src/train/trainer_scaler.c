#include "train/trainer_scaler.h"

#include "core/env.h"
#include "core/log.h"

#include <math.h>
#include <stdio.h>

/* The checkpoint's copy of the scaler (scale 0: none). */
static void to_state(mg_trainer *t) {
    const mg_grad_scaler *g = &t->scaling.scaler;
    t->state.loss_scale = g->on ? g->scale : 0;
    t->state.growth_tracker = g->growth_tracker;
    t->state.hysteresis_tracker = g->hysteresis_tracker;
}

mg_status mg_trainer_scaler_step(mg_trainer *t, bool *skipped) {
    float v[2]; /* MG_STAT_LOSS, MG_STAT_GRAD_NORM */
    _Static_assert(MG_STAT_GRAD_NORM == MG_STAT_LOSS + 1, "loss and norm are adjacent");
    MG_CHECK(t->be->copy_d2h(t->be, v, &t->mem.stats[MG_STAT_LOSS], sizeof v));
    *skipped = !isfinite(v[1]);
    if (*skipped) {
        mg_optimizer_unstep(&t->opt);
        t->scaling.skipped_iters++;
        if (!isfinite(v[0])) t->scaling.nan_iters++;
    }
    t->scaling.last_skipped = *skipped;
    mg_grad_scaler_update(&t->scaling.scaler, *skipped);
    to_state(t);
    return MG_OK;
}

void mg_trainer_scaler_restore(mg_trainer *t, bool loaded) {
    mg_grad_scaler *g = &t->scaling.scaler;
    if (loaded && g->dynamic && t->state.loss_scale > 0) {
        g->scale = (float)t->state.loss_scale;
        g->growth_tracker = (int)t->state.growth_tracker;
        g->hysteresis_tracker = (int)t->state.hysteresis_tracker;
        mg_log_info("> loss scaler from the checkpoint: scale %g", (double)g->scale);
    } else if (loaded && g->dynamic) {
        mg_log_warn("the checkpoint holds no loss scaler state; dynamic loss scaling starts at "
                    "--initial-loss-scale %g",
                    (double)g->scale);
    }
    to_state(t);
}

mg_status mg_trainer_fault_overflow(mg_trainer *t) {
    const char *v = mg_env_str("MG_FAULT_OVERFLOW", "");
    long long a, b, it = (long long)t->state.iteration + 1;
    if (!*v || sscanf(v, "%lld:%lld", &a, &b) != 2 || it < a || it > b || t->opt.n_shards < 1)
        return MG_OK;
    const float inf = INFINITY;
    return t->be->copy_h2d(t->be, t->mem.grads + t->opt.shards[0].world, &inf, sizeof inf);
}
