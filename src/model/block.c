/* The block context's shared pieces: the activation slot, the norms with their sequence-parallel
 * gather, and the row-parallel linear's reduction (model/block.h). */
#include "model/block.h"
#include "model/fp8.h"
#include "model/layer_graphs.h"

#include <stddef.h>

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

/* One saved activation of a slot entry: its member of mg_layer_slot, its bytes, and the
 * recomputation that frees it (MG_RECOMPUTE_* modules, MG_SLOT_RC_*; 0: always kept). */
typedef struct {
    size_t member, bytes;
    unsigned freed_by;
} slot_field;

#define F_(m, b, r)                                                                                \
    (slot_field) {                                                                                 \
        offsetof(mg_layer_slot, m), (b), (r)                                                       \
    }
#define FULL_           MG_SLOT_RC_FULL
#define SLOT_FIELDS_MAX 40

/* The entry's fields for the layers it serves (dense MLP, MoE MLP); returns their count. The
 * routing (logits through rounds) is always kept: a recomputed MoE layer reuses its decision. */
static int slot_fields(const mg_block_ctx *x, bool dense, bool moe, slot_field *f) {
    const mg_model_config *c = x->c;
    size_t N = (size_t)x->N, Nl = (size_t)x->Nl, e = x->esz, fl = sizeof(float);
    size_t H = (size_t)c->H, i32 = sizeof(int32_t);
    const unsigned LN = MG_RECOMPUTE_LAYERNORM, ATT = MG_RECOMPUTE_CORE_ATTN;
    const unsigned MLP = MG_RECOMPUTE_MLP, MOE = MG_RECOMPUTE_MOE, FP8 = MG_SLOT_RC_FP8;
    int n = 0;
    f[n++] = F_(x, Nl * H * e, MG_SLOT_RC_INNER | MG_SLOT_RC_DIST);
    f[n++] = F_(ln1, N * H * e, FULL_ | LN | FP8);
    f[n++] = F_(ln1_mean, Nl * fl, FULL_);
    f[n++] = F_(ln1_rstd, Nl * fl, FULL_);
    f[n++] = F_(qkv, N * c->qkv_l * e, FULL_);
    f[n++] = F_(att, N * c->attn_l * e, FULL_ | ATT);
    f[n++] = F_(att_saved, x->att_saved, FULL_ | ATT);
    f[n++] = F_(mid, Nl * H * e, FULL_);
    f[n++] = F_(ln2, N * H * e, FULL_ | LN | MLP | MOE | FP8);
    f[n++] = F_(ln2_mean, Nl * fl, FULL_);
    f[n++] = F_(ln2_rstd, Nl * fl, FULL_);
    f[n++] = F_(fc1, dense ? N * c->fc1_l * e : 0, FULL_ | MLP);
    f[n++] = F_(act, dense ? N * c->F_l * e : 0, FULL_ | MLP | MG_RECOMPUTE_MLP_ACT | FP8);
    if (!moe) return n;
    const mg_moe_config *m = &c->moe;
    const mg_moe_ws *w = x->moe;
    size_t E = (size_t)m->E, k = (size_t)m->k, R = (size_t)w->R, Rp = (size_t)w->Rp;
    size_t seqs = c->moe.route.balancing == MG_MOE_LB_SEQ_AUX ? N / (size_t)c->S : 1;
    f[n++] = F_(logits, N * E * fl, 0);
    f[n++] = F_(idx, N * k * i32, 0);
    f[n++] = F_(probs, N * k * fl, 0);
    f[n++] = F_(pos, N * k * i32, 0);
    f[n++] = F_(aux_counts, seqs * E * i32, 0);
    f[n++] = F_(counts, (size_t)m->ep * w->El * i32, 0);
    f[n++] = F_(lcounts, m->ep > 1 ? (size_t)w->Ed * i32 : 0, 0);
    f[n++] = F_(plan, m->echo ? mg_echo_plan_ints(&m->echo_p) * i32 : 0, 0);
    f[n++] = F_(idx2, m->echo ? N * k * i32 : 0, 0);
    f[n++] = F_(rounds, w->budget ? i32 : 0, 0);
    f[n++] = F_(xe, R * H * e, FULL_ | MOE);
    f[n++] = F_(e_fc1, R * m->fc1 * e, FULL_ | MOE);
    f[n++] = F_(e_act, R * m->F * e, FULL_ | MOE | MG_RECOMPUTE_MOE_ACT);
    f[n++] = F_(y, Rp * H * e, FULL_ | MOE);
    f[n++] = F_(sh_fc1, N * m->shared_fc1 * e, FULL_ | MOE | MG_RECOMPUTE_SHARED_EXPERTS);
    f[n++] = F_(sh_act, N * m->shared_F * e, FULL_ | MOE | MG_RECOMPUTE_SHARED_EXPERTS);
    return n;
}

