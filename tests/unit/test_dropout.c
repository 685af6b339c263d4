/* Dropout (core/dropout.h, the CPU ops dropout_add, dropout_backward and attention with a
 * drop): the mask's statistics (keep fraction, lanes, neighbours, independence between keys)
 * against the binomial law, its documented counter layout against core/rng's Philox, the scale
 * 1/(1-p), the ops against independent formulations (the formula element by element, a naive
 * attention in double, central differences), and the offsets that make tensor and sequence
 * parallel shards draw the one-rank mask.
 *
 * Statistical bounds: n independent draws kept with probability q have a kept fraction of
 * standard deviation sqrt(q(1-q)/n); every bound below is 5 of them (a correct mask fails one
 * with probability ~6e-7, and the draws are seeded, so a pass is reproducible), tight enough
 * that a threshold off by 1% of p, a lane used twice or a key field ignored fails. */
#include "cpu_test_util.h"
#include "attention_test_util.h"

#include "core/dropout.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define SIGMAS 5.0

static double bound(double q, double n) {
    return SIGMAS * sqrt(q * (1 - q) / n);
}

static int kept(const mg_dropout *d, uint32_t sample, uint32_t head, uint64_t e) {
    return mg_dropout_factor(d, sample, head, e) != 0.0f;
}

MG_TEST(dropout_mask_keep_fraction_and_scale) {
    const double ps[] = {0.1, 0.3, 0.5};
    for (int k = 0; k < 3; k++) {
        double p = ps[k];
        mg_dropout d = mg_dropout_init(p, 1234, 7, 3, MG_DROPOUT_ATTENTION, 0, 0);
        MG_EXPECT(d.scale == (float)(1.0 / (1.0 - p)), "p %g: scale %.9g", p, d.scale);
        /* 2^20 draws: 16 sequences x 4 heads x 16384 elements */
        double n = 0, keep = 0, lane[4] = {0}, pairs = 0, both = 0, fsum = 0;
        int bad_value = 0;
        for (uint32_t s = 0; s < 16; s++)
            for (uint32_t h = 0; h < 4; h++) {
                int prev = -1;
                for (uint64_t e = 0; e < 16384; e++) {
                    float f = mg_dropout_factor(&d, s, h, e);
                    bad_value += f != 0.0f && f != d.scale;
                    int kk = f != 0.0f;
                    n += 1;
                    keep += kk;
                    lane[e & 3] += kk;
                    fsum += f;
                    if (prev >= 0) pairs += 1, both += prev && kk;
                    prev = kk;
                }
            }
        double q = 1 - p;
        MG_EXPECT(bad_value == 0, "p %g: %d factors neither 0 nor 1/(1-p)", p, bad_value);
        MG_EXPECT(fabs(keep / n - q) <= bound(q, n), "p %g: kept %.6f of %.0f, want %.6f +- %.2g",
                  p, keep / n, n, q, bound(q, n));
        for (int l = 0; l < 4; l++)
            MG_EXPECT(fabs(lane[l] / (n / 4) - q) <= bound(q, n / 4), "p %g lane %d: kept %.6f", p,
                      l, lane[l] / (n / 4));
        /* neighbours are independent: both kept with probability q^2 */
        MG_EXPECT(fabs(both / pairs - q * q) <= bound(q * q, pairs),
                  "p %g: neighbours both kept %.6f, want %.6f", p, both / pairs, q * q);
        /* the expectation is kept: E f = 1, Var f = p / (1 - p) */
        MG_EXPECT(fabs(fsum / n - 1) <= SIGMAS * sqrt(p / q / n), "p %g: mean factor %.6f", p,
                  fsum / n);
    }
    /* p = 0 keeps everything at factor 1 exactly */
    mg_dropout z = mg_dropout_init(0.0, 1, 2, 3, MG_DROPOUT_MLP_OUT, 0, 0);
    int off = 0;
    for (uint64_t e = 0; e < 4096; e++) off += mg_dropout_factor(&z, 1, 0, e) != 1.0f;
    MG_EXPECT(z.threshold == 0 && off == 0, "p = 0: threshold %u, %d factors not 1", z.threshold,
              off);
}

/* The documented counter layout, drawn with core/rng's mg_philox (its own known-answer test in
 * test_core.c): changing it would change every mask, and resumed runs would no longer draw what
 * their first half drew. */
