/* What one rank holds of a checkpoint's tensors, the parameters, moments and expert biases a save
 * writes and a load fills (train/checkpoint.h for the current format, train/checkpoint_v1.h for
 * the older one). Exports: mg_checkpoint_tensors. Needs: train/optimizer (its pieces). */
#ifndef MG_TRAIN_CHECKPOINT_TENSORS_H
#define MG_TRAIN_CHECKPOINT_TENSORS_H

#include "train/optimizer.h"

#include <stdbool.h>

/* Host fp32 copies: the weights (g->params.numel, the parameter buffer's layout) and the Adam
 * moments of this rank's pieces (train/optimizer.h: param range [a, b) of parameter `index` at
 * `local` in exp_avg and exp_avg_sq). Unsharded, the pieces are every parameter whole. */
typedef struct {
    float *params;                /* (g->params.numel) */
    float *exp_avg, *exp_avg_sq;  /* local coordinates */
    const mg_optim_piece *pieces; /* (n_pieces) */
    int n_pieces;
    bool optimizer; /* saving: the moments are saved; loading: in, load them; out, were loaded */
    int stage, n_stages; /* this rank's pipeline stage of n_stages (0, 1: no pipeline) */
    int tp_rank, tp_size, dp_rank, dp_size; /* 0, 1: none */
    /* [0] the dense parameters, [1] the experts': owns, this rank writes their weights (one
     * rank of those holding the same copy); sharded, their moments are this rank's alone (the
     * distributed optimizer over > 1 ranks), so it writes them whether it owns them or not */
    bool owns[2], sharded[2];
    /* aux-loss-free routing: this stage's MoE layers' expert bias (host fp32, n_bias x E, layer
     * after layer in the model's order); NULL: none */
    float *expert_bias;
    int n_bias, n_experts;
    /* fp8 linears (model/fp8.h): this stage's fp8 layers' scaling state (host fp32, n_fp8 x
     * fp8_width: each layer's 12 tensors' scales, then their amax histories), saved as
     * decoder.layers.L.fp8_scaling (L: fp8_layers[i]); NULL: none. A checkpoint without it
     * (saved without fp8) leaves the scales at 1. */
    float *fp8;
    int n_fp8, fp8_width;
    const int *fp8_layers;
} mg_checkpoint_tensors;

#endif
