/* A layer's linears and fp8 (model/fp8.h): the fp8 state, and the casts of a linear's operands. */
#include "model/fp8.h"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

#include <stdlib.h>

#define FP8_ALIGN 256 /* where a transposed copy starts after the row-major one */
#define SINV_STRIDE                                                                                \
    4 /* floats between two tensors' scale inverses: cuBLASLt refuses a scale                      \
         pointer that is not 16-byte aligned */

static size_t align_up(size_t n) {
    return (n + FP8_ALIGN - 1) & ~(size_t)(FP8_ALIGN - 1);
}

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

static size_t max2(size_t a, size_t b) {
    return a > b ? a : b;
}

/* The elements of linear j's weight (the larger of a dense MLP's and an MoE layer's shared
 * experts'). */
static size_t weight_elems(const mg_model_config *c, int j) {
    size_t H = (size_t)c->H;
    switch (j) {
    case MG_FP8_QKV:
        return (size_t)c->qkv_l * H;
    case MG_FP8_PROJ:
        return H * (size_t)c->attn_l;
    case MG_FP8_FC1:
        return max2((size_t)c->fc1_l, (size_t)c->moe.shared_fc1) * H;
    default:
        return H * max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    }
}

/* The columns of linear j's input (the larger of a dense MLP's and an MoE layer's shared
 * experts'). */
static size_t input_cols(const mg_model_config *c, int j) {
    switch (j) {
    case MG_FP8_PROJ:
        return (size_t)c->attn_l;
    case MG_FP8_FC2:
        return max2((size_t)c->F_l, (size_t)c->moe.shared_F);
    default: /* QKV and fc1 read a norm's output */
        return (size_t)c->H;
    }
}

/* Bytes of one fp8 layer's weight copies, and where linear j's starts among them: each the
 * row-major bytes, then the transpose at the next FP8_ALIGN boundary. */
static size_t weight_copies(const mg_model_config *c, int j) {
    size_t at = 0;
    for (int i = 0; i < j; i++) at += 2 * align_up(weight_elems(c, i));
    return at;
}

