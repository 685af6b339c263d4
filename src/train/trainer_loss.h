/* Internal to train/: the loss of a pass, which tokens count and what each one weighs: Megatron's
 * loss_func (pretrain_gpt.py), the schedule's normalisation (forward_step_calc_loss) and
 * finalize_model_grads' division by the token count.
 *
 *  - The loss mask (--eod-mask-loss): a position whose INPUT token is the end-of-document id does
 *    not count (megatron/core/datasets/gpt_dataset.py, _get_ltor_masks_and_position_ids:
 *    loss_mask[tokens == eod] = 0, i.e. the prediction of the next document's first token). The
 *    id is the tokenizer's eod; NullTokenizer's is vocab-size - 1 (Megatron-LM's current
 *    NullTokenizer), and --mock-data's the mock documents' last token, vocab-size - 1.
 *  - The gradient weight of token i (dloss[i], the cross-entropy's per-token weight) in a
 *    microbatch with n unmasked tokens, of a global batch with T unmasked tokens (over every
 *    microbatch of every data-parallel rank), M microbatches per rank and D ranks:
 *      default                     mask[i] / (max(n, 1) M D): loss_func's sum over num_tokens,
 *                                  the schedule's 1 / M, DDP's gradient_scaling_factor 1 / D
 *      --calculate-per-token-loss  mask[i] / max(T, 1): loss_func's sum; finalize_model_grads
 *                                  divides every gradient by the all-reduced count (no 1 / D)
 *    Without a mask both are 1 / (N M D) for N tokens per microbatch: bit for bit one weight.
 *  - The reported loss (t->mem.loss, the log line's 'lm loss'): sum over the global batch of
 *    mask[i] loss[i] / max(T, 1) in both modes, through each slot's weights mask[i] / max(T, 1)
 *    (t->mem.loss_w, uploaded with the gradient weights; a graphed step stages both per
 *    microbatch, train/trainer_graph.h) (Megatron's train_step reports val[0] / val[1] of
 *    the all-reduced (sum, count) pairs whenever loss_func returns them; 0 / 0 would print nan,
 *    here 0); an evaluation's: the sum over its iterations divided by the sum of their counts.
 *  - T is counted on the host before the pass: the mask is a function of the data, so every rank
 *    that needs it (the one computing the loss; MoE layers under --calculate-per-token-loss) reads
 *    the input ids of the whole global batch. No collective, and the weights are known before the
 *    first backward; Megatron scales the reduced gradients afterwards instead (the same values up
 *    to rounding).
 *  - MoE aux losses under --calculate-per-token-loss weigh 1 / max(T, 1): Megatron sets the
 *    MoEAuxLossAutoScaler scale to 1 and finalize_model_grads divides every gradient by T.
 *  - The loss scale (train/grad_scaler.h): the weights above are uploaded without it; a training
 *    pass's head multiplies its weights by the step-control block's scale on the device
 *    (t->mem.dloss_scaled, train/trainer_scaler.h), and the MoE losses' weights take the same
 *    scale (model/block.h's loss_scale), so a change of the scale needs no upload. With a
 *    power-of-two scale the products are exact: the weights of the old host-side scaling.
 * Exports: mg_trainer_loss_init, mg_trainer_loss_pass, mg_trainer_loss_microbatch,
 * mg_trainer_loss_weights, mg_trainer_loss_args, mg_trainer_loss_eod, mg_trainer_eod_for. Needs:
 * train/trainer_parts, data/tokenizer. */
#ifndef MG_TRAIN_TRAINER_LOSS_H
#define MG_TRAIN_TRAINER_LOSS_H

#include "train/trainer_parts.h"

/* The end-of-document id --eod-mask-loss masks for configuration c (a tokenizer with none is
 * MG_ERR_USAGE). */
mg_status mg_trainer_loss_eod(const mg_config *c, int32_t *eod);
/* The same end-of-document id for another flag that needs it (--reset-position-ids,
 * --reset-attention-mask), named in the errors. */
mg_status mg_trainer_eod_for(const mg_config *c, const char *flag, int32_t *eod);
/* After the data is open: t->eod_id (-1 without --eod-mask-loss) and the slots' weights. */
mg_status mg_trainer_loss_init(mg_trainer *t);
/* Before a pass over the global batch of samples [first, first + gbs) of src: its unmasked
 * token count t->pass_tokens and, under --calculate-per-token-loss, the MoE loss weight. */
mg_status mg_trainer_loss_pass(mg_trainer *t, const mg_sample_source *src, int64_t first);
/* After the microbatch in t->mem.host_tokens was loaded into activation slot `slot` (the loss's
 * stage): with the mask, the slot's gradient weights and reported-loss weights written to the
 * backend. */
mg_status mg_trainer_loss_microbatch(mg_trainer *t, int slot);
/* With the mask, for the microbatch in t->mem.host_tokens of the pass (t->pass_tokens known): its
 * gradient weights mask / denominator into dloss and its reported-loss weights mask / T into
 * loss_w (backend, N each). */
mg_status mg_trainer_loss_weights(mg_trainer *t, float *dloss, float *loss_w);
/* The arguments of mg_gpt_head_loss for slot `slot`: the gradient weights, the loss weights
 * (NULL: 1) and the scale that make t->mem.loss the reported loss. */
void mg_trainer_loss_args(const mg_trainer *t, int slot, const float **dloss, const float **loss_w,
                          float *scale);

#endif
