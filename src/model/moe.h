/* Model-internal: the Mixture-of-Experts layer (moe.c), what gpt.c needs to plan, bind and run
 * it; its expert-parallel token dispatch is model/moe_dispatch.h.
 *
 * Static sizes (all memory is planned before the first step and no per-step size reaches the host,
 * so a step can be captured in a CUDA graph): every buffer has its worst case, from the
 * plan. With T tokens per microbatch, k experts per token, E experts, E_l = E / ep per rank:
 *   capacity  Megatron's get_capacity: ceil(T x k / E x factor) tokens per expert (0: dropless)
 *   Rp        rows of this rank's permuted pairs: E x capacity when padded, else T x k
 *   R         rows the experts may receive: Rp with one rank; with ep ranks each source sends
 *             at most T x min(k, E_l) rows (dropless) or E_l x capacity, so ep times that;
 *             under a receive budget F (--moe-expert-rank-capacity-factor) F x T x k rows in
 *             whole slabs of one per peer; a step over it takes extra dispatch rounds through
 *             the same slabs (model/moe_dispatch.h), the one per-step count the host reads
 * The rows actually used are counted on the device (backend.h: counts) and read there.
 * Exports: mg_moe_plan, mg_moe_free, mg_moe_bind_pointers. Needs: model/block (moe.c: model/
 * moe_dispatch). */
#ifndef MG_MODEL_MOE_H
#define MG_MODEL_MOE_H

#include "model/block.h"

/* Fills w's shapes (capacity, Rp, R) for N tokens per microbatch of esz-byte activations and
 * reserves its workspace and the per-layer state (expert bias, load, pointer arrays) of
 * n_layers MoE layers in work. */
mg_status mg_moe_plan(mg_moe_ws *w, const mg_model_config *c, int N, size_t esz, int n_layers,
                      mg_arena *work);
void mg_moe_free(mg_moe_ws *w);
/* Elements per received row (R) of one MoE layer's buffers: the saved activations of one
 * microbatch (xe, e_fc1, e_act: H + fc1 + F) and the layer-shared workspace (dxe, de_fc1, de_act
 * with SwiGLU; with expert parallelism ye and the two dispatch slabs); what the plans reserve. */
static inline size_t mg_moe_row_act_elems(const mg_model_config *c) {
    return (size_t)c->H + (size_t)c->moe.fc1 + (size_t)c->moe.F;
}
static inline size_t mg_moe_row_work_elems(const mg_model_config *c) {
    return (size_t)c->H + (size_t)c->moe.fc1 + (c->swiglu ? (size_t)c->moe.F : 0) +
           (c->moe.ep > 1 ? 3 * (size_t)c->H : 0);
}
/* Writes the experts' weight, bias and gradient pointers of one MoE layer (after bind). */
mg_status mg_moe_bind_pointers(const mg_block_ctx *x, const mg_moe_params *mp);

#endif
