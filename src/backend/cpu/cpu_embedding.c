/* Token (+ learned position) embedding. */
#include "backend/cpu/cpu_ops.h"

mg_status mg_cpu_embedding_forward(mg_backend *be, void *out_, const int32_t *tokens,
                                   const void *wte_, const void *wpe_, int N, int S, int H) {
    float *out = out_;       // (N, H)
    const float *wte = wte_; // (V, H)
    const float *wpe = wpe_; // (P, H) or NULL
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * H;
        const float *e = wte + (size_t)tokens[i] * H;
        if (wpe) {
            const float *p = wpe + (size_t)(i % S) * H;
            for (int j = 0; j < H; j++) o[j] = e[j] + p[j];
        } else {
            for (int j = 0; j < H; j++) o[j] = e[j];
        }
    }
    return MG_OK;
}

/* Scatter-add over tokens. Several tokens may share a row of dwte, so the work is split over
 * column blocks instead: inside a block the tokens are visited in order, which makes every sum
 * independent of the thread count. */
mg_status mg_cpu_embedding_backward(mg_backend *be, float *dwte, float *dwpe, const void *dout_,
                                    const int32_t *tokens, int N, int S, int H) {
    const float *dout = dout_; // (N, H); dwte (V, H), dwpe (P, H) or NULL
    int nblocks = (H + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int j0 = blk * MG_CPU_COL_BLOCK;
        int j1 = j0 + MG_CPU_COL_BLOCK < H ? j0 + MG_CPU_COL_BLOCK : H;
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * H;
            float *e = dwte + (size_t)tokens[i] * H;
            for (int j = j0; j < j1; j++) e[j] += d[j];
            if (dwpe) {
                float *p = dwpe + (size_t)(i % S) * H;
                for (int j = j0; j < j1; j++) p[j] += d[j];
            }
        }
    }
    return MG_OK;
}
