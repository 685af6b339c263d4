/* The global batch size of each iteration: Megatron's num-microbatches calculator, constant or
 * RampupBatchsizeNumMicroBatchesCalculator (megatron/core/num_microbatches_calculator.py at
 * 532ad926b4^, the last Megatron-LM commit with --rampup-batch-size semantics; later ones replace
 * it by --step-batch-size-schedule and ignore the flag), and training.update_train_iters.
 *
 * Rampup START INCR SAMPLES towards the final --global-batch-size G: with
 * per_increment = SAMPLES / ((G - START) / INCR) (a double, as Python's true division), the
 * iteration that starts after `consumed` samples has the global batch
 *   G                                                   when consumed > SAMPLES,
 *   START + int(consumed / per_increment) * INCR        otherwise,
 * and runs global / (micro batch x data-parallel size) microbatches per rank, which must divide
 * (Megatron checks each iteration; mg_batch_schedule_walk checks every size a run reaches).
 * Sample-based training lasts (update_train_iters) train_samples / G iterations without a
 * rampup, else the iterations that start at consumed <= min(SAMPLES, train_samples) plus
 * (train_samples - consumed) / G (the partial last batch dropped). Iteration-based training has
 * no rampup (config validation refuses one, in Megatron's words).
 * Exports: mg_batch_schedule, mg_batch_schedule_init, mg_batch_schedule_global,
 * mg_batch_schedule_train_iters, mg_batch_schedule_walk. Needs: config/flags. */
#ifndef MG_TRAIN_BATCH_SCHEDULE_H
#define MG_TRAIN_BATCH_SCHEDULE_H

#include "megatron.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t global_batch_size; /* the final one, --global-batch-size */
    int64_t micro_batch_size, data_parallel_size;
    bool rampup;
    int64_t start, increment, rampup_samples; /* --rampup-batch-size */
    double samples_per_increment;
} mg_batch_schedule;

/* From the validated config and the data-parallel size. MG_ERR_USAGE (Megatron's asserts) for a
 * rampup the config check would refuse. */
mg_status mg_batch_schedule_init(mg_batch_schedule *b, const mg_config *c, int dp);
/* The global batch of the iteration that starts after `consumed` samples. */
int64_t mg_batch_schedule_global(const mg_batch_schedule *b, int64_t consumed);
/* Iterations of the run: --train-iters, or update_train_iters' count for --train-samples. */
int64_t mg_batch_schedule_train_iters(const mg_batch_schedule *b, const mg_config *c);
/* Walks the iterations [0, train_iters) from consumed 0 and calls fn once per distinct global
 * batch (in order; the last is the final size once the ramp is over), after checking that the
 * micro batch x data-parallel size divides it (Megatron's consistency check, in its words). */
mg_status mg_batch_schedule_walk(const mg_batch_schedule *b, int64_t train_iters,
                                 mg_status (*fn)(void *ctx, int64_t global_batch), void *ctx);

#endif
