/* Elementwise activations (CPU reference: cpu/cpu_activation.c): GELU, tanh form, and SwiGLU in
 * Megatron's [gate | up] row layout. h16 in and out, fp32 math with the same formulas as the CPU
 * (the logistic form of tanh-GELU: one exp, no cancellation). Gradients are overwritten.
 * Each kernel takes a 16-byte (8 x h16) path when every pointer is aligned and the row width
 * allows, and an element-by-element path for the rest. */
#include "backend/cuda/activation_math.cuh"
#include "backend/cuda/cuda_common.cuh"

template <typename h16>
static __global__ void gelu_forward_kernel(h16 *out, const h16 *inp, size_t n, int vec) {
    mg_gelu_forward_range(out, inp, n, vec); // out, inp (n)
}

template <typename h16>
static __global__ void gelu_backward_kernel(h16 *dinp, const h16 *inp, const h16 *dout, size_t n,
                                            int vec) {
    mg_gelu_backward_range(dinp, inp, dout, n, vec); // dinp, inp, dout (n)
}

MG_CUDA_DTYPES(mg_status, gelu_forward, (mg_backend * be, void *out, const void *inp, size_t n),
               (be, out, inp, n)) {
    if (n == 0) return MG_OK;
    int vec = mg_cuda_aligned16(out) && mg_cuda_aligned16(inp);
    unsigned grid = mg_cuda_blocks(vec ? (n + 7) / 8 : n, MG_CUDA_THREADS);
    gelu_forward_kernel<h16>
        <<<grid, MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>((h16 *)out, (const h16 *)inp, n, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, gelu_backward,
               (mg_backend * be, void *dinp, const void *inp, const void *dout, size_t n),
               (be, dinp, inp, dout, n)) {
    if (n == 0) return MG_OK;
    int vec = mg_cuda_aligned16(dinp) && mg_cuda_aligned16(inp) && mg_cuda_aligned16(dout);
    unsigned grid = mg_cuda_blocks(vec ? (n + 7) / 8 : n, MG_CUDA_THREADS);
    gelu_backward_kernel<h16><<<grid, MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(
        (h16 *)dinp, (const h16 *)inp, (const h16 *)dout, n, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* sigma(g) = 1 / (1 + e^{-g}); the cap keeps e^{-g} finite (g < -88: sigma ~ 1e-38 either way). */

/* SwiGLU (activation_math.cuh has the bodies and the row layout). */
template <typename h16, int VEC>
static __global__ void swiglu_forward_kernel(h16 *out, const h16 *inp, int N, int F) {
    mg_swiglu_forward_rows<VEC>(out, inp, (size_t)N, F); // out (N, F); inp (N, 2F) = [gate | up]
}

template <typename h16, int VEC>
static __global__ void swiglu_backward_kernel(h16 *dinp, const h16 *inp, const h16 *dout, int N,
                                              int F) {
    mg_swiglu_backward_rows<VEC>(dinp, inp, dout, (size_t)N, F); // dinp, inp (N, 2F); dout (N, F)
}

MG_CUDA_DTYPES(mg_status, swiglu_forward,
               (mg_backend * be, void *out, const void *inp, int N, int F), (be, out, inp, N, F)) {
    // out (N, F); inp (N, 2F)
    if (N <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    if (F % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(inp)) {
        unsigned grid = mg_cuda_blocks((size_t)N * (F / 8), MG_CUDA_THREADS);
        swiglu_forward_kernel<h16, 8>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)out, (const h16 *)inp, N, F);
    } else {
        unsigned grid = mg_cuda_blocks((size_t)N * F, MG_CUDA_THREADS);
        swiglu_forward_kernel<h16, 1>
            <<<grid, MG_CUDA_THREADS, 0, st>>>((h16 *)out, (const h16 *)inp, N, F);
    }
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, swiglu_backward,
               (mg_backend * be, void *dinp, const void *inp, const void *dout, int N, int F),
               (be, dinp, inp, dout, N, F)) {
    // dinp, inp (N, 2F); dout (N, F)
    if (N <= 0 || F <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    if (F % 8 == 0 && mg_cuda_aligned16(dinp) && mg_cuda_aligned16(inp) &&
        mg_cuda_aligned16(dout)) {
        unsigned grid = mg_cuda_blocks((size_t)N * (F / 8), MG_CUDA_THREADS);
        swiglu_backward_kernel<h16, 8><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (h16 *)dinp, (const h16 *)inp, (const h16 *)dout, N, F);
    } else {
        unsigned grid = mg_cuda_blocks((size_t)N * F, MG_CUDA_THREADS);
        swiglu_backward_kernel<h16, 1><<<grid, MG_CUDA_THREADS, 0, st>>>(
            (h16 *)dinp, (const h16 *)inp, (const h16 *)dout, N, F);
    }
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
