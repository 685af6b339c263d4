/* Mixture of experts on the CPU backend: --moe-layer-freq's patterns, the router's gradients
 * against central differences of its own objective (every score function, group limits, expert
 * bias, capacity dropping, the aux losses and the z-loss), the grouped linear against a naive
 * product on skewed group sizes, and permute / combine against a direct sum. The model-level
 * numbers are checked against PyTorch in test_golden_model.c. */
#include "cpu_test_util.h"

#include "config/flags.h"
#include "core/slab_rounds.h"

#include <math.h>

MG_TEST(moe_layer_freq_patterns) {
    mg_config c;
    mg_config_defaults(&c);
    c.num_experts = 4;
    uint8_t m[12];
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "([1]*3+[0]*1)*3");
    MG_EXPECT_OK(mg_config_moe_layers(&c, m, 12));
    for (int l = 0; l < 12; l++) MG_EXPECT(m[l] == (l % 4 != 3), "layer %d: %d", l, m[l]);
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "2");
    MG_EXPECT_OK(mg_config_moe_layers(&c, m, 5));
    for (int l = 0; l < 5; l++) MG_EXPECT(m[l] == (l % 2 == 0), "every 2nd: layer %d", l);
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, " [0, 1] + [1]*0 + ([1])*2 ");
    MG_EXPECT_OK(mg_config_moe_layers(&c, m, 4));
    MG_EXPECT(!m[0] && m[1] && m[2] && m[3], "list sum");
    const char *bad[] = {"[2]", "[1,0", "0", "[1]*", "[]", "[1]+", "[1]x2", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "%s", bad[i]);
        MG_EXPECT(mg_config_moe_layers(&c, m, 1) == MG_ERR_USAGE, "'%s' accepted", bad[i]);
        mg_error_clear();
    }
    c.num_experts = 0; /* a dense model: no MoE layer, whatever the pattern says */
    MG_EXPECT_OK(mg_config_moe_layers(&c, m, 3));
    MG_EXPECT(!m[0] && !m[1] && !m[2], "dense");
}

/* J(logits) = sum over kept pairs of c * probs + aux loss + z-loss (loss and stat weights 1). */
static double route_objective(mg_backend *be, const mg_moe_routing *r, const float *logits,
                              const float *bias, const float *c, int32_t *idx, float *probs,
                              int32_t *counts) {
    float stats[2] = {0, 0};
    if (be->moe_route(be, r, idx, probs, counts, stats, logits, bias) != MG_OK) return NAN;
    double j = r->aux_coeff * stats[0] + r->z_coeff * stats[1];
    for (int p = 0; p < r->T * r->k; p++)
        if (idx[p] >= 0) j += (double)c[p] * probs[p];
    return j;
}

static void check_route_gradient(mg_test_ctx *t, mg_backend *be, const char *what,
                                 mg_moe_routing r) {
    int T = r.T, E = r.E, k = r.k;
    r.loss_weight = r.stat_weight = 1.0f;
    float *logits = t_rnd(1, (size_t)T * E, 1.0f), *c = t_rnd(2, (size_t)T * k, 1.0f);
    float *bias = t_rnd(3, (size_t)E, 0.3f), *probs = t_zeros((size_t)T * k);
    float *dl = t_zeros((size_t)T * E), *dprobs = t_zeros((size_t)T * k);
    int32_t *idx = calloc((size_t)T * k, sizeof *idx), *idx2 = calloc((size_t)T * k, sizeof *idx);
    int32_t *counts = calloc((size_t)T * E, sizeof *counts);
    int32_t *counts2 = calloc((size_t)T * E, sizeof *counts);
    route_objective(be, &r, logits, bias, c, idx, probs, counts);
    for (int p = 0; p < T * k; p++) dprobs[p] = idx[p] >= 0 ? c[p] : 0.0f;
    int dropped = 0;
    for (int p = 0; p < T * k; p++) dropped += idx[p] < 0;
    MG_EXPECT(r.capacity == 0 || dropped > 0, "%s: the capacity drops nothing", what);
    MG_EXPECT_OK(be->moe_route_backward(be, &r, dl, dprobs, logits, idx, probs, counts, bias));
    double worst = 0, scale = 0;
    for (int i = 0; i < T * E; i++) {
        float x0 = logits[i];
        logits[i] = x0 + T_FD_H;
        float xp = logits[i];
        double jp = route_objective(be, &r, logits, bias, c, idx2, probs, counts2);
        bool same = !memcmp(idx, idx2, (size_t)T * k * sizeof *idx) &&
                    !memcmp(counts, counts2, (size_t)T * E * sizeof *counts);
        logits[i] = x0 - T_FD_H;
        float xm = logits[i];
        double jm = route_objective(be, &r, logits, bias, c, idx2, probs, counts2);
        same &= !memcmp(idx, idx2, (size_t)T * k * sizeof *idx) &&
                !memcmp(counts, counts2, (size_t)T * E * sizeof *counts);
        logits[i] = x0;
        if (!same) continue; /* a selection (routing or the aux loss's) moved: a kink */
        double fd = (jp - jm) / ((double)xp - xm);
        worst = fmax(worst, fabs(fd - dl[i]));
        scale = fmax(scale, fabs(fd));
    }
    MG_EXPECT(scale > 0 && worst / scale < T_FD_TOL, "%s: gradient error %.3g of %.3g", what, worst,
              scale);
    free(logits), free(c), free(bias), free(probs), free(dl), free(dprobs);
    free(idx), free(idx2), free(counts), free(counts2);
}

