/* Activation recomputation of the model's slots (model/recompute.h). */
#include "model/recompute.h"

#include "model/gpt_slots.h"

#include <stdlib.h>

/* What position i of a chunk recomputes (MG_SLOT_RC_*, MG_RECOMPUTE_*). Full recomputation:
 * uniform, every layer, groups of rc_layers from each chunk's first layer (a later layer of a
 * group keeps not even its input); block, the first rc_layers layers of each chunk (Megatron
 * decides per model chunk). --distribute-saved-activations splits the kept input of a group's
 * first layer over the tensor-parallel ranks, but a chunk's input, which the pipeline receives
 * into. Selective: the modules, where "mlp" and "moe" take effect together at a position that
 * holds both kinds of layer (its entry serves both). */
static unsigned position_rc(const mg_gpt *g, int i, bool dense, bool moe) {
    const mg_model_config *c = &g->cfg;
    if (c->rc_full == MG_RC_UNIFORM || (c->rc_full == MG_RC_BLOCK && i < c->rc_layers)) {
        bool inner = c->rc_full == MG_RC_UNIFORM && i % c->rc_layers != 0;
        return MG_SLOT_RC_FULL | (inner ? MG_SLOT_RC_INNER : 0u) |
               (c->rc_distribute && !inner && i > 0 ? MG_SLOT_RC_DIST : 0u);
    }
    unsigned m = c->rc_modules;
    const unsigned both = MG_RECOMPUTE_MLP | MG_RECOMPUTE_MOE;
    if (dense && moe && (m & both) != both) m &= ~both;
    if (!dense) m &= ~(MG_RECOMPUTE_MLP | MG_RECOMPUTE_MLP_ACT);
    if (!moe) m &= ~(MG_RECOMPUTE_MOE | MG_RECOMPUTE_MOE_ACT | MG_RECOMPUTE_SHARED_EXPERTS);
    return m;
}

/* Whether the layers at position i (of every chunk that has one) are dense fp8 layers that keep
 * their inputs' transposes. */
static bool fp8_dense(const mg_gpt *g, int i, bool dense, bool moe) {
    if (!g->fp8_keep || !dense || moe) return false;
    for (int v = 0; v < g->n_chunks; v++)
        if (i < g->chunks[v].count && g->layers[g->chunks[v].first + i].fp8 < 0) return false;
    return true;
}

/* Each position's recomputation and the buffers the slots share for it: one layer's (the fields
 * recomputation frees), or for uniform groups one per layer of a group. Dense fp8 layers that
 * keep their inputs' transposes share the same buffers for their forward-only activations
 * (MG_SLOT_RC_FP8). */
mg_status mg_recompute_plan(mg_gpt *g) {
    const mg_model_config *c = &g->cfg;
    int n = g->slot_layers ? g->slot_layers : 1;
    g->rc_pos = calloc((size_t)n, sizeof *g->rc_pos);
    g->rc_groups = c->rc_full != MG_RC_UNIFORM ? 1 : c->rc_layers < n ? c->rc_layers : n;
    g->rc_scratch = calloc((size_t)g->rc_groups, sizeof *g->rc_scratch);
    if (!g->rc_pos || !g->rc_scratch)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the recomputation plan");
    for (int i = 0; i < g->slot_layers; i++) {
        bool dense, moe;
        mg_gpt_position_kinds(g, i, &dense, &moe);
        g->rc_pos[i] = position_rc(g, i, dense, moe);
        g->rc_any |= g->rc_pos[i] != 0;
        if (fp8_dense(g, i, dense, moe)) g->rc_pos[i] |= MG_SLOT_RC_FP8;
    }
    if (c->rc_distribute && ((size_t)g->blk.Nl * c->H) % (size_t)c->tp != 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--distribute-saved-activations: a layer input of %d x %d elements does not "
                       "split over %d tensor-parallel ranks",
                       g->blk.Nl, c->H, c->tp);
    size_t before = g->blk.acts->size;
    for (int j = 0; j < g->rc_groups; j++) { /* for the positions that use buffer j */
        unsigned u = 0;
        bool any_dense = false, any_moe = false;
        for (int i = j; i < g->slot_layers; i += g->rc_groups) {
            bool dense, moe;
            mg_gpt_position_kinds(g, i, &dense, &moe);
            any_dense |= dense;
            any_moe |= moe;
            u |= g->rc_pos[i];
        }
        if (u) MG_CHECK(mg_block_plan_scratch(&g->blk, &g->rc_scratch[j], any_dense, any_moe, u));
    }
    g->rc_bytes = g->blk.acts->size - before;
    return MG_OK;
}

/* --distribute-saved-activations: before local layer i's forward in slot s, this rank's share
 * of its input (the whole input lives in the shared recomputation buffers). */
mg_status mg_recompute_keep_share(mg_gpt *g, int c, int s, int i) {
    if (!(mg_gpt_slot(g, s, i)->rc & MG_SLOT_RC_DIST)) return MG_OK;
    size_t part = mg_gpt_hidden_numel(g) / (size_t)g->cfg.tp * g->blk.esz;
    const char *x = mg_gpt_layer_input(g, c, s, i);
    return g->blk.be->copy_d2d(g->blk.be,
                               mg_block_act(&g->blk, g->x_part[(size_t)s * g->slot_layers + i]),
                               x + (size_t)g->tp.rank * part, part);
}

/* Full recomputation, before local layer i's backward in slot s: when i is the last layer of a
 * recomputed group, the group's forward again from its kept input (gathered over the
 * tensor-parallel ranks where it was distributed), with the forward's dropout masks and MoE
 * routing; the group's last output is not needed (an MLP stops at its activation). */
mg_status mg_recompute_group(mg_gpt *g, int c, int s, int i) {
    const mg_gpt_chunk *ch = &g->chunks[c];
    const mg_layer_slot *e = mg_gpt_slot(g, s, i);
    if (!(e->rc & MG_SLOT_RC_FULL)) return MG_OK;
    if (i + 1 < ch->count && (mg_gpt_slot(g, s, i + 1)->rc & MG_SLOT_RC_INNER)) return MG_OK;
    int first = i;
    while (first > 0 && (mg_gpt_slot(g, s, first)->rc & MG_SLOT_RC_INNER)) first--;
    if (mg_gpt_slot(g, s, first)->rc & MG_SLOT_RC_DIST)
        MG_CHECK(
            mg_tp_all_gather(&g->tp, mg_gpt_layer_input(g, c, s, first),
                             mg_block_act(&g->blk, g->x_part[(size_t)s * g->slot_layers + first]),
                             mg_gpt_hidden_numel(g) / (size_t)g->cfg.tp, g->blk.be->compute_dtype));
    g->blk.recompute = true;
    mg_status st = MG_OK;
    for (int j = first; j <= i && st == MG_OK; j++) {
        int l = ch->first + j;
        const mg_layer_params *p = &g->layers[l];
        const mg_layer_slot *sj = mg_gpt_slot(g, s, j);
        void *out = j < i ? mg_gpt_layer_input(g, c, s, j + 1) : NULL;
        st = mg_attention_forward(&g->blk, p, sj);
        if (st != MG_OK) break;
        if (p->moe)
            st = mg_moe_forward(&g->blk, p, sj, out ? out : mg_block_ws_ptr(&g->blk, g->ws.rc_out));
        else
            st = mg_mlp_forward(&g->blk, p, sj, out);
    }
    g->blk.recompute = false;
    return st;
}
