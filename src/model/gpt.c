/* GPT model: parameter registration, activation planning, and the forward/backward walk over
 * the vocab-parallel embedding, blocks (model/block.h) and the vocab-parallel head. */
#include "model/gpt.h"

#include "model/fp8.h"
#include "model/gpt_slots.h"
#include "model/layer_graphs.h"
#include "model/recompute.h"

#include "config/flags.h"
#include "core/env.h"
#include "core/rng.h"
#include "model/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WTE_NAME "embedding.word_embeddings.weight" /* megatron-core's word embedding */

/* ---- parameters ---- */

static mg_status add_norm(mg_gpt *g, const char *prefix, int *w, int *b) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    /* --apply-layernorm-1p: the weight is zero-centred (the norm scales by 1 + w) */
    mg_init_kind init = g->cfg.norm_1p ? MG_INIT_ZEROS : MG_INIT_ONES;
    MG_CHECK(mg_params_add(&g->params, name, 1, g->cfg.H, 0, -1, 1, false, init, 0, w));
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

/* An MoE layer's MLP (Megatron-core's names with the grouped experts, TEGroupedMLP): the router,
 * this expert-parallel rank's experts by their global number, the shared experts. Expert
 * weights are marked `expert`: their gradients are reduced over the expert-data-parallel
 * group. */
static mg_status add_moe(mg_gpt *g, int l, float std, float out_std, mg_layer_params *p) {
    const mg_model_config *c = &g->cfg;
    const mg_moe_config *m = &c->moe;
    char name[96];
    mg_moe_params *mp = calloc(1, sizeof *mp);
    int *rows = calloc((size_t)4 * m->E_l, sizeof *rows);
    if (!mp || !rows) {
        free(mp);
        free(rows);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the MoE layer table");
    }
    p->moe = mp;
    mp->fc1_w = rows;
    mp->fc2_w = rows + m->E_l;
    mp->fc1_b = c->bias ? rows + 2 * m->E_l : NULL;
    mp->fc2_b = c->bias ? rows + 3 * m->E_l : NULL;
    mp->index = g->n_moe++;
    snprintf(name, sizeof name, "decoder.layers.%d.mlp.router.weight", l);
    MG_CHECK(mg_params_add(&g->params, name, 2, m->E, c->H, -1, 1, true, MG_INIT_NORMAL, std,
                           &mp->router_w));
    for (int j = 0; j < m->E_l; j++) {
        int e = m->e0 + j, ignored;
        const struct {
            const char *what;
            int64_t out, in;
            bool vec;
            float std;
            int *row;
        } t[] = {{"linear_fc1.weight", m->fc1, c->H, false, std, &mp->fc1_w[j]},
                 {"linear_fc1.bias", m->fc1, 0, true, 0, c->bias ? &mp->fc1_b[j] : NULL},
                 {"linear_fc2.weight", c->H, m->F, false, out_std, &mp->fc2_w[j]},
                 {"linear_fc2.bias", c->H, 0, true, 0, c->bias ? &mp->fc2_b[j] : NULL}};
        for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
            if (t[i].vec && !c->bias) continue;
            snprintf(name, sizeof name, "decoder.layers.%d.mlp.experts.%s%d", l, t[i].what, e);
            int *row = t[i].row ? t[i].row : &ignored;
            MG_CHECK(mg_params_add(&g->params, name, t[i].vec ? 1 : 2, t[i].out, t[i].in, -1, 1,
                                   !t[i].vec, t[i].vec ? MG_INIT_ZEROS : MG_INIT_NORMAL, t[i].std,
                                   row));
            g->params.p[*row].expert = true;
        }
    }
    mp->sh_fc1_w = mp->sh_fc1_b = mp->sh_fc2_w = mp->sh_fc2_b = -1;
    if (m->shared_F > 0) {
        char pre[80];
        snprintf(pre, sizeof pre, "decoder.layers.%d.mlp.shared_experts.linear_fc1", l);
        MG_CHECK(add_linear(g, pre, m->shared_fc1, c->H, -1, c->swiglu ? 2 : 1, std, &mp->sh_fc1_w,
                            &mp->sh_fc1_b));
        snprintf(pre, sizeof pre, "decoder.layers.%d.mlp.shared_experts.linear_fc2", l);
        MG_CHECK(
            add_linear(g, pre, c->H, m->shared_F, -1, 1, out_std, &mp->sh_fc2_w, &mp->sh_fc2_b));
    }
    return MG_OK;
}

