/* The MoE layer's MLP (Megatron's MoELayer: TopKRouter, token dispatcher, grouped experts,
 * shared experts): norm -> router logits (fp32) -> top-k routing -> permute the token copies by
 * expert -> [expert parallelism: all-to-all to the experts' ranks, model/moe_dispatch.c] ->
 * grouped fc1 -> activation -> grouped fc2 -> [all-to-all back] -> combine weighted by the
 * routing weights, + the shared experts, --hidden-dropout (training passes), + the residual.
 * Every size that depends on the routing (rows per expert, per source rank) stays in backend
 * memory; the buffers have the plan's worst-case sizes (model/moe.h), or under a receive budget
 * its sizes, the dispatch then going in as many rounds as the step needs. */
#include "model/moe.h"
#include "model/fp8.h"
#include "model/layer_graphs.h"

#include "model/moe_dispatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the experts' pointer arrays (backend memory, filled at bind) ---- */

enum { W1, B1, W2, B2, DW1, DB1, DW2, DB2, N_PTRS };

static void *const *ptrs(const mg_block_ctx *x, const mg_moe_params *mp, int which) {
    const mg_moe_ws *w = x->moe;
    char *base = mg_block_ws_ptr(x, w->ptrs[mp->index]);
    return (void *const *)(base + (size_t)which * w->El * sizeof(void *));
}

mg_status mg_moe_bind_pointers(const mg_block_ctx *x, const mg_moe_params *mp) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    int El = w->El;
    void **h = calloc((size_t)N_PTRS * El, sizeof *h);
    if (!h) return MG_FAIL(MG_ERR_NOMEM, "out of memory (expert pointers)");
    for (int j = 0; j < m->E_l; j++) {
        h[W1 * El + j] = mg_block_param(x, mp->fc1_w[j]);
        h[W2 * El + j] = mg_block_param(x, mp->fc2_w[j]);
        h[DW1 * El + j] = mg_block_grad(x, mp->fc1_w[j]);
        h[DW2 * El + j] = mg_block_grad(x, mp->fc2_w[j]);
        h[B1 * El + j] = mp->fc1_b ? mg_block_param(x, mp->fc1_b[j]) : NULL;
        h[B2 * El + j] = mp->fc2_b ? mg_block_param(x, mp->fc2_b[j]) : NULL;
        h[DB1 * El + j] = mp->fc1_b ? mg_block_grad(x, mp->fc1_b[j]) : NULL;
        h[DB2 * El + j] = mp->fc2_b ? mg_block_grad(x, mp->fc2_b[j]) : NULL;
    }
    /* ECHO's spare slots: one expert's weights (fc1 w, fc1 b, fc2 w, fc2 b) per row of the
     * workspace's spare_w, their gradients in spare_g (shared by the layers) */
    const size_t *seg = w->echo_seg;
    for (int j = m->E_l; j < El; j++) {
        char *wr =
            (char *)mg_block_ws_ptr(x, w->spare_w) + (size_t)(j - m->E_l) * w->echo_width * x->esz;
        char *gr = (char *)mg_block_ws_ptr(x, w->spare_g) +
                   (size_t)(j - m->E_l) * w->echo_width * sizeof(float);
        for (int q = 0; q < 4; q++) {
            h[(size_t)q * El + j] = seg[q] ? wr : NULL;
            h[(size_t)(4 + q) * El + j] = seg[q] ? gr : NULL;
            wr += seg[q] * x->esz;
            gr += seg[q] * sizeof(float);
        }
    }
    mg_status st = x->be->copy_h2d(x->be, mg_block_ws_ptr(x, w->ptrs[mp->index]), h,
                                   (size_t)N_PTRS * El * sizeof *h);
    free(h);
    return st;
}

/* The routing settings of this layer's tokens and this pass. */
static mg_moe_routing routing(const mg_block_ctx *x) {
    const mg_moe_ws *w = x->moe;
    mg_moe_routing r = x->c->moe.route;
    r.T = x->N;
    r.S = x->c->S;
    r.capacity = w->capacity;
    if (!w->train) { /* Megatron: the aux losses only where gradients are computed */
        r.aux_coeff = 0;
        r.z_coeff = 0;
    }
    r.loss_weight = w->loss_weight;
    r.loss_scale = w->loss_scale;
    r.stat_weight = w->stat_weight;
    return r;
}

