/* The training-length and schedule flags: iteration- against sample-based training, the lr
 * styles' extra lengths, the weight-decay schedule, the decoupled lr and the batch-size rampup.
 * Megatron's rules (arguments.py validate_args at the commit this project follows, and at
 * 532ad926b4^ for --rampup-batch-size, the last one whose calculator ramps; the asserts of
 * OptimizerParamScheduler and RampupBatchsizeNumMicroBatchesCalculator), each refusal quoting
 * Megatron's words where it has any, then the fix. Runs after check_training (the global batch
 * is resolved) and check_lr (iteration-based decay resolved). Idempotent: only
 * --lr-decay-samples is resolved in place. */
#include "config/flags.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

mg_status mg_config_rampup(const mg_config *c, int64_t out[3]) {
    const char *s = c->rampup_batch_size;
    int n = 0;
    while (*s && n < 4) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || (*end && *end != ' '))
            return USAGE("--rampup-batch-size expects three integers START INCR SAMPLES, got '%s'",
                         c->rampup_batch_size);
        if (n < 3) out[n] = v;
        n++;
        s = *end ? end + 1 : end;
    }
    if (n != 3)
        return USAGE("--rampup-batch-size expects 3 values START INCR SAMPLES (e.g. "
                     "--rampup-batch-size 16 16 5859375), got '%s'",
                     c->rampup_batch_size);
    return MG_OK;
}

/* Megatron's "if args.train_iters" / "if args.train_samples" blocks. */
static mg_status check_exclusive(const mg_config *c) {
    if (c->train_iters != -1) {
        if (c->train_samples != -1)
            return USAGE("expected iteration-based training: --train-iters and --train-samples "
                         "are both given; pass only one");
        if (c->lr_decay_samples != -1)
            return USAGE("expected iteration-based learning rate decay: --lr-decay-samples needs "
                         "--train-samples; use --lr-decay-iters");
        if (c->lr_warmup_samples != 0)
            return USAGE("expected iteration-based learning rate warmup: --lr-warmup-samples "
                         "needs --train-samples; use --lr-warmup-iters");
        if (c->rampup_batch_size[0])
            return USAGE("expected no batch-size rampup for iteration-based training: "
                         "--rampup-batch-size needs --train-samples (with --lr-decay-samples, "
                         "--lr-warmup-samples) instead of --train-iters; or drop it");
        if (c->lr_wsd_decay_samples != -1)
            return USAGE("--lr-wsd-decay-samples is for sample-based training; with --train-iters "
                         "use --lr-wsd-decay-iters");
        return MG_OK;
    }
    if (c->lr_decay_iters != -1)
        return USAGE("expected sample-based learning rate decay: --lr-decay-iters needs "
                     "--train-iters; use --lr-decay-samples");
    if (c->lr_warmup_iters != 0)
        return USAGE("expected sample-based learning rate warmup: --lr-warmup-iters needs "
                     "--train-iters; use --lr-warmup-samples");
    if (c->lr_warmup_fraction != -1 && c->lr_warmup_samples != 0)
        return USAGE("can only specify one of lr-warmup-fraction and lr-warmup-samples; pass only "
                     "one");
    if (c->lr_wsd_decay_iters != -1)
        return USAGE("--lr-wsd-decay-iters is for iteration-based training; with --train-samples "
                     "use --lr-wsd-decay-samples");
    return MG_OK;
}

/* Sample-based lengths (the scheduler's asserts: decay > 0, warm-up < decay). */
static mg_status check_samples(mg_config *c) {
    if (c->train_samples <= 0)
        return USAGE("--train-samples must be positive, got %" PRId64, c->train_samples);
    if (c->lr_decay_samples == -1) c->lr_decay_samples = c->train_samples;
    if (c->lr_decay_samples <= 0)
        return USAGE("--lr-decay-samples must be positive, got %" PRId64, c->lr_decay_samples);
    if (c->lr_warmup_samples < 0)
        return USAGE("--lr-warmup-samples must be >= 0, got %" PRId64, c->lr_warmup_samples);
    if (c->lr_warmup_fraction != -1 && !(c->lr_warmup_fraction >= 0 && c->lr_warmup_fraction < 1))
        return USAGE("--lr-warmup-fraction must be in [0, 1), got %g", c->lr_warmup_fraction);
    if (c->lr_warmup_fraction == -1 && c->lr_warmup_samples >= c->lr_decay_samples)
        return USAGE("--lr-warmup-samples %" PRId64 " must be less than the %" PRId64
                     " decay samples; lower it or raise --lr-decay-samples (default "
                     "--train-samples)",
                     c->lr_warmup_samples, c->lr_decay_samples);
    return MG_OK;
}