static mg_status add_layer(mg_gpt *g, int l, float std, float out_std, mg_layer_params *p) {
    const mg_model_config *c = &g->cfg;
    char pre[80];
#define PREFIX(s) (snprintf(pre, sizeof pre, "decoder.layers.%d.%s", l, s), pre)
    MG_CHECK(add_norm(g, PREFIX("input_layernorm"), &p->ln1_w, &p->ln1_b));
    MG_CHECK(add_linear(g, PREFIX("self_attention.linear_qkv"), c->qkv_dim, c->H, 0, 1, std,
                        &p->qkv_w, &p->qkv_b));
    MG_CHECK(add_linear(g, PREFIX("self_attention.linear_proj"), c->H, c->attn_dim, 1, 1, out_std,
                        &p->proj_w, &p->proj_b));
    MG_CHECK(add_norm(g, PREFIX("pre_mlp_layernorm"), &p->ln2_w, &p->ln2_b));
    p->fc1_w = p->fc1_b = p->fc2_w = p->fc2_b = -1;
    p->moe = NULL;
    p->layer = l;
    if (g->is_moe[l]) return add_moe(g, l, std, out_std, p);
    MG_CHECK(add_linear(g, PREFIX("mlp.linear_fc1"), c->fc1_dim, c->H, 0, c->swiglu ? 2 : 1, std,
                        &p->fc1_w, &p->fc1_b));
    MG_CHECK(
        add_linear(g, PREFIX("mlp.linear_fc2"), c->H, c->F, 1, 1, out_std, &p->fc2_w, &p->fc2_b));
#undef PREFIX
    return MG_OK;
}

/* This pipeline rank's chunks (parallel/pipeline/layers.h), in virtual-stage order. */
static mg_status place_chunks(mg_gpt *g, const mg_config *cfg) {
    mg_layers_params lp = mg_layers_params_of(cfg);
    int V;
    MG_CHECK(mg_layers_check(&lp, &V));
    g->pp = lp.pp;
    if (g->pp_rank < 0 || g->pp_rank >= g->pp)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline rank %d of %d", g->pp_rank, g->pp);
    g->chunks = calloc((size_t)V, sizeof *g->chunks);
    if (!g->chunks) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the chunk table");
    g->n_chunks = V;
    int first = 0;
    for (int v = 0; v < V; v++) {
        mg_layers_chunk lc;
        MG_CHECK(mg_layers_place(&lp, g->pp_rank, v, &lc));
        g->chunks[v] = (mg_gpt_chunk){.first = first,
                                      .count = lc.count,
                                      .offset = lc.offset,
                                      .pre = g->pp_rank == 0 && v == 0,
                                      .post = g->pp_rank == g->pp - 1 && v == V - 1};
        first += lc.count;
    }
    g->n_layers = first;
    return MG_OK;
}

mg_status mg_gpt_build(mg_gpt *g, const mg_config *cfg, int tp_rank, int pp_rank, int ep_rank) {
    memset(g, 0, sizeof *g);
    g->wte = g->wpe = g->lnf_w = g->lnf_b = g->out_w = -1;
    g->pp_rank = pp_rank;
    MG_CHECK(mg_model_config_from(&g->cfg, cfg, tp_rank));
    if (ep_rank < 0 || ep_rank >= g->cfg.moe.ep)
        return MG_FAIL(MG_ERR_INTERNAL, "expert-parallel rank %d of %d", ep_rank, g->cfg.moe.ep);
    mg_model_config_set_ep(&g->cfg, ep_rank);
    g->is_moe = calloc((size_t)g->cfg.L, 1);
    if (!g->is_moe) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the layer pattern");
    MG_CHECK(mg_config_moe_layers(cfg, g->is_moe, g->cfg.L));
    MG_CHECK(place_chunks(g, cfg));
    const mg_model_config *c = &g->cfg;
    mg_params_set_tp(&g->params, c->tp_rank, c->tp);
    float std = (float)c->init_std;
    float out_std = (float)(c->init_std / sqrt(2.0 * c->L)); /* Megatron's scaled init */
    g->layers = calloc((size_t)(g->n_layers ? g->n_layers : 1), sizeof *g->layers);
    if (!g->layers) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the layer table");
    const char *wte_name = WTE_NAME;
    for (int v = 0; v < g->n_chunks; v++) {
        const mg_gpt_chunk *ch = &g->chunks[v];
        if (ch->pre) {
            MG_CHECK(mg_params_add(&g->params, wte_name, 2, c->V, c->H, 0, 1, true, MG_INIT_NORMAL,
                                   std, &g->wte));
            g->params.p[g->wte].vocab_rows = true;
            g->params.p[g->wte].embedding_or_output = true;
            if (c->pos == MG_POS_LEARNED)
                MG_CHECK(mg_params_add(&g->params, "embedding.position_embeddings.weight", 2, c->P,
                                       c->H, -1, 1, true, MG_INIT_NORMAL, std, &g->wpe));
        }
        for (int i = 0; i < ch->count; i++) {
            mg_layer_params *lp = &g->layers[ch->first + i];
            MG_CHECK(add_layer(g, ch->offset + i, std, out_std, lp));
            /* fp8 linears (model/fp8.h): mg_fp8_layer_linears per fp8 layer, numbered over this
             * rank's layers */
            lp->fp8 = mg_config_fp8_layer(cfg, ch->offset + i)
                          ? mg_fp8_layer_linears(&g->cfg) * g->n_fp8++
                          : -1;
        }
        if (!ch->post) continue;
        MG_CHECK(add_norm(g, "decoder.final_layernorm", &g->lnf_w, &g->lnf_b));
        if (c->tied && g->wte >= 0) {
            g->out_w = g->wte;
            continue;
        }
        MG_CHECK(mg_params_add(&g->params, "output_layer.weight", 2, c->V, c->H, 0, 1, true,
                               MG_INIT_NORMAL, std, &g->out_w));
        g->params.p[g->out_w].vocab_rows = true;
        g->params.p[g->out_w].embedding_or_output = true;
        if (c->tied) { /* the last stage's copy of the first stage's embedding (see gpt.h) */
            mg_param_meta *m = &g->params.p[g->out_w];
            m->id = mg_param_id(wte_name);
            m->embedding_group = m->shared = true;
        }
    }
    if (g->wte >= 0 && c->tied && g->out_w != g->wte) g->params.p[g->wte].embedding_group = true;
    if (g->params.n == 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "pipeline rank %d holds no layers and neither the embedding nor the "
                       "output layer; give each stage at least one layer",
                       pp_rank);
    mg_params_layout(&g->params);
    return MG_OK;
}