static const float *expert_bias(const mg_block_ctx *x, const mg_moe_params *mp) {
    return x->c->moe.expert_bias ? mg_block_ws_ptr(x, x->moe->bias[mp->index]) : NULL;
}

/* The shared experts' first half: ln2 -> their fc1 and activation in the slot. */
static mg_status shared_in(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                           const void *ln2) {
    const mg_model_config *c = x->c;
    const mg_moe_params *mp = p->moe;
    mg_backend *be = x->be;
    int N = x->N, Fs = c->moe.shared_F, rows = c->swiglu ? 2 * Fs : Fs;
    void *fc1 = mg_block_act(x, s->sh_fc1), *act = mg_block_act(x, s->sh_act);
    const void *w1 = mg_block_param(x, mp->sh_fc1_w);
    /* an fp8 layer's shared experts take its MLP's fp8 linears (model/fp8.h) */
    MG_CHECK(mg_fp8_linear_forward(x, p, MG_FP8_FC1, c->swiglu ? fc1 : act, c->swiglu ? NULL : fc1,
                                   ln2, w1, mg_block_param(x, mp->sh_fc1_b), NULL, c->H, rows));
    return c->swiglu ? be->swiglu_forward(be, act, fc1, N, Fs) : MG_OK;
}

/* --moe-shared-expert-overlap under EP: the shared experts run on the compute stream while the
 * first token exchange's all-to-all runs (forward: the last round, which goes first; backward:
 * round 0). */
static bool shared_early(const mg_moe_config *m) {
    return m->shared_overlap && m->shared_F > 0 && m->ep > 1;
}

/* The shared experts: a dense MLP of the normed input (no tensor parallelism inside an MoE
 * model yet), out = mid + its output (mid NULL: its output alone). */
static mg_status shared_forward(const mg_block_ctx *x, const mg_layer_params *p,
                                const mg_layer_slot *s, const void *ln2, const void *mid,
                                void *out) {
    const mg_model_config *c = x->c;
    MG_CHECK(shared_in(x, p, s, ln2));
    const void *act = mg_block_act(x, s->sh_act), *w2 = mg_block_param(x, p->moe->sh_fc2_w);
    return mg_fp8_linear_forward(x, p, MG_FP8_FC2, out, NULL, act, w2,
                                 mg_block_param(x, p->moe->sh_fc2_b), mid, c->moe.shared_F, c->H);
}

/* Its backward: dln (N,H) is overwritten with d(ln2) through the shared experts. */
static mg_status shared_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                 const mg_layer_slot *s, const void *dout, void *dln) {
    const mg_model_config *c = x->c;
    const mg_moe_params *mp = p->moe;
    mg_backend *be = x->be;
    int N = x->N, Fs = c->moe.shared_F, rows = c->swiglu ? 2 * Fs : Fs;
    void *dact = mg_block_ws_ptr(x, x->ws->dact), *dfc1 = mg_block_ws_ptr(x, x->ws->dfc1);
    void *fc1 = mg_block_act(x, s->sh_fc1);
    const void *act = mg_block_act(x, s->sh_act), *w2 = mg_block_param(x, mp->sh_fc2_w);
    /* GELU: as the dense MLP's (mlp.c), through fc2's input gradient or fc1's cast */
    const bool gelu_in_cast = mg_fp8_takes_gelu_grad(x, p);
    MG_CHECK(mg_fp8_linear_backward(x, p, MG_FP8_FC2, c->swiglu ? dact : dfc1,
                                    mg_block_grad(x, mp->sh_fc2_w), mg_block_grad(x, mp->sh_fc2_b),
                                    dout, NULL, act, w2, c->swiglu || gelu_in_cast ? NULL : fc1, Fs,
                                    c->H));
    if (c->swiglu) MG_CHECK(be->swiglu_backward(be, dfc1, fc1, dact, N, Fs));
    return mg_fp8_linear_backward(x, p, MG_FP8_FC1, dln, mg_block_grad(x, mp->sh_fc1_w),
                                  mg_block_grad(x, mp->sh_fc1_b), dfc1, gelu_in_cast ? fc1 : NULL,
                                  mg_block_act(x, s->ln2), mg_block_param(x, mp->sh_fc1_w), NULL,
                                  c->H, rows);
}

