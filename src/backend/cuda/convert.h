/* Internal to src/backend/cuda: fp32 <-> bf16 conversion kernels, used by upload_f32 and
 * download_f32 (cuda_backend.c). The rounding is core/tensor.c's mg_f32_to_bf16, bit for bit:
 * round to nearest, ties to even; a NaN stays a NaN (quietened, sign and high payload kept);
 * +-Inf stays +-Inf; a finite value beyond the bf16 range rounds to +-Inf.
 * Exports: mg_cuda_f32_to_bf16, mg_cuda_bf16_to_f32. Needs: CUDA runtime. */
#ifndef MG_BACKEND_CUDA_CONVERT_H
#define MG_BACKEND_CUDA_CONVERT_H

#include "core/status.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = bf16(src[i]) for i < n, on `stream`. dst (n) bf16, src (n) fp32, device memory. */
mg_status mg_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t stream);
/* dst[i] = float(src[i]) (exact) for i < n, on `stream`. dst (n) fp32, src (n) bf16. */
mg_status mg_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
