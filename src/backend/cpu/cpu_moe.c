/* MoE token movement and the experts' grouped products (backend_ops.h, "mixture of experts"):
 * permute / unpermute with the weighted combine, and the grouped linear and activations, each a
 * loop over the groups reading their sizes from the counts buffer (host memory here); and ECHO's
 * plan (core/echo_plan.h, run on the host); the receive budget's round counts
 * (core/slab_rounds.h). */
#include "backend/cpu/cpu_ops.h"

#include "core/slab_rounds.h"

#include <stdlib.h>
#include <string.h>

mg_status mg_cpu_moe_permute(mg_backend *be, void *xp_, int32_t *pos, int32_t *counts, float *load,
                             const void *x_, const int32_t *idx, int T, int k, int E, int H,
                             int pad) {
    (void)be;
    float *xp = xp_;
    const float *x = x_;
    int n = T * k;
    /* off (E + 1): each expert's first row; cur (E): the next row to fill */
    int32_t *off = malloc((size_t)(2 * E + 1) * sizeof *off);
    if (!off) return MG_FAIL(MG_ERR_NOMEM, "out of memory (permute)");
    int32_t *cur = off + E + 1;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int p = 0; p < n; p++)
        if (idx[p] >= 0) counts[idx[p]]++;
    for (int e = 0; pad > 0 && e < E; e++)
        if (counts[e] > pad) {
            free(off);
            return MG_FAIL(MG_ERR_INTERNAL, "expert %d keeps %d pairs, more than its %d rows", e,
                           counts[e], pad);
        }
    if (load)
        for (int e = 0; e < E; e++) load[e] += (float)counts[e];
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + (pad > 0 ? pad : counts[e]);
    for (int e = 0; e < E; e++) cur[e] = off[e];
    for (int p = 0; p < n; p++) pos[p] = idx[p] >= 0 ? cur[idx[p]]++ : -1;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < n; p++)
        if (pos[p] >= 0) memcpy(xp + (size_t)pos[p] * H, x + (size_t)(p / k) * H, H * sizeof *xp);
    /* the rows no pair fills: each expert's padding, or the tail after the kept pairs */
    int R = pad > 0 ? E * pad : n;
    if (pad > 0) {
        for (int e = 0; e < E; e++) {
            memset(xp + (size_t)cur[e] * H, 0, (size_t)(off[e + 1] - cur[e]) * H * sizeof *xp);
            counts[e] = pad;
        }
    } else {
        memset(xp + (size_t)off[E] * H, 0, (size_t)(R - off[E]) * H * sizeof *xp);
    }
    free(off);
    return MG_OK;
}

mg_status mg_cpu_moe_permute_backward(mg_backend *be, void *dx_, const void *dxp_,
                                      const int32_t *pos, int T, int k, int H) {
    (void)be;
    float *dx = dx_;
    const float *dxp = dxp_;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int32_t p = pos[(size_t)t * k + j];
            if (p < 0) continue;
            float *d = dx + (size_t)t * H;
            const float *s = dxp + (size_t)p * H;
            for (int h = 0; h < H; h++) d[h] += s[h];
        }
    return MG_OK;
}

mg_status mg_cpu_moe_regroup(mg_backend *be, void *dst_, const void *src_, const int32_t *counts,
                             int P, int El, int slab, int first, int H, bool to_slabs) {
    (void)be;
    float *dst = dst_;
    const float *src = src_;
    size_t packed = 0;
    for (int p = 0; p < P; p++) {
        size_t n = 0;
        for (int j = 0; j < El; j++) n += (size_t)counts[p * El + j];
        /* the block's window [first, first + slab) */
        size_t w = n > (size_t)first ? n - (size_t)first : 0;
        if (w > (size_t)slab) w = (size_t)slab;
        size_t at = (size_t)p * (size_t)slab, in = packed + (size_t)first;
        size_t from = to_slabs ? in : at, to = to_slabs ? at : in;
        memcpy(dst + to * H, src + from * H, w * (size_t)H * sizeof *dst);
        packed += n;
    }
    return MG_OK;
}