/* The experts' activation on their rows: e_fc1 -> e_act. */
static mg_status experts_act(const mg_block_ctx *x, const mg_layer_slot *s, const int32_t *counts) {
    const mg_moe_config *m = &x->c->moe;
    return x->be->grouped_activation_forward(x->be, mg_block_act(x, s->e_act),
                                             mg_block_act(x, s->e_fc1), counts, m->ep * x->moe->El,
                                             m->F, x->c->swiglu);
}

/* The experts' first half on their rows: xe (R,H) in groups of counts -> e_fc1, e_act. */
static mg_status experts_in(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                            const int32_t *counts) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_params *mp = p->moe;
    MG_CHECK(mg_fp8_experts_forward(x, p, MG_FP8_EXP_FC1, mg_block_act(x, s->e_fc1),
                                    mg_block_act(x, s->xe), ptrs(x, mp, W1),
                                    mp->fc1_b ? ptrs(x, mp, B1) : NULL, counts, x->c->H, m->fc1));
    return experts_act(x, s, counts);
}

/* The experts on their rows: xe (R,H) in groups of counts -> ye (R,H). */
static mg_status experts_forward(const mg_block_ctx *x, const mg_layer_params *p,
                                 const mg_layer_slot *s, const int32_t *counts, void *ye) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_params *mp = p->moe;
    MG_CHECK(experts_in(x, p, s, counts));
    return mg_fp8_experts_forward(x, p, MG_FP8_EXP_FC2, ye, mg_block_act(x, s->e_act),
                                  ptrs(x, mp, W2), mp->fc2_b ? ptrs(x, mp, B2) : NULL, counts, m->F,
                                  x->c->H);
}

/* Their backward: dye (R,H) -> dxe (R,H), the weight gradients accumulated (written over by the
 * layer's first backward of a step whose caller left them unzeroed: grads_unwritten). */
static mg_status experts_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                  const mg_layer_slot *s, const int32_t *counts, const void *dye,
                                  void *dxe) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_params *mp = p->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    int H = x->c->H, G = m->ep * x->moe->El;
    bool swiglu = x->c->swiglu, acc = !w->grads_unwritten[mp->index];
    w->grads_unwritten[mp->index] = false;
    void *fc1 = mg_block_act(x, s->e_fc1);
    void *dact = mg_block_ws_ptr(x, w->de_act), *dfc1 = mg_block_ws_ptr(x, w->de_fc1);
    /* GELU: fc2's input gradient goes through the GELU into dfc1 */
    MG_CHECK(mg_fp8_experts_backward(
        x, p, MG_FP8_EXP_FC2, swiglu ? dact : dfc1, (float *const *)ptrs(x, mp, DW2),
        mp->fc2_b ? (float *const *)ptrs(x, mp, DB2) : NULL, dye, mg_block_act(x, s->e_act),
        ptrs(x, mp, W2), swiglu ? NULL : fc1, counts, m->F, H, acc));
    if (swiglu) MG_CHECK(be->grouped_swiglu_backward(be, dfc1, fc1, dact, counts, G, m->F));
    return mg_fp8_experts_backward(x, p, MG_FP8_EXP_FC1, dxe, (float *const *)ptrs(x, mp, DW1),
                                   mp->fc1_b ? (float *const *)ptrs(x, mp, DB1) : NULL, dfc1,
                                   mg_block_act(x, s->xe), ptrs(x, mp, W1), NULL, counts, H, m->fc1,
                                   acc);
}

/* The parts per-layer graphs may hold alone (model/layer_graphs.h): moe_router and
 * moe_preprocess, each direction. */
typedef struct {
    const mg_block_ctx *x;
    const mg_layer_params *p;
    const mg_layer_slot *s;
    void *dres;      /* backward: the residual stream's gradient */
    const void *dxp; /* backward: d(the permuted rows) */
} moe_part;

/* The pre-MLP norm of mid into the slot's ln2. */
static mg_status norm2(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s) {
    return mg_block_norm_forward(x, mg_block_act(x, s->ln2), mg_block_act(x, s->ln2_mean),
                                 mg_block_act(x, s->ln2_rstd), mg_block_act(x, s->mid), p->ln2_w,
                                 p->ln2_b);
}

