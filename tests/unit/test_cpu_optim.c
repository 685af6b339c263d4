/* CPU backend tests, part 3: elementwise add and reductions, clipping, AdamW, the accumulate
 * semantics of the backward ops, and bitwise independence of the thread count. */
#include "cpu_test_util.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

MG_TEST(cpu_add_sum_sumsq_clip) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    /* more than one reduction chunk, and a ragged last chunk */
    const size_t n = 1234567;
    float *x = t_rnd(80, n, 1), *w = t_rnd(81, n, 1), *o = t_zeros(n);
    MG_EXPECT_OK(be->add(be, o, x, w, n));
    MG_EXPECT(o[n - 1] == x[n - 1] + w[n - 1] && o[7] == x[7] + w[7], "add");
    double s = 0, sw = 0, ss = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        sw += (double)x[i] * w[i];
        ss += (double)x[i] * x[i];
    }
    float acc = 2.5f, accw = -1, accsq = 3;
    MG_EXPECT_OK(be->sum_f32(be, &acc, x, NULL, n, 0.25f));
    MG_EXPECT_OK(be->sum_f32(be, &accw, x, w, n, 1.0f / 3));
    MG_EXPECT_OK(be->sumsq_f32(be, &accsq, x, n, NULL));
    /* double accumulation: only the final fp32 rounding remains */
    MG_EXPECT(fabs(acc - (2.5 + 0.25 * s)) <= 1e-6 * fabs(2.5 + 0.25 * s), "sum %g vs %g", acc,
              2.5 + 0.25 * s);
    MG_EXPECT(fabs(accw - (-1 + sw / 3)) <= 1e-6 * fabs(-1 + sw / 3) + 1e-7,
              "weighted sum %g vs %g", accw, -1 + sw / 3);
    MG_EXPECT(fabs(accsq - (3 + ss)) <= 1e-6 * (3 + ss), "sumsq %g vs %g", accsq, 3 + ss);
    const float one = 1.0f, unscale = 1.0f / 1024;
    float coef, norm, sq = 25;
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq, 1.0f, NULL));
    MG_EXPECT(norm == 5 && fabs(coef - 1 / (5 + 1e-6)) < 1e-7, "clip 1: norm %g coef %g", norm,
              coef);
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq, 10.0f, &one));
    MG_EXPECT(coef == 1, "clip above the norm: coef %g", coef);
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq, 0.0f, NULL));
    MG_EXPECT(coef == 1, "clip disabled: coef %g", coef);
    /* gradients held x 1024 (a loss scale): sumsq_f32 scaled by 2^-20 gives the unscaled sum of
     * squares even where the scaled one passes fp32's range (in double); the coefficient carries
     * the unscaling; an overflow marks the step skipped (NaN) */
    float big[2] = {3e18f * 1024, 4e18f * 1024}, sq_scaled = 0; /* squares beyond fp32's range */
    MG_EXPECT_OK(be->sumsq_f32(be, &sq_scaled, big, 2, &unscale));
    MG_EXPECT(fabs(sq_scaled - 25e36) <= 1e-6 * 25e36, "unscaled squares %g, want 2.5e37",
              sq_scaled);
    sq_scaled = 25.0f;
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq_scaled, 1.0f, &unscale));
    MG_EXPECT(norm == 5 && fabs(coef * 1024 - 1 / (5 + 1e-6)) < 1e-7, "scaled: norm %g coef %g",
              norm, coef);
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq_scaled, 10.0f, &unscale));
    MG_EXPECT(coef == 1.0f / 1024, "scaled, clip above the norm: coef %g", coef);
    float sq_inf = INFINITY;
    MG_EXPECT_OK(be->clip_coef(be, &coef, &norm, &sq_inf, 1.0f, NULL));
    MG_EXPECT(isinf(norm) && isnan(coef), "overflow: norm %g coef %g", norm, coef);
    free(x), free(w), free(o);
    be->destroy(be);
}