static size_t *member(mg_layer_slot *s, const slot_field *f) {
    return (size_t *)((char *)s + f->member);
}

mg_status mg_block_plan_slot(const mg_block_ctx *x, mg_layer_slot *s, bool dense, bool moe,
                             unsigned rc, const mg_layer_slot *scratch) {
    slot_field f[SLOT_FIELDS_MAX];
    int n = slot_fields(x, dense, moe, f);
    s->rc = rc;
    for (int i = 0; i < n; i++) {
        if (f[i].freed_by & rc) {
            if (!scratch)
                return MG_FAIL(MG_ERR_INTERNAL, "a recomputed slot entry without buffers");
            *member(s, &f[i]) = *member((mg_layer_slot *)scratch, &f[i]);
        } else {
            MG_CHECK(reserve(x->acts, f[i].bytes, member(s, &f[i])));
        }
    }
    return MG_OK;
}

mg_status mg_block_plan_scratch(const mg_block_ctx *x, mg_layer_slot *s, bool dense, bool moe,
                                unsigned rc) {
    slot_field f[SLOT_FIELDS_MAX];
    int n = slot_fields(x, dense, moe, f);
    s->rc = 0;
    for (int i = 0; i < n; i++)
        if (f[i].freed_by & rc) MG_CHECK(reserve(x->acts, f[i].bytes, member(s, &f[i])));
    return MG_OK;
}

/* This rank's rows of a whole (N,H) tensor: all of it without SP. */
static void *own_rows(const mg_block_ctx *x, void *whole) {
    size_t first = x->c->sp ? (size_t)x->tp->rank * x->Nl : 0;
    return (char *)whole + first * x->c->H * x->esz;
}

/* The weight a norm scales by: parameter w, or with --apply-layernorm-1p 1 + w in the
 * workspace (in the compute dtype, as Megatron's `self.weight + 1`). */
static mg_status norm_weight(const mg_block_ctx *x, int w, const void **out) {
    *out = mg_block_param(x, w);
    if (!x->c->norm_1p) return MG_OK;
    void *eff = mg_block_ws_ptr(x, x->ws->norm_w);
    MG_CHECK(x->be->add(x->be, eff, mg_block_ws_ptr(x, x->ws->ones), *out, (size_t)x->c->H));
    *out = eff;
    return MG_OK;
}

/* The norm of in's Nl rows into this rank's rows of whole. */
static mg_status norm_rows(const mg_block_ctx *x, void *whole, float *mean, float *rstd,
                           const void *in, int w, int b) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    void *out = own_rows(x, whole);
    const void *wt;
    MG_CHECK(norm_weight(x, w, &wt));
    if (c->norm == MG_NORM_RMSNORM)
        return be->rmsnorm_forward(be, out, rstd, in, wt, x->Nl, c->H, c->eps);
    return be->layernorm_forward(be, out, mean, rstd, in, wt, mg_block_param(x, b), x->Nl, c->H,
                                 c->eps);
}

mg_status mg_block_norm_forward(const mg_block_ctx *x, void *whole, float *mean, float *rstd,
                                const void *in, int w, int b) {
    const mg_model_config *c = x->c;
    MG_CHECK(norm_rows(x, whole, mean, rstd, in, w, b));
    if (!c->sp) return MG_OK;
    return mg_tp_all_gather(x->tp, whole, own_rows(x, whole), (size_t)x->Nl * c->H,
                            x->be->compute_dtype);
}