mg_status mg_cpu_moe_round_counts(mg_backend *be, int32_t *out, int32_t *rounds,
                                  const int32_t *counts, int P, int El, int slab, int first) {
    (void)be;
    int32_t n = mg_slab_round_counts(out, counts, P, El, slab, first);
    if (rounds) *rounds = n;
    return MG_OK;
}

mg_status mg_cpu_moe_unpermute(mg_backend *be, void *out_, const void *base_, const void *y_,
                               const int32_t *pos, const float *probs, int T, int k, int H) {
    (void)be;
    float *out = out_;
    const float *base = base_, *y = y_;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * H;
        if (base != out) memcpy(o, base + (size_t)t * H, H * sizeof *o);
        for (int j = 0; j < k; j++) {
            int32_t p = pos[(size_t)t * k + j];
            if (p < 0) continue;
            float w = probs[(size_t)t * k + j];
            const float *s = y + (size_t)p * H;
            for (int h = 0; h < H; h++) o[h] += w * s[h];
        }
    }
    return MG_OK;
}

mg_status mg_cpu_moe_unpermute_backward(mg_backend *be, void *dy_, float *dprobs, const void *dout_,
                                        const void *y_, const int32_t *pos, const float *probs,
                                        int T, int k, int H, int R) {
    (void)be;
    float *dy = dy_;
    const float *dout = dout_, *y = y_;
    memset(dy, 0, (size_t)R * H * sizeof *dy);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            size_t q = (size_t)t * k + j;
            if (pos[q] < 0) {
                dprobs[q] = 0;
                continue;
            }
            const float *d = dout + (size_t)t * H, *s = y + (size_t)pos[q] * H;
            float *o = dy + (size_t)pos[q] * H;
            double dot = 0;
            for (int h = 0; h < H; h++) {
                o[h] = probs[q] * d[h];
                dot += (double)d[h] * s[h];
            }
            dprobs[q] = (float)dot;
        }
    return MG_OK;
}

mg_status mg_cpu_grouped_linear_forward(mg_backend *be, void *out_, const void *inp_,
                                        void *const *w, void *const *bias, const int32_t *counts,
                                        int n_src, int n_w, int IC, int OC) {
    float *out = out_;
    const float *inp = inp_;
    size_t row = 0;
    for (int g = 0; g < n_src * n_w; g++) {
        int j = g % n_w, n = counts[g];
        MG_CHECK(mg_cpu_linear_forward(be, out + row * OC, inp + row * IC, w[j],
                                       bias ? bias[j] : NULL, NULL, n, IC, OC));
        row += (size_t)n;
    }
    return MG_OK;
}

mg_status mg_cpu_grouped_linear_backward(mg_backend *be, void *dinp_, float *const *dw,
                                         float *const *dbias, const void *dout_, const void *inp_,
                                         void *const *w, const void *gelu_pre_,
                                         const int32_t *counts, int n_src, int n_w, int IC, int OC,
                                         bool accumulate) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *gelu_pre = gelu_pre_;
    for (int j = 0; !accumulate && j < n_w; j++) { /* written over: from zero */
        memset(dw[j], 0, (size_t)OC * (size_t)IC * sizeof(float));
        if (dbias) memset(dbias[j], 0, (size_t)OC * sizeof(float));
    }
    size_t row = 0;
    for (int g = 0; g < n_src * n_w; g++) {
        int j = g % n_w, n = counts[g];
        MG_CHECK(mg_cpu_linear_backward(be, dinp ? dinp + row * IC : NULL, dw[j],
                                        dbias ? dbias[j] : NULL, dout + row * OC, inp + row * IC,
                                        w[j], gelu_pre ? gelu_pre + row * IC : NULL, n, IC, OC));
        row += (size_t)n;
    }
    return MG_OK;
}

