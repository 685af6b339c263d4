/* A layer's linears and fp8 (model/fp8.h): the casts of a linear's operands and the products
 * on them; the workspace they use is model/fp8_plan.c's. */
#include "model/fp8.h"
#include "model/fp8_plan.h"

#include "core/fp8.h"
#include "core/fp8_block.h"
#include "core/fp8_scaling.h"

#include <limits.h>

/* The rows of a cast that come in groups (the routed experts'): counts (G, backend memory); a
 * cast without them takes every row. */
typedef struct {
    const int32_t *counts;
    int G;
} groups;

/* The magnitudes' maximum of in (rows, cols; the groups' rows where grp; through a GELU's
 * gradient where gelu_pre, fp8_cast's) into *amax (backend memory), which accumulates. */
static mg_status amax_of(const mg_block_ctx *x, const void *in, int rows, int cols, int format,
                         const groups *grp, const void *gelu_pre, float *amax) {
    mg_backend *be = x->be;
    const float *one = (const float *)mg_block_ws_ptr(x, x->ws->fp8_now) + 1; /* any scale */
    if (grp)
        return be->fp8_cast_grouped(be, NULL, NULL, in, grp->counts, grp->G, rows, cols, one, NULL,
                                    amax, format);
    return be->fp8_cast(be, NULL, NULL, in, rows, cols, one, NULL, amax, format, gelu_pre, NULL);
}

/* --fp8-recipe tensorwise: the scale from the amax in fp8_now[0] (what amax_of gathered since it
 * was zeroed), reduced over the tensor-parallel group (a shard's amax is the whole tensor's
 * there), as Transformer Engine's current scaling: fp8_max / amax, the largest fp32 value where
 * that overflows (an all-zero tensor keeps the previous scale: it casts to zeros whatever the
 * scale). The scale lands in fp8_now[1]. */
static mg_status current_scale_done(const mg_block_ctx *x, int format) {
    mg_backend *be = x->be;
    float *now = mg_block_ws_ptr(x, x->ws->fp8_now);
    MG_CHECK(mg_tp_all_reduce(x->tp, now, 1, MG_F32, MG_REDUCE_MAX));
    const float top = mg_fp8_max((mg_fp8_format)format);
    return be->fp8_update(be, now, 1, 1, 0, MG_FP8_AMAX_MOST_RECENT, top, top);
}

static mg_status current_scale(const mg_block_ctx *x, const void *in, int rows, int cols,
                               int format, const groups *grp, const void *gelu_pre) {
    float *now = mg_block_ws_ptr(x, x->ws->fp8_now);
    MG_CHECK(x->be->memset_zero(x->be, now, sizeof(float)));
    MG_CHECK(amax_of(x, in, rows, cols, format, grp, gelu_pre, now));
    return current_scale_done(x, format);
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
    return forms & COLS ? (uint8_t *)mg_block_ws_ptr(x, to) + mg_fp8_align((size_t)rows * cols)
                        : NULL;
}

/* Tensor t's scale for a cast of in (rows, cols; grp: its groups' rows; gelu_pre: through a
 * GELU's gradient), and where the cast's amax goes (NULL: nowhere). With known_scale
 * (tensorwise: the caller took the amax of several tensors) the scale in fp8_now as it stands. */
static mg_status scale_of(const mg_block_ctx *x, size_t t, const void *in, int rows, int cols,
                          int format, const groups *grp, const void *gelu_pre, bool known_scale,
                          const float **scale, float **amax) {
    const mg_block_ws *w = x->ws;
    *amax = NULL;
    if (x->c->fp8_current) {
        if (!known_scale) MG_CHECK(current_scale(x, in, rows, cols, format, grp, gelu_pre));
        *scale = (const float *)mg_block_ws_ptr(x, w->fp8_now) + 1;
        return MG_OK;
    }
    float *state = mg_block_ws_ptr(x, w->fp8_state);
    size_t nt = (size_t)w->fp8_tensors;
    *scale = state + nt + t;
    /* the amax of the step: training passes only (an evaluation keeps the scales) */
    if (x->pass.on) *amax = state + t;
    return MG_OK;
}

/* What the cast of a linear's output gradient also does (fp8_cast's gelu_pre and dbias). */
typedef struct {
    const void *gelu_pre;
    float *dbias;
} grad_pass;

/* Tensor t's bytes of in (rows, cols): row-major into data, transposed into data_t (either may
 * be NULL; grp: the groups' rows, data_t their grouped transpose); *o describes them. grad (not
 * with grp): in is a linear's output gradient, see grad_pass. */