MG_TEST(cpu_adamw_two_steps_match_formula) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { n = 9 };
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    const float rates[2] = {lr, wd};
    const mg_adamw_span span = {0, 0, 0, n, 0, 1};
    float *p0 = t_rnd(90, n, 1), *g1 = t_rnd(91, n, 1), *g2 = t_rnd(92, n, 1);
    /* (a) parameter is its own master; (b) separate master, param receives a copy */
    float *pa = t_dup(p0, n), *ma = t_zeros(n), *va = t_zeros(n);
    float *pb = t_zeros(n), *mast = t_dup(p0, n), *mb = t_zeros(n), *vb = t_zeros(n);
    double pr[n], m[n] = {0}, v[n] = {0};
    for (int i = 0; i < n; i++) pr[i] = p0[i];
    for (int step = 1; step <= 2; step++) {
        const float *g = step == 1 ? g1 : g2;
        const float bc[2] = {1 - powf(b1, (float)step), 1 - powf(b2, (float)step)};
        MG_EXPECT_OK(be->adamw(be, pa, NULL, g, ma, va, &span, 1, rates, bc, b1, b2, eps, &scale));
        MG_EXPECT_OK(be->adamw(be, pb, mast, g, mb, vb, &span, 1, rates, bc, b1, b2, eps, &scale));
        for (int i = 0; i < n; i++) {
            double gi = (double)g[i] * scale;
            m[i] = b1 * m[i] + (1 - (double)b1) * gi;
            v[i] = b2 * v[i] + (1 - (double)b2) * gi * gi;
            double mh = m[i] / (1 - pow(b1, step)), vh = v[i] / (1 - pow(b2, step));
            pr[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pr[i]);
        }
    }
    float ref[n], mref[n], vref[n];
    for (int i = 0; i < n; i++) ref[i] = (float)pr[i], mref[i] = (float)m[i], vref[i] = (float)v[i];
    /* the parameters move by ~2 lr; compare the update itself so the check is not diluted by |p| */
    float da[n], dref[n];
    for (int i = 0; i < n; i++) da[i] = pa[i] - p0[i], dref[i] = ref[i] - p0[i];
    double ep = mg_test_rel_err(da, dref, n), em = mg_test_rel_err(ma, mref, n),
           ev = mg_test_rel_err(va, vref, n);
    MG_EXPECT(ep < 1e-4 && em < 1e-6 && ev < 1e-6, "update err %g, m err %g, v err %g", ep, em, ev);
    MG_EXPECT(memcmp(pa, pb, sizeof(float) * n) == 0 && memcmp(pa, mast, sizeof(float) * n) == 0,
              "master path differs from the in-place path");
    free(p0), free(g1), free(g2), free(pa), free(ma), free(va), free(pb), free(mast), free(mb),
        free(vb);
    be->destroy(be);
}

/* One call over spans equals a call per span on the span's own pointers, each with its span's
 * rates (two lr groups, decay or none); the elements between spans are not touched. */
MG_TEST(cpu_adamw_spans_equal_a_call_each) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { n = 40 };
    const float rates[3] = {1e-2f, 3e-3f, 0.1f}, bc[2] = {0.1f, 0.05f}, scale = 0.5f;
    /* the second span's gradients elsewhere (train/optimizer.h's compact fp8 parameters) */
    const mg_adamw_span spans[3] = {
        {1, 1, 0, 9, 0, 2}, {12, 3, 11, 20, 1, -1}, {35, 35, 33, 4, 0, 2}};
    float *g = t_rnd(98, n, 1), *p = t_rnd(99, n, 1), *mast = t_rnd(100, n, 1);
    float *m = t_rnd(101, n, 0.1f), *v = t_rnd(102, n, 0.1f);
    for (int i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *p2 = t_dup(p, n), *mast2 = t_dup(mast, n), *m2 = t_dup(m, n), *v2 = t_dup(v, n);
    MG_EXPECT_OK(be->adamw(be, p, mast, g, m, v, spans, 3, rates, bc, 0.9f, 0.95f, 1e-8f, &scale));
    for (int k = 0; k < 3; k++) {
        const size_t a = spans[k].param_off, b = spans[k].state_off;
        const mg_adamw_span one = {0, 0, 0, spans[k].n, 0, 1};
        const float r[2] = {rates[spans[k].lr], spans[k].wd < 0 ? 0.0f : rates[spans[k].wd]};
        MG_EXPECT_OK(be->adamw(be, p2 + a, mast2 + b, g + spans[k].grad_off, m2 + b, v2 + b, &one,
                               1, r, bc, 0.9f, 0.95f, 1e-8f, &scale));
    }
    MG_EXPECT(!memcmp(p, p2, sizeof(float) * n) && !memcmp(mast, mast2, sizeof(float) * n) &&
                  !memcmp(m, m2, sizeof(float) * n) && !memcmp(v, v2, sizeof(float) * n),
              "the spans in one call differ from a call per span");
    float *p0 = t_rnd(99, n, 1);
    MG_EXPECT(p[0] == p0[0] && p[10] == p0[10] && p[34] == p0[34] && p[39] == p0[39] &&
                  p[1] != p0[1] && p[31] != p0[31],
              "adamw wrote between the spans or skipped a span's element");
    free(g), free(p), free(mast), free(m), free(v), free(p2), free(mast2), free(m2), free(v2);
    free(p0);
    be->destroy(be);
}

