/* The MoE router (backend_ops.h, "mixture of experts"): logits, top-k routing with Megatron's score
 * functions, group limits, expert bias, capacity dropping, the aux losses and the z-loss, and
 * their gradients. The reference the CUDA kernels are checked against: per-token work in
 * parallel, every sum over tokens in token order in double. */
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#define MG_MOE_MAX_EXPERTS 1024 /* per-token scratch on the stack */

mg_status mg_cpu_router_forward(mg_backend *be, float *logits, const void *x, const void *w, int T,
                                int H, int E) {
    return mg_cpu_linear_forward(be, logits, x, w, NULL, NULL, T, H, E);
}

mg_status mg_cpu_router_backward(mg_backend *be, void *dx, float *dw, const float *dlogits,
                                 const void *x, const void *w, int T, int H, int E) {
    (void)be;
    if (T <= 0) return MG_OK;
    /* dx (T,H) += dlogits (T,E) @ w (E,H); dw (E,H) += dlogits^T @ x: one call each */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, H, E, 1.0f, dlogits, E, w, H, 1.0f,
                dx, H);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, E, H, T, 1.0f, dlogits, E, x, H, 1.0f, dw,
                H);
    return MG_OK;
}

static void softmax_row(float *out, const float *l, int E) {
    if (E <= 0) return;
    float m = l[0];
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    double s = 0;
    for (int e = 0; e < E; e++) s += (out[e] = expf(l[e] - m));
    for (int e = 0; e < E; e++) out[e] = (float)(out[e] / s);
}

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* The k largest of v[0..n) (entries of mask 0 excluded when mask is given), largest first, ties
 * to the lower index. */
static void top_k(const float *v, const uint8_t *mask, int n, int k, int *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            if (mask && !mask[e]) continue;
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = out[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        out[j] = best;
    }
}

/* The scores of one token: `sc` (softmax, or sigmoid) and the selection scores `sel`. */
static void token_scores(const mg_moe_routing *r, const float *l, const float *bias, float *sc,
                         float *sel) {
    int E = r->E;
    if (r->score == MG_MOE_SCORE_SOFTMAX) { /* the scores are needed with pre-softmax only */
        if (r->pre_softmax) softmax_row(sc, l, E);
        for (int e = 0; e < E; e++) sel[e] = r->pre_softmax ? sc[e] : l[e];
    } else {
        for (int e = 0; e < E; e++) {
            sc[e] = sigmoidf(l[e]);
            sel[e] = sc[e] + (r->bias && bias ? bias[e] : 0.0f);
        }
    }
}

/* Megatron's group_limited_topk: groups ranked by the sum of their top k/group_k selection
 * scores; only the best group_k groups' experts may be chosen. */
static void group_mask(const mg_moe_routing *r, const float *sel, uint8_t *mask) {
    int G = r->groups, per = r->E / G, kk = r->k / r->group_k;
    float gs[MG_MOE_MAX_EXPERTS];
    int top[MG_MOE_MAX_EXPERTS];
    for (int g = 0; g < G; g++) {
        top_k(sel + g * per, NULL, per, kk, top);
        double s = 0;
        for (int i = 0; i < kk; i++) s += sel[g * per + top[i]];
        gs[g] = (float)s;
    }
    top_k(gs, NULL, G, r->group_k, top);
    for (int e = 0; e < r->E; e++) mask[e] = 0;
    for (int i = 0; i < r->group_k; i++)
        for (int e = 0; e < per; e++) mask[top[i] * per + e] = 1;
}

