/* The learning-rate schedule: Megatron's OptimizerParamScheduler (lr part), step for step.
 * Steps are counted in SAMPLES, as Megatron does for iteration-based training: warm-up and decay
 * lengths are iterations times the global batch size, and the trainer advances the schedule by
 * the global batch size each iteration. Megatron's trainer updates the weights with the lr at
 * num_steps before the increment, then steps the schedule, and logs the lr after the increment;
 * that ordering is the trainer's business, this module only provides the functions.
 * Exports: mg_lr_schedule, mg_lr_schedule_init, mg_lr_schedule_lr, mg_lr_schedule_step.
 * Needs: core/status. */
#ifndef MG_LR_SCHEDULE_H
#define MG_LR_SCHEDULE_H

#include "megatron.h"

#include <stdint.h>

typedef struct {
    double max_lr, min_lr, init_lr;
    /* double, not an integer: with --lr-warmup-fraction Megatron computes
     * lr_warmup_steps = fraction * lr_decay_steps as a Python float and never rounds it, so the
     * warm-up boundary and ramp can fall between two sample counts. */
    double warmup_steps;
    int64_t decay_steps;
    mg_lr_style style;
    int64_t num_steps; /* samples consumed so far */
} mg_lr_schedule;

/* Fills s from the resolved config (train_iters > 0, global_batch_size > 0):
 *   decay_steps  = (lr_decay_iters, or train_iters when -1) * global_batch_size
 *   warmup_steps = lr_warmup_fraction * decay_steps when the fraction is set (>= 0),
 *                  else lr_warmup_iters * global_batch_size
 *   init_lr = lr_warmup_init, max_lr = lr, min_lr = min_lr, num_steps = 0.
 * Rejects, as Megatron's asserts do: min_lr < 0, lr < min_lr, lr_warmup_init > lr,
 * decay_steps <= 0, warmup_steps >= decay_steps (MG_ERR_USAGE, naming the flags). */
mg_status mg_lr_schedule_init(mg_lr_schedule *s, const mg_config *c);

/* The lr at the current num_steps (Megatron's get_lr):
 *   warm-up (warmup_steps > 0 and num_steps <= warmup_steps): init + (max - init) * n / warmup
 *   constant style: max_lr;  past decay_steps: min_lr;
 *   else r = (n - warmup) / (decay - warmup), linear 1 - r, cosine (cos(pi r) + 1) / 2,
 *   lr = min_lr + coeff * (max_lr - min_lr). */
double mg_lr_schedule_lr(const mg_lr_schedule *s);

/* num_steps += increment (the global batch size, once per iteration). */
void mg_lr_schedule_step(mg_lr_schedule *s, int64_t increment);

#endif