/* ---- planning ---- */

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

mg_gpt_target mg_gpt_target_of(const mg_gpt *g, mg_backend *be, int B) {
    const mg_model_config *c = &g->cfg;
    return (mg_gpt_target){be->compute_dtype,
                           be->attention_saved_bytes(be, B, c->S, c->nq_l, c->hd),
                           be->fp8_grouped_linear_forward && be->fp8_grouped_linear_backward,
                           be->fp8_cast_blocks != NULL};
}

mg_gpt_target mg_gpt_target_for(const mg_gpt *g, mg_device device, mg_dtype compute, int B) {
    const mg_model_config *c = &g->cfg;
    return (mg_gpt_target){
        compute, mg_backend_attention_saved_bytes(device, B, c->S, c->nq_l, c->hd),
        device == MG_DEVICE_CPU || compute == MG_BF16,
        true /* a prediction: the recipe's buffers as the cpu backend runs it */};
}

mg_status mg_gpt_plan(mg_gpt *g, mg_gpt_target target, int B, int n_slots, mg_arena *acts,
                      mg_arena *work) {
    const mg_model_config *c = &g->cfg;
    if (n_slots < 1) return MG_FAIL(MG_ERR_INTERNAL, "%d activation slots", n_slots);
    mg_tp_init(&g->tp, NULL, NULL);
    g->blk = (mg_block_ctx){.c = c,
                            .att_saved = target.attention_saved,
                            .fp8_grouped = target.fp8_grouped,
                            .fp8_blocks = target.fp8_blocks,
                            .tp = &g->tp,
                            .B = B,
                            .N = B * c->S,
                            .Nl = mg_model_config_rows(c, B * c->S),
                            .esz = mg_dtype_size(target.compute),
                            .params = &g->params,
                            .acts = acts,
                            .work = work,
                            .ws = &g->ws,
                            .rng = &g->rng};
    const mg_block_ctx *x = &g->blk;
    size_t N = (size_t)x->N, Nl = (size_t)x->Nl, e = x->esz, f = sizeof(float), H = (size_t)c->H;
    const bool split = c->tp > 1;
    g->n_slots = n_slots;
    /* the forward's input bytes wait for the backward in the microbatch's slot; with several
     * slots (a pipeline) only where their scales hold for the whole step (delayed scaling: a
     * tensorwise cast's scale is its microbatch's, and the next microbatch's cast replaces it;
     * blockwise keeps each slot's block scales with its bytes) */
    g->fp8_keep = g->n_fp8 > 0 && c->fp8_wgrad && (n_slots == 1 || !c->fp8_current) &&
                  !mg_env_int("MG_TEST_FP8_RECAST", 0);
    g->slot_layers = 0;
    for (int v = 0; v < g->n_chunks; v++)
        if (g->chunks[v].count > g->slot_layers) g->slot_layers = g->chunks[v].count;
    size_t n_entries = (size_t)n_slots * (size_t)(g->slot_layers ? g->slot_layers : 1);
    g->slot = calloc(n_entries, sizeof *g->slot);
    g->x_part = calloc(n_entries, sizeof *g->x_part);
    g->x_out = calloc((size_t)n_slots, sizeof *g->x_out);
    g->slot_pass = calloc((size_t)n_slots, sizeof *g->slot_pass); /* no dropout until set */
    for (int k = 0; g->slot_pass && k < n_slots; k++) g->slot_pass[k].slot = k;
    if (!g->slot || !g->x_part || !g->x_out || !g->slot_pass)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the activation plan");
    if (g->n_moe > 0) { /* before the slots, which take the MoE plan's row counts */
        MG_CHECK(mg_moe_plan(&g->moe_ws, c, x->N, x->esz, g->n_moe, work));
        g->blk.moe = &g->moe_ws;
    }
    MG_CHECK(mg_recompute_plan(g));
    size_t before = acts->size;
    for (int k = 0; k < n_slots; k++) {
        for (int i = 0; i < g->slot_layers; i++) {
            bool dense, moe;
            mg_gpt_position_kinds(g, i, &dense, &moe);
            mg_layer_slot *ent = &g->slot[(size_t)k * g->slot_layers + i];
            unsigned rc = g->rc_pos[i];
            MG_CHECK(mg_block_plan_slot(x, ent, dense, moe, rc, &g->rc_scratch[i % g->rc_groups]));
            /* --distribute-saved-activations: this rank's share of the input */
            MG_CHECK(reserve(acts, rc & MG_SLOT_RC_DIST ? Nl * H * e / (size_t)c->tp : 0,
                             &g->x_part[(size_t)k * g->slot_layers + i]));
        }
        MG_CHECK(reserve(acts, Nl * H * e, &g->x_out[k]));
    }
    g->slot_bytes = (acts->size - before) / (size_t)n_slots;

    mg_block_ws *w = &g->ws;
    MG_CHECK(reserve(work, Nl * H * e, &w->dres));
    MG_CHECK(reserve(work, g->pp > 1 ? Nl * H * e : 0, &w->dio));
    MG_CHECK(reserve(work, N * H * e, &w->dln));
    MG_CHECK(reserve(work, N * c->attn_l * e, &w->datt));
    MG_CHECK(reserve(work, N * c->qkv_l * e, &w->dqkv));
    /* the MLP's (and an MoE layer's shared experts') fc1 and activation gradients; the
     * activation's for SwiGLU only (GELU's is fused into fc2's backward) */
    size_t fc1 = (size_t)(c->fc1_l > c->moe.shared_fc1 ? c->fc1_l : c->moe.shared_fc1);
    size_t F = (size_t)(c->F_l > c->moe.shared_F ? c->F_l : c->moe.shared_F);
    MG_CHECK(reserve(work, N * fc1 * e, &w->dfc1));
    MG_CHECK(reserve(work, c->swiglu ? N * F * e : 0, &w->dact));
    MG_CHECK(reserve(work, split ? N * H * e : 0, &w->part));
    MG_CHECK(reserve(work, c->hidden_dropout > 0 ? Nl * H * e : 0, &w->ddrop));
    /* the head (post chunk only): final norm, logits, losses */
    const bool head = g->lnf_w >= 0;
    MG_CHECK(reserve(work, head ? N * H * e : 0, &g->lnf));
    MG_CHECK(reserve(work, head ? Nl * f : 0, &g->lnf_mean));
    MG_CHECK(reserve(work, head ? Nl * f : 0, &g->lnf_rstd));
    MG_CHECK(reserve(work, head ? N * c->V_l * e : 0, &w->logits));
    MG_CHECK(reserve(work, head ? N * f : 0, &w->losses));
    MG_CHECK(reserve(work, head && split ? 3 * N * f : 0, &w->ce));
    size_t rope = c->pos == MG_POS_ROPE ? (size_t)c->S * (c->rd / 2) * f : 0;
    MG_CHECK(reserve(work, rope, &w->rope_cos));
    MG_CHECK(reserve(work, rope, &w->rope_sin));
    MG_CHECK(reserve(work, c->norm_1p ? H * e : 0, &w->ones));
    MG_CHECK(reserve(work, c->norm_1p ? H * e : 0, &w->norm_w));
    MG_CHECK(reserve(work, g->rc_any ? Nl * H * e : 0, &w->rc_out));
    MG_CHECK(
        mg_fp8_plan(&g->blk, w, mg_fp8_layer_linears(c) * g->n_fp8, g->fp8_keep ? n_slots : 0));
    return MG_OK;
}