static mg_status check_styles(const mg_config *c) {
    const bool iters = c->train_iters != -1;
    const int64_t wsd = iters ? c->lr_wsd_decay_iters : c->lr_wsd_decay_samples;
    const char *wsd_flag = iters ? "--lr-wsd-decay-iters" : "--lr-wsd-decay-samples";
    if (c->lr_decay_style == MG_LR_WSD && wsd == -1)
        return USAGE("--lr-decay-style WSD needs %s N: the length of its anneal", wsd_flag);
    if (wsd != -1 && wsd <= 0) return USAGE("%s must be positive, got %" PRId64, wsd_flag, wsd);
    /* Megatron: constant asserts start and end are None and uses --weight-decay; the others
     * need both; the scheduler asserts 0 <= start <= end */
    const bool given = c->start_weight_decay != -1 || c->end_weight_decay != -1;
    if (c->weight_decay_incr_style == MG_WD_CONSTANT && given)
        return USAGE("--start-weight-decay/--end-weight-decay need --weight-decay-incr-style "
                     "linear or cosine; a constant weight decay is --weight-decay");
    if (c->weight_decay_incr_style != MG_WD_CONSTANT) {
        if (c->start_weight_decay == -1 || c->end_weight_decay == -1)
            return USAGE("--weight-decay-incr-style linear/cosine needs --start-weight-decay X "
                         "and --end-weight-decay Y");
        if (!(c->start_weight_decay >= 0))
            return USAGE("--start-weight-decay must be >= 0, got %g", c->start_weight_decay);
        if (!(c->end_weight_decay >= c->start_weight_decay))
            return USAGE("--end-weight-decay %g must be >= --start-weight-decay %g",
                         c->end_weight_decay, c->start_weight_decay);
    }
    if (c->decoupled_lr == -1 && c->decoupled_min_lr != -1)
        return USAGE("--decoupled-min-lr has no effect without --decoupled-lr; pass --decoupled-lr "
                     "X too or drop it");
    if (c->decoupled_lr != -1) {
        if (!(c->decoupled_lr >= 0))
            return USAGE("--decoupled-lr must be >= 0, got %g", c->decoupled_lr);
        double min = c->decoupled_min_lr != -1 ? c->decoupled_min_lr : c->min_lr;
        if (!(min >= 0 && min <= c->decoupled_lr))
            return USAGE("the decoupled minimum lr %g (--decoupled-min-lr, default --min-lr) must "
                         "be in [0, --decoupled-lr %g]",
                         min, c->decoupled_lr);
    }
    return MG_OK;
}

/* RampupBatchsizeNumMicroBatchesCalculator's asserts, in its words. */
static mg_status check_rampup(const mg_config *c) {
    if (!c->rampup_batch_size[0]) return MG_OK;
    int64_t r[3];
    MG_CHECK(mg_config_rampup(c, r));
    const int64_t gbs = c->global_batch_size;
    if (r[0] <= 0)
        return USAGE("start batch size should be positive, got %" PRId64
                     " (--rampup-batch-size START INCR SAMPLES)",
                     r[0]);
    if (r[1] <= 0)
        return USAGE("batch size increment should be positive, got %" PRId64
                     " (--rampup-batch-size START INCR SAMPLES)",
                     r[1]);
    /* Megatron asserts >= 0 but then divides by the samples per increment */
    if (r[2] <= 0)
        return USAGE("ramp-up samples should be positive, got %" PRId64
                     " (--rampup-batch-size START INCR SAMPLES)",
                     r[2]);
    if (gbs < r[0])
        return USAGE("expected global batch size to be greater than or equal to start batch "
                     "size, got %" PRId64 " and %" PRId64 "; raise --global-batch-size",
                     gbs, r[0]);
    if ((gbs - r[0]) % r[1])
        return USAGE("expected global batch size interval (%" PRId64 ") to be divisible by global "
                     "batch size increment (%" PRId64 "); change START or INCR",
                     gbs - r[0], r[1]);
    if (gbs == r[0])
        return USAGE("--rampup-batch-size starts at the --global-batch-size %" PRId64
                     ": nothing to ramp; drop it",
                     gbs);
    return MG_OK;
}

mg_status mg_config_check_schedule(mg_config *c) {
    MG_CHECK(check_exclusive(c));
    if (c->train_iters == -1) MG_CHECK(check_samples(c));
    MG_CHECK(check_styles(c));
    MG_CHECK(check_rampup(c));
    if (!(c->exit_duration_in_mins >= 0))
        return USAGE("--exit-duration-in-mins must be >= 0 (0: never), got %g",
                     c->exit_duration_in_mins);
    return MG_OK;
}
