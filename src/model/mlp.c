/* The MLP sublayer: norm, fc1 (column-parallel; SwiGLU's [gate; up] split block by block, so a
 * rank holds matching gate and up columns), GELU or SwiGLU, fc2 (row-parallel) with
 * --hidden-dropout (training passes) and the residual add. With GELU, fc1 and the activation are
 * one backend call (linear_gelu_forward) and so are fc2's input gradient and the GELU gradient
 * (linear_backward's gelu_pre): on CUDA these are cuBLASLt epilogues. */
#include "model/block.h"
#include "model/fp8.h"

/* The pre-MLP norm of mid into the slot's ln2 (gathered under SP). */
static mg_status norm2(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s) {
    return mg_block_norm_forward(x, mg_block_act(x, s->ln2), mg_block_act(x, s->ln2_mean),
                                 mg_block_act(x, s->ln2_rstd), mg_block_act(x, s->mid), p->ln2_w,
                                 p->ln2_b);
}

/* The activation of the slot's fc1 into act. */
static mg_status activation(const mg_block_ctx *x, const mg_layer_slot *s) {
    const mg_model_config *c = x->c;
    void *fc1 = mg_block_act(x, s->fc1), *act = mg_block_act(x, s->act);
    if (c->swiglu) return x->be->swiglu_forward(x->be, act, fc1, x->N, c->F_l);
    return x->be->gelu_forward(x->be, act, fc1, (size_t)x->N * c->F_l);
}

mg_status mg_mlp_forward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                         void *out) {
    const mg_model_config *c = x->c;
    void *fc1 = mg_block_act(x, s->fc1);
    /* GELU fused into fc1's GEMM, unless the backward recomputes the activation alone (then both
     * passes run the same GELU) */
    bool fused = !c->swiglu && !(s->rc & MG_RECOMPUTE_MLP_ACT);
    MG_CHECK(mg_block_norm_linear_forward(
        x, p, MG_FP8_FC1, mg_block_act(x, s->ln2), mg_block_act(x, s->ln2_mean),
        mg_block_act(x, s->ln2_rstd), mg_block_act(x, s->mid), p->ln2_w, p->ln2_b,
        fused ? mg_block_act(x, s->act) : fc1, fused ? fc1 : NULL, mg_block_param(x, p->fc1_w),
        mg_block_param(x, p->fc1_b), c->fc1_l));
    if (!fused) MG_CHECK(activation(x, s));
    if (!out) return MG_OK; /* recomputation: fc2's output is not needed */
    /* out = mid + dropout(fc2(act)) */
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    const void *act = mg_block_act(x, s->act), *w2 = mg_block_param(x, p->fc2_w);
    return mg_block_row_parallel_forward(x, p, MG_FP8_FC2, out, act, w2, p->fc2_b,
                                         mg_block_act(x, s->mid), c->F_l, hdrop ? &hd : NULL);
}

mg_status mg_mlp_backward(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s,
                          void *dres) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *dact = mg_block_ws_ptr(x, x->ws->dact), *dfc1 = mg_block_ws_ptr(x, x->ws->dfc1);
    void *dln = mg_block_ws_ptr(x, x->ws->dln), *fc1 = mg_block_act(x, s->fc1);
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_MLP_OUT, &hd);
    /* selective recomputation: what the slot did not keep, again */
    if (s->rc & MG_RECOMPUTE_MLP) {
        MG_CHECK(mg_mlp_forward(x, p, s, NULL));
    } else {
        if (s->rc & MG_RECOMPUTE_LAYERNORM) MG_CHECK(norm2(x, p, s));
        if (s->rc & MG_RECOMPUTE_MLP_ACT) MG_CHECK(activation(x, s));
    }
    const void *act = mg_block_act(x, s->act), *w2 = mg_block_param(x, p->fc2_w);
    /* GELU: fc2's input gradient goes straight through the GELU into dfc1 (an fp8 layer's fc1
     * takes it through the GELU in its gradient's cast instead) */
    const bool gelu_in_cast = mg_fp8_takes_gelu_grad(x, p);
    MG_CHECK(mg_block_row_parallel_backward(x, p, MG_FP8_FC2, dres, hdrop ? &hd : NULL,
                                            c->swiglu ? dact : dfc1, mg_block_grad(x, p->fc2_w),
                                            mg_block_grad(x, p->fc2_b), act, w2,
                                            c->swiglu || gelu_in_cast ? NULL : fc1, c->F_l));
    if (c->swiglu) MG_CHECK(be->swiglu_backward(be, dfc1, fc1, dact, N, c->F_l));
    const mg_block_norm_linear lin = {MG_FP8_FC1,
                                      mg_block_grad(x, p->fc1_w),
                                      mg_block_grad(x, p->fc1_b),
                                      dfc1,
                                      mg_block_act(x, s->ln2),
                                      mg_block_param(x, p->fc1_w),
                                      c->H,
                                      c->fc1_l,
                                      gelu_in_cast ? fc1 : NULL};
    return mg_block_norm_linear_backward(x, p, &lin, dres, dln, mg_block_act(x, s->mid),
                                         mg_block_act(x, s->ln2_mean), mg_block_act(x, s->ln2_rstd),
                                         p->ln2_w, p->ln2_b);
}
