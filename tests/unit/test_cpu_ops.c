/* CPU backend tests, part 1: the op table and memory, embedding (and its vocab-parallel ranges),
 * vocab-parallel cross-entropy, bias + residual add, norms, linear, activations. Every forward op
 * is checked against a naive reference in double (or an independent path), every backward op
 * against central finite differences (method and tolerance: cpu_test_util.h). */
#include "cpu_test_util.h"

#include <math.h>
#include <time.h>

/* ---------------------------------------------------------------- table and memory */

MG_TEST(cpu_backend_create_and_memory) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    MG_EXPECT(strcmp(be->name, "cpu") == 0, "name %s", be->name);
    MG_EXPECT(be->compute_dtype == MG_F32 && be->device == MG_DEVICE_CPU, "dtype/device");
    MG_EXPECT_OK(mg_backend_validate(be));
    unsigned char *p = NULL;
    MG_EXPECT_OK(be->alloc(be, 1000, (void **)&p));
    MG_EXPECT(p && (uintptr_t)p % 256 == 0, "alloc not 256-byte aligned");
    int nz = 0;
    for (int i = 0; i < 1000; i++) nz += p[i] != 0;
    MG_EXPECT(nz == 0, "alloc not zeroed");
    float src[5] = {1.5f, -2, 3, 4e-3f, 5e7f}, back[5];
    MG_EXPECT_OK(be->upload_f32(be, p, src, 5));
    MG_EXPECT_OK(be->copy_d2d(be, p + 256, p, 5 * sizeof(float)));
    MG_EXPECT_OK(be->download_f32(be, back, p + 256, 5));
    MG_EXPECT(memcmp(src, back, sizeof src) == 0, "upload/copy/download round trip");
    MG_EXPECT_OK(be->memset_zero(be, p, 5 * sizeof(float)));
    MG_EXPECT_OK(be->copy_d2h(be, back, p, sizeof back));
    MG_EXPECT(back[0] == 0 && back[4] == 0, "memset_zero");
    MG_EXPECT_OK(be->synchronize(be));
    be->free(be, p);
    be->destroy(be);
}

/* timer_mark / timer_seconds on the CPU: the host clock, as its ops complete in call order; the
 * spans of a 20 ms sleep add up, a point out of range is an error. */
MG_TEST(cpu_backend_timer_points) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    MG_EXPECT_OK(be->timer_mark(be, 3));
    struct timespec ts = {0, 20000000L};
    nanosleep(&ts, NULL);
    MG_EXPECT_OK(be->timer_mark(be, 7));
    MG_EXPECT_OK(be->timer_mark(be, MG_TIMER_POINTS - 1));
    double ab = 0, bc = 0, ac = 0;
    MG_EXPECT_OK(be->timer_seconds(be, 3, 7, &ab));
    MG_EXPECT_OK(be->timer_seconds(be, 7, MG_TIMER_POINTS - 1, &bc));
    MG_EXPECT_OK(be->timer_seconds(be, 3, MG_TIMER_POINTS - 1, &ac));
    MG_EXPECT(ab >= 0.019 && ab < 1 && bc >= 0 && bc < ab && fabs(ab + bc - ac) < 1e-9,
              "spans %.6f + %.6f s, whole %.6f s", ab, bc, ac);
    MG_EXPECT_ERROR(be->timer_mark(be, -1), MG_ERR_INTERNAL, "timer point -1");
    be->destroy(be);
}

MG_TEST(cpu_backend_validate_names_missing_ops) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    mg_backend copy = *be;
    copy.rope_forward = NULL;
    copy.adamw = NULL;
    mg_status st = mg_backend_validate(&copy);
    MG_EXPECT(st == MG_ERR_INTERNAL, "status %d", (int)st);
    MG_EXPECT(strcmp(mg_error_message(), "backend 'cpu' lacks required ops: rope_forward, adamw") ==
                  0,
              "message: %s", mg_error_message());
    copy = *be;
    copy.alloc = NULL;
    MG_EXPECT(mg_backend_validate(&copy) == MG_ERR_INTERNAL && strstr(mg_error_message(), "alloc"),
              "message: %s", mg_error_message());
    MG_EXPECT(mg_backend_validate(NULL) == MG_ERR_INTERNAL, "NULL table accepted");
    be->destroy(be);
}