void mg_gpt_rope_tables(float *cos_tab, float *sin_tab, int S, int rd, double base) {
    /* inv_freq in fp32, angle = pos * inv_freq in fp32; the first rd channels of a head rotate
     * (--rotary-percent), so the frequencies are base^(-2i/rd) */
    int half = rd / 2;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            float inv = (float)(1.0 / pow(base, (double)(2 * i) / rd));
            float ang = (float)s * inv;
            cos_tab[(size_t)s * half + i] = cosf(ang);
            sin_tab[(size_t)s * half + i] = sinf(ang);
        }
}

/* The ones that --apply-layernorm-1p adds to the stored norm weights (block.c). */
static mg_status bind_ones(mg_gpt *g, mg_backend *be) {
    float *one = malloc((size_t)g->cfg.H * sizeof *one);
    if (!one) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the norms' ones");
    for (int i = 0; i < g->cfg.H; i++) one[i] = 1.0f;
    mg_status st = be->upload_f32(be, mg_block_ws_ptr(&g->blk, g->ws.ones), one, (size_t)g->cfg.H);
    free(one);
    return st;
}

void mg_gpt_mark_fp8_weights(mg_gpt *g, bool fp8_grouped) {
    mg_fp8_mark_weights(&g->params, g->layers, g->n_layers, &g->cfg, fp8_grouped);
}