MG_TEST(dropout_mask_counter_layout) {
    mg_dropout d = mg_dropout_init(0.25, 0x89ABCDEFull, 0x1234567, 11, MG_DROPOUT_ATTN_OUT, 5, 0);
    MG_EXPECT(d.threshold == 0x40000000u && d.site == (11u << 20 | 2u << 16),
              "threshold %#x, site %#x", d.threshold, d.site);
    int bad = 0;
    for (uint32_t head = 0; head < 3; head++)
        for (uint64_t e = 0; e < 64; e++) {
            uint32_t ctr[4] = {(uint32_t)(e >> 2), 9, 0x1234567, d.site | head}, out[4];
            uint32_t key[2] = {0x89ABCDEFu, MG_DROPOUT_SALT};
            mg_philox(ctr, key, out);
            float want = out[e & 3] >= 0x40000000u ? d.scale : 0.0f;
            bad += mg_dropout_factor(&d, 9, head, e) != want;
        }
    MG_EXPECT(bad == 0, "%d factors differ from Philox at the documented counters", bad);
    /* the hidden and attention helpers address those counters */
    int hb = 0, ab = 0;
    for (int i = 0; i < 12; i++) /* rows of 3 sequences of 4 tokens, H = 6 */
        for (int h = 0; h < 6; h++)
            hb += mg_dropout_hidden(&d, i, h, 4, 6) !=
                  mg_dropout_factor(&d, (uint32_t)(5 + i / 4), 0, (uint64_t)(i % 4) * 6 + h);
    d.first = 2; /* the op's head 0 is global head 2 */
    for (int s = 0; s < 8; s++)
        for (int u = 0; u <= s; u++)
            ab += mg_dropout_attention(&d, 1, 1, s, u, 8) !=
                  mg_dropout_factor(&d, 6, 3, (uint64_t)s * 8 + u);
    MG_EXPECT(hb == 0 && ab == 0, "hidden %d, attention %d factors at the wrong counters", hb, ab);
}

/* Every key field changes the mask: two keys differing in one field disagree on a fraction
 * 2p(1-p) of the elements when their draws are independent; the same key agrees everywhere. */
MG_TEST(dropout_mask_keys_are_independent) {
    const double p = 0.2, q = 2 * p * (1 - p);
    mg_dropout base = mg_dropout_init(p, 42, 10, 2, MG_DROPOUT_ATTENTION, 0, 0);
    struct {
        const char *what;
        mg_dropout d;
        uint32_t dsample, dhead;
    } v[] = {{"seed", mg_dropout_init(p, 43, 10, 2, MG_DROPOUT_ATTENTION, 0, 0), 0, 0},
             {"iteration", mg_dropout_init(p, 42, 11, 2, MG_DROPOUT_ATTENTION, 0, 0), 0, 0},
             {"layer", mg_dropout_init(p, 42, 10, 3, MG_DROPOUT_ATTENTION, 0, 0), 0, 0},
             {"site", mg_dropout_init(p, 42, 10, 2, MG_DROPOUT_MLP_OUT, 0, 0), 0, 0},
             {"sample", base, 1, 0},
             {"head", base, 0, 1},
             {"same key", base, 0, 0}};
    const double n = 65536;
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        double differ = 0;
        for (uint64_t e = 0; e < (uint64_t)n; e++)
            differ += kept(&base, 3, 1, e) != kept(&v[k].d, 3 + v[k].dsample, 1 + v[k].dhead, e);
        if (k == sizeof v / sizeof *v - 1)
            MG_EXPECT(differ == 0, "%s: %.0f elements differ", v[k].what, differ);
        else
            MG_EXPECT(fabs(differ / n - q) <= bound(q, n),
                      "%s: %.5f of the elements differ, want %.5f", v[k].what, differ / n, q);
    }
}

/* dropout_add and dropout_backward against the formula, H = 6 (blocks of 4 straddle rows): out
 * = residual + f (x + bias) bit for bit (the same fp32 operations), in place too; rows of a
 * sequence-parallel shard (first > 0) draw the whole microbatch's; the backward is the forward's
 * mask; the kept fraction over a larger call is binomial; any thread count gives the same bits. */