/* Row r0 of a (rows, width) activation at p (NULL stays NULL). */
static void *rows_at(const mg_block_ctx *x, const void *p, int r0, int width) {
    return p ? (char *)p + (size_t)r0 * width * x->esz : NULL;
}

mg_status mg_block_gather_beside(const mg_block_ctx *x, void *whole, const void *mine, size_t width,
                                 mg_dtype dt, mg_block_rows_fn rows, void *ctx) {
    const int r = x->tp->rank, T = x->tp->size, Nl = x->Nl;
    const size_t row = width * mg_dtype_size(dt);
    MG_CHECK(mg_tp_gather_begin(x->tp, whole, mine, (size_t)Nl * width, dt));
    MG_CHECK(rows(x, ctx, mine, r * Nl, Nl));
    MG_CHECK(mg_tp_join(x->tp));
    /* the rows of the other ranks' tokens: those before this rank's, then those after */
    const int rest[2][2] = {{0, r * Nl}, {(r + 1) * Nl, (T - 1 - r) * Nl}};
    for (int k = 0; k < 2; k++)
        if (rest[k][1] > 0)
            MG_CHECK(rows(x, ctx, (const char *)whole + (size_t)rest[k][0] * row, rest[k][0],
                          rest[k][1]));
    return MG_OK;
}

/* A bf16 linear's forward on some rows of its gathered input (mg_block_gather_beside's). */
typedef struct {
    void *out, *gelu_pre;
    const void *w, *bias;
    int OC;
} forward_rows;

static mg_status forward_part(const mg_block_ctx *x, void *ctx, const void *in, int r0, int n) {
    const forward_rows *q = ctx;
    mg_backend *be = x->be;
    const int IC = x->c->H;
    if (q->gelu_pre)
        return be->linear_gelu_forward(be, rows_at(x, q->out, r0, q->OC),
                                       rows_at(x, q->gelu_pre, r0, q->OC), in, q->w, q->bias, n, IC,
                                       q->OC);
    return be->linear_forward(be, rows_at(x, q->out, r0, q->OC), in, q->w, q->bias, NULL, n, IC,
                              q->OC);
}

/* Whether a bf16 layer's SP reduce-scatters go as copies into the peers' memory, beside the
 * GEMM of this rank's own rows (parallel/tensor_parallel.h's push). */
static bool sp_push(const mg_block_ctx *x, const mg_layer_params *p) {
    return x->c->sp && p->fp8 < 0 && mg_tp_pushes(x->tp);
}

/* Whether a layer's SP all-gathers overlap its GEMMs (a bf16 layer; an fp8 layer that gathers
 * its bytes overlaps in mg_fp8_linear_forward_gathered, one that casts whole tensors does not). */
static bool sp_overlap(const mg_block_ctx *x, const mg_layer_params *p) {
    return x->c->tp_overlap_ag && x->tp->size > 1 && p->fp8 < 0;
}

mg_status mg_block_norm_linear_forward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                       void *whole, float *mean, float *rstd, const void *in,
                                       int nw, int nb, void *out, void *gelu_pre, const void *w,
                                       const void *bias, int OC) {
    const mg_model_config *c = x->c;
    if (mg_fp8_gathers_bytes(x, p, (mg_fp8_linear)j)) { /* the group gathers fp8 bytes */
        MG_CHECK(norm_rows(x, whole, mean, rstd, in, nw, nb));
        return mg_fp8_linear_forward_gathered(x, p, (mg_fp8_linear)j, out, gelu_pre,
                                              own_rows(x, whole), w, bias, OC);
    }
    if (!sp_overlap(x, p)) {
        MG_CHECK(mg_block_norm_forward(x, whole, mean, rstd, in, nw, nb));
        return mg_fp8_linear_forward(x, p, (mg_fp8_linear)j, out, gelu_pre, whole, w, bias, NULL,
                                     c->H, OC);
    }
    /* this rank's rows while the others arrive, then the others */
    MG_CHECK(norm_rows(x, whole, mean, rstd, in, nw, nb));
    forward_rows q = {out, gelu_pre, w, bias, OC};
    return mg_block_gather_beside(x, whole, own_rows(x, whole), (size_t)c->H, x->be->compute_dtype,
                                  forward_part, &q);
}

