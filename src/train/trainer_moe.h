/* Internal to train/: what the trainer does around a Mixture-of-Experts model's steps
 * (trainer_moe.c). mg_trainer_expert_load is public (trainer.h).
 * Exports: mg_trainer_moe_bind, mg_trainer_moe_set_weights, mg_trainer_moe_zero_grads,
 * mg_trainer_moe_step_begin, mg_trainer_moe_step_end. Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_MOE_H
#define MG_TRAIN_TRAINER_MOE_H

#include "train/trainer_parts.h"

/* After the memory plan: the MoE layers' loss and logging weights, statistics and group, and
 * the gradient runs a step zeroes (every gradient but the experts'); zeroes the whole gradient
 * buffer once, so the padding between parameters stays zero. */
mg_status mg_trainer_moe_bind(mg_trainer *t);
/* The loss and logging weights of t->num_microbatches microbatches per rank (1 / (M x D)): set by
 * bind, again when the count changes (batch-size rampup, evaluation: train/trainer_batch.h). */
void mg_trainer_moe_set_weights(mg_trainer *t);
/* A step's gradient zeroing: the runs of non-expert gradients; the experts' are written over by
 * their layers' first backward (mg_gpt_expert_grads_unwritten). */
mg_status mg_trainer_moe_zero_grads(mg_trainer *t);
/* Before a training step: the load counts and the logged losses start from zero. */
mg_status mg_trainer_moe_step_begin(mg_trainer *t);
/* After its backward: the logged losses summed over replicas and stages; the expert bias
 * updated from the step's load. */
mg_status mg_trainer_moe_step_end(mg_trainer *t);

#endif