/* The routed rows permuted again by the slot's routing (ECHO's rerouted pairs): into the
 * experts' input with one rank, else into xp (the same pos and counts are written). */
static mg_status permute_again(const mg_block_ctx *x, const mg_layer_slot *s) {
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    const bool local = m->ep == 1;
    return x->be->moe_permute(x->be, local ? mg_block_act(x, s->xe) : mg_block_ws_ptr(x, w->xp),
                              mg_block_act(x, s->pos),
                              mg_block_act(x, local ? s->counts : s->lcounts), NULL,
                              mg_block_act(x, s->ln2), mg_block_act(x, m->echo ? s->idx2 : s->idx),
                              x->N, m->k, w->Ed, x->c->H, m->pad ? w->capacity : 0);
}

/* moe_router, forward: the pre-MLP norm, the router's logits, the top-k routing (recomputing:
 * the norm alone). */
static mg_status router_forward_part(void *ctx) {
    const moe_part *q = ctx;
    const mg_block_ctx *x = q->x;
    const mg_layer_params *p = q->p;
    const mg_layer_slot *s = q->s;
    const mg_moe_config *m = &x->c->moe;
    mg_backend *be = x->be;
    void *ln2 = mg_block_act(x, s->ln2);
    float *logits = mg_block_act(x, s->logits);
    MG_CHECK(norm2(x, p, s));
    if (x->recompute) return MG_OK; /* the routing is the forward's, kept in the slot */
    MG_CHECK(be->router_forward(be, logits, ln2, mg_block_param(x, p->moe->router_w), x->N, x->c->H,
                                m->E));
    /* --moe-router-force-load-balancing (benchmarks): the logits replaced by standard normal
     * draws, as Megatron's router does; the routing's backward then reads these logits and its
     * gradient goes to the router as if they were its own (a straight-through estimator). Each
     * (microbatch, layer) of a step draws at its own offset of the default stream (the offset of
     * the layer's attention dropout, apart from the masks by the draws' key), new every step. */
    if (m->force_balance)
        MG_CHECK(be->normal_f32(
            be, logits, (size_t)x->N * m->E, mg_model_rng_stream(x->rng, MG_RNG_DEFAULT),
            mg_model_rng_use(x->c->L, x->pass.mb, p->layer, MG_DROPOUT_ATTENTION)));
    mg_moe_routing r = routing(x);
    return be->moe_route(be, &r, mg_block_act(x, s->idx), mg_block_act(x, s->probs),
                         mg_block_act(x, s->aux_counts), x->moe->stats, logits,
                         expert_bias(x, p->moe));
}

/* moe_preprocess, forward: the routed rows permuted into expert order (with expert parallelism
 * into the send buffer, and the per-expert counts exchanged). */
static mg_status preprocess_forward_part(void *ctx) {
    const moe_part *q = ctx;
    const mg_block_ctx *x = q->x;
    const mg_layer_slot *s = q->s;
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    if (x->recompute) return permute_again(x, s); /* the counts are the slot's */
    float *load =
        w->train ? (float *)mg_block_ws_ptr(x, w->load) + (size_t)q->p->moe->index * m->E : NULL;
    const bool local = m->ep == 1;
    if (m->echo) { /* the home experts' counts, ECHO's plan, the pairs rerouted, permuted */
        float *after = load ? (float *)mg_block_ws_ptr(x, w->load) + (size_t)w->n_layers * m->E +
                                  (size_t)q->p->moe->index * m->ep
                            : NULL;
        MG_CHECK(mg_moe_echo_route(x, s, mg_block_act(x, s->idx), mg_block_ws_ptr(x, w->xp), load,
                                   after));
        return mg_moe_exchange_counts(x, s);
    }
    MG_CHECK(be->moe_permute(
        be, local ? mg_block_act(x, s->xe) : mg_block_ws_ptr(x, w->xp), mg_block_act(x, s->pos),
        mg_block_act(x, local ? s->counts : s->lcounts), load, mg_block_act(x, s->ln2),
        mg_block_act(x, s->idx), x->N, m->k, m->E, x->c->H, m->pad ? w->capacity : 0));
    return local ? MG_OK : mg_moe_exchange_counts(x, s);
}

