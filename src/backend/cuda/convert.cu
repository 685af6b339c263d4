/* fp32 <-> h16 conversion kernels (see convert.h). They run at set-up and checkpoint time only,
 * so they are plain grid-stride loops; the h16 values are handled as their uint16_t bits so the
 * rounding is exactly the host's (core/tensor.c), whatever the device intrinsics would do with
 * NaN payloads. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/convert.h"

#include <cuda_runtime.h>

#ifdef MG_CUDA_F16
/* core/tensor.c's mg_f32_to_f16 */
static __device__ __forceinline__ uint16_t f32_to_h16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* overflow (>= 65520) rounds to Inf */
    if (a < 0x38800000u) {                       /* subnormal half or zero */
        if (a < 0x33000000u) return sign;        /* below half the smallest subnormal */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

/* core/tensor.c's mg_f16_to_f32 (exact) */
static __device__ __forceinline__ float h16_bits_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return __uint_as_float(sign);
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}
#else
/* core/tensor.c's mg_f32_to_bf16 */
static __device__ __forceinline__ uint16_t f32_to_h16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ float h16_bits_to_f32(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}
#endif

static __global__ void f32_to_h16_kernel(uint16_t *dst, const float *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = f32_to_h16_bits(src[i]);
}

static __global__ void h16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = h16_bits_to_f32(src[i]);
}

extern "C" mg_status mg_cuda_f32_to_h16(uint16_t *dst, const float *src, size_t n,
                                        cudaStream_t stream) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    f32_to_h16_kernel<<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

extern "C" mg_status mg_cuda_h16_to_f32(float *dst, const uint16_t *src, size_t n,
                                        cudaStream_t stream) {
    if (n == 0) return MG_OK;
    unsigned grid = mg_cuda_blocks(n, MG_CUDA_THREADS);
    h16_to_f32_kernel<<<grid, MG_CUDA_THREADS, 0, stream>>>(dst, src, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
