/* The trainer's checkpoint side (internal to train/trainer*.c): the host staging of the fp32
 * state (weights, moments, expert biases; pinned where the backend can, kept for the run when it
 * saves), loading or initialising the state at set-up, and saving, synchronously or in the
 * background (--async-save). mg_trainer_save, _save_poll and _save_wait are in trainer.h.
 * Exports: mg_trainer_load_or_init, mg_trainer_ckpt_free. Needs: train/trainer, train/checkpoint.
 */
#ifndef MG_TRAIN_TRAINER_CKPT_H
#define MG_TRAIN_TRAINER_CKPT_H

#include "train/trainer.h"

/* The state from the newest checkpoint in --load (with --no-load-optim, --finetune and
 * --exit-on-missing-checkpoint), else the initial weights; then into the backend's buffers. */
mg_status mg_trainer_load_or_init(mg_trainer *t);
/* Waits for a save abandoned on an error (its writer stops before its buffers go) and frees the
 * staging and scratch; before the backend is destroyed. */
void mg_trainer_ckpt_free(mg_trainer *t);

#endif
