/* Internal to train/: what the trainer does for fp8 linears at a step's end, and with
 * --fp8-param-gather after each update (trainer_fp8.c).
 * Exports: mg_trainer_fp8_step_end, mg_trainer_fp8_params, mg_trainer_fp8_params_prime.
 * Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_FP8_H
#define MG_TRAIN_TRAINER_FP8_H

#include "train/trainer_parts.h"

/* After a training step's backward: the amax of every fp8 tensor (model/fp8.h) reduced by a
 * maximum over the tensor-parallel and the data-parallel group (the ranks holding the same
 * layers: so every layout computes one rank's scales), then the scales and histories updated on
 * the device (delayed scaling). Nothing without fp8 layers. */
mg_status mg_trainer_fp8_step_end(mg_trainer *t);
/* --fp8-param-gather, after the update (before the buffers' gathers): this rank's elements of
 * the fp8 weights (its optimizer pieces of the fp8 buffers, train/buffers.h) cast from their
 * updated compute-dtype values into the fp8 parameter array (model/fp8.h's mg_fp8_param_cast).
 * Tensorwise scaling takes each weight's amax first: its pieces' maxima, reduced over the
 * tensor-parallel group and the buffer's (data- or expert-data-parallel) group. Nothing without
 * the flag. */
mg_status mg_trainer_fp8_params(mg_trainer *t);
/* The same once the weights are set (initialised or loaded), then the fp8 buffers gathered and
 * waited for: the first forward's bytes. */
mg_status mg_trainer_fp8_params_prime(mg_trainer *t);

#endif
