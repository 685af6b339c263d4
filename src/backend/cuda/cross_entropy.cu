/* Fused softmax cross-entropy over the whole vocabulary, in place (CPU reference:
 * cpu/cpu_cross_entropy.c): losses[i] = logsumexp(logits[i,:]) - logits[i, t_i], then the bf16
 * logits row becomes dlogits = (softmax - onehot(t_i)) * dloss[i].
 *
 * One block per row. Pass 1 streams the row once with an online softmax: each thread keeps a
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

template <int VEC>
static __global__ void __launch_bounds__(CE_THREADS)
    cross_entropy_kernel(bf16 *logits, float *losses, const int32_t *targets, const float *dloss,
                         int V) {
    // logits (N, V) bf16 in place; losses, targets, dloss (N); one block per row
    __shared__ float sh_m[CE_THREADS / 32], sh_s[CE_THREADS / 32];
    size_t row = blockIdx.x;
    bf16 *x = logits + row * (size_t)V;
    int tgt = targets[row];
    bool tgt_ok = tgt >= 0 && tgt < V;
    float xt = tgt_ok ? __bfloat162float(x[tgt]) : 0.0f; /* read before pass 2 overwrites it */

    /* pass 1: online max and sum */
    float m = -INFINITY, s = 0.0f;
    int nv = V / VEC;
    for (int u = threadIdx.x; u < nv; u += CE_THREADS) {
        float f[VEC];
        if (VEC == 8)
            mg_load8(x + (size_t)u * 8, f);
        else
            f[0] = __bfloat162float(x[u]);
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
            f[0] = __bfloat162float(x[u]);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float p = exp2f(fmaf(f[k], CE_LOG2E, -ms)) * inv;
            f[k] = (u * VEC + k == tgt ? p - 1.0f : p) * dl;
        }
        if (VEC == 8)
            mg_store8(x + (size_t)u * 8, f);
        else
            x[u] = __float2bfloat16_rn(f[0]);
    }
}

extern "C" mg_status mg_cuda_cross_entropy_fused(mg_backend *be, void *logits, float *losses,
                                                 const int32_t *targets, const float *dloss, int N,
                                                 int V) {
    // logits (N, V) in: logits, out: dlogits; losses, targets, dloss (N)
    if (!dloss) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_fused: dloss is NULL");
    if (N <= 0) return MG_OK;
    if (V <= 0) return MG_FAIL(MG_ERR_INTERNAL, "cross_entropy_fused: vocabulary size %d", V);
    cudaStream_t st = mg_cuda_stream(be);
    if (V % 8 == 0 && mg_cuda_aligned16(logits))
        cross_entropy_kernel<8>
            <<<N, CE_THREADS, 0, st>>>((bf16 *)logits, losses, targets, dloss, V);
    else
        cross_entropy_kernel<1>
            <<<N, CE_THREADS, 0, st>>>((bf16 *)logits, losses, targets, dloss, V);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
