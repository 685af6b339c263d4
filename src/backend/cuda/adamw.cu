/* AdamW (decoupled weight decay, bias correction passed in as bc1 = 1 - b1^t, bc2 = 1 - b2^t),
 * elementwise in fp32 in the formula order of backend_ops.h (CPU reference: cpu/cpu_adamw.c).
 * The fp32 master is updated and the h16 parameter receives it rounded to nearest even. With no
 * master (pure-h16 training) the h16 parameter itself is read, updated and rounded back.
 * The clipping coefficient and the rates (lr, weight decay, bias corrections: the step-control
 * block in training) are read from device memory, so no host sync is needed between the norm
 * reduction and the update, and no host value changes from step to step.
 * Multi-tensor: one launch updates up to ADAMW_LAUNCH_SPANS spans (a GPT-2 step's ~100 parameter
 * runs in two launches, not ~100), the span table passed by value in the kernel's parameters (so
 * a captured graph holds it). The spans are cut into tiles of ADAMW_TILE elements; a block takes
 * tiles grid-stride and finds a tile's span by binary search over the table's tile offsets.
 * Memory-bound: 4 elements per thread per step (float4 for master, grad, m and v, 8 bytes of h16
 * parameter) where the span's buffers are 16-byte aligned, else one element per thread. */
#include "backend/cuda/cuda_common.cuh"

#define ADAMW_LAUNCH_SPANS 48
#define ADAMW_TILE         4096 /* elements: 256 threads x 4 x 4 */

struct adamw_hp {
    float beta1, beta2, eps;
};

/* A launch's spans: span i holds the tiles [tile0[i], tile0[i + 1]). */
struct adamw_span_dev {
    unsigned long long param_off, grad_off, state_off, n;
    int lr, wd, vec;
};
struct adamw_table {
    int n;
    unsigned tile0[ADAMW_LAUNCH_SPANS + 1];
    adamw_span_dev span[ADAMW_LAUNCH_SPANS];
};

/* One element: updates m, v and returns the new master value. */
static __device__ __forceinline__ float adamw_one(float w, float grad, float s, float *m, float *v,
                                                  const adamw_hp &hp, float lr, float wd, float bc1,
                                                  float bc2) {
    float g = grad * s;
    float mi = hp.beta1 * *m + (1.0f - hp.beta1) * g;
    float vi = hp.beta2 * *v + (1.0f - hp.beta2) * g * g;
    *m = mi;
    *v = vi;
    float upd = (mi / bc1) / (sqrtf(vi / bc2) + hp.eps) + wd * w;
    return w - lr * upd;
}

template <typename h16, bool HAS_MASTER>
static __global__ void __launch_bounds__(MG_CUDA_THREADS)
    adamw_kernel(h16 *param_base, float *master_base, const float *grad_base, float *m_base,
                 float *v_base, const adamw_table tab, adamw_hp hp, const float *rates,
                 const float *bc, const float *grad_scale) {
    // param at span.param_off, grad at .grad_off; master, m, v at .state_off; rates, bc (2),
    // grad_scale (1) device
    const float s = grad_scale ? *grad_scale : 1.0f;
    if (!isfinite(s)) return; /* a skipped step (backend_ops.h) */
    const float bc1 = bc[0], bc2 = bc[1];
    const unsigned tiles = tab.tile0[tab.n];
    for (unsigned t = blockIdx.x; t < tiles; t += gridDim.x) {
        int lo = 0, hi = tab.n - 1; /* the span holding tile t: tile0[lo] <= t < tile0[lo + 1] */
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (tab.tile0[mid] <= t)
                lo = mid;
            else
                hi = mid - 1;
        }
        const adamw_span_dev &sp = tab.span[lo];
        const float lr = rates[sp.lr], wd = sp.wd < 0 ? 0.0f : rates[sp.wd];
        const size_t e0 = (size_t)(t - tab.tile0[lo]) * ADAMW_TILE;
        const size_t e1 = min((size_t)sp.n, e0 + ADAMW_TILE);
        h16 *param = param_base + sp.param_off;
        const float *grad = grad_base + sp.grad_off;
        float *master = HAS_MASTER ? master_base + sp.state_off : NULL;
        float *m = m_base + sp.state_off, *v = v_base + sp.state_off;
        if (sp.vec) {
            for (size_t i = e0 + 4 * (size_t)threadIdx.x; i + 4 <= e1; i += 4 * blockDim.x) {
                const size_t u = i / 4;
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
                w4.x = adamw_one(w4.x, g4.x, s, &m4.x, &v4.x, hp, lr, wd, bc1, bc2);
                w4.y = adamw_one(w4.y, g4.y, s, &m4.y, &v4.y, hp, lr, wd, bc1, bc2);
                w4.z = adamw_one(w4.z, g4.z, s, &m4.z, &v4.z, hp, lr, wd, bc1, bc2);
                w4.w = adamw_one(w4.w, g4.w, s, &m4.w, &v4.w, hp, lr, wd, bc1, bc2);
                reinterpret_cast<float4 *>(m)[u] = m4;
                reinterpret_cast<float4 *>(v)[u] = v4;
                if (HAS_MASTER) reinterpret_cast<float4 *>(master)[u] = w4;
                ph[0] = f2_to_h16x2<h16>(w4.x, w4.y);
                ph[1] = f2_to_h16x2<h16>(w4.z, w4.w);
                reinterpret_cast<uint2 *>(param)[u] = p2;
            }
        }
        /* the scalar walk: all of an unaligned span's tile, or the last tile's tail (< 4) */
        const size_t first = sp.vec ? e0 + (e1 - e0) / 4 * 4 : e0;
        for (size_t i = first + threadIdx.x; i < e1; i += blockDim.x) {
            float w = HAS_MASTER ? master[i] : h16_to_f(param[i]);
            float mi = m[i], vi = v[i];
            w = adamw_one(w, grad[i], s, &mi, &vi, hp, lr, wd, bc1, bc2);
            m[i] = mi;
            v[i] = vi;
            if (HAS_MASTER) master[i] = w;
            param[i] = f_to_h16<h16>(w);
        }
    }
}

