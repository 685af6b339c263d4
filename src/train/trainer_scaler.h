/* Internal to train/: the trainer's step control (core/step_rules.h) and its side of loss scaling
 * (train/grad_scaler.h). The state of record is the step-control block in backend memory
 * (t->mem.ctl): Adam's step count, the schedule's position, the loss scale and the scaler's
 * trackers, the skipped and nan iteration counts, the rates of the update. The backend's
 * step_control op moves it every step on the device, so a step reads nothing back; the host
 * copies (t->opt.step, t->lr.num_steps, t->scaling, t->state's) follow it at each read: the lagged
 * statistics read (mg_trainer_read_stats: the same copy) and a checkpoint save. The scale enters
 * the backward through the loss weights (train/trainer_loss.h: scaled on the device) and leaves
 * through the optimizer's unscale (train/optimizer.h), both read from the block.
 * Exports: mg_trainer_step_control, mg_trainer_ctl_upload, mg_trainer_ctl_take,
 * mg_trainer_ctl_read, mg_trainer_scaler_restore, mg_trainer_fault_arm,
 * mg_trainer_fault_overflow.
 * Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_SCALER_H
#define MG_TRAIN_TRAINER_SCALER_H

#include "train/trainer_parts.h"

/* Once the step's gradient norm is known (train/optimizer.h, mg_optimizer_norm) and before the
 * update: enqueues the step's control (backend_ops.h, step_control) for an iteration of
 * `samples` samples: the skip decision (with a scaler, a norm that is not finite: every rank
 * computed the same norm, so every rank decides alike), Adam's step, the update's rates, the
 * schedule's move, the scaler's update, and the running sums of the loss and norm. No host
 * sync. */
mg_status mg_trainer_step_control(mg_trainer *t, int64_t samples);
/* Writes the host's state (Adam's step, the schedule's position, the scaler's scale and trackers;
 * zero counts) into the block: after initialisation or a checkpoint load. */
mg_status mg_trainer_ctl_upload(mg_trainer *t);
/* The host copies from a read of the block c. */
void mg_trainer_ctl_take(mg_trainer *t, const mg_step_ctl *c);
/* Reads the block (one host sync) and takes it: a checkpoint save records the state. */
mg_status mg_trainer_ctl_read(mg_trainer *t);
/* After a load or an initialisation (`loaded`: the checkpoint's optimizer state was loaded):
 * Megatron restores the dynamic scaler's scale and trackers with the optimizer state, and warns
 * when the checkpoint has none; a constant scaler has no state. Then t->state is the scaler's.
 * (The block is written afterwards, mg_trainer_ctl_upload.) */
void mg_trainer_scaler_restore(mg_trainer *t, bool loaded);
/* MG_FAULT_OVERFLOW=A:B (tests, core/env.h): the gradients of iterations A..B hold an Inf, on
 * every rank (the first element of its first shard, which its gradient norm counts unless it is a
 * replicated or a pipeline copy that another rank counts). The host decides before the step
 * (mg_trainer_fault_arm: Inf or 0 into the statistics block's fault slot); the step adds that
 * slot to the element on the device (mg_trainer_fault_overflow), so a graphed step carries each
 * replayed iteration's fault. Both do nothing without the variable. */
mg_status mg_trainer_fault_arm(mg_trainer *t);
mg_status mg_trainer_fault_overflow(mg_trainer *t);

#endif
