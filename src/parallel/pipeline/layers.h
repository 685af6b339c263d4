/* Which transformer layers each pipeline rank and model chunk builds: Megatron's
 * get_transformer_layer_offset and get_num_layers_to_build, with the checks of its
 * TransformerConfig and arguments.py, as pure functions.
 *
 * A "chunk" is (rank r, virtual stage v); chunks run in virtual-stage order v*P + r, and chunk
 * (r, v) builds global layers [offset, offset + count). Over that order the ranges tile
 * [0, num_layers) without gaps or overlaps.
 *
 * Rules (L layers, P ranks, V chunks per rank, f / l layers on the first / last stage):
 *   even split:   each rank gets L/P layers, each chunk L/(P*V); chunk (r, v) starts at
 *                 v*L/V + r*L/(P*V).
 *   --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
 *                 embedding (loss) counts as one layer of the first (last) chunk, so the split is
 *                 of L+1 (or L+2) "layers" and that chunk builds one transformer layer fewer.
 *   --decoder-first-pipeline-num-layers f / --decoder-last-pipeline-num-layers l: rank 0
 *                 (P-1) builds f (l) layers, f/V (l/V) per chunk; the middle ranks share the
 *                 rest evenly. Not combinable with the account flags.
 *   --num-layers-per-virtual-pipeline-stage n: V = (L [+1] [+1]) / P / n; V = 1 means none.
 *   --pipeline-model-parallel-layout: every chunk's layers as written (layer_layout.h); it
 *                 excludes every other flag here, as Megatron's arguments do.
 * Rejections (MG_ERR_USAGE, one line with the valid choices), as Megatron's: uneven splits that
 * do not divide (layers by ranks, rank layers by V, f and l by V, the middle layers by the
 * middle ranks), f or l of 0, f/l with the account flags, n with f/l or with vpp, V > 1 with
 * P = 1. Where Megatron computes nonsense megatron.c rejects instead: f + l > L (Megatron gives
 * middle ranks negative layer counts), f/l with P = 1. Where Megatron crashes (P = 2, V > 1,
 * both f and l: a division by zero middle ranks in its offset) megatron.c gives the placement.
 *
 * Exports: mg_layers_params, mg_layers_chunk, mg_layers_params_of, mg_layers_check,
 * mg_layers_place, mg_layers_plan.
 * Needs: core/status. */
#ifndef MG_PIPELINE_LAYERS_H
#define MG_PIPELINE_LAYERS_H

#include "megatron.h"

#include <stdbool.h>

typedef struct {
    int num_layers;               /* L: --num-layers */
    int pp;                       /* P: --pipeline-model-parallel-size */
    int vpp;                      /* V: --num-virtual-stages-per-pipeline-rank; 0 or 1 = none */
    int layers_per_virtual_stage; /* --num-layers-per-virtual-pipeline-stage; 0 = unset */
    int first_stage_layers;       /* --decoder-first-pipeline-num-layers; -1 = unset */
    int last_stage_layers;        /* --decoder-last-pipeline-num-layers; -1 = unset */
    bool account_for_embedding;   /* --account-for-embedding-in-pipeline-split */
    bool account_for_loss;        /* --account-for-loss-in-pipeline-split */
    const char *layout;           /* --pipeline-model-parallel-layout; NULL or "": none (then
                                     parallel/pipeline/layer_layout.h gives every chunk's layers,
                                     and V is its stages / P) */
} mg_layers_params;

typedef struct {
    int offset; /* first global layer index (0-based) of the chunk */
    int count;  /* transformer layers it builds; 0 is possible (e.g. embedding-only stage) */
} mg_layers_chunk;

/* The placement flags of a run configuration (the model's and `megatron plan`'s one reading). */
mg_layers_params mg_layers_params_of(const mg_config *c);

/* Validates p; *vpp (may be NULL) receives V >= 1, resolved from vpp or
 * layers_per_virtual_stage. */
mg_status mg_layers_check(const mg_layers_params *p, int *vpp);

/* The layers of chunk (rank, chunk), 0 <= rank < P, 0 <= chunk < V. */
mg_status mg_layers_place(const mg_layers_params *p, int rank, int chunk, mg_layers_chunk *out);

/* Every chunk at once, out: (P, V) rank-major, V from mg_layers_check. */
mg_status mg_layers_plan(const mg_layers_params *p, mg_layers_chunk *out);

#endif
