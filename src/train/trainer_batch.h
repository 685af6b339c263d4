/* Internal to train/: the number of microbatches a pass runs, which changes during training with
 * --rampup-batch-size (train/batch_schedule.h) and between training and evaluation (which runs
 * the full --global-batch-size, as Megatron's evaluate does with eval_global_batch_size). The
 * memory plan is made for the largest count (the final global batch), whose activation slots and
 * pipeline buffers bound every smaller count's; a change rebuilds the pipeline walker
 * (parallel/pipeline/run.h: its plans are per count; a few small host allocations, at each
 * change only) on the same buffers, and rewrites the per-token loss weight 1 / (tokens x M x D)
 * and the MoE loss weights.
 * Also the loading of a microbatch's samples (mg_trainer_load_microbatch).
 * Exports: mg_trainer_batch_init, mg_trainer_token_weight, mg_trainer_upload_loss_weights,
 * mg_trainer_set_microbatches, mg_trainer_batch_begin, mg_trainer_load_microbatch. Needs:
 * train/trainer_parts, train/batch_schedule. */
#ifndef MG_TRAIN_TRAINER_BATCH_H
#define MG_TRAIN_TRAINER_BATCH_H

#include "train/trainer_parts.h"

/* After the model is built and t->num_microbatches holds the final global batch's count: the
 * batch schedule, t->train_iters (Megatron's update_train_iters for --train-samples), and every
 * global batch size the run reaches checked (divisible by micro batch x D; a valid pipeline
 * schedule for its count), before any collective. */
mg_status mg_trainer_batch_init(mg_trainer *t);
/* d(loss)/d(token loss) of one token: 1 / (tokens per microbatch x microbatches x D). */
float mg_trainer_token_weight(const mg_trainer *t);
/* Uploads the gradient weights of the current microbatch count: every token's token weight into
 * t->mem.dloss (without the loss scale: a training head multiplies in the step-control block's on
 * the device, train/trainer_loss.h), and the MoE losses' weights (train/trainer_moe.h). */
mg_status mg_trainer_upload_loss_weights(mg_trainer *t);
/* Makes the next passes run m microbatches per rank (nothing when it already does). */
mg_status mg_trainer_set_microbatches(mg_trainer *t, int m);
/* Before a training step: the iteration's global batch (*global_batch) from the consumed
 * samples, and its microbatches set. */
mg_status mg_trainer_batch_begin(mg_trainer *t, int64_t *global_batch);
/* Loads this rank's microbatch mb of the global batch starting at sample `first` into
 * t->mem.host_tokens/host_targets and copies what is asked (tokens, targets: backend memory, NULL:
 * not copied): Megatron's MegatronPretrainingSampler gives dp rank r the samples
 * [first + (mb*D + r)*mbs, +mbs). */
mg_status mg_trainer_load_microbatch(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                     int mb, int32_t *tokens, int32_t *targets);

#endif