/* The CUDA backend computes in bf16 or fp16: another dtype is refused before any device is
 * looked at, in every build (with or without the CUDA backend, with or without a GPU). */
MG_TEST(cuda_backend_create_refuses_other_dtypes) {
    const mg_dtype bad[] = {MG_F32, MG_I32, MG_I64};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mg_backend *be = (mg_backend *)&be;
        MG_EXPECT_ERROR(mg_backend_cuda_create_dtype(&be, 0, bad[i]), MG_ERR_USAGE,
                        "computes in bf16 or fp16, not");
        MG_EXPECT(be == NULL, "out not cleared on failure (%s)", mg_dtype_name(bad[i]));
    }
}

/* ---------------------------------------------------------------- embedding */

typedef struct {
    mg_backend *be;
    float *out, *wte, *wpe, *R;
    int32_t *tok;
    int N, S, H, V;
} emb_ctx;

static double emb_obj(void *c_) {
    emb_ctx *c = c_;
    c->be->embedding_forward(c->be, c->out, c->tok, c->wte, c->wpe, NULL, c->N, c->S, c->H, 0,
                             c->V);
    return t_dotd(c->out, c->R, (size_t)c->N * c->H);
}

MG_TEST(cpu_embedding_forward_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 2, S = 3, N = B * S, V = 5, P = 4, H = 7 };
    int32_t tok[N] = {4, 1, 4, 0, 2, 4}; /* repeats: the scatter-add must sum them */
    emb_ctx c = {be,
                 t_zeros(N * H),
                 t_rnd(1, V * H, 1),
                 t_rnd(2, P * H, 1),
                 t_rnd(3, N * H, 1),
                 tok,
                 N,
                 S,
                 H,
                 V};
    float *dwte = t_zeros(V * H), *dwpe = t_zeros(P * H);
    emb_obj(&c);
    double maxd = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < H; j++)
            maxd = fmax(maxd,
                        fabs(c.out[i * H + j] - (c.wte[tok[i] * H + j] + c.wpe[(i % S) * H + j])));
    MG_EXPECT(maxd == 0, "forward differs from wte[tok] + wpe[pos] by %g", maxd);
    MG_EXPECT_OK(be->embedding_backward(be, dwte, dwpe, c.R, tok, NULL, N, S, H, 0, V));
    double e1 = t_fd_err(c.wte, V * H, dwte, emb_obj, &c),
           e2 = t_fd_err(c.wpe, P * H, dwpe, emb_obj, &c);
    MG_EXPECT(e1 < T_FD_TOL && e2 < T_FD_TOL, "fd err dwte %g dwpe %g", e1, e2);
    /* without position embedding */
    MG_EXPECT_OK(be->embedding_forward(be, c.out, tok, c.wte, NULL, NULL, N, S, H, 0, V));
    MG_EXPECT(c.out[5 * H + 3] == c.wte[4 * H + 3], "wpe = NULL forward");
    free(c.out), free(c.wte), free(c.wpe), free(c.R), free(dwte), free(dwpe);
    be->destroy(be);
}

/* Vocab-parallel embedding: the vocabulary split into contiguous ranges, each run as one rank
 * would (its rows of wte, the position embedding added by one rank only). The forward outputs
 * summed over the ranges are the full forward, and each range's dwte is its rows of the full
 * dwte, bitwise: a token outside a range contributes an exact zero there and is skipped. */