/* The loss scaler's skipped step: a NaN coefficient (clip_coef's overflow mark) writes
 * nothing, with or without a master. */
MG_TEST(cpu_adamw_skips_on_overflow_mark) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { n = 7 };
    const float nan_coef = NAN;
    float *p = t_rnd(93, n, 1), *g = t_rnd(94, n, 1), *m = t_rnd(95, n, 1), *v = t_rnd(96, n, 1);
    float *mast = t_rnd(97, n, 1);
    float *p0 = t_dup(p, n), *m0 = t_dup(m, n), *v0 = t_dup(v, n), *mast0 = t_dup(mast, n);
    for (int i = 0; i < n; i++) v[i] = v0[i] = fabsf(v[i]);
    const float rates[2] = {1e-2f, 0.1f}, bc[2] = {0.1f, 0.05f};
    const mg_adamw_span span = {0, 0, 0, n, 0, 1};
    MG_EXPECT_OK(
        be->adamw(be, p, NULL, g, m, v, &span, 1, rates, bc, 0.9f, 0.95f, 1e-8f, &nan_coef));
    MG_EXPECT_OK(
        be->adamw(be, p, mast, g, m, v, &span, 1, rates, bc, 0.9f, 0.95f, 1e-8f, &nan_coef));
    MG_EXPECT(!memcmp(p, p0, sizeof(float) * n) && !memcmp(m, m0, sizeof(float) * n) &&
                  !memcmp(v, v0, sizeof(float) * n) && !memcmp(mast, mast0, sizeof(float) * n),
              "a skipped step changed the parameters or the moments");
    free(p), free(g), free(m), free(v), free(mast), free(p0), free(m0), free(v0), free(mast0);
    be->destroy(be);
}

static int same(const float *a, const float *b, size_t n) {
    return !memcmp(a, b, n * sizeof *a);
}

static int doubled(const float *a2, const float *a1, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a2[i] != 2 * a1[i]) return 0;
    return 1;
}