void mg_gpt_bind_fp8_params(mg_gpt *g, uint8_t *bytes) {
    g->blk.fp8_param_buf = bytes;
}

mg_status mg_gpt_bind(mg_gpt *g, mg_backend *be, void *params, float *grads, mg_comm *tp_group) {
    const mg_model_config *c = &g->cfg;
    if (tp_group ? mg_comm_size(tp_group) != c->tp || mg_comm_rank(tp_group) != c->tp_rank
                 : c->tp != 1)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "model built for tensor-parallel rank %d of %d, bound to "
                       "a group of %d",
                       c->tp_rank, c->tp, tp_group ? mg_comm_size(tp_group) : 1);
    if (mg_dtype_size(be->compute_dtype) != g->blk.esz)
        return MG_FAIL(MG_ERR_INTERNAL, "model planned for %zu-byte activations, bound to %s's %s",
                       g->blk.esz, be->name, mg_dtype_name(be->compute_dtype));
    g->blk.be = be;
    g->blk.param_buf = params;
    g->blk.grad_buf = grads;
    mg_tp_init(&g->tp, tp_group, be);
    MG_CHECK(mg_model_rng_bind(&g->rng, be, c->seed, g->pp_rank, c->tp_rank));
    if (g->n_moe > 0) MG_CHECK(mg_backend_require_moe(be)); /* the MoE ops of backend_ops.h */
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].moe) MG_CHECK(mg_moe_bind_pointers(&g->blk, g->layers[l].moe));
    if (c->norm_1p) MG_CHECK(bind_ones(g, be));
    MG_CHECK(mg_fp8_reset(&g->blk));
    if (c->pos != MG_POS_ROPE) return MG_OK;
    size_t n = (size_t)c->S * (c->rd / 2);
    float *tab = malloc(2 * n * sizeof *tab);
    if (!tab) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the RoPE table");
    mg_gpt_rope_tables(tab, tab + n, c->S, c->rd, c->rope_base);
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

void *mg_gpt_chunk_input(const mg_gpt *g, int c, int s) {
    return mg_gpt_layer_input(g, c, s, 0);
}
void *mg_gpt_chunk_output(const mg_gpt *g, int c, int s) {
    return mg_gpt_layer_input(g, c, s, g->chunks[c].count);
}
void *mg_gpt_chunk_dout(const mg_gpt *g) {
    return ws(g, g->pp > 1 ? g->ws.dio : g->ws.dres);
}
const void *mg_gpt_chunk_dinput(const mg_gpt *g) {
    return ws(g, g->ws.dres);
}
size_t mg_gpt_hidden_numel(const mg_gpt *g) {
    return (size_t)g->blk.Nl * (size_t)g->cfg.H;
}

/* Calls one hook (grads: grads_ready, else params_needed) with the parameters of `list` that
 * the model has (-1 entries dropped). */
static mg_status call_hook(mg_gpt *g, bool grads, const int *list, int n) {
    mg_status (*fn)(void *, const int *, int) =
        grads ? g->hooks.grads_ready : g->hooks.params_needed;
    if (!fn) return MG_OK;
    int idx[MG_GPT_HOOK_MAX], k = 0;
    for (int i = 0; i < n; i++) {
        if (list[i] >= 0) idx[k++] = list[i];
        if (k == MG_GPT_HOOK_MAX || (i == n - 1 && k > 0)) { /* long lists in pieces */
            MG_CHECK(fn(g->hooks.ctx, idx, k));
            k = 0;
        }
    }
    return MG_OK;
}

