/* Model-internal: the expert-parallel token dispatch of an MoE layer (moe_dispatch.c, for moe.c;
 * Megatron's MoEAlltoAllTokenDispatcher) over the block context's expert-parallel group, with the
 * fixed sizes of the MoE plan (model/moe.h).
 * Exports: mg_moe_exchange_counts, mg_moe_dispatch, mg_moe_combine. Needs: model/block, comm. */
#ifndef MG_MODEL_MOE_DISPATCH_H
#define MG_MODEL_MOE_DISPATCH_H

#include "model/block.h"

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