static mg_status cast_rows(const mg_block_ctx *x, size_t t, uint8_t *data, uint8_t *data_t,
                           const void *in, int rows, int cols, int format, const groups *grp,
                           bool known_scale, const grad_pass *grad, mg_fp8_tensor *o) {
    mg_backend *be = x->be;
    float *sinv = sinv_of(x, t), *amax;
    const float *scale;
    MG_CHECK(scale_of(x, t, in, rows, cols, format, grp, grad ? grad->gelu_pre : NULL, known_scale,
                      &scale, &amax));
    if (grp)
        MG_CHECK(be->fp8_cast_grouped(be, data, data_t, in, grp->counts, grp->G, rows, cols, scale,
                                      sinv, amax, format));
    else
        MG_CHECK(be->fp8_cast(be, data, data_t, in, rows, cols, scale, sinv, amax, format,
                              grad ? grad->gelu_pre : NULL, grad ? grad->dbias : NULL));
    *o = (mg_fp8_tensor){data, data_t, sinv, format, MG_FP8_SCALE_TENSOR, NULL};
    return MG_OK;
}

static mg_status cast(const mg_block_ctx *x, size_t t, uint8_t *data, uint8_t *data_t,
                      const void *in, int rows, int cols, int format, mg_fp8_tensor *o) {
    return cast_rows(x, t, data, data_t, in, rows, cols, format, NULL, false, NULL, o);
}

/* Linear j's weight copy in layer p (workspace offset), checked against its shape. */
static mg_status weight_copy(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                             int OC, int IC, size_t *at) {
    const mg_model_config *c = x->c;
    if ((size_t)OC * (size_t)IC > mg_fp8_weight_elems(c, (int)j))
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 weight copy of linear %d: %d x %d exceeds its %zu",
                       (int)j, OC, IC, mg_fp8_weight_elems(c, (int)j));
    size_t layer = (size_t)(p->fp8 / mg_fp8_layer_linears(c));
    *at = x->ws->fp8_wcopy + layer * mg_fp8_weight_copies(x, MG_FP8_LINEARS) +
          mg_fp8_weight_copies(x, (int)j);
    return MG_OK;
}

/* The kept inputs' index of layer p in the pass's slot: slot-major over the fp8 layers. */
static size_t kept_layer(const mg_block_ctx *x, const mg_layer_params *p) {
    size_t per = (size_t)mg_fp8_layer_linears(x->c),
           layers = (size_t)x->ws->fp8_tensors / (3 * per);
    return (size_t)x->pass.slot * layers + (size_t)p->fp8 / per;
}

/* Where linear j of layer p keeps its input's transpose from the training forward for the
 * backward, in the pass's slot; NULL where it does not (model/gpt.c decides: not with
 * --no-fp8-wgrad, nor with tensorwise scaling under a pipeline; never in an evaluation). */
static uint8_t *input_kept(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                           int IC) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, each = mg_fp8_input_copies(c, N, MG_FP8_LINEARS);
    if (!x->ws->fp8_keep_inputs || !x->pass.on || (size_t)IC > mg_fp8_input_cols(c, (int)j))
        return NULL;
    return (uint8_t *)mg_block_ws_ptr(x, x->ws->fp8_xt) + kept_layer(x, p) * each +
           mg_fp8_input_copies(c, N, (int)j);
}

/* ... and (blockwise) those bytes' block scales, kept beside them. */
static float *input_kept_scales(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, each = mg_fp8_input_scales(c, N, MG_FP8_LINEARS);
    return (float *)mg_block_ws_ptr(x, x->ws->fp8_xts) + kept_layer(x, p) * each +
           mg_fp8_input_scales(c, N, (int)j);
}

/* --fp8-param-gather: the scale the weights of tensor t (expert weights or not) are cast with
 * after the update: delayed scaling's (already updated for the next step), or the one
 * mg_fp8_param_scales set from the weight's amax (tensorwise). */
static float *param_scale(const mg_block_ctx *x, size_t t, bool expert) {
    const size_t nt = (size_t)x->ws->fp8_tensors;
    if (x->c->fp8_current) return mg_fp8_param_amaxes(x, expert) + nt + t;
    return (float *)mg_block_ws_ptr(x, x->ws->fp8_state) + nt + t;
}