MG_TEST(cpu_embedding_vocab_ranges_match_full) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 2, S = 6, N = B * S, V = 13, H = 70 }; /* H > MG_CPU_COL_BLOCK: two blocks */
    /* repeats, both ends of the vocabulary, range boundaries; ids 2, 7, 11 unused */
    const int32_t tok[N] = {0, 12, 5, 4, 9, 5, 3, 6, 8, 12, 1, 10};
    float *wte = t_rnd(50, V * H, 1), *wpe = t_rnd(51, S * H, 1), *dout = t_rnd(52, N * H, 1);
    float *dwte0 = t_rnd(53, V * H, 1), *dwpe0 = t_rnd(54, S * H, 1); /* accumulated into */
    float *full = t_zeros(N * H), *dwte = t_dup(dwte0, V * H), *dwpe = t_dup(dwpe0, S * H);
    MG_EXPECT_OK(be->embedding_forward(be, full, tok, wte, wpe, NULL, N, S, H, 0, V));
    MG_EXPECT_OK(be->embedding_backward(be, dwte, dwpe, dout, tok, NULL, N, S, H, 0, V));
    const int splits[][4] = {{0, 6, V, -1}, {0, 4, 9, V}}; /* range starts, then V */
    for (int sp = 0; sp < 2; sp++) {
        int nr = splits[sp][3] < 0 ? 2 : 3, wpe_rank = nr - 1;
        float *sum = t_zeros(N * H), *out = t_zeros(N * H);
        for (int r = 0; r < nr; r++) {
            int v0 = splits[sp][r], Vl = splits[sp][r + 1] - v0;
            const float *pe = r == wpe_rank ? wpe : NULL;
            MG_EXPECT_OK(be->embedding_forward(be, out, tok, wte + (size_t)v0 * H, pe, NULL, N, S,
                                               H, v0, Vl));
            for (int i = 0; i < N * H; i++) sum[i] += out[i];
            int nz = 0; /* without wpe, a token of another range gives an exact zero row */
            for (int i = 0; i < N && !pe; i++)
                if (tok[i] < v0 || tok[i] >= v0 + Vl)
                    for (int j = 0; j < H; j++) nz += out[i * H + j] != 0.0f;
            MG_EXPECT(nz == 0, "split %d range %d: %d non-zero entries for tokens not in it", sp, r,
                      nz);
            /* backward into the range's rows with a guard row on each side */
            float *g = t_rnd(55, (size_t)(Vl + 2) * H, 1), *guard = t_dup(g, (size_t)(Vl + 2) * H);
            memcpy(g + H, dwte0 + (size_t)v0 * H, sizeof(float) * Vl * H);
            float *gp = pe ? t_dup(dwpe0, S * H) : NULL;
            MG_EXPECT_OK(be->embedding_backward(be, g + H, gp, dout, tok, NULL, N, S, H, v0, Vl));
            MG_EXPECT(!memcmp(g + H, dwte + (size_t)v0 * H, sizeof(float) * Vl * H),
                      "split %d range %d [%d, %d): dwte differs from the full backward's rows", sp,
                      r, v0, v0 + Vl);
            MG_EXPECT(!memcmp(g, guard, sizeof(float) * H) &&
                          !memcmp(g + (size_t)(Vl + 1) * H, guard + (size_t)(Vl + 1) * H,
                                  sizeof(float) * H),
                      "split %d range %d: a token outside the range wrote next to it", sp, r);
            if (gp)
                MG_EXPECT(!memcmp(gp, dwpe, sizeof(float) * S * H),
                          "split %d range %d: dwpe differs from the full backward's", sp, r);
            free(g), free(guard), free(gp);
        }
        MG_EXPECT(!memcmp(sum, full, sizeof(float) * N * H),
                  "split %d: the ranges' forward outputs do not sum to the full forward", sp);
        free(sum), free(out);
    }
    /* ids no token uses keep their accumulated bits (the full backward skips nothing else) */
    const int unused[3] = {2, 7, 11};
    for (int k = 0; k < 3; k++)
        MG_EXPECT(!memcmp(dwte + unused[k] * H, dwte0 + unused[k] * H, sizeof(float) * H),
                  "row %d of dwte changed though no token uses it", unused[k]);
    free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(full), free(dwte), free(dwpe);
    be->destroy(be);
}

/* ---------------------------------------------------------------- vocab-parallel cross-entropy */

/* Splits a (N, V) gradient into its target entries (N) and the rest (targets zeroed), so each is
 * compared against its own scale: the rest are ~1/V of the target entries. */
static void split_at_targets(const float *g, const int32_t *tgt, int N, int V, float *at,
                             float *rest) {
    memcpy(rest, g, sizeof(float) * N * V);
    for (int i = 0; i < N; i++) {
        at[i] = g[(size_t)i * V + tgt[i]];
        rest[(size_t)i * V + tgt[i]] = 0.0f;
    }
}

