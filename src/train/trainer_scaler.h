/* Internal to train/: the trainer's side of loss scaling (train/grad_scaler.h): the overflow check
 * after each update, the scaler's state in the checkpoint's mg_train_state, and the test hook that
 * makes gradients overflow. The scale itself enters through the gradient weights
 * (train/trainer_batch.h, t->dloss_scale) and leaves through the optimizer's unscale
 * (train/optimizer.h).
 * Exports: mg_trainer_scaler_step, mg_trainer_scaler_restore, mg_trainer_fault_overflow.
 * Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_SCALER_H
#define MG_TRAIN_TRAINER_SCALER_H

#include "train/trainer_parts.h"

/* After an update with a scaler: reads the step's loss and gradient norm (one host sync, as
 * Megatron's found_inf.item()); when the norm is not finite (the device skipped the update:
 * train/optimizer.h) takes back Adam's step and counts the skip (*skipped). Every rank computed
 * the same norm, so every rank decides alike. Then the scaler moves and t->state follows it. */
mg_status mg_trainer_scaler_step(mg_trainer *t, bool *skipped);
/* After a load or an initialisation (`loaded`: the checkpoint's optimizer state was loaded):
 * Megatron restores the dynamic scaler's scale and trackers with the optimizer state, and warns
 * when the checkpoint has none; a constant scaler has no state. Then t->state is the scaler's. */
void mg_trainer_scaler_restore(mg_trainer *t, bool loaded);
/* MG_FAULT_OVERFLOW=A:B (tests, core/env.h): the gradients of iterations A..B hold an Inf, on
 * every rank (the first element of its first shard, which its gradient norm counts unless it is a
 * replicated or a pipeline copy that another rank counts). */
mg_status mg_trainer_fault_overflow(mg_trainer *t);

#endif
