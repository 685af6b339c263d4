/* Softmax cross-entropy, in place (CPU reference: cpu/cpu_cross_entropy.c): losses[i] =
 * logsumexp(logits[i,:]) - logits[i, t_i], then the h16 logits row becomes
 * dlogits = (softmax - onehot(t_i)) * dloss[i]. Two forms: fused over the whole vocabulary, and the
 * vocab-parallel three steps over one rank's columns (at the end of this file).
 *
 * Fused: one block per row. Pass 1 streams the row once with an online softmax: each thread keeps a
 * running maximum m and sum s = sum exp(x - m), rescaling s when m grows; the per-thread pairs
 * are merged with a fixed butterfly and a fixed cross-warp order (deterministic). Pass 2 reads the
 * row again (a 100 KB row of a recently visited block is still in L2) and overwrites it with the
 * gradient. No fp32 copy of the logits exists; exp is exp2 of a log2(e)-scaled argument.
 * 16-byte path when V % 8 == 0 and the buffer is aligned, else element by element (coalesced but
 * slower; pad the vocabulary to a multiple of 8, as Megatron does, to avoid it).
 * A target outside [0, V) cannot be reported without a host sync: that row's loss is NaN (visible
 * in the loss average) and its gradient is the softmax alone. */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

#define CE_THREADS 512
#define CE_LOG2E   1.4426950408889634f

/* (m, s) <- merge of two online-softmax states; an empty state has m = -inf, s = 0. */
static __device__ __forceinline__ void ce_merge(float &m, float &s, float mo, float so) {
    float M = fmaxf(m, mo);
    float a = m == -INFINITY ? 0.0f : s * exp2f((m - M) * CE_LOG2E);
    float b = mo == -INFINITY ? 0.0f : so * exp2f((mo - M) * CE_LOG2E);
    m = M;
    s = a + b;
}

/* Adds VEC values to the thread's state: one rescale per group, then VEC exps. */
template <int VEC>
static __device__ __forceinline__ void ce_accumulate(float &m, float &s, const float *f) {
    float lm = f[0];
#pragma unroll
    for (int k = 1; k < VEC; k++) lm = fmaxf(lm, f[k]);
    if (lm > m) {
        s = m == -INFINITY ? 0.0f : s * exp2f((m - lm) * CE_LOG2E);
        m = lm;
    }
    if (m == -INFINITY) return; /* every value so far is -inf: nothing to add */
    float ms = m * CE_LOG2E;
#pragma unroll
    for (int k = 0; k < VEC; k++) s += exp2f(fmaf(f[k], CE_LOG2E, -ms));
}

template <typename h16, int VEC>
static __global__ void __launch_bounds__(CE_THREADS)
    cross_entropy_kernel(h16 *logits, float *losses, const int32_t *targets, const float *dloss,
                         int V) {
    // logits (N, V) h16 in place; losses, targets, dloss (N); one block per row
    __shared__ float sh_m[CE_THREADS / 32], sh_s[CE_THREADS / 32];
    size_t row = blockIdx.x;
    h16 *x = logits + row * (size_t)V;
    int tgt = targets[row];
    bool tgt_ok = tgt >= 0 && tgt < V;
    float xt = tgt_ok ? h16_to_f(x[tgt]) : 0.0f; /* read before pass 2 overwrites it */

    /* pass 1: online max and sum */
    float m = -INFINITY, s = 0.0f;
    int nv = V / VEC;
    for (int u = threadIdx.x; u < nv; u += CE_THREADS) {
        float f[VEC];
        if (VEC == 8)
            mg_load8(x + (size_t)u * 8, f);
        else
            f[0] = h16_to_f(x[u]);
        ce_accumulate<VEC>(m, s, f);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
        ce_merge(m, s, mo, so);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh_m[warp] = m, sh_s[warp] = s;
    __syncthreads(); /* also orders every read of pass 1 before the writes of pass 2 */
    m = sh_m[0], s = sh_s[0];
    for (int w = 1; w < CE_THREADS / 32; w++) ce_merge(m, s, sh_m[w], sh_s[w]); /* fixed order */

    if (threadIdx.x == 0) losses[row] = tgt_ok ? logf(s) + m - xt : NAN;

    /* pass 2: dlogits = (softmax - onehot) * dloss */
    float inv = 1.0f / s, dl = dloss[row], ms = m * CE_LOG2E;
    for (int u = threadIdx.x; u < nv; u += CE_THREADS) {
        float f[VEC];
        if (VEC == 8)
            mg_load8(x + (size_t)u * 8, f);
        else
            f[0] = h16_to_f(x[u]);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float p = exp2f(fmaf(f[k], CE_LOG2E, -ms)) * inv;
            f[k] = (u * VEC + k == tgt ? p - 1.0f : p) * dl;
        }
        if (VEC == 8)
            mg_store8(x + (size_t)u * 8, f);
        else
            x[u] = f_to_h16<h16>(f[0]);
    }
}

