/* Model-internal: the Mixture-of-Experts layer (moe.c) and its expert-parallel token dispatch
 * (moe_dispatch.c), what gpt.c needs to plan, bind and run them.
 *
 * Static sizes (DESIGN.md principle 2, seeds 000/001): every buffer has its worst case, from the
 * plan. With T tokens per microbatch, k experts per token, E experts, E_l = E / ep per rank:
 *   capacity  Megatron's get_capacity: ceil(T x k / E x factor) tokens per expert (0: dropless)
 *   Rp        rows of this rank's permuted pairs: E x capacity when padded, else T x k
 *   R         rows the experts may receive: Rp with one rank; with ep ranks each source sends
 *             at most T x min(k, E_l) rows (dropless) or E_l x capacity, so ep times that
 * The rows actually used are counted on the device (backend.h: counts) and read there.
 * Exports: mg_moe_plan, mg_moe_free, mg_moe_bind_pointers, mg_moe_exchange_counts, mg_moe_dispatch,
 * mg_moe_combine. Needs: model/block. */
#ifndef MG_MODEL_MOE_H
#define MG_MODEL_MOE_H

#include "model/block.h"

/* Fills w's shapes (capacity, Rp, R) for N tokens per microbatch of esz-byte activations and
 * reserves its workspace and the per-layer state (expert bias, load, pointer arrays) of
 * n_layers MoE layers in work. */
mg_status mg_moe_plan(mg_moe_ws *w, const mg_model_config *c, int N, size_t esz, int n_layers,
                      mg_arena *work);
void mg_moe_free(mg_moe_ws *w);
/* Writes the experts' weight, bias and gradient pointers of one MoE layer (after bind). */
mg_status mg_moe_bind_pointers(const mg_block_ctx *x, const mg_moe_params *mp);

/* ---- expert parallelism (moe_dispatch.c), over the context's expert-parallel group ---- */
/* The slot's lcounts (E: this rank's rows per expert) are exchanged: counts receives, per
 * source rank, its rows for each of this rank's experts (ep x E_l, source-major). */
mg_status mg_moe_exchange_counts(const mg_block_ctx *x, const mg_layer_slot *s);
/* Rows of src (this rank's permuted rows, lcounts) to their experts' ranks: dst (R rows) gets
 * each source rank's rows for this rank's experts, source after source (counts). */
mg_status mg_moe_dispatch(const mg_block_ctx *x, const mg_layer_slot *s, void *dst,
                          const void *src);
/* The way back: src (the experts' rows, counts) to dst (this rank's permuted rows, lcounts). */
mg_status mg_moe_combine(const mg_block_ctx *x, const mg_layer_slot *s, void *dst, const void *src);

#endif
