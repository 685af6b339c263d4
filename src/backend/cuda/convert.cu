/* fp32 <-> bf16 conversion kernels (see convert.h). They run at set-up and checkpoint time only,
 * so they are plain grid-stride loops; the bf16 values are handled as their uint16_t bits so the
 * rounding is exactly the host's (core/tensor.c), whatever the device intrinsics would do with
 * NaN payloads. */
#include "backend/cuda/convert.h"
#include "backend/cuda/cuda_internal.h"

#include <cuda_runtime.h>

/* Threads per block and the cap on blocks (the loops stride over the rest). */
#define MG_CONVERT_THREADS    256
#define MG_CONVERT_MAX_BLOCKS 4096

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

static unsigned convert_blocks(size_t n) {
    size_t b = (n + MG_CONVERT_THREADS - 1) / MG_CONVERT_THREADS;
    return (unsigned)(b < MG_CONVERT_MAX_BLOCKS ? b : MG_CONVERT_MAX_BLOCKS);
}

extern "C" mg_status mg_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n,
                                         cudaStream_t stream) {
    if (n == 0) return MG_OK;
    f32_to_bf16_kernel<<<convert_blocks(n), MG_CONVERT_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

extern "C" mg_status mg_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n,
                                         cudaStream_t stream) {
    if (n == 0) return MG_OK;
    bf16_to_f32_kernel<<<convert_blocks(n), MG_CONVERT_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
