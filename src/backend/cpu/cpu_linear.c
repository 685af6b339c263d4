/* Linear layer, w stored (OC, IC) as torch.nn.Linear. The matrix products go to OpenBLAS
 * (cblas_sgemm, row-major), one call per fixed tile of the output, the tiles spread over OpenMP
 * threads, with OpenBLAS itself single-threaded (mg_backend_cpu_create sets that). Why: OpenBLAS's
 * own threading cuts the output where the thread count says, and an element computed by an edge
 * kernel rounds differently from one computed by a full tile, so results would change with the
 * thread count. Fixed tiles make every element's arithmetic depend on the shapes only.
 * Determinism costs nothing here: on the 2-core dev machine (2026-11-21) the bench step's linears
 * ran at 140-160 GFLOP/s tiled, against 120-137 with one 2-thread OpenBLAS call per product (and
 * ~85 unless OMP_WAIT_POLICY=passive, as libgomp's spinning idle threads then compete with
 * OpenBLAS's own).
 * The forward bias (plus the residual, when given) is written into each output tile before its
 * sgemm call, which then adds the product with beta = 1: neither costs an extra pass over the
 * output, and OpenBLAS skips its beta = 0 pass that would zero the tile first.
 * The GELU fusions (linear_gelu_forward, linear_backward's gelu_pre) are the plain composition
 * with cpu_activation.c's GELU: this backend is the reference the fused CUDA epilogues are
 * checked against. */
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <string.h>

/* Output tile of one sgemm call: big enough that packing is a small part of the work. Products
 * over the token rows (forward and dinp, M = N tokens) take 256-row tiles, so each weight tile is
 * packed N/256 times rather than N/128 (4-5% faster linears at the bench shape; 512 rows measured
 * the same); the weight gradient (M = OC, often only 256) keeps 128-row tiles so that it still
 * splits into several work items. */
#define MG_GEMM_TILE_M    256
#define MG_GEMM_TILE_M_DW 128
#define MG_GEMM_TILE_N    512

/* One product, row-major C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta C, cut into tiles of
 * TM x MG_GEMM_TILE_N; with `bias` (N) and/or `res` (M,N, leading dimension ldc) each row of a
 * tile is first set to bias + res and beta is taken as 1. A tile's arithmetic depends only on the
 * shapes, never on which thread runs it. */
typedef struct {
    int TM, ta, tb, M, N, K, lda, ldb, ldc, tm, tn;
    const float *A, *B, *bias, *res;
    float beta;
    float *C;
} gemm_plan;

static gemm_plan gemm_make(int TM, int ta, int tb, int M, int N, int K, const float *A, int lda,
                           const float *B, int ldb, float beta, float *C, int ldc,
                           const float *bias, const float *res) {
    gemm_plan g = {TM, ta, tb, M, N, K, lda, ldb, ldc, 0, 0, A, B, bias, res, beta, C};
    g.tm = (M + TM - 1) / TM;
    g.tn = (N + MG_GEMM_TILE_N - 1) / MG_GEMM_TILE_N;
    return g;
}

static int gemm_tiles(const gemm_plan *g) {
    return g->tm * g->tn;
}

static void gemm_tile(const gemm_plan *g, int tile) {
    int i0 = tile / g->tn * g->TM, j0 = tile % g->tn * MG_GEMM_TILE_N;
    int m = g->M - i0 < g->TM ? g->M - i0 : g->TM;
    int n = g->N - j0 < MG_GEMM_TILE_N ? g->N - j0 : MG_GEMM_TILE_N;
    const float *a = g->ta ? g->A + i0 : g->A + (size_t)i0 * g->lda;
    const float *b = g->tb ? g->B + (size_t)j0 * g->ldb : g->B + j0;
    float *c = g->C + (size_t)i0 * g->ldc + j0;
    for (int i = 0; g->res && i < m; i++) {
        float *ci = c + (size_t)i * g->ldc;
        const float *ri = g->res + (size_t)(i0 + i) * g->ldc + j0;
        for (int j = 0; j < n; j++) ci[j] = (g->bias ? g->bias[j0 + j] : 0.0f) + ri[j];
    }
    if (g->bias && !g->res)
        for (int i = 0; i < m; i++) memcpy(c + (size_t)i * g->ldc, g->bias + j0, n * sizeof(float));
    float beta = g->bias || g->res ? 1.0f : g->beta;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                m, n, g->K, 1.0f, a, g->lda, b, g->ldb, beta, c, g->ldc);
}

