#include "train/batch_schedule.h"

#include "config/flags.h"
#include "core/status.h"

#include <inttypes.h>

mg_status mg_batch_schedule_init(mg_batch_schedule *b, const mg_config *c, int dp) {
    *b = (mg_batch_schedule){
        .global_batch_size = c->global_batch_size,
        .micro_batch_size = c->micro_batch_size,
        .data_parallel_size = dp,
    };
    if (b->global_batch_size <= 0 || b->micro_batch_size <= 0 || dp <= 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "batch schedule of a config not validated (gbs %" PRId64 ", mbs %" PRId64
                       ", dp %d)",
                       b->global_batch_size, b->micro_batch_size, dp);
    if (!c->rampup_batch_size[0]) return MG_OK;
    int64_t r[3];
    MG_CHECK(mg_config_rampup(c, r));
    int64_t diff = b->global_batch_size - r[0];
    if (r[0] <= 0 || r[1] <= 0 || r[2] <= 0 || diff <= 0 || diff % r[1])
        return MG_FAIL(MG_ERR_USAGE,
                       "--rampup-batch-size %s does not ramp to --global-batch-size %" PRId64
                       " in positive steps; see `megatron train --help`",
                       c->rampup_batch_size, b->global_batch_size);
    b->rampup = true;
    b->start = r[0];
    b->increment = r[1];
    b->rampup_samples = r[2];
    b->samples_per_increment = (double)r[2] / (double)(diff / r[1]);
    return MG_OK;
}

int64_t mg_batch_schedule_global(const mg_batch_schedule *b, int64_t consumed) {
    if (!b->rampup || consumed > b->rampup_samples) return b->global_batch_size;
    /* int(consumed / per_increment): Python truncates, consumed >= 0 */
    int64_t steps = (int64_t)((double)consumed / b->samples_per_increment);
    return b->start + steps * b->increment;
}

int64_t mg_batch_schedule_train_iters(const mg_batch_schedule *b, const mg_config *c) {
    if (c->train_iters > 0) return c->train_iters;
    if (!b->rampup) return c->train_samples / b->global_batch_size;
    int64_t iterations = 0, consumed = 0;
    while (consumed <= b->rampup_samples && consumed <= c->train_samples) {
        consumed += mg_batch_schedule_global(b, consumed);
        iterations++;
    }
    if (c->train_samples > consumed)
        iterations += (c->train_samples - consumed) / b->global_batch_size;
    return iterations;
}

static mg_status check_size(const mg_batch_schedule *b, int64_t g) {
    int64_t per = b->micro_batch_size * b->data_parallel_size;
    if (g % per == 0) return MG_OK;
    return MG_FAIL(MG_ERR_USAGE,
                   "current global batch size (%" PRId64 ") is not divisible by micro-batch-size "
                   "(%" PRId64 ") times data parallel size (%" PRId64
                   "); make --rampup-batch-size's START and INCR multiples of %" PRId64,
                   g, b->micro_batch_size, b->data_parallel_size, per);
}

mg_status mg_batch_schedule_walk(const mg_batch_schedule *b, int64_t train_iters,
                                 mg_status (*fn)(void *ctx, int64_t global_batch), void *ctx) {
    int64_t last = -1, consumed = 0, it = 0;
    for (; it < train_iters && b->rampup && consumed <= b->rampup_samples; it++) {
        int64_t g = mg_batch_schedule_global(b, consumed);
        if (g != last) {
            MG_CHECK(check_size(b, g));
            MG_CHECK(fn(ctx, g));
            last = g;
        }
        consumed += g;
    }
    if (it < train_iters && last != b->global_batch_size) {
        MG_CHECK(check_size(b, b->global_batch_size));
        MG_CHECK(fn(ctx, b->global_batch_size));
    }
    return MG_OK;
}
