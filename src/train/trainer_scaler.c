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

mg_status mg_trainer_step_control(mg_trainer *t, int64_t samples) {
    const mg_step_rules rules = {
        .lr = t->lr,
        .scaler = t->scaling.scaler,
        .beta1 = t->opt.beta1,
        .beta2 = t->opt.beta2,
        .samples = samples,
    };
    float *s = t->mem.stats;
    _Static_assert(MG_STAT_GRAD_NORM_SUM == MG_STAT_LOSS_SUM + 1, "the sums are adjacent");
    /* the norm where the optimizer computed it (scalars[1]); the loss of the step */
    return t->be->step_control(t->be, t->mem.ctl, &t->opt.scalars[1], &s[MG_STAT_LOSS],
                               &s[MG_STAT_LOSS_SUM], &rules);
}

mg_status mg_trainer_ctl_upload(mg_trainer *t) {
    const mg_grad_scaler *g = &t->scaling.scaler;
    mg_step_ctl c = {
        .adam_step = t->opt.step,
        .iteration = t->state.iteration,
        .lr_num_steps = t->lr.num_steps,
        .scale = g->scale,
        /* Megatron's inv_scale: the reciprocal in double, then fp32 */
        .inv_scale = (float)(1.0 / (double)g->scale),
        .growth_tracker = g->growth_tracker,
        .hysteresis_tracker = g->hysteresis_tracker,
    };
    t->scaling.skipped_iters = t->scaling.nan_iters = 0;
    t->scaling.last_skipped = false;
    return t->be->copy_h2d(t->be, t->mem.ctl, &c, sizeof c);
}

void mg_trainer_ctl_take(mg_trainer *t, const mg_step_ctl *c) {
    mg_grad_scaler *g = &t->scaling.scaler;
    t->opt.step = c->adam_step;
    t->lr.num_steps = c->lr_num_steps;
    g->scale = c->scale;
    g->growth_tracker = c->growth_tracker;
    g->hysteresis_tracker = c->hysteresis_tracker;
    t->scaling.skipped_iters = c->skipped_iters;
    t->scaling.nan_iters = c->nan_iters;
    t->scaling.last_skipped = c->last_skipped != 0;
    t->state.lr_num_steps = c->lr_num_steps;
    t->state.optimizer_step = c->adam_step;
    to_state(t);
}

mg_status mg_trainer_ctl_read(mg_trainer *t) {
    mg_step_ctl c;
    MG_CHECK(t->be->copy_d2h(t->be, &c, t->mem.ctl, sizeof c));
    mg_trainer_ctl_take(t, &c);
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

/* MG_FAULT_OVERFLOW=A:B, parsed: false when unset or malformed (the fault is then off). */
static bool fault_window(long long *a, long long *b) {
    const char *v = mg_env_str("MG_FAULT_OVERFLOW", "");
    return *v && sscanf(v, "%lld:%lld", a, b) == 2;
}

mg_status mg_trainer_fault_arm(mg_trainer *t) {
    long long a, b, it = (long long)t->state.iteration + 1;
    if (!fault_window(&a, &b)) return MG_OK;
    const float v = it >= a && it <= b ? INFINITY : 0.0f;
    return t->be->copy_h2d(t->be, &t->mem.stats[MG_STAT_FAULT], &v, sizeof v);
}

mg_status mg_trainer_fault_overflow(mg_trainer *t) {
    long long a, b;
    if (!fault_window(&a, &b) || t->opt.n_shards < 1) return MG_OK;
    float *g = t->mem.grads + t->opt.shards[0].world;
    return t->be->sum_f32(t->be, g, &t->mem.stats[MG_STAT_FAULT], NULL, 1, 1.0f);
}