MG_TEST(cpu_dropout_add_matches_formula) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 3, S = 5, N = B * S, H = 6 };
    mg_dropout d = mg_dropout_init(0.3, 99, 4, 1, MG_DROPOUT_ATTN_OUT, 8, 0);
    float *x = t_rnd(200, N * H, 1), *bias = t_rnd(201, H, 1), *res = t_rnd(202, N * H, 1);
    float *out = t_zeros(N * H), *ref = t_zeros(N * H);
    MG_EXPECT_OK(be->dropout_add(be, out, x, bias, res, N, H, S, &d));
    int zeros = 0;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            float f = mg_dropout_hidden(&d, i, h, S, H);
            zeros += f == 0.0f;
            ref[i * H + h] = res[i * H + h] + f * (x[i * H + h] + bias[h]);
        }
    MG_EXPECT(!memcmp(out, ref, sizeof(float) * N * H), "dropout_add differs from the formula");
    MG_EXPECT(zeros > 0 && zeros < N * H, "%d of %d dropped: the test sees no mask", zeros, N * H);
    /* two sequence-parallel shards of the rows: first = 0 and first = N/2 rows */
    float *shard = t_dup(x, N * H);
    mg_dropout d1 = d;
    d1.first = 7;
    MG_EXPECT_OK(be->dropout_add(be, shard, shard, bias, res, 7, H, S, &d));
    MG_EXPECT_OK(
        be->dropout_add(be, shard + 7 * H, shard + 7 * H, bias, res + 7 * H, N - 7, H, S, &d1));
    MG_EXPECT(!memcmp(shard, ref, sizeof(float) * N * H), "sharded rows draw another mask");
    /* backward: f dout, the same as the forward of dout with no bias and a zero residual */
    float *dx = t_zeros(N * H), *zero = t_zeros(N * H), *fwd = t_zeros(N * H);
    MG_EXPECT_OK(be->dropout_backward(be, dx, res, N, H, S, &d));
    MG_EXPECT_OK(be->dropout_add(be, fwd, res, NULL, zero, N, H, S, &d));
    int bad = 0;
    for (int i = 0; i < N * H; i++)
        bad += dx[i] != mg_dropout_hidden(&d, i / H, i % H, S, H) * res[i] || dx[i] != fwd[i];
    MG_EXPECT(bad == 0, "%d backward elements are not f dout", bad);
    free(x), free(bias), free(res), free(out), free(ref), free(shard), free(dx), free(zero),
        free(fwd);

    /* the kept fraction through the op, and the thread count */
    enum { N2 = 512, H2 = 96 };
    mg_dropout d2 = mg_dropout_init(0.1, 5, 0, 0, MG_DROPOUT_MLP_OUT, 0, 0);
    float *ones = t_zeros(N2 * H2), *z2 = t_zeros(N2 * H2), *o[2] = {t_zeros(N2 * H2), NULL};
    for (int i = 0; i < N2 * H2; i++) ones[i] = 1.0f;
    MG_EXPECT_OK(be->dropout_add(be, o[0], ones, NULL, z2, N2, H2, 64, &d2));
    double k = 0;
    for (int i = 0; i < N2 * H2; i++) k += o[0][i] != 0.0f;
    double n = (double)N2 * H2;
    MG_EXPECT(fabs(k / n - 0.9) <= bound(0.9, n), "kept %.5f, want 0.9 +- %.2g", k / n,
              bound(0.9, n));
#ifdef _OPENMP
    mg_backend *b1 = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&b1, 1));
    o[1] = t_zeros(N2 * H2);
    if (b1) MG_EXPECT_OK(b1->dropout_add(b1, o[1], ones, NULL, z2, N2, H2, 64, &d2));
    MG_EXPECT(!memcmp(o[0], o[1], sizeof(float) * N2 * H2), "1 thread draws another mask");
    if (b1) b1->destroy(b1);
#endif
    free(ones), free(z2), free(o[0]), free(o[1]);
    be->destroy(be);
}

/* ---------------------------------------------------------------- attention */

typedef struct {
    mg_backend *be;
    float *qkv, *out, *saved, *R;
    int B, S, nq, ng, hd;
    const mg_dropout *d;
} att_ctx;

static double att_obj(void *c_) {
    att_ctx *c = c_;
    c->be->attention_forward(c->be, c->out, c->saved, c->qkv, c->B, c->S, c->nq, c->ng, c->hd, c->d,
                             NULL);
    return t_dotd(c->out, c->R, (size_t)c->B * c->S * c->nq * c->hd);
}

