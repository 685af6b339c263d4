/* The fp8 workspace (model/fp8.h): what mg_fp8_plan reserves, where each tensor's copies live
 * in it (model/fp8_plan.h: the offsets the casts in model/fp8.c look up), its state at bind, and
 * which parameters --fp8-param-gather keeps as bytes. */
#include "model/fp8_plan.h"

#include "core/env.h"
#include "core/fp8.h"
#include "core/fp8_block.h"

#include <stdlib.h>

size_t mg_fp8_align(size_t n) {
    return (n + FP8_ALIGN - 1) & ~(size_t)(FP8_ALIGN - 1);
}

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

static size_t max2(size_t a, size_t b) {
    return a > b ? a : b;
}

/* The elements of linear j's weight (the larger of a dense MLP's and an MoE layer's shared
 * experts'; a routed expert's for the experts' linears). */
size_t mg_fp8_weight_elems(const mg_model_config *c, int j) {
    size_t H = (size_t)c->H;
    switch (j) {
    case MG_FP8_QKV:
        return (size_t)c->qkv_l * H;
    case MG_FP8_PROJ:
        return H * (size_t)c->attn_l;
    case MG_FP8_FC1:
        return max2((size_t)c->fc1_l, (size_t)c->moe.shared_fc1) * H;
    case MG_FP8_FC2:
        return H * max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    case MG_FP8_EXP_FC1:
        return (size_t)c->moe.fc1 * H;
    default:
        return H * (size_t)c->moe.F;
    }
}

/* The (rows, columns) of dense linear j's weight (QKV to fc2), the larger of a dense MLP's and
 * an MoE layer's shared experts' where they differ. */
static void weight_dims(const mg_model_config *c, int j, size_t *OC, size_t *IC) {
    const size_t H = (size_t)c->H;
    switch (j) {
    case MG_FP8_QKV:
        *OC = (size_t)c->qkv_l, *IC = H;
        return;
    case MG_FP8_PROJ:
        *OC = H, *IC = (size_t)c->attn_l;
        return;
    case MG_FP8_FC1:
        *OC = max2((size_t)c->fc1_l, (size_t)c->moe.shared_fc1), *IC = H;
        return;
    default:
        *OC = H, *IC = max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    }
}

/* Blockwise: floats of one fp8 layer's weight tile scales (each weight's grid, then its
 * transpose's), and where linear j's start. */
size_t mg_fp8_weight_tiles(const mg_model_config *c, int j) {
    size_t at = 0, OC, IC;
    for (int i = 0; i < j && i < MG_FP8_EXP_FC1; i++) {
        weight_dims(c, i, &OC, &IC);
        at += mg_fp8_tile_floats((int)OC, (int)IC) + mg_fp8_tile_floats((int)IC, (int)OC);
    }
    return at;
}

bool mg_fp8_experts_on(const mg_block_ctx *x) {
    return x->c->fp8_experts && x->fp8_grouped;
}

/* The weight of dense linear j (QKV to fc2) of layer p: an MoE layer's fc1 and fc2 are its
 * shared experts'. */
int mg_fp8_dense_weight(const mg_layer_params *p, int j) {
    switch (j) {
    case MG_FP8_QKV:
        return p->qkv_w;
    case MG_FP8_PROJ:
        return p->proj_w;
    case MG_FP8_FC1:
        return p->moe ? p->moe->sh_fc1_w : p->fc1_w;
    default:
        return p->moe ? p->moe->sh_fc2_w : p->fc2_w;
    }
}

void mg_fp8_mark_weights(mg_param_table *pt, const mg_layer_params *layers, int n_layers,
                         const mg_model_config *c, bool fp8_grouped) {
    for (int i = 0; i < pt->n; i++) pt->p[i].fp8_tensor = -1;
    if (!c->fp8_params) return;
    for (int l = 0; l < n_layers; l++) {
        const mg_layer_params *p = &layers[l];
        if (p->fp8 < 0) continue;
        for (int j = 0; j < MG_FP8_EXP_FC1; j++) {
            int w = mg_fp8_dense_weight(p, j);
            if (w >= 0) pt->p[w].fp8_tensor = 3 * (p->fp8 + j) + 1;
        }
        if (!p->moe || !c->fp8_experts || !fp8_grouped) continue;
        for (int e = 0; e < c->moe.E_l; e++) {
            pt->p[p->moe->fc1_w[e]].fp8_tensor = 3 * (p->fp8 + MG_FP8_EXP_FC1) + 1;
            pt->p[p->moe->fc2_w[e]].fp8_tensor = 3 * (p->fp8 + MG_FP8_EXP_FC2) + 1;
        }
    }
}

/* The weights of linear j in an fp8 layer: this rank's experts for the experts' linears (none
 * where they do not compute in fp8). */
