/* Elementwise add, the bias + residual add that closes a row-parallel linear layer, and the
 * deterministic reductions behind loss averaging and gradient-norm clipping (CPU reference:
 * cpu/cpu_elementwise.c).
 *
 * Determinism: a reduction runs on a grid whose size depends only on n (never on the device), each
 * thread visits a fixed set of elements in a fixed order and accumulates in double, blocks reduce
 * with a fixed butterfly, and one final block combines the block partials in a fixed tree. So the
 * result is bitwise reproducible run to run; it differs from the CPU's chunked double sum only by
 * double rounding, invisible after the final fp32 rounding in nearly every case.
 * Nothing here reads a value back to the host: *out is updated on the device. */
#include "backend/cuda/cuda_common.cuh"

#define SUM_THREADS          256
#define SUM_MAX_BLOCKS       1024 /* = threads of the final block */
#define SUM_ITEMS_PER_THREAD 16

/* ---- add: out = a + b (h16 in and out, fp32 add) ---- */

template <typename h16>
static __global__ void add_kernel(h16 *out, const h16 *a, const h16 *b, size_t n, int vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 8 : 0; /* 16-byte vectors; the rest goes element by element */
    for (size_t u = t0; u < nv; u += stride) {
        float fa[8], fb[8];
        mg_load8(a + 8 * u, fa);
        mg_load8(b + 8 * u, fb);
#pragma unroll
        for (int k = 0; k < 8; k++) fa[k] += fb[k];
        mg_store8(out + 8 * u, fa);
    }
    for (size_t i = nv * 8 + t0; i < n; i += stride)
        out[i] = f_to_h16<h16>(h16_to_f(a[i]) + h16_to_f(b[i]));
}

