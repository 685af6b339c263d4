/* Causal self-attention over the fused qkv buffer (layout in backend_ops.h). The softmax
 * probabilities P (B, nq, S, S) are kept in `saved` for backward (entries above the diagonal are
 * zero).
 *
 * The products go to OpenBLAS (cblas_sgemm, single-threaded, see cpu_linear.c), reading q, k, v in
 * place from the fused buffer with the row width as leading dimension. Queries are taken in blocks
 * of MG_ATT_QB rows; a block [s0, s0+m) only sees keys [0, s0+m), so about half of the causal
 * triangle's wasted upper part is never computed, and every sgemm call has a shape fixed by
 * (S, hd) alone. Forward is parallel over (batch, query head). Backward is parallel over
 * (batch, kv group), because the r query heads of a group all add into the same dk and dv: one
 * work item owns a whole group and visits its heads and query blocks in a fixed order, so those
 * sums never depend on the thread count.
 *
 * Attention dropout (drop != NULL): `saved` keeps the undropped softmax P; the product with v
 * takes P f (f: core/dropout.h's factor, 0 or 1/(1-p)) from a per-thread block of the scratch
 * buffer, and the backward recomputes f: dv += (P f)^T dout, dP = f (dout v^T), and
 * dz = P o (dP - D) with D = dout . out as without dropout (out = (P f) v).
 *
 * Document mask (doc_start != NULL, --reset-attention-mask): query s sees keys
 * [doc_start[s], s]. A block of queries computes only the keys from the smallest doc_start of
 * its rows (its first row's: they are non-decreasing), so the keys of earlier documents cost
 * nothing; the entries of a row outside its range are exact zeros in P and in the products. */
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Query rows per block: large enough for efficient sgemm calls, small enough that the part above
 * the diagonal computed and then masked stays small ((S/QB + 1) / (2 S/QB) of the full square). */
#define MG_ATT_QB 64

static mg_status attention_check(int nq, int ng, int hd) {
    if (ng <= 0 || nq % ng != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "attention: %d query heads do not split into %d groups", nq,
                       ng);
    if (hd <= 0) return MG_FAIL(MG_ERR_INTERNAL, "attention: head dim %d", hd);
    return MG_OK;
}

size_t mg_cpu_attention_saved_bytes(mg_backend *be, int B, int S, int nq, int hd) {
    return mg_backend_attention_saved_bytes(MG_DEVICE_CPU, B, S, nq, hd); /* the softmax */
}

/* The dropout factors of query s of sequence b, local head h: f[t] for keys t0 <= t <= s. */
static void drop_factors(const mg_dropout *d, int b, int h, int s, int S, int t0, float *f) {
    const mg_dropout_row row = mg_dropout_attention_row(d, b, h, s, S);
    uint32_t r[4];
    for (int t = t0; t <= s; t++) {
        uint64_t e = row.e0 + (uint64_t)t;
        if (t == t0 || (e & 3) == 0) mg_dropout_row_block(&row, (uint32_t)(e >> 2), r);
        f[t] = r[e & 3] >= d->threshold ? d->scale : 0.0f;
    }
}

/* In place: p[0..n) = softmax(p[0..n)), the normaliser summed in double. */
static void softmax_row(float *p, int n) {
    float mx = p[0];
#pragma omp simd reduction(max : mx)
    for (int t = 1; t < n; t++) mx = p[t] > mx ? p[t] : mx;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < n; t++) {
        float e = mg_cpu_expf(p[t] - mx);
        p[t] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int t = 0; t < n; t++) p[t] *= inv;
}

/* The first key query s of a sequence sees (doc: the sequence's doc_start, or NULL). */
static inline int first_key(const int32_t *doc, int s) {
    return doc ? doc[s] : 0;
}

/* The first key any query of [s0, s0 + m) sees: the smallest doc_start of the rows (the
 * contract makes it the first row's; the minimum keeps a wrong input merely slow). */
static int block_first_key(const int32_t *doc, int s0, int m) {
    if (!doc) return 0;
    int lo = doc[s0];
    for (int i = 1; i < m; i++) lo = doc[s0 + i] < lo ? doc[s0 + i] : lo;
    return lo;
}

static mg_status doc_check(const int32_t *doc_start, int B, int S) {
    if (!doc_start) return MG_OK;
    for (int i = 0; i < B * S; i++)
        if (doc_start[i] < 0 || doc_start[i] > i % S)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "attention: doc_start[%d] = %d is outside [0, %d] (its position)", i,
                           doc_start[i], i % S);
    return MG_OK;
}

