/* fp8 linears (model/fp8.h): their state, and the casts of a linear's tensors. */
#include "model/fp8.h"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

#include <stdlib.h>

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

static size_t max2(size_t a, size_t b) {
    return a > b ? a : b;
}

mg_status mg_fp8_plan(const mg_block_ctx *x, mg_block_ws *w, int n_linears) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, H = (size_t)c->H, e = x->esz, nt = 3 * (size_t)n_linears;
    bool on = n_linears > 0;
    w->fp8_tensors = (int)nt;
    /* [amax (nt) | scale (nt) | history (nt, len)] */
    MG_CHECK(
        reserve(x->work, on ? (2 + (size_t)c->fp8_len) * nt * sizeof(float) : 0, &w->fp8_state));
    /* the largest input, weight and output gradient of the four linears (an MoE layer's
     * shared experts take its MLP's) */
    size_t F = max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    size_t fc1 = max2((size_t)c->fc1_l, (size_t)c->moe.shared_fc1);
    size_t in = max2(max2(H, (size_t)c->attn_l), F);
    size_t wt = max2(max2((size_t)c->qkv_l, fc1) * H, H * max2((size_t)c->attn_l, F));
    size_t out = max2(max2((size_t)c->qkv_l, H), fc1);
    MG_CHECK(reserve(x->work, on ? N * in * e : 0, &w->fp8_x));
    MG_CHECK(reserve(x->work, on ? wt * e : 0, &w->fp8_w));
    MG_CHECK(reserve(x->work, on ? N * out * e : 0, &w->fp8_dy));
    MG_CHECK(reserve(x->work, on && c->fp8_current ? 3 * sizeof(float) : 0, &w->fp8_now));
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
    free(h);
    return st;
}

/* --fp8-recipe tensorwise: the scale of a tensor from its amax now, reduced over the
 * tensor-parallel group (a shard's amax is the whole tensor's there), as Transformer Engine's
 * current scaling: fp8_max / amax, the largest fp32 value where that overflows (an all-zero
 * tensor keeps the previous scale: it casts to zeros whatever the scale). The scale lands in
 * fp8_now[1]. */
static mg_status current_scale(const mg_block_ctx *x, const void *in, size_t n, int format) {
    mg_backend *be = x->be;
    float *now = mg_block_ws_ptr(x, x->ws->fp8_now);
    MG_CHECK(be->memset_zero(be, now, sizeof(float)));
    MG_CHECK(be->fp8_quantize(be, NULL, in, n, now + 1, now, format)); /* the amax alone */
    MG_CHECK(mg_tp_all_reduce(x->tp, now, 1, MG_F32, MG_REDUCE_MAX));
    const float top = mg_fp8_max((mg_fp8_format)format);
    return be->fp8_update(be, now, 1, 1, 0, MG_FP8_AMAX_MOST_RECENT, top, top);
}

/* Tensor t's fp8 values of *p (n elements) into the workspace at `to`; *p points there after. */
static mg_status cast(const mg_block_ctx *x, size_t t, size_t to, const void **p, size_t n,
                      int format) {
    const mg_block_ws *w = x->ws;
    if (x->c->fp8_current) {
        void *out = mg_block_ws_ptr(x, to);
        float *now = mg_block_ws_ptr(x, w->fp8_now);
        MG_CHECK(current_scale(x, *p, n, format));
        MG_CHECK(x->be->fp8_quantize(x->be, out, *p, n, now + 1, NULL, format));
        *p = out;
        return MG_OK;
    }
    size_t nt = (size_t)w->fp8_tensors;
    float *state = mg_block_ws_ptr(x, w->fp8_state);
    void *out = mg_block_ws_ptr(x, to);
    /* the amax of the step: training passes only (an evaluation keeps the scales as they are) */
    MG_CHECK(x->be->fp8_quantize(x->be, out, *p, n, state + nt + t, x->pass.on ? state + t : NULL,
                                 format));
    *p = out;
    return MG_OK;
}

mg_status mg_fp8_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                         const void **inp, size_t n_inp, const void **w, size_t n_w) {
    if (p->fp8 < 0) return MG_OK;
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    MG_CHECK(cast(x, t, x->ws->fp8_x, inp, n_inp, MG_FP8_E4M3));
    return cast(x, t + 1, x->ws->fp8_w, w, n_w, MG_FP8_E4M3);
}

mg_status mg_fp8_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                          const void **dout, size_t n_dout, const void **inp, size_t n_inp,
                          const void **w, size_t n_w) {
    if (p->fp8 < 0) return MG_OK;
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    MG_CHECK(cast(x, t + 2, x->ws->fp8_dy, dout, n_dout, x->c->fp8_bwd));
    return mg_fp8_forward(x, p, j, inp, n_inp, w, n_w);
}
