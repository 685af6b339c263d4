/* Per-layer graphs (--cuda-graph-impl local or transformer_engine with --cuda-graph-modules, as
 * Megatron's): for each layer this rank holds, the parts the scopes name (attn: the attention
 * sublayer, its norm, QKV, attention, projection, dropout and residual; mlp: a dense layer's MLP
 * sublayer likewise; moe: an MoE layer's whole MoE sublayer, router, dispatch, experts and
 * combine; none named: those three; or, instead of moe, moe_router: the MoE sublayer's norm,
 * router and top-k routing, and moe_preprocess: its token permutation and, with expert
 * parallelism, the exchange of the per-expert counts), forward and backward, for each microbatch
 * of a training step.
 * A part runs eagerly its first `warmup` times, is then captured once (parallel/graph_capture.h:
 * its tensor-parallel and expert-parallel collectives included) and replayed after; the rest of
 * the layer (the hooks that gather parameters and hand gradients to the data-parallel reduction)
 * runs eagerly between the graphs. A graph belongs to one (layer, part, direction, microbatch):
 * the microbatch's number selects its dropout masks' stream uses (model/rng.h) and whether the
 * experts' gradients are written or accumulated, which the graph holds by value. Evaluation and
 * generation run eagerly.
 * Exports: mg_layer_part, mg_layer_graphs_create, mg_layer_graphs_covers, mg_layer_graphs_run,
 * mg_layer_graphs_captured, mg_layer_graphs_free. Needs: backend, parallel/graph_capture. */
#ifndef MG_MODEL_LAYER_GRAPHS_H
#define MG_MODEL_LAYER_GRAPHS_H

#include "backend/backend.h"

#include <stdbool.h>

typedef enum {
    MG_LAYER_PART_ATTN = 0,
    MG_LAYER_PART_MLP,
    MG_LAYER_PART_MOE,
    MG_LAYER_PART_MOE_ROUTER,
    MG_LAYER_PART_MOE_PREPROCESS,
    MG_LAYER_PARTS
} mg_layer_part;

typedef struct mg_layer_graphs mg_layer_graphs;

/* Graphs for the model's n_layers layers (global numbers) and up to max_microbatches
 * microbatches per step; parts: bit p set for each part p that is graphed; warmup >= 1 eager
 * runs first. */
mg_status mg_layer_graphs_create(mg_layer_graphs **out, int n_layers, int max_microbatches,
                                 unsigned parts, int warmup);
bool mg_layer_graphs_covers(const mg_layer_graphs *lg, mg_layer_part part);
/* Runs fn(ctx), part `part` of global layer `layer` in direction `backward` for microbatch mb:
 * eagerly, captured then launched, or launched. */
mg_status mg_layer_graphs_run(mg_layer_graphs *lg, mg_backend *be, int layer, mg_layer_part part,
                              bool backward, int mb, mg_status (*fn)(void *ctx), void *ctx);
/* The graphs captured so far, and their nodes and bytes in all. */
int mg_layer_graphs_captured(const mg_layer_graphs *lg, size_t *nodes, size_t *bytes);
void mg_layer_graphs_free(mg_layer_graphs *lg, mg_backend *be);

#endif