static mg_status layer_hook(mg_gpt *g, bool grads, int l) {
    const mg_layer_params *p = &g->layers[l];
    const int list[] = {p->ln1_w, p->ln1_b, p->qkv_w, p->qkv_b, p->proj_w, p->proj_b,
                        p->ln2_w, p->ln2_b, p->fc1_w, p->fc1_b, p->fc2_w,  p->fc2_b};
    MG_CHECK(call_hook(g, grads, list, (int)(sizeof list / sizeof *list)));
    const mg_moe_params *mp = p->moe;
    if (!mp) return MG_OK;
    int El = g->cfg.moe.E_l;
    const int shared[] = {mp->router_w, mp->sh_fc1_w, mp->sh_fc1_b, mp->sh_fc2_w, mp->sh_fc2_b};
    MG_CHECK(call_hook(g, grads, shared, (int)(sizeof shared / sizeof *shared)));
    MG_CHECK(call_hook(g, grads, mp->fc1_w, El));
    MG_CHECK(call_hook(g, grads, mp->fc2_w, El));
    if (mp->fc1_b) MG_CHECK(call_hook(g, grads, mp->fc1_b, El));
    if (mp->fc2_b) MG_CHECK(call_hook(g, grads, mp->fc2_b, El));
    return MG_OK;
}

/* x0 (Nl,H): this rank's vocabulary rows' embeddings (zero for other tokens) plus the positions
 * (added once, by TP rank 0), reduced over the group. */
static mg_status embed(mg_gpt *g, mg_backend *be, const int32_t *tokens, void *x0) {
    const mg_model_config *c = &g->cfg;
    const void *wpe = g->wpe >= 0 && g->tp.rank == 0 ? mg_gpt_param(g, g->wpe) : NULL;
    void *whole = c->sp ? ws(g, g->ws.part) : x0;
    MG_CHECK(be->embedding_forward(be, whole, tokens, mg_gpt_param(g, g->wte), wpe, g->blk.pass.pos,
                                   g->blk.N, c->S, c->H, c->v0, c->V_l));
    return mg_tp_reduce(&g->tp, x0, whole, (size_t)(c->sp ? g->blk.Nl : g->blk.N) * c->H,
                        be->compute_dtype, c->sp);
}

static mg_status check_chunk(const mg_gpt *g, int c, int s) {
    if (c < 0 || c >= g->n_chunks || s < 0 || s >= g->n_slots)
        return MG_FAIL(MG_ERR_INTERNAL, "chunk %d of %d, slot %d of %d", c, g->n_chunks, s,
                       g->n_slots);
    return MG_OK;
}

void mg_gpt_set_dropout(mg_gpt *g, int s, bool train, int mb, const int64_t *iteration,
                        int sample0) {
    if (s < 0 || s >= g->n_slots) return;
    mg_block_pass *p = &g->slot_pass[s]; /* the documents stay */
    p->on = train;
    p->mb = mb;
    p->iteration = iteration;
    p->sample0 = sample0;
}

void mg_gpt_set_documents(mg_gpt *g, int s, const int32_t *pos, const int32_t *doc_start) {
    if (s < 0 || s >= g->n_slots) return;
    g->slot_pass[s].pos = pos;
    g->slot_pass[s].doc_start = doc_start;
}

/* A layer's sublayer call (attention, dense MLP or MoE; forward or backward), as a closure for
 * its per-layer graph (model/layer_graphs.h). */
typedef struct {
    const mg_block_ctx *x;
    const mg_layer_params *p;
    const mg_layer_slot *s;
    void *buf; /* forward: the sublayer's output (MLP, MoE); backward: dres */
    mg_layer_part part;
    bool backward;
} sublayer_call;

static mg_status sublayer_body(void *ctx) {
    const sublayer_call *c = ctx;
    if (c->part == MG_LAYER_PART_ATTN)
        return c->backward ? mg_attention_backward(c->x, c->p, c->s, c->buf)
                           : mg_attention_forward(c->x, c->p, c->s);
    if (c->part == MG_LAYER_PART_MOE)
        return c->backward ? mg_moe_backward(c->x, c->p, c->s, c->buf)
                           : mg_moe_forward(c->x, c->p, c->s, c->buf);
    return c->backward ? mg_mlp_backward(c->x, c->p, c->s, c->buf)
                       : mg_mlp_forward(c->x, c->p, c->s, c->buf);
}

/* Local layer l's sublayer: through its graph in a training pass with per-layer graphs. */
static mg_status sublayer(mg_gpt *g, int l, mg_layer_part part, bool backward, int slot, int i,
                          void *buf) {
    sublayer_call c = {&g->blk, &g->layers[l], mg_gpt_slot(g, slot, i), buf, part, backward};
    return mg_block_graph(&g->blk, g->layers[l].layer, part, backward, sublayer_body, &c);
}

mg_status mg_gpt_chunk_forward(mg_gpt *g, mg_backend *be, int c, int s, const int32_t *tokens) {
    MG_CHECK(check_chunk(g, c, s));
    const mg_gpt_chunk *ch = &g->chunks[c];
    g->blk.pass = g->slot_pass[s];
    if (ch->pre) {
        MG_CHECK(call_hook(g, false, (const int[]){g->wte, g->wpe}, 2));
        MG_CHECK(embed(g, be, tokens, mg_gpt_chunk_input(g, c, s)));
    }
    for (int i = 0; i < ch->count; i++) {
        int l = ch->first + i;
        MG_CHECK(layer_hook(g, false, l));
        MG_CHECK(mg_recompute_keep_share(g, c, s, i));
        MG_CHECK(sublayer(g, l, MG_LAYER_PART_ATTN, false, s, i, NULL));
        MG_CHECK(sublayer(g, l, g->layers[l].moe ? MG_LAYER_PART_MOE : MG_LAYER_PART_MLP, false, s,
                          i, mg_gpt_layer_input(g, c, s, i + 1)));
    }
    return MG_OK;
}