/* The norm's backward once dwhole is reduced (its rows from own_rows under SP). */
static mg_status norm_backward_reduced(const mg_block_ctx *x, void *dx, void *dwhole,
                                       const void *in, const float *mean, const float *rstd, int w,
                                       int b) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    void *dout = own_rows(x, dwhole);
    const void *wt;
    MG_CHECK(norm_weight(x, w, &wt));
    if (c->norm == MG_NORM_RMSNORM)
        return be->rmsnorm_backward(be, dx, mg_block_grad(x, w), dout, in, wt, rstd, x->Nl, c->H);
    return be->layernorm_backward(be, dx, mg_block_grad(x, w), mg_block_grad(x, b), dout, in, wt,
                                  mean, rstd, x->Nl, c->H);
}

/* whole (N,H) summed over the group: reduce-scattered into part (this rank's Nl rows) under SP,
 * else all-reduced in place (part unused); begin: on the tensor-parallel stream, mg_tp_join
 * waits for it. */
static mg_status reduce_whole(const mg_block_ctx *x, void *part, void *whole, bool begin) {
    const mg_model_config *c = x->c;
    size_t n = (size_t)(c->sp ? x->Nl : x->N) * c->H;
    mg_dtype dt = x->be->compute_dtype;
    return begin ? mg_tp_reduce_begin(x->tp, part, whole, n, dt, c->sp)
                 : mg_tp_reduce(x->tp, part, whole, n, dt, c->sp);
}

mg_status mg_block_norm_backward(const mg_block_ctx *x, void *dx, void *dwhole, const void *in,
                                 const float *mean, const float *rstd, int w, int b) {
    MG_CHECK(reduce_whole(x, own_rows(x, dwhole), dwhole, false));
    return norm_backward_reduced(x, dx, dwhole, in, mean, rstd, w, b);
}

/* Rows [r0, r0 + n) of a partial product under SP, into their place in the whole. */
typedef mg_status (*block_rows_fn)(const mg_block_ctx *x, const void *ctx, int r0, int n);

/* The partial products of every rank's rows into whole (size blocks of Nl rows, `width` wide),
 * the other ranks' first, pushed to them (mg_tp_push_begin) before this rank's own rows compute;
 * mg_tp_push_end then sums this rank's block. */
static mg_status push_beside(const mg_block_ctx *x, void *whole, int width, block_rows_fn rows,
                             const void *ctx) {
    const int T = x->tp->size, r = x->tp->rank, Nl = x->Nl;
    for (int i = 1; i <= T; i++) {
        const int q = (r + i) % T; /* this rank's own rows last */
        if (q == r)
            MG_CHECK(mg_tp_push_begin(x->tp, whole, (size_t)Nl * width, x->be->compute_dtype));
        MG_CHECK(rows(x, ctx, q * Nl, Nl));
    }
    return MG_OK;
}

typedef struct {
    const mg_block_norm_linear *l;
    void *dwhole;
} dgrad_rows;

/* A column-parallel linear's input gradient on some rows (push_beside's). */
static mg_status dgrad_part(const mg_block_ctx *x, const void *ctx, int r0, int n) {
    const dgrad_rows *q = ctx;
    const mg_block_norm_linear *l = q->l;
    return x->be->linear_backward(x->be, rows_at(x, q->dwhole, r0, l->IC), NULL, NULL,
                                  rows_at(x, l->dout, r0, l->OC), NULL, l->w, NULL, n, l->IC,
                                  l->OC);
}

/* A bf16 column-parallel linear's backward under SP with its input gradient reduce-scattered
 * as copies: the other ranks' rows of dwhole first, pushed to them while this rank's rows and the
 * weight's gradient compute; then this rank's rows summed and the norm's backward. */