/* --fp8-param-gather: parameter i's fp8 bytes into *w8 (NULL where the forward casts the
 * weight), checked to be the weight w the caller multiplies and to belong to tensor t. */
static mg_status gathered_weight(const mg_block_ctx *x, int i, const void *w, size_t t,
                                 const uint8_t **w8) {
    *w8 = mg_block_param8(x, i);
    if (!*w8) return MG_OK;
    if (w != mg_block_param(x, i) || (size_t)x->params->p[i].fp8_tensor != t)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 weight %s: its bytes are tensor %d's, not %zu's",
                       x->params->p[i].name, x->params->p[i].fp8_tensor, t);
    return MG_OK;
}

/* The weight's bytes and transpose as the pass's first microbatch cast them. */
static mg_fp8_tensor weight_cached(const mg_block_ctx *x, size_t t, size_t at, int OC, int IC) {
    uint8_t *base = mg_block_ws_ptr(x, at);
    return (mg_fp8_tensor){
        base, base + mg_fp8_align((size_t)OC * IC), sinv_of(x, t), MG_FP8_E4M3, MG_FP8_SCALE_TENSOR,
        NULL};
}

/* ---- blockwise (--fp8-recipe blockwise; core/fp8_block.h) ----
 * No scale state: each cast takes its blocks' amaxes now, power-of-two scales as Transformer
 * Engine's recipe does by default. An input or output gradient is cast along rows for the
 * forward's and the input gradient's products, and along columns (other blocks, other scales)
 * for the weight gradient's: an input's in the forward, from the same read, kept in the slot with
 * its scales as the other recipes keep their transposes (else cast again in the backward); a
 * weight in 128 x 128 tiles by the pass's first microbatch, its transpose the same bytes. */

/* in (rows, cols) in 1 x 128 blocks: along rows into data, along columns into data_t (either
 * may be NULL), the scales' inverses in the workspace's `scales` (rows', then columns'), or the
 * columns' in kept_s (not NULL: a kept transpose's). */
static mg_status cast_blocks(const mg_block_ctx *x, size_t scales, uint8_t *data, uint8_t *data_t,
                             float *kept_s, const void *in, int rows, int cols, int format,
                             mg_fp8_tensor *o) {
    float *s = mg_block_ws_ptr(x, scales);
    float *s_t = kept_s ? kept_s : s + (size_t)x->N * (size_t)mg_fp8_block_count(cols);
    if (rows > x->N) return MG_FAIL(MG_ERR_INTERNAL, "fp8 blocks: %d rows, planned %d", rows, x->N);
    MG_CHECK(
        x->be->fp8_cast_blocks(x->be, data, s, data_t, s_t, in, rows, cols, false, format, true));
    *o = (mg_fp8_tensor){data, data_t, s, format, MG_FP8_SCALE_ROWS, s_t};
    return MG_OK;
}

/* Layer p's linear j's weight in 128 x 128 tiles (the bytes, the transpose, the scales), cast
 * from w by the pass's first microbatch (cast), else as it cast them. */
static mg_status weight_blocks(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                               const void *w, int OC, int IC, bool cast, mg_fp8_tensor *o) {
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    const size_t layer = (size_t)(p->fp8 / mg_fp8_layer_linears(x->c));
    float *s = (float *)mg_block_ws_ptr(x, x->ws->fp8_bws) +
               layer * mg_fp8_weight_tiles(x->c, MG_FP8_EXP_FC1) +
               mg_fp8_weight_tiles(x->c, (int)j);
    uint8_t *rows = copy_rows(x, at, ROWS), *cols = copy_cols(x, at, OC, IC, COLS);
    float *s_t = s + mg_fp8_tile_floats(OC, IC); /* the transpose's grid */
    if (cast && x->pass.mb == 0)
        MG_CHECK(
            x->be->fp8_cast_blocks(x->be, rows, s, cols, s_t, w, OC, IC, true, MG_FP8_E4M3, true));
    *o = (mg_fp8_tensor){rows, cols, s, MG_FP8_E4M3, MG_FP8_SCALE_TILES, s_t};
    return MG_OK;
}

/* The blockwise recipe's forward operands: the input along rows (and, where the backward will
 * read it, along columns into the kept transpose with its scales, from the same read), the
 * weight in tiles. */