/* The final norm and the logits of this rank's vocabulary rows (the output layer is
 * column-parallel) from the final residual of slot s. */
static mg_status head_forward(mg_gpt *g, mg_backend *be, int s) {
    const mg_model_config *c = &g->cfg;
    if (g->lnf_w < 0) return MG_FAIL(MG_ERR_INTERNAL, "the head is on the last pipeline stage");
    MG_CHECK(call_hook(g, false, (const int[]){g->lnf_w, g->lnf_b, g->out_w}, 3));
    MG_CHECK(mg_block_norm_forward(&g->blk, ws(g, g->lnf), ws(g, g->lnf_mean), ws(g, g->lnf_rstd),
                                   act(g, g->x_out[s]), g->lnf_w, g->lnf_b));
    return be->linear_forward(be, mg_gpt_logits(g), ws(g, g->lnf), mg_gpt_param(g, g->out_w), NULL,
                              NULL, g->blk.N, c->H, c->V_l);
}

/* The mirror, from the logits' gradients: dres = d(final residual of slot s). */
static mg_status head_backward(mg_gpt *g, mg_backend *be, int s) {
    const mg_model_config *c = &g->cfg;
    void *dres = ws(g, g->ws.dres), *dln = ws(g, g->ws.dln);
    /* logits = lnf @ W_out^T; the logits buffer holds d(logits) after the loss */
    MG_CHECK(be->linear_backward(be, dln, mg_gpt_grad(g, g->out_w), NULL, mg_gpt_logits(g),
                                 ws(g, g->lnf), mg_gpt_param(g, g->out_w), NULL, g->blk.N, c->H,
                                 c->V_l));
    if (g->out_w != g->wte) MG_CHECK(call_hook(g, true, &g->out_w, 1));
    MG_CHECK(be->memset_zero(be, dres, (size_t)g->blk.Nl * c->H * g->blk.esz));
    MG_CHECK(mg_block_norm_backward(&g->blk, dres, dln, act(g, g->x_out[s]), ws(g, g->lnf_mean),
                                    ws(g, g->lnf_rstd), g->lnf_w, g->lnf_b));
    return call_hook(g, true, (const int[]){g->lnf_w, g->lnf_b}, 2);
}

mg_status mg_gpt_chunk_backward(mg_gpt *g, mg_backend *be, int c, int s, const int32_t *tokens) {
    MG_CHECK(check_chunk(g, c, s));
    const mg_gpt_chunk *ch = &g->chunks[c];
    const mg_model_config *cf = &g->cfg;
    g->blk.pass = g->slot_pass[s]; /* the forward's masks, recomputed */
    const mg_block_ctx *x = &g->blk;
    if (ch->post) {
        MG_CHECK(head_backward(g, be, s));
    } else if (g->pp > 1) {
        /* the received d(output) becomes the residual stream's gradient (the two buffers swap:
         * the other one is free once the previous send completed) */
        size_t t = g->ws.dres;
        g->ws.dres = g->ws.dio;
        g->ws.dio = t;
    }
    void *dres = ws(g, g->ws.dres);
    for (int i = ch->count - 1; i >= 0; i--) {
        int l = ch->first + i;
        MG_CHECK(mg_recompute_group(g, c, s, i));
        MG_CHECK(sublayer(g, l, g->layers[l].moe ? MG_LAYER_PART_MOE : MG_LAYER_PART_MLP, true, s,
                          i, dres));
        MG_CHECK(sublayer(g, l, MG_LAYER_PART_ATTN, true, s, i, dres));
        MG_CHECK(layer_hook(g, true, l));
    }
    if (!ch->pre) return MG_OK; /* d(input) stays in dres: mg_gpt_chunk_dinput */
    /* the embedding's input gradient, whole on every rank (gathered under SP) */
    const void *dx0;
    MG_CHECK(mg_block_row_parallel_dout(x, dres, NULL, &dx0));
    MG_CHECK(be->embedding_backward(be, mg_gpt_grad(g, g->wte),
                                    g->wpe >= 0 ? mg_gpt_grad(g, g->wpe) : NULL, dx0, tokens,
                                    x->pass.pos, g->blk.N, cf->S, cf->H, cf->v0, cf->V_l));
    return call_hook(g, true, (const int[]){g->wte, g->wpe}, 2);
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
                      const float *loss_w, float *loss_acc, float loss_scale) {
    float *losses = ws(g, g->ws.losses);
    if (g->cfg.tp == 1)
        MG_CHECK(be->cross_entropy_fused(be, mg_gpt_logits(g), losses, targets, dloss, g->blk.N,
                                         g->cfg.V));
    else
        MG_CHECK(vocab_parallel_loss(g, be, targets, dloss, losses));
    return be->sum_f32(be, loss_acc, losses, loss_w, (size_t)g->blk.N, loss_scale);
}