/* Megatron's VocabParallelCrossEntropy emulated on one process: the logits' columns split into
 * contiguous ranges, cross_entropy_max per range, the all-reduce (max) on the host,
 * cross_entropy_sums per range, the all-reduce (sum) on the host, cross_entropy_finish per range.
 * Losses and the concatenated gradient must match cross_entropy_fused: the arithmetic is the
 * same except that the normaliser is rounded to fp32 (and summed over the ranges in fp32) between
 * the steps, ~1e-7 relative; 1e-6 leaves a margin while a wrong term shows up as O(1e-3..1). */
MG_TEST(cpu_cross_entropy_vocab_parallel_matches_fused) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 7, MAXR = 3 };
    typedef struct {
        int V, nr, start[MAXR + 1];
    } ce_split;
    const ce_split splits[] = {
        {1001, 1, {0, 1001}},           /* one rank: the fused op itself */
        {1001, 3, {0, 300, 701, 1001}}, /* uneven */
        {1000, 2, {0, 500, 1000}},      /* even */
    };
    for (int sp = 0; sp < 3; sp++) {
        const ce_split *c = &splits[sp];
        int V = c->V;
        /* targets at both ends, on the range boundaries and elsewhere */
        int32_t tgt[N] = {0, V - 1, 300, 700, 499, 500, 123};
        float *logits = t_rnd(60, (size_t)N * V, 3), *dloss = t_rnd(61, N, 1);
        dloss[3] = 0; /* a masked row */
        float *ref = t_dup(logits, (size_t)N * V), ref_loss[N];
        MG_EXPECT_OK(be->cross_entropy_fused(be, ref, ref_loss, tgt, dloss, N, V));
        float rowmax[N], sums[2 * N], part[2 * N], loss[MAXR][N];
        float *local[MAXR], *grad = t_zeros((size_t)N * V);
        for (int i = 0; i < N; i++) rowmax[i] = -INFINITY;
        for (int i = 0; i < 2 * N; i++) sums[i] = 0;
        for (int r = 0; r < c->nr; r++) { /* this rank's columns, and its row maxima */
            int v0 = c->start[r], Vl = c->start[r + 1] - v0;
            local[r] = t_zeros((size_t)N * Vl);
            for (int i = 0; i < N; i++)
                memcpy(local[r] + (size_t)i * Vl, logits + (size_t)i * V + v0, sizeof(float) * Vl);
            MG_EXPECT_OK(be->cross_entropy_max(be, part, local[r], N, Vl));
            for (int i = 0; i < N; i++) rowmax[i] = fmaxf(rowmax[i], part[i]);
        }
        for (int r = 0; r < c->nr; r++) {
            int v0 = c->start[r], Vl = c->start[r + 1] - v0;
            MG_EXPECT_OK(be->cross_entropy_sums(be, part, local[r], rowmax, tgt, v0, N, Vl));
            for (int i = 0; i < 2 * N; i++) sums[i] += part[i];
        }
        for (int r = 0; r < c->nr; r++) {
            int v0 = c->start[r], Vl = c->start[r + 1] - v0;
            MG_EXPECT_OK(be->cross_entropy_finish(be, local[r], loss[r], rowmax, sums, tgt, dloss,
                                                  v0, N, Vl));
            for (int i = 0; i < N; i++)
                memcpy(grad + (size_t)i * V + v0, local[r] + (size_t)i * Vl, sizeof(float) * Vl);
            MG_EXPECT(!memcmp(loss[r], loss[0], sizeof loss[0]),
                      "split %d: rank %d's losses differ from rank 0's", sp, r);
        }
        for (int i = 0; i < N; i++)
            MG_EXPECT(sums[N + i] == logits[(size_t)i * V + tgt[i]],
                      "split %d row %d: summed target logit %g, want %g", sp, i, sums[N + i],
                      logits[(size_t)i * V + tgt[i]]);
        float at[N], ref_at[N], *rest = t_zeros((size_t)N * V), *ref_rest = t_zeros((size_t)N * V);
        split_at_targets(grad, tgt, N, V, at, rest);
        split_at_targets(ref, tgt, N, V, ref_at, ref_rest);
        double el = mg_test_rel_err(loss[0], ref_loss, N), ea = mg_test_rel_err(at, ref_at, N),
               eo = mg_test_rel_err(rest, ref_rest, (size_t)N * V);
        MG_EXPECT(el < 1e-6 && ea < 1e-6 && eo < 1e-6,
                  "split %d (%d ranges of V=%d): loss err %g, grad err at targets %g, elsewhere %g",
                  sp, c->nr, V, el, ea, eo);
        int nz = 0;
        for (int j = 0; j < V; j++) nz += grad[3 * V + j] != 0;
        MG_EXPECT(nz == 0, "split %d: the masked row has %d non-zero gradients", sp, nz);
        for (int r = 0; r < c->nr; r++) free(local[r]);
        free(logits), free(dloss), free(ref), free(grad), free(rest), free(ref_rest);
    }
    /* a target no range owns is not an error (sums[N+i] = 0, no -1 anywhere); a negative one is */
    {
        enum { V = 40 };
        float *x = t_rnd(62, 2 * V, 1), mx[2], s[4], l[2], dl[2] = {1, 1};
        int32_t far[2] = {V + 5, 3}, neg[2] = {4, -1};
        MG_EXPECT_OK(be->cross_entropy_max(be, mx, x, 2, V));
        MG_EXPECT_OK(be->cross_entropy_sums(be, s, x, mx, far, 0, 2, V));
        MG_EXPECT(s[2] == 0 && s[3] == x[V + 3], "target logits of an unowned target: %g %g", s[2],
                  s[3]);
        MG_EXPECT_OK(be->cross_entropy_finish(be, x, l, mx, s, far, dl, 0, 2, V));
        int neg_entries = 0;
        for (int j = 0; j < V; j++) neg_entries += x[j] < 0;
        MG_EXPECT(neg_entries == 0, "row with an unowned target has %d negative gradients",
                  neg_entries);
        MG_EXPECT_ERROR(be->cross_entropy_sums(be, s, x, mx, neg, 0, 2, V), MG_ERR_INTERNAL,
                        "target -1 of row 1 is outside the vocabulary");
        MG_EXPECT_ERROR(be->cross_entropy_finish(be, x, l, mx, s, neg, dl, 0, 2, V),
                        MG_ERR_INTERNAL, "target -1 of row 1 is outside the vocabulary");
        free(x);
    }
    be->destroy(be);
}