MG_CUDA_DTYPES(mg_status, cross_entropy_fused,
               (mg_backend * be, void *logits, float *losses, const int32_t *targets,
                const float *dloss, int N, int V),
               (be, logits, losses, targets, dloss, N, V)) {
    // logits (N, V) in: logits, out: dlogits; losses, targets, dloss (N)
    if (!dloss) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_fused: dloss is NULL");
    if (N <= 0) return MG_OK;
    if (V <= 0) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_fused: vocabulary size %d", V);
    cudaStream_t st = mg_cuda_stream(be);
    if (V % 8 == 0 && mg_cuda_aligned16(logits))
        cross_entropy_kernel<h16, 8>
            <<<N, CE_THREADS, 0, st>>>((h16 *)logits, losses, targets, dloss, V);
    else
        cross_entropy_kernel<h16, 1>
            <<<N, CE_THREADS, 0, st>>>((h16 *)logits, losses, targets, dloss, V);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- vocab-parallel cross-entropy: this rank's columns [v0, v0 + Vl) of the logits ----
 * Three kernels, one block of CE_THREADS per row; between them the caller all-reduces rowmax (max)
 * and sums (sum) over the tensor-parallel group (backend_ops.h). Each row is reduced by per-thread
 * partials over a fixed set of columns, a butterfly inside each warp and the warp partials added
 * in warp order: bitwise the same on every run. The exponentials are the fused kernel's
 * exp2(x log2 e - m log2 e), accumulated in fp32.
 * Targets are global ids; a target outside [v0, v0 + Vl) belongs to another rank (sums[N + i] = 0
 * here, no -1 in this rank's gradient). A negative target, a bug that only a host read could
 * report, makes sums[N + i] NaN, so the row's loss is NaN on every rank (visible in the loss
 * average), as the fused kernel does. */

/* The row's value of a per-thread partial (max or sum), in thread 0; fixed order. */
template <bool MAX> static __device__ __forceinline__ float ce_block_reduce(float v) {
    __shared__ float sh[CE_THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < CE_THREADS / 32; w++) v = MAX ? fmaxf(v, sh[w]) : v + sh[w];
    return v;
}

template <typename h16, int VEC>
static __global__ void __launch_bounds__(CE_THREADS)
    ce_max_kernel(float *rowmax, const h16 *logits, int Vl) {
    // rowmax (N); logits (N, Vl); one block per row
    size_t row = blockIdx.x;
    const h16 *x = logits + row * (size_t)Vl;
    float m = -INFINITY; /* fmaxf drops NaN, as the CPU's compare does */
    for (int u = threadIdx.x; u < Vl / VEC; u += CE_THREADS) {
        float f[VEC];
        mg_loadv<VEC>(x + (size_t)u * VEC, f);
#pragma unroll
        for (int k = 0; k < VEC; k++) m = fmaxf(m, f[k]);
    }
    m = ce_block_reduce<true>(m);
    if (threadIdx.x == 0) rowmax[row] = m;
}

template <typename h16, int VEC>
static __global__ void __launch_bounds__(CE_THREADS)
    ce_sums_kernel(float *sums, const h16 *logits, const float *rowmax, const int32_t *targets,
                   int v0, int N, int Vl) {
    // sums (2N): sum of exponentials, then the target logit; logits (N, Vl); rowmax, targets (N)
    size_t row = blockIdx.x;
    const h16 *x = logits + row * (size_t)Vl;
    float ms = rowmax[row] * CE_LOG2E, s = 0.0f;
    for (int u = threadIdx.x; u < Vl / VEC; u += CE_THREADS) {
        float f[VEC];
        mg_loadv<VEC>(x + (size_t)u * VEC, f);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += exp2f(fmaf(f[k], CE_LOG2E, -ms));
    }
    s = ce_block_reduce<false>(s);
    if (threadIdx.x == 0) {
        int32_t t = targets[row];
        int c = mg_cuda_vocab_row(t, v0, Vl);
        sums[row] = s;
        sums[N + row] = t < 0 ? NAN : c >= 0 ? h16_to_f(x[c]) : 0.0f;
    }
}

template <typename h16, int VEC>
static __global__ void __launch_bounds__(CE_THREADS)
    ce_finish_kernel(h16 *logits, float *losses, const float *rowmax, const float *sums,
                     const int32_t *targets, const float *dloss, int v0, int N, int Vl) {
    // logits (N, Vl) in place; losses, rowmax, targets, dloss (N); sums (2N)
    size_t row = blockIdx.x;
    h16 *x = logits + row * (size_t)Vl;
    float m = rowmax[row], s = sums[row], inv = 1.0f / s, dl = dloss[row], ms = m * CE_LOG2E;
    int c = mg_cuda_vocab_row(targets[row], v0, Vl);
    if (threadIdx.x == 0) losses[row] = logf(s) + m - sums[N + row];
    for (int u = threadIdx.x; u < Vl / VEC; u += CE_THREADS) {
        float f[VEC];
        mg_loadv<VEC>(x + (size_t)u * VEC, f);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float p = exp2f(fmaf(f[k], CE_LOG2E, -ms)) * inv;
            f[k] = (u * VEC + k == c ? p - 1.0f : p) * dl;
        }
        mg_storev<VEC>(x + (size_t)u * VEC, f);
    }
}

