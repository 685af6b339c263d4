/* Hidden dropout (Megatron's bias-dropout-add) and its backward with core/dropout.h's
 * counter-based masks (stream or positional): the same factors as the CPU's (cpu/cpu_dropout.c),
 * bit for bit. h16 in and out, fp32 arithmetic in the CPU's order, one rounding. Also the dropout
 * streams' step advance (rng_advance).
 *
 * Rows of a multiple of 8 in 16-byte aligned buffers (every real model) take the vector kernels: a
 * thread loads, masks and stores 8 consecutive elements of a row, two whole Philox blocks, with
 * 32-bit index arithmetic. Otherwise a thread takes 4 consecutive elements and draws a Philox
 * block when the element index enters a new block of 4. Each element is read and written by one
 * thread, so out may alias x and dx dout. */
#include "backend/cuda/cuda_common.cuh"

#include "core/dropout.h"
#include "core/normal.h"

/* The factors (0 or scale) of elements [j0, j0 + 4) of op row i (those < H). */
static __device__ __forceinline__ void factors4(const mg_dropout &d, int i, int j0, int S, int H,
                                                float f[4]) {
    const mg_dropout_row row = mg_dropout_hidden_row(&d, i, S, H);
    uint32_t r[4] = {0, 0, 0, 0}, cur = 0;
    bool have = false;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[k] = 0.0f;
        if (j0 + k >= H) continue;
        const uint64_t e = row.e0 + (uint64_t)(j0 + k);
        const uint32_t blk = (uint32_t)(e >> 2), l = (uint32_t)e & 3u;
        if (!have || blk != cur) {
            mg_dropout_row_block(&row, blk, r);
            cur = blk;
            have = true;
        }
        const uint32_t v = l == 0 ? r[0] : l == 1 ? r[1] : l == 2 ? r[2] : r[3];
        f[k] = v >= d.threshold ? d.scale : 0.0f;
    }
}

/* Calls op(at, j, f) for every element (i, j) of an (N, H) tensor (at = i H + j) with its dropout
 * factor f: four columns per thread, one factors4 draw for them. */
template <class Op>
static __device__ __forceinline__ void for_each_factor(int N, int H, int S, const mg_dropout &d,
                                                       Op op) {
    const size_t per_row = ((size_t)H + 3) / 4, items = (size_t)N * per_row;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        const int i = (int)(u / per_row), j0 = (int)(u % per_row) * 4;
        float f[4];
        factors4(d, i, j0, S, H, f);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int j = j0 + k;
            if (j >= H) break;
            op((size_t)i * H + j, j, f[k]);
        }
    }
}

/* The factors of elements [j0, j0 + 8) of op row i, with H a multiple of 8 (so the row starts a
 * Philox block, mg_dropout_*_row's e0 is a multiple of H, and the 8 elements are 2 whole blocks).
 */
static __device__ __forceinline__ void factors8(const mg_dropout &d, int i, int j0, int S, int H,
                                                float f[8]) {
    const mg_dropout_row row = mg_dropout_hidden_row(&d, i, S, H);
    const uint32_t blk = (uint32_t)((row.e0 + (uint64_t)j0) >> 2);
    uint32_t r[8];
    mg_dropout_row_block(&row, blk, r);
    mg_dropout_row_block(&row, blk + 1u, r + 4);
#pragma unroll
    for (int k = 0; k < 8; k++) f[k] = r[k] >= d.threshold ? d.scale : 0.0f;
}

/* The vector path: 8 elements of a row per thread (16-byte loads and stores), 32-bit index
 * arithmetic (items < 2^31). op(at, j, f[8]) for the 8 elements at (i, j .. j + 7). */
template <class Op>
static __device__ __forceinline__ void for_each_factor8(int N, int H, int S, const mg_dropout &d,
                                                        Op op) {
    const uint32_t per_row = (uint32_t)H / 8u, items = (uint32_t)N * per_row;
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t u = blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        const uint32_t i = u / per_row, j0 = (u - i * per_row) * 8u;
        float f[8];
        factors8(d, (int)i, (int)j0, S, H, f);
        op((size_t)i * H + j0, (int)j0, f);
    }
}

template <typename h16>
static __global__ void dropout_add8_kernel(h16 *out, const h16 *x, const h16 *bias,
                                           const h16 *residual, int N, int H, int S, mg_dropout d) {
    // out, x, residual (N, H); bias (H) or NULL; 16-byte aligned, H % 8 == 0
    for_each_factor8(N, H, S, d, [=](size_t at, int j, const float *f) {
        float a[8], b[8], r[8];
        mg_loadv<8>(x + at, a);
        if (bias) {
            mg_loadv<8>(bias + j, b);
#pragma unroll
            for (int k = 0; k < 8; k++) a[k] += b[k];
        }
        mg_loadv<8>(residual + at, r);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = r[k] + f[k] * a[k];
        mg_storev<8>(out + at, a);
    });
}

template <typename h16>
static __global__ void dropout_backward8_kernel(h16 *dx, const h16 *dout, int N, int H, int S,
                                                mg_dropout d) {
    for_each_factor8(N, H, S, d, [=](size_t at, int, const float *f) {
        float a[8];
        mg_loadv<8>(dout + at, a);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] *= f[k];
        mg_storev<8>(dx + at, a);
    });
}