/* ---------------------------------------------------------------- bias + residual add */

MG_TEST(cpu_bias_residual_add_matches_loop) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 5, H = 70 };
    float *x = t_rnd(65, N * H, 1), *bias = t_rnd(66, H, 1), *res = t_rnd(67, N * H, 1);
    float *out = t_zeros(N * H), *ref = t_zeros(N * H);
    for (int mode = 0; mode < 4; mode++) {
        const float *b = mode & 1 ? bias : NULL, *r = mode & 2 ? res : NULL;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < H; j++) {
                float v = x[i * H + j];
                if (b) v += b[j];
                if (r) v += r[i * H + j];
                ref[i * H + j] = v;
            }
        memset(out, 0xff, sizeof(float) * N * H); /* NaN: every entry must be written */
        MG_EXPECT_OK(be->bias_residual_add(be, out, x, b, r, N, H));
        MG_EXPECT(!memcmp(out, ref, sizeof(float) * N * H),
                  "bias %d residual %d: differs from loop", b != NULL, r != NULL);
        float *inplace = t_dup(x, N * H); /* out aliasing x */
        MG_EXPECT_OK(be->bias_residual_add(be, inplace, inplace, b, r, N, H));
        MG_EXPECT(!memcmp(inplace, ref, sizeof(float) * N * H),
                  "bias %d residual %d in place: differs from loop", b != NULL, r != NULL);
        free(inplace);
    }
    free(x), free(bias), free(res), free(out), free(ref);
    be->destroy(be);
}

/* ---------------------------------------------------------------- norms */

typedef struct {
    mg_backend *be;
    float *out, *mean, *rstd, *x, *w, *b, *R;
    int N, H, rms;
} norm_ctx;

