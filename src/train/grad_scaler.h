/* Loss scaling, as Megatron's grad scalers (megatron/core/optimizer/grad_scaler.py) and its
 * mixed-precision optimizer step:
 *  - which scaler: --loss-scale S gives a constant scale (with --fp16, --bf16 or the distributed
 *    optimizer, as Megatron builds one); --fp16 without it the dynamic scaler; else none;
 *  - with a scaler, the backward starts from loss x scale, the gradients are unscaled in the
 *    optimizer step, and a step whose gradients hold an Inf or NaN on any rank is skipped: no
 *    update, no Adam step, no lr-schedule step (the iteration and the consumed samples still
 *    advance), counted in the log line's "number of skipped iterations";
 *  - the dynamic scaler halves the scale (not below --min-loss-scale) once --hysteresis
 *    overflows have been seen since the last growth, and doubles it after --loss-scale-window
 *    clean iterations in a row (which also restores the hysteresis). The scale is an fp32 value.
 * Its state (scale and both trackers) is part of the checkpoint (train/checkpoint.c).
 * In training the rule runs on the device, in the step's control (core/step_rules.h,
 * train/trainer_scaler.h); mg_grad_scaler_update is the same function on the host.
 * Exports: mg_grad_scaler_init, mg_grad_scaler_update, mg_grad_scaler_describe (mg_grad_scaler
 * is core/step_rules.h's). Needs: megatron.h, core/step_rules. */
#ifndef MG_TRAIN_GRAD_SCALER_H
#define MG_TRAIN_GRAD_SCALER_H

#include "core/step_rules.h"
#include "megatron.h"

#include <stdbool.h>
#include <stddef.h>

/* mg_grad_scaler, the scaler as plain data, and its update rule are core/step_rules.h's (the
 * step-control op of a backend runs the rule on the device). */

/* The scaler of config c (off when c asks for none). */
void mg_grad_scaler_init(mg_grad_scaler *s, const mg_config *c);

/* After a step: found_inf says whether some rank's gradients held an Inf or NaN. */
void mg_grad_scaler_update(mg_grad_scaler *s, bool found_inf);

/* One line describing the scaler ("dynamic loss scaling: initial 4294967296, ..."). */
void mg_grad_scaler_describe(const mg_grad_scaler *s, char *buf, size_t n);

#endif
