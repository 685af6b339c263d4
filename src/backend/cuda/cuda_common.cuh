/* Internal to the .cu files of src/backend/cuda: device helpers shared by the memory-bound op
 * kernels (bf16 vector loads and stores, warp reductions) and the workspace accessor. Needs:
 * cuda_internal.h, <cuda_bf16.h>. CUDA C++ only. */
#ifndef MG_BACKEND_CUDA_COMMON_CUH
#define MG_BACKEND_CUDA_COMMON_CUH

/* core/status.h declares mg_error_set without C linkage guards; included first inside extern "C"
 * so that MG_FAIL from a .cu calls the C function (its include guard keeps later includes no-ops).
 */
extern "C" {
#include "core/status.h"
}
#include "backend/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

/* Threads per block for the elementwise kernels, and the cap on their grid-stride grids. */
#define MG_CUDA_THREADS    256
#define MG_CUDA_MAX_BLOCKS 65535

static inline bool mg_cuda_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Vocab-parallel ops (embedding, cross-entropy): id - v0 when vocabulary id `id` is one of this
 * rank's rows [v0, v0 + Vl), else -1 (unsigned arithmetic: no overflow, and a negative id is
 * outside every range). The launchers check Vl > 0. */
static __device__ __forceinline__ int mg_cuda_vocab_row(int32_t id, int v0, int Vl) {
    unsigned r = (unsigned)id - (unsigned)v0;
    return r < (unsigned)Vl ? (int)r : -1;
}

/* Blocks for `items` work items of `threads` each, at least 1, capped for grid-stride loops. */
static inline unsigned mg_cuda_blocks(size_t items, int threads) {
    size_t b = (items + (size_t)threads - 1) / (size_t)threads;
    if (b < 1) b = 1;
    if (b > MG_CUDA_MAX_BLOCKS) b = MG_CUDA_MAX_BLOCKS;
    return (unsigned)b;
}

/* The op temporaries live in the backend's one workspace (also cuBLASLt's): every op runs on the
 * compute stream, so stream order keeps two ops from using it at once. Too small a workspace is
 * MG_ERR_NOMEM, for every op, naming the size that would do. */
static inline mg_status mg_cuda_scratch(mg_backend *be, size_t bytes, void **out, const char *op) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    if (bytes > ctx->workspace_bytes || (bytes > 0 && !ctx->workspace))
        return MG_FAIL(MG_ERR_NOMEM,
                       "%s needs %zu bytes of CUDA workspace but %zu are reserved (raise "
                       "MG_CUDA_WORKSPACE_MB to %zu)",
                       op, bytes, ctx->workspace_bytes, (bytes >> 20) + 1);
    *out = ctx->workspace;
    return MG_OK;
}

/* 8 bf16 held in 16 bytes, as fp32. */
static __device__ __forceinline__ void mg_unpack8(uint4 u, float f[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = __bfloat1622float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

/* 8 bf16 = 16 bytes: one vector load or store. p must be 16-byte aligned. */
static __device__ __forceinline__ void mg_load8(const bf16 *p, float f[8]) {
    mg_unpack8(*reinterpret_cast<const uint4 *>(p), f);
}

static __device__ __forceinline__ void mg_store8(bf16 *p, const float f[8]) {
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* VEC = 8: one 16-byte vector; VEC = 1: one element (the scalar fallback of a templated kernel). */
template <int VEC> static __device__ __forceinline__ void mg_loadv(const bf16 *p, float *f) {
    if (VEC == 8)
        mg_load8(p, f);
    else
        f[0] = __bfloat162float(*p);
}

template <int VEC> static __device__ __forceinline__ void mg_storev(bf16 *p, const float *f) {
    if (VEC == 8)
        mg_store8(p, f);
    else
        *p = __float2bfloat16_rn(f[0]);
}

/* Butterfly reductions: every lane ends with the same value, combined in a fixed order. */
static __device__ __forceinline__ float mg_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double mg_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