mg_status mg_moe_forward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                         void *out) {
    const mg_model_config *c = x->c;
    const mg_moe_config *m = &c->moe;
    const mg_moe_ws *w = x->moe;
    const mg_moe_params *mp = p->moe;
    mg_backend *be = x->be;
    int N = x->N, H = c->H;
    void *mid = mg_block_act(x, s->mid), *ln2 = mg_block_act(x, s->ln2);
    int32_t *pos = mg_block_act(x, s->pos);
    const float *probs = mg_block_act(x, s->probs);
    moe_part q = {x, p, s, NULL, NULL};
    MG_CHECK(mg_block_graph(x, p->layer, MG_LAYER_PART_MOE_ROUTER, false, router_forward_part, &q));
    MG_CHECK(mg_block_graph(x, p->layer, MG_LAYER_PART_MOE_PREPROCESS, false,
                            preprocess_forward_part, &q));
    void *y = mg_block_act(x, s->y);
    /* out = mid + dropout(shared experts + combine); without dropout the residual rides in */
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    const bool early = shared_early(m); /* the shared experts beside the first exchange */
    if (m->ep == 1) { /* the permuted rows are the experts' input, their output the combine's */
        MG_CHECK(experts_forward(x, p, s, mg_block_act(x, s->counts), y));
    } else { /* expert parallelism: to the experts' ranks and back (model/moe_dispatch.c), in
              * rounds under a receive budget; round 0 last, so its rows stay in the slot for the
              * backward (which recomputes the others) */
        void *xp = mg_block_ws_ptr(x, w->xp), *ye = mg_block_ws_ptr(x, w->ye);
        int rounds;
        MG_CHECK(mg_moe_rounds(x, s, &rounds));
        if (rounds > 1 && w->train && !x->recompute) ++*w->overflows;
        if (m->echo) MG_CHECK(mg_moe_echo_weights(x, s, ptrs(x, mp, 0)));
        for (int r = rounds - 1; r >= 0; r--) {
            const int32_t *rc;
            MG_CHECK(mg_moe_round(x, s, r, &rc));
            MG_CHECK(mg_moe_dispatch_begin(x, s, r, xp));
            if (early && r == rounds - 1)
                MG_CHECK(shared_forward(x, p, s, ln2, hdrop ? NULL : mid, out));
            MG_CHECK(mg_moe_dispatch_end(x, rc, mg_block_act(x, s->xe)));
            MG_CHECK(experts_forward(x, p, s, rc, ye));
            MG_CHECK(mg_moe_combine(x, s, r, rc, y, ye));
        }
    }
    if (m->shared_F > 0 && !early)
        MG_CHECK(shared_forward(x, p, s, ln2, hdrop ? NULL : mid, out));
    else if (m->shared_F == 0 && hdrop)
        MG_CHECK(be->memset_zero(be, out, (size_t)N * H * x->esz));
    MG_CHECK(be->moe_unpermute(be, out, m->shared_F > 0 || hdrop ? out : mid, y, pos, probs, N,
                               m->k, H));
    return hdrop ? be->dropout_add(be, out, out, NULL, mid, N, H, c->S, &hd) : MG_OK;
}

/* moe_preprocess, backward: d(ln2) += the permuted rows' gradients, back in token order. */
static mg_status preprocess_backward_part(void *ctx) {
    const moe_part *q = ctx;
    const mg_block_ctx *x = q->x;
    mg_backend *be = x->be;
    return be->moe_permute_backward(be, mg_block_ws_ptr(x, x->ws->dln), q->dxp,
                                    mg_block_act(x, q->s->pos), x->N, x->c->moe.k, x->c->H);
}

/* moe_router, backward: the routing's and the router's gradients into d(ln2), then the norm's
 * into the residual stream's. */
