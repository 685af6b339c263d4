/* GPT model: parameter registration, activation planning, and the forward/backward walk over
 * the vocab-parallel embedding, blocks (model/block.h) and the vocab-parallel head. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ---- */

static mg_status add_norm(mg_gpt *g, const char *prefix, int *w, int *b) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    MG_CHECK(mg_params_add(&g->params, name, 1, g->cfg.H, 0, -1, 1, false, MG_INIT_ONES, 0, w));
    g->params.p[*w].sequence_parallel = g->cfg.sp;
    *b = -1;
    if (g->cfg.norm == MG_NORM_LAYERNORM) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        MG_CHECK(
            mg_params_add(&g->params, name, 1, g->cfg.H, 0, -1, 1, false, MG_INIT_ZEROS, 0, b));
        g->params.p[*b].sequence_parallel = g->cfg.sp;
    }
    return MG_OK;
}

/* A linear layer's weight (out, in) and optional bias. split: 0 column-parallel, 1 row-parallel. */
static mg_status add_linear(mg_gpt *g, const char *prefix, int out, int in, int split, int chunks,
                            float std, int *w, int *b) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    MG_CHECK(
        mg_params_add(&g->params, name, 2, out, in, split, chunks, true, MG_INIT_NORMAL, std, w));
    *b = -1;
    if (g->cfg.bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        /* a row-parallel layer's bias is added after the reduction: replicated */
        MG_CHECK(mg_params_add(&g->params, name, 1, out, 0, split == 0 ? 0 : -1, chunks, false,
                               MG_INIT_ZEROS, 0, b));
    }
    return MG_OK;
}

mg_status mg_gpt_build(mg_gpt *g, const mg_config *cfg, int tp_rank) {
    memset(g, 0, sizeof *g);
    MG_CHECK(mg_model_config_from(&g->cfg, cfg, tp_rank));
    const mg_model_config *c = &g->cfg;
    mg_params_set_tp(&g->params, c->tp_rank, c->tp);
    float std = (float)c->init_std;
    float out_std = (float)(c->init_std / sqrt(2.0 * c->L)); /* Megatron's scaled init */
    MG_CHECK(mg_params_add(&g->params, "embedding.word_embeddings.weight", 2, c->V, c->H, 0, 1,
                           true, MG_INIT_NORMAL, std, &g->wte));
    g->wpe = -1;
    if (c->pos == MG_POS_LEARNED)
        MG_CHECK(mg_params_add(&g->params, "embedding.position_embeddings.weight", 2, c->P, c->H,
                               -1, 1, true, MG_INIT_NORMAL, std, &g->wpe));
    g->layers = calloc((size_t)c->L, sizeof *g->layers);
    if (!g->layers) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the layer table");
    for (int l = 0; l < c->L; l++) {
        mg_layer_params *p = &g->layers[l];
        char pre[80];
#define PREFIX(s) (snprintf(pre, sizeof pre, "decoder.layers.%d.%s", l, s), pre)
        MG_CHECK(add_norm(g, PREFIX("input_layernorm"), &p->ln1_w, &p->ln1_b));
        MG_CHECK(add_linear(g, PREFIX("self_attention.linear_qkv"), c->qkv_dim, c->H, 0, 1, std,
                            &p->qkv_w, &p->qkv_b));
        MG_CHECK(add_linear(g, PREFIX("self_attention.linear_proj"), c->H, c->attn_dim, 1, 1,
                            out_std, &p->proj_w, &p->proj_b));
        MG_CHECK(add_norm(g, PREFIX("pre_mlp_layernorm"), &p->ln2_w, &p->ln2_b));
        MG_CHECK(add_linear(g, PREFIX("mlp.linear_fc1"), c->fc1_dim, c->H, 0, c->swiglu ? 2 : 1,
                            std, &p->fc1_w, &p->fc1_b));
        MG_CHECK(add_linear(g, PREFIX("mlp.linear_fc2"), c->H, c->F, 1, 1, out_std, &p->fc2_w,
                            &p->fc2_b));
#undef PREFIX
    }
    MG_CHECK(add_norm(g, "decoder.final_layernorm", &g->lnf_w, &g->lnf_b));
    g->out_w = g->wte;
    if (!c->tied)
        MG_CHECK(mg_params_add(&g->params, "output_layer.weight", 2, c->V, c->H, 0, 1, true,
                               MG_INIT_NORMAL, std, &g->out_w));
    mg_params_layout(&g->params);
    return MG_OK;
}

