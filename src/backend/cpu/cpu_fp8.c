/* fp8 on the CPU backend (backend_ops.h): the emulation every CUDA fp8 op is tested against, the
 * casts of core/fp8.h on fp32 values and the recipe of core/fp8_scaling.h. */
#include "backend/cpu/cpu_ops.h"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

#include <math.h>

mg_status mg_cpu_fp8_quantize(mg_backend *be, void *out, const void *in, size_t n,
                              const float *scale, float *amax, int format) {
    (void)be;
    const float *x = in;
    float *y = out, s = scale[0], m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float v = x[i], a = fabsf(v);
        if (isnan(a) || a > m || isnan(m)) m = isnan(m) ? m : a;
        if (y)
            y[i] = mg_fp8_to_f32(mg_fp8_from_f32(v * s, (mg_fp8_format)format, true),
                                 (mg_fp8_format)format) /
                   s;
    }
    if (amax && (isnan(m) || m > *amax || isnan(*amax))) *amax = isnan(*amax) ? *amax : m;
    return MG_OK;
}

mg_status mg_cpu_fp8_update(mg_backend *be, float *state, int n, int len, int margin, int algo,
                            float max_fwd, float max_bwd) {
    (void)be;
    float *amax = state, *scale = state + n, *hist = state + 2 * (size_t)n;
    for (int t = 0; t < n; t++) {
        float *h = hist + (size_t)t * len;
        h[0] = amax[t];
        amax[t] = 0.0f;
        scale[t] = mg_fp8_delayed_update(h, len, scale[t], t % 3 == 2 ? max_bwd : max_fwd, margin,
                                         (mg_fp8_amax_algo)algo);
    }
    return MG_OK;
}
