/* CPU backend tests, part 2: rotary embedding, causal attention (GQA) and fused cross-entropy,
 * against naive references in double and central finite differences (cpu_test_util.h). */
#include "cpu_test_util.h"
#include "attention_test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Shapes with GQA: nq = 4 query heads in ng = 2 groups (r = 2), hd = 6, S = 5 (not a power of
 * two). The fused row is ng*(r+2)*hd = 48 wide. */
enum { AB = 2, AS = 5, ANQ = 4, ANG = 2, AHD = 6 };

/* Real rotary tables: angle = s * 10000^(-2i/hd), so cos^2 + sin^2 = 1. */
static void rope_tables(float *cos_tab, float *sin_tab, int S, int hd) {
    for (int s = 0; s < S; s++)
        for (int i = 0; i < hd / 2; i++) {
            double a = s * pow(10000.0, -2.0 * i / hd);
            cos_tab[s * (hd / 2) + i] = (float)cos(a);
            sin_tab[s * (hd / 2) + i] = (float)sin(a);
        }
}

/* Is column c of a fused row a value column? */
static int is_v(size_t c, int nq, int ng, int hd) {
    int r = nq / ng;
    return (int)((c / hd) % (size_t)(r + 2)) == r + 1;
}

typedef struct {
    mg_backend *be;
    float *qkv, *work, *cs, *sn, *R;
    int N, S;
} rope_ctx;

static double rope_obj(void *c_) {
    rope_ctx *c = c_;
    size_t n = (size_t)c->N * mg_test_qkv_width(ANQ, ANG, AHD);
    memcpy(c->work, c->qkv, n * sizeof(float));
    c->be->rope_forward(c->be, c->work, c->cs, c->sn, NULL, c->N, c->S, ANQ, ANG, AHD, AHD);
    return t_dotd(c->work, c->R, n);
}

MG_TEST(cpu_rope_forward_inverse_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const int N = AB * AS, C = (int)mg_test_qkv_width(ANQ, ANG, AHD), half = AHD / 2, r = ANQ / ANG;
    size_t n = (size_t)N * C;
    rope_ctx c = {
        be, t_rnd(40, n, 1), t_zeros(n), t_zeros(AS * half), t_zeros(AS * half), t_rnd(41, n, 1), N,
        AS};
    rope_tables(c.cs, c.sn, AS, AHD);
    rope_obj(&c); /* c.work = rope(qkv) */
    /* forward against the formula, per query/key head; values bitwise untouched */
    double maxd = 0;
    int v_changed = 0;
    for (int i = 0; i < N; i++)
        for (int col = 0; col < C; col++) {
            float x = c.qkv[i * C + col], y = c.work[i * C + col];
            if (is_v((size_t)col, ANQ, ANG, AHD)) {
                v_changed += x != y;
                continue;
            }
            int head0 = col / AHD * AHD, k = col % AHD, s = i % AS;
            int kk = k % half;
            double cs = c.cs[s * half + kk], sn = c.sn[s * half + kk];
            double ref = k < half ? x * cs - c.qkv[i * C + head0 + k + half] * sn
                                  : x * cs + c.qkv[i * C + head0 + k - half] * sn;
            maxd = fmax(maxd, fabs(ref - y));
        }
    MG_EXPECT(maxd < 1e-6, "rope forward differs from the formula by %g", maxd);
    MG_EXPECT(v_changed == 0, "%d value entries changed", v_changed);
    /* backward(forward(x)) = x: the rotation is orthogonal */
    float *back = t_dup(c.work, n);
    MG_EXPECT_OK(be->rope_backward(be, back, c.cs, c.sn, NULL, N, AS, ANQ, ANG, AHD, AHD));
    double e_inv = mg_test_rel_err(back, c.qkv, n);
    MG_EXPECT(e_inv < 1e-6, "rope backward(forward(x)) differs from x: %g", e_inv);
    /* gradient: backward(R), value part passes through unchanged */
    float *g = t_dup(c.R, n);
    MG_EXPECT_OK(be->rope_backward(be, g, c.cs, c.sn, NULL, N, AS, ANQ, ANG, AHD, AHD));
    double e = t_fd_err(c.qkv, n, g, rope_obj, &c);
    MG_EXPECT(e < T_FD_TOL, "fd err %g", e);
    MG_EXPECT(g[(r + 1) * AHD + 2] == c.R[(r + 1) * AHD + 2], "value gradient changed");
    MG_EXPECT(be->rope_forward(be, c.work, c.cs, c.sn, NULL, N, AS, 4, 3, AHD, AHD) ==
                  MG_ERR_INTERNAL,
              "nq %% ng != 0 accepted");
    free(c.qkv), free(c.work), free(c.cs), free(c.sn), free(c.R), free(back), free(g);
    be->destroy(be);
}

