/* Internal to train/: what the trainer does at a step's end for fp8 linears (trainer_fp8.c).
 * Exports: mg_trainer_fp8_step_end. Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_FP8_H
#define MG_TRAIN_TRAINER_FP8_H

#include "train/trainer_parts.h"

/* After a training step's backward: the amax of every fp8 tensor (model/fp8.h) reduced by a
 * maximum over the tensor-parallel and the data-parallel group (the ranks holding the same
 * layers: so every layout computes one rank's scales), then the scales and histories updated on
 * the device (delayed scaling). Nothing without fp8 layers. */
mg_status mg_trainer_fp8_step_end(mg_trainer *t);

#endif
