/* The attention sublayer: norm, fused QKV projection (column-parallel: this rank's query groups
 * with their key and value heads), RoPE, causal attention over the local heads (GQA through the
 * fused layout of backend.h; --attention-dropout on its probabilities), output projection
 * (row-parallel) with --hidden-dropout and the residual add. Dropout only in training passes; the
 * backward recomputes the masks (core/dropout.h). Packed documents (the pass's pos and
 * doc_start, model/block.h): RoPE at each token's position, attention within its document.
 * Selective recomputation (the slot entry's rc): core_attn runs the attention again from the
 * kept qkv before the backward, layernorm the norm from the kept input. */
#include "model/block.h"
#include "model/fp8.h"

/* The pre-attention norm of the layer input into the slot's ln1 (gathered under SP). */
static mg_status norm1(const mg_block_ctx *x, const mg_layer_params *p, const mg_layer_slot *s) {
    return mg_block_norm_forward(x, mg_block_act(x, s->ln1), mg_block_act(x, s->ln1_mean),
                                 mg_block_act(x, s->ln1_rstd), mg_block_act(x, s->x), p->ln1_w,
                                 p->ln1_b);
}

/* Core attention: the slot's qkv (after RoPE) -> att and what its backward keeps. */
static mg_status core_attention(const mg_block_ctx *x, const mg_layer_params *p,
                                const mg_layer_slot *s) {
    const mg_model_config *c = x->c;
    mg_dropout ad;
    bool adrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTENTION, &ad);
    return x->be->attention_forward(x->be, mg_block_act(x, s->att), mg_block_act(x, s->att_saved),
                                    mg_block_act(x, s->qkv), x->B, c->S, c->nq_l, c->ng_l, c->hd,
                                    adrop ? &ad : NULL, x->pass.doc_start);
}

mg_status mg_attention_forward(const mg_block_ctx *x, const mg_layer_params *p,
                               const mg_layer_slot *s) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *qkv = mg_block_act(x, s->qkv);
    MG_CHECK(mg_block_norm_linear_forward(
        x, p, MG_FP8_QKV, mg_block_act(x, s->ln1), mg_block_act(x, s->ln1_mean),
        mg_block_act(x, s->ln1_rstd), mg_block_act(x, s->x), p->ln1_w, p->ln1_b, qkv, NULL,
        mg_block_param(x, p->qkv_w), mg_block_param(x, p->qkv_b), c->qkv_l));
    /* RoPE's angles come from the place in the sequence, also with --reset-position-ids, as in
     * megatron-core (its position ids reach the learned table only); with
     * --reset-attention-mask a document sees only itself, and RoPE depends only on distances */
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_forward(be, qkv, mg_block_ws_ptr(x, x->ws->rope_cos),
                                  mg_block_ws_ptr(x, x->ws->rope_sin), NULL, N, c->S, c->nq_l,
                                  c->ng_l, c->hd, c->rd));
    MG_CHECK(core_attention(x, p, s));
    /* mid = x + dropout(proj(att)) */
    mg_dropout hd;
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTN_OUT, &hd);
    const void *att = mg_block_act(x, s->att), *wp = mg_block_param(x, p->proj_w);
    return mg_block_row_parallel_forward(x, p, MG_FP8_PROJ, mg_block_act(x, s->mid), att, wp,
                                         p->proj_b, mg_block_act(x, s->x), c->attn_l,
                                         hdrop ? &hd : NULL);
}

mg_status mg_attention_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                const mg_layer_slot *s, void *dres) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *datt = mg_block_ws_ptr(x, x->ws->datt), *dqkv = mg_block_ws_ptr(x, x->ws->dqkv);
    void *dln = mg_block_ws_ptr(x, x->ws->dln);
    mg_dropout ad, hd;
    bool adrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTENTION, &ad);
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTN_OUT, &hd);
    /* selective recomputation: what the slot did not keep, again (the same masks) */
    if (s->rc & MG_RECOMPUTE_CORE_ATTN) MG_CHECK(core_attention(x, p, s));
    if (s->rc & MG_RECOMPUTE_LAYERNORM) MG_CHECK(norm1(x, p, s));
    /* mid = x + dropout(proj(att)): d(att) from d(mid); d(x) keeps d(mid) (identity through the
     * add) */
    const void *att = mg_block_act(x, s->att), *wp = mg_block_param(x, p->proj_w);
    MG_CHECK(mg_block_row_parallel_backward(x, p, MG_FP8_PROJ, dres, hdrop ? &hd : NULL, datt,
                                            mg_block_grad(x, p->proj_w),
                                            mg_block_grad(x, p->proj_b), att, wp, NULL, c->attn_l));
    MG_CHECK(be->attention_backward(be, dqkv, datt, mg_block_act(x, s->qkv),
                                    mg_block_act(x, s->att), mg_block_act(x, s->att_saved), x->B,
                                    c->S, c->nq_l, c->ng_l, c->hd, adrop ? &ad : NULL,
                                    x->pass.doc_start));
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_backward(be, dqkv, mg_block_ws_ptr(x, x->ws->rope_cos),
                                   mg_block_ws_ptr(x, x->ws->rope_sin), NULL, N, c->S, c->nq_l,
                                   c->ng_l, c->hd, c->rd));
    const void *dq = dqkv, *ln1 = mg_block_act(x, s->ln1), *wq = mg_block_param(x, p->qkv_w);
    const mg_block_norm_linear qkv = {MG_FP8_QKV,
                                      mg_block_grad(x, p->qkv_w),
                                      mg_block_grad(x, p->qkv_b),
                                      dq,
                                      ln1,
                                      wq,
                                      c->H,
                                      c->qkv_l,
                                      NULL};
    return mg_block_norm_linear_backward(x, p, &qkv, dres, dln, mg_block_act(x, s->x),
                                         mg_block_act(x, s->ln1_mean), mg_block_act(x, s->ln1_rstd),
                                         p->ln1_w, p->ln1_b);
}