/* Bytes of one fp8 layer's input transposes (N rows each), and where linear j's starts. */
static size_t input_copies(const mg_model_config *c, size_t N, int j) {
    size_t at = 0;
    for (int i = 0; i < j; i++) at += align_up(N * input_cols(c, i));
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
    MG_CHECK(reserve(x->work, on ? 2 * align_up(N * in) : 0, &w->fp8_x));
    /* every fp8 layer's weight copies, which the pass's first microbatch writes */
    size_t layers = (size_t)n_linears / MG_FP8_LINEARS;
    MG_CHECK(reserve(x->work, layers * weight_copies(c, MG_FP8_LINEARS), &w->fp8_wcopy));
    w->fp8_keep_inputs = on && keep_slots > 0;
    size_t kept = w->fp8_keep_inputs ? (size_t)keep_slots * layers : 0;
    MG_CHECK(reserve(x->work, kept * input_copies(c, N, MG_FP8_LINEARS), &w->fp8_xt));
    MG_CHECK(reserve(x->work, on ? 2 * align_up(N * out) : 0, &w->fp8_dy));
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
static mg_status current_scale(const mg_block_ctx *x, const void *in, int rows, int cols,
                               int format) {
    mg_backend *be = x->be;
    float *now = mg_block_ws_ptr(x, x->ws->fp8_now);
    MG_CHECK(be->memset_zero(be, now, sizeof(float)));
    MG_CHECK(be->fp8_cast(be, NULL, NULL, in, rows, cols, now + 1, NULL, now, format));
    MG_CHECK(mg_tp_all_reduce(x->tp, now, 1, MG_F32, MG_REDUCE_MAX));
    const float top = mg_fp8_max((mg_fp8_format)format);
    return be->fp8_update(be, now, 1, 1, 0, MG_FP8_AMAX_MOST_RECENT, top, top);
}

/* What a cast writes: the row-major bytes, the transposed ones, or both. */
enum { ROWS = 1, COLS = 2 };

/* Where tensor t's cast leaves the inverse of its scale. */
static float *sinv_of(const mg_block_ctx *x, size_t t) {
    return (float *)mg_block_ws_ptr(x, x->ws->fp8_sinv) + SINV_STRIDE * t;
}

/* The row-major bytes (forms & ROWS) and the transposed ones (forms & COLS) of a (rows, cols)
 * tensor in the workspace copy at `to`: the transpose at the next FP8_ALIGN boundary. */
static uint8_t *copy_rows(const mg_block_ctx *x, size_t to, int forms) {
    return forms & ROWS ? (uint8_t *)mg_block_ws_ptr(x, to) : NULL;
}
static uint8_t *copy_cols(const mg_block_ctx *x, size_t to, int rows, int cols, int forms) {
    return forms & COLS ? (uint8_t *)mg_block_ws_ptr(x, to) + align_up((size_t)rows * cols) : NULL;
}

/* Tensor t's bytes of in (rows, cols): row-major into data, transposed into data_t (either may
 * be NULL); *o describes them. */
static mg_status cast(const mg_block_ctx *x, size_t t, uint8_t *data, uint8_t *data_t,
                      const void *in, int rows, int cols, int format, mg_fp8_tensor *o) {
    const mg_block_ws *w = x->ws;
    mg_backend *be = x->be;
    size_t nt = (size_t)w->fp8_tensors;
    float *sinv = sinv_of(x, t);
    const float *scale;
    float *amax = NULL;
    if (x->c->fp8_current) {
        MG_CHECK(current_scale(x, in, rows, cols, format));
        scale = (const float *)mg_block_ws_ptr(x, w->fp8_now) + 1;
    } else {
        float *state = mg_block_ws_ptr(x, w->fp8_state);
        scale = state + nt + t;
        /* the amax of the step: training passes only (an evaluation keeps the scales) */
        if (x->pass.on) amax = state + t;
    }
    MG_CHECK(be->fp8_cast(be, data, data_t, in, rows, cols, scale, sinv, amax, format));
    *o = (mg_fp8_tensor){data, data_t, sinv, format};
    return MG_OK;
}

/* Linear j's weight copy in layer p (workspace offset), checked against its shape. */
static mg_status weight_copy(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                             int OC, int IC, size_t *at) {
    const mg_model_config *c = x->c;
    if ((size_t)OC * (size_t)IC > weight_elems(c, (int)j))
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 weight copy of linear %d: %d x %d exceeds its %zu",
                       (int)j, OC, IC, weight_elems(c, (int)j));
    size_t layer = (size_t)(p->fp8 / MG_FP8_LINEARS);
    *at = x->ws->fp8_wcopy + layer * weight_copies(c, MG_FP8_LINEARS) + weight_copies(c, (int)j);
    return MG_OK;
}

/* Where linear j of layer p keeps its input's transpose from the training forward for the
 * backward, in the pass's slot; NULL where it does not (model/gpt.c decides: not with
 * --no-fp8-wgrad, nor with tensorwise scaling under a pipeline; never in an evaluation). */
static uint8_t *input_kept(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                           int IC) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, each = input_copies(c, N, MG_FP8_LINEARS);
    if (!x->ws->fp8_keep_inputs || !x->pass.on || (size_t)IC > input_cols(c, (int)j)) return NULL;
    size_t layers = (size_t)x->ws->fp8_tensors / (3 * MG_FP8_LINEARS);
    size_t layer = (size_t)x->pass.slot * layers + (size_t)(p->fp8 / MG_FP8_LINEARS);
    return (uint8_t *)mg_block_ws_ptr(x, x->ws->fp8_xt) + layer * each + input_copies(c, N, (int)j);
}

/* The weight's bytes and transpose as the pass's first microbatch cast them. */
static mg_fp8_tensor weight_cached(const mg_block_ctx *x, size_t t, size_t at, int OC, int IC) {
    uint8_t *base = mg_block_ws_ptr(x, at);
    return (mg_fp8_tensor){base, base + align_up((size_t)OC * IC), sinv_of(x, t), MG_FP8_E4M3};
}