MG_CUDA_DTYPES(mg_status, add, (mg_backend * be, void *out, const void *a, const void *b, size_t n),
               (be, out, a, b, n)) {
    // out, a, b (n)
    if (n == 0) return MG_OK;
    int vec = mg_cuda_aligned16(out) && mg_cuda_aligned16(a) && mg_cuda_aligned16(b);
    unsigned grid = mg_cuda_blocks(vec ? (n + 7) / 8 : n, MG_CUDA_THREADS);
    add_kernel<h16><<<grid, MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>((h16 *)out, (const h16 *)a,
                                                                      (const h16 *)b, n, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- bias_residual_add: out = (x + bias) + residual per row (bias, residual may be NULL) ----
 * h16 in and out; the two adds in fp32 in the CPU's order, then one rounding, so the result is
 * the CPU's fp32 result rounded to h16. Each element is read and written by the same thread, so
 * out may alias x. */
template <typename h16, int VEC>
static __global__ void bias_residual_add_kernel(h16 *out, const h16 *x, const h16 *bias,
                                                const h16 *residual, int N, int H) {
    // out, x, residual (N, H); bias (H)
    size_t per_row = (size_t)H / VEC, items = (size_t)N * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t j = (u % per_row) * VEC, at = (u / per_row) * H + j;
        float a[VEC], b[VEC];
        mg_loadv<VEC>(x + at, a);
        if (bias) {
            mg_loadv<VEC>(bias + j, b);
#pragma unroll
            for (int k = 0; k < VEC; k++) a[k] += b[k];
        }
        if (residual) {
            mg_loadv<VEC>(residual + at, b);
#pragma unroll
            for (int k = 0; k < VEC; k++) a[k] += b[k];
        }
        mg_storev<VEC>(out + at, a);
    }
}

MG_CUDA_DTYPES(mg_status, bias_residual_add,
               (mg_backend * be, void *out, const void *x, const void *bias, const void *residual,
                int N, int H),
               (be, out, x, bias, residual, N, H)) {
    // out, x (N, H), out may be x; bias (H) or NULL; residual (N, H) or NULL
    if (N <= 0 || H <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    bool vec = H % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(x) &&
               (!bias || mg_cuda_aligned16(bias)) && (!residual || mg_cuda_aligned16(residual));
    const h16 *xb = (const h16 *)x, *bb = (const h16 *)bias, *rb = (const h16 *)residual;
    if (vec)
        bias_residual_add_kernel<h16, 8>
            <<<mg_cuda_blocks((size_t)N * (H / 8), MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (h16 *)out, xb, bb, rb, N, H);
    else
        bias_residual_add_kernel<h16, 1>
            <<<mg_cuda_blocks((size_t)N * H, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (h16 *)out, xb, bb, rb, N, H);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- reductions ---- */

/* Sum of a block's per-thread doubles, fixed order; the result is valid in thread 0. */
static __device__ double block_sum_d(double v) {
    __shared__ double warp_part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = mg_warp_sum_d(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    double s = 0;
    if (warp == 0) {
        s = lane < nwarps ? warp_part[lane] : 0.0;
        s = mg_warp_sum_d(s);
    }
    return s;
}

/* MODE 0: x, 1: x*w, 2: x^2. partial (gridDim.x) receives one double per block. */
template <int MODE>
static __global__ void sum_partial_kernel(double *partial, const float *x, const float *w, size_t n,
                                          int vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nv = vec ? n / 4 : 0;
    double s = 0;
    for (size_t u = t0; u < nv; u += stride) {
        float4 a = reinterpret_cast<const float4 *>(x)[u];
        if (MODE == 1) {
            float4 b = reinterpret_cast<const float4 *>(w)[u];
            s += (double)a.x * b.x + (double)a.y * b.y + (double)a.z * b.z + (double)a.w * b.w;
        } else if (MODE == 2) {
            s += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
        } else {
            s += (double)a.x + (double)a.y + (double)a.z + (double)a.w;
        }
    }
    for (size_t i = nv * 4 + t0; i < n; i += stride) {
        double a = x[i];
        s += MODE == 1 ? a * (double)w[i] : MODE == 2 ? a * a : a;
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* One block of SUM_MAX_BLOCKS threads: *out = (float)(*out + scale * sum(partial)), where
 * scale = u^2 in double when unscale (device memory) is given (sumsq_f32), else `scale`. */
static __global__ void sum_final_kernel(float *out, const double *partial, int nblocks,
                                        double scale, const float *unscale) {
    double s = threadIdx.x < (unsigned)nblocks ? partial[threadIdx.x] : 0.0;
    s = block_sum_d(s);
    if (unscale) {
        const double u = (double)*unscale;
        scale = u * u;
    }
    if (threadIdx.x == 0) *out = (float)((double)*out + scale * s);
}

/* Workspace: one double per block, at most SUM_MAX_BLOCKS * 8 = 8 KiB. */
static mg_status reduce_launch(mg_backend *be, int mode, float *out, const float *x, const float *w,
                               size_t n, double scale, const float *unscale) {
    if (n == 0) return MG_OK; /* *out += 0 */
    size_t nb = (n + (size_t)SUM_THREADS * SUM_ITEMS_PER_THREAD - 1) /
                ((size_t)SUM_THREADS * SUM_ITEMS_PER_THREAD);
    int nblocks = (int)(nb > SUM_MAX_BLOCKS ? SUM_MAX_BLOCKS : nb); /* depends on n only */
    double *partial = NULL;
    MG_CHECK(mg_cuda_scratch(be, (size_t)nblocks * sizeof(double), (void **)&partial, "sum_f32"));
    int vec = mg_cuda_aligned16(x) && (mode != 1 || mg_cuda_aligned16(w));
    cudaStream_t st = mg_cuda_stream(be);
    if (mode == 0)
        sum_partial_kernel<0><<<nblocks, SUM_THREADS, 0, st>>>(partial, x, w, n, vec);
    else if (mode == 1)
        sum_partial_kernel<1><<<nblocks, SUM_THREADS, 0, st>>>(partial, x, w, n, vec);
    else
        sum_partial_kernel<2><<<nblocks, SUM_THREADS, 0, st>>>(partial, x, w, n, vec);
    MG_CUDA_CHECK_LAUNCH();
    sum_final_kernel<<<1, SUM_MAX_BLOCKS, 0, st>>>(out, partial, nblocks, scale, unscale);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, sum_f32,
               (mg_backend * be, float *out, const float *x, const float *w, size_t n, float scale),
               (be, out, x, w, n, scale)) {
    // out (1), accumulated; x, w (n), w may be NULL
    return reduce_launch(be, w ? 1 : 0, out, x, w, n, scale, NULL);
}

MG_CUDA_DTYPES(mg_status, sumsq_f32,
               (mg_backend * be, float *out, const float *x, size_t n, const float *unscale),
               (be, out, x, n, unscale)) {
    // out (1), accumulated; x (n); unscale (1) device or NULL
    return reduce_launch(be, 2, out, x, NULL, n, 1.0, unscale);
}

/* ---- count_zeros_f32: *out += #{i : x[i] == 0}; integer sums, so any order is exact ---- */

static __global__ void count_zeros_kernel(unsigned long long *out, const float *x, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long c = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c += x[i] == 0.0f;
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}

MG_CUDA_DTYPES(mg_status, count_zeros_f32,
               (mg_backend * be, int64_t *out, const float *x, size_t n), (be, out, x, n)) {
    // out (1), accumulated; x (n)
    if (n == 0) return MG_OK;
    size_t nb = (n + (size_t)SUM_THREADS * SUM_ITEMS_PER_THREAD - 1) /
                ((size_t)SUM_THREADS * SUM_ITEMS_PER_THREAD);
    int nblocks = (int)(nb > SUM_MAX_BLOCKS ? SUM_MAX_BLOCKS : nb);
    count_zeros_kernel<<<nblocks, SUM_THREADS, 0, mg_cuda_stream(be)>>>((unsigned long long *)out,
                                                                        x, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- clip_coef: one thread, so the optimizer never waits on a host read of the norm ---- */

static __global__ void clip_coef_kernel(float *coef_out, float *norm_out, const float *sumsq,
                                        float clip, const float *unscale_p) {
    const float unscale = unscale_p ? *unscale_p : 1.0f;
    float norm = sqrtf(*sumsq);
    *norm_out = norm;
    *coef_out = !isfinite(norm)
                    ? __int_as_float(0x7fc00000) /* NaN */
                    : (clip > 0.0f && norm > clip ? clip / (norm + 1e-6f) : 1.0f) * unscale;
}

MG_CUDA_DTYPES(mg_status, clip_coef,
               (mg_backend * be, float *coef_out, float *norm_out, const float *sumsq, float clip,
                const float *unscale),
               (be, coef_out, norm_out, sumsq, clip, unscale)) {
    // coef_out, norm_out, sumsq (1); unscale (1) device or NULL
    clip_coef_kernel<<<1, 1, 0, mg_cuda_stream(be)>>>(coef_out, norm_out, sumsq, clip, unscale);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- scale_f32: out = x * *s, the factor read on the device ---- */

static __global__ void scale_f32_kernel(float *out, const float *x, size_t n, const float *s) {
    const float f = *s;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = x[i] * f;
}

MG_CUDA_DTYPES(mg_status, scale_f32,
               (mg_backend * be, float *out, const float *x, size_t n, const float *s),
               (be, out, x, n, s)) {
    // out, x (n); s (1) device
    if (n == 0) return MG_OK;
    scale_f32_kernel<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
                       mg_cuda_stream(be)>>>(out, x, n, s);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