static size_t weight_count(const mg_block_ctx *x, int j) {
    if (j < MG_FP8_EXP_FC1) return 1;
    return mg_fp8_experts_on(x) ? (size_t)x->c->moe.E_l : 0;
}

/* The columns of linear j's input (the larger of a dense MLP's and an MoE layer's shared
 * experts'); 0 for the experts' linears, whose inputs are not kept. */
size_t mg_fp8_input_cols(const mg_model_config *c, int j) {
    switch (j) {
    case MG_FP8_PROJ:
        return (size_t)c->attn_l;
    case MG_FP8_FC2:
        return max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    case MG_FP8_QKV:
    case MG_FP8_FC1: /* QKV and fc1 read a norm's output */
        return (size_t)c->H;
    default:
        return 0;
    }
}

/* Bytes of one fp8 layer's weight copies, and where linear j's starts among them: for each of
 * its weights the row-major bytes (each at an FP8_ALIGN boundary), then as many transposes. */
size_t mg_fp8_weight_copies(const mg_block_ctx *x, int j) {
    size_t at = 0;
    for (int i = 0; i < j; i++)
        at += 2 * weight_count(x, i) * mg_fp8_align(mg_fp8_weight_elems(x->c, i));
    return at;
}

/* Bytes of one fp8 layer's input transposes (N rows each), and where linear j's starts. */
size_t mg_fp8_input_copies(const mg_model_config *c, size_t N, int j) {
    size_t at = 0;
    for (int i = 0; i < j; i++) at += mg_fp8_align(N * mg_fp8_input_cols(c, i));
    return at;
}

/* Floats of one fp8 layer's kept input transposes' block scales (blockwise: each input column's
 * 1 x 128 blocks of the N rows), and where linear j's start. */
size_t mg_fp8_input_scales(const mg_model_config *c, size_t N, int j) {
    size_t at = 0, nb = (size_t)mg_fp8_block_count((int)N);
    for (int i = 0; i < j; i++) at += mg_fp8_input_cols(c, i) * nb;
    return at;
}

/* The bytes of a grouped cast of the experts' R rows of `cols` columns: the rows, then the
 * grouped transpose (core/fp8.h) at the next FP8_ALIGN boundary. */
static size_t grouped_bytes(const mg_block_ctx *x, size_t cols) {
    const mg_moe_ws *m = x->moe;
    size_t R = (size_t)m->R, ld = (size_t)mg_fp8_group_ld(m->R, (int64_t)x->c->moe.ep * m->El);
    return mg_fp8_align(R * cols) + mg_fp8_align(cols * ld);
}

/* Bytes of one fp8 layer's kept expert-input transposes and where linear j's starts: fc1's input
 * (H columns), then fc2's (the experts' F), each `cols x ld` bytes (the grouped transpose). */
size_t mg_fp8_expert_input_copies(const mg_block_ctx *x, int j) {
    const mg_model_config *c = x->c;
    size_t ld = (size_t)mg_fp8_group_ld(x->moe->R, (int64_t)c->moe.ep * x->moe->El);
    size_t at = 0;
    if (j > MG_FP8_EXP_FC1) at += mg_fp8_align((size_t)c->H * ld);
    if (j > MG_FP8_EXP_FC2) at += mg_fp8_align((size_t)c->moe.F * ld);
    return at;
}

