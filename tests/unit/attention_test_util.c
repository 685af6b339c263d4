#include "attention_test_util.h"

#include <math.h>

size_t mg_test_qkv_width(int nq, int ng, int hd) {
    return (size_t)ng * (nq / ng + 2) * hd;
}

void mg_test_attention_naive(float *out, const float *qkv, int B, int S, int nq, int ng, int hd,
                             const mg_dropout *d) {
    mg_test_attention_naive_doc(out, qkv, B, S, nq, ng, hd, d, NULL);
}

void mg_test_attention_naive_doc(float *out, const float *qkv, int B, int S, int nq, int ng, int hd,
                                 const mg_dropout *d, const int32_t *doc_start) {
    int r = nq / ng;
    size_t C = mg_test_qkv_width(nq, ng, hd);
    double sc[256]; /* S <= 256 */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nq; h++) {
            int g = h / r;
            for (int s = 0; s < S; s++) {
                const float *q = qkv + (b * S + s) * C + (g * (r + 2) + h % r) * hd;
                const int lo = doc_start ? doc_start[b * S + s] : 0; /* the first visible key */
                double mx = -1e300, sum = 0;
                for (int u = lo; u <= s; u++) {
                    const float *k = qkv + (b * S + u) * C + (g * (r + 2) + r) * hd;
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += (double)q[i] * k[i];
                    sc[u] = dot / sqrt((double)hd);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = lo; u <= s; u++) sum += (sc[u] = exp(sc[u] - mx));
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int u = lo; u <= s; u++)
                        o += sc[u] / sum * (d ? mg_dropout_attention(d, b, h, s, u, S) : 1.0) *
                             qkv[(b * S + u) * C + (g * (r + 2) + r + 1) * hd + i];
                    out[(b * S + s) * nq * hd + h * hd + i] = (float)o;
                }
            }
        }
}
