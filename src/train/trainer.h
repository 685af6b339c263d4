/* The training loop: Megatron's iteration (microbatches with gradient accumulation, global-norm
 * clipping, AdamW, the lr schedule), evaluation, logging, checkpointing, exit interval.
 * The trainer owns the memory plan: one arena per lifetime class (parameters, master weights,
 * gradients, optimizer state, activations, workspace, batch), sized before the first step and
 * committed once, in the backend's memory (device memory on CUDA). A step allocates nothing. The
 * reservations are train/memory.h's, the ones `megatron plan` predicts from; the trainer commits
 * them (train/trainer_memory.h).
 *
 * Backends (--device): cpu trains in fp32 (the parameters are the fp32 masters); cuda keeps bf16
 * parameters (the compute dtype) plus fp32 master weights, fp32 gradients and Adam moments, on
 * the GPU numbered by the launcher's local rank. auto, the default, takes cuda when the build
 * has it and a GPU is present, else cpu; cfg.device then holds the backend actually used.
 * Both start from the same fp32 initial values (CUDA's parameters are their bf16 rounding), and
 * checkpoints hold the fp32 masters, so a resumed run continues bitwise on the same backend.
 *
 * Host synchronisation (CUDA): mg_trainer_step_async waits for nothing, with a loss scaler too
 * (the skip decision, Adam's step, the lr and the loss scale are the device's step control,
 * train/trainer_scaler.h); the step's loss and gradient norm stay in backend memory
 * (t->mem.stats) until mg_trainer_read_stats reads them all, with the step control, in one copy,
 * i.e. one host sync. mg_trainer_step = step_async + read_stats: exactly one host
 * sync per step. `megatron train` (run.c) reads only at log, save and exit points.
 * Data parallelism (mg_trainer_init with a data-parallel group; parallel/ddp.h): every
 * rank holds the whole model. The parameter and gradient buffers take the grad buffer's layout
 * (parallel/grad_buffer.h: reverse registration order, 64-element starts, buckets; padded
 * buckets with the distributed optimizer). Of each global batch, dp rank r takes Megatron's
 * samples (MegatronPretrainingSampler): microbatch m is [first + (m*D + r)*mbs, +mbs), so
 * num_microbatches = global_batch / (mbs x D). The loss gradient of every token is 1/(tokens of
 * the global batch) — Megatron's 1/(tokens x microbatches) times its gradient scaling 1/D; with
 * --eod-mask-loss or --calculate-per-token-loss train/trainer_loss.h's weights — so
 * summing the buckets over the group gives the global batch's mean gradient; the reported loss
 * is summed over the group the same way. After backward: all-reduce per bucket (plain), or
 * reduce-scatter per bucket, AdamW on this rank's shard and all-gather of the updated
 * parameters (--use-distributed-optimizer). The gradient norm is global. Every rank ends a step
 * with the same parameters (with --overlap-param-gather: once the next forward, or
 * mg_trainer_sync_params, gathered them). The collectives and their overlap with backward and
 * forward are parallel/ddp.h's, driven by the model's hooks (model/gpt.h).
 * The state is carved by concern (train/trainer_parts.h); this header includes the modules that
 * export the rest of the trainer's interface: train/trainer_ckpt.h (save), train/trainer_memory.h
 * (the memory plan's report), train/trainer_weights.h (the weights as host values).
 * Exports: mg_trainer_init, the step, evaluation and statistics, mg_trainer_free, mg_train_run.
 * Needs: train/trainer_parts and the trainer modules, model, data, backend, comm, parallel. */
#ifndef MG_TRAIN_TRAINER_H
#define MG_TRAIN_TRAINER_H

#include "train/trainer_ckpt.h"
#include "train/trainer_memory.h"
#include "train/trainer_parts.h"
#include "train/trainer_weights.h"

