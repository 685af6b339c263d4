/* The attention sublayer: norm, fused QKV projection (column-parallel: this rank's query groups
 * with their key and value heads), RoPE, causal attention over the local heads (GQA through the
 * fused layout of backend.h; --attention-dropout on its probabilities), output projection
 * (row-parallel) with --hidden-dropout and the residual add. Dropout only in training passes; the
 * backward recomputes the masks (core/dropout.h). Packed documents (the pass's pos and
 * doc_start, model/block.h): RoPE at each token's position, attention within its document. */
#include "model/block.h"

mg_status mg_attention_forward(const mg_block_ctx *x, const mg_layer_params *p,
                               const mg_layer_slot *s) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    int N = x->N;
    void *ln1 = mg_block_act(x, s->ln1), *qkv = mg_block_act(x, s->qkv);
    void *att = mg_block_act(x, s->att);
    MG_CHECK(mg_block_norm_forward(x, ln1, mg_block_act(x, s->ln1_mean),
                                   mg_block_act(x, s->ln1_rstd), mg_block_act(x, s->x), p->ln1_w,
                                   p->ln1_b));
    MG_CHECK(be->linear_forward(be, qkv, ln1, mg_block_param(x, p->qkv_w),
                                mg_block_param(x, p->qkv_b), NULL, N, c->H, c->qkv_l));
    /* RoPE's angles come from the place in the sequence, also with --reset-position-ids, as in
     * megatron-core (its position ids reach the learned table only); with
     * --reset-attention-mask a document sees only itself, and RoPE depends only on distances */
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_forward(be, qkv, mg_block_ws_ptr(x, x->ws->rope_cos),
                                  mg_block_ws_ptr(x, x->ws->rope_sin), NULL, N, c->S, c->nq_l,
                                  c->ng_l, c->hd, c->rd));
    mg_dropout ad, hd;
    bool adrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTENTION, &ad);
    bool hdrop = mg_block_dropout(x, p->layer, MG_DROPOUT_ATTN_OUT, &hd);
    MG_CHECK(be->attention_forward(be, att, mg_block_act(x, s->att_saved), qkv, x->B, c->S, c->nq_l,
                                   c->ng_l, c->hd, adrop ? &ad : NULL, x->pass.doc_start));
    /* mid = x + dropout(proj(att)) */
    return mg_block_row_parallel_forward(x, mg_block_act(x, s->mid), att, p->proj_w, p->proj_b,
                                         mg_block_act(x, s->x), c->attn_l, hdrop ? &hd : NULL);
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
    /* mid = x + dropout(proj(att)): d(att) from d(mid); d(x) keeps d(mid) (identity through the
     * add) */
    const void *dmid;
    MG_CHECK(mg_block_row_parallel_dout(x, dres, hdrop ? &hd : NULL, &dmid));
    MG_CHECK(be->linear_backward(be, datt, mg_block_grad(x, p->proj_w), mg_block_grad(x, p->proj_b),
                                 dmid, mg_block_act(x, s->att), mg_block_param(x, p->proj_w), NULL,
                                 N, c->attn_l, c->H));
    MG_CHECK(be->attention_backward(be, dqkv, datt, mg_block_act(x, s->qkv),
                                    mg_block_act(x, s->att), mg_block_act(x, s->att_saved), x->B,
                                    c->S, c->nq_l, c->ng_l, c->hd, adrop ? &ad : NULL,
                                    x->pass.doc_start));
    if (c->pos == MG_POS_ROPE)
        MG_CHECK(be->rope_backward(be, dqkv, mg_block_ws_ptr(x, x->ws->rope_cos),
                                   mg_block_ws_ptr(x, x->ws->rope_sin), NULL, N, c->S, c->nq_l,
                                   c->ng_l, c->hd, c->rd));
    MG_CHECK(be->linear_backward(be, dln, mg_block_grad(x, p->qkv_w), mg_block_grad(x, p->qkv_b),
                                 dqkv, mg_block_act(x, s->ln1), mg_block_param(x, p->qkv_w), NULL,
                                 N, c->H, c->qkv_l));
    return mg_block_norm_backward(x, dres, dln, mg_block_act(x, s->x), mg_block_act(x, s->ln1_mean),
                                  mg_block_act(x, s->ln1_rstd), p->ln1_w, p->ln1_b);
}
