/* The per-step rules of training as inline functions that C host code and CUDA device code both
 * compile, so that the host (checkpoints, logs, tests) and a backend's step-control op
 * (backend_ops.h, step_control) compute the same values from the same state:
 *  - the learning-rate and weight-decay schedule (Megatron's OptimizerParamScheduler get_lr and
 *    get_wd; train/lr_schedule.h describes it and keeps its set-up and checkpoint state);
 *  - the dynamic loss scaler's update (Megatron's DynamicGradScaler; train/grad_scaler.h);
 *  - one whole step of control (mg_step_control_apply): the overflow check, the skip decision,
 *    Adam's step count and bias corrections, the rates the update uses, the schedule's move and
 *    the scaler's, on a block of state (mg_step_ctl) that lives in backend memory, so a training
 *    step needs no host value that changes from step to step.
 * The arithmetic is the host's, operation for operation (doubles where the schedule computes in
 * double); a device's transcendental functions (cos, pow, sqrt in double) may round differently
 * from the host's C library in the last place, which the rounding of the rates to fp32 hides in
 * all but rare cases.
 * Exports: MG_STEP_FN, mg_lr_schedule, mg_grad_scaler, mg_step_lr_of, mg_step_lr,
 * mg_step_decoupled_lr, mg_step_wd, mg_step_scaler_update, mg_step_rate, mg_step_ctl,
 * mg_step_rules, mg_step_control_apply. Needs: megatron.h (the schedule's style enums). */
#ifndef MG_CORE_STEP_RULES_H
#define MG_CORE_STEP_RULES_H

#include "megatron.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MG_STEP_FN static inline __host__ __device__
#else
#define MG_STEP_FN static inline
#endif

#define MG_STEP_PI 3.14159265358979323846

/* The schedule (train/lr_schedule.h documents the fields and how mg_lr_schedule_init fills
 * them). Plain data: a backend op takes it by value. */
typedef struct {
    double max_lr, min_lr, init_lr;
    /* double, not an integer: with --lr-warmup-fraction Megatron computes
     * lr_warmup_steps = fraction * lr_decay_steps as a Python float and never rounds it, so the
     * warm-up boundary and ramp can fall between two sample counts. */
    double warmup_steps;
    int64_t decay_steps;
    mg_lr_style style;
    int64_t wsd_decay_steps; /* WSD: the anneal's samples, at the end of the decay */
    mg_wsd_style wsd_style;
    double start_wd, end_wd; /* constant style: both --weight-decay */
    int64_t wd_incr_steps;   /* train_iters * gbs, or train_samples */
    mg_wd_style wd_style;
    bool decoupled; /* --decoupled-lr given: the embedding and output layer's own bounds */
    double decoupled_max_lr, decoupled_min_lr;
    int64_t num_steps; /* samples consumed so far */
} mg_lr_schedule;

/* The loss scaler (train/grad_scaler.h documents it). Plain data. */
typedef struct {
    bool on;      /* a scaler is in use (constant or dynamic) */
    bool dynamic; /* the scale adapts to overflows */
    float scale, min_scale;
    double growth_interval; /* --loss-scale-window (Megatron compares an int with it) */
    int hysteresis;
    int growth_tracker;     /* clean iterations since the last growth or overflow */
    int hysteresis_tracker; /* overflows left before the next back-off */
} mg_grad_scaler;

/* Megatron's WSD anneal coefficients of q in [0, 1]. */
MG_STEP_FN double mg_step_wsd_coeff(mg_wsd_style style, double q) {
    switch (style) {
    case MG_WSD_LINEAR:
        return 1.0 - q;
    case MG_WSD_COSINE:
        return 0.5 * (cos(MG_STEP_PI * q) + 1.0);
    case MG_WSD_MINUS_SQRT:
        return 1.0 - sqrt(q);
    case MG_WSD_EXPONENTIAL:
        break;
    }
    return (2.0 * pow(0.5, q)) - 1.0;
}

