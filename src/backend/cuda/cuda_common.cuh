/* Internal to the .cu files of src/backend/cuda: the 16-bit compute type h16 and its conversions,
 * device helpers shared by the memory-bound op kernels (h16 vector loads and stores, warp
 * reductions) and the workspace accessor. Needs: cuda_internal.h, <cuda_bf16.h>, <cuda_fp16.h>.
 * CUDA C++ only. */
#ifndef MG_BACKEND_CUDA_COMMON_CUH
#define MG_BACKEND_CUDA_COMMON_CUH

/* core/status.h declares mg_error_set without C linkage guards; included first inside extern "C"
 * so that MG_FAIL from a .cu calls the C function (its include guard keeps later includes no-ops).
 */
extern "C" {
#include "core/status.h"
}
#include "backend/cuda/cuda_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <type_traits>

/* The compute type. The kernels and launchers of an op file are templates on the 16-bit type, named
 * h16 in them, instantiated for __nv_bfloat16 and __half (IEEE half) in one nvcc run; the
 * launchers' two C names come from MG_CUDA_DTYPES below. moe_router.cu is still compiled twice
 * (Makefile, -DMG_CUDA_TWICE): as is, h16 = bf16, and with -DMG_CUDA_F16, h16 = fp16, its launchers
 * then named mg_cuda_f16_* (MG_CUDA_FN, cuda_ops.h). What depends on the type: mg_h16<h16> (its
 * pair type, its cuBLASLt code, its name) and the conversions (to h16 always round to nearest, ties
 * to even; an fp16 overflow becomes +-Inf, which the loss scaler detects, so nothing clamps):
 * h16_to_f and h16x2_to_f2 by overload, f_to_h16<h16> and f2_to_h16x2<h16> by the type named. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> struct mg_h16;

template <> struct mg_h16<__nv_bfloat16> {
    typedef __nv_bfloat162 x2;
    static constexpr cudaDataType_t cuda_r = CUDA_R_16BF;
    static constexpr const char *name = "bf16";
    static __host__ __device__ __forceinline__ __nv_bfloat16 from_f(float x) {
        return __float2bfloat16_rn(x);
    }
    static __host__ __device__ __forceinline__ x2 from_f2(float lo, float hi) {
        return __floats2bfloat162_rn(lo, hi);
    }
};

template <> struct mg_h16<__half> {
    typedef __half2 x2;
    static constexpr cudaDataType_t cuda_r = CUDA_R_16F;
    static constexpr const char *name = "fp16";
    static __host__ __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
    static __host__ __device__ __forceinline__ x2 from_f2(float lo, float hi) {
        return __floats2half2_rn(lo, hi);
    }
};

static __host__ __device__ __forceinline__ float h16_to_f(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
static __host__ __device__ __forceinline__ float h16_to_f(__half x) {
    return __half2float(x);
}
static __host__ __device__ __forceinline__ float2 h16x2_to_f2(__nv_bfloat162 x) {
    return __bfloat1622float2(x);
}
static __host__ __device__ __forceinline__ float2 h16x2_to_f2(__half2 x) {
    return __half22float2(x);
}

#ifdef MG_CUDA_TWICE
#ifdef MG_CUDA_F16
typedef __half h16;
#define MG_PTX_H16 "f16"
#else
typedef __nv_bfloat16 h16;
#define MG_PTX_H16 "bf16"
#endif
typedef mg_h16<h16>::x2 h16x2;
#define MG_H16_DEFAULT = h16 /* the object's one type, where a call does not name it */
#else
#define MG_H16_DEFAULT
#endif

template <typename T MG_H16_DEFAULT>
static __host__ __device__ __forceinline__ T f_to_h16(float x) {
    return mg_h16<T>::from_f(x);
}
template <typename T MG_H16_DEFAULT>
static __host__ __device__ __forceinline__ typename mg_h16<T>::x2 f2_to_h16x2(float lo, float hi) {
    return mg_h16<T>::from_f2(lo, hi);
}

/* Defines the per-dtype function `op` (ret, the parenthesised parameters and the same names as
 * arguments) as a template on h16 whose body follows the macro, and its two C names: mg_cuda_<op>
 * runs it with bf16, mg_cuda_f16_<op> with fp16. */
#define MG_CUDA_DTYPES(ret, op, params, args)                                                      \
    template <typename h16> static ret op params;                                                  \
    extern "C" ret mg_cuda_##op params {                                                           \
        return op<__nv_bfloat16> args;                                                             \
    }                                                                                              \
    extern "C" ret mg_cuda_f16_##op params {                                                       \
        return op<__half> args;                                                                    \
    }                                                                                              \
    template <typename h16> static ret op params

/* The C name of per-dtype function `op` for type T, where a template calls another file's. */
#define MG_CUDA_OF(T, op) (std::is_same<T, __half>::value ? mg_cuda_f16_##op : mg_cuda_##op)

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

/* 8 h16 held in 16 bytes, as fp32. */
template <typename h16 MG_H16_DEFAULT>
static __device__ __forceinline__ void mg_unpack8(uint4 u, float f[8]) {
    const typename mg_h16<h16>::x2 *h = reinterpret_cast<const typename mg_h16<h16>::x2 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = h16x2_to_f2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

/* 8 h16 = 16 bytes: one vector load or store. p must be 16-byte aligned. */
template <typename h16> static __device__ __forceinline__ void mg_load8(const h16 *p, float f[8]) {
    mg_unpack8<h16>(*reinterpret_cast<const uint4 *>(p), f);
}

template <typename h16> static __device__ __forceinline__ void mg_store8(h16 *p, const float f[8]) {
    uint4 u;
    typename mg_h16<h16>::x2 *h = reinterpret_cast<typename mg_h16<h16>::x2 *>(&u);
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = f2_to_h16x2<h16>(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* VEC = 8: one 16-byte vector; VEC = 1: one element (the scalar fallback of a templated kernel). */
template <int VEC, typename h16>
static __device__ __forceinline__ void mg_loadv(const h16 *p, float *f) {
    if (VEC == 8)
        mg_load8(p, f);
    else
        f[0] = h16_to_f(*p);
}

template <int VEC, typename h16>
static __device__ __forceinline__ void mg_storev(h16 *p, const float *f) {
    if (VEC == 8)
        mg_store8(p, f);
    else
        *p = f_to_h16<h16>(f[0]);
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