static mg_status forward_blocks(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                const void *inp, const void *w, int IC, int OC, mg_fp8_tensor *fi,
                                mg_fp8_tensor *fw) {
    uint8_t *kept = input_kept(x, p, j, IC);
    MG_CHECK(cast_blocks(x, x->ws->fp8_bxs, copy_rows(x, x->ws->fp8_x, ROWS), kept,
                         kept ? input_kept_scales(x, p, j) : NULL, inp, x->N, IC, MG_FP8_E4M3, fi));
    return weight_blocks(x, p, j, w, OC, IC, true, fw);
}

/* ... and its backward operands for the gradients' forms: the gradient along rows (ROWS, for
 * dinp) and columns (COLS, for dw), the input along columns (as the forward kept it, else cast
 * again) and the weight's transposed tiles. */
static mg_status backward_blocks(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 int dforms, const void *dout, const void *inp, const void *w,
                                 int IC, int OC, mg_fp8_tensor *fd, mg_fp8_tensor *fi,
                                 mg_fp8_tensor *fw) {
    size_t dy = x->ws->fp8_dy;
    MG_CHECK(cast_blocks(x, x->ws->fp8_bdys, copy_rows(x, dy, dforms),
                         copy_cols(x, dy, x->N, OC, dforms), NULL, dout, x->N, OC, x->c->fp8_bwd,
                         fd));
    uint8_t *kept = dforms & COLS ? input_kept(x, p, j, IC) : NULL;
    if (kept)
        *fi = (mg_fp8_tensor){
            NULL, kept, NULL, MG_FP8_E4M3, MG_FP8_SCALE_ROWS, input_kept_scales(x, p, j)};
    else if (dforms & COLS)
        MG_CHECK(cast_blocks(x, x->ws->fp8_bxs, NULL, copy_cols(x, x->ws->fp8_x, x->N, IC, COLS),
                             NULL, inp, x->N, IC, MG_FP8_E4M3, fi));
    if (dforms & ROWS) MG_CHECK(weight_blocks(x, p, j, w, OC, IC, false, fw));
    return MG_OK;
}

/* The delayed and tensorwise recipes' weight operand: cast (or transposed from its gathered
 * bytes) once per pass by its first microbatch, which the other microbatches and every backward
 * of the pass read (the weights and the scales change only between passes). */
static mg_status weight_operand(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                const void *w, int IC, int OC, mg_fp8_tensor *fw) {
    mg_backend *be = x->be;
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    const uint8_t *w8 = NULL;
    if (x->pass.mb == 0)
        MG_CHECK(gathered_weight(x, mg_fp8_dense_weight(p, (int)j), w, t + 1, &w8));
    if (w8) /* --fp8-param-gather: the bytes cast after the update, gathered */
        MG_CHECK(be->fp8_transpose(be, copy_rows(x, at, ROWS), copy_cols(x, at, OC, IC, COLS), w8,
                                   OC, IC, param_scale(x, t + 1, false), sinv_of(x, t + 1)));
    if (x->pass.mb == 0 && !w8)
        return cast(x, t + 1, copy_rows(x, at, ROWS), copy_cols(x, at, OC, IC, COLS), w, OC, IC,
                    MG_FP8_E4M3, fw);
    *fw = weight_cached(x, t + 1, at, OC, IC);
    return MG_OK;
}

/* ... and the forward's: the input (its transpose too where the backward will read it) and the
 * weight. */
static mg_status forward_tensors(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 const void *inp, const void *w, int IC, int OC, mg_fp8_tensor *fi,
                                 mg_fp8_tensor *fw) {
    size_t t = 3 * (size_t)(p->fp8 + (int)j);
    MG_CHECK(cast(x, t, copy_rows(x, x->ws->fp8_x, ROWS), input_kept(x, p, j, IC), inp, x->N, IC,
                  MG_FP8_E4M3, fi));
    return weight_operand(x, p, j, w, IC, OC, fw);
}

/* ... and their backward operands: the gradient's rows and transpose, the input's transpose as
 * the forward kept it (else cast again), the weight's transpose as the pass's first forward made
 * it. */