mg_status mg_fp8_linear_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                void *out, void *gelu_pre, const void *inp, const void *w,
                                const void *bias, const void *residual, int IC, int OC) {
    mg_backend *be = x->be;
    if (p->fp8 < 0) {
        if (gelu_pre) return be->linear_gelu_forward(be, out, gelu_pre, inp, w, bias, x->N, IC, OC);
        return be->linear_forward(be, out, inp, w, bias, residual, x->N, IC, OC);
    }
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    mg_fp8_tensor fi, fw;
    /* the input's transpose too where the backward will read it */
    MG_CHECK(cast(x, t, copy_rows(x, x->ws->fp8_x, ROWS), input_kept(x, p, j, IC), inp, x->N, IC,
                  MG_FP8_E4M3, &fi));
    /* the weight once per pass: its first microbatch's forward writes the bytes and the
     * transpose, which the other microbatches and every backward of the pass read (the weights
     * and the scales change only between passes) */
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    if (x->pass.mb == 0)
        MG_CHECK(cast(x, t + 1, copy_rows(x, at, ROWS), copy_cols(x, at, OC, IC, COLS), w, OC, IC,
                      MG_FP8_E4M3, &fw));
    else
        fw = weight_cached(x, t + 1, at, OC, IC);
    return be->fp8_linear_forward(be, out, gelu_pre, &fi, &fw, bias, residual, x->N, IC, OC);
}

mg_status mg_fp8_linear_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 void *dinp, float *dw, float *dbias, const void *dout,
                                 const void *inp, const void *w, const void *gelu_pre, int IC,
                                 int OC) {
    mg_backend *be = x->be;
    if (p->fp8 < 0)
        return be->linear_backward(be, dinp, dw, dbias, dout, inp, w, gelu_pre, x->N, IC, OC);
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    mg_fp8_tensor fd, fi = {NULL, NULL, NULL, MG_FP8_E4M3}, fw = fi;
    /* the gradient's rows feed dinp, its transpose dw, with the input's transpose (a call may
     * ask for one gradient: the tensor-parallel overlap takes them apart, model/block.h);
     * --no-fp8-wgrad: dw from the compute dtype's gradient and input instead */
    const bool dw8 = dw && x->c->fp8_wgrad;
    const int dforms = (dinp ? ROWS : 0) | (dw8 ? COLS : 0);
    if (!dforms) /* nothing in fp8: the compute dtype's weight (and bias) gradient alone */
        return be->linear_backward(be, NULL, dw, dbias, dout, inp, w, NULL, x->N, IC, OC);
    size_t dy = x->ws->fp8_dy;
    MG_CHECK(cast(x, t + 2, copy_rows(x, dy, dforms), copy_cols(x, dy, x->N, OC, dforms), dout,
                  x->N, OC, x->c->fp8_bwd, &fd));
    /* the input's transpose as the forward kept it, else cast again */
    uint8_t *kept = dw8 ? input_kept(x, p, j, IC) : NULL;
    if (kept)
        fi = (mg_fp8_tensor){NULL, kept, sinv_of(x, t), MG_FP8_E4M3};
    else if (dw8)
        MG_CHECK(cast(x, t, NULL, copy_cols(x, x->ws->fp8_x, x->N, IC, COLS), inp, x->N, IC,
                      MG_FP8_E4M3, &fi));
    /* the weight's transpose for dinp, as the pass's first forward cast it */
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    if (dinp) fw = weight_cached(x, t + 1, at, OC, IC);
    MG_CHECK(be->fp8_linear_backward(be, dinp, dw8 ? dw : NULL, dbias, dout, &fd, &fi, &fw,
                                     gelu_pre, x->N, IC, OC));
    return dw && !dw8 ? be->linear_backward(be, NULL, dw, NULL, dout, inp, w, NULL, x->N, IC, OC)
                      : MG_OK;
}
