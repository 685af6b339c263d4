/* The MLP sublayer: norm, fc1, GELU or SwiGLU, fc2, residual add. */
#include "model/layers.h"

mg_status mg_mlp_forward(mg_gpt *g, mg_backend *be, int l, void *out) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *mid = mg_gpt_act(g, s->mid), *ln2 = mg_gpt_act(g, s->ln2);
    void *fc1 = mg_gpt_act(g, s->fc1), *act = mg_gpt_act(g, s->act), *tmp = mg_gpt_ws(g, g->w_tmp);
    MG_CHECK(mg_gpt_norm_forward(g, be, ln2, mg_gpt_act(g, s->ln2_mean), mg_gpt_act(g, s->ln2_rstd),
                                 mid, p->ln2_w, p->ln2_b));
    MG_CHECK(be->linear_forward(be, fc1, ln2, mg_gpt_param(g, p->fc1_w),
                                mg_gpt_param_or_null(g, p->fc1_b), N, c->H, c->fc1_dim));
    if (c->swiglu) MG_CHECK(be->swiglu_forward(be, act, fc1, N, c->F));
    else MG_CHECK(be->gelu_forward(be, act, fc1, (size_t)N * c->F));
    MG_CHECK(be->linear_forward(be, tmp, act, mg_gpt_param(g, p->fc2_w),
                                mg_gpt_param_or_null(g, p->fc2_b), N, c->F, c->H));
    MG_CHECK(be->add(be, out, mid, tmp, (size_t)N * c->H));
    return MG_OK;
}

mg_status mg_mlp_backward(mg_gpt *g, mg_backend *be, int l, void *dres) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *dact = mg_gpt_ws(g, g->w_dact), *dfc1 = mg_gpt_ws(g, g->w_dfc1);
    void *dln = mg_gpt_ws(g, g->w_dln), *fc1 = mg_gpt_act(g, s->fc1);
    MG_CHECK(be->linear_backward(be, dact, mg_gpt_grad(g, p->fc2_w),
                                 mg_gpt_grad_or_null(g, p->fc2_b), dres, mg_gpt_act(g, s->act),
                                 mg_gpt_param(g, p->fc2_w), N, c->F, c->H));
    if (c->swiglu) MG_CHECK(be->swiglu_backward(be, dfc1, fc1, dact, N, c->F));
    else MG_CHECK(be->gelu_backward(be, dfc1, fc1, dact, (size_t)N * c->F));
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, p->fc1_w),
                                 mg_gpt_grad_or_null(g, p->fc1_b), dfc1, mg_gpt_act(g, s->ln2),
                                 mg_gpt_param(g, p->fc1_w), N, c->H, c->fc1_dim));
    MG_CHECK(mg_gpt_norm_backward(g, be, dres, dln, mg_gpt_act(g, s->mid),
                                  mg_gpt_act(g, s->ln2_mean), mg_gpt_act(g, s->ln2_rstd), p->ln2_w,
                                  p->ln2_b));
    return MG_OK;
}