/* Selection and weights of token t. */
static void route_token(const mg_moe_routing *r, const float *l, const float *bias, int32_t *idx,
                        float *probs) {
    int E = r->E, k = r->k;
    if (E <= 0 || k <= 0) return;
    float sc[MG_MOE_MAX_EXPERTS], sel[MG_MOE_MAX_EXPERTS];
    uint8_t mask[MG_MOE_MAX_EXPERTS];
    int top[MG_MOE_MAX_EXPERTS];
    token_scores(r, l, bias, sc, sel);
    if (r->groups > 0) group_mask(r, sel, mask);
    top_k(sel, r->groups > 0 ? mask : NULL, E, k, top);
    if (r->score == MG_MOE_SCORE_SOFTMAX && !r->pre_softmax) {
        float sl[MG_MOE_MAX_EXPERTS];
        for (int j = 0; j < k; j++) sl[j] = l[top[j]];
        softmax_row(probs, sl, k);
    } else {
        double z = 0;
        for (int j = 0; j < k; j++) z += (probs[j] = sc[top[j]]);
        if (r->score == MG_MOE_SCORE_SIGMOID && k > 1)
            for (int j = 0; j < k; j++) probs[j] = (float)(probs[j] / (z + 1e-20));
    }
    for (int j = 0; j < k; j++) {
        probs[j] *= r->scaling;
        idx[j] = top[j];
    }
}

/* Position of token t in Megatron's sequence-first order (s, b): the position drop policy keeps
 * the earliest. */
static int64_t seq_first(const mg_moe_routing *r, int t) {
    int B = r->T / r->S;
    return (int64_t)(t % r->S) * B + t / r->S;
}

/* A routed pair and its keep priority: expert first, then (policy probs) the larger weight,
 * then the earlier position. */
typedef struct {
    int32_t e, pair;
    float neg_prob; /* 0 under the position policy */
    int64_t pos;
} keep_key;

static int keep_order(const void *a, const void *b) {
    const keep_key *x = a, *y = b;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    if (x->neg_prob != y->neg_prob) return x->neg_prob < y->neg_prob ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Megatron's apply_router_token_dropping: each expert keeps at most `capacity` of its pairs. One
 * sort of every routed pair by (expert, priority), then each expert's run is cut. */
static mg_status drop_over_capacity(const mg_moe_routing *r, int32_t *idx, const float *probs) {
    int n = r->T * r->k;
    keep_key *keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return MG_FAIL(MG_ERR_NOMEM, "out of memory (capacity dropping)");
    bool by_prob = r->drop == MG_MOE_DROP_PROBS;
    for (int p = 0; p < n; p++)
        keys[p] = (keep_key){idx[p], p, by_prob ? -probs[p] : 0.0f, seq_first(r, p / r->k)};
    qsort(keys, (size_t)n, sizeof *keys, keep_order);
    for (int i = 0, run = 0; i < n; i++) {
        run = i > 0 && keys[i].e == keys[i - 1].e ? run + 1 : 0;
        if (run >= r->capacity) idx[keys[i].pair] = -1 - keys[i].e;
    }
    free(keys);
    return MG_OK;
}

/* The aux loss's scores of a token: softmax, or sigmoid normalised over the experts. */
static void aux_scores(const mg_moe_routing *r, const float *l, float *p) {
    if (r->score == MG_MOE_SCORE_SOFTMAX) {
        softmax_row(p, l, r->E);
        return;
    }
    double z = 0;
    for (int e = 0; e < r->E; e++) z += (p[e] = sigmoidf(l[e]));
    for (int e = 0; e < r->E; e++) p[e] = (float)(p[e] / (z + 1e-20));
}

static bool aux_on(const mg_moe_routing *r) {
    return r->balancing != MG_MOE_LB_NONE && r->aux_coeff > 0;
}

/* Tokens in one aux-loss group (a sequence for seq_aux_loss, else all T) and the loss's factor:
 * L = factor x sum over groups and experts of n[g,e] x sum_{t in g} P[t,e]. */
static int aux_group(const mg_moe_routing *r) {
    return r->balancing == MG_MOE_LB_SEQ_AUX ? r->S : r->T;
}
static double aux_factor(const mg_moe_routing *r) {
    double n = aux_group(r), groups = (double)r->T / n;
    return (double)r->E / ((double)r->k * n * n * groups);
}

mg_status mg_cpu_moe_route(mg_backend *be, const mg_moe_routing *r, int32_t *idx, float *probs,
                           int32_t *aux_counts, float *stats, const float *logits,
                           const float *bias) {
    (void)be;
    int T = r->T, E = r->E, k = r->k;
    if (E > MG_MOE_MAX_EXPERTS)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "%d experts: the CPU router handles at most %d", E,
                       MG_MOE_MAX_EXPERTS);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        route_token(r, logits + (size_t)t * E, bias, idx + (size_t)t * k, probs + (size_t)t * k);
    if (r->capacity > 0) MG_CHECK(drop_over_capacity(r, idx, probs));
    if (aux_on(r)) {
        int n = aux_group(r), groups = T / n;
        for (int i = 0; i < groups * E; i++) aux_counts[i] = 0;
        double L = 0;
        for (int g = 0; g < groups; g++) {
            double psum[MG_MOE_MAX_EXPERTS] = {0};
            for (int t = g * n; t < (g + 1) * n; t++) {
                float p[MG_MOE_MAX_EXPERTS];
                int top[MG_MOE_MAX_EXPERTS];
                aux_scores(r, logits + (size_t)t * E, p);
                top_k(p, NULL, E, k, top);
                for (int j = 0; j < k; j++) aux_counts[g * E + top[j]]++;
                for (int e = 0; e < E; e++) psum[e] += p[e];
            }
            for (int e = 0; e < E; e++) L += aux_counts[g * E + e] * psum[e];
        }
        stats[0] += (float)(r->stat_weight * L * aux_factor(r));
    }
    if (r->z_coeff > 0) {
        double z = 0;
        for (int t = 0; t < T; t++) {
            const float *l = logits + (size_t)t * E;
            float m = l[0];
            for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
            double s = 0;
            for (int e = 0; e < E; e++) s += exp((double)l[e] - m);
            double lse = m + log(s);
            z += lse * lse;
        }
        stats[1] += (float)(r->stat_weight * z / T);
    }
    return MG_OK;
}