MG_TEST(cpu_attention_forward_matches_naive) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    /* GQA, plain multi-head (ng = nq) and multi-query (ng = 1) */
    const int cfg[3][2] = {{ANQ, ANG}, {ANQ, ANQ}, {ANQ, 1}};
    for (int c = 0; c < 3; c++) {
        int nq = cfg[c][0], ng = cfg[c][1], N = AB * AS;
        size_t n = (size_t)N * mg_test_qkv_width(nq, ng, AHD), no = (size_t)N * nq * AHD;
        size_t sb = be->attention_saved_bytes(be, AB, AS, nq, AHD);
        MG_EXPECT(sb == (size_t)AB * nq * AS * AS * sizeof(float), "saved bytes %zu", sb);
        float *qkv = t_rnd(50 + c, n, 1.5f), *out = t_zeros(no), *ref = t_zeros(no);
        float *saved = t_zeros(sb / sizeof(float));
        MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, AB, AS, nq, ng, AHD, NULL, NULL));
        mg_test_attention_naive(ref, qkv, AB, AS, nq, ng, AHD, NULL);
        double e = mg_test_rel_err(out, ref, no);
        MG_EXPECT(e < 1e-6, "nq %d ng %d: rel err %g", nq, ng, e);
        /* saved probabilities: rows sum to 1, zero above the diagonal */
        double worst = 0;
        for (int row = 0; row < AB * nq * AS; row++) {
            double s = 0;
            for (int u = 0; u < AS; u++) {
                s += saved[row * AS + u];
                if (u > row % AS) worst = fmax(worst, fabs(saved[row * AS + u]));
            }
            worst = fmax(worst, fabs(s - 1));
        }
        MG_EXPECT(worst < 1e-6, "saved probabilities off by %g", worst);
        free(qkv), free(out), free(ref), free(saved);
    }
    be->destroy(be);
}

typedef struct {
    mg_backend *be;
    float *qkv, *out, *saved, *R;
    int nq, ng;
} att_ctx;

static double att_obj(void *c_) {
    att_ctx *c = c_;
    c->be->attention_forward(c->be, c->out, c->saved, c->qkv, AB, AS, c->nq, c->ng, AHD, NULL,
                             NULL);
    return t_dotd(c->out, c->R, (size_t)AB * AS * c->nq * AHD);
}

MG_TEST(cpu_attention_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const int cfg[2][2] = {{ANQ, ANG}, {3, 1}};
    for (int k = 0; k < 2; k++) {
        int nq = cfg[k][0], ng = cfg[k][1], N = AB * AS;
        size_t n = (size_t)N * mg_test_qkv_width(nq, ng, AHD), no = (size_t)N * nq * AHD;
        att_ctx c = {be,
                     t_rnd(60 + k, n, 1.5f),
                     t_zeros(no),
                     t_zeros(be->attention_saved_bytes(be, AB, AS, nq, AHD) / sizeof(float)),
                     t_rnd(62 + k, no, 1),
                     nq,
                     ng};
        att_obj(&c);
        float *dqkv = t_rnd(64, n, 1); /* garbage: dqkv is overwritten */
        MG_EXPECT_OK(be->attention_backward(be, dqkv, c.R, c.qkv, c.out, c.saved, AB, AS, nq, ng,
                                            AHD, NULL, NULL));
        double e = t_fd_err(c.qkv, n, dqkv, att_obj, &c);
        MG_EXPECT(e < T_FD_TOL, "nq %d ng %d: fd err %g", nq, ng, e);
        free(c.qkv), free(c.out), free(c.saved), free(c.R), free(dqkv);
    }
    be->destroy(be);
}

