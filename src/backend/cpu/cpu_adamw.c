/* AdamW (decoupled weight decay, bias correction passed in as bc1 = 1 - b1^t, bc2 = 1 - b2^t;
 * the rates read from memory, the step-control block in training), elementwise in fp32, in the
 * formula order of backend_ops.h, span by span. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

/* One span: param, grad (n); master or NULL, m, v (n). */
static void adamw_span(float *param, float *master, const float *grad, float *m, float *v, size_t n,
                       float lr, float wd, float bc1, float bc2, float beta1, float beta2,
                       float eps, float s) {
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
}

mg_status mg_cpu_adamw(mg_backend *be, void *param_, float *master, const float *grad, float *m,
                       float *v, const mg_adamw_span *spans, int n_spans, const float *rates,
                       const float *bc, float beta1, float beta2, float eps,
                       const float *grad_scale) {
    (void)be;
    float *param = param_;
    const float s = grad_scale ? *grad_scale : 1.0f;
    if (!isfinite(s)) return MG_OK; /* a skipped step (backend_ops.h) */
    for (int i = 0; i < n_spans; i++) {
        const mg_adamw_span *p = &spans[i];
        const size_t a = p->param_off, b = p->state_off;
        adamw_span(param + a, master ? master + b : NULL, grad + p->grad_off, m + b, v + b, p->n,
                   rates[p->lr], p->wd < 0 ? 0.0f : rates[p->wd], bc[0], bc[1], beta1, beta2, eps,
                   s);
    }
    return MG_OK;
}
