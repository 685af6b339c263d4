/* The MLP sublayer: norm, fc1, GELU or SwiGLU, fc2 with the residual add. With GELU, fc1 and the
 * activation are one backend call (linear_gelu_forward) and so are fc2's input gradient and the
 * GELU gradient (linear_backward's gelu_pre): on CUDA these are cuBLASLt epilogues. */
#include "model/layers.h"

mg_status mg_mlp_forward(mg_gpt *g, mg_backend *be, int l, void *out) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *mid = mg_gpt_act(g, s->mid), *ln2 = mg_gpt_act(g, s->ln2);
    void *fc1 = mg_gpt_act(g, s->fc1), *act = mg_gpt_act(g, s->act);
    MG_CHECK(mg_gpt_norm_forward(g, be, ln2, mg_gpt_act(g, s->ln2_mean), mg_gpt_act(g, s->ln2_rstd),
                                 mid, p->ln2_w, p->ln2_b));
    if (c->swiglu) {
        MG_CHECK(be->linear_forward(be, fc1, ln2, mg_gpt_param(g, p->fc1_w),
                                    mg_gpt_param_or_null(g, p->fc1_b), NULL, N, c->H, c->fc1_dim));
        MG_CHECK(be->swiglu_forward(be, act, fc1, N, c->F));
    } else {
        MG_CHECK(be->linear_gelu_forward(be, act, fc1, ln2, mg_gpt_param(g, p->fc1_w),
                                         mg_gpt_param_or_null(g, p->fc1_b), N, c->H, c->fc1_dim));
    }
    /* out = mid + fc2(act) */
    MG_CHECK(be->linear_forward(be, out, act, mg_gpt_param(g, p->fc2_w),
                                mg_gpt_param_or_null(g, p->fc2_b), mid, N, c->F, c->H));
    return MG_OK;
}

mg_status mg_mlp_backward(mg_gpt *g, mg_backend *be, int l, void *dres) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *dact = mg_gpt_ws(g, g->w_dact), *dfc1 = mg_gpt_ws(g, g->w_dfc1);
    void *dln = mg_gpt_ws(g, g->w_dln), *fc1 = mg_gpt_act(g, s->fc1);
    /* GELU: fc2's input gradient goes straight through the GELU into dfc1 */
    MG_CHECK(be->linear_backward(be, c->swiglu ? dact : dfc1, mg_gpt_grad(g, p->fc2_w),
                                 mg_gpt_grad_or_null(g, p->fc2_b), dres, mg_gpt_act(g, s->act),
                                 mg_gpt_param(g, p->fc2_w), c->swiglu ? NULL : fc1, N, c->F, c->H));
    if (c->swiglu) MG_CHECK(be->swiglu_backward(be, dfc1, fc1, dact, N, c->F));
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, p->fc1_w),
                                 mg_gpt_grad_or_null(g, p->fc1_b), dfc1, mg_gpt_act(g, s->ln2),
                                 mg_gpt_param(g, p->fc1_w), NULL, N, c->H, c->fc1_dim));
    MG_CHECK(mg_gpt_norm_backward(g, be, dres, dln, mg_gpt_act(g, s->mid),
                                  mg_gpt_act(g, s->ln2_mean), mg_gpt_act(g, s->ln2_rstd), p->ln2_w,
                                  p->ln2_b));
    return MG_OK;
}
