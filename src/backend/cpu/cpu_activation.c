/* Elementwise activations: GELU (tanh approximation, as GPT-2 and Megatron's bias-gelu) and
 * SwiGLU (Megatron's layout: each input row is [gate | up]). Gradients are overwritten. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>

#define MG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MG_GELU_C 0.044715f

mg_status mg_cpu_gelu_forward(mg_backend *be, void *out_, const void *inp_, size_t n) {
    float *out = out_;       // (n)
    const float *inp = inp_; // (n)
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = MG_GELU_K * (x + MG_GELU_C * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
    return MG_OK;
}

mg_status mg_cpu_gelu_backward(mg_backend *be, void *dinp_, const void *inp_, const void *dout_,
                               size_t n) {
    float *dinp = dinp_;       // (n)
    const float *inp = inp_;   // (n)
    const float *dout = dout_; // (n)
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = MG_GELU_K * (x + MG_GELU_C * x * x * x);
        float t = tanhf(u);
        float du = MG_GELU_K * (1.0f + 3.0f * MG_GELU_C * x * x);
        float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
        dinp[i] = grad * dout[i];
    }
    return MG_OK;
}

mg_status mg_cpu_swiglu_forward(mg_backend *be, void *out_, const void *inp_, int N, int F) {
    float *out = out_;       // (N, F)
    const float *inp = inp_; // (N, 2F): [gate | up]
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
        for (int j = 0; j < F; j++) {
            float sig = 1.0f / (1.0f + expf(-g[j]));
            o[j] = g[j] * sig * u[j];
        }
    }
    return MG_OK;
}

mg_status mg_cpu_swiglu_backward(mg_backend *be, void *dinp_, const void *inp_, const void *dout_,
                                 int N, int F) {
    float *dinp = dinp_;       // (N, 2F)
    const float *inp = inp_;   // (N, 2F)
    const float *dout = dout_; // (N, F)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * F, *u = g + F;
        const float *d = dout + (size_t)i * F;
        float *dg = dinp + (size_t)i * 2 * F, *du = dg + F;
        for (int j = 0; j < F; j++) {
            float sig = 1.0f / (1.0f + expf(-g[j]));
            float silu = g[j] * sig;
            /* d silu / dg = sig * (1 + g * (1 - sig)) */
            dg[j] = d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
            du[j] = d[j] * silu;
        }
    }
    return MG_OK;
}
