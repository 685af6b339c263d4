/* AdamW (decoupled weight decay, bias correction passed in as bc1 = 1 - b1^t, bc2 = 1 - b2^t),
 * elementwise in fp32 in the formula order of backend_ops.h (CPU reference: cpu/cpu_adamw.c).
 * The fp32 master is updated and the h16 parameter receives it rounded to nearest even. With no
 * master (pure-h16 training) the h16 parameter itself is read, updated and rounded back.
 * The clipping coefficient and the rates (lr, weight decay, bias corrections: the step-control
 * block in training) are read from device memory, so no host sync is needed between the norm
 * reduction and the update, and no host value changes from step to step.
 * Memory-bound: 4 elements per thread per iteration (float4 for master, grad, m and v, 8 bytes of
 * h16 parameter), grid-stride; a scalar loop covers the tail and unaligned buffers.
 * Multi-tensor fusion (one launch for all parameters) is left for later. */
#include "backend/cuda/cuda_common.cuh"

struct adamw_hp {
    float lr, beta1, beta2, eps, wd, bc1, bc2;
};

/* The rates a launch reads from device memory (wd NULL: no decay). */
struct adamw_rates {
    const float *lr, *wd, *bc;
};

/* One element: updates m, v and returns the new master value. */
static __device__ __forceinline__ float adamw_one(float w, float grad, float s, float *m, float *v,
                                                  const adamw_hp &hp) {
    float g = grad * s;
    float mi = hp.beta1 * *m + (1.0f - hp.beta1) * g;
    float vi = hp.beta2 * *v + (1.0f - hp.beta2) * g * g;
    *m = mi;
    *v = vi;
    float upd = (mi / hp.bc1) / (sqrtf(vi / hp.bc2) + hp.eps) + hp.wd * w;
    return w - hp.lr * upd;
}

template <typename h16, bool HAS_MASTER>
static __global__ void adamw_kernel(h16 *param, float *master, const float *grad, float *m,
                                    float *v, size_t n, adamw_hp hp, adamw_rates rates,
                                    const float *grad_scale, int vec) {
    // param (n) h16; master, grad, m, v (n) fp32; grad_scale (1) or NULL
    float s = grad_scale ? *grad_scale : 1.0f;
    if (!isfinite(s)) return; /* a skipped step (backend_ops.h) */
    hp.lr = *rates.lr;
    hp.wd = rates.wd ? *rates.wd : 0.0f;
    hp.bc1 = rates.bc[0];
    hp.bc2 = rates.bc[1];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 4 : 0;
    for (size_t u = t0; u < nv; u += stride) {
        float4 g4 = reinterpret_cast<const float4 *>(grad)[u];
        float4 m4 = reinterpret_cast<float4 *>(m)[u];
        float4 v4 = reinterpret_cast<float4 *>(v)[u];
        uint2 p2 = reinterpret_cast<const uint2 *>(param)[u];
        typename mg_h16<h16>::x2 *ph = reinterpret_cast<typename mg_h16<h16>::x2 *>(&p2);
        float4 w4;
        if (HAS_MASTER) {
            w4 = reinterpret_cast<float4 *>(master)[u];
        } else {
            float2 a = h16x2_to_f2(ph[0]), b = h16x2_to_f2(ph[1]);
            w4 = make_float4(a.x, a.y, b.x, b.y);
        }
        w4.x = adamw_one(w4.x, g4.x, s, &m4.x, &v4.x, hp);
        w4.y = adamw_one(w4.y, g4.y, s, &m4.y, &v4.y, hp);
        w4.z = adamw_one(w4.z, g4.z, s, &m4.z, &v4.z, hp);
        w4.w = adamw_one(w4.w, g4.w, s, &m4.w, &v4.w, hp);
        reinterpret_cast<float4 *>(m)[u] = m4;
        reinterpret_cast<float4 *>(v)[u] = v4;
        if (HAS_MASTER) reinterpret_cast<float4 *>(master)[u] = w4;
        ph[0] = f2_to_h16x2<h16>(w4.x, w4.y);
        ph[1] = f2_to_h16x2<h16>(w4.z, w4.w);
        reinterpret_cast<uint2 *>(param)[u] = p2;
    }
    for (size_t i = nv * 4 + t0; i < n; i += stride) {
        float w = HAS_MASTER ? master[i] : h16_to_f(param[i]);
        float mi = m[i], vi = v[i];
        w = adamw_one(w, grad[i], s, &mi, &vi, hp);
        m[i] = mi;
        v[i] = vi;
        if (HAS_MASTER) master[i] = w;
        param[i] = f_to_h16<h16>(w);
    }
}

MG_CUDA_DTYPES(mg_status, adamw,
               (mg_backend * be, void *param, float *master, const float *grad, float *m, float *v,
                size_t n, const float *lr, const float *wd, const float *bc, float beta1,
                float beta2, float eps, const float *grad_scale),
               (be, param, master, grad, m, v, n, lr, wd, bc, beta1, beta2, eps, grad_scale)) {
    // param (n) h16; master (n) or NULL, grad, m, v (n) fp32; lr (1), wd (1) or NULL, bc (2),
    // grad_scale (1) device
    if (n == 0) return MG_OK;
    adamw_hp hp = {0.0f, beta1, beta2, eps, 0.0f, 1.0f, 1.0f}; /* the rates: read by the kernel */
    adamw_rates rates = {lr, wd, bc};
    int vec = mg_cuda_aligned16(grad) && mg_cuda_aligned16(m) && mg_cuda_aligned16(v) &&
              (!master || mg_cuda_aligned16(master)) && ((uintptr_t)param & 7u) == 0;
    unsigned grid = mg_cuda_blocks(vec ? (n + 3) / 4 : n, MG_CUDA_THREADS);
    cudaStream_t st = mg_cuda_stream(be);
    if (master)
        adamw_kernel<h16, true><<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)param, master, grad, m, v,
                                                                  n, hp, rates, grad_scale, vec);
    else
        adamw_kernel<h16, false><<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)param, master, grad, m, v,
                                                                   n, hp, rates, grad_scale, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
