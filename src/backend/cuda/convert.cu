/* fp32 <-> h16 conversion kernels (see convert.h). They run at set-up and checkpoint time only,
 * so they are plain grid-stride loops; the h16 values are handled as their uint16_t bits so the
 * rounding is exactly the host's (core/half_bits.h serves both), whatever the device intrinsics
 * would do with NaN payloads. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/convert.h"
#include "core/half_bits.h"

#include <cuda_runtime.h>

/* the host's rounding, from the one definition (core/half_bits.h) */
template <typename h16> static __device__ __forceinline__ uint16_t f32_to_h16_bits(float x);
template <typename h16> static __device__ __forceinline__ float h16_bits_to_f32(uint16_t h);
template <> __device__ __forceinline__ uint16_t f32_to_h16_bits<__half>(float x) {
    return mg_hb_f32_to_f16(x);
}
template <> __device__ __forceinline__ float h16_bits_to_f32<__half>(uint16_t h) {
    return mg_hb_f16_to_f32(h);
}
template <> __device__ __forceinline__ uint16_t f32_to_h16_bits<__nv_bfloat16>(float x) {
    return mg_hb_f32_to_bf16(x);
}
template <> __device__ __forceinline__ float h16_bits_to_f32<__nv_bfloat16>(uint16_t h) {
    return mg_hb_bf16_to_f32(h);
}

template <typename h16>
static __global__ void f32_to_h16_kernel(uint16_t *dst, const float *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = f32_to_h16_bits<h16>(src[i]);
}

template <typename h16>
static __global__ void h16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = h16_bits_to_f32<h16>(src[i]);
}

MG_CUDA_DTYPES(mg_status, f32_to_h16,
               (uint16_t * dst, const float *src, size_t n, cudaStream_t stream),
               (dst, src, n, stream)) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    f32_to_h16_kernel<h16><<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, h16_to_f32,
               (float *dst, const uint16_t *src, size_t n, cudaStream_t stream),
               (dst, src, n, stream)) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    h16_to_f32_kernel<h16><<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
