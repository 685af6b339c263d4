/* Internal to model/: the activation slots' addressing that gpt.c and recompute.c share.
 * Exports: mg_gpt_slot, mg_gpt_layer_input, mg_gpt_position_kinds. Needs: model/gpt. */
#ifndef MG_MODEL_GPT_SLOTS_H
#define MG_MODEL_GPT_SLOTS_H

#include "model/gpt.h"

/* The entry of local layer position i in slot s. */
static inline const mg_layer_slot *mg_gpt_slot(const mg_gpt *g, int s, int i) {
    return &g->slot[(size_t)s * g->slot_layers + i];
}

/* The input of chunk c's local layer i in slot s; i == count: the chunk's output. */
static inline void *mg_gpt_layer_input(const mg_gpt *g, int c, int s, int i) {
    return mg_block_act(&g->blk, i < g->chunks[c].count ? mg_gpt_slot(g, s, i)->x : g->x_out[s]);
}

/* What the layers at position i of this rank's chunks need: a dense MLP's activations, an MoE
 * layer's (a slot entry serves the layer at one position of every chunk). */
static inline void mg_gpt_position_kinds(const mg_gpt *g, int i, bool *dense, bool *moe) {
    *dense = *moe = false;
    for (int v = 0; v < g->n_chunks; v++)
        if (i < g->chunks[v].count) {
            bool m = g->layers[g->chunks[v].first + i].moe != NULL;
            *moe |= m;
            *dense |= !m;
        }
}

#endif