static mg_status router_backward_part(void *ctx) {
    const moe_part *q = ctx;
    const mg_block_ctx *x = q->x;
    const mg_layer_params *p = q->p;
    const mg_layer_slot *s = q->s;
    const mg_moe_config *m = &x->c->moe;
    const mg_moe_ws *w = x->moe;
    mg_backend *be = x->be;
    void *dln = mg_block_ws_ptr(x, x->ws->dln);
    float *dprobs = mg_block_ws_ptr(x, w->dprobs), *dlogits = mg_block_ws_ptr(x, w->dlogits);
    mg_moe_routing r = routing(x);
    MG_CHECK(be->moe_route_backward(be, &r, dlogits, dprobs, mg_block_act(x, s->logits),
                                    mg_block_act(x, s->idx), mg_block_act(x, s->probs),
                                    mg_block_act(x, s->aux_counts), expert_bias(x, p->moe)));
    MG_CHECK(be->router_backward(be, dln, mg_block_grad(x, p->moe->router_w), dlogits,
                                 mg_block_act(x, s->ln2), mg_block_param(x, p->moe->router_w), x->N,
                                 x->c->H, m->E));
    return mg_block_norm_backward(x, q->dres, dln, mg_block_act(x, s->mid),
                                  mg_block_act(x, s->ln2_mean), mg_block_act(x, s->ln2_rstd),
                                  p->ln2_w, p->ln2_b);
}

mg_status mg_moe_backward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                          void *dres) {
    const mg_model_config *c = x->c;
    const mg_moe_config *m = &c->moe;
    const mg_moe_ws *w = x->moe;
    const mg_moe_params *mp = p->moe;
    mg_backend *be = x->be;
    int N = x->N, H = c->H;
    size_t esz = x->esz;
    void *dln = mg_block_ws_ptr(x, x->ws->dln);
    void *dy = mg_block_ws_ptr(x, w->dy), *dxe = mg_block_ws_ptr(x, w->dxe);
    float *dprobs = mg_block_ws_ptr(x, w->dprobs);
    const int32_t *pos = mg_block_act(x, s->pos);
    const float *probs = mg_block_act(x, s->probs);
    /* d(shared experts + combine): d(out) itself, or through the dropout mask */
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    /* selective recomputation: what the slot did not keep, again (the routing is the slot's) */
    if (s->rc & MG_RECOMPUTE_MOE) {
        mg_block_ctx rx = *x;
        rx.recompute = true;
        MG_CHECK(mg_moe_forward(&rx, p, s, mg_block_ws_ptr(x, x->ws->rc_out)));
    } else {
        if (s->rc & MG_RECOMPUTE_LAYERNORM) MG_CHECK(norm2(x, p, s));
        if (s->rc & MG_RECOMPUTE_SHARED_EXPERTS)
            MG_CHECK(shared_in(x, p, s, mg_block_act(x, s->ln2)));
    }
    const bool act_again = (s->rc & MG_RECOMPUTE_MOE_ACT) && !(s->rc & MG_RECOMPUTE_MOE);
    const bool early = shared_early(m); /* the shared experts beside the first exchange */
    const void *dmoe;
    MG_CHECK(mg_block_row_parallel_dout(x, dres, hdrop ? &hd : NULL, &dmoe));
    /* the combine: d(expert outputs) and d(routing weights) */
    MG_CHECK(be->moe_unpermute_backward(be, dy, dprobs, dmoe, mg_block_act(x, s->y), pos, probs, N,
                                        m->k, H, w->Rp));
    void *dxp = dxe; /* (Rp,H) d(the permuted rows) */
    if (m->ep == 1) {
        if (act_again) MG_CHECK(experts_act(x, s, mg_block_act(x, s->counts)));
        MG_CHECK(experts_backward(x, p, s, mg_block_act(x, s->counts), dy, dxe));
    } else { /* the forward's round trips on the gradients; each round's d(rows) come back into
              * dy's rows of the round, which its dispatch has read: dy becomes d(the permuted
              * rows) in place */
        void *dye = mg_block_ws_ptr(x, w->ye), *xp = mg_block_ws_ptr(x, w->xp);
        int rounds;
        MG_CHECK(mg_moe_rounds(x, s, &rounds));
        if (m->echo) { /* the spare slots' weights again (other layers used the workspace), their
                          gradients from zero */
            MG_CHECK(mg_moe_echo_weights(x, s, ptrs(x, mp, 0)));
            MG_CHECK(be->memset_zero(be, mg_block_ws_ptr(x, w->spare_g),
                                     (size_t)(w->El - m->E_l) * w->echo_width * sizeof(float)));
        }
        for (int r = 0; r < rounds; r++) {
            const int32_t *rc;
            MG_CHECK(mg_moe_round(x, s, r, &rc));
            if (r > 0) { /* the slot holds round 0's rows: round r's again, as the forward had */
                if (r == 1) MG_CHECK(permute_again(x, s)); /* the permuted rows again */
                MG_CHECK(mg_moe_dispatch(x, s, r, rc, mg_block_act(x, s->xe), xp));
                MG_CHECK(experts_in(x, p, s, rc));
            } else if (act_again) {
                MG_CHECK(experts_act(x, s, rc));
            }
            MG_CHECK(mg_moe_dispatch_begin(x, s, r, dy));
            /* (dln, which the shared experts' backward writes, only the preprocess's backward
             * below adds to) */
            if (early && r == 0) MG_CHECK(shared_backward(x, p, s, dmoe, dln));
            MG_CHECK(mg_moe_dispatch_end(x, rc, dye));
            MG_CHECK(experts_backward(x, p, s, rc, dye, dxe));
            MG_CHECK(mg_moe_combine(x, s, r, rc, dy, dxe));
        }
        if (m->echo) MG_CHECK(mg_moe_echo_grads(x, s, ptrs(x, mp, 0)));
        dxp = dy;
    }
    /* d(ln2): the shared experts' (or zero), the routed copies', the router's */
    if (m->shared_F > 0 && !early)
        MG_CHECK(shared_backward(x, p, s, dmoe, dln));
    else if (m->shared_F == 0)
        MG_CHECK(be->memset_zero(be, dln, (size_t)N * H * esz));
    moe_part q = {x, p, s, dres, dxp};
    MG_CHECK(mg_block_graph(x, p->layer, MG_LAYER_PART_MOE_PREPROCESS, true,
                            preprocess_backward_part, &q));
    return mg_block_graph(x, p->layer, MG_LAYER_PART_MOE_ROUTER, true, router_backward_part, &q);
}