MG_TEST(moe_route_gradients_match_finite_differences) {
    mg_backend *be;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (t->failures) return;
    const mg_moe_routing base = {.T = 24, .S = 6, .E = 8, .k = 2, .scaling = 1.0f};
    mg_moe_routing r = base;
    r.balancing = MG_MOE_LB_AUX, r.aux_coeff = 0.1f, r.z_coeff = 0.01f;
    check_route_gradient(t, be, "softmax top-k, aux, z", r);
    r = base;
    r.pre_softmax = true, r.scaling = 2.5f, r.k = 3, r.capacity = 6;
    r.balancing = MG_MOE_LB_SEQ_AUX, r.aux_coeff = 0.1f;
    check_route_gradient(t, be, "pre-softmax, scaling, capacity (probs), seq aux", r);
    r.drop = MG_MOE_DROP_POSITION;
    check_route_gradient(t, be, "pre-softmax, capacity (position)", r);
    r = base;
    r.score = MG_MOE_SCORE_SIGMOID, r.bias = true, r.groups = 4, r.group_k = 2;
    r.balancing = MG_MOE_LB_AUX, r.aux_coeff = 0.1f, r.z_coeff = 0.01f;
    check_route_gradient(t, be, "sigmoid, expert bias, groups, aux, z", r);
    r.k = 1, r.groups = 0, r.group_k = 0;
    check_route_gradient(t, be, "sigmoid top-1", r);
    be->destroy(be);
}

/* The grouped linear against a naive product per group: n_src x n_w groups of skewed sizes (an
 * empty group, one with most rows, a weight whose first source has no rows, a weight with none),
 * weights and biases indexed g % n_w; its backward's weight gradients are the sums over every
 * group of a weight, added to what dw and dbias held (accumulate) or written over it (NaN
 * before: a weight with no rows gets zeros). */
