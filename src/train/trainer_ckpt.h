/* The trainer's checkpoint side: the host staging of the fp32 state (weights, moments, expert
 * biases; pinned where the backend can, kept for the run when it saves), loading or initialising
 * the state at set-up, and saving, synchronously or in the background (--async-save). Its state
 * is the trainer's mg_train_ckpt_stage (train/trainer_parts.h).
 * Exports: mg_trainer_load_or_init, mg_trainer_save, mg_trainer_save_poll, mg_trainer_save_wait,
 * mg_trainer_ckpt_free. Needs: train/trainer_parts, train/trainer_weights, train/trainer_scaler,
 * train/checkpoint. */
#ifndef MG_TRAIN_TRAINER_CKPT_H
#define MG_TRAIN_TRAINER_CKPT_H

#include "train/trainer_parts.h"

/* The state from the newest checkpoint in --load (with --no-load-optim, --finetune and
 * --exit-on-missing-checkpoint), else the initial weights; then into the backend's buffers. */
mg_status mg_trainer_load_or_init(mg_trainer *t);
/* Saves a checkpoint of the current state (every rank calls it). With --async-save the state is
 * copied to the host and written in the background: a save still being written is finished
 * first, mg_trainer_save_poll (at the same iteration on every rank) commits it once every rank's
 * files are written, and mg_trainer_save_wait waits for it (end of training, exit). */
mg_status mg_trainer_save(mg_trainer *t);
mg_status mg_trainer_save_poll(mg_trainer *t);
mg_status mg_trainer_save_wait(mg_trainer *t);
/* Waits for a save abandoned on an error (its writer stops before its buffers go) and frees the
 * staging and scratch; before the backend is destroyed. */
void mg_trainer_ckpt_free(mg_trainer *t);

#endif
