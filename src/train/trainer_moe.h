/* Internal to train/: what the trainer does around a Mixture-of-Experts model's steps
 * (trainer_moe.c). mg_trainer_moe_loads is public (trainer.h).
 * Exports: mg_trainer_moe_bind, mg_trainer_moe_set_weights, mg_trainer_moe_zero_grads,
 * mg_trainer_moe_step_begin, mg_trainer_moe_step_end, mg_moe_load_stats. Needs:
 * train/trainer_parts. */
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
/* From a step's loads (layers x E tokens per expert, host memory; experts [r E/ep, (r+1) E/ep)
 * on expert-parallel rank r): the expert load, max over mean tokens per expert of the busiest
 * layer, and the expert-parallel imbalance, each layer's max over mean tokens per rank, averaged
 * over the layers that routed tokens (Megatron's ECHO metric moe_ep_load_imbalance). */
void mg_moe_load_stats(const float *loads, int layers, int E, int ep, double *expert_load,
                       double *ep_imbalance);

#endif
