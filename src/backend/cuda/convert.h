/* Internal to src/backend/cuda: fp32 <-> h16 (the compute type: bf16 or fp16) conversion kernels,
 * used by upload_f32 and download_f32 (cuda_backend.c). The rounding is core/tensor.c's
 * mg_f32_to_bf16 / mg_f32_to_f16, bit for bit: round to nearest, ties to even; a NaN stays a NaN
 * (bf16: quietened, sign and high payload kept; fp16: the quiet NaN 0x7e00 with the sign); +-Inf
 * stays +-Inf; a finite value beyond the range rounds to +-Inf (fp16: from 65520 up); fp16 keeps
 * subnormals (down to 2^-24). Exports: mg_cuda_f32_to_h16, mg_cuda_h16_to_f32 (bf16) and
 * mg_cuda_f16_f32_to_h16, mg_cuda_f16_h16_to_f32 (fp16). Needs: CUDA runtime. */
#ifndef MG_BACKEND_CUDA_CONVERT_H
#define MG_BACKEND_CUDA_CONVERT_H

#include "backend/cuda/cuda_ops.h"
#include "core/status.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* f32_to_h16: dst[i] = h16(src[i]) for i < n, on `stream`. dst (n) h16 bits, src (n) fp32, device
 * memory. h16_to_f32: dst[i] = float(src[i]) (exact) for i < n, on `stream`. dst (n) fp32, src (n)
 * h16 bits. */
typedef mg_status mg_cuda_f32_to_h16_fn(uint16_t *dst, const float *src, size_t n,
                                        cudaStream_t stream);
typedef mg_status mg_cuda_h16_to_f32_fn(float *dst, const uint16_t *src, size_t n,
                                        cudaStream_t stream);
MG_CUDA_DTYPE_DECL(mg_cuda_f32_to_h16_fn, f32_to_h16);
MG_CUDA_DTYPE_DECL(mg_cuda_h16_to_f32_fn, h16_to_f32);

#ifdef __cplusplus
}
#endif
#endif
