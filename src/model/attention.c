/* The attention sublayer: norm, fused QKV projection, RoPE, causal attention (GQA through the
 * fused layout of backend.h), output projection with the residual add. */
#include "model/layers.h"

mg_status mg_attention_forward(mg_gpt *g, mg_backend *be, int l) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *x = mg_gpt_act(g, s->x), *ln1 = mg_gpt_act(g, s->ln1), *qkv = mg_gpt_act(g, s->qkv);
    void *att = mg_gpt_act(g, s->att), *mid = mg_gpt_act(g, s->mid);
    MG_CHECK(mg_gpt_norm_forward(g, be, ln1, mg_gpt_act(g, s->ln1_mean), mg_gpt_act(g, s->ln1_rstd),
                                 x, p->ln1_w, p->ln1_b));
    MG_CHECK(be->linear_forward(be, qkv, ln1, mg_gpt_param(g, p->qkv_w),
                                mg_gpt_param_or_null(g, p->qkv_b), NULL, N, c->H, c->qkv_dim));
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_forward(be, qkv, mg_gpt_ws(g, g->w_rope_cos), mg_gpt_ws(g, g->w_rope_sin),
                                  N, c->S, c->nq, c->ng, c->hd));
    MG_CHECK(be->attention_forward(be, att, mg_gpt_act(g, s->att_saved), qkv, g->B, c->S, c->nq,
                                   c->ng, c->hd));
    /* mid = x + proj(att): the residual add rides in the projection */
    MG_CHECK(be->linear_forward(be, mid, att, mg_gpt_param(g, p->proj_w),
                                mg_gpt_param_or_null(g, p->proj_b), x, N, c->attn_dim, c->H));
    return MG_OK;
}

mg_status mg_attention_backward(mg_gpt *g, mg_backend *be, int l, void *dres) {
    const mg_model_config *c = &g->cfg;
    const mg_layer_params *p = &g->layers[l];
    const mg_layer_slot *s = &g->slot[l];
    int N = g->N;
    void *datt = mg_gpt_ws(g, g->w_datt), *dqkv = mg_gpt_ws(g, g->w_dqkv);
    void *dln = mg_gpt_ws(g, g->w_dln);
    /* mid = x + proj(att): d(att) from d(mid); d(x) keeps d(mid) (identity through the add) */
    MG_CHECK(be->linear_backward(be, datt, mg_gpt_grad(g, p->proj_w),
                                 mg_gpt_grad_or_null(g, p->proj_b), dres, mg_gpt_act(g, s->att),
                                 mg_gpt_param(g, p->proj_w), NULL, N, c->attn_dim, c->H));
    MG_CHECK(be->attention_backward(be, dqkv, datt, mg_gpt_act(g, s->qkv), mg_gpt_act(g, s->att),
                                    mg_gpt_act(g, s->att_saved), g->B, c->S, c->nq, c->ng, c->hd));
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_backward(be, dqkv, mg_gpt_ws(g, g->w_rope_cos),
                                   mg_gpt_ws(g, g->w_rope_sin), N, c->S, c->nq, c->ng, c->hd));
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, p->qkv_w),
                                 mg_gpt_grad_or_null(g, p->qkv_b), dqkv, mg_gpt_act(g, s->ln1),
                                 mg_gpt_param(g, p->qkv_w), NULL, N, c->H, c->qkv_dim));
    MG_CHECK(mg_gpt_norm_backward(g, be, dres, dln, mg_gpt_act(g, s->x), mg_gpt_act(g, s->ln1_mean),
                                  mg_gpt_act(g, s->ln1_rstd), p->ln1_w, p->ln1_b));
    return MG_OK;
}