/* d(loss)/d(logits) of a softmax p given d(loss)/d(p): p (dp - p . dp), added to dl. */
static void softmax_backward_add(float *dl, const float *p, const float *dp, int n) {
    double dot = 0;
    for (int e = 0; e < n; e++) dot += (double)p[e] * dp[e];
    for (int e = 0; e < n; e++) dl[e] += (float)(p[e] * (dp[e] - dot));
}

/* The gradient through the routing weights of token t into dl (E). */
static void route_token_backward(const mg_moe_routing *r, const float *l, const int32_t *idx,
                                 const float *dprobs, float *dl) {
    int E = r->E, k = r->k, sel[MG_MOE_MAX_EXPERTS];
    float dq[MG_MOE_MAX_EXPERTS];
    if (E <= 0 || k <= 0) return;
    for (int j = 0; j < k; j++) {
        sel[j] = idx[j] >= 0 ? idx[j] : -1 - idx[j];
        dq[j] = dprobs[j] * r->scaling;
    }
    if (r->score == MG_MOE_SCORE_SOFTMAX && !r->pre_softmax) {
        float sl[MG_MOE_MAX_EXPERTS], q[MG_MOE_MAX_EXPERTS], dsl[MG_MOE_MAX_EXPERTS] = {0};
        for (int j = 0; j < k; j++) sl[j] = l[sel[j]];
        softmax_row(q, sl, k);
        softmax_backward_add(dsl, q, dq, k);
        for (int j = 0; j < k; j++) dl[sel[j]] += dsl[j];
    } else if (r->score == MG_MOE_SCORE_SOFTMAX) {
        float sc[MG_MOE_MAX_EXPERTS], dsc[MG_MOE_MAX_EXPERTS] = {0};
        softmax_row(sc, l, E);
        for (int j = 0; j < k; j++) dsc[sel[j]] += dq[j];
        softmax_backward_add(dl, sc, dsc, E);
    } else {
        float s[MG_MOE_MAX_EXPERTS];
        double z = 0, dot = 0;
        for (int j = 0; j < k; j++) {
            s[j] = sigmoidf(l[sel[j]]);
            z += s[j];
            dot += (double)dq[j] * s[j];
        }
        z += 1e-20;
        for (int j = 0; j < k; j++) {
            double ds = k > 1 ? dq[j] / z - dot / (z * z) : dq[j];
            dl[sel[j]] += (float)(ds * s[j] * (1.0f - s[j]));
        }
    }
}