/* ---- planning ---- */

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

mg_status mg_gpt_plan(mg_gpt *g, mg_backend *be, int B, mg_arena *acts, mg_arena *work) {
    const mg_model_config *c = &g->cfg;
    mg_tp_init(&g->tp, NULL, be);
    g->blk = (mg_block_ctx){.c = c,
                            .be = be,
                            .tp = &g->tp,
                            .B = B,
                            .N = B * c->S,
                            .Nl = mg_model_config_rows(c, B * c->S),
                            .esz = mg_dtype_size(be->compute_dtype),
                            .params = &g->params,
                            .acts = acts,
                            .work = work,
                            .ws = &g->ws};
    const mg_block_ctx *x = &g->blk;
    size_t N = (size_t)x->N, Nl = (size_t)x->Nl, e = x->esz, f = sizeof(float), H = (size_t)c->H;
    const bool split = c->tp > 1;
    g->slot = calloc((size_t)c->L, sizeof *g->slot);
    if (!g->slot) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the activation plan");
    for (int l = 0; l < c->L; l++) MG_CHECK(mg_block_plan_slot(x, &g->slot[l]));
    MG_CHECK(reserve(acts, Nl * H * e, &g->x_final));
    MG_CHECK(reserve(acts, N * H * e, &g->lnf));
    MG_CHECK(reserve(acts, Nl * f, &g->lnf_mean));
    MG_CHECK(reserve(acts, Nl * f, &g->lnf_rstd));

    mg_block_ws *w = &g->ws;
    MG_CHECK(reserve(work, Nl * H * e, &w->dres));
    MG_CHECK(reserve(work, N * H * e, &w->dln));
    MG_CHECK(reserve(work, N * c->attn_l * e, &w->datt));
    MG_CHECK(reserve(work, N * c->qkv_l * e, &w->dqkv));
    MG_CHECK(reserve(work, N * c->fc1_l * e, &w->dfc1));
    /* the activation's gradient: SwiGLU only (GELU's is fused into fc2's backward) */
    MG_CHECK(reserve(work, c->swiglu ? N * c->F_l * e : 0, &w->dact));
    MG_CHECK(reserve(work, split ? N * H * e : 0, &w->part));
    MG_CHECK(reserve(work, N * c->V_l * e, &w->logits));
    MG_CHECK(reserve(work, N * f, &w->losses));
    MG_CHECK(reserve(work, split ? 3 * N * f : 0, &w->ce));
    size_t rope = c->pos == MG_POS_ROPE ? (size_t)c->S * (c->hd / 2) * f : 0;
    MG_CHECK(reserve(work, rope, &w->rope_cos));
    MG_CHECK(reserve(work, rope, &w->rope_sin));
    return MG_OK;
}

mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads, mg_comm *tp_group) {
    const mg_model_config *c = &g->cfg;
    if (tp_group ? mg_comm_size(tp_group) != c->tp || mg_comm_rank(tp_group) != c->tp_rank
                 : c->tp != 1)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "model built for tensor-parallel rank %d of %d, bound to "
                       "a group of %d",
                       c->tp_rank, c->tp, tp_group ? mg_comm_size(tp_group) : 1);
    g->blk.param_buf = params;
    g->blk.grad_buf = grads;
    mg_tp_init(&g->tp, tp_group, be);
    if (c->pos != MG_POS_ROPE) return MG_OK;
    /* RoPE tables as Hugging Face computes them: inv_freq in fp32, angle = pos * inv_freq in fp32
     */
    int half = c->hd / 2;
    size_t n = (size_t)c->S * half;
    float *tab = malloc(2 * n * sizeof *tab);
    if (!tab) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the RoPE table");
    for (int s = 0; s < c->S; s++)
        for (int i = 0; i < half; i++) {
            float inv = (float)(1.0 / pow(c->rope_base, (double)(2 * i) / c->hd));
            float ang = (float)s * inv;
            tab[(size_t)s * half + i] = cosf(ang);
            tab[n + (size_t)s * half + i] = sinf(ang);
        }
    mg_status st = be->copy_h2d(be, mg_block_ws_ptr(&g->blk, g->ws.rope_cos), tab, n * sizeof *tab);
    if (st == MG_OK)
        st = be->copy_h2d(be, mg_block_ws_ptr(&g->blk, g->ws.rope_sin), tab + n, n * sizeof *tab);
    free(tab);
    return st;
}