/* get_lr for a group with bounds (max_lr, min_lr) at s->num_steps (train/lr_schedule.h). */
MG_STEP_FN double mg_step_lr_of(const mg_lr_schedule *s, double max_lr, double min_lr) {
    /* the operations in get_lr's order, so every rounding is Python's */
    double n = (double)s->num_steps;
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == MG_LR_CONSTANT) return max_lr;
    if (s->num_steps > s->decay_steps) return min_lr;
    if (s->style == MG_LR_INVERSE_SQRT) {
        double w = s->warmup_steps > 1 ? s->warmup_steps : 1, m = n > 1 ? n : 1;
        double lr = max_lr * pow(w, 0.5) / pow(m, 0.5); /* Python's ** 0.5 is pow */
        return lr > min_lr ? lr : min_lr;
    }
    double coeff;
    if (s->style == MG_LR_WSD) {
        int64_t anneal_start = s->decay_steps - s->wsd_decay_steps;
        coeff = s->num_steps <= anneal_start
                    ? 1.0
                    : mg_step_wsd_coeff(s->wsd_style, (double)(s->num_steps - anneal_start) /
                                                          (double)s->wsd_decay_steps);
    } else {
        /* 0 <= ratio <= 1 here: n > warmup (or warmup == 0) and n <= decay. */
        double ratio = (n - s->warmup_steps) / ((double)s->decay_steps - s->warmup_steps);
        coeff = s->style == MG_LR_COSINE ? 0.5 * (cos(MG_STEP_PI * ratio) + 1.0) : 1.0 - ratio;
    }
    return min_lr + coeff * (max_lr - min_lr);
}

/* The default group's lr. */
MG_STEP_FN double mg_step_lr(const mg_lr_schedule *s) {
    return mg_step_lr_of(s, s->max_lr, s->min_lr);
}

/* The embedding and output layer's lr (their own bounds with --decoupled-lr). */
MG_STEP_FN double mg_step_decoupled_lr(const mg_lr_schedule *s) {
    return s->decoupled ? mg_step_lr_of(s, s->decoupled_max_lr, s->decoupled_min_lr)
                        : mg_step_lr(s);
}

/* get_wd at s->num_steps. */
MG_STEP_FN double mg_step_wd(const mg_lr_schedule *s) {
    if (s->num_steps > s->wd_incr_steps || s->wd_style == MG_WD_CONSTANT) return s->end_wd;
    double r = (double)s->num_steps / (double)s->wd_incr_steps;
    double coeff = s->wd_style == MG_WD_COSINE ? 0.5 * (cos(MG_STEP_PI * (1 - r)) + 1.0) : r;
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}

/* The dynamic scaler after a step; found_inf: some rank's gradients held an Inf or NaN. */
MG_STEP_FN void mg_step_scaler_update(mg_grad_scaler *s, bool found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        if (--s->hysteresis_tracker <= 0) s->scale = fmaxf(s->scale * 0.5f, s->min_scale);
        return;
    }
    if (++s->growth_tracker == s->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale = s->scale * 2.0f;
    }
}

/* The rates of one update, fp32, in mg_step_ctl.rate. */
typedef enum {
    MG_RATE_LR = 0,       /* the default group's lr */
    MG_RATE_DECOUPLED_LR, /* the embedding and output layer's (= lr without --decoupled-lr) */
    MG_RATE_WD,           /* the weight decay of parameters that decay */
    MG_RATE_BC1,          /* Adam's bias corrections 1 - beta1^t, 1 - beta2^t */
    MG_RATE_BC2,
    MG_RATE_COUNT
} mg_step_rate;

/* The training step's control state, in backend memory (the trainer's batch arena). Changed only
 * by mg_step_control_apply (the backend's step_control op) and by the host between runs of steps
 * (initialisation, checkpoint load, the log's counter reset). */