static mg_status pushed_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                 const mg_block_norm_linear *l, void *dx, void *dwhole,
                                 const void *in, const float *mean, const float *rstd, int w,
                                 int b) {
    const dgrad_rows q = {l, dwhole};
    MG_CHECK(push_beside(x, dwhole, l->IC, dgrad_part, &q));
    MG_CHECK(mg_fp8_linear_backward(x, p, (mg_fp8_linear)l->j, NULL, l->dw, l->dbias, l->dout, NULL,
                                    l->inp, l->w, NULL, l->IC, l->OC));
    void *mine = own_rows(x, dwhole);
    MG_CHECK(mg_tp_push_end(x->tp, mine, mine, (size_t)x->Nl * l->IC, NULL, NULL, 0));
    return norm_backward_reduced(x, dx, dwhole, in, mean, rstd, w, b);
}

mg_status mg_block_norm_linear_backward(const mg_block_ctx *x, const mg_layer_params *p,
                                        const mg_block_norm_linear *l, void *dx, void *dwhole,
                                        const void *in, const float *mean, const float *rstd, int w,
                                        int b) {
    /* apart where there is a reduction to hide (an fp8 layer then casts the gradient's rows
     * for the first call and its transpose for the second) */
    const bool apart = x->c->tp_bulk_wgrad && x->tp->size > 1;
    const mg_fp8_linear j = (mg_fp8_linear)l->j;
    if (!apart) { /* both gradients, then the reduction in the compute stream */
        MG_CHECK(mg_fp8_linear_backward(x, p, j, dwhole, l->dw, l->dbias, l->dout, l->dout_gelu_pre,
                                        l->inp, l->w, NULL, l->IC, l->OC));
        return mg_block_norm_backward(x, dx, dwhole, in, mean, rstd, w, b);
    }
    if (sp_push(x, p)) /* the input gradient's rows pushed to their ranks, the weight's beside */
        return pushed_backward(x, p, l, dx, dwhole, in, mean, rstd, w, b);
    MG_CHECK(mg_fp8_linear_backward(x, p, j, dwhole, NULL, NULL, l->dout, l->dout_gelu_pre, l->inp,
                                    l->w, NULL, l->IC, l->OC));
    MG_CHECK(reduce_whole(x, own_rows(x, dwhole), dwhole, true));
    MG_CHECK(mg_fp8_linear_backward(x, p, j, NULL, l->dw, l->dbias, l->dout, l->dout_gelu_pre,
                                    l->inp, l->w, NULL, l->IC, l->OC));
    MG_CHECK(mg_tp_join(x->tp));
    return norm_backward_reduced(x, dx, dwhole, in, mean, rstd, w, b);
}

bool mg_block_dropout(const mg_block_ctx *x, int layer, int site, mg_dropout *d) {
    const mg_model_config *c = x->c;
    double p = site == MG_DROPOUT_ATTENTION ? c->attn_dropout : c->hidden_dropout;
    if (!x->pass.on || !(p > 0)) return false;
    if (!c->dropout_positional) {
        int which = site == MG_DROPOUT_ATTENTION || c->sp ? MG_RNG_MODEL_PARALLEL : MG_RNG_DEFAULT;
        *d = mg_dropout_stream_init(p, mg_model_rng_stream(x->rng, which),
                                    mg_model_rng_use(c->L, x->pass.mb, layer, site));
        return true;
    }
    /* the first local head's global number; the first residual row's in the microbatch (SP) */
    int first = site == MG_DROPOUT_ATTENTION ? c->tp_rank * c->nq_l
                : c->sp                      ? x->tp->rank * x->Nl
                                             : 0;
    *d = mg_dropout_init(p, c->seed, 0, layer, site, x->pass.sample0, first);
    d->iteration_at = x->pass.iteration;
    return true;
}

/* How many chunks a row-parallel product and its reduction go in (--tp-comm-overlap, a bf16
 * layer): 4, or 2, or 1 (no overlap) as this rank's rows divide. */
static int reduce_chunks(const mg_block_ctx *x, const mg_layer_params *p) {
    if (!x->c->tp_overlap_rs || x->tp->size == 1 || p->fp8 >= 0) return 1;
    return x->Nl % 4 == 0 ? 4 : x->Nl % 2 == 0 ? 2 : 1;
}