static mg_status backward_tensors(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                  int dforms, const grad_pass *grad, const void *dout,
                                  const void *inp, int IC, int OC, mg_fp8_tensor *fd,
                                  mg_fp8_tensor *fi, mg_fp8_tensor *fw) {
    size_t t = 3 * (size_t)(p->fp8 + (int)j), dy = x->ws->fp8_dy;
    MG_CHECK(cast_rows(x, t + 2, copy_rows(x, dy, dforms), copy_cols(x, dy, x->N, OC, dforms), dout,
                       x->N, OC, x->c->fp8_bwd, NULL, false, grad, fd));
    uint8_t *kept = dforms & COLS ? input_kept(x, p, j, IC) : NULL;
    if (kept)
        *fi = (mg_fp8_tensor){NULL, kept, sinv_of(x, t), MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    else if (dforms & COLS)
        MG_CHECK(cast(x, t, NULL, copy_cols(x, x->ws->fp8_x, x->N, IC, COLS), inp, x->N, IC,
                      MG_FP8_E4M3, fi));
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    if (dforms & ROWS) *fw = weight_cached(x, t + 1, at, OC, IC);
    return MG_OK;
}

mg_status mg_fp8_linear_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                void *out, void *gelu_pre, const void *inp, const void *w,
                                const void *bias, const void *residual, int IC, int OC) {
    mg_backend *be = x->be;
    if (p->fp8 < 0) {
        if (gelu_pre) return be->linear_gelu_forward(be, out, gelu_pre, inp, w, bias, x->N, IC, OC);
        return be->linear_forward(be, out, inp, w, bias, residual, x->N, IC, OC);
    }
    mg_fp8_tensor fi, fw;
    MG_CHECK(
        (x->c->fp8_block ? forward_blocks : forward_tensors)(x, p, j, inp, w, IC, OC, &fi, &fw));
    return be->fp8_linear_forward(be, out, gelu_pre, &fi, &fw, bias, residual, x->N, IC, OC);
}

/* An fp8 linear's product on some rows of its gathered input bytes (in: the range's first row,
 * r0: its row number; mg_block_gather_beside's), with fi's scale and fw. */
typedef struct {
    void *out, *gelu_pre;
    const mg_fp8_tensor *fi, *fw;
    const void *bias;
    int OC;
} rows_product;

static mg_status product_part(const mg_block_ctx *x, void *ctx, const void *in, int r0, int n) {
    const rows_product *q = ctx;
    const size_t at = (size_t)r0 * (size_t)q->OC * x->esz;
    mg_fp8_tensor part = *q->fi;
    part.data = (uint8_t *)in;
    return x->be->fp8_linear_forward(x->be, (char *)q->out + at,
                                     q->gelu_pre ? (char *)q->gelu_pre + at : NULL, &part, q->fw,
                                     q->bias, NULL, n, x->c->H, q->OC);
}

bool mg_fp8_gathers_bytes(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j) {
    return x->ws->fp8_sp_bytes && p->fp8 >= 0 && input_kept(x, p, j, x->c->H) != NULL;
}

mg_status mg_fp8_linear_forward_gathered(const mg_block_ctx *x, const mg_layer_params *p,
                                         mg_fp8_linear j, void *out, void *gelu_pre,
                                         const void *own, const void *w, const void *bias, int OC) {
    mg_backend *be = x->be;
    const int IC = x->c->H;
    const size_t t = 3 * (size_t)(p->fp8 + (int)j), part = (size_t)x->Nl * (size_t)IC;
    uint8_t *rows = copy_rows(x, x->ws->fp8_x, ROWS), *kept = input_kept(x, p, j, IC);
    uint8_t *mine = rows + (size_t)x->tp->rank * part;
    if (!x->ws->fp8_sp_bytes || !kept)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 linear %d: gathered bytes where they are not kept",
                       (int)j);
    mg_fp8_tensor fi, fw;
    /* this rank's rows (their amax recorded), then the group's bytes */
    MG_CHECK(cast(x, t, mine, NULL, own, x->Nl, IC, MG_FP8_E4M3, &fi));
    MG_CHECK(weight_operand(x, p, j, w, IC, OC, &fw));
    fi = (mg_fp8_tensor){rows, NULL, sinv_of(x, t), MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    rows_product q = {out, gelu_pre, &fi, &fw, bias, OC};
    if (!x->c->tp_overlap_ag) {
        MG_CHECK(mg_tp_all_gather(x->tp, rows, mine, part, MG_U8));
        MG_CHECK(product_part(x, &q, rows, 0, x->N));
    } else { /* --tp-comm-overlap: this rank's rows' product while the others' bytes arrive */
        MG_CHECK(mg_block_gather_beside(x, rows, mine, (size_t)IC, MG_U8, product_part, &q));
    }
    /* their transpose, for the weight gradient */
    return be->fp8_transpose(be, NULL, kept, rows, x->N, IC, NULL, NULL);
}