static double norm_obj(void *c_) {
    norm_ctx *c = c_;
    if (c->rms)
        c->be->rmsnorm_forward(c->be, c->out, c->rstd, c->x, c->w, c->N, c->H, 1e-5f);
    else
        c->be->layernorm_forward(c->be, c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->H,
                                 1e-5f);
    return t_dotd(c->out, c->R, (size_t)c->N * c->H);
}

static void norm_test(mg_test_ctx *t, int rms) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 5, H = 7 };
    norm_ctx c = {be,
                  t_zeros(N * H),
                  t_zeros(N),
                  t_zeros(N),
                  t_rnd(10, N * H, 1.5f),
                  t_rnd(11, H, 1),
                  t_rnd(12, H, 1),
                  t_rnd(13, N * H, 1),
                  N,
                  H,
                  rms};
    for (int i = 0; i < N * H; i++) c.x[i] += 0.5f; /* a non-zero mean */
    norm_obj(&c);
    /* forward against a double reference */
    float ref[N * H];
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < H; j++) m += rms ? 0 : c.x[i * H + j];
        m /= H;
        for (int j = 0; j < H; j++) v += (c.x[i * H + j] - m) * (c.x[i * H + j] - m);
        double r = 1 / sqrt(v / H + 1e-5);
        for (int j = 0; j < H; j++)
            ref[i * H + j] = (float)((c.x[i * H + j] - m) * r * c.w[j] + (rms ? 0 : c.b[j]));
        MG_EXPECT(fabs(c.rstd[i] - r) <= 1e-6 * r, "rstd[%d] %g vs %g", i, c.rstd[i], r);
    }
    double ef = mg_test_rel_err(c.out, ref, N * H);
    MG_EXPECT(ef < 1e-6, "forward rel err %g", ef);
    /* gradients */
    float *dx = t_zeros(N * H), *dw = t_zeros(H), *db = t_zeros(H);
    if (rms)
        MG_EXPECT_OK(be->rmsnorm_backward(be, dx, dw, c.R, c.x, c.w, c.rstd, N, H));
    else
        MG_EXPECT_OK(be->layernorm_backward(be, dx, dw, db, c.R, c.x, c.w, c.mean, c.rstd, N, H));
    double ex = t_fd_err(c.x, N * H, dx, norm_obj, &c), ew = t_fd_err(c.w, H, dw, norm_obj, &c);
    double eb = rms ? 0 : t_fd_err(c.b, H, db, norm_obj, &c);
    MG_EXPECT(ex < T_FD_TOL && ew < T_FD_TOL && eb < T_FD_TOL, "fd err dx %g dw %g db %g", ex, ew,
              eb);
    if (!rms) { /* bias NULL: out = xhat * w */
        float *o2 = t_zeros(N * H);
        MG_EXPECT_OK(be->layernorm_forward(be, o2, c.mean, c.rstd, c.x, c.w, NULL, N, H, 1e-5f));
        MG_EXPECT(fabs(o2[8] + c.b[1] - c.out[8]) < 1e-5, "layernorm without bias");
        free(o2);
    }
    free(c.out), free(c.mean), free(c.rstd), free(c.x), free(c.w), free(c.b), free(c.R);
    free(dx), free(dw), free(db);
    be->destroy(be);
}

MG_TEST(cpu_layernorm_forward_and_grad) {
    norm_test(t, 0);
}
MG_TEST(cpu_rmsnorm_forward_and_grad) {
    norm_test(t, 1);
}

/* ---------------------------------------------------------------- linear */

typedef struct {
    mg_backend *be;
    float *out, *inp, *w, *bias, *R;
    int N, IC, OC;
} lin_ctx;

static double lin_obj(void *c_) {
    lin_ctx *c = c_;
    c->be->linear_forward(c->be, c->out, c->inp, c->w, c->bias, NULL, c->N, c->IC, c->OC);
    return t_dotd(c->out, c->R, (size_t)c->N * c->OC);
}