mg_status mg_gpt_head_loss(mg_gpt *g, mg_backend *be, int s, const int32_t *targets,
                           const float *dloss, const float *loss_w, float *loss_acc,
                           float loss_scale) {
    MG_CHECK(head_forward(g, be, s));
    return mg_gpt_loss(g, be, targets, dloss, loss_w, loss_acc, loss_scale);
}

static mg_status check_whole(const mg_gpt *g) {
    if (g->n_chunks != 1 || !g->chunks[0].pre || !g->chunks[0].post)
        return MG_FAIL(MG_ERR_INTERNAL, "the whole-model walk needs the whole model on one stage");
    return MG_OK;
}

mg_status mg_gpt_forward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    MG_CHECK(check_whole(g));
    MG_CHECK(mg_gpt_chunk_forward(g, be, 0, 0, tokens));
    return head_forward(g, be, 0);
}

mg_status mg_gpt_backward(mg_gpt *g, mg_backend *be, const int32_t *tokens) {
    MG_CHECK(check_whole(g));
    return mg_gpt_chunk_backward(g, be, 0, 0, tokens);
}

float *mg_gpt_moe_load(const mg_gpt *g, int i) {
    return (float *)mg_block_ws_ptr(&g->blk, g->moe_ws.load) + (size_t)i * g->cfg.moe.E;
}
/* The dispatch's rows for N tokens under c (its receive budget or none). */
static mg_status moe_rows(const mg_model_config *c, int N, int *sent, int *received,
                          int *capacity) {
    mg_moe_ws w = {0};
    mg_arena a;
    mg_arena_init(&a, "moe rows");
    mg_status st = mg_moe_plan(&w, c, N, 2, c->moe.n_layers, &a);
    *sent = w.Rp;
    *received = w.R;
    *capacity = w.capacity;
    mg_moe_free(&w);
    mg_arena_free(&a);
    return st;
}

mg_status mg_gpt_moe_rows(const mg_gpt *g, int N, mg_gpt_moe_dispatch *out) {
    mg_model_config worst = g->cfg;
    worst.moe.budget = 0;
    MG_CHECK(moe_rows(&g->cfg, N, &out->sent, &out->received, &out->capacity));
    int sent, cap;
    MG_CHECK(moe_rows(&worst, N, &sent, &out->received_worst, &cap));
    out->act_elems_per_row = mg_moe_row_act_elems(&g->cfg);
    out->work_elems_per_row = mg_moe_row_work_elems(&g->cfg);
    return MG_OK;
}

void mg_gpt_expert_grads_unwritten(mg_gpt *g) {
    for (int i = 0; i < g->n_moe && g->moe_ws.grads_unwritten; i++)
        g->moe_ws.grads_unwritten[i] = true;
}

float *mg_gpt_moe_bias(const mg_gpt *g, int i) {
    return g->cfg.moe.expert_bias ? mg_block_ws_ptr(&g->blk, g->moe_ws.bias[i]) : NULL;
}

const char *mg_gpt_saved_name(const mg_param_meta *p) {
    return p->shared ? WTE_NAME : p->name;
}

void mg_gpt_moe_bias_name(const mg_gpt *g, int i, char *out, size_t cap) {
    const char *w = "";
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].moe && g->layers[l].moe->index == i)
            w = g->params.p[g->layers[l].moe->router_w].name;
    size_t n = strlen(w), suffix = strlen("weight");
    if (n >= suffix) n -= suffix;
    snprintf(out, cap, "%.*sexpert_bias", (int)n, w);
}

void mg_gpt_free(mg_gpt *g) {
    mg_model_rng_free(&g->rng); /* before the backend goes (model/gpt.h) */
    mg_params_free(&g->params);
    for (int l = 0; g->layers && l < g->n_layers; l++)
        if (g->layers[l].moe) {
            free(g->layers[l].moe->fc1_w); /* the four row arrays are one allocation */
            free(g->layers[l].moe);
        }
    mg_moe_free(&g->moe_ws);
    free(g->is_moe);
    free(g->layers);
    free(g->chunks);
    free(g->slot);
    free(g->x_part);
    free(g->rc_pos);
    free(g->rc_scratch);
    free(g->x_out);
    free(g->slot_pass);
    memset(g, 0, sizeof *g);
}