static mg_status ce_check(const char *op, int N, int v0, int Vl) {
    if (N > 0 && (v0 < 0 || Vl <= 0))
        return MG_FAIL(MG_ERR_INTERNAL, "%s: vocabulary range [%d, %d + %d)", op, v0, v0, Vl);
    return MG_OK;
}

/* 16-byte loads when every row starts 16-byte aligned */
static bool ce_vec(const void *logits, int Vl) {
    return Vl % 8 == 0 && mg_cuda_aligned16(logits);
}

MG_CUDA_DTYPES(mg_status, cross_entropy_max,
               (mg_backend * be, float *rowmax, const void *logits, int N, int Vl),
               (be, rowmax, logits, N, Vl)) {
    // rowmax (N); logits (N, Vl)
    MG_CHECK(ce_check("cross_entropy_max", N, 0, Vl));
    if (N <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    if (ce_vec(logits, Vl))
        ce_max_kernel<h16, 8><<<N, CE_THREADS, 0, st>>>(rowmax, (const h16 *)logits, Vl);
    else
        ce_max_kernel<h16, 1><<<N, CE_THREADS, 0, st>>>(rowmax, (const h16 *)logits, Vl);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, cross_entropy_sums,
               (mg_backend * be, float *sums, const void *logits, const float *rowmax,
                const int32_t *targets, int v0, int N, int Vl),
               (be, sums, logits, rowmax, targets, v0, N, Vl)) {
    // sums (2N); logits (N, Vl); rowmax, targets (N)
    MG_CHECK(ce_check("cross_entropy_sums", N, v0, Vl));
    if (N <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    const h16 *x = (const h16 *)logits;
    if (ce_vec(logits, Vl))
        ce_sums_kernel<h16, 8><<<N, CE_THREADS, 0, st>>>(sums, x, rowmax, targets, v0, N, Vl);
    else
        ce_sums_kernel<h16, 1><<<N, CE_THREADS, 0, st>>>(sums, x, rowmax, targets, v0, N, Vl);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, cross_entropy_finish,
               (mg_backend * be, void *logits, float *losses, const float *rowmax,
                const float *sums, const int32_t *targets, const float *dloss, int v0, int N,
                int Vl),
               (be, logits, losses, rowmax, sums, targets, dloss, v0, N, Vl)) {
    // logits (N, Vl) in: logits, out: dlogits; losses, rowmax, targets, dloss (N); sums (2N)
    if (!dloss) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_finish: dloss is NULL");
    MG_CHECK(ce_check("cross_entropy_finish", N, v0, Vl));
    if (N <= 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream(be);
    h16 *x = (h16 *)logits;
    if (ce_vec(logits, Vl))
        ce_finish_kernel<h16, 8>
            <<<N, CE_THREADS, 0, st>>>(x, losses, rowmax, sums, targets, dloss, v0, N, Vl);
    else
        ce_finish_kernel<h16, 1>
            <<<N, CE_THREADS, 0, st>>>(x, losses, rowmax, sums, targets, dloss, v0, N, Vl);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
