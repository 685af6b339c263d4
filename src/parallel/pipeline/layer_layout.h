/* Megatron's --pipeline-model-parallel-layout: the layers of every virtual pipeline stage,
 * written as a string.
 *   Stages are split by '|', in virtual-stage order: stage s is rank s % P's virtual stage s / P
 *   (so the number of stages over P gives the virtual stages per rank, V).
 *   Each character is one layer: E the embedding, t a transformer layer, L the loss (the output
 *   layer); m (a multi-token-prediction layer) is Megatron's too, and refused here.
 *   x*n repeats the character before it n times and (...)*n the group in parentheses (groups do
 *   not nest); commas are ignored.
 *   E.g. "Et*13|t*11|t*13|t*11L" on two ranks: rank 0 holds the embedding and layers 0-12, then
 *   24-36; rank 1 layers 13-23, then 37-47 and the loss.
 * Megatron's checks hold: the stages divide by P; E comes first and L last, once each; the t
 * count is --num-layers. This build adds that E is in the first stage and L in the last (its
 * model keeps them there). An empty stage is allowed.
 * Exports: MG_LAYOUT_MAX_STAGES, mg_layer_layout, mg_layer_layout_parse. Needs: core/status. */
#ifndef MG_PIPELINE_LAYER_LAYOUT_H
#define MG_PIPELINE_LAYER_LAYOUT_H

#include "core/status.h"

#define MG_LAYOUT_MAX_STAGES 512

typedef struct {
    int n_stages;                     /* P x V */
    int layers[MG_LAYOUT_MAX_STAGES]; /* transformer layers of each stage, stage order */
} mg_layer_layout;

/* Parses and checks `layout` for pp ranks and num_layers transformer layers (MG_ERR_USAGE, one
 * line naming the problem and the fix). */
mg_status mg_layer_layout_parse(const char *layout, int pp, int num_layers, mg_layer_layout *out);

#endif
