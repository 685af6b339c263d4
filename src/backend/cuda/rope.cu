/* Rotary position embedding, rotate-half form, in place on the query and key heads of the fused
 * qkv buffer (layout in backend_ops.h: per group r query heads, then k, then v; v is untouched), on
 * the first rd channels of each head (--rotary-percent; the rest are not touched), at each
 * token's position (pos[i], or i % S without pos).
 * CPU reference: cpu/cpu_rope.c. Backward applies the inverse rotation (sin negated).
 * One work item = VEC consecutive pairs (x[k], x[k + rd/2]) of one head of one token; fp32 math,
 * one h16 rounding per element. VEC = 8 (16-byte loads of both halves and 2 x float4 of each
 * table) when rd/2 % 8 == 0, hd % 8 == 0 and the pointers are aligned, else one pair per item. */
#include "backend/cuda/cuda_common.cuh"

template <typename h16, int VEC>
static __global__ void rope_kernel(h16 *qkv, const float *cos_tab, const float *sin_tab,
                                   const int32_t *pos, int N, int S, int r, int ng, int hd, int rd,
                                   float sign) {
    // qkv (N, ng*(r+2)*hd); cos_tab, sin_tab (S, rd/2); pos (N) or NULL
    int half = rd / 2, nk = half / VEC, heads = ng * (r + 1); /* rotated heads per token */
    size_t C = (size_t)ng * (r + 2) * hd;
    size_t items = (size_t)N * heads * nk;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        int k0 = (int)(u % nk) * VEC;
        size_t rest = u / nk;
        int head = (int)(rest % heads);
        size_t i = rest / heads;
        int g = head / (r + 1), h = head % (r + 1); /* h = r is the group's key head */
        h16 *x = qkv + i * C + ((size_t)g * (r + 2) + h) * hd + k0;
        size_t p = pos ? (size_t)pos[i] : i % (size_t)S;
        const float *c = cos_tab + p * half + k0;
        const float *s = sin_tab + p * half + k0;
        float x1[VEC], x2[VEC], fc[VEC], fs[VEC];
        if (VEC == 8) {
            mg_load8(x, x1);
            mg_load8(x + half, x2);
#pragma unroll
            for (int q = 0; q < VEC; q += 4) {
                float4 c4 = *reinterpret_cast<const float4 *>(c + q);
                float4 s4 = *reinterpret_cast<const float4 *>(s + q);
                fc[q] = c4.x, fc[q + 1] = c4.y, fc[q + 2] = c4.z, fc[q + 3] = c4.w;
                fs[q] = s4.x, fs[q + 1] = s4.y, fs[q + 2] = s4.z, fs[q + 3] = s4.w;
            }
        } else {
            x1[0] = h16_to_f(x[0]);
            x2[0] = h16_to_f(x[half]);
            fc[0] = c[0];
            fs[0] = s[0];
        }
        float y1[VEC], y2[VEC];
#pragma unroll
        for (int q = 0; q < VEC; q++) {
            float sn = sign * fs[q];
            y1[q] = x1[q] * fc[q] - x2[q] * sn;
            y2[q] = x2[q] * fc[q] + x1[q] * sn;
        }
        if (VEC == 8) {
            mg_store8(x, y1);
            mg_store8(x + half, y2);
        } else {
            x[0] = f_to_h16<h16>(y1[0]);
            x[half] = f_to_h16<h16>(y2[0]);
        }
    }
}

template <typename h16>
static mg_status rope_launch(mg_backend *be, void *qkv, const float *cos_tab, const float *sin_tab,
                             const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd,
                             float sign) {
    if (ng <= 0 || nq % ng != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "rope: %d query heads do not split into %d groups", nq, ng);
    if (rd <= 0 || rd > hd || rd % 2 != 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "rope: %d rotated channels of a head of %d (need even, 0 < rd <= hd)", rd,
                       hd);
    if (S <= 0) return MG_FAIL(MG_ERR_INTERNAL, "rope: sequence length %d", S);
    if (N <= 0) return MG_OK;
    int r = nq / ng, half = rd / 2;
    size_t pairs = (size_t)N * ng * (r + 1) * half;
    cudaStream_t st = mg_cuda_stream(be);
    if (half % 8 == 0 && hd % 8 == 0 && mg_cuda_aligned16(qkv) && mg_cuda_aligned16(cos_tab) &&
        mg_cuda_aligned16(sin_tab)) {
        rope_kernel<h16, 8><<<mg_cuda_blocks(pairs / 8, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
            (h16 *)qkv, cos_tab, sin_tab, pos, N, S, r, ng, hd, rd, sign);
    } else {
        rope_kernel<h16, 1><<<mg_cuda_blocks(pairs, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
            (h16 *)qkv, cos_tab, sin_tab, pos, N, S, r, ng, hd, rd, sign);
    }
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, rope_forward,
               (mg_backend * be, void *qkv, const float *cos_tab, const float *sin_tab,
                const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd),
               (be, qkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd)) {
    // qkv (N, ng*(r+2)*hd); cos_tab, sin_tab (S, rd/2); pos (N) or NULL
    return rope_launch<h16>(be, qkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd, 1.0f);
}

MG_CUDA_DTYPES(mg_status, rope_backward,
               (mg_backend * be, void *dqkv, const float *cos_tab, const float *sin_tab,
                const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd),
               (be, dqkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd)) {
    // dqkv (N, ng*(r+2)*hd); cos_tab, sin_tab (S, rd/2); pos (N) or NULL
    return rope_launch<h16>(be, dqkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd, -1.0f);
}
