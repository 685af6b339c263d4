/* Megatron's TensorBoard scalars (megatron/training/training.py training_log and
 * evaluate_and_print_results, initialize.py write_args_to_tensorboard, MoE's moe_logging.py),
 * written through train/tensorboard.h by the last rank only (Megatron's SummaryWriter exists on
 * rank world_size - 1 alone). Names and steps are Megatron's:
 *   every --tensorboard-log-interval iterations, this iteration's values:
 *     learning-rate, batch-size, lm loss, loss-scale (unless --no-log-loss-scale-to-tensorboard),
 *     world-size (--log-world-size-to-tensorboard), grad-norm, each also as "<name> vs samples"
 *     with the consumed samples as its step; mem-reserved-bytes, mem-allocated-bytes,
 *     mem-max-allocated-bytes, mem-allocated-count (--log-memory-to-tensorboard);
 *     MoE models: load_balancing_loss or seq_load_balancing_loss, and z_loss
 *   at each log line, with --log-timers-to-tensorboard: iteration-time (seconds) and throughput
 *     (TFLOP/s/GPU) — the timers Megatron writes at its default --timing-log-level 0
 *   after each validation: lm loss validation (and "vs samples"), with
 *     --log-validation-ppl-to-tensorboard lm loss validation ppl (and "vs samples")
 *   at start: every config field as text, "<key>/text_summary" (write_args_to_tensorboard)
 * Exports: mg_tb_log, mg_tb_log_open, mg_tb_log_due, mg_tb_log_train, mg_tb_log_timing,
 * mg_tb_log_validation, mg_tb_log_close. Needs: train/tensorboard, train/trainer. */
#ifndef MG_TRAIN_TENSORBOARD_LOG_H
#define MG_TRAIN_TENSORBOARD_LOG_H

#include "train/tensorboard.h"
#include "train/trainer.h"

typedef struct {
    mg_tb_writer w; /* disabled off the last rank and without --tensorboard-dir */
    int interval;   /* --tensorboard-log-interval */
    bool loss_scale, world_size, memory, timers, ppl;
    int world;
    double mem_bytes; /* the arenas: allocated once, so current = peak = reserved */
    int mem_count;    /* committed arenas */
} mg_tb_log;

/* Opens the event file on the last rank when --tensorboard-dir is set (else every call below is
 * a no-op) and writes the config as text at the trainer's iteration. */
mg_status mg_tb_log_open(mg_tb_log *l, const mg_trainer *t);
/* Whether iteration's scalars are written (this rank writes and the interval divides it). */
bool mg_tb_log_due(const mg_tb_log *l, int64_t iteration);
/* The per-iteration scalars of r: iteration, consumed_samples, lr (< 0: none),
 * global_batch_size, lm_loss, loss_scale, grad_norm (< 0: none) and the MoE fields. */
mg_status mg_tb_log_train(mg_tb_log *l, const mg_log_record *r);
/* At a log line: the timers (with --log-timers-to-tensorboard), then a flush. */
mg_status mg_tb_log_timing(mg_tb_log *l, const mg_log_record *r);
/* After a validation at `iteration`, then a flush. */
mg_status mg_tb_log_validation(mg_tb_log *l, int64_t iteration, int64_t consumed_samples,
                               double loss);
mg_status mg_tb_log_close(mg_tb_log *l);

#endif