/* dbias[j0..j0+MG_CPU_COL_BLOCK) += column sums of dout, in double, rows in order. */
void mg_cpu_dbias_block(float *dbias, const float *dout, int N, int OC, int blk) {
    int j0 = blk * MG_CPU_COL_BLOCK;
    int j1 = j0 + MG_CPU_COL_BLOCK < OC ? j0 + MG_CPU_COL_BLOCK : OC;
    double acc[MG_CPU_COL_BLOCK];
    memset(acc, 0, sizeof acc);
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC + j0;
        /* columns are independent: vectorising does not reorder any sum */
#pragma omp simd
        for (int j = 0; j < j1 - j0; j++) acc[j] += d[j];
    }
    for (int j = j0; j < j1; j++) dbias[j] += (float)acc[j - j0];
}

mg_status mg_cpu_linear_forward(mg_backend *be, void *out_, const void *inp_, const void *w_,
                                const void *bias_, const void *residual_, int N, int IC, int OC) {
    float *out = out_;                 // (N, OC)
    const float *inp = inp_;           // (N, IC)
    const float *w = w_;               // (OC, IC)
    const float *bias = bias_;         // (OC) or NULL
    const float *residual = residual_; // (N, OC) or NULL
    if (N <= 0 || OC <= 0) return MG_OK;
    if (IC > 0) {
        /* out = bias + residual + inp @ w^T */
        gemm_plan g = gemm_make(MG_GEMM_TILE_M, 0, 1, N, OC, IC, inp, IC, w, IC, 0.0f, out, OC,
                                bias, residual);
        int nt = gemm_tiles(&g);
#pragma omp parallel for schedule(dynamic)
        for (int t = 0; t < nt; t++) gemm_tile(&g, t);
    } else {
        for (int i = 0; i < N; i++) {
            float *o = out + (size_t)i * OC;
            const float *r = residual ? residual + (size_t)i * OC : NULL;
            for (int j = 0; j < OC; j++) o[j] = (bias ? bias[j] : 0.0f) + (r ? r[j] : 0.0f);
        }
    }
    return MG_OK;
}

mg_status mg_cpu_linear_gelu_forward(mg_backend *be, void *out, void *pre, const void *inp,
                                     const void *w, const void *bias, int N, int IC, int OC) {
    MG_CHECK(mg_cpu_linear_forward(be, pre, inp, w, bias, NULL, N, IC, OC));
    return mg_cpu_gelu_forward(be, out, pre, (size_t)(N > 0 ? N : 0) * (size_t)(OC > 0 ? OC : 0));
}

mg_status mg_cpu_linear_backward(mg_backend *be, void *dinp_, float *dw, float *dbias,
                                 const void *dout_, const void *inp_, const void *w_,
                                 const void *gelu_pre, int N, int IC, int OC) {
    float *dinp = dinp_;       // (N, IC) or NULL, overwritten
    const float *dout = dout_; // (N, OC)
    const float *inp = inp_;   // (N, IC)
    const float *w = w_;       // (OC, IC); dw (OC, IC) and dbias (OC) accumulate (dw NULL:
                               // skipped, for cpu_fp8.c, which runs each product alone)
    if (N <= 0) return MG_OK;
    if (dinp && IC > 0 && OC <= 0) memset(dinp, 0, (size_t)N * IC * sizeof(float));
    if (OC <= 0) return MG_OK;
    /* Three independent jobs: dw += dout^T @ inp, dinp = dout @ w, dbias += column sums of dout.
     * Their work items form one dynamic loop (GEMM tiles first, the small bias blocks last), so a
     * thread that finishes its share of one product starts on the next instead of waiting at a
     * barrier; each item computes the same thing whichever thread takes it. (dinp must not alias
     * dout or inp, which the sequential form did not allow either.) */
    gemm_plan gw =
        gemm_make(MG_GEMM_TILE_M_DW, 1, 0, OC, IC, N, dout, OC, inp, IC, 1.0f, dw, IC, NULL, NULL);
    gemm_plan gi =
        gemm_make(MG_GEMM_TILE_M, 0, 0, N, IC, OC, dout, OC, w, IC, 0.0f, dinp, IC, NULL, NULL);
    int nw = IC > 0 && dw ? gemm_tiles(&gw) : 0, ni = dinp && IC > 0 ? gemm_tiles(&gi) : 0;
    int nb = dbias ? (OC + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK : 0;
#pragma omp parallel for schedule(dynamic)
    for (int item = 0; item < nw + ni + nb; item++) {
        if (item < nw)
            gemm_tile(&gw, item);
        else if (item < nw + ni)
            gemm_tile(&gi, item - nw);
        else
            mg_cpu_dbias_block(dbias, dout, N, OC, item - nw - ni);
    }
    if (dinp && gelu_pre && IC > 0) /* through the GELU that made this layer's input, in place */
        MG_CHECK(mg_cpu_gelu_backward(be, dinp, gelu_pre, dinp, (size_t)N * IC));
    return MG_OK;
}
