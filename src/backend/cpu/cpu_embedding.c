/* Token (+ learned position) embedding. Vocab-parallel: this rank holds rows [v0, v0 + Vl) of the
 * word embedding; a token outside them gets a zero word row in forward (the position row is still
 * added) and is skipped in backward, so the forward outputs of all ranks sum to the full embedding
 * once the position embedding is added by one of them. The position of row i is pos[i] with
 * --reset-position-ids (positions restarting at every document), else i % S. */
#include "backend/cpu/cpu_ops.h"

/* Per-token positions must be rows of the position table: [0, S). */
static mg_status pos_check(const int32_t *pos, int N, int S) {
    for (int i = 0; pos && i < N; i++)
        if (pos[i] < 0 || pos[i] >= S)
            return MG_FAIL(MG_ERR_INTERNAL, "embedding: token %d has position %d outside [0, %d)",
                           i, (int)pos[i], S);
    return MG_OK;
}

mg_status mg_cpu_embedding_forward(mg_backend *be, void *out_, const int32_t *tokens,
                                   const void *wte_, const void *wpe_, const int32_t *pos, int N,
                                   int S, int H, int v0, int Vl) {
    if (wpe_) MG_CHECK(pos_check(pos, N, S));
    float *out = out_;       // (N, H)
    const float *wte = wte_; // (Vl, H)
    const float *wpe = wpe_; // (P, H) or NULL
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * H;
        int r = mg_cpu_vocab_row(tokens[i], v0, Vl);
        const float *p = wpe ? wpe + (size_t)(pos ? pos[i] : i % S) * H : NULL;
        if (r >= 0) {
            const float *e = wte + (size_t)r * H;
            if (p)
                for (int j = 0; j < H; j++) o[j] = e[j] + p[j];
            else
                for (int j = 0; j < H; j++) o[j] = e[j];
        } else if (p) { /* not our word: the position row alone */
            for (int j = 0; j < H; j++) o[j] = p[j];
        } else {
            memset(o, 0, (size_t)H * sizeof(float));
        }
    }
    return MG_OK;
}

/* Scatter-add over tokens. Several tokens may share a row of dwte, so the work is split over
 * column blocks instead: inside a block the tokens are visited in order, which makes every sum
 * independent of the thread count (and a range's rows bitwise those of the full vocabulary). */
mg_status mg_cpu_embedding_backward(mg_backend *be, float *dwte, float *dwpe, const void *dout_,
                                    const int32_t *tokens, const int32_t *pos, int N, int S, int H,
                                    int v0, int Vl) {
    if (dwpe) MG_CHECK(pos_check(pos, N, S));
    const float *dout = dout_; // (N, H); dwte (Vl, H), dwpe (P, H) or NULL
    int nblocks = (H + MG_CPU_COL_BLOCK - 1) / MG_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int j0 = blk * MG_CPU_COL_BLOCK;
        int j1 = j0 + MG_CPU_COL_BLOCK < H ? j0 + MG_CPU_COL_BLOCK : H;
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * H;
            int r = mg_cpu_vocab_row(tokens[i], v0, Vl);
            if (r >= 0) {
                float *e = dwte + (size_t)r * H;
                for (int j = j0; j < j1; j++) e[j] += d[j];
            }
            if (dwpe) {
                float *p = dwpe + (size_t)(pos ? pos[i] : i % S) * H;
                for (int j = j0; j < j1; j++) p[j] += d[j];
            }
        }
    }
    return MG_OK;
}