MG_TEST(moe_grouped_linear_matches_naive_products) {
    mg_backend *be;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (t->failures) return;
    enum { NS = 2, NW = 4, IC = 5, OC = 7 };
    int32_t counts[NS * NW] = {0, 9, 1, 0, 3, 0, 2, 0};
    int R = 0;
    for (int g = 0; g < NS * NW; g++) R += counts[g];
    float *x = t_rnd(10, (size_t)R * IC, 1.0f), *dout = t_rnd(11, (size_t)R * OC, 1.0f);
    float *w[NW], *b[NW], *dw[NW], *db[NW], *dw0[NW], *db0[NW];
    for (int j = 0; j < NW; j++) {
        w[j] = t_rnd(20 + j, OC * IC, 1.0f), b[j] = t_rnd(30 + j, OC, 1.0f);
        dw0[j] = t_rnd(40 + j, OC * IC, 1.0f), db0[j] = t_rnd(50 + j, OC, 1.0f);
        dw[j] = t_zeros(OC * IC), db[j] = t_zeros(OC);
    }
    float *y = t_zeros((size_t)R * OC), *dx = t_zeros((size_t)R * IC);
    MG_EXPECT_OK(be->grouped_linear_forward(be, y, x, (void *const *)w, (void *const *)b, counts,
                                            NS, NW, IC, OC));
    double ey = 0, ex = 0;
    double gw[NW][OC * IC] = {{0}}, gb[NW][OC] = {{0}};
    for (int g = 0, row = 0; g < NS * NW; g++)
        for (int n = 0; n < counts[g]; n++, row++) {
            int j = g % NW;
            for (int o = 0; o < OC; o++) {
                double s = b[j][o];
                for (int i = 0; i < IC; i++) s += (double)x[row * IC + i] * w[j][o * IC + i];
                ey = fmax(ey, fabs(s - y[row * OC + o]));
                gb[j][o] += dout[row * OC + o];
                for (int i = 0; i < IC; i++)
                    gw[j][o * IC + i] += (double)dout[row * OC + o] * x[row * IC + i];
            }
        }
    for (int accumulate = 1; accumulate >= 0; accumulate--) {
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < OC * IC; i++) {
                dw[j][i] = accumulate ? dw0[j][i] : NAN;
                if (i < OC) db[j][i] = accumulate ? db0[j][i] : NAN;
            }
        MG_EXPECT_OK(be->grouped_linear_backward(be, dx, dw, db, dout, x, (void *const *)w, NULL,
                                                 counts, NS, NW, IC, OC, accumulate));
        double ew = 0, eb = 0;
        for (int g = 0, row = 0; g < NS * NW; g++)
            for (int n = 0; n < counts[g]; n++, row++)
                for (int i = 0; i < IC; i++) {
                    double s = 0;
                    for (int o = 0; o < OC; o++)
                        s += (double)dout[row * OC + o] * w[g % NW][o * IC + i];
                    ex = fmax(ex, fabs(s - dx[row * IC + i]));
                }
        for (int j = 0; j < NW; j++)
            for (int o = 0; o < OC; o++) {
                double pb = accumulate ? db0[j][o] : 0.0;
                eb = fmax(eb, isnan(db[j][o]) ? INFINITY : fabs(gb[j][o] + pb - db[j][o]));
                for (int i = 0; i < IC; i++) {
                    double pw = accumulate ? dw0[j][o * IC + i] : 0.0, v = dw[j][o * IC + i];
                    ew = fmax(ew, isnan(v) ? INFINITY : fabs(gw[j][o * IC + i] + pw - v));
                }
            }
        MG_EXPECT(ey < 1e-5 && ex < 1e-5 && ew < 1e-5 && eb < 1e-5,
                  "accumulate %d: errors: out %.3g, dinp %.3g, dw %.3g, dbias %.3g", accumulate, ey,
                  ex, ew, eb);
    }
    for (int j = 0; j < NW; j++)
        free(w[j]), free(b[j]), free(dw[j]), free(db[j]), free(dw0[j]), free(db0[j]);
    free(x), free(dout), free(y), free(dx);
    be->destroy(be);
}

/* permute then combine: out[t] = base[t] + sum over kept pairs of p * x[t] (the experts as the
 * identity), and the padded layout keeps every expert's rows at e x capacity. */
MG_TEST(moe_permute_combine_round_trip) {
    mg_backend *be;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (t->failures) return;
    enum { T = 10, K = 2, E = 4, H = 3, CAP = 7 };
    int32_t idx[T * K], pos[T * K], counts[E];
    float probs[T * K], load[E] = {0};
    for (int p = 0; p < T * K; p++) {
        idx[p] = (p * 7 + p / K) % E;
        if (p % K == 1 && idx[p] == idx[p - 1]) idx[p] = (idx[p] + 1) % E;
        probs[p] = 0.1f * (float)(p % 5 + 1);
    }
    idx[3] = -1 - idx[3]; /* one dropped pair */
    float *x = t_rnd(40, T * H, 1.0f), *base = t_rnd(41, T * H, 1.0f);
    for (int pad = 0; pad <= CAP; pad += CAP) {
        int R = pad ? E * pad : T * K;
        float *xp = t_rnd(42, (size_t)R * H, 1.0f), *out = t_zeros(T * H);
        MG_EXPECT_OK(be->moe_permute(be, xp, pos, counts, load, x, idx, T, K, E, H, pad));
        MG_EXPECT_OK(be->moe_unpermute(be, out, base, xp, pos, probs, T, K, H));
        double err = 0;
        for (int tk = 0; tk < T; tk++)
            for (int h = 0; h < H; h++) {
                double s = base[tk * H + h];
                for (int j = 0; j < K; j++)
                    if (idx[tk * K + j] >= 0) s += probs[tk * K + j] * x[tk * H + h];
                err = fmax(err, fabs(s - out[tk * H + h]));
            }
        MG_EXPECT(err < 1e-6, "pad %d: combine error %.3g", pad, err);
        int kept = 0;
        for (int p = 0; p < T * K; p++) kept += idx[p] >= 0;
        int rows = 0;
        for (int e = 0; e < E; e++) rows += counts[e];
        MG_EXPECT(rows == (pad ? E * pad : kept), "pad %d: %d rows", pad, rows);
        MG_EXPECT(pos[3] == -1, "the dropped pair has a row");
        for (int p = 0; pad && p < T * K; p++)
            if (idx[p] >= 0)
                MG_EXPECT(pos[p] / pad == idx[p], "pair %d outside its expert's rows", p);
        free(xp), free(out);
    }
    free(x), free(base);
    be->destroy(be);
}