/* Forward against the naive reference (GQA, multi-head, multi-query; S = 70: a block of 64
 * queries and a partial one), a sequence and head offset (sample0, first); the saved softmax is
 * the undropped one; backward against central differences; and 1 vs 3 threads bit for bit. */
MG_TEST(cpu_attention_dropout_matches_naive_and_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const int cfg[4][5] = {{2, 5, 4, 2, 6}, {2, 5, 4, 4, 6}, {2, 5, 4, 1, 6}, {1, 70, 2, 1, 8}};
    for (int c = 0; c < 4; c++) {
        int B = cfg[c][0], S = cfg[c][1], nq = cfg[c][2], ng = cfg[c][3], hd = cfg[c][4];
        mg_dropout d = mg_dropout_init(0.3, 17, 3, 1, MG_DROPOUT_ATTENTION, 2, 4);
        size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
        size_t sb = be->attention_saved_bytes(be, B, S, nq, hd);
        float *qkv = t_rnd(300 + c, n, 1.5f), *out = t_zeros(no), *ref = t_zeros(no);
        float *saved = t_zeros(sb / sizeof(float)), *plain = t_zeros(no);
        MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, B, S, nq, ng, hd, &d, NULL));
        mg_test_attention_naive(ref, qkv, B, S, nq, ng, hd, &d);
        double e = mg_test_rel_err(out, ref, no);
        MG_EXPECT(e < 1e-6, "B %d S %d nq %d ng %d: forward rel err %g", B, S, nq, ng, e);
        /* the saved probabilities are the softmax's: rows sum to 1 */
        double worst = 0;
        for (int row = 0; row < B * nq * S; row++) {
            double s = 0;
            for (int u = 0; u < S; u++) s += saved[(size_t)row * S + u];
            worst = fmax(worst, fabs(s - 1));
        }
        MG_EXPECT(worst < 1e-5, "saved probabilities off by %g", worst);
        MG_EXPECT_OK(be->attention_forward(be, plain, saved, qkv, B, S, nq, ng, hd, NULL, NULL));
        MG_EXPECT(mg_test_rel_err(out, plain, no) > 1e-2, "S %d: dropout changed nothing", S);
        free(qkv), free(out), free(ref), free(saved), free(plain);
    }
    /* gradients: GQA with S = 5, and S = 70 across a query block */
    const int gcfg[2][5] = {{2, 5, 4, 2, 6}, {1, 70, 2, 1, 4}};
    for (int c = 0; c < 2; c++) {
        int B = gcfg[c][0], S = gcfg[c][1], nq = gcfg[c][2], ng = gcfg[c][3], hd = gcfg[c][4];
        mg_dropout d = mg_dropout_init(0.3, 17, 3, 1, MG_DROPOUT_ATTENTION, 1, 2);
        size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
        att_ctx x = {be,
                     t_rnd(310 + c, n, 1.5f),
                     t_zeros(no),
                     t_zeros(be->attention_saved_bytes(be, B, S, nq, hd) / sizeof(float)),
                     t_rnd(312 + c, no, 1),
                     B,
                     S,
                     nq,
                     ng,
                     hd,
                     &d};
        att_obj(&x);
        float *dqkv = t_rnd(314, n, 1); /* garbage: overwritten */
        MG_EXPECT_OK(be->attention_backward(be, dqkv, x.R, x.qkv, x.out, x.saved, B, S, nq, ng, hd,
                                            &d, NULL));
        double e = t_fd_err(x.qkv, n, dqkv, att_obj, &x);
        MG_EXPECT(e < T_FD_TOL, "S %d nq %d ng %d: fd err %g", S, nq, ng, e);
        free(x.qkv), free(x.out), free(x.saved), free(x.R), free(dqkv);
    }
    be->destroy(be);