/* The vector kernels apply: H a multiple of 8, every buffer 16-byte aligned, items < 2^31. */
static bool vec8_ok(int N, int H, const void *const *ptrs, int n) {
    if (H % 8 != 0 || (uint64_t)N * (uint64_t)(H / 8) >= (1ull << 31)) return false;
    for (int k = 0; k < n; k++)
        if (ptrs[k] && !mg_cuda_aligned16(ptrs[k])) return false;
    return true;
}

/* out = residual + f * (x + bias) */
template <typename h16>
static __global__ void dropout_add_kernel(h16 *out, const h16 *x, const h16 *bias,
                                          const h16 *residual, int N, int H, int S, mg_dropout d) {
    // out, x, residual (N, H); bias (H) or NULL
    for_each_factor(N, H, S, d, [=](size_t at, int j, float f) {
        float v = h16_to_f(x[at]) + (bias ? h16_to_f(bias[j]) : 0.0f);
        out[at] = f_to_h16<h16>(h16_to_f(residual[at]) + f * v);
    });
}

/* dx = f * dout */
template <typename h16>
static __global__ void dropout_backward_kernel(h16 *dx, const h16 *dout, int N, int H, int S,
                                               mg_dropout d) {
    // dx, dout (N, H)
    for_each_factor(N, H, S, d, [=](size_t at, int, float f) {
        dx[at] = f_to_h16<h16>(f * h16_to_f(dout[at]));
    });
}

MG_CUDA_DTYPES(mg_status, dropout_add,
               (mg_backend * be, void *out, const void *x, const void *bias, const void *residual,
                int N, int H, int S, const mg_dropout *drop),
               (be, out, x, bias, residual, N, H, S, drop)) {
    // out, x (N, H), out may be x; bias (H) or NULL; residual (N, H)
    if (N <= 0 || H <= 0) return MG_OK;
    if (S <= 0 || !drop) return MG_FAIL(MG_ERR_INTERNAL, "dropout_add: S %d, drop %p", S, drop);
    const void *ptrs[] = {out, x, bias, residual};
    if (vec8_ok(N, H, ptrs, 4)) {
        dropout_add8_kernel<h16><<<mg_cuda_blocks((size_t)N * (H / 8), MG_CUDA_THREADS),
                                   MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(
            (h16 *)out, (const h16 *)x, (const h16 *)bias, (const h16 *)residual, N, H, S, *drop);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    const size_t items = (size_t)N * (((size_t)H + 3) / 4);
    dropout_add_kernel<h16>
        <<<mg_cuda_blocks(items, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(
            (h16 *)out, (const h16 *)x, (const h16 *)bias, (const h16 *)residual, N, H, S, *drop);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, dropout_backward,
               (mg_backend * be, void *dx, const void *dout, int N, int H, int S,
                const mg_dropout *drop),
               (be, dx, dout, N, H, S, drop)) {
    // dx, dout (N, H), dx may be dout
    if (N <= 0 || H <= 0) return MG_OK;
    if (S <= 0 || !drop)
        return MG_FAIL(MG_ERR_INTERNAL, "dropout_backward: S %d, drop %p", S, drop);
    const void *ptrs[] = {dx, dout};
    if (vec8_ok(N, H, ptrs, 2)) {
        dropout_backward8_kernel<h16>
            <<<mg_cuda_blocks((size_t)N * (H / 8), MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
               mg_cuda_stream(be)>>>((h16 *)dx, (const h16 *)dout, N, H, S, *drop);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    const size_t items = (size_t)N * (((size_t)H + 3) / 4);
    dropout_backward_kernel<h16>
        <<<mg_cuda_blocks(items, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(
            (h16 *)dx, (const h16 *)dout, N, H, S, *drop);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

static __global__ void rng_advance_kernel(uint64_t *state, int n, uint64_t by) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) state[2 * k + 1] += by;
}

extern "C" mg_status mg_cuda_rng_advance(mg_backend *be, uint64_t *state, int n, uint64_t by) {
    if (n <= 0) return MG_OK;
    rng_advance_kernel<<<(n + 31) / 32, 32, 0, mg_cuda_stream(be)>>>(state, n, by);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* One Philox block (four normals) per thread; the stream's state read on the device. */
static __global__ void normal_kernel(float *out, size_t n, const uint64_t *state, uint64_t use) {
    const size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * b >= n) return;
    float z[4];
    mg_normal_block(state[0], state[1] + use, b, z);
    if (4 * b + 4 <= n && ((uintptr_t)(out + 4 * b) & 15u) == 0) {
        reinterpret_cast<float4 *>(out + 4 * b)[0] = make_float4(z[0], z[1], z[2], z[3]);
        return;
    }
    for (size_t k = 0; k < 4 && 4 * b + k < n; k++) out[4 * b + k] = z[k];
}

extern "C" mg_status mg_cuda_normal_f32(mg_backend *be, float *out, size_t n, const uint64_t *state,
                                        uint64_t use) {
    if (n == 0) return MG_OK;
    const size_t blocks = ((n + 3) / 4 + MG_CUDA_THREADS - 1) / MG_CUDA_THREADS;
    normal_kernel<<<(unsigned)blocks, MG_CUDA_THREADS, 0, mg_cuda_stream(be)>>>(out, n, state, use);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
