/* The learning-rate and weight-decay schedule: Megatron's OptimizerParamScheduler (get_lr,
 * get_wd, step), step for step, built as training.get_optimizer_param_scheduler builds it.
 * Steps are counted in SAMPLES. Iteration-based training (--train-iters): lengths are iterations
 * times the global batch size; sample-based (--train-samples): the --lr-*-samples flags directly,
 * and the trainer advances the schedule by each iteration's global batch size (which grows with
 * --rampup-batch-size). Megatron's trainer updates the weights with the lr and weight decay at
 * num_steps before the increment, then steps the schedule, and logs the lr after the increment;
 * that ordering is the trainer's business, this module only provides the functions.
 *
 * Parameter groups (megatron/core/optimizer/__init__.py, get_standard_config_overrides): every
 * group shares the warm-up, decay lengths and style; the default group peaks at --lr and ends at
 * --min-lr; with --decoupled-lr the word embedding and the output layer
 * (is_embedding_or_output_parameter, model/params.h's embedding_or_output) peak at --decoupled-lr
 * and end at --decoupled-min-lr (default --min-lr). Weight decay: parameters with decay (not
 * biases and norm weights, wd_mult 0) get mg_lr_schedule_wd.
 * Exports: mg_lr_schedule, mg_lr_schedule_init, mg_lr_schedule_lr_of, mg_lr_schedule_lr,
 * mg_lr_schedule_decoupled_lr, mg_lr_schedule_wd, mg_lr_schedule_step; mg_lr_saved,
 * mg_lr_schedule_saved, mg_lr_schedule_restore, mg_lr_saved_to_json, mg_lr_saved_from_json
 * (lr_schedule_state.c). The functions of a step are core/step_rules.h's (mg_step_lr_of ...);
 * these wrap them. Needs: core/status, core/step_rules, cJSON. */
#ifndef MG_LR_SCHEDULE_H
#define MG_LR_SCHEDULE_H

#include "core/step_rules.h"
#include "megatron.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mg_lr_schedule, the schedule as plain data, is core/step_rules.h's: the step-control op of a
 * backend computes the same rates from it on the device (backend_ops.h, step_control). */

/* Fills s from the validated config (mg_config_validate). Iteration-based (train_samples <= 0;
 * train_iters > 0, global_batch_size > 0):
 *   decay_steps  = (lr_decay_iters, or train_iters when -1) * global_batch_size
 *   warmup_steps = lr_warmup_fraction * decay_steps when the fraction is set (>= 0),
 *                  else lr_warmup_iters * global_batch_size
 *   wsd_decay_steps = lr_wsd_decay_iters * gbs, wd_incr_steps = train_iters * gbs;
 * sample-based: decay = lr_decay_samples (or train_samples), warm-up = fraction * decay or
 * lr_warmup_samples, wsd = lr_wsd_decay_samples, wd_incr = train_samples.
 *   init_lr = lr_warmup_init, max_lr = lr, min_lr = min_lr, num_steps = 0.
 * Rejects, as Megatron's asserts do: min_lr < 0, lr < min_lr, lr_warmup_init > lr,
 * decay_steps <= 0, warmup_steps >= decay_steps, WSD without its anneal length, start_wd < 0,
 * end_wd < start_wd (MG_ERR_USAGE, naming the flags). */
mg_status mg_lr_schedule_init(mg_lr_schedule *s, const mg_config *c);

/* Megatron's get_lr for a group with bounds (max_lr, min_lr), at the current num_steps:
 *   warm-up (warmup_steps > 0 and n <= warmup_steps): init + (max - init) * n / warmup
 *   constant style: max;  n > decay_steps: min;
 *   inverse-square-root: max(min, max * sqrt(max(warmup, 1)) / sqrt(max(n, 1)));
 *   else r = (n - warmup) / (decay - warmup); linear 1 - r, cosine (cos(pi r) + 1) / 2,
 *   WSD: 1 until decay - wsd, then with q = (n - (decay - wsd)) / wsd: exponential 2 * 0.5^q - 1,
 *   linear 1 - q, cosine (cos(pi q) + 1) / 2, minus_sqrt 1 - sqrt(q);
 *   lr = min + coeff * (max - min). */
double mg_lr_schedule_lr_of(const mg_lr_schedule *s, double max_lr, double min_lr);
/* The default group's lr (the one Megatron logs). */
double mg_lr_schedule_lr(const mg_lr_schedule *s);
/* The lr of the word embedding and output layer: their own bounds with --decoupled-lr, else the
 * default group's. */
double mg_lr_schedule_decoupled_lr(const mg_lr_schedule *s);
/* Megatron's get_wd: end_wd past wd_incr_steps and for the constant style; else with
 * r = n / wd_incr_steps, start + coeff * (end - start), coeff = r (linear) or
 * (cos(pi (1 - r)) + 1) / 2 (cosine). */
double mg_lr_schedule_wd(const mg_lr_schedule *s);

/* num_steps += increment (the iteration's global batch size). */
void mg_lr_schedule_step(mg_lr_schedule *s, int64_t increment);

/* ---- the schedule in checkpoints (train/lr_schedule_state.c) ---- */

/* What a checkpoint keeps of the schedule: Megatron's OptimizerParamScheduler.state_dict (its
 * num_steps is the checkpoint's lr_num_steps) and the bounds of the decoupled group, which
 * Megatron keeps in the optimizer's param groups. present: false for checkpoints from before. */
typedef struct {
    bool present;
    double max_lr, min_lr, warmup_steps;
    int64_t decay_steps;
    mg_lr_style style;
    double start_wd, end_wd;
    int64_t wd_incr_steps;
    mg_wd_style wd_style;
    bool decoupled;
    double decoupled_max_lr, decoupled_min_lr;
} mg_lr_saved;

mg_lr_saved mg_lr_schedule_saved(const mg_lr_schedule *s);
/* Megatron's load_state_dict on resume: each value (learning rate, minimum learning rate, warmup
 * iterations, total number of iterations, learning rate decay style, start and end weight decay,
 * total number of weight decay iterations, weight decay incr style, in that order) goes through
 * _check_and_set: with override the schedule's own (the command line's) stays; with
 * use_checkpoint the checkpoint's is taken; otherwise a difference is an error (MG_ERR_FORMAT,
 * exit status 1 as Megatron's assertion) naming the value and both flags. The decoupled group's
 * bounds follow the optimizer's param groups: the checkpoint's unless override (when both runs
 * have the group). Nothing happens for a checkpoint without the values (saved->present false).
 * Logs Megatron's " > overriding ..." / " > using checkpoint value ..." lines. */
mg_status mg_lr_schedule_restore(mg_lr_schedule *s, const mg_lr_saved *saved, bool override,
                                 bool use_checkpoint);
/* The "opt_param_scheduler" object of a checkpoint's state.json: Megatron's state_dict keys
 * (max_lr, min_lr, lr_warmup_steps, lr_decay_steps, lr_decay_style, start_wd, end_wd,
 * wd_incr_steps, wd_incr_style) and, with the decoupled group, decoupled_max_lr and
 * decoupled_min_lr; doubles as %.17g. Fails (MG_ERR_INTERNAL) when cap is too small. */
mg_status mg_lr_saved_to_json(const mg_lr_saved *s, char *buf, size_t cap);
/* Reads that object (NULL: absent, present = false); path names the file in errors. */
struct cJSON;
mg_status mg_lr_saved_from_json(const struct cJSON *obj, const char *path, mg_lr_saved *out);

#endif