/* Longer sequences: the backend takes queries in blocks of 64 rows (cpu_attention.c), so S = 70 and
 * S = 130 exercise a full block followed by partial ones, and keys beyond a block's reach. Forward
 * against the naive reference; backward against central differences (S = 70, small heads so the
 * check stays quick); and the same bits with 1 and 3 threads. */
typedef struct {
    mg_backend *be;
    float *qkv, *out, *saved, *R;
    int B, S, nq, ng, hd;
} att_long_ctx;

static double att_long_obj(void *c_) {
    att_long_ctx *c = c_;
    c->be->attention_forward(c->be, c->out, c->saved, c->qkv, c->B, c->S, c->nq, c->ng, c->hd, NULL,
                             NULL);
    return t_dotd(c->out, c->R, (size_t)c->B * c->S * c->nq * c->hd);
}

MG_TEST(cpu_attention_long_sequences_blocks) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const int cfg[2][5] = {{2, 70, 4, 2, 8}, {1, 130, 2, 1, 16}}; /* B, S, nq, ng, hd */
    for (int k = 0; k < 2; k++) {
        int B = cfg[k][0], S = cfg[k][1], nq = cfg[k][2], ng = cfg[k][3], hd = cfg[k][4];
        size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
        float *qkv = t_rnd(80 + k, n, 1.5f), *out = t_zeros(no), *ref = t_zeros(no);
        float *saved = t_zeros(be->attention_saved_bytes(be, B, S, nq, hd) / sizeof(float));
        MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, B, S, nq, ng, hd, NULL, NULL));
        mg_test_attention_naive(ref, qkv, B, S, nq, ng, hd, NULL);
        double e = mg_test_rel_err(out, ref, no);
        MG_EXPECT(e < 1e-6, "S %d: forward rel err %g", S, e);
        free(qkv), free(out), free(ref), free(saved);
    }
    /* gradient, S = 70: one full block of 64 queries and a partial one of 6 */
    {
        int B = 1, S = 70, nq = 2, ng = 1, hd = 4;
        size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
        att_long_ctx c = {be,
                          t_rnd(84, n, 1.5f),
                          t_zeros(no),
                          t_zeros(be->attention_saved_bytes(be, B, S, nq, hd) / sizeof(float)),
                          t_rnd(85, no, 1),
                          B,
                          S,
                          nq,
                          ng,
                          hd};
        att_long_obj(&c);
        float *dqkv = t_rnd(86, n, 1); /* garbage: dqkv is overwritten */
        MG_EXPECT_OK(be->attention_backward(be, dqkv, c.R, c.qkv, c.out, c.saved, B, S, nq, ng, hd,
                                            NULL, NULL));
        double e = t_fd_err(c.qkv, n, dqkv, att_long_obj, &c);
        MG_EXPECT(e < T_FD_TOL, "S %d: fd err %g", S, e);
        free(c.qkv), free(c.out), free(c.saved), free(c.R), free(dqkv);
    }
    be->destroy(be);
