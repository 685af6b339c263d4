/* Model-internal: the expert-parallel token dispatch of an MoE layer (moe_dispatch.c, for moe.c;
 * Megatron's MoEAlltoAllTokenDispatcher) over the block context's expert-parallel group, with the
 * fixed sizes of the MoE plan (model/moe.h), in rounds under a receive budget.
 * Exports: mg_moe_exchange_counts, mg_moe_rounds, mg_moe_round, mg_moe_dispatch,
 * mg_moe_dispatch_begin, mg_moe_dispatch_end, mg_moe_combine,
 * mg_moe_echo_route, mg_moe_echo_weights, mg_moe_echo_grads. Needs: model/block, comm. */
#ifndef MG_MODEL_MOE_DISPATCH_H
#define MG_MODEL_MOE_DISPATCH_H

#include "model/block.h"

/* The slot's lcounts (E: this rank's rows per expert) are exchanged: counts receives, per
 * source rank, its rows for each of this rank's experts (ep x E_l, source-major). Under a
 * receive budget also the slot's rounds: the most any layer's block needs, the same on every
 * rank of the group (a maximum over it). */
mg_status mg_moe_exchange_counts(const mg_block_ctx *x, const mg_layer_slot *s);
/* The rounds the slot's exchange takes (1 without a receive budget): read from the slot, on the
 * host (a wait for the device). */
mg_status mg_moe_rounds(const mg_block_ctx *x, const mg_layer_slot *s, int *rounds);
/* The rows of round r that reach this rank's experts: per source rank and local expert (ep x E_l,
 * backend memory): the slot's counts without a budget, else the workspace's window of them. */
mg_status mg_moe_round(const mg_block_ctx *x, const mg_layer_slot *s, int r,
                       const int32_t **counts);
/* Round r's rows of src (this rank's permuted rows, lcounts) to their experts' ranks: dst (R
 * rows) gets each source rank's rows of the round for this rank's experts, source after source
 * (rc, mg_moe_round's). */
mg_status mg_moe_dispatch(const mg_block_ctx *x, const mg_layer_slot *s, int r, const int32_t *rc,
                          void *dst, const void *src);
/* mg_moe_dispatch in two halves, so that work touching none of the exchange's buffers (the
 * slot's routed rows, the workspace's slabs) can run on the compute stream in between: the rows
 * of round r of src packed and their all-to-all started on the communication stream; then the
 * compute stream waits for it and dst takes the rows (rc: mg_moe_round's). */
mg_status mg_moe_dispatch_begin(const mg_block_ctx *x, const mg_layer_slot *s, int r,
                                const void *src);
mg_status mg_moe_dispatch_end(const mg_block_ctx *x, const int32_t *rc, void *dst);
/* The way back: src (the experts' rows of round r, rc) to their places among dst (this rank's
 * permuted rows, lcounts); the rows of other rounds are not touched. */
mg_status mg_moe_combine(const mg_block_ctx *x, const mg_layer_slot *s, int r, const int32_t *rc,
                         void *dst, const void *src);

/* ECHO (model/moe.c): this rank's routed pairs (idx, home experts) counted per home expert (the
 * permute's counting pass, which adds the pairs to load if not NULL), the counts gathered over
 * the group, the slot's plan computed from them (the same on every rank) and the slot's idx2
 * rerouted by it; then the permute into xp over the Ed experts, lcounts and pos, as without
 * ECHO. after (ep, or NULL) accumulates the plan's tokens per rank after offloading. */
mg_status mg_moe_echo_route(const mg_block_ctx *x, const mg_layer_slot *s, const int32_t *idx,
                            void *xp, float *load, float *after);
/* The home experts' weights into this rank's spare slots by the slot's plan (table: the layer's
 * 8 pointer arrays). */
mg_status mg_moe_echo_weights(const mg_block_ctx *x, const mg_layer_slot *s, void *const *table);
/* The spare slots' gradients back to their home experts' ranks, added to the home experts'. */
mg_status mg_moe_echo_grads(const mg_block_ctx *x, const mg_layer_slot *s, void *const *table);

#endif