MG_TEST(cpu_backward_accumulates) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 5, H = 7, OC = 3, V = 4 };
    float *x = t_rnd(100, N * H, 1), *w = t_rnd(101, H, 1), *b = t_rnd(102, H, 1);
    float *dout = t_rnd(103, N * H, 1), *out = t_zeros(N * H), mean[N], rstd[N];
    /* layernorm and rmsnorm: dx += (into a non-zero dx), dw and db += */
    for (int rms = 0; rms < 2; rms++) {
        float *dx0 = t_rnd(104, N * H, 1), *dx = t_dup(dx0, N * H), *fresh = t_zeros(N * H);
        float *dw1 = t_zeros(H), *db1 = t_zeros(H), *dw2 = t_zeros(H), *db2 = t_zeros(H);
        if (rms) {
            MG_EXPECT_OK(be->rmsnorm_forward(be, out, rstd, x, w, N, H, 1e-5f));
            MG_EXPECT_OK(be->rmsnorm_backward(be, fresh, dw1, dout, x, w, rstd, N, H));
            MG_EXPECT_OK(be->rmsnorm_backward(be, dx, dw2, dout, x, w, rstd, N, H));
            MG_EXPECT_OK(be->rmsnorm_backward(be, dx, dw2, dout, x, w, rstd, N, H));
        } else {
            MG_EXPECT_OK(be->layernorm_forward(be, out, mean, rstd, x, w, b, N, H, 1e-5f));
            MG_EXPECT_OK(be->layernorm_backward(be, fresh, dw1, db1, dout, x, w, mean, rstd, N, H));
            MG_EXPECT_OK(be->layernorm_backward(be, dx, dw2, db2, dout, x, w, mean, rstd, N, H));
            MG_EXPECT_OK(be->layernorm_backward(be, dx, dw2, db2, dout, x, w, mean, rstd, N, H));
        }
        double e = 0;
        for (int i = 0; i < N * H; i++)
            e = fmax(e, fabs(dx[i] - (dx0[i] + 2.0 * fresh[i])) / (fabs(dx0[i]) + 1));
        MG_EXPECT(e < 1e-6, "norm %d: dx did not accumulate (err %g)", rms, e);
        MG_EXPECT(doubled(dw2, dw1, H) && doubled(db2, db1, H), "norm %d: dw/db not doubled", rms);
        free(dx0), free(dx), free(fresh), free(dw1), free(db1), free(dw2), free(db2);
    }
    /* linear: dw, dbias doubled; dinp overwritten (same after two calls) */
    float *lw = t_rnd(105, OC * H, 1), *ldout = t_rnd(106, N * OC, 1);
    float *di1 = t_zeros(N * H), *di2 = t_rnd(107, N * H, 1), *dw1 = t_zeros(OC * H);
    float *dw2 = t_zeros(OC * H), db1[OC] = {0}, db2[OC] = {0};
    MG_EXPECT_OK(be->linear_backward(be, di1, dw1, db1, ldout, x, lw, NULL, N, H, OC));
    for (int k = 0; k < 2; k++)
        MG_EXPECT_OK(be->linear_backward(be, di2, dw2, db2, ldout, x, lw, NULL, N, H, OC));
    MG_EXPECT(doubled(dw2, dw1, OC * H) && doubled(db2, db1, OC), "linear dw/dbias not doubled");
    MG_EXPECT(same(di1, di2, N * H), "linear dinp not overwritten");
    /* embedding: dwte, dwpe doubled */
    int32_t tok[N] = {1, 3, 1, 0, 2};
    float *e1 = t_zeros(V * H), *e2 = t_zeros(V * H), *p1 = t_zeros(N * H), *p2 = t_zeros(N * H);
    MG_EXPECT_OK(be->embedding_backward(be, e1, p1, dout, tok, NULL, N, N, H, 0, V));
    for (int k = 0; k < 2; k++)
        MG_EXPECT_OK(be->embedding_backward(be, e2, p2, dout, tok, NULL, N, N, H, 0, V));
    MG_EXPECT(doubled(e2, e1, V * H) && doubled(p2, p1, N * H), "embedding grads not doubled");
    free(x), free(w), free(b), free(dout), free(out), free(lw), free(ldout), free(di1), free(di2),
        free(dw1), free(dw2), free(e1), free(e2), free(p1), free(p2);
    be->destroy(be);
}

/* Runs the ops whose work is split across threads and writes every output into one buffer, so two
 * thread counts can be compared bitwise. Sizes are large enough that every parallel loop has
 * several work items and every GEMM several output tiles, a partial one included (cpu_linear.c:
 * 256 x 512 over token rows, 128 x 512 for the weight gradient). */
enum { TN = 560, TH = 520, TOC = 136, TV = 300, TB = 2, TS = 48, TNQ = 4, TNG = 2, THD = 16 };
enum { TV0 = 5, TVL = 170 }; /* a vocab-parallel range: some targets (< TV0) are not in it */
#define TC (TNG * (TNQ / TNG + 2) * THD)
#define TOUT                                                                                       \
    ((size_t)TN * TH * 2 + TH * 2 + TV * TH + TOC * TH + TOC + (size_t)TN * TH +                   \
     (size_t)TB * TS * TC + (size_t)TN * TV + TN + 2 + (size_t)TN * TOC + 4 * TN +                 \
     (size_t)TN * TVL + (size_t)TN * TH)