typedef struct {
    int64_t adam_step;      /* completed optimizer steps (Adam's t) */
    int64_t iteration;      /* completed training iterations, skipped ones included (the
                               positional dropout masks' key, core/dropout.h) */
    int64_t lr_num_steps;   /* the schedule's position, in samples */
    int64_t skipped_iters;  /* steps skipped since the last reset */
    int64_t nan_iters;      /* of which those whose loss was not finite */
    float scale, inv_scale; /* the loss scale the next backward uses; fp32 of 1 / scale in double
                               (Megatron's inv_scale); 1 and 1 without a scaler */
    int32_t growth_tracker, hysteresis_tracker; /* the dynamic scaler's */
    int32_t last_skipped;                       /* the last step was skipped */
    float rate[MG_RATE_COUNT];                  /* the rates of the last update */
} mg_step_ctl;

/* What the host tells step_control about a step: fixed for a run but for `samples`, which changes
 * only with --rampup-batch-size. The schedule's num_steps and the scaler's scale and trackers are
 * ignored (the control block's count). */
typedef struct {
    mg_lr_schedule lr;
    mg_grad_scaler scaler;
    double beta1, beta2;
    int64_t samples; /* this iteration's global batch */
} mg_step_rules;

/* One step's control, after the gradient norm of the step is known and before the update:
 *  - the iteration count moves on, skipped or not;
 *  - with a scaler, a norm that is not finite skips the step: skipped_iters++, and nan_iters++
 *    when the loss is not finite too; last_skipped says so (without a scaler nothing is skipped);
 *  - not skipped: adam_step++;
 *  - the rates at the schedule's current position (Megatron updates with the lr before this
 *    iteration's scheduler step) and bias corrections of adam_step:
 *    bc = (float)(1 - pow(beta, adam_step)) (a skipped step's are not used: the update writes
 *    nothing);
 *  - not skipped: lr_num_steps += samples, and the loss and the norm join the running sums
 *    sums[0] and sums[1] (fp32, each added in double, then rounded), which a skipped step's never
 *    do (Megatron averages the loss over the iterations that advanced);
 *  - the dynamic scaler moves (grad_scaler's rule) and inv_scale follows the scale. */
MG_STEP_FN void mg_step_control_apply(mg_step_ctl *c, float norm, float loss, float sums[2],
                                      const mg_step_rules *r) {
    const bool skipped = r->scaler.on && !isfinite(norm);
    c->iteration++;
    if (skipped) {
        c->skipped_iters++;
        if (!isfinite(loss)) c->nan_iters++;
    } else {
        c->adam_step++;
        sums[0] = (float)((double)sums[0] + (double)loss);
        sums[1] = (float)((double)sums[1] + (double)norm);
    }
    c->last_skipped = skipped;
    mg_lr_schedule s = r->lr;
    s.num_steps = c->lr_num_steps;
    c->rate[MG_RATE_LR] = (float)mg_step_lr(&s);
    c->rate[MG_RATE_DECOUPLED_LR] = (float)mg_step_decoupled_lr(&s);
    c->rate[MG_RATE_WD] = (float)mg_step_wd(&s);
    c->rate[MG_RATE_BC1] = (float)(1.0 - pow(r->beta1, (double)c->adam_step));
    c->rate[MG_RATE_BC2] = (float)(1.0 - pow(r->beta2, (double)c->adam_step));
    if (!skipped) c->lr_num_steps += r->samples;
    mg_grad_scaler g = r->scaler;
    g.scale = c->scale;
    g.growth_tracker = c->growth_tracker;
    g.hysteresis_tracker = c->hysteresis_tracker;
    mg_step_scaler_update(&g, skipped);
    c->scale = g.scale;
    c->inv_scale = (float)(1.0 / (double)g.scale);
    c->growth_tracker = g.growth_tracker;
    c->hysteresis_tracker = g.hysteresis_tracker;
}

#endif
