/* The receive budget's rounds of an expert-parallel exchange, computed by the CPU backend and by a
 * CUDA thread from the same code: P blocks of rows, block p holding El experts' rows one expert
 * after the other (counts[p El + j]), travel in windows of `slab` rows per block and round, round
 * r moving rows [r slab, (r + 1) slab) of every block. A window's counts say how many of each
 * expert's rows it holds; the rounds needed are those of the largest block (at least one).
 * Exports: mg_slab_round_counts, mg_slab_window. Needs: nothing. */
#ifndef MG_CORE_SLAB_ROUNDS_H
#define MG_CORE_SLAB_ROUNDS_H

#include <stdint.h>

#ifdef __CUDACC__
#define MG_SLAB_FN static inline __host__ __device__
#else
#define MG_SLAB_FN static inline
#endif

/* out (P x El): each expert's rows inside [first, first + slab) of its block; returns the rounds
 * the largest block needs (ceil(block / slab), at least 1). out may be NULL. */
MG_SLAB_FN int32_t mg_slab_round_counts(int32_t *out, const int32_t *counts, int P, int El,
                                        int slab, int first) {
    int64_t most = 0;
    for (int p = 0; p < P; p++) {
        int64_t at = 0; /* the expert's first row in its block */
        for (int j = 0; j < El; j++) {
            const int64_t n = counts[p * El + j];
            int64_t lo = at > first ? at : first, hi = at + n;
            if (hi > (int64_t)first + slab) hi = (int64_t)first + slab;
            if (out) out[p * El + j] = (int32_t)(hi > lo ? hi - lo : 0);
            at += n;
        }
        most = at > most ? at : most;
    }
    const int64_t rounds = slab > 0 ? (most + slab - 1) / slab : 1;
    return (int32_t)(rounds > 1 ? rounds : 1);
}

/* Block p's window: the packed rows of the blocks before it plus first (*at, where the window
 * starts in the packed rows), and the rows of block p inside [first, first + slab) (returned). */
MG_SLAB_FN int64_t mg_slab_window(const int32_t *counts, int p, int El, int slab, int first,
                                  int64_t *at) {
    int64_t before = 0, m = 0;
    for (int q = 0; q <= p; q++) {
        int64_t s = 0;
        for (int j = 0; j < El; j++) s += counts[q * El + j];
        if (q < p)
            before += s;
        else
            m = s;
    }
    *at = before + first;
    const int64_t n = m - first;
    return n < 0 ? 0 : n > slab ? slab : n;
}

#endif