mg_status mg_cpu_attention_forward(mg_backend *be, void *out_, void *saved, const void *qkv_, int B,
                                   int S, int nq, int ng, int hd, const mg_dropout *drop,
                                   const int32_t *doc_start) {
    MG_CHECK(attention_check(nq, ng, hd));
    MG_CHECK(doc_check(doc_start, B, S));
    float *out = out_;       // (B*S, nq*hd)
    const float *qkv = qkv_; // (B*S, ng*(r+2)*hd)
    float *P = saved;        // (B, nq, S, S)
    int r = nq / ng;
    int C = ng * (r + 2) * hd, OW = nq * hd; /* row widths (leading dimensions) */
    float scale = 1.0f / sqrtf((float)hd);
    /* dropout: one (MG_ATT_QB, S) block of dropped probabilities per thread */
    size_t per_thread = (size_t)MG_ATT_QB * S;
    void *scratch = NULL;
    if (drop)
        MG_CHECK(mg_cpu_scratch(be, (size_t)mg_cpu_max_threads() * per_thread * sizeof(float),
                                &scratch));
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < nq; h++) {
            float *Wd = drop ? (float *)scratch + (size_t)mg_cpu_thread_id() * per_thread : NULL;
            int g = h / r, j = h % r;
            const float *base = qkv + (size_t)b * S * C;
            const int32_t *doc = doc_start ? doc_start + (size_t)b * S : NULL; // (S) or NULL
            const float *q = base + ((size_t)g * (r + 2) + j) * hd;            // (S, hd), ld C
            const float *k = base + ((size_t)g * (r + 2) + r) * hd;            // (S, hd), ld C
            const float *v = k + hd;                                           // (S, hd), ld C
            float *Ph = P + ((size_t)b * nq + h) * S * S;                      // (S, S)
            float *o = out + (size_t)b * S * OW + (size_t)h * hd;              // (S, hd), ld OW
            for (int s0 = 0; s0 < S; s0 += MG_ATT_QB) {
                int m = S - s0 < MG_ATT_QB ? S - s0 : MG_ATT_QB, nk = s0 + m;
                int k0 = block_first_key(doc, s0, m); /* keys [k0, nk) are computed */
                float *Pb = Ph + (size_t)s0 * S;      // (m, S): rows s0.., keys k0..nk used
                /* scores = scale * q_blk k^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk - k0, hd, scale,
                            q + (size_t)s0 * C, C, k + (size_t)k0 * C, C, 0.0f, Pb + k0, S);
                for (int i = 0; i < m; i++) {
                    float *p = Pb + (size_t)i * S;
                    int s = s0 + i, lo = first_key(doc, s);
                    softmax_row(p + lo, s + 1 - lo);
                    memset(p, 0, (size_t)lo * sizeof(float));
                    memset(p + s + 1, 0, (size_t)(S - s - 1) * sizeof(float));
                    if (!drop) continue;
                    float *w = Wd + (size_t)i * S; /* the probabilities after dropout */
                    drop_factors(drop, b, h, s, S, lo, w);
#pragma omp simd
                    for (int t = lo; t <= s; t++) w[t] *= p[t];
                    for (int t = k0; t < lo; t++) w[t] = 0.0f;
                    for (int t = s + 1; t < nk; t++) w[t] = 0.0f;
                }
                /* out_blk = P_blk v (the masked entries are exact zeros) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, nk - k0, 1.0f,
                            (drop ? Wd : Pb) + k0, S, v + (size_t)k0 * C, C, 0.0f,
                            o + (size_t)s0 * OW, OW);
            }
        }
    }
    return MG_OK;
}

/* With P = softmax(z), out = P v, per query head (matrices over the causal part):
 *   dP = dout v^T;  dz = P o (dP - D), D_s = sum_t P_st dP_st = dout_s . out_s;
 *   dq = scale dz k;  dk += scale dz^T q;  dv += P^T dout.
 * Scratch: one (MG_ATT_QB, S) block of dz per thread, from the backend's scratch buffer. With the
 * document mask a query block touches only keys [k0, nk) (block_first_key), as in forward. */
mg_status mg_cpu_attention_backward(mg_backend *be, void *dqkv_, const void *dout_,
                                    const void *qkv_, const void *out_, const void *saved, int B,
                                    int S, int nq, int ng, int hd, const mg_dropout *drop,
                                    const int32_t *doc_start) {
    MG_CHECK(attention_check(nq, ng, hd));
    MG_CHECK(doc_check(doc_start, B, S));
    float *dqkv = dqkv_;       // (B*S, ng*(r+2)*hd), overwritten
    const float *dout = dout_; // (B*S, nq*hd)
    const float *qkv = qkv_;   // (B*S, ng*(r+2)*hd)
    const float *out = out_;   // (B*S, nq*hd)
    const float *P = saved;    // (B, nq, S, S)
    int r = nq / ng;
    int C = ng * (r + 2) * hd, OW = nq * hd, GW = (r + 2) * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int QB = S < MG_ATT_QB ? S : MG_ATT_QB;
    /* floats: dz, and with dropout the dropped probabilities */
    size_t block = (size_t)QB * S, per_thread = drop ? 2 * block : block;
    void *scratch = NULL;
    MG_CHECK(
        mg_cpu_scratch(be, (size_t)mg_cpu_max_threads() * per_thread * sizeof(float), &scratch));
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < ng; g++) {
            float *W = (float *)scratch + (size_t)mg_cpu_thread_id() * per_thread; // (QB, S)
            float *Wd = drop ? W + block : NULL;                                   /* (QB, S) P f */
            const float *base = qkv + (size_t)b * S * C + (size_t)g * GW;
            float *dbase = dqkv + (size_t)b * S * C + (size_t)g * GW;
            const int32_t *doc = doc_start ? doc_start + (size_t)b * S : NULL; // (S) or NULL
            const float *k = base + (size_t)r * hd, *v = k + hd;               // (S, hd), ld C
            float *dk = dbase + (size_t)r * hd, *dv = dk + hd;                 // (S, hd), ld C
            for (int s = 0; s < S; s++)
                memset(dk + (size_t)s * C, 0, 2 * (size_t)hd * sizeof(float));
            for (int j = 0; j < r; j++) {
                int h = g * r + j;
                const float *q = base + (size_t)j * hd;                       // (S, hd), ld C
                float *dq = dbase + (size_t)j * hd;                           // (S, hd), ld C
                const float *Ph = P + ((size_t)b * nq + h) * S * S;           // (S, S)
                const float *dO = dout + (size_t)b * S * OW + (size_t)h * hd; // (S, hd), ld OW
                const float *O = out + (size_t)b * S * OW + (size_t)h * hd;   // (S, hd), ld OW
                for (int s0 = 0; s0 < S; s0 += QB) {
                    int m = S - s0 < QB ? S - s0 : QB, nk = s0 + m;
                    int k0 = block_first_key(doc, s0, m), nkk = nk - k0; /* keys [k0, nk) */
                    const float *Pb = Ph + (size_t)s0 * S;               // (m, S), keys k0..nk used
                    /* W = dP_blk = dout_blk v^T */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nkk, hd, 1.0f,
                                dO + (size_t)s0 * OW, OW, v + (size_t)k0 * C, C, 0.0f, W + k0, S);
                    for (int i = 0; i < m; i++) {
                        int s = s0 + i, lo = first_key(doc, s);
                        const float *dos = dO + (size_t)s * OW, *os = O + (size_t)s * OW;
                        const float *p = Pb + (size_t)i * S;
                        float *w = W + (size_t)i * S;
                        float D = 0;
#pragma omp simd reduction(+ : D)
                        for (int d = 0; d < hd; d++) D += dos[d] * os[d];
                        if (drop) { /* w holds d(P f): dP = f w; wd = P f for dv */
                            float *wd = Wd + (size_t)i * S;
                            drop_factors(drop, b, h, s, S, lo, wd);
#pragma omp simd
                            for (int t = lo; t <= s; t++) {
                                w[t] = p[t] * (wd[t] * w[t] - D);
                                wd[t] *= p[t];
                            }
                            for (int t = k0; t < lo; t++) wd[t] = 0.0f;
                            for (int t = s + 1; t < nk; t++) wd[t] = 0.0f;
                        } else {
#pragma omp simd
                            for (int t = lo; t <= s; t++) w[t] = p[t] * (w[t] - D);
                        }
                        for (int t = k0; t < lo; t++) w[t] = 0.0f;
                        for (int t = s + 1; t < nk; t++) w[t] = 0.0f;
                    }
                    /* dq_blk = scale dz k (each query row written once per head) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, nkk, scale,
                                W + k0, S, k + (size_t)k0 * C, C, 0.0f, dq + (size_t)s0 * C, C);
                    /* dk[k0..nk) += scale dz^T q_blk */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkk, hd, m, scale, W + k0,
                                S, q + (size_t)s0 * C, C, 1.0f, dk + (size_t)k0 * C, C);
                    /* dv[k0..nk) += P_blk^T dout_blk (P f with dropout) */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkk, hd, m, 1.0f,
                                (drop ? Wd : Pb) + k0, S, dO + (size_t)s0 * OW, OW, 1.0f,
                                dv + (size_t)k0 * C, C);
                }
            }
        }
    }
    return MG_OK;
}
