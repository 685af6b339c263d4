/* fp8 on the CUDA backend (backend_ops.h; CPU reference: cpu/cpu_fp8.c): the casts of core/fp8.h
 * and the recipe of core/fp8_scaling.h, on the device. The quantization is elementwise in fp32
 * with the CPU's operations in the CPU's order, then one rounding to the compute dtype; the amax
 * is a maximum (order-free), taken over the fp32 bit patterns of the magnitudes, whose integer
 * order is their order (a NaN's pattern is above infinity's, so NaN wins as on the CPU). */
#include "backend/cuda/cuda_common.cuh"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

template <typename h16>
static __global__ void fp8_quantize_kernel(h16 *out, const h16 *in, size_t n, const float *scale,
                                           float *amax, int format) {
    __shared__ unsigned int block_max;
    if (threadIdx.x == 0) block_max = 0u;
    __syncthreads();
    const float s = scale[0];
    unsigned int m = 0u;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = h16_to_f(in[i]);
        m = max(m, __float_as_uint(fabsf(v)));
        if (!out) continue;
        uint8_t q = mg_fp8_from_f32(v * s, (mg_fp8_format)format, true);
        out[i] = f_to_h16<h16>(mg_fp8_to_f32(q, (mg_fp8_format)format) / s);
    }
    if (!amax) return;
    atomicMax(&block_max, m);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax((unsigned int *)amax, block_max);
}

MG_CUDA_DTYPES(mg_status, fp8_quantize,
               (mg_backend * be, void *out, const void *in, size_t n, const float *scale,
                float *amax, int format),
               (be, out, in, n, scale, amax, format)) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    fp8_quantize_kernel<h16><<<grid, MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(
        (h16 *)out, (const h16 *)in, n, scale, amax, format);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* One thread per tensor: its history, amax and scale, as the CPU updates them. */
static __global__ void fp8_update_kernel(float *state, int n, int len, int margin, int algo,
                                         float max_fwd, float max_bwd) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float *amax = state, *scale = state + n, *h = state + 2 * (size_t)n + (size_t)t * len;
    h[0] = amax[t];
    amax[t] = 0.0f;
    scale[t] = mg_fp8_delayed_update(h, len, scale[t], t % 3 == 2 ? max_bwd : max_fwd, margin,
                                     (mg_fp8_amax_algo)algo);
}

MG_CUDA_DTYPES(mg_status, fp8_update,
               (mg_backend * be, float *state, int n, int len, int margin, int algo, float max_fwd,
                float max_bwd),
               (be, state, n, len, margin, algo, max_fwd, max_bwd)) {
    if (n <= 0) return MG_OK;
    fp8_update_kernel<<<(n + 127) / 128, 128, 0, mg_cuda_stream(be)>>>(state, n, len, margin, algo,
                                                                       max_fwd, max_bwd);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