bool mg_fp8_takes_gelu_grad(const mg_block_ctx *x, const mg_layer_params *p) {
    return !x->c->swiglu && p->fp8 >= 0 && !x->c->fp8_block && x->c->fp8_wgrad;
}

mg_status mg_fp8_linear_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 void *dinp, float *dw, float *dbias, const void *dout,
                                 const void *dout_gelu_pre, const void *inp, const void *w,
                                 const void *gelu_pre, int IC, int OC) {
    mg_backend *be = x->be;
    /* the gradient's rows feed dinp, its transpose dw, with the input's transpose (a call may
     * ask for one gradient: the tensor-parallel overlap takes them apart, model/block.h);
     * --no-fp8-wgrad: dw from the compute dtype's gradient and input instead */
    const bool dw8 = dw && x->c->fp8_wgrad;
    const int dforms = (dinp ? ROWS : 0) | (dw8 ? COLS : 0);
    if (dout_gelu_pre && (!mg_fp8_takes_gelu_grad(x, p) || !dforms))
        return MG_FAIL(MG_ERR_INTERNAL,
                       "fp8 linear %d: a GELU's gradient to apply where the "
                       "gradient's cast does not run",
                       (int)j);
    if (p->fp8 < 0)
        return be->linear_backward(be, dinp, dw, dbias, dout, inp, w, gelu_pre, x->N, IC, OC);
    if (!dforms) /* nothing in fp8: the compute dtype's weight (and bias) gradient alone */
        return be->linear_backward(be, NULL, dw, dbias, dout, inp, w, NULL, x->N, IC, OC);
    mg_fp8_tensor fd, fi = {NULL, NULL, NULL, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL}, fw = fi;
    if (x->c->fp8_block) {
        MG_CHECK(backward_blocks(x, p, j, dforms, dout, inp, w, IC, OC, &fd, &fi, &fw));
    } else { /* the bias gradient (and the GELU's) in the gradient's cast, which reads it anyway */
        const grad_pass grad = {dout_gelu_pre, dbias};
        MG_CHECK(backward_tensors(x, p, j, dforms, &grad, dout, inp, IC, OC, &fd, &fi, &fw));
        dbias = NULL;
    }
    MG_CHECK(be->fp8_linear_backward(be, dinp, dw8 ? dw : NULL, dbias, dout, &fd, &fi, &fw,
                                     gelu_pre, x->N, IC, OC));
    return dw && !dw8 ? be->linear_backward(be, NULL, dw, NULL, dout, inp, w, NULL, x->N, IC, OC)
                      : MG_OK;
}

/* ---- the routed experts ---- */

/* Bytes between two experts' weight bytes (and transposes) in a weight copy. */
static size_t expert_stride(int OC, int IC) {
    return mg_fp8_align((size_t)OC * IC);
}

/* The local experts' weights of linear j in layer p as fp8 bytes: every expert's bytes, then
 * every expert's transpose, expert_stride apart, with tensor t + 1's one scale. The pass's first
 * microbatch's forward (cast) writes them; the rest read them. Tensorwise: the scale from the
 * amax over every expert's weight. */