/* The row-parallel product inp (N,IC) w^T in K chunks of this rank's rows, each chunk's
 * reduction (to out, (Nl,H)) started on the tensor-parallel stream while the next chunk
 * computes. Under SP chunk k is the k-th sub-block of every rank's rows (T GEMMs into part's k-th
 * slab, contiguous as the reduce-scatter takes it); without, rows [k N/K, (k+1) N/K) of out,
 * all-reduced in place. */
static mg_status chunked_product(const mg_block_ctx *x, void *out, void *part, const void *inp,
                                 const void *w, int IC, int K) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    const int T = x->tp->size, H = c->H;
    const int rows = (c->sp ? x->Nl : x->N) / K; /* a chunk's rows per rank block (SP) or all */
    for (int k = 0; k < K; k++) {
        if (c->sp) {
            void *slab = rows_at(x, part, k * T * rows, H);
            for (int t = 0; t < T; t++)
                MG_CHECK(be->linear_forward(be, rows_at(x, slab, t * rows, H),
                                            rows_at(x, inp, t * x->Nl + k * rows, IC), w, NULL,
                                            NULL, rows, IC, H));
            MG_CHECK(mg_tp_reduce_begin(x->tp, rows_at(x, out, k * rows, H), slab, (size_t)rows * H,
                                        be->compute_dtype, true));
        } else {
            void *chunk = rows_at(x, out, k * rows, H);
            MG_CHECK(be->linear_forward(be, chunk, rows_at(x, inp, k * rows, IC), w, NULL, NULL,
                                        rows, IC, H));
            MG_CHECK(
                mg_tp_reduce_begin(x->tp, NULL, chunk, (size_t)rows * H, be->compute_dtype, false));
        }
    }
    return mg_tp_join(x->tp);
}

typedef struct {
    void *part;
    const void *inp, *w;
    int IC;
} product_rows;

/* A row-parallel product on some rows (push_beside's). */
static mg_status product_part(const mg_block_ctx *x, const void *ctx, int r0, int n) {
    const product_rows *q = ctx;
    const int H = x->c->H;
    return x->be->linear_forward(x->be, rows_at(x, q->part, r0, H), rows_at(x, q->inp, r0, q->IC),
                                 q->w, NULL, NULL, n, q->IC, H);
}

/* The row-parallel product inp (N,IC) w^T under SP with its reduce-scatter as copies: the other
 * ranks' rows into part first, pushed to them while this rank's own rows compute; out (Nl,H) =
 * this rank's rows summed, then + bias + residual (either may be NULL) in the sum's own pass. */
static mg_status pushed_product(const mg_block_ctx *x, void *out, void *part, const void *inp,
                                const void *w, int IC, const void *bias, const void *residual) {
    const int H = x->c->H, Nl = x->Nl;
    const product_rows q = {part, inp, w, IC};
    MG_CHECK(push_beside(x, part, H, product_part, &q));
    return mg_tp_push_end(x->tp, out, rows_at(x, part, x->tp->rank * Nl, H), (size_t)Nl * H, bias,
                          residual, H);
}

mg_status mg_block_row_parallel_forward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                        void *out, const void *inp, const void *w, int b,
                                        const void *residual, int IC, const mg_dropout *drop) {
    const mg_model_config *c = x->c;
    mg_backend *be = x->be;
    const void *bias = mg_block_param(x, b);
    if (x->tp->size == 1 && !drop) /* bias and residual ride in the GEMM */
        return mg_fp8_linear_forward(x, p, (mg_fp8_linear)j, out, NULL, inp, w, bias, residual, IC,
                                     c->H);
    /* the (partial) product, reduced; bias, dropout and residual once, after the reduction (by
     * copies without dropout: in the sum's pass) */
    void *part = c->sp ? mg_block_ws_ptr(x, x->ws->part) : out;
    int K = reduce_chunks(x, p);
    if (sp_push(x, p)) {
        if (!drop) return pushed_product(x, out, part, inp, w, IC, bias, residual);
        MG_CHECK(pushed_product(x, out, part, inp, w, IC, NULL, NULL));
    } else if (K > 1) {
        MG_CHECK(chunked_product(x, out, part, inp, w, IC, K));
    } else {
        MG_CHECK(mg_fp8_linear_forward(x, p, (mg_fp8_linear)j, part, NULL, inp, w, NULL, NULL, IC,
                                       c->H));
        MG_CHECK(reduce_whole(x, out, part, false));
    }
    if (drop) return be->dropout_add(be, out, out, bias, residual, x->Nl, c->H, c->S, drop);
    return be->bias_residual_add(be, out, out, bias, residual, x->Nl, c->H);
}

