#include "train/lr_schedule.h"

#include "core/status.h"

#include <math.h>

mg_status mg_lr_schedule_init(mg_lr_schedule *s, const mg_config *c) {
    if (c->train_iters <= 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--train-iters must be positive for the lr schedule (got %lld)",
                       (long long)c->train_iters);
    if (c->global_batch_size <= 0)
        return MG_FAIL(MG_ERR_USAGE, "--global-batch-size must be resolved and positive (got %d)",
                       c->global_batch_size);
    int64_t gbs = c->global_batch_size;
    int64_t decay_iters = c->lr_decay_iters >= 0 ? c->lr_decay_iters : c->train_iters;

    s->max_lr = c->lr;
    s->min_lr = c->min_lr;
    s->init_lr = c->lr_warmup_init;
    s->style = c->lr_decay_style;
    s->decay_steps = decay_iters * gbs;
    s->warmup_steps = c->lr_warmup_fraction >= 0 ? c->lr_warmup_fraction * (double)s->decay_steps
                                                 : (double)(c->lr_warmup_iters * gbs);
    s->num_steps = 0;

    /* The same conditions OptimizerParamScheduler asserts in its constructor. */
    if (!(s->min_lr >= 0.0))
        return MG_FAIL(MG_ERR_USAGE, "--min-lr must be >= 0 (got %g)", s->min_lr);
    if (!(s->max_lr >= s->min_lr))
        return MG_FAIL(MG_ERR_USAGE, "--lr (%g) must be >= --min-lr (%g)", s->max_lr, s->min_lr);
    if (!(s->init_lr <= s->max_lr))
        return MG_FAIL(MG_ERR_USAGE, "--lr-warmup-init (%g) must be <= --lr (%g)", s->init_lr,
                       s->max_lr);
    if (s->decay_steps <= 0)
        return MG_FAIL(MG_ERR_USAGE, "--lr-decay-iters must be positive (got %lld)",
                       (long long)decay_iters);
    if (!(s->warmup_steps < (double)s->decay_steps))
        return MG_FAIL(MG_ERR_USAGE,
                       "lr warm-up (%g samples) must end before lr decay does (%lld samples): "
                       "lower --lr-warmup-iters/--lr-warmup-fraction or raise --lr-decay-iters",
                       s->warmup_steps, (long long)s->decay_steps);
    return MG_OK;
}

double mg_lr_schedule_lr(const mg_lr_schedule *s) {
    double n = (double)s->num_steps;
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == MG_LR_CONSTANT) return s->max_lr;
    if (s->num_steps > s->decay_steps) return s->min_lr;

    /* 0 <= ratio <= 1 here: n > warmup (or warmup == 0) and n <= decay. */
    double ratio = (n - s->warmup_steps) / ((double)s->decay_steps - s->warmup_steps);
    double coeff = s->style == MG_LR_COSINE ? 0.5 * (cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

void mg_lr_schedule_step(mg_lr_schedule *s, int64_t increment) {
    s->num_steps += increment;
}