MG_CUDA_DTYPES(mg_status, adamw,
               (mg_backend * be, void *param, float *master, const float *grad, float *m, float *v,
                const mg_adamw_span *spans, int n_spans, const float *rates, const float *bc,
                float beta1, float beta2, float eps, const float *grad_scale),
               (be, param, master, grad, m, v, spans, n_spans, rates, bc, beta1, beta2, eps,
                grad_scale)) {
    // param at spans[i].param_off, grad at .grad_off; master (or NULL), m, v at .state_off; rates,
    // bc (2), grad_scale (1) device; spans (n_spans) host
    const adamw_hp hp = {beta1, beta2, eps};
    cudaStream_t st = mg_cuda_stream(be);
    h16 *p16 = (h16 *)param;
    for (int i = 0; i < n_spans;) {
        adamw_table tab;
        memset(&tab, 0, sizeof tab);
        size_t tiles = 0;
        for (; i < n_spans && tab.n < ADAMW_LAUNCH_SPANS; i++) {
            const mg_adamw_span *sp = &spans[i];
            if (sp->n == 0) continue;
            const size_t a = sp->param_off, b = sp->state_off;
            const bool vec = mg_cuda_aligned16(grad + sp->grad_off) && mg_cuda_aligned16(m + b) &&
                             mg_cuda_aligned16(v + b) &&
                             (!master || mg_cuda_aligned16(master + b)) &&
                             ((uintptr_t)(p16 + a) & 7u) == 0;
            tab.tile0[tab.n] = (unsigned)tiles;
            tab.span[tab.n] = {a, sp->grad_off, b, sp->n, sp->lr, sp->wd, vec ? 1 : 0};
            tab.n++;
            tiles += (sp->n + ADAMW_TILE - 1) / ADAMW_TILE;
        }
        if (tab.n == 0) continue;
        if (tiles > 0xffffffffu)
            return MG_FAIL(MG_ERR_UNSUPPORTED, "adamw: %zu tiles of %d elements in one launch",
                           tiles, ADAMW_TILE);
        tab.tile0[tab.n] = (unsigned)tiles;
        const unsigned grid = tiles < MG_CUDA_MAX_BLOCKS ? (unsigned)tiles : MG_CUDA_MAX_BLOCKS;
        if (master)
            adamw_kernel<h16, true><<<grid, MG_CUDA_THREADS, 0, st>>>(p16, master, grad, m, v, tab,
                                                                      hp, rates, bc, grad_scale);
        else
            adamw_kernel<h16, false><<<grid, MG_CUDA_THREADS, 0, st>>>(p16, master, grad, m, v, tab,
                                                                       hp, rates, bc, grad_scale);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}
