#include "train/lr_schedule.h"

#include "core/status.h"

/* The lengths get_optimizer_param_scheduler computes, in samples. */
static mg_status set_lengths(mg_lr_schedule *s, const mg_config *c) {
    const bool samples = c->train_samples > 0;
    if (samples) {
        s->decay_steps = c->lr_decay_samples > 0 ? c->lr_decay_samples : c->train_samples;
        s->warmup_steps = c->lr_warmup_fraction >= 0
                              ? c->lr_warmup_fraction * (double)s->decay_steps
                              : (double)c->lr_warmup_samples;
        s->wsd_decay_steps = c->lr_wsd_decay_samples;
        s->wd_incr_steps = c->train_samples;
        return MG_OK;
    }
    if (c->train_iters <= 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--train-iters must be positive for the lr schedule (got %lld); or train "
                       "by samples with --train-samples",
                       (long long)c->train_iters);
    if (c->global_batch_size <= 0)
        return MG_FAIL(MG_ERR_USAGE, "--global-batch-size must be resolved and positive (got %d)",
                       c->global_batch_size);
    int64_t gbs = c->global_batch_size;
    int64_t decay_iters = c->lr_decay_iters >= 0 ? c->lr_decay_iters : c->train_iters;
    s->decay_steps = decay_iters * gbs;
    s->warmup_steps = c->lr_warmup_fraction >= 0 ? c->lr_warmup_fraction * (double)s->decay_steps
                                                 : (double)(c->lr_warmup_iters * gbs);
    s->wsd_decay_steps = c->lr_wsd_decay_iters >= 0 ? c->lr_wsd_decay_iters * gbs : -1;
    s->wd_incr_steps = c->train_iters * gbs;
    return MG_OK;
}

mg_status mg_lr_schedule_init(mg_lr_schedule *s, const mg_config *c) {
    *s = (mg_lr_schedule){0};
    MG_CHECK(set_lengths(s, c));
    s->max_lr = c->lr;
    s->min_lr = c->min_lr;
    s->init_lr = c->lr_warmup_init;
    s->style = c->lr_decay_style;
    s->wsd_style = c->lr_wsd_decay_style;
    s->wd_style = c->weight_decay_incr_style;
    /* arguments.py: the constant style decays by --weight-decay from start to end */
    const bool constant = s->wd_style == MG_WD_CONSTANT;
    s->start_wd = constant ? c->weight_decay : c->start_weight_decay;
    s->end_wd = constant ? c->weight_decay : c->end_weight_decay;
    s->decoupled = c->decoupled_lr >= 0;
    s->decoupled_max_lr = c->decoupled_lr;
    s->decoupled_min_lr = c->decoupled_min_lr >= 0 ? c->decoupled_min_lr : c->min_lr;
    s->num_steps = 0;

    /* The same conditions OptimizerParamScheduler asserts in its constructor. */
    if (c->override_opt_param_scheduler && c->use_checkpoint_opt_param_scheduler)
        return MG_FAIL(MG_ERR_USAGE,
                       "--override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler "
                       "are both set (Megatron: 'both override and use-checkpoint are set.'); "
                       "pass one of them");
    if (!(s->min_lr >= 0.0))
        return MG_FAIL(MG_ERR_USAGE, "--min-lr must be >= 0 (got %g)", s->min_lr);
    if (!(s->max_lr >= s->min_lr))
        return MG_FAIL(MG_ERR_USAGE, "--lr (%g) must be >= --min-lr (%g)", s->max_lr, s->min_lr);
    if (!(s->init_lr <= s->max_lr))
        return MG_FAIL(MG_ERR_USAGE, "--lr-warmup-init (%g) must be <= --lr (%g)", s->init_lr,
                       s->max_lr);
    if (s->decay_steps <= 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "the lr decay must be positive (got %lld samples): check --lr-decay-iters "
                       "or --lr-decay-samples",
                       (long long)s->decay_steps);
    if (!(s->warmup_steps < (double)s->decay_steps))
        return MG_FAIL(MG_ERR_USAGE,
                       "lr warm-up (%g samples) must end before lr decay does (%lld samples): "
                       "lower --lr-warmup-iters/--lr-warmup-samples/--lr-warmup-fraction or raise "
                       "the decay",
                       s->warmup_steps, (long long)s->decay_steps);
    if (s->style == MG_LR_WSD && s->wsd_decay_steps <= 0)
        return MG_FAIL(MG_ERR_USAGE, "--lr-decay-style WSD needs --lr-wsd-decay-iters or "
                                     "--lr-wsd-decay-samples (the anneal's length)");
    if (!(s->start_wd >= 0.0))
        return MG_FAIL(MG_ERR_USAGE, "the start weight decay must be >= 0 (got %g)", s->start_wd);
    if (!(s->end_wd >= s->start_wd))
        return MG_FAIL(MG_ERR_USAGE, "--end-weight-decay (%g) must be >= --start-weight-decay (%g)",
                       s->end_wd, s->start_wd);
    return MG_OK;
}

double mg_lr_schedule_lr_of(const mg_lr_schedule *s, double max_lr, double min_lr) {
    return mg_step_lr_of(s, max_lr, min_lr);
}

double mg_lr_schedule_lr(const mg_lr_schedule *s) {
    return mg_step_lr(s);
}

double mg_lr_schedule_decoupled_lr(const mg_lr_schedule *s) {
    return mg_step_decoupled_lr(s);
}

double mg_lr_schedule_wd(const mg_lr_schedule *s) {
    return mg_step_wd(s);
}

void mg_lr_schedule_step(mg_lr_schedule *s, int64_t increment) {
    s->num_steps += increment;
}