/* dout through the hidden dropout's mask on this rank's rows (the ddrop workspace), or dout. */
static mg_status dropout_dout(const mg_block_ctx *x, const void *dout, const mg_dropout *drop,
                              const void **out) {
    *out = dout;
    if (!drop) return MG_OK;
    void *dd = mg_block_ws_ptr(x, x->ws->ddrop);
    MG_CHECK(x->be->dropout_backward(x->be, dd, dout, x->Nl, x->c->H, x->c->S, drop));
    *out = dd;
    return MG_OK;
}

mg_status mg_block_row_parallel_dout(const mg_block_ctx *x, const void *dout,
                                     const mg_dropout *drop, const void **whole) {
    const mg_model_config *c = x->c;
    /* the forward's mask over this rank's rows (its own seed under SP) */
    MG_CHECK(dropout_dout(x, dout, drop, whole));
    if (!c->sp) return MG_OK;
    void *w = mg_block_ws_ptr(x, x->ws->part);
    MG_CHECK(mg_tp_all_gather(x->tp, w, *whole, (size_t)x->Nl * c->H, x->be->compute_dtype));
    *whole = w;
    return MG_OK;
}

mg_status mg_block_graph(const mg_block_ctx *x, int layer, int part, bool backward,
                         mg_status (*fn)(void *ctx), void *ctx) {
    if (!x->graphs || !x->pass.on || x->recompute) return fn(ctx);
    return mg_layer_graphs_run(x->graphs, x->be, layer, (mg_layer_part)part, backward, x->pass.mb,
                               fn, ctx);
}

/* A bf16 linear's backward on some rows of its gathered output gradient
 * (mg_block_gather_beside's): those rows of the input gradient, and their share of the weight's
 * and bias's gradients (linear_backward adds to dw and dbias), so that this rank's rows' share
 * runs while the other rows arrive. */
typedef struct {
    void *dinp;
    float *dw, *dbias;
    const void *inp, *w, *gelu_pre;
    int IC;
} dinp_rows;

static mg_status dinp_part(const mg_block_ctx *x, void *ctx, const void *dout, int r0, int n) {
    const dinp_rows *q = ctx;
    return x->be->linear_backward(x->be, rows_at(x, q->dinp, r0, q->IC), q->dw, q->dbias, dout,
                                  rows_at(x, q->inp, r0, q->IC), q->w,
                                  rows_at(x, q->gelu_pre, r0, q->IC), n, q->IC, x->c->H);
}

mg_status mg_block_row_parallel_backward(const mg_block_ctx *x, const mg_layer_params *p, int j,
                                         const void *dout, const mg_dropout *drop, void *dinp,
                                         float *dw, float *dbias, const void *inp, const void *w,
                                         const void *gelu_pre, int IC) {
    const mg_model_config *c = x->c;
    const mg_fp8_linear lin = (mg_fp8_linear)j;
    if (!sp_overlap(x, p)) {
        const void *whole;
        MG_CHECK(mg_block_row_parallel_dout(x, dout, drop, &whole));
        return mg_fp8_linear_backward(x, p, lin, dinp, dw, dbias, whole, NULL, inp, w, gelu_pre, IC,
                                      c->H);
    }
    /* this rank's rows of dinp, and their share of the weight's and bias's gradients, from its
     * own rows of the gradient while the others arrive; then the other rows' */
    const void *mine;
    MG_CHECK(dropout_dout(x, dout, drop, &mine));
    void *whole = mg_block_ws_ptr(x, x->ws->part);
    dinp_rows q = {dinp, dw, dbias, inp, w, gelu_pre, IC};
    return mg_block_gather_beside(x, whole, mine, (size_t)c->H, x->be->compute_dtype, dinp_part,
                                  &q);
}
