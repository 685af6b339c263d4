/* GPT model: parameter registration, activation planning, and the forward/backward walk over
 * embedding, blocks (attention.c, mlp.c) and the output head. */
#include "model/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ---- */

static mg_status add_norm(mg_gpt *g, const char *prefix, int *w, int *b) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    MG_CHECK(mg_params_add(&g->params, name, 1, g->cfg.H, 0, -1, 1, false, MG_INIT_ONES, 0, w));
    *b = -1;
    if (g->cfg.norm == MG_NORM_LAYERNORM) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        MG_CHECK(
            mg_params_add(&g->params, name, 1, g->cfg.H, 0, -1, 1, false, MG_INIT_ZEROS, 0, b));
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

mg_status mg_gpt_build(mg_gpt *g, const mg_config *cfg) {
    memset(g, 0, sizeof *g);
    MG_CHECK(mg_model_config_from(&g->cfg, cfg));
    const mg_model_config *c = &g->cfg;
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
    g->B = B;
    g->N = B * c->S;
    g->acts = acts;
    g->work = work;
    g->esz = mg_dtype_size(be->compute_dtype);
    size_t N = (size_t)g->N, e = g->esz, f = sizeof(float);
    g->slot = calloc((size_t)c->L, sizeof *g->slot);
    if (!g->slot) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the activation plan");
    for (int l = 0; l < c->L; l++) {
        mg_layer_slot *s = &g->slot[l];
        MG_CHECK(reserve(acts, N * c->H * e, &s->x));
        MG_CHECK(reserve(acts, N * c->H * e, &s->ln1));
        MG_CHECK(reserve(acts, N * f, &s->ln1_mean));
        MG_CHECK(reserve(acts, N * f, &s->ln1_rstd));
        MG_CHECK(reserve(acts, N * c->qkv_dim * e, &s->qkv));
        MG_CHECK(reserve(acts, N * c->attn_dim * e, &s->att));
        MG_CHECK(
            reserve(acts, be->attention_saved_bytes(be, B, c->S, c->nq, c->hd), &s->att_saved));
        MG_CHECK(reserve(acts, N * c->H * e, &s->mid));
        MG_CHECK(reserve(acts, N * c->H * e, &s->ln2));
        MG_CHECK(reserve(acts, N * f, &s->ln2_mean));
        MG_CHECK(reserve(acts, N * f, &s->ln2_rstd));
        MG_CHECK(reserve(acts, N * c->fc1_dim * e, &s->fc1));
        MG_CHECK(reserve(acts, N * c->F * e, &s->act));
    }
    MG_CHECK(reserve(acts, N * c->H * e, &g->x_final));
    MG_CHECK(reserve(acts, N * c->H * e, &g->lnf));
    MG_CHECK(reserve(acts, N * f, &g->lnf_mean));
    MG_CHECK(reserve(acts, N * f, &g->lnf_rstd));

    MG_CHECK(reserve(work, N * c->H * e, &g->w_dres));
    MG_CHECK(reserve(work, N * c->H * e, &g->w_dln));
    MG_CHECK(reserve(work, N * c->attn_dim * e, &g->w_datt));
    MG_CHECK(reserve(work, N * c->qkv_dim * e, &g->w_dqkv));
    MG_CHECK(reserve(work, N * c->fc1_dim * e, &g->w_dfc1));
    /* the activation's gradient: SwiGLU only (GELU's is fused into fc2's backward) */
    MG_CHECK(reserve(work, c->swiglu ? N * c->F * e : 0, &g->w_dact));
    MG_CHECK(reserve(work, N * c->V * e, &g->w_logits));
    MG_CHECK(reserve(work, N * f, &g->w_losses));
    size_t rope = c->pos == MG_POS_ROPE ? (size_t)c->S * (c->hd / 2) * f : 0;
    MG_CHECK(reserve(work, rope, &g->w_rope_cos));
    MG_CHECK(reserve(work, rope, &g->w_rope_sin));
    return MG_OK;
}

mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads) {
    g->param_buf = params;
    g->grad_buf = grads;
    const mg_model_config *c = &g->cfg;
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
    mg_status st = be->copy_h2d(be, mg_gpt_ws(g, g->w_rope_cos), tab, n * sizeof *tab);
    if (st == MG_OK) st = be->copy_h2d(be, mg_gpt_ws(g, g->w_rope_sin), tab + n, n * sizeof *tab);
    free(tab);
    return st;
}

void *mg_gpt_param(const mg_gpt *g, int i) {
    return (char *)g->param_buf + g->params.p[i].offset * g->esz;
}
float *mg_gpt_grad(const mg_gpt *g, int i) {
    return g->grad_buf + g->params.p[i].offset;
}
void *mg_gpt_logits(const mg_gpt *g) {
    return mg_gpt_ws(g, g->w_logits);
}

/* ---- norms ---- */