void *mg_gpt_param(const mg_gpt *g, int i) {
    return mg_block_param(&g->blk, i);
}
float *mg_gpt_grad(const mg_gpt *g, int i) {
    return mg_block_grad(&g->blk, i);
}
void *mg_gpt_logits(const mg_gpt *g) {
    return mg_block_ws_ptr(&g->blk, g->ws.logits);
}

/* ---- forward and backward ---- */

static void *act(const mg_gpt *g, size_t off) {
    return mg_block_act(&g->blk, off);
}
static void *ws(const mg_gpt *g, size_t off) {
    return mg_block_ws_ptr(&g->blk, off);
}

static void *layer_out(mg_gpt *g, int l) {
    return act(g, l + 1 < g->cfg.L ? g->slot[l + 1].x : g->x_final);
}

/* Calls one hook (grads: grads_ready, else params_needed) with the parameters of `list` that
 * the model has (-1 entries dropped). */
static mg_status call_hook(mg_gpt *g, bool grads, const int *list, int n) {
    mg_status (*fn)(void *, const int *, int) =
        grads ? g->hooks.grads_ready : g->hooks.params_needed;
    if (!fn) return MG_OK;
    int idx[MG_GPT_HOOK_MAX], k = 0;
    for (int i = 0; i < n && k < MG_GPT_HOOK_MAX; i++)
        if (list[i] >= 0) idx[k++] = list[i];
    return k ? fn(g->hooks.ctx, idx, k) : MG_OK;
}

static mg_status layer_hook(mg_gpt *g, bool grads, int l) {
    const mg_layer_params *p = &g->layers[l];
    const int list[] = {p->ln1_w, p->ln1_b, p->qkv_w, p->qkv_b, p->proj_w, p->proj_b,
                        p->ln2_w, p->ln2_b, p->fc1_w, p->fc1_b, p->fc2_w,  p->fc2_b};
    return call_hook(g, grads, list, (int)(sizeof list / sizeof *list));
}

/* x0 (Nl,H): this rank's vocabulary rows' embeddings (zero for other tokens) plus the positions
 * (added once, by TP rank 0), reduced over the group. */
static mg_status embed(mg_gpt *g, mg_backend *be, const int32_t *tokens, void *x0) {
    const mg_model_config *c = &g->cfg;
    const void *wpe = g->wpe >= 0 && g->tp.rank == 0 ? mg_gpt_param(g, g->wpe) : NULL;
    void *whole = c->sp ? ws(g, g->ws.part) : x0;
    MG_CHECK(be->embedding_forward(be, whole, tokens, mg_gpt_param(g, g->wte), wpe, g->blk.N, c->S,
                                   c->H, c->v0, c->V_l));
    if (c->sp)
        return mg_tp_reduce_scatter(&g->tp, x0, whole, (size_t)g->blk.Nl * c->H, be->compute_dtype);
    return mg_tp_all_reduce(&g->tp, x0, (size_t)g->blk.N * c->H, be->compute_dtype, MG_REDUCE_SUM);
}

mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    const mg_model_config *c = &g->cfg;
    const mg_block_ctx *x = &g->blk;
    MG_CHECK(call_hook(g, false, (const int[]){g->wte, g->wpe}, 2));
    MG_CHECK(embed(g, be, tokens, act(g, c->L ? g->slot[0].x : g->x_final)));
    for (int l = 0; l < c->L; l++) {
        MG_CHECK(layer_hook(g, false, l));
        MG_CHECK(mg_attention_forward(x, &g->layers[l], &g->slot[l]));
        MG_CHECK(mg_mlp_forward(x, &g->layers[l], &g->slot[l], layer_out(g, l)));
    }
    MG_CHECK(call_hook(g, false, (const int[]){g->lnf_w, g->lnf_b, g->out_w}, 3));
    MG_CHECK(mg_block_norm_forward(x, act(g, g->lnf), act(g, g->lnf_mean), act(g, g->lnf_rstd),
                                   act(g, g->x_final), g->lnf_w, g->lnf_b));
    /* logits of this rank's vocabulary rows: the output layer is column-parallel */
    return be->linear_forward(be, mg_gpt_logits(g), act(g, g->lnf), mg_gpt_param(g, g->out_w), NULL,
                              NULL, g->blk.N, c->H, c->V_l);
}