/* Expert parallelism's regroup in rounds: blocks of rows (sizes summed from counts; one empty,
 * one filling its slab, one of 8 rows that takes two windows of a 5-row slab) go from packed to
 * their slabs at p x slab, window by window (rows [first, first + slab) of each block), and back;
 * rows no window covers are left as they were, and the two rounds bring every row back. The
 * round counts of each window, the number of rounds and each block's window as the CUDA kernels
 * compute it (mg_slab_window), by hand. */
MG_TEST(moe_regroup_rounds) {
    mg_backend *be;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (t->failures) return;
    enum { P = 4, EL = 2, SLAB = 5, H = 4, ROWS = 16 };
    const int32_t counts[P * EL] = {2, 1, 0, 0, 4, 1, 3, 5}; /* blocks of 3, 0, 5 and 8 rows */
    const int rows[P] = {3, 0, 5, 8};
    const int32_t want_rc[2][P * EL] = {{2, 1, 0, 0, 4, 1, 3, 2}, {0, 0, 0, 0, 0, 0, 0, 3}};
    size_t n = (size_t)ROWS * H;
    float *packed = t_rnd(50, n, 1.0f), *back = t_rnd(52, n, 1.0f);
    float *slabs = malloc((size_t)P * SLAB * H * sizeof *slabs);
    float *fill = t_rnd(51, (size_t)P * SLAB * H, 1.0f);
    int bad = 0;
    for (int round = 0; round < 2; round++) {
        int first = round * SLAB;
        int32_t rc[P * EL], nr = 0;
        MG_EXPECT_OK(be->moe_round_counts(be, rc, &nr, counts, P, EL, SLAB, first));
        MG_EXPECT(nr == 2, "round counts: %d rounds, want 2", (int)nr);
        for (int i = 0; i < P * EL; i++) bad += rc[i] != want_rc[round][i];
        memcpy(slabs, fill, (size_t)P * SLAB * H * sizeof *slabs);
        MG_EXPECT_OK(be->moe_regroup(be, slabs, packed, counts, P, EL, SLAB, first, H, true));
        MG_EXPECT_OK(be->moe_regroup(be, back, slabs, counts, P, EL, SLAB, first, H, false));
        for (int p = 0, at = 0; p < P; at += rows[p], p++) {
            int w = rows[p] - first < 0 ? 0 : rows[p] - first > SLAB ? SLAB : rows[p] - first;
            int64_t w_at = -1; /* the kernels' window of the block (core/slab_rounds.h) */
            int64_t got = mg_slab_window(counts, p, EL, SLAB, first, &w_at);
            MG_EXPECT(got == w && w_at == at + first,
                      "mg_slab_window block %d first %d: %lld rows from %lld, want %d from %d", p,
                      first, (long long)got, (long long)w_at, w, at + first);
            for (int r = 0; r < SLAB; r++)
                for (int h = 0; h < H; h++) {
                    size_t q = ((size_t)p * SLAB + r) * H + h;
                    float want = r < w ? packed[((size_t)at + first + r) * H + h] : fill[q];
                    bad += slabs[q] != want;
                }
        }
    }
    for (size_t i = 0; i < n; i++) bad += back[i] != packed[i];
    MG_EXPECT(bad == 0, "%d values misplaced by the regroup rounds", bad);
    int32_t one = 0;
    const int32_t small[P * EL] = {1, 1, 0, 0, 2, 0, 0, 5};
    MG_EXPECT_OK(be->moe_round_counts(be, NULL, &one, small, P, EL, SLAB, 0));
    MG_EXPECT(one == 1, "blocks within a slab take %d rounds, want 1", (int)one);
    free(packed), free(slabs), free(back), free(fill);
    be->destroy(be);
}
