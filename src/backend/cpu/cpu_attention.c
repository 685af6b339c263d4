/* Causal self-attention over the fused qkv buffer (layout in backend.h), the plain way: the
 * softmax probabilities P (B, nq, S, S) are kept in `saved` for backward (entries above the
 * diagonal are zero). Forward is parallel over (batch, query head); backward over (batch, kv
 * group), because the r query heads of a group all add into the same dk and dv: one work item
 * owns a whole group, so those sums run in a fixed order whatever the thread count. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

static mg_status attention_check(int nq, int ng, int hd) {
    if (ng <= 0 || nq % ng != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "attention: %d query heads do not split into %d groups", nq,
                       ng);
    if (hd <= 0) return MG_FAIL(MG_ERR_INTERNAL, "attention: head dim %d", hd);
    return MG_OK;
}

size_t mg_cpu_attention_saved_bytes(mg_backend *be, int B, int S, int nq, int hd) {
    return (size_t)B * nq * S * S * sizeof(float);
}

static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

mg_status mg_cpu_attention_forward(mg_backend *be, void *out_, void *saved, const void *qkv_, int B,
                                   int S, int nq, int ng, int hd) {
    MG_CHECK(attention_check(nq, ng, hd));
    float *out = out_;       // (B*S, nq*hd)
    const float *qkv = qkv_; // (B*S, ng*(r+2)*hd)
    float *P = saved;        // (B, nq, S, S)
    int r = nq / ng;
    size_t C = (size_t)ng * (r + 2) * hd, OW = (size_t)nq * hd; /* row widths */
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < nq; h++) {
            int g = h / r, j = h % r;
            const float *base = qkv + (size_t)b * S * C;
            size_t qo = ((size_t)g * (r + 2) + j) * hd, ko = ((size_t)g * (r + 2) + r) * hd,
                   vo = ko + hd;
            for (int s = 0; s < S; s++) {
                const float *q = base + s * C + qo;
                float *p = P + (((size_t)b * nq + h) * S + s) * S; // (S)
                float mx = -INFINITY;
                for (int t = 0; t <= s; t++) {
                    p[t] = dot(q, base + t * C + ko, hd) * scale;
                    if (p[t] > mx) mx = p[t];
                }
                double sum = 0;
                for (int t = 0; t <= s; t++) {
                    p[t] = expf(p[t] - mx);
                    sum += p[t];
                }
                float inv = (float)(1.0 / sum);
                for (int t = 0; t <= s; t++) p[t] *= inv;
                for (int t = s + 1; t < S; t++) p[t] = 0.0f;
                float *o = out + ((size_t)b * S + s) * OW + (size_t)h * hd;
                for (int d = 0; d < hd; d++) o[d] = 0.0f;
                for (int t = 0; t <= s; t++) {
                    const float *v = base + t * C + vo;
                    for (int d = 0; d < hd; d++) o[d] += p[t] * v[d];
                }
            }
        }
    }
    return MG_OK;
}

/* With P = softmax(z), out = P v:  dv_t += P_st dout_s;  dP_st = dout_s . v_t;
 * dz_st = P_st (dP_st - D_s) with D_s = sum_t P_st dP_st = dout_s . out_s;
 * dq_s += scale dz_st k_t;  dk_t += scale dz_st q_s. */
mg_status mg_cpu_attention_backward(mg_backend *be, void *dqkv_, const void *dout_,
                                    const void *qkv_, const void *out_, const void *saved, int B,
                                    int S, int nq, int ng, int hd) {
    MG_CHECK(attention_check(nq, ng, hd));
    float *dqkv = dqkv_;       // (B*S, ng*(r+2)*hd), overwritten
    const float *dout = dout_; // (B*S, nq*hd)
    const float *qkv = qkv_;   // (B*S, ng*(r+2)*hd)
    const float *out = out_;   // (B*S, nq*hd)
    const float *P = saved;    // (B, nq, S, S)
    int r = nq / ng;
    size_t C = (size_t)ng * (r + 2) * hd, OW = (size_t)nq * hd, GW = (size_t)(r + 2) * hd;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < ng; g++) {
            const float *base = qkv + (size_t)b * S * C + g * GW;
            float *dbase = dqkv + (size_t)b * S * C + g * GW;
            for (int s = 0; s < S; s++) memset(dbase + s * C, 0, GW * sizeof(float));
            size_t ko = (size_t)r * hd, vo = ko + hd;
            for (int j = 0; j < r; j++) {
                int h = g * r + j;
                size_t qo = (size_t)j * hd;
                for (int s = 0; s < S; s++) {
                    const float *p = P + (((size_t)b * nq + h) * S + s) * S; // (S)
                    const float *dos = dout + ((size_t)b * S + s) * OW + (size_t)h * hd;
                    const float *os = out + ((size_t)b * S + s) * OW + (size_t)h * hd;
                    const float *q = base + s * C + qo;
                    float *dq = dbase + s * C + qo;
                    float D = dot(dos, os, hd);
                    for (int t = 0; t <= s; t++) {
                        const float *k = base + t * C + ko, *v = base + t * C + vo;
                        float *dk = dbase + t * C + ko, *dv = dbase + t * C + vo;
                        float dz = p[t] * (dot(dos, v, hd) - D) * scale;
                        for (int d = 0; d < hd; d++) {
                            dq[d] += dz * k[d];
                            dk[d] += dz * q[d];
                            dv[d] += p[t] * dos[d];
                        }
                    }
                }
            }
        }
    }
    return MG_OK;
}