/* Creates the backend (cfg->device), builds the model and the memory plan (logged), initialises
 * or loads the weights. The trainer must not move afterwards (the model and the data sources
 * point into it). g: the rank's groups (every member calls it with the same cfg; the groups
 * outlive the trainer), or NULL for one rank.
 * Data parallelism: the trainer is one replica of data-parallel group g->dp. The group's buffers
 * decide the backend: NCCL (device buffers) goes with cuda, MPI (host buffers) with cpu; --device
 * auto follows the group, a mismatch is MG_ERR_UNSUPPORTED.
 * Model parallelism: the trainer is tensor-parallel rank mg_comm_rank(g->tp) and pipeline rank
 * mg_comm_rank(g->pp) of one model replica (their sizes must be cfg's). The model holds this
 * rank's shards of its pipeline stage's chunks (model/gpt.h); the members of a tp group load the
 * same microbatches. A step walks the schedule of cfg (no pipelining, 1F1B or interleaved 1F1B:
 * parallel/pipeline/run.h); only the first stage reads input ids and only the last reads labels
 * and computes the loss (t->mem.loss is zero on the other stages). After the schedule, the tied
 * embedding's two copies (first and last stage) have their gradients summed over g->embedding.
 * The gradient norm counts every tensor-parallel shard once, every replicated parameter once and
 * the embedding's copy not at all, summed over the model-parallel ranks (train/optimizer.h). */
mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg, const mg_train_groups *g);
/* Forward (+ backward) over this rank's part of the global batch of samples [first, first + gbs)
 * from src: the global batch's mean loss lands in t->mem.loss (summed over the data-parallel
 * group); this rank's gradients ACCUMULATE into t->mem.grads (not reduced over the group). A
 * training pass draws the dropout masks of the current step and does not move the streams on
 * (mg_trainer_step_async does): called again, it draws the same masks. */
mg_status mg_trainer_forward_backward(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                      bool backward);
/* One iteration, nothing read back (no host sync on CUDA): the loss and grad norm land in
 * t->mem.stats and are added to the running sums; the dropout streams move on past the step's
 * uses (model/rng.h), a skipped update included. */
mg_status mg_trainer_step_async(mg_trainer *t);
/* Reads every statistic and the step-control block with one copy (one host sync), and brings
 * the host's copies of the control (t->opt.step, t->lr.num_steps, the scaler, t->scaling's
 * counts, t->state's) up to date; reset_sums then zeroes the running sums and the skipped and
 * nan counts. */
mg_status mg_trainer_read_stats(mg_trainer *t, mg_step_stats *out, bool reset_sums);
/* One iteration: returns the mean lm loss and the pre-clipping gradient norm (one host sync). */
mg_status mg_trainer_step(mg_trainer *t, double *loss, double *grad_norm);
/* Mean loss over eval_iters global batches of the validation stream (one host sync). */
mg_status mg_trainer_evaluate(mg_trainer *t, double *loss);
/* The same over the test split from its first sample (Megatron's test dataloader starts at 0),
 * when t->data.have_test. */
mg_status mg_trainer_evaluate_test(mg_trainer *t, double *loss);
/* Megatron's calc_params_l2_norm: the L2 norm of the fp32 parameters (the masters where the
 * compute dtype is not fp32), every tensor-parallel shard once, replicated parameters once and
 * the embedding's pipeline copy not at all, over the model-parallel ranks (and the shards of the
 * distributed optimizer). Collective over those groups; one host read. */
mg_status mg_trainer_params_norm(mg_trainer *t, double *norm);
/* Megatron's count_zeros_fp32 of the last step's gradients: the zero elements of the gradients
 * the gradient norm counts, over the same ranks. Collective; one host read. */
mg_status mg_trainer_num_zeros(mg_trainer *t, int64_t *zeros);
/* MoE models, the last step over the whole global batch (every replica's tokens; a host read;
 * 0 for a dense model or on a read error): the expert load, max over mean tokens per expert of
 * the busiest MoE layer of this rank's pipeline stage; and the expert-parallel load imbalance,
 * max over mean tokens the expert-parallel ranks' experts receive, averaged over those layers
 * (1 with one rank; mg_moe_load_stats). */
/* after_echo: with ECHO, the same imbalance of the tokens each rank computes after its
 * offloading (the plans' loads; -1 without ECHO). */
void mg_trainer_moe_loads(mg_trainer *t, double *expert_load, double *ep_imbalance,
                          double *after_echo);
void mg_trainer_free(mg_trainer *t);

/* The whole `megatron train` run, as tensor-parallel rank mg_comm_rank(tp) of one replica in
 * data-parallel group dp (either NULL: one rank). */
mg_status mg_train_run(const mg_config *cfg, const mg_train_groups *g);

#endif