static int total_rows(const int32_t *counts, int G) {
    int n = 0;
    for (int g = 0; g < G; g++) n += counts[g];
    return n;
}

mg_status mg_cpu_grouped_activation_forward(mg_backend *be, void *out, const void *pre,
                                            const int32_t *counts, int G, int F, bool swiglu) {
    int n = total_rows(counts, G);
    if (swiglu) return mg_cpu_swiglu_forward(be, out, pre, n, F);
    return mg_cpu_gelu_forward(be, out, pre, (size_t)n * (size_t)F);
}

mg_status mg_cpu_grouped_swiglu_backward(mg_backend *be, void *dpre, const void *pre,
                                         const void *dout, const int32_t *counts, int G, int F) {
    return mg_cpu_swiglu_backward(be, dpre, pre, dout, total_rows(counts, G), F);
}

mg_status mg_cpu_moe_echo_plan(mg_backend *be, int32_t *plan, float *after, const int32_t *counts,
                               const mg_echo_params *p) {
    (void)be;
    int32_t *scratch;
    mg_echo_plan q = mg_echo_plan_carve(p, plan, &scratch);
    mg_echo_plan_run(p, counts, &q, scratch);
    plan[0] = (int32_t)q.avg;
    for (int r = 0; after && r < p->ep; r++) after[r] += (float)q.rank_load[r];
    return MG_OK;
}

mg_status mg_cpu_moe_echo_reroute(mg_backend *be, int32_t *out, const int32_t *idx,
                                  const int32_t *pos, const int32_t *counts, const int32_t *plan,
                                  const mg_echo_params *p, int rank, int n) {
    (void)be;
    int32_t *scratch, *first = malloc((size_t)p->experts * sizeof *first);
    if (!first) return MG_FAIL(MG_ERR_NOMEM, "out of memory (echo reroute)");
    const mg_echo_plan q = mg_echo_plan_carve(p, (int32_t *)plan, &scratch);
    for (int e = 0, row = 0; e < p->experts; row += counts[e++]) first[e] = row;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const int32_t e = idx[i];
        out[i] = e < 0 ? -1 : mg_echo_reroute_pair(p, &q, rank, e, pos[i] - first[e]);
    }
    free(first);
    return MG_OK;
}

mg_status mg_cpu_moe_echo_move(mg_backend *be, void *slab_, void *const *table, const int32_t *plan,
                               const mg_echo_params *p, int rank, size_t n1w, size_t n1b,
                               size_t n2w, size_t n2b, int mode) {
    (void)be;
    int32_t *scratch;
    const mg_echo_plan q = mg_echo_plan_carve(p, (int32_t *)plan, &scratch);
    const int El = p->experts / p->ep + p->spares / p->ep, P = p->spares / p->ep;
    const size_t seg[4] = {n1w, n1b, n2w, n2b}, width = n1w + n1b + n2w + n2b;
    const bool grads = mode == MG_ECHO_SEND_GRADS || mode == MG_ECHO_ADD_GRADS;
    const bool to_slab = mode == MG_ECHO_SEND_WEIGHTS || mode == MG_ECHO_SEND_GRADS;
    const int rows = mode == MG_ECHO_SEND_WEIGHTS || mode == MG_ECHO_ADD_GRADS ? p->ep * P : P;
    float *slab = slab_;
    for (int r = 0; r < rows; r++) {
        int at, local;
        if (!mg_echo_move_row(p, &q, rank, mode, r, &at, &local)) continue;
        float *row = slab + (size_t)at * width;
        for (int s = 0; s < 4; row += seg[s], s++) {
            if (!seg[s]) continue;
            float *x = table[(size_t)((grads ? 4 : 0) + s) * El + local];
            if (to_slab)
                memcpy(row, x, seg[s] * sizeof *row);
            else if (mode == MG_ECHO_ADD_GRADS)
                for (size_t i = 0; i < seg[s]; i++) x[i] += row[i];
            else
                memcpy(x, row, seg[s] * sizeof *row);
        }
    }
    return MG_OK;
}