/* d(training objective) / d(aux loss or z-loss): the weight times the loss scale. */
static double loss_weight(const mg_moe_routing *r) {
    return (double)r->loss_weight * (r->loss_scale ? (double)*r->loss_scale : 1.0);
}

/* The aux loss's and the z-loss's gradients of token t (in aux group g) into dl. */
static void loss_backward(const mg_moe_routing *r, const float *l, const int32_t *counts,
                          float *dl) {
    int E = r->E;
    if (aux_on(r)) {
        float p[MG_MOE_MAX_EXPERTS], dp[MG_MOE_MAX_EXPERTS];
        double w = loss_weight(r) * r->aux_coeff * aux_factor(r);
        for (int e = 0; e < E; e++) dp[e] = (float)(w * counts[e]);
        if (r->score == MG_MOE_SCORE_SOFTMAX) {
            softmax_row(p, l, E);
            softmax_backward_add(dl, p, dp, E);
        } else { /* P = s / (sum s + 1e-20), s = sigmoid(l) */
            float s[MG_MOE_MAX_EXPERTS];
            double z = 0, dot = 0;
            for (int e = 0; e < E; e++) z += (s[e] = sigmoidf(l[e]));
            z += 1e-20;
            for (int e = 0; e < E; e++) dot += (double)dp[e] * s[e];
            for (int e = 0; e < E; e++)
                dl[e] += (float)((dp[e] / z - dot / (z * z)) * s[e] * (1.0f - s[e]));
        }
    }
    if (r->z_coeff > 0) {
        float m = l[0];
        for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
        double s = 0;
        for (int e = 0; e < E; e++) s += exp((double)l[e] - m);
        double lse = m + log(s), w = loss_weight(r) * r->z_coeff * 2.0 * lse / r->T;
        for (int e = 0; e < E; e++) dl[e] += (float)(w * exp((double)l[e] - lse));
    }
}

mg_status mg_cpu_moe_route_backward(mg_backend *be, const mg_moe_routing *r, float *dlogits,
                                    const float *dprobs, const float *logits, const int32_t *idx,
                                    const float *probs, const int32_t *aux_counts,
                                    const float *bias) {
    (void)be, (void)probs, (void)bias;
    int E = r->E, k = r->k, n = aux_group(r);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < r->T; t++) {
        float *dl = dlogits + (size_t)t * E;
        const float *l = logits + (size_t)t * E;
        for (int e = 0; e < E; e++) dl[e] = 0;
        route_token_backward(r, l, idx + (size_t)t * k, dprobs + (size_t)t * k, dl);
        loss_backward(r, l, aux_counts + (size_t)(t / n) * E, dl);
    }
    return MG_OK;
}

mg_status mg_cpu_moe_expert_bias_update(mg_backend *be, float *bias, const float *load, int E,
                                        float rate) {
    (void)be;
    double mean = 0;
    for (int e = 0; e < E; e++) mean += load[e];
    mean /= E;
    for (int e = 0; e < E; e++) {
        double off = mean - load[e];
        bias[e] += rate * (float)((off > 0) - (off < 0));
    }
    return MG_OK;
}