/* Megatron's VocabParallelCrossEntropy over the group: the global row maximum, the global sum
 * of exponentials and the target's logit from the rank that owns it. */
static mg_status vocab_parallel_loss(mg_gpt *g, mg_backend *be, const int32_t *targets,
                                     const float *dloss, float *losses) {
    const mg_model_config *c = &g->cfg;
    size_t N = (size_t)g->blk.N;
    float *rowmax = ws(g, g->ws.ce), *sums = rowmax + N;
    void *logits = mg_gpt_logits(g);
    MG_CHECK(be->cross_entropy_max(be, rowmax, logits, g->blk.N, c->V_l));
    MG_CHECK(mg_tp_all_reduce(&g->tp, rowmax, N, MG_F32, MG_REDUCE_MAX));
    MG_CHECK(be->cross_entropy_sums(be, sums, logits, rowmax, targets, c->v0, g->blk.N, c->V_l));
    MG_CHECK(mg_tp_all_reduce(&g->tp, sums, 2 * N, MG_F32, MG_REDUCE_SUM));
    return be->cross_entropy_finish(be, logits, losses, rowmax, sums, targets, dloss, c->v0,
                                    g->blk.N, c->V_l);
}

mg_status mg_gpt_loss(mg_gpt *g, mg_backend *be, const int32_t *targets, const float *dloss,
                      float *loss_acc, float loss_scale) {
    float *losses = ws(g, g->ws.losses);
    if (g->cfg.tp == 1)
        MG_CHECK(be->cross_entropy_fused(be, mg_gpt_logits(g), losses, targets, dloss, g->blk.N,
                                         g->cfg.V));
    else
        MG_CHECK(vocab_parallel_loss(g, be, targets, dloss, losses));
    return be->sum_f32(be, loss_acc, losses, NULL, (size_t)g->blk.N, loss_scale);
}

mg_status mg_gpt_backward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    const mg_model_config *c = &g->cfg;
    const mg_block_ctx *x = &g->blk;
    void *dres = ws(g, g->ws.dres), *dln = ws(g, g->ws.dln);
    /* head: logits = lnf @ W_out^T; the logits buffer holds d(logits) after mg_gpt_loss */
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, g->out_w), NULL, mg_gpt_logits(g),
                                 act(g, g->lnf), mg_gpt_param(g, g->out_w), NULL, g->blk.N, c->H,
                                 c->V_l));
    if (g->out_w != g->wte) MG_CHECK(call_hook(g, true, &g->out_w, 1));
    MG_CHECK(be->memset_zero(be, dres, (size_t)g->blk.Nl * c->H * g->blk.esz));
    MG_CHECK(mg_block_norm_backward(x, dres, dln, act(g, g->x_final), act(g, g->lnf_mean),
                                    act(g, g->lnf_rstd), g->lnf_w, g->lnf_b));
    MG_CHECK(call_hook(g, true, (const int[]){g->lnf_w, g->lnf_b}, 2));
    for (int l = c->L - 1; l >= 0; l--) {
        MG_CHECK(mg_mlp_backward(x, &g->layers[l], &g->slot[l], dres));
        MG_CHECK(mg_attention_backward(x, &g->layers[l], &g->slot[l], dres));
        MG_CHECK(layer_hook(g, true, l));
    }
    /* the embedding's input gradient, whole on every rank (gathered under SP) */
    const void *dx0;
    MG_CHECK(mg_block_row_parallel_dout(x, dres, &dx0));
    MG_CHECK(be->embedding_backward(be, mg_gpt_grad(g, g->wte),
                                    g->wpe >= 0 ? mg_gpt_grad(g, g->wpe) : NULL, dx0, tokens,
                                    g->blk.N, c->S, c->H, c->v0, c->V_l));
    return call_hook(g, true, (const int[]){g->wte, g->wpe}, 2);
}

void mg_gpt_free(mg_gpt *g) {
    mg_params_free(&g->params);
    free(g->layers);
    free(g->slot);
    memset(g, 0, sizeof *g);
}
