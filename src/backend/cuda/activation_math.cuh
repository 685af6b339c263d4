/* The activations' formulas on the device, one copy for every kernel that applies them
 * (activation.cu, the MoE experts' grouped activations in moe_permute.cu, the GELU derivative
 * applied after the grouped GEMM in grouped_gemm.cu): the CPU's (cpu/cpu_activation.c), fp32.
 * GELU is the tanh form written logistically, x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3): one
 * exp, no cancellation. Exponents are capped at 88 (as mg_cpu_expf) so e stays finite and the
 * backward's e * sig never becomes inf * 0. Exports: mg_gelu_fwd, mg_gelu_bwd, mg_sigmoid. */
#ifndef MG_BACKEND_CUDA_ACTIVATION_MATH_CUH
#define MG_BACKEND_CUDA_ACTIVATION_MATH_CUH

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

#endif
