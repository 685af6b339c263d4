/* The MLP sublayer: norm, fc1 (column-parallel; SwiGLU's [gate; up] split block by block, so a
 * rank holds matching gate and up columns), GELU or SwiGLU, fc2 (row-parallel) with
 * --hidden-dropout (training passes) and the residual add. With GELU, fc1 and the activation are
 * one backend call (linear_gelu_forward) and so are fc2's input gradient and the GELU gradient
 * (linear_backward's gelu_pre): on CUDA these are cuBLASLt epilogues. */
#include "model/block.h"

mg_status mg_mlp_forward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                         void *out) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *mid = mg_block_act(x, s->mid), *ln2 = mg_block_act(x, s->ln2);
    void *fc1 = mg_block_act(x, s->fc1), *act = mg_block_act(x, s->act);
    MG_CHECK(mg_block_norm_forward(x, ln2, mg_block_act(x, s->ln2_mean),
                                   mg_block_act(x, s->ln2_rstd), mid, p->ln2_w, p->ln2_b));
    if (c->swiglu) {
        MG_CHECK(be->linear_forward(be, fc1, ln2, mg_block_param(x, p->fc1_w),
                                    mg_block_param(x, p->fc1_b), NULL, N, c->H, c->fc1_l));
        MG_CHECK(be->swiglu_forward(be, act, fc1, N, c->F_l));
    } else {
        MG_CHECK(be->linear_gelu_forward(be, act, fc1, ln2, mg_block_param(x, p->fc1_w),
                                         mg_block_param(x, p->fc1_b), N, c->H, c->fc1_l));
    }
    /* out = mid + dropout(fc2(act)) */
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    return mg_block_row_parallel_forward(x, out, act, p->fc2_w, p->fc2_b, mid, c->F_l,
                                         hdrop ? &hd : NULL);
}

mg_status mg_mlp_backward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                          void *dres) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *dact = mg_block_ws_ptr(x, x->ws->dact), *dfc1 = mg_block_ws_ptr(x, x->ws->dfc1);
    void *dln = mg_block_ws_ptr(x, x->ws->dln), *fc1 = mg_block_act(x, s->fc1);
    const void *dout;
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    MG_CHECK(mg_block_row_parallel_dout(x, dres, hdrop ? &hd : NULL, &dout));
    /* GELU: fc2's input gradient goes straight through the GELU into dfc1 */
    MG_CHECK(be->linear_backward(be, c->swiglu ? dact : dfc1, mg_block_grad(x, p->fc2_w),
                                 mg_block_grad(x, p->fc2_b), dout, mg_block_act(x, s->act),
                                 mg_block_param(x, p->fc2_w), c->swiglu ? NULL : fc1, N, c->F_l,
                                 c->H));
    if (c->swiglu) MG_CHECK(be->swiglu_backward(be, dfc1, fc1, dact, N, c->F_l));
    MG_CHECK(be->linear_backward(be, dln, mg_block_grad(x, p->fc1_w), mg_block_grad(x, p->fc1_b),
                                 dfc1, mg_block_act(x, s->ln2), mg_block_param(x, p->fc1_w), NULL,
                                 N, c->H, c->fc1_l));
    return mg_block_norm_backward(x, dres, dln, mg_block_act(x, s->mid),
                                  mg_block_act(x, s->ln2_mean), mg_block_act(x, s->ln2_rstd),
                                  p->ln2_w, p->ln2_b);
}