mg_status mg_fp8_plan(const mg_block_ctx *x, mg_block_ws *w, int n_linears, int keep_slots) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, H = (size_t)c->H, nt = 3 * (size_t)n_linears;
    bool on = n_linears > 0;
    w->fp8_tensors = (int)nt;
    /* [amax (nt) | scale (nt) | history (nt, len)] */
    MG_CHECK(
        reserve(x->work, on ? (2 + (size_t)c->fp8_len) * nt * sizeof(float) : 0, &w->fp8_state));
    MG_CHECK(reserve(x->work, on ? nt * SINV_STRIDE * sizeof(float) : 0, &w->fp8_sinv));
    /* the largest input and output gradient of the four linears (an MoE layer's
     * shared experts take its MLP's), as bytes and their transposes */
    size_t F = max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    size_t fc1 = max2((size_t)c->fc1_l, (size_t)c->moe.shared_fc1);
    size_t in = max2(max2(H, (size_t)c->attn_l), F);
    size_t out = max2(max2((size_t)c->qkv_l, H), fc1);
    MG_CHECK(reserve(x->work, on ? 2 * mg_fp8_align(N * in) : 0, &w->fp8_x));
    /* every fp8 layer's weight copies, which the pass's first microbatch writes */
    size_t layers = (size_t)n_linears / (size_t)mg_fp8_layer_linears(c);
    MG_CHECK(reserve(x->work, layers * mg_fp8_weight_copies(x, MG_FP8_LINEARS), &w->fp8_wcopy));
    w->fp8_keep_inputs = on && keep_slots > 0;
    /* under SP with delayed scaling each rank casts its own rows and the group gathers the bytes
     * (the amaxes meet at the step's end); tensorwise needs the whole tensor's amax first */
    w->fp8_sp_bytes = w->fp8_keep_inputs && c->sp && c->tp > 1 && !c->fp8_current &&
                      !c->fp8_block && !mg_env_int("MG_TEST_FP8_SP_BF16", 0);
    size_t kept = w->fp8_keep_inputs ? (size_t)keep_slots * layers : 0;
    MG_CHECK(reserve(x->work, kept * mg_fp8_input_copies(c, N, MG_FP8_LINEARS), &w->fp8_xt));
    MG_CHECK(reserve(x->work, on ? 2 * mg_fp8_align(N * out) : 0, &w->fp8_dy));
    /* blockwise: each cast's block scales (along rows, then along columns), each weight's tiles' */
    const bool blk = on && c->fp8_block;
    if (blk && !x->fp8_blocks)
        return MG_FAIL(MG_ERR_USAGE,
                       "--fp8-recipe blockwise: this backend has no block-scaled fp8 casts and "
                       "products (the cpu and cuda backends have); use --fp8-recipe delayed or "
                       "tensorwise");
    const size_t nbN = (size_t)mg_fp8_block_count((int)N);
    MG_CHECK(reserve(x->work,
                     blk ? (N * mg_fp8_block_count((int)in) + in * nbN) * sizeof(float) : 0,
                     &w->fp8_bxs));
    MG_CHECK(reserve(x->work,
                     blk ? (N * mg_fp8_block_count((int)out) + out * nbN) * sizeof(float) : 0,
                     &w->fp8_bdys));
    MG_CHECK(reserve(x->work,
                     blk ? layers * mg_fp8_weight_tiles(c, MG_FP8_EXP_FC1) * sizeof(float) : 0,
                     &w->fp8_bws));
    MG_CHECK(reserve(x->work,
                     blk ? kept * mg_fp8_input_scales(c, N, MG_FP8_LINEARS) * sizeof(float) : 0,
                     &w->fp8_xts));
    MG_CHECK(reserve(x->work, on && c->fp8_current ? 3 * sizeof(float) : 0, &w->fp8_now));
    /* --fp8-param-gather with tensorwise scaling: every tensor's [amax | scale | history] of the
     * weights' casts after the update (mg_fp8_param_scales) */
    MG_CHECK(reserve(x->work, on && c->fp8_current && c->fp8_params ? 6 * nt * sizeof(float) : 0,
                     &w->fp8_pw));
    /* the routed experts' casts: inputs of H or F columns, gradients of fc1 or H */
    const bool ex = on && mg_fp8_experts_on(x) && x->moe && x->moe->R > 0;
    const size_t e_in = max2(H, (size_t)c->moe.F), e_out = max2((size_t)c->moe.fc1, H);
    MG_CHECK(reserve(x->work, ex ? grouped_bytes(x, e_in) : 0, &w->fp8_ex));
    MG_CHECK(reserve(x->work, ex ? grouped_bytes(x, e_out) : 0, &w->fp8_edy));
    /* the routed experts' input transposes, kept as the dense linears' are; not under a receive
     * budget, whose extra rounds cast through the same rows (their backward casts again) */
    w->fp8_keep_experts = ex && w->fp8_keep_inputs && !x->moe->budget;
    MG_CHECK(reserve(x->work,
                     w->fp8_keep_experts ? kept * mg_fp8_expert_input_copies(x, MG_FP8_LINEARS) : 0,
                     &w->fp8_ext));
    return MG_OK;
}

mg_status mg_fp8_reset(const mg_block_ctx *x) {
    const mg_block_ws *w = x->ws;
    size_t nt = (size_t)w->fp8_tensors;
    if (nt == 0) return MG_OK;
    size_t n = (2 + (size_t)x->c->fp8_len) * nt;
    float *h = calloc(n, sizeof *h);
    if (!h) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the fp8 state");
    for (size_t t = 0; t < nt; t++) h[nt + t] = 1.0f;
    mg_status st = x->be->copy_h2d(x->be, mg_block_ws_ptr(x, w->fp8_state), h, n * sizeof *h);
    if (st == MG_OK && x->c->fp8_current) /* [amax 0 | scale 1 | history 0] */
        st = x->be->copy_h2d(x->be, mg_block_ws_ptr(x, w->fp8_now), (const float[]){0, 1, 0},
                             3 * sizeof(float));
    for (int k = 0; st == MG_OK && x->c->fp8_current && x->c->fp8_params && k < 2; k++)
        st = x->be->copy_h2d(x->be, (float *)mg_block_ws_ptr(x, w->fp8_pw) + 3 * nt * k, h,
                             3 * nt * sizeof *h); /* the same for the dense and expert halves */
    free(h);
    return st;
}