#ifdef _OPENMP
    int omp0 = omp_get_max_threads();
    int B = 3, S = 130, nq = 4, ng = 2, hd = 16;
    mg_dropout d = mg_dropout_init(0.1, 3, 1, 0, MG_DROPOUT_ATTENTION, 0, 0);
    size_t n = (size_t)B * S * mg_test_qkv_width(nq, ng, hd), no = (size_t)B * S * nq * hd;
    float *qkv = t_rnd(320, n, 1.5f), *dout = t_rnd(321, no, 1), *res[2];
    for (int v = 0; v < 2; v++) {
        mg_backend *b2 = NULL;
        res[v] = t_zeros(no + n);
        MG_EXPECT_OK(mg_backend_cpu_create(&b2, v == 0 ? 1 : 3));
        if (!b2) continue;
        float *saved = t_zeros(b2->attention_saved_bytes(b2, B, S, nq, hd) / sizeof(float));
        MG_EXPECT_OK(b2->attention_forward(b2, res[v], saved, qkv, B, S, nq, ng, hd, &d, NULL));
        MG_EXPECT_OK(b2->attention_backward(b2, res[v] + no, dout, qkv, res[v], saved, B, S, nq, ng,
                                            hd, &d, NULL));
        free(saved);
        b2->destroy(b2);
    }
    MG_EXPECT(memcmp(res[0], res[1], (no + n) * sizeof(float)) == 0,
              "attention with dropout differs between 1 and 3 threads");
    omp_set_num_threads(omp0);
    free(qkv), free(dout), free(res[0]), free(res[1]);
#endif
}

/* The mask as attention applies it, read off the output: with q = k = 0 every row of P is
 * uniform, 1/(s+1), and with v_t the unit vector e_t (hd >= S) out[s, t] = f(s, t) / (s + 1).
 * So the kept fraction of the causal triangle is binomial, the kept values are 1/((1-p)(s+1)),
 * and tensor parallelism's head offset draws the whole model's heads: the two halves of the
 * heads (first = 0 and nq/2, on their own query groups) give the whole call's outputs. */
MG_TEST(cpu_attention_dropout_reveals_the_mask) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 2, S = 32, NQ = 4, NG = 2, HD = 32 };
    const double p = 0.25;
    mg_dropout d = mg_dropout_init(p, 77, 5, 2, MG_DROPOUT_ATTENTION, 3, 0);
    size_t C = mg_test_qkv_width(NQ, NG, HD), n = (size_t)B * S * C, no = (size_t)B * S * NQ * HD;
    float *qkv = t_zeros(n), *out = t_zeros(no);
    int r = NQ / NG;
    for (int b = 0; b < B; b++)
        for (int t2 = 0; t2 < S; t2++)
            for (int g = 0; g < NG; g++)
                qkv[(b * S + t2) * C + (g * (r + 2) + r + 1) * HD + t2] = 1;
    float *saved = t_zeros(be->attention_saved_bytes(be, B, S, NQ, HD) / sizeof(float));
    MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, B, S, NQ, NG, HD, &d, NULL));
    double k = 0, tri = 0;
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NQ; h++)
            for (int s = 0; s < S; s++)
                for (int u = 0; u < HD; u++) {
                    float got = out[(b * S + s) * NQ * HD + h * HD + u];
                    float f = u <= s ? mg_dropout_attention(&d, b, h, s, u, S) : 0.0f;
                    bad += fabsf(got * (float)(s + 1) - f) > 1e-5f * d.scale;
                    if (u <= s) tri += 1, k += got != 0.0f;
                }
    MG_EXPECT(bad == 0, "%d outputs are not f(s, t) / (s + 1)", bad);
    MG_EXPECT(fabs(k / tri - (1 - p)) <= bound(1 - p, tri), "kept %.4f of the causal triangle",
              k / tri);
    /* the heads in two tensor-parallel halves: each half's fused rows are its query groups */
    size_t Ch = mg_test_qkv_width(NQ / 2, NG / 2, HD), noh = (size_t)B * S * NQ / 2 * HD;
    float *half = t_zeros((size_t)B * S * Ch), *oh = t_zeros(noh);
    int mism = 0;
    for (int part = 0; part < 2; part++) {
        for (int row = 0; row < B * S; row++)
            memcpy(half + row * Ch, qkv + row * C + part * Ch, Ch * sizeof(float));
        mg_dropout dp = d;
        dp.first = part * NQ / 2;
        MG_EXPECT_OK(
            be->attention_forward(be, oh, saved, half, B, S, NQ / 2, NG / 2, HD, &dp, NULL));
        for (int row = 0; row < B * S; row++)
            mism += memcmp(oh + (size_t)row * NQ / 2 * HD,
                           out + (size_t)row * NQ * HD + (size_t)part * NQ / 2 * HD,
                           NQ / 2 * HD * sizeof(float)) != 0;
    }
    MG_EXPECT(mism == 0, "%d rows of the head halves differ from the whole call's", mism);
    free(qkv), free(out), free(saved), free(half), free(oh);
    be->destroy(be);
}