/* ---- the plan ---- */

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

mg_status mg_moe_plan(mg_moe_ws *w, const mg_model_config *c, int N, size_t esz, int n_layers,
                      mg_arena *work) {
    const mg_moe_config *m = &c->moe;
    w->n_layers = n_layers;
    w->capacity = 0;
    if (m->capacity_factor > 0) /* Megatron's get_capacity over the T x k routed pairs */
        w->capacity = (int)ceil((double)N * m->k / m->E * m->capacity_factor);
    w->Rp = m->pad ? m->E * w->capacity : N * m->k;
    const int spares_l = m->echo ? m->echo_p.spares / m->ep : 0;
    w->El = m->E_l + spares_l; /* what the dispatch sees: ECHO adds each rank's spare slots */
    w->Ed = m->ep * w->El;
    /* what one source rank may send to this one: each token at most min(k, El) copies, and
     * with a capacity at most E_l x capacity (exactly that when padded; ECHO is dropless) */
    int per_src = N * (m->k < w->El ? m->k : w->El);
    if (w->capacity > 0 && (m->pad || m->E_l * w->capacity < per_src))
        per_src = m->E_l * w->capacity;
    w->budget = false;
    if (m->budget > 0 && m->ep > 1) { /* the receive budget: budget x N k rows, whole slabs */
        double b = ceil(m->budget * (double)N * m->k);
        int slab = (int)ceil(b / m->ep);
        if (slab < 1) slab = 1;
        if (slab < per_src) per_src = slab, w->budget = true;
    }
    w->R = m->ep == 1 ? w->Rp : m->ep * per_src;
    size_t H = (size_t)c->H, f = sizeof(float);
    size_t R = (size_t)w->R, Rp = (size_t)w->Rp, E = (size_t)m->E;
    MG_CHECK(reserve(work, (size_t)N * E * f, &w->dlogits));
    MG_CHECK(reserve(work, (size_t)N * m->k * f, &w->dprobs));
    MG_CHECK(reserve(work, Rp * H * esz, &w->dy));
    MG_CHECK(reserve(work, R * H * esz, &w->dxe));
    MG_CHECK(reserve(work, R * m->fc1 * esz, &w->de_fc1));
    MG_CHECK(reserve(work, c->swiglu ? R * m->F * esz : 0, &w->de_act));
    MG_CHECK(reserve(work, m->ep > 1 ? Rp * H * esz : 0, &w->xp));
    MG_CHECK(reserve(work, m->ep > 1 ? R * H * esz : 0, &w->ye));
    MG_CHECK(reserve(work, m->ep > 1 ? R * H * esz : 0, &w->slab_send));
    MG_CHECK(reserve(work, m->ep > 1 ? R * H * esz : 0, &w->slab_recv));
    MG_CHECK(reserve(work, w->budget ? (size_t)m->ep * w->El * sizeof(int32_t) : 0, &w->rcounts));
    /* ECHO: the counting pass, the gathered counts, the weight and gradient exchange */
    const size_t seg[4] = {(size_t)m->fc1 * H, c->bias ? (size_t)m->fc1 : 0, (size_t)m->F * H,
                           c->bias ? H : 0};
    memcpy(w->echo_seg, seg, sizeof seg);
    w->echo_width = seg[0] + seg[1] + seg[2] + seg[3];
    const size_t spare_rows = (size_t)spares_l, slab_rows = (size_t)m->ep * spare_rows;
    MG_CHECK(reserve(work, m->echo ? E * sizeof(int32_t) : 0, &w->hcounts));
    MG_CHECK(reserve(work, m->echo ? (size_t)N * m->k * sizeof(int32_t) : 0, &w->hpos));
    MG_CHECK(reserve(work, m->echo ? (size_t)m->ep * E * sizeof(int32_t) : 0, &w->gcounts));
    MG_CHECK(reserve(work, slab_rows * w->echo_width * f, &w->echo_send));
    MG_CHECK(reserve(work, slab_rows * w->echo_width * f, &w->echo_recv));
    MG_CHECK(reserve(work, spare_rows * w->echo_width * esz, &w->spare_w));
    MG_CHECK(reserve(work, spare_rows * w->echo_width * f, &w->spare_g));
    if (m->ep > 1) { /* the dispatch's fixed all-to-all sizes (model/moe_dispatch.c) */
        w->count_splits = malloc((size_t)6 * m->ep * sizeof *w->count_splits);
        if (!w->count_splits) return MG_FAIL(MG_ERR_NOMEM, "out of memory (MoE plan)");
        w->row_splits = w->count_splits + 2 * m->ep;
        w->echo_splits = w->count_splits + 4 * m->ep;
        size_t slab = (size_t)(w->R / m->ep) * H;
        for (int r = 0; r < m->ep; r++) {
            w->count_splits[r] = (size_t)w->El;
            w->count_splits[m->ep + r] = (size_t)r * (size_t)w->El;
            w->row_splits[r] = slab;
            w->row_splits[m->ep + r] = (size_t)r * slab;
            w->echo_splits[r] = spare_rows * w->echo_width;
            w->echo_splits[m->ep + r] = (size_t)r * spare_rows * w->echo_width;
        }
    }
    w->bias = calloc((size_t)(n_layers ? n_layers : 1), sizeof *w->bias);
    w->ptrs = calloc((size_t)(n_layers ? n_layers : 1), sizeof *w->ptrs);
    w->grads_unwritten = calloc((size_t)(n_layers ? n_layers : 1), sizeof *w->grads_unwritten);
    w->overflows = calloc(1, sizeof *w->overflows);
    if (!w->bias || !w->ptrs || !w->grads_unwritten || !w->overflows)
        return MG_FAIL(MG_ERR_NOMEM, "out of memory (MoE plan)");
    /* the loads, then with ECHO each layer's tokens per rank after it (n_layers x ep) */
    MG_CHECK(reserve(work, (size_t)n_layers * (E + (m->echo ? (size_t)m->ep : 0)) * f, &w->load));
    for (int i = 0; i < n_layers; i++) {
        MG_CHECK(reserve(work, m->expert_bias ? E * f : 0, &w->bias[i]));
        MG_CHECK(reserve(work, (size_t)N_PTRS * w->El * sizeof(void *), &w->ptrs[i]));
    }
    return MG_OK;
}

void mg_moe_free(mg_moe_ws *w) {
    free(w->bias);
    free(w->ptrs);
    free(w->grads_unwritten);
    free(w->overflows);
    free(w->count_splits); /* row_splits and echo_splits live in the same allocation */
    memset(w, 0, sizeof *w);
}
