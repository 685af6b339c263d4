/* The activations' formulas on the device, one copy for every kernel that applies them
 * (activation.cu, the MoE experts' grouped activations in moe_permute.cu, the GELU derivative
 * applied after the grouped GEMM in grouped_gemm.cu): the CPU's (cpu/cpu_activation.c), fp32.
 * GELU is the tanh form written logistically, x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3): one
 * exp, no cancellation. Exponents are capped at 88 (as mg_cpu_expf) so e stays finite and the
 * backward's e * sig never becomes inf * 0. The grid-stride bodies over n elements serve the
 * plain kernels (n from the host) and the grouped ones (n from device-side counts).
 * Exports: mg_gelu_fwd, mg_gelu_bwd, mg_sigmoid, mg_gelu_forward_range, mg_gelu_backward_range,
 * mg_swiglu_forward_rows, mg_swiglu_backward_rows. */
#ifndef MG_BACKEND_CUDA_ACTIVATION_MATH_CUH
#define MG_BACKEND_CUDA_ACTIVATION_MATH_CUH

#include "backend/cuda/cuda_common.cuh"

#define MG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MG_GELU_C 0.044715f

/* e^{-2u} */
static __device__ __forceinline__ float mg_gelu_expm2u(float x) {
    float u = MG_GELU_K * (x + MG_GELU_C * x * x * x);
    return expf(fminf(-2.0f * u, 88.0f));
}

static __device__ __forceinline__ float mg_gelu_fwd(float x) {
    return x / (1.0f + mg_gelu_expm2u(x));
}

/* gelu'(x) d: d/dx [x sigma(2u)] = sigma + x 2 sigma (1 - sigma) du, 1 - sigma = e sigma */
static __device__ __forceinline__ float mg_gelu_bwd(float x, float d) {
    float e = mg_gelu_expm2u(x);
    float sig = 1.0f / (1.0f + e);
    float du = MG_GELU_K * (1.0f + 3.0f * MG_GELU_C * x * x);
    return (sig + 2.0f * x * (sig * (e * sig)) * du) * d;
}

/* the logistic function, its exponent capped */
static __device__ __forceinline__ float mg_sigmoid(float g) {
    return 1.0f / (1.0f + expf(fminf(-g, 88.0f)));
}

/* out[0..n) = gelu(inp), this thread's share of the grid; vec: 16-byte vectors for n / 8 x 8. */
template <typename h16>
static __device__ __forceinline__ void mg_gelu_forward_range(h16 *out, const h16 *inp, size_t n,
                                                             int vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 8 : 0;
    for (size_t u = t0; u < nv; u += stride) {
        float f[8];
        mg_load8(inp + 8 * u, f);
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = mg_gelu_fwd(f[k]);
        mg_store8(out + 8 * u, f);
    }
    for (size_t i = nv * 8 + t0; i < n; i += stride)
        out[i] = f_to_h16<h16>(mg_gelu_fwd(h16_to_f(inp[i])));
}

/* dinp[0..n) = gelu'(inp) dout (dinp may be dout: each element is read before it is written). */
template <typename h16>
static __device__ __forceinline__ void mg_gelu_backward_range(h16 *dinp, const h16 *inp,
                                                              const h16 *dout, size_t n, int vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 8 : 0;
    for (size_t u = t0; u < nv; u += stride) {
        float x[8], d[8];
        mg_load8(inp + 8 * u, x);
        mg_load8(dout + 8 * u, d);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = mg_gelu_bwd(x[k], d[k]);
        mg_store8(dinp + 8 * u, x);
    }
    for (size_t i = nv * 8 + t0; i < n; i += stride)
        dinp[i] = f_to_h16<h16>(mg_gelu_bwd(h16_to_f(inp[i]), h16_to_f(dout[i])));
}

/* SwiGLU over rows of Megatron's [gate | up] layout: work item u is VEC consecutive columns of
 * row u / (F / VEC) (VEC = 8 needs F % 8 == 0 and 16-byte aligned buffers). The index type I is
 * 32-bit when the items fit (the row division is several times cheaper than a 64-bit one, a
 * visible share of these memory-bound kernels), else 64-bit. */
template <int VEC, class I, typename h16>
static __device__ __forceinline__ void mg_swiglu_fwd_items(h16 *out, const h16 *inp, I items,
                                                           I per_row, int F) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I u = (I)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        I i = u / per_row, j = (u - i * per_row) * VEC;
        const h16 *g = inp + (size_t)i * 2 * F + j;
        float fg[VEC], fu[VEC];
        mg_loadv<VEC>(g, fg);
        mg_loadv<VEC>(g + F, fu);
#pragma unroll
        for (int q = 0; q < VEC; q++) fg[q] = fg[q] * mg_sigmoid(fg[q]) * fu[q];
        mg_storev<VEC>(out + (size_t)i * F + j, fg);
    }
}

template <int VEC, class I, typename h16>
static __device__ __forceinline__ void
mg_swiglu_bwd_items(h16 *dinp, const h16 *inp, const h16 *dout, I items, I per_row, int F) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I u = (I)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        I i = u / per_row, j = (u - i * per_row) * VEC;
        const h16 *g = inp + (size_t)i * 2 * F + j;
        h16 *dg = dinp + (size_t)i * 2 * F + j;
        float fg[VEC], fu[VEC], fd[VEC], og[VEC], ou[VEC];
        mg_loadv<VEC>(g, fg);
        mg_loadv<VEC>(g + F, fu);
        mg_loadv<VEC>(dout + (size_t)i * F + j, fd);
#pragma unroll
        for (int q = 0; q < VEC; q++) {
            float sig = mg_sigmoid(fg[q]);
            /* d silu / dg = sig * (1 + g * (1 - sig)) */
            og[q] = fd[q] * fu[q] * sig * (1.0f + fg[q] * (1.0f - sig));
            ou[q] = fd[q] * (fg[q] * sig);
        }
        mg_storev<VEC>(dg, og);
        mg_storev<VEC>(dg + F, ou);
    }
}

/* out (rows, F) = silu(gate) * up from inp (rows, 2F); this thread's share of the grid. */
template <int VEC, typename h16>
static __device__ __forceinline__ void mg_swiglu_forward_rows(h16 *out, const h16 *inp, size_t rows,
                                                              int F) {
    size_t per_row = (size_t)F / VEC, items = rows * per_row;
    if (items < (1u << 31))
        mg_swiglu_fwd_items<VEC, uint32_t>(out, inp, (uint32_t)items, (uint32_t)per_row, F);
    else
        mg_swiglu_fwd_items<VEC, size_t>(out, inp, items, per_row, F);
}

/* dinp (rows, 2F) = d[gate | up] from inp (rows, 2F) and dout (rows, F). */
template <int VEC, typename h16>
static __device__ __forceinline__ void
mg_swiglu_backward_rows(h16 *dinp, const h16 *inp, const h16 *dout, size_t rows, int F) {
    size_t per_row = (size_t)F / VEC, items = rows * per_row;
    if (items < (1u << 31))
        mg_swiglu_bwd_items<VEC, uint32_t>(dinp, inp, dout, (uint32_t)items, (uint32_t)per_row, F);
    else
        mg_swiglu_bwd_items<VEC, size_t>(dinp, inp, dout, items, per_row, F);
}

#endif
