/* AdamW (decoupled weight decay, bias correction passed in as bc1 = 1 - b1^t, bc2 = 1 - b2^t;
 * the rates read from memory, the step-control block in training), elementwise in fp32, in the formula order of backend_ops.h. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

mg_status mg_cpu_adamw(mg_backend *be, void *param_, float *master, const float *grad, float *m,
                       float *v, size_t n, const float *lr_, const float *wd_, const float *bc,
                       float beta1, float beta2, float eps, const float *grad_scale) {
    float *param = param_; // (n); master, grad, m, v (n); lr (1), wd (1) or NULL, bc (2); grad_scale (1)
    float s = grad_scale ? *grad_scale : 1.0f;
    if (!isfinite(s)) return MG_OK; /* a skipped step (backend_ops.h) */
    const float lr = *lr_, wd = wd_ ? *wd_ : 0.0f, bc1 = bc[0], bc2 = bc[1];
    /* On the CPU the compute dtype is fp32: with no separate master the parameter is the master. */
    float *w = master ? master : param;
    /* One branch-free loop (with -fno-math-errno sqrtf is one instruction and it vectorises);
     * a separate master is copied to the parameter afterwards. */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * s;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float upd = (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w[i];
        w[i] = w[i] - lr * upd;
    }
    if (master) memcpy(param, master, n * sizeof *param);
    return MG_OK;
}