MG_TEST(cpu_linear_forward_matches_naive) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 5, IC = 7, OC = 3 };
    float *inp = t_rnd(20, N * IC, 1), *w = t_rnd(21, OC * IC, 1), *bias = t_rnd(22, OC, 1);
    float *res = t_rnd(27, N * OC, 1);
    float out[N * OC], out_nb[N * OC], out_r[N * OC], ref[N * OC], ref_nb[N * OC], ref_r[N * OC];
    MG_EXPECT_OK(be->linear_forward(be, out, inp, w, bias, NULL, N, IC, OC));
    MG_EXPECT_OK(be->linear_forward(be, out_nb, inp, w, NULL, NULL, N, IC, OC));
    MG_EXPECT_OK(be->linear_forward(be, out_r, inp, w, bias, res, N, IC, OC));
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int k = 0; k < IC; k++) s += (double)inp[i * IC + k] * w[o * IC + k];
            ref_nb[i * OC + o] = (float)s;
            ref[i * OC + o] = (float)(s + bias[o]);
            ref_r[i * OC + o] = (float)(s + bias[o] + res[i * OC + o]);
        }
    double e1 = mg_test_rel_err(out, ref, N * OC), e2 = mg_test_rel_err(out_nb, ref_nb, N * OC);
    double e3 = mg_test_rel_err(out_r, ref_r, N * OC);
    MG_EXPECT(e1 < 1e-6 && e2 < 1e-6 && e3 < 1e-6, "rel err with bias %g, without %g, residual %g",
              e1, e2, e3);
    free(inp), free(w), free(bias), free(res);
    be->destroy(be);
}

MG_TEST(cpu_linear_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 5, IC = 7, OC = 3 };
    lin_ctx c = {be,
                 t_zeros(N * OC),
                 t_rnd(23, N * IC, 1),
                 t_rnd(24, OC * IC, 1),
                 t_rnd(25, OC, 1),
                 t_rnd(26, N * OC, 1),
                 N,
                 IC,
                 OC};
    float *dinp = t_zeros(N * IC), *dw = t_zeros(OC * IC), *db = t_zeros(OC);
    MG_EXPECT_OK(be->linear_backward(be, dinp, dw, db, c.R, c.inp, c.w, NULL, N, IC, OC));
    double ei = t_fd_err(c.inp, N * IC, dinp, lin_obj, &c),
           ew = t_fd_err(c.w, OC * IC, dw, lin_obj, &c), eb = t_fd_err(c.bias, OC, db, lin_obj, &c);
    MG_EXPECT(ei < T_FD_TOL && ew < T_FD_TOL && eb < T_FD_TOL, "fd err dinp %g dw %g db %g", ei, ew,
              eb);
    /* dinp = NULL and dbias = NULL are skipped, dw still accumulates */
    float *dw2 = t_zeros(OC * IC);
    MG_EXPECT_OK(be->linear_backward(be, NULL, dw2, NULL, c.R, c.inp, c.w, NULL, N, IC, OC));
    MG_EXPECT(memcmp(dw, dw2, sizeof(float) * OC * IC) == 0, "dw differs when dinp is NULL");
    free(c.out), free(c.inp), free(c.w), free(c.bias), free(c.R), free(dinp), free(dw), free(db),
        free(dw2);
    be->destroy(be);
}

/* The GELU MLP fusions: linear_gelu_forward is linear then GELU (pre and out), and
 * linear_backward's gelu_pre gives the gradient with respect to the GELU's input, checked by
 * finite differences of sum(R * linear(gelu(pre))). */
typedef struct {
    mg_backend *be;
    float *pre, *act, *out, *w, *R;
    int N, IC, OC;
} gelu_lin_ctx;

static double gelu_lin_obj(void *c_) {
    gelu_lin_ctx *c = c_;
    c->be->gelu_forward(c->be, c->act, c->pre, (size_t)c->N * c->IC);
    c->be->linear_forward(c->be, c->out, c->act, c->w, NULL, NULL, c->N, c->IC, c->OC);
    return t_dotd(c->out, c->R, (size_t)c->N * c->OC);
}

