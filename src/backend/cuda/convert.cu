/* fp32 <-> bf16 conversion kernels (see convert.h). They run at set-up and checkpoint time only,
 * so they are plain grid-stride loops; the bf16 values are handled as their uint16_t bits so the
 * rounding is exactly the host's (core/tensor.c), whatever the device intrinsics would do with
 * NaN payloads. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/convert.h"

#include <cuda_runtime.h>

static __device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static __global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = f32_to_bf16_bits(src[i]);
}

static __global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

extern "C" mg_status mg_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n,
                                         cudaStream_t stream) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    f32_to_bf16_kernel<<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

extern "C" mg_status mg_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n,
                                         cudaStream_t stream) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    bf16_to_f32_kernel<<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