static mg_status expert_weights(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                int OC, int IC, bool cast, mg_fp8_tensor *o) {
    const int n = x->c->moe.E_l;
    const int *rows = j == MG_FP8_EXP_FC1 ? p->moe->fc1_w : p->moe->fc2_w;
    const size_t t = 3 * (size_t)(p->fp8 + (int)j), stride = expert_stride(OC, IC);
    size_t at;
    MG_CHECK(weight_copy(x, p, j, OC, IC, &at));
    uint8_t *base = mg_block_ws_ptr(x, at), *base_t = base + (size_t)n * stride;
    *o = (mg_fp8_tensor){base, base_t, sinv_of(x, t + 1), MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    if (!cast || x->pass.mb != 0) return MG_OK;
    const uint8_t *w8;
    MG_CHECK(gathered_weight(x, rows[0], mg_block_param(x, rows[0]), t + 1, &w8));
    for (int e = 0; w8 && e < n; e++) { /* --fp8-param-gather: the gathered bytes */
        MG_CHECK(gathered_weight(x, rows[e], mg_block_param(x, rows[e]), t + 1, &w8));
        if (!w8) return MG_FAIL(MG_ERR_INTERNAL, "fp8 experts: only some weights are fp8 bytes");
        MG_CHECK(x->be->fp8_transpose(x->be, base + (size_t)e * stride, base_t + (size_t)e * stride,
                                      w8, OC, IC, param_scale(x, t + 1, true),
                                      e == 0 ? sinv_of(x, t + 1) : NULL));
    }
    if (w8) return MG_OK;
    if (x->c->fp8_current) {
        float *now = mg_block_ws_ptr(x, x->ws->fp8_now);
        MG_CHECK(x->be->memset_zero(x->be, now, sizeof(float)));
        for (int e = 0; e < n; e++)
            MG_CHECK(amax_of(x, mg_block_param(x, rows[e]), OC, IC, MG_FP8_E4M3, NULL, NULL, now));
        MG_CHECK(current_scale_done(x, MG_FP8_E4M3));
    }
    for (int e = 0; e < n; e++) {
        mg_fp8_tensor each;
        MG_CHECK(cast_rows(x, t + 1, base + (size_t)e * stride, base_t + (size_t)e * stride,
                           mg_block_param(x, rows[e]), OC, IC, MG_FP8_E4M3, NULL, true, NULL,
                           &each));
    }
    return MG_OK;
}

/* Whether layer p's routed experts compute in fp8. */
static bool experts_fp8(const mg_block_ctx *x, const mg_layer_params *p) {
    return p->fp8 >= 0 && p->moe && mg_fp8_experts_on(x);
}

/* Where the experts' linear j of layer p keeps its input's grouped transpose from the training
 * forward for the weight gradients, in the pass's slot; NULL where it does not (as input_kept,
 * and not under a receive budget: mg_fp8_plan). */
static uint8_t *expert_input_kept(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                  int IC) {
    const mg_model_config *c = x->c;
    int cols = j == MG_FP8_EXP_FC1 ? c->H : c->moe.F;
    if (!x->ws->fp8_keep_experts || !x->pass.on || IC > cols) return NULL;
    size_t per = (size_t)mg_fp8_layer_linears(c), layers = (size_t)x->ws->fp8_tensors / (3 * per);
    size_t layer = (size_t)x->pass.slot * layers + (size_t)p->fp8 / per;
    return (uint8_t *)mg_block_ws_ptr(x, x->ws->fp8_ext) +
           layer * mg_fp8_expert_input_copies(x, MG_FP8_LINEARS) +
           mg_fp8_expert_input_copies(x, (int)j);
}

mg_status mg_fp8_experts_forward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                 void *out, const void *inp, void *const *w, void *const *bias,
                                 const int32_t *counts, int IC, int OC) {
    const mg_moe_ws *m = x->moe;
    const int ep = x->c->moe.ep;
    mg_backend *be = x->be;
    if (!experts_fp8(x, p))
        return be->grouped_linear_forward(be, out, inp, w, bias, counts, ep, m->El, IC, OC);
    const size_t t = 3 * (size_t)(p->fp8 + (int)j);
    const groups grp = {counts, ep * m->El};
    mg_fp8_tensor fi, fw;
    /* the input's grouped transpose too where the backward will read it */
    MG_CHECK(cast_rows(x, t, mg_block_ws_ptr(x, x->ws->fp8_ex), expert_input_kept(x, p, j, IC), inp,
                       m->R, IC, MG_FP8_E4M3, &grp, false, NULL, &fi));
    MG_CHECK(expert_weights(x, p, j, OC, IC, true, &fw));
    return be->fp8_grouped_linear_forward(be, out, &fi, &fw, expert_stride(OC, IC), bias, counts,
                                          ep, m->El, IC, OC);
}