MG_TEST(cpu_linear_gelu_fusions) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 4, IC = 6, OC = 5 };
    float *inp = t_rnd(40, N * IC, 1), *w = t_rnd(41, OC * IC, 1), *bias = t_rnd(42, OC, 1);
    float pre[N * OC], out[N * OC], ref_pre[N * OC], ref[N * OC];
    MG_EXPECT_OK(be->linear_gelu_forward(be, out, pre, inp, w, bias, N, IC, OC));
    MG_EXPECT_OK(be->linear_forward(be, ref_pre, inp, w, bias, NULL, N, IC, OC));
    MG_EXPECT_OK(be->gelu_forward(be, ref, ref_pre, N * OC));
    MG_EXPECT(!memcmp(pre, ref_pre, sizeof pre) && !memcmp(out, ref, sizeof out),
              "linear_gelu_forward differs from linear + gelu");
    gelu_lin_ctx c = {
        be, t_rnd(43, N * IC, 2), t_zeros(N * IC), t_zeros(N * OC), w, t_rnd(44, N * OC, 1), N, IC,
        OC};
    gelu_lin_obj(&c);
    float *dpre = t_rnd(45, N * IC, 1), *dw = t_zeros(OC * IC); /* dpre: overwritten */
    MG_EXPECT_OK(be->linear_backward(be, dpre, dw, NULL, c.R, c.act, w, c.pre, N, IC, OC));
    double e = t_fd_err(c.pre, N * IC, dpre, gelu_lin_obj, &c);
    MG_EXPECT(e < T_FD_TOL, "fd err of the gradient through the GELU %g", e);
    free(inp), free(w), free(bias), free(c.pre), free(c.act), free(c.out), free(c.R), free(dpre),
        free(dw);
    be->destroy(be);
}

/* ---------------------------------------------------------------- activations */

typedef struct {
    mg_backend *be;
    float *out, *inp, *R;
    int N, F, swiglu;
} act_ctx;

static double act_obj(void *c_) {
    act_ctx *c = c_;
    if (c->swiglu)
        c->be->swiglu_forward(c->be, c->out, c->inp, c->N, c->F);
    else
        c->be->gelu_forward(c->be, c->out, c->inp, (size_t)c->N * c->F);
    return t_dotd(c->out, c->R, (size_t)c->N * c->F);
}

MG_TEST(cpu_gelu_forward_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 1, F = 37 };
    act_ctx c = {be, t_zeros(F), t_rnd(30, F, 2), t_rnd(31, F, 1), N, F, 0};
    act_obj(&c);
    float ref[F];
    for (int i = 0; i < F; i++) {
        double x = c.inp[i];
        ref[i] = (float)(0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
    }
    double ef = mg_test_rel_err(c.out, ref, F);
    MG_EXPECT(ef < 1e-6, "forward rel err %g", ef);
    float *dinp = t_rnd(32, F, 1); /* garbage: the gradient is overwritten */
    MG_EXPECT_OK(be->gelu_backward(be, dinp, c.inp, c.R, F));
    double e = t_fd_err(c.inp, F, dinp, act_obj, &c);
    MG_EXPECT(e < T_FD_TOL, "fd err %g", e);
    free(c.out), free(c.inp), free(c.R), free(dinp);
    be->destroy(be);
}

MG_TEST(cpu_swiglu_forward_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 3, F = 5 };
    act_ctx c = {be, t_zeros(N * F), t_rnd(33, N * 2 * F, 1.5f), t_rnd(34, N * F, 1), N, F, 1};
    act_obj(&c);
    float ref[N * F];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double g = c.inp[i * 2 * F + j], u = c.inp[i * 2 * F + F + j];
            ref[i * F + j] = (float)(g / (1 + exp(-g)) * u);
        }
    double ef = mg_test_rel_err(c.out, ref, N * F);
    MG_EXPECT(ef < 1e-6, "forward rel err %g", ef);
    float *dinp = t_rnd(35, N * 2 * F, 1);
    MG_EXPECT_OK(be->swiglu_backward(be, dinp, c.inp, c.R, N, F));
    double e = t_fd_err(c.inp, N * 2 * F, dinp, act_obj, &c);
    MG_EXPECT(e < T_FD_TOL, "fd err %g", e);
    free(c.out), free(c.inp), free(c.R), free(dinp);
    be->destroy(be);
}