static void run_parallel_ops(mg_test_ctx *t, mg_backend *be, float *res) {
    float *x = t_rnd(110, TN * TH, 1), *w = t_rnd(111, TH, 1), *b = t_rnd(112, TH, 1);
    float *dout = t_rnd(113, TN * TH, 1), *lw = t_rnd(114, TOC * TH, 0.1f);
    float *ldout = t_rnd(115, TN * TOC, 1), *qkv = t_rnd(116, TB * TS * TC, 1);
    float *logits = t_rnd(117, TN * TV, 3), *dloss = t_rnd(118, TN, 1), *out = t_zeros(TN * TH);
    float *aout = t_zeros(TB * TS * TNQ * THD);
    float *saved = t_zeros(be->attention_saved_bytes(be, TB, TS, TNQ, THD) / sizeof(float));
    float mean[TN], rstd[TN];
    int32_t tok[TN];
    for (int i = 0; i < TN; i++) tok[i] = (i * 7) % TV % 11; /* many repeats */
    float *r = res;
    MG_EXPECT_OK(be->layernorm_forward(be, r, mean, rstd, x, w, b, TN, TH, 1e-5f));
    r += TN * TH;
    MG_EXPECT_OK(be->layernorm_backward(be, r, r + TN * TH, r + TN * TH + TH, dout, x, w, mean,
                                        rstd, TN, TH));
    r += TN * TH + 2 * TH;
    MG_EXPECT_OK(be->embedding_backward(be, r, NULL, dout, tok, NULL, TN, TS, TH, 0, TV));
    r += TV * TH;
    MG_EXPECT_OK(be->linear_backward(be, out, r, r + TOC * TH, ldout, x, lw, NULL, TN, TH, TOC));
    r += TOC * TH + TOC;
    memcpy(r, out, sizeof(float) * TN * TH);
    r += TN * TH;
    MG_EXPECT_OK(be->linear_forward(be, r, x, lw, b, ldout, TN, TH, TOC));
    r += TN * TOC;
    MG_EXPECT_OK(be->attention_forward(be, aout, saved, qkv, TB, TS, TNQ, TNG, THD, NULL, NULL));
    MG_EXPECT_OK(
        be->attention_backward(be, r, aout, qkv, aout, saved, TB, TS, TNQ, TNG, THD, NULL, NULL));
    r += TB * TS * TC;
    MG_EXPECT_OK(be->cross_entropy_fused(be, logits, r + TN * TV, tok, dloss, TN, TV));
    memcpy(r, logits, sizeof(float) * TN * TV);
    r += TN * TV + TN;
    MG_EXPECT_OK(be->sum_f32(be, r, logits, NULL, (size_t)TN * TV, 1.0f));
    MG_EXPECT_OK(be->sumsq_f32(be, r + 1, x, (size_t)TN * TH, NULL));
    r += 2;
    /* vocab-parallel cross-entropy on one range: rowmax, sums, losses, gradient */
    float *vl = t_rnd(119, (size_t)TN * TVL, 3);
    MG_EXPECT_OK(be->cross_entropy_max(be, r, vl, TN, TVL));
    MG_EXPECT_OK(be->cross_entropy_sums(be, r + TN, vl, r, tok, TV0, TN, TVL));
    MG_EXPECT_OK(be->cross_entropy_finish(be, vl, r + 3 * TN, r, r + TN, tok, dloss, TV0, TN, TVL));
    r += 4 * TN;
    memcpy(r, vl, sizeof(float) * TN * TVL);
    r += (size_t)TN * TVL;
    MG_EXPECT_OK(be->bias_residual_add(be, r, x, b, dout, TN, TH));
    free(vl);
    free(x), free(w), free(b), free(dout), free(lw), free(ldout), free(qkv), free(logits),
        free(dloss), free(out), free(aout), free(saved);
}

MG_TEST(cpu_results_independent_of_thread_count) {
#ifdef _OPENMP
    int omp0 = omp_get_max_threads(), blas0 = openblas_get_num_threads();
    float *r1 = t_zeros(TOUT), *r3 = t_zeros(TOUT);
    mg_backend *be = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 1));
    if (be) run_parallel_ops(t, be, r1), be->destroy(be);
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 3));
    if (be) run_parallel_ops(t, be, r3), be->destroy(be);
    size_t first = TOUT;
    for (size_t i = 0; i < TOUT && first == TOUT; i++)
        if (memcmp(&r1[i], &r3[i], sizeof(float))) first = i;
    MG_EXPECT(first == TOUT, "1 and 3 threads differ first at output %zu (%.9g vs %.9g)", first,
              first < TOUT ? r1[first] : 0.0, first < TOUT ? r3[first] : 0.0);
    omp_set_num_threads(omp0);
    openblas_set_num_threads(blas0);
    free(r1), free(r3);
#endif
}
