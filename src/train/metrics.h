/* What a training run reports: Megatron's training log line, one JSON object per logged
 * iteration in the metrics file, and Megatron's FLOPs count behind "throughput per GPU".
 * Exports: mg_log_record, mg_metrics_timestamp, mg_metrics_format_line(_at),
 * mg_metrics_format_json, mg_metrics_file, mg_metrics_open, mg_metrics_write, mg_metrics_close,
 * mg_flops_per_iteration, mg_output_layer_cost. Needs: core/status. */
#ifndef MG_METRICS_H
#define MG_METRICS_H

#include "megatron.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One logged iteration. Fields that Megatron leaves out of its line when they are None use a
 * negative value for "absent": tflops_per_gpu (Megatron prints throughput only with
 * --log-throughput), lr (None off the first/last pipeline stage) and grad_norm (None when the
 * optimizer reports none). lm_loss is printed only when >= 0, as Megatron prints a loss only when
 * its average is >= 0.0 (so a NaN loss drops out of the line and is counted in nan_iters). */
typedef struct {
    int64_t iteration, train_iters, consumed_samples;
    double elapsed_ms_per_iter, tflops_per_gpu, tokens_per_s, lr;
    int global_batch_size;
    double lm_loss, loss_scale, grad_norm;
    int skipped_iters, nan_iters;
    /* MoE models only (moe): Megatron's track_moe_metrics values, the mean over the MoE layers
     * and the microbatches of the aux loss (aux_name "load_balancing_loss" or
     * "seq_load_balancing_loss"; NULL: none) and of the z-loss (negative: none), without their
     * coefficients; and ours: the expert load, max over mean tokens per expert of the busiest
     * MoE layer in the last step; and ECHO's moe_ep_load_imbalance, max over mean tokens per
     * expert-parallel rank averaged over the MoE layers (negative: none, one rank) */
    bool moe;
    const char *aux_name;
    double aux_loss, z_loss, expert_load, ep_imbalance;
    bool echo;                 /* ECHO runs: ep_imbalance_after is printed */
    double ep_imbalance_after; /* moe_ep_load_imbalance after ECHO's offloading */
    bool budget;               /* a receive budget is set: overflow_steps is printed */
    int overflow_steps;        /* the steps of the interval whose dispatch went over the receive
                                  budget (extra rounds) */
    /* --log-num-zeros-in-grad, --log-params-norm: printed only where the flag (log_*) is set */
    bool log_num_zeros, log_params_norm;
    double num_zeros, params_norm;
} mg_log_record;

/* Local time as Megatron stamps its line: datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f'),
 * e.g. "2026-11-21 09:05:03.041250". cap >= 27. */
void mg_metrics_timestamp(char *buf, size_t cap);

/* Megatron's training_log line (megatron/training/training.py) with the given timestamp:
 *  " [ts] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms):
 *  {:.1f} | throughput per GPU (TFLOP/s/GPU): {:.1f} | learning rate: {:.6E} | global batch size:
 *  {:5d} | lm loss: {:.6E} | loss scale: {:.1f} | grad norm: {:.3f} | [num zeros: {} |]
 *  [params norm: {:.3f} |] number of skipped iterations: {:3d} | number of nan iterations:
 *  {:3d} |" (num zeros: megatron-core 0.16.1's fp32 count, printed as Python prints a float:
 *  1234.0)
 * then, for MoE models, Megatron's " {name}: {:.2f} |" per tracked loss, ours
 * " expert load (max/mean): {:.2f} |" and with expert parallelism ECHO's
 * " moe_ep_load_imbalance: {:.2f} |" and under a receive budget " moe_overflow_steps: {:d} |".
 * Non-finite values print as Python prints them (nan, inf, NAN, INF). tokens_per_s is not part of
 * Megatron's line; it goes to the metrics file. Returns what snprintf returns: the length the
 * line needs (truncated to cap - 1 when longer), or a negative value on an encoding error. */
int mg_metrics_format_line_at(char *buf, size_t cap, const char *timestamp, const mg_log_record *r);
/* The same with the current local time. */
int mg_metrics_format_line(char *buf, size_t cap, const mg_log_record *r);

/* One JSON object, no newline: {"iteration": 10, "lm_loss": .., "lr": .., "grad_norm": ..,
 * "tokens_per_s": .., "ms_per_iter": .., "consumed_samples": .., "tflops": .., then the MoE
 * values, "num_zeros" and "params_norm" where the record has them}. Doubles are
 * written with %.17g so strtod reads back the same bits; NaN and Inf become null. Returns like
 * snprintf. */
int mg_metrics_format_json(char *buf, size_t cap, const mg_log_record *r);

/* The --metrics-file: JSON lines, each flushed as written so a crash loses nothing logged. */
typedef struct {
    FILE *f; /* NULL: disabled */
    char path[1024];
} mg_metrics_file;

/* path "" disables the file (writes become no-ops) and returns MG_OK. append = false truncates
 * (a fresh run); the trainer appends when it resumes from a checkpoint. */
mg_status mg_metrics_open(mg_metrics_file *m, const char *path, bool append);
mg_status mg_metrics_write(mg_metrics_file *m, const mg_log_record *r);
void mg_metrics_close(mg_metrics_file *m);

/* Megatron's num_floating_point_operations for a GPT (no MLA, MTP, linear attention or output
 * gate), BSHD layout; with experts the MLP term is Megatron's F x dense layers + (moe F x topk +
 * shared F) x MoE layers: FLOPs of one iteration over batch_size samples of seq_length
 * tokens, forward and backward:
 *   T = B*S tokens, Q = kv_channels*NH, K = kv_channels*G, Vp = padded vocab
 *   flops = T * ( 6*H*F*(3 if swiglu else 2)*L            MLP
 *               + 6*(H*(Q + 2K) + Q*H)*L                  QKV and output projections
 *               + 6*H*Vp )                                logits
 *         + B*S^2 * 6*Q*L                                 QK^T and PV, halved by the causal mask
 * 6 = 3 (forward, dgrad, wgrad) * 2 (multiply-add). Vp rounds vocab_size up to a multiple of
 * make_vocab_size_divisible_by (times the tensor-parallel size in Megatron; TP = 1 here).
 * Unresolved fields (-1) are resolved as Megatron does; without --group-query-attention the
 * query groups equal the heads, whatever --num-query-groups says. */
double mg_flops_per_iteration(const mg_config *c, int64_t batch_size);
/* The output layer and loss in layers: the logits' GEMM FLOPs over one layer's average (both
 * mg_flops_per_iteration's counting); 0 where that cannot be told (no layers or vocabulary). */
double mg_output_layer_cost(const mg_config *c);

#endif