#ifdef _OPENMP
    /* 1 vs 3 threads, GQA, S = 130: forward output and every part of dqkv bitwise equal */
    int omp0 = omp_get_max_threads();
    int B = 3, S = 130, nq = 4, ng = 2, hd = 16;
    size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
    float *qkv = t_rnd(87, n, 1.5f), *dout = t_rnd(88, no, 1), *res[2];
    for (int v = 0; v < 2; v++) {
        mg_backend *b2 = NULL;
        res[v] = t_zeros(no + n);
        MG_EXPECT_OK(mg_backend_cpu_create(&b2, v == 0 ? 1 : 3));
        if (!b2) continue;
        float *saved = t_zeros(b2->attention_saved_bytes(b2, B, S, nq, hd) / sizeof(float));
        MG_EXPECT_OK(b2->attention_forward(b2, res[v], saved, qkv, B, S, nq, ng, hd, NULL, NULL));
        MG_EXPECT_OK(b2->attention_backward(b2, res[v] + no, dout, qkv, res[v], saved, B, S, nq, ng,
                                            hd, NULL, NULL));
        free(saved);
        b2->destroy(b2);
    }
    MG_EXPECT(memcmp(res[0], res[1], (no + n) * sizeof(float)) == 0,
              "attention differs between 1 and 3 threads");
    omp_set_num_threads(omp0);
    free(qkv), free(dout), free(res[0]), free(res[1]);
#endif
}

/* ---------------------------------------------------------------- cross-entropy */

enum { XN = 4, XV = 11 };

typedef struct {
    mg_backend *be;
    float *logits, *work, *losses, *dloss;
    int32_t *tgt;
} xent_ctx;

static double xent_obj(void *c_) {
    xent_ctx *c = c_;
    memcpy(c->work, c->logits, sizeof(float) * XN * XV);
    c->be->cross_entropy_fused(c->be, c->work, c->losses, c->tgt, c->dloss, XN, XV);
    return t_dotd(c->losses, c->dloss, XN);
}

MG_TEST(cpu_cross_entropy_matches_naive_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    int32_t tgt[XN] = {3, 0, 10, 7};
    xent_ctx c = {be, t_rnd(70, XN * XV, 2), t_zeros(XN * XV), t_zeros(XN), t_rnd(71, XN, 1), tgt};
    c.dloss[2] = 0; /* a masked row: its gradient must be exactly zero */
    xent_obj(&c);
    float ref_loss[XN], ref_grad[XN * XV];
    for (int i = 0; i < XN; i++) {
        double z = 0;
        for (int j = 0; j < XV; j++) z += exp((double)c.logits[i * XV + j]);
        ref_loss[i] = (float)(log(z) - c.logits[i * XV + tgt[i]]);
        for (int j = 0; j < XV; j++)
            ref_grad[i * XV + j] =
                (float)((exp((double)c.logits[i * XV + j]) / z - (j == tgt[i])) * c.dloss[i]);
    }
    double el = mg_test_rel_err(c.losses, ref_loss, XN),
           eg = mg_test_rel_err(c.work, ref_grad, XN * XV);
    MG_EXPECT(el < 1e-6 && eg < 1e-6, "loss rel err %g, grad rel err %g", el, eg);
    int nz = 0;
    for (int j = 0; j < XV; j++) nz += c.work[2 * XV + j] != 0;
    MG_EXPECT(nz == 0, "row with dloss 0 has %d non-zero gradients", nz);
    float *grad = t_dup(c.work, XN * XV);
    double e = t_fd_err(c.logits, XN * XV, grad, xent_obj, &c);
    MG_EXPECT(e < T_FD_TOL, "fd err %g", e);
    /* stability: shifting a row by a large constant changes nothing */
    float big[XV], small[XV], lb, ls, one = 1;
    for (int j = 0; j < XV; j++) small[j] = c.logits[j], big[j] = c.logits[j] + 1e4f;
    MG_EXPECT_OK(be->cross_entropy_fused(be, small, &ls, tgt, &one, 1, XV));
    MG_EXPECT_OK(be->cross_entropy_fused(be, big, &lb, tgt, &one, 1, XV));
    MG_EXPECT(isfinite(lb) && fabs(lb - ls) < 2e-3, "shifted loss %g vs %g", lb, ls);
    int32_t bad = XV;
    mg_status st = be->cross_entropy_fused(be, small, &ls, &bad, &one, 1, XV);
    MG_EXPECT(st == MG_ERR_INTERNAL && strstr(mg_error_message(), "outside the vocabulary"),
              "target out of range: %s", mg_error_message());
    free(c.logits), free(c.work), free(c.losses), free(c.dloss), free(grad);
    be->destroy(be);
}