mg_status mg_gpt_norm_forward(mg_gpt *g, mg_backend *be, void *out, float *mean, float *rstd,
                              const void *x, int w, int b) {
    if (g->cfg.norm == MG_NORM_RMSNORM)
        return be->rmsnorm_forward(be, out, rstd, x, mg_gpt_param(g, w), g->N, g->cfg.H,
                                   g->cfg.eps);
    return be->layernorm_forward(be, out, mean, rstd, x, mg_gpt_param(g, w),
                                 mg_gpt_param_or_null(g, b), g->N, g->cfg.H, g->cfg.eps);
}

mg_status mg_gpt_norm_backward(mg_gpt *g, mg_backend *be, void *dx, const void *dout, const void *x,
                               const float *mean, const float *rstd, int w, int b) {
    if (g->cfg.norm == MG_NORM_RMSNORM)
        return be->rmsnorm_backward(be, dx, mg_gpt_grad(g, w), dout, x, mg_gpt_param(g, w), rstd,
                                    g->N, g->cfg.H);
    return be->layernorm_backward(be, dx, mg_gpt_grad(g, w), mg_gpt_grad_or_null(g, b), dout, x,
                                  mg_gpt_param(g, w), mean, rstd, g->N, g->cfg.H);
}

/* ---- forward and backward ---- */

static void *layer_out(mg_gpt *g, int l) {
    return mg_gpt_act(g, l + 1 < g->cfg.L ? g->slot[l + 1].x : g->x_final);
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

mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    const mg_model_config *c = &g->cfg;
    void *x0 = mg_gpt_act(g, c->L ? g->slot[0].x : g->x_final);
    MG_CHECK(call_hook(g, false, (const int[]){g->wte, g->wpe}, 2));
    MG_CHECK(be->embedding_forward(be, x0, tokens, mg_gpt_param(g, g->wte),
                                   mg_gpt_param_or_null(g, g->wpe), g->N, c->S, c->H));
    for (int l = 0; l < c->L; l++) {
        MG_CHECK(layer_hook(g, false, l));
        MG_CHECK(mg_attention_forward(g, be, l));
        MG_CHECK(mg_mlp_forward(g, be, l, layer_out(g, l)));
    }
    MG_CHECK(call_hook(g, false, (const int[]){g->lnf_w, g->lnf_b, g->out_w}, 3));
    MG_CHECK(mg_gpt_norm_forward(g, be, mg_gpt_act(g, g->lnf), mg_gpt_act(g, g->lnf_mean),
                                 mg_gpt_act(g, g->lnf_rstd), mg_gpt_act(g, g->x_final), g->lnf_w,
                                 g->lnf_b));
    MG_CHECK(be->linear_forward(be, mg_gpt_logits(g), mg_gpt_act(g, g->lnf),
                                mg_gpt_param(g, g->out_w), NULL, NULL, g->N, c->H, c->V));
    return MG_OK;
}

mg_status mg_gpt_loss(mg_gpt *g, mg_backend *be, const int32_t *targets, const float *dloss,
                      float *loss_acc, float loss_scale) {
    float *losses = mg_gpt_ws(g, g->w_losses);
    MG_CHECK(be->cross_entropy_fused(be, mg_gpt_logits(g), losses, targets, dloss, g->N, g->cfg.V));
    MG_CHECK(be->sum_f32(be, loss_acc, losses, NULL, (size_t)g->N, loss_scale));
    return MG_OK;
}

mg_status mg_gpt_backward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    const mg_model_config *c = &g->cfg;
    void *dres = mg_gpt_ws(g, g->w_dres), *dln = mg_gpt_ws(g, g->w_dln);
    /* head: logits = lnf @ W_out^T; the logits buffer holds d(logits) after mg_gpt_loss */
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, g->out_w), NULL, mg_gpt_logits(g),
                                 mg_gpt_act(g, g->lnf), mg_gpt_param(g, g->out_w), NULL, g->N, c->H,
                                 c->V));
    if (g->out_w != g->wte) MG_CHECK(call_hook(g, true, &g->out_w, 1));
    MG_CHECK(be->memset_zero(be, dres, (size_t)g->N * c->H * g->esz));
    MG_CHECK(mg_gpt_norm_backward(g, be, dres, dln, mg_gpt_act(g, g->x_final),
                                  mg_gpt_act(g, g->lnf_mean), mg_gpt_act(g, g->lnf_rstd), g->lnf_w,
                                  g->lnf_b));
    MG_CHECK(call_hook(g, true, (const int[]){g->lnf_w, g->lnf_b}, 2));
    for (int l = c->L - 1; l >= 0; l--) {
        MG_CHECK(mg_mlp_backward(g, be, l, dres));
        MG_CHECK(mg_attention_backward(g, be, l, dres));
        MG_CHECK(layer_hook(g, true, l));
    }
    MG_CHECK(be->embedding_backward(be, mg_gpt_grad(g, g->wte), mg_gpt_grad_or_null(g, g->wpe),
                                    dres, tokens, g->N, c->S, c->H));
    return call_hook(g, true, (const int[]){g->wte, g->wpe}, 2);
}

void mg_gpt_free(mg_gpt *g) {
    mg_params_free(&g->params);
    free(g->layers);
    free(g->slot);
    memset(g, 0, sizeof *g);
}
