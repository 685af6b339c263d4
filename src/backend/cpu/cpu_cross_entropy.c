/* Softmax cross-entropy: the loss per row, then the logits are overwritten by their gradient.
 * Numerically stable (the row maximum is subtracted before exp); the normaliser and the loss are
 * accumulated in double, the V exponentials themselves are fp32 (mg_cpu_expf, vectorised with the
 * row loops). Parallel over rows, each row in one thread: bitwise the same for any thread count.
 *
 * Two forms: cross_entropy_fused over the whole vocabulary, and the vocab-parallel three steps
 * (max, sums, finish) over one rank's columns [v0, v0 + Vl), between which the caller all-reduces
 * the row maxima and the sums. The steps use the fused op's arithmetic: with one range the sums
 * differ from it only by the fp32 rounding of the normaliser between the steps. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>

mg_status mg_cpu_cross_entropy_fused(mg_backend *be, void *logits_, float *losses,
                                     const int32_t *targets, const float *dloss, int N, int V) {
    float *logits = logits_; // (N, V) in: logits, out: dlogits; losses, targets, dloss (N)
    if (!dloss) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_fused: dloss is NULL");
    for (int i = 0; i < N; i++)
        if (targets[i] < 0 || targets[i] >= V)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "cross_entropy_fused: target %d of row %d is outside the vocabulary "
                           "[0, %d)",
                           (int)targets[i], i, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = logits + (size_t)i * V;
        int tgt = targets[i];
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float xt = x[tgt];
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) {
            float e = mg_cpu_expf(x[j] - mx); /* x now holds the unnormalised probabilities */
            x[j] = e;
            sum += e;
        }
        losses[i] = (float)(log(sum) - ((double)xt - mx));
        float scale = (float)(1.0 / sum), dl = dloss[i];
        float pt = x[tgt] * scale;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] = (x[j] * scale) * dl;
        x[tgt] = (pt - 1.0f) * dl;
    }
    return MG_OK;
}

/* A negative target is a bug upstream; a target >= v0 + Vl (or < v0) belongs to another rank. */
static mg_status check_targets(const char *op, const int32_t *targets, int N) {
    for (int i = 0; i < N; i++)
        if (targets[i] < 0)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "%s: target %d of row %d is outside the vocabulary (negative)", op,
                           (int)targets[i], i);
    return MG_OK;
}

mg_status mg_cpu_cross_entropy_max(mg_backend *be, float *rowmax, const void *logits_, int N,
                                   int Vl) {
    const float *logits = logits_; // (N, Vl); rowmax (N)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vl;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < Vl; j++) mx = x[j] > mx ? x[j] : mx;
        rowmax[i] = mx;
    }
    return MG_OK;
}

mg_status mg_cpu_cross_entropy_sums(mg_backend *be, float *sums, const void *logits_,
                                    const float *rowmax, const int32_t *targets, int v0, int N,
                                    int Vl) {
    const float *logits = logits_; // (N, Vl); sums (2N); rowmax, targets (N)
    MG_CHECK(check_targets("cross_entropy_sums", targets, N));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vl;
        float mx = rowmax[i];
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < Vl; j++) sum += mg_cpu_expf(x[j] - mx);
        int c = mg_cpu_vocab_row(targets[i], v0, Vl);
        sums[i] = (float)sum;
        sums[N + i] = c >= 0 ? x[c] : 0.0f;
    }
    return MG_OK;
}

mg_status mg_cpu_cross_entropy_finish(mg_backend *be, void *logits_, float *losses,
                                      const float *rowmax, const float *sums,
                                      const int32_t *targets, const float *dloss, int v0, int N,
                                      int Vl) {
    float *logits = logits_; // (N, Vl) in: logits, out: dlogits; losses, rowmax, targets, dloss (N)
    // sums (2N): the normalisers, then the target logits (both summed over the ranks)
    if (!dloss) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_finish: dloss is NULL");
    MG_CHECK(check_targets("cross_entropy_finish", targets, N));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = logits + (size_t)i * Vl;
        float mx = rowmax[i], dl = dloss[i];
        double sum = sums[i];
        losses[i] = (float)(log(sum) - ((double)sums[N + i] - mx));
        float scale = (float)(1.0 / sum);
        int c = mg_cpu_vocab_row(targets[i], v0, Vl);
        float pc = c >= 0 ? mg_cpu_expf(x[c] - mx) * scale : 0.0f; /* before x[c] is overwritten */
#pragma omp simd
        for (int j = 0; j < Vl; j++) x[j] = (mg_cpu_expf(x[j] - mx) * scale) * dl;
        if (c >= 0) x[c] = (pc - 1.0f) * dl;
    }
    return MG_OK;
}