mg_status mg_fp8_experts_backward(const mg_block_ctx *x, const mg_layer_params *p, mg_fp8_linear j,
                                  void *dinp, float *const *dw, float *const *dbias,
                                  const void *dout, const void *inp, void *const *w,
                                  const void *gelu_pre, const int32_t *counts, int IC, int OC,
                                  bool accumulate) {
    const mg_moe_ws *m = x->moe;
    const int ep = x->c->moe.ep, R = m->R;
    mg_backend *be = x->be;
    /* as the dense linears: --no-fp8-wgrad takes the weight gradients from the compute dtype */
    const bool dw8 = dw && x->c->fp8_wgrad;
    if (!experts_fp8(x, p) || (!dinp && !dw8))
        return be->grouped_linear_backward(be, dinp, dw, dbias, dout, inp, w, gelu_pre, counts, ep,
                                           m->El, IC, OC, accumulate);
    const size_t t = 3 * (size_t)(p->fp8 + (int)j);
    const groups grp = {counts, ep * m->El};
    mg_fp8_tensor fd, fi = {NULL, NULL, NULL, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL}, fw = fi;
    uint8_t *dy = mg_block_ws_ptr(x, x->ws->fp8_edy), *xb = mg_block_ws_ptr(x, x->ws->fp8_ex);
    /* the gradient's rows feed dinp, its grouped transpose dw, with the input's */
    MG_CHECK(cast_rows(x, t + 2, dinp ? dy : NULL, dw8 ? dy + mg_fp8_align((size_t)R * OC) : NULL,
                       dout, R, OC, x->c->fp8_bwd, &grp, false, NULL, &fd));
    uint8_t *kept = dw8 ? expert_input_kept(x, p, j, IC) : NULL;
    if (kept) /* the forward's bytes: the same scale and the same rows in the same groups */
        fi = (mg_fp8_tensor){NULL, kept, sinv_of(x, t), MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    else if (dw8)
        MG_CHECK(cast_rows(x, t, NULL, xb + mg_fp8_align((size_t)R * IC), inp, R, IC, MG_FP8_E4M3,
                           &grp, false, NULL, &fi));
    if (dinp) MG_CHECK(expert_weights(x, p, j, OC, IC, false, &fw));
    MG_CHECK(be->fp8_grouped_linear_backward(be, dinp, dw8 ? dw : NULL, dw8 ? dbias : NULL, dout,
                                             &fd, &fi, &fw, expert_stride(OC, IC), gelu_pre, counts,
                                             ep, m->El, R, IC, OC, accumulate));
    if (dw && !dw8)
        return be->grouped_linear_backward(be, NULL, dw, dbias, dout, inp, w, NULL, counts, ep,
                                           m->El, IC, OC, accumulate);
    return MG_OK;
}

/* ---- --fp8-param-gather: the weights' bytes cast after the update ---- */

float *mg_fp8_param_amaxes(const mg_block_ctx *x, bool expert) {
    if (!x->c->fp8_current || !x->c->fp8_params || x->ws->fp8_tensors == 0) return NULL;
    return (float *)mg_block_ws_ptr(x, x->ws->fp8_pw) + (expert ? 3 * x->ws->fp8_tensors : 0);
}

/* Tensor t of a cast of n weight elements, checked. */
static mg_status param_tensor(const mg_block_ctx *x, int t, size_t n, const char *what) {
    if (t < 0 || t >= x->ws->fp8_tensors || t % 3 != 1 || n > INT_MAX)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8 parameter %s: tensor %d of %d, %zu elements", what, t,
                       x->ws->fp8_tensors, n);
    return MG_OK;
}

mg_status mg_fp8_param_amax(const mg_block_ctx *x, int t, bool expert, const void *in, size_t n) {
    MG_CHECK(param_tensor(x, t, n, "amax"));
    float *a = mg_fp8_param_amaxes(x, expert);
    if (!a) return MG_FAIL(MG_ERR_INTERNAL, "fp8 parameter amax without tensorwise state");
    return amax_of(x, in, 1, (int)n, MG_FP8_E4M3, NULL, NULL, a + t);
}

mg_status mg_fp8_param_scales(const mg_block_ctx *x) {
    const float top = mg_fp8_max(MG_FP8_E4M3);
    for (int k = 0; k < 2; k++) {
        float *a = mg_fp8_param_amaxes(x, k == 1);
        if (!a) return MG_FAIL(MG_ERR_INTERNAL, "fp8 parameter scales without tensorwise state");
        MG_CHECK(x->be->fp8_update(x->be, a, x->ws->fp8_tensors, 1, 0, MG_FP8_AMAX_MOST_RECENT, top,
                                   top));
    }
    return MG_OK;
}

mg_status mg_fp8_param_cast(const mg_block_ctx *x, int t, bool expert, uint8_t *out, const void *in,
                            size_t n) {
    MG_CHECK(param_tensor(x, t, n, "cast"));
    /* delayed: its amax of the step, as the forward's cast records it (the scale's inverse is
     * the forward's to write: a rank may hold no part of a weight) */
    float *amax =
        x->c->fp8_current ? NULL : (float *)mg_block_ws_ptr(x, x->ws->fp8_state) + (size_t)t;
    return x->be->fp8_cast(x->be, out, NULL, in, 1, (int)n, param_scale(x, (size_t)t, expert), NULL,
                           amax, MG_FP8_E4M3, NULL, NULL);
}
