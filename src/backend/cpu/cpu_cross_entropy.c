/* Fused softmax cross-entropy: the loss per row, then the logits are overwritten by their
 * gradient. Numerically stable (the row maximum is subtracted before exp); the normaliser and the
 * loss are accumulated in double, the V exponentials themselves are fp32 (mg_cpu_expf, vectorised
 * with the row loops). Parallel over rows. */
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
