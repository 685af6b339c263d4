/* fp8 on the CUDA backend (backend_ops.h; CPU reference: cpu/cpu_fp8.c): the casts of core/fp8.h
 * and the recipe of core/fp8_scaling.h, on the device. A cast is elementwise in fp32 with the
 * CPU's operations in the CPU's order, so the bytes are the CPU's; the amax is a maximum
 * (order-free), taken over the fp32 bit patterns of the magnitudes, whose integer order is their
 * order (a NaN's pattern is above infinity's, so NaN wins as on the CPU); scale_inv is the
 * correctly rounded 1 / scale, as the CPU's division.
 * The conversion is Hopper's instruction (cvt ... satfinite, two values at a time where a chunk
 * holds no NaN), 8 elements per thread with 16-byte loads. The transposed cast (the operands of the
 * backward's products, which cuBLASLt's fp8 kernels take only with the reduced dimension
 * contiguous) goes through a tile in shared memory: a block reads a (CAST_TILE, CAST_TILE) tile of
 * rows, writes its bytes row-major and, after the tile is complete, the tile's columns as rows of
 * the transpose, both coalesced. The linears' products on fp8 operands are in linear.cu. */
#include "backend/cuda/activation_math.cuh"
#include "backend/cuda/block_scan.cuh"
#include "backend/cuda/colsum.cuh"
#include "backend/cuda/cuda_common.cuh"

#include "core/fp8.h"
#include "core/fp8_block.h"
#include "core/fp8_scaling.h"

#include <cuda_fp8.h>

#define CAST_VEC     8  /* elements a thread converts at a time (16 bytes of bf16/fp16 in) */
#define CAST_TILE    64 /* the transposing tile: (CAST_TILE, CAST_TILE) elements per block */
#define CAST_THREADS 256
#define CAST_UNROLL  2 /* chunks a thread of the flat cast has in flight */

/* One element's byte: Hopper's conversion instruction (round to nearest even, saturating to the
 * largest finite value), which is core/fp8.h's mg_fp8_from_f32(v, f, true) for every number; a
 * NaN takes core/fp8.h's pattern (the instruction's has no sign). */
static __device__ __forceinline__ uint8_t to_fp8(float v, int format) {
    if (isnan(v)) return mg_fp8_from_f32(v, (mg_fp8_format)format, true);
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE,
                                          format == MG_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3);
}

/* The block's amax into *amax: a warp maximum, one shared atomic per warp, one global atomic per
 * block. Every thread of the block calls it. */
static __device__ void amax_publish(unsigned int *block_max, unsigned int m, float *amax) {
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0) atomicMax(block_max, m);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax((unsigned int *)amax, *block_max);
}

/* Converts v[0..k) (k <= CAST_VEC) scaled by s into q; the magnitudes' maximum into *m. The
 * loops of these helpers run to CAST_VEC with the count as a predicate: constant indices keep
 * the arrays in registers (a loop to a run-time count puts them in local memory). */
static __device__ __forceinline__ void convert(uint8_t *q, const float *v, int k, float s,
                                               int format, unsigned int *m) {
#pragma unroll
    for (int e = 0; e < CAST_VEC; e++) {
        if (e >= k) continue;
        *m = max(*m, __float_as_uint(fabsf(v[e])));
        q[e] = to_fp8(v[e] * s, format);
    }
}

/* Two values' bytes from one conversion instruction (the first in the low byte), format as
 * to_fp8's: correct for every value but NaN. */
static __device__ __forceinline__ uint32_t to_fp8x2(float a, float b, int format) {
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                    format == MG_FP8_E5M2 ? __NV_E5M2 : __NV_E4M3);
}

/* convert(), a whole chunk (k = CAST_VEC) two values per conversion instruction; s_ok: the
 * scale is a positive finite number, so a product is NaN only where its value is. A partial
 * chunk, a chunk with a NaN (its magnitudes' maximum pattern above infinity's) or one under
 * another scale takes convert's per-element path, which gives NaN core/fp8.h's pattern. */
static __device__ __forceinline__ void convert8(uint8_t *q, const float *v, int k, float s,
                                                bool s_ok, int format, unsigned int *m) {
    if (k < CAST_VEC) {
        convert(q, v, k, s, format, m);
        return;
    }
    unsigned int mc = 0u;
#pragma unroll
    for (int e = 0; e < CAST_VEC; e++) mc = max(mc, __float_as_uint(fabsf(v[e])));
    if (mc > 0x7f800000u || !s_ok) {
        convert(q, v, CAST_VEC, s, format, m);
        return;
    }
    *m = max(*m, mc);
    uint32_t *w = (uint32_t *)q;
#pragma unroll
    for (int h = 0; h < 2; h++)
        w[h] = to_fp8x2(v[4 * h] * s, v[4 * h + 1] * s, format) |
               to_fp8x2(v[4 * h + 2] * s, v[4 * h + 3] * s, format) << 16;
}

/* Whether convert8 may take scale s whole: positive and finite (NaN is not). */
static __device__ __forceinline__ bool scale_ok(float s) {
    return s > 0.0f && s <= 3.402823466e38f;
}

/* k (<= CAST_VEC) elements from p, with one 16-byte load when vec (a whole, aligned chunk). */
template <typename h16>
static __device__ __forceinline__ void load_chunk(float *v, const h16 *p, int k, bool vec) {
    if (vec) {
        uint4 raw = *(const uint4 *)p;
        const h16 *h = (const h16 *)&raw;
        for (int e = 0; e < CAST_VEC; e++) v[e] = h16_to_f(h[e]);
    } else {
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++)
            if (e < k) v[e] = h16_to_f(p[e]);
    }
}

static __device__ __forceinline__ void store_chunk(uint8_t *p, const uint8_t *q, int k, bool vec) {
    if (vec)
        *(uint2 *)p = *(const uint2 *)q;
    else
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++)
            if (e < k) p[e] = q[e];
}

template <typename h16>
static __global__ void fp8_cast_flat_kernel(uint8_t *out, const h16 *in, size_t n,
                                            const float *scale, float *scale_inv, float *amax,
                                            int format, bool aligned) {
    __shared__ unsigned int block_max;
    if (threadIdx.x == 0) block_max = 0u;
    __syncthreads();
    const float s = scale[0];
    const bool s_ok = scale_ok(s);
    if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0) scale_inv[0] = __fdiv_rn(1.0f, s);
    unsigned int m = 0u;
    /* CAST_UNROLL chunks per thread and pass, their loads issued before any conversion */
    size_t chunks = (n + CAST_VEC - 1) / CAST_VEC, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t c0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c0 < chunks;
         c0 += CAST_UNROLL * stride) {
        float v[CAST_UNROLL][CAST_VEC];
        int k[CAST_UNROLL];
#pragma unroll
        for (int u = 0; u < CAST_UNROLL; u++) {
            size_t i = (c0 + u * stride) * CAST_VEC;
            k[u] = i >= n ? 0 : n - i < CAST_VEC ? (int)(n - i) : CAST_VEC;
            if (k[u]) load_chunk<h16>(v[u], in + i, k[u], aligned && k[u] == CAST_VEC);
        }
#pragma unroll
        for (int u = 0; u < CAST_UNROLL; u++) {
            if (!k[u]) continue;
            size_t i = (c0 + u * stride) * CAST_VEC;
            __align__(8) uint8_t q[CAST_VEC];
            convert8(q, v[u], k[u], s, s_ok, format, &m);
            if (out) store_chunk(out + i, q, k[u], aligned && k[u] == CAST_VEC);
        }
    }
    if (amax) amax_publish(&block_max, m, amax);
}

/* A transposing tile's first half: the tile's rows [r0, r0 + CAST_TILE) of in (rows, cols; the
 * part inside), from column c0, read in chunks of CAST_VEC, cast, written row-major into out
 * (NULL: not written) and into the shared tile; the magnitudes' maximum into *m. Every thread of
 * the block calls it. */
template <typename h16>
static __device__ __forceinline__ void
cast_tile_rows(uint8_t (*tile)[CAST_TILE + CAST_VEC], uint8_t *out, const h16 *in, int r0, int c0,
               int rows, int cols, float s, int format, bool aligned, unsigned int *m) {
    const int per_row = CAST_TILE / CAST_VEC;
    const bool s_ok = scale_ok(s);
    for (int item = threadIdx.x; item < CAST_TILE * per_row; item += CAST_THREADS) {
        int r = item / per_row, c = (item % per_row) * CAST_VEC, i = r0 + r, j = c0 + c;
        if (i >= rows || j >= cols) continue;
        int k = cols - j < CAST_VEC ? cols - j : CAST_VEC;
        bool vec = aligned && k == CAST_VEC;
        float v[CAST_VEC];
        __align__(8) uint8_t q[CAST_VEC];
        size_t at = (size_t)i * cols + j;
        load_chunk<h16>(v, in + at, k, vec);
        convert8(q, v, k, s, s_ok, format, m);
        if (out) store_chunk(out + at, q, k, vec);
        store_chunk(&tile[r][c], q, k, k == CAST_VEC);
    }
}

/* A (CAST_TILE, CAST_TILE) tile: its rows read in chunks of CAST_VEC, cast, written row-major
 * and into shared memory; then the tile's columns written as rows of the transpose, CAST_VEC
 * bytes per thread, CAST_TILE / CAST_VEC threads per row. */
template <typename h16>
static __global__ void fp8_cast_transpose_kernel(uint8_t *out, uint8_t *out_t, const h16 *in,
                                                 int rows, int cols, const float *scale,
                                                 float *scale_inv, float *amax, int format,
                                                 bool aligned) {
    __shared__ __align__(16) uint8_t tile[CAST_TILE][CAST_TILE + CAST_VEC]; /* rows 8-aligned */
    __shared__ unsigned int block_max;
    const int tid = threadIdx.x, per_row = CAST_TILE / CAST_VEC;
    if (tid == 0) block_max = 0u;
    const int r0 = blockIdx.y * CAST_TILE, c0 = blockIdx.x * CAST_TILE;
    const float s = scale[0];
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && tid == 0)
        scale_inv[0] = __fdiv_rn(1.0f, s);
    unsigned int m = 0u;
    cast_tile_rows<h16>(tile, out, in, r0, c0, rows, cols, s, format, aligned, &m);
    __syncthreads();
    for (int item = tid; item < CAST_TILE * per_row; item += CAST_THREADS) {
        int c = item / per_row, r = (item % per_row) * CAST_VEC, i = r0 + r, j = c0 + c;
        if (i >= rows || j >= cols) continue;
        int k = rows - i < CAST_VEC ? rows - i : CAST_VEC;
        __align__(8) uint8_t q[CAST_VEC];
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++)
            if (e < k) q[e] = tile[r + e][c];
        store_chunk(out_t + (size_t)j * rows + i, q, k, aligned && k == CAST_VEC && rows % 8 == 0);
    }
    if (amax) amax_publish(&block_max, m, amax);
}

/* ---- the transposing cast of aligned shapes ----
 * A block casts a (FT_ROWS, FT_COLS) tile. Each thread issues its FT_CHUNKS 16-byte loads (one
 * column chunk, rows FT_RSTEP apart; with a GELU also pre's) before converting any, so a block
 * keeps 16 KiB of reads in flight; it writes the bytes row-major and into a shared tile of
 * 4-byte words whose rows are FT_LDW = 33 words apart. The transpose is written in 4 x 4 byte
 * blocks: a thread reads four words (4 rows x 4 columns: with the stride of 33 a warp's 8 row
 * groups x 4 column groups fall in 32 banks), turns them with byte permutes, and stores four
 * 4-byte words, 8 lanes making 32 contiguous bytes of a transposed row. GELU: in is a GELU's
 * output gradient, and the values cast are gelu_backward's of in and pre. With partial the
 * tile's column sums (fp32, its rows in a fixed order: a thread's four, then lanes l and l + 16
 * by a shuffle, then the warps' in order) go to partial (one row per row tile) for
 * mg_colsum_final.
 * Shapes: cols % 8 == 0 and rows % 4 == 0, in (and pre) 16-byte, out 8-byte and out_t 4-byte
 * aligned (every fp8 GEMM operand is: its dimensions are multiples of 16); other shapes take the
 * tile kernel above.
 * Measured on an H200 (bench/fp8_cast_bench.c, bench/NOTES.md, 2026-11-30): 3.4 TB/s, 90% of a
 * device copy of the same input at 4096 x 6400, once the conversions went two to an instruction
 * (convert8); 128-row tiles, tiles streamed through shared memory with asynchronous copies, more
 * blocks per multiprocessor (registers spilled) and the column sums' last stage folded into the
 * last block of each column strip were all slower. The GELU form (2.5 TB/s) is held by its
 * arithmetic, gelu' per element. */
#define FT_ROWS   64
#define FT_COLS   128
#define FT_LDW    (FT_COLS / 4 + 1)
#define FT_CPR    (FT_COLS / CAST_VEC)              /* chunks per tile row: 16 */
#define FT_RSTEP  (CAST_THREADS / FT_CPR)           /* rows between a thread's chunks: 16 */
#define FT_CHUNKS (FT_ROWS * FT_CPR / CAST_THREADS) /* chunks per thread: 4 */
#define FT_BLOCKS (FT_ROWS / 4 * FT_COLS / 4 / CAST_THREADS) /* 4 x 4 blocks per thread: 2 */

/* gelu_backward's value of one element (activation_math.cuh), rounded to the compute dtype as
 * that op stores it: the cast of a GELU's gradient reads what gelu_backward would have written. */
template <typename h16> static __device__ __forceinline__ float gelu_grad(float x, float d) {
    return h16_to_f(f_to_h16<h16>(mg_gelu_bwd(x, d)));
}

/* Rows t0..t3 of a 4 x 4 byte block from its four rows' words a0..a3 (byte k: column k). */
static __device__ __forceinline__ void transpose4x4(uint32_t a0, uint32_t a1, uint32_t a2,
                                                    uint32_t a3, uint32_t t[4]) {
    uint32_t lo01 = __byte_perm(a0, a1, 0x5140), lo23 = __byte_perm(a2, a3, 0x5140);
    uint32_t hi01 = __byte_perm(a0, a1, 0x7362), hi23 = __byte_perm(a2, a3, 0x7362);
    t[0] = __byte_perm(lo01, lo23, 0x5410), t[1] = __byte_perm(lo01, lo23, 0x7632);
    t[2] = __byte_perm(hi01, hi23, 0x5410), t[3] = __byte_perm(hi01, hi23, 0x7632);
}

template <typename h16, bool GELU>
static __global__ void __launch_bounds__(CAST_THREADS)
    fp8_cast_tile_kernel(uint8_t *out, uint8_t *out_t, const h16 *in, const h16 *pre, int rows,
                         int cols, const float *scale, float *scale_inv, float *amax, int format,
                         float *partial /* (gridDim.y, cols) or NULL */) {
    __shared__ uint32_t tile[FT_ROWS * FT_LDW];
    __shared__ float sums[CAST_THREADS / 32][FT_COLS];
    __shared__ unsigned int block_max;
    const int tid = threadIdx.x;
    if (tid == 0) block_max = 0u;
    const int r0 = blockIdx.y * FT_ROWS, c0 = blockIdx.x * FT_COLS;
    const float s = scale[0];
    const bool s_ok = scale_ok(s);
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && tid == 0)
        scale_inv[0] = __fdiv_rn(1.0f, s);
    const int cc = (tid % FT_CPR) * CAST_VEC, rb = tid / FT_CPR, j = c0 + cc;
    uint4 raw[FT_CHUNKS], rawp[FT_CHUNKS];
#pragma unroll
    for (int k = 0; k < FT_CHUNKS; k++) {
        const int i = r0 + rb + FT_RSTEP * k;
        const bool inside = j < cols && i < rows;
        const size_t at = (size_t)i * cols + j;
        raw[k] = inside ? *(const uint4 *)(in + at) : make_uint4(0u, 0u, 0u, 0u);
        if (GELU) rawp[k] = inside ? *(const uint4 *)(pre + at) : make_uint4(0u, 0u, 0u, 0u);
    }
    unsigned int m = 0u;
    float csum[CAST_VEC];
#pragma unroll
    for (int e = 0; e < CAST_VEC; e++) csum[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < FT_CHUNKS; k++) {
        const int r = rb + FT_RSTEP * k, i = r0 + r;
        const h16 *h = (const h16 *)&raw[k], *hp = (const h16 *)&rawp[k];
        float v[CAST_VEC];
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++) {
            v[e] = h16_to_f(h[e]);
            if (GELU) v[e] = gelu_grad<h16>(h16_to_f(hp[e]), v[e]);
            csum[e] += v[e];
        }
        __align__(8) uint8_t q[CAST_VEC];
        convert8(q, v, CAST_VEC, s, s_ok, format, &m); /* zeros past the edges: no maximum */
        if (out && j < cols && i < rows) *(uint2 *)(out + (size_t)i * cols + j) = *(uint2 *)q;
        uint32_t *w = &tile[r * FT_LDW + cc / 4];
        w[0] = ((const uint32_t *)q)[0], w[1] = ((const uint32_t *)q)[1];
    }
    if (partial) {
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++) /* lanes l and l + 16: the same columns */
            csum[e] += __shfl_xor_sync(0xffffffffu, csum[e], 16);
        if ((tid & 31) < 16) {
#pragma unroll
            for (int e = 0; e < CAST_VEC; e++) sums[tid >> 5][cc + e] = csum[e];
        }
    }
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int k = 0; k < FT_BLOCKS; k++) {
        /* 2 runs of 8 row groups x 8 runs of 4 column groups */
        const int combo = warp + (CAST_THREADS / 32) * k;
        const int rg = (combo & 1) * 8 + (lane & 7), cg = (combo >> 1) * 4 + (lane >> 3);
        const int i = r0 + 4 * rg, jj = c0 + 4 * cg;
        if (i >= rows || jj >= cols) continue;
        const uint32_t *w = &tile[4 * rg * FT_LDW + cg];
        uint32_t tr[4];
        transpose4x4(w[0], w[FT_LDW], w[2 * FT_LDW], w[3 * FT_LDW], tr);
        uint32_t *o = (uint32_t *)(out_t + (size_t)jj * rows + i);
        const size_t ld = (size_t)rows / 4;
#pragma unroll
        for (int q = 0; q < 4; q++) o[q * ld] = tr[q];
    }
    if (partial && tid < FT_COLS && c0 + tid < cols) {
        float a = sums[0][tid];
#pragma unroll
        for (int r = 1; r < CAST_THREADS / 32; r++) a += sums[r][tid];
        partial[(size_t)blockIdx.y * cols + c0 + tid] = a;
    }
    if (amax) amax_publish(&block_max, m, amax);
}

MG_CUDA_DTYPES(mg_status, fp8_cast,
               (mg_backend * be, uint8_t *out, uint8_t *out_t, const void *in, int rows, int cols,
                const float *scale, float *scale_inv, float *amax, int format, const void *gelu_pre,
                float *dbias),
               (be, out, out_t, in, rows, cols, scale, scale_inv, amax, format, gelu_pre, dbias)) {
    if (rows < 0 || cols < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_cast: negative shape %d x %d", rows, cols);
    size_t n = (size_t)rows * cols;
    cudaStream_t stream = mg_cuda_stream(be);
    if (n == 0 && !scale_inv) return MG_OK;
    const h16 *x = (const h16 *)in, *pre = (const h16 *)gelu_pre;
    char *ws = NULL;
    /* the aligned shapes of the fp8 products: the fast tile, with the GELU's and the bias's
     * gradients in its pass */
    if (out_t && n > 0 && cols % CAST_VEC == 0 && rows % 4 == 0 && mg_cuda_aligned16(in) &&
        (!pre || mg_cuda_aligned16(pre)) && (uintptr_t)out % 8 == 0 && (uintptr_t)out_t % 4 == 0) {
        const int tiles_y = (rows + FT_ROWS - 1) / FT_ROWS;
        dim3 grid((unsigned)((cols + FT_COLS - 1) / FT_COLS), (unsigned)tiles_y);
        float *partial = NULL;
        if (dbias)
            MG_CHECK(mg_cuda_scratch(be, (size_t)tiles_y * cols * sizeof(float), (void **)&partial,
                                     "fp8 cast (bias gradient)"));
        (pre ? fp8_cast_tile_kernel<h16, true>
             : fp8_cast_tile_kernel<h16, false>)<<<grid, CAST_THREADS, 0, stream>>>(
            out, out_t, x, pre, rows, cols, scale, scale_inv, amax, format, partial);
        MG_CUDA_CHECK_LAUNCH();
        if (dbias) mg_colsum_final(stream, dbias, NULL, partial, NULL, tiles_y, cols);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    /* other shapes: the GELU's gradient first, into the workspace, then the casts of it */
    size_t g_bytes = gelu_pre && n > 0 ? (n * sizeof(h16) + 255) / 256 * 256 : 0;
    if (g_bytes) {
        MG_CHECK(mg_cuda_scratch(be, g_bytes, (void **)&ws, "fp8 cast (GELU gradient)"));
        MG_CHECK(MG_CUDA_OF(h16, gelu_backward)(be, ws, gelu_pre, in, n));
        x = (const h16 *)ws;
    }
    /* whole chunks load and store as vectors where the rows and the buffers allow it */
    bool aligned = (uintptr_t)x % 16 == 0 && (uintptr_t)out % 8 == 0 && (uintptr_t)out_t % 8 == 0 &&
                   (!out_t || cols % CAST_VEC == 0);
    if (!out_t || n == 0) { /* (n = 0 still writes scale_inv, the contract) */
        size_t chunks = (n + CAST_VEC - 1) / CAST_VEC;
        fp8_cast_flat_kernel<h16>
            <<<mg_cuda_blocks(chunks ? (chunks + CAST_UNROLL - 1) / CAST_UNROLL : 1, CAST_THREADS),
               CAST_THREADS, 0, stream>>>(out, x, n, scale, scale_inv, amax, format, aligned);
    } else {
        dim3 grid((unsigned)((cols + CAST_TILE - 1) / CAST_TILE),
                  (unsigned)((rows + CAST_TILE - 1) / CAST_TILE));
        fp8_cast_transpose_kernel<h16><<<grid, CAST_THREADS, 0, stream>>>(
            out, out_t, x, rows, cols, scale, scale_inv, amax, format, aligned);
    }
    MG_CUDA_CHECK_LAUNCH();
    if (dbias && n > 0) { /* the column sums apart, as the linears' bias gradient takes them */
        int chunk = mg_colsum_rows(rows, MG_DBIAS_MIN_ROWS);
        size_t part = (size_t)mg_colsum_chunks(rows, chunk) * cols * sizeof(float);
        MG_CHECK(mg_cuda_scratch(be, g_bytes + part, (void **)&ws, "fp8 cast (bias gradient)"));
        mg_colsum<h16>(stream, dbias, (float *)(ws + g_bytes), x, rows, cols, chunk);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}

/* ---- bytes already cast (fp8_transpose: --fp8-param-gather's weights) ---- */

/* A (CAST_TILE, CAST_TILE) tile of in's bytes through shared memory, as the transposing cast's:
 * copied row-major into out (NULL: not) and its columns written as rows of out_t. */
static __global__ void fp8_transpose_kernel(uint8_t *out, uint8_t *out_t, const uint8_t *in,
                                            int rows, int cols, const float *scale,
                                            float *scale_inv) {
    __shared__ uint8_t tile[CAST_TILE][CAST_TILE + 1];
    const int r0 = blockIdx.y * CAST_TILE, c0 = blockIdx.x * CAST_TILE;
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        scale_inv[0] = __fdiv_rn(1.0f, scale[0]);
    for (int item = threadIdx.x; item < CAST_TILE * CAST_TILE; item += CAST_THREADS) {
        int r = item / CAST_TILE, c = item % CAST_TILE, i = r0 + r, j = c0 + c;
        if (i >= rows || j >= cols) continue;
        size_t at = (size_t)i * cols + j;
        uint8_t q = in[at];
        if (out) out[at] = q;
        tile[r][c] = q;
    }
    __syncthreads();
    for (int item = threadIdx.x; item < CAST_TILE * CAST_TILE; item += CAST_THREADS) {
        int c = item / CAST_TILE, r = item % CAST_TILE, i = r0 + r, j = c0 + c;
        if (i < rows && j < cols) out_t[(size_t)j * rows + i] = tile[r][c];
    }
}

MG_CUDA_DTYPES(mg_status, fp8_transpose,
               (mg_backend * be, uint8_t *out, uint8_t *out_t, const uint8_t *in, int rows,
                int cols, const float *scale, float *scale_inv),
               (be, out, out_t, in, rows, cols, scale, scale_inv)) {
    if (rows < 0 || cols < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_transpose: negative shape %d x %d", rows, cols);
    cudaStream_t stream = mg_cuda_stream(be);
    /* one launch: the tiles (none when out_t is NULL: a copy alone is a memcpy), and thread 0 of
     * block 0 writes scale_inv */
    const bool tiles = out_t && rows > 0 && cols > 0;
    if (out && out != in && !tiles && (size_t)rows * cols > 0)
        MG_CUDA_CHECK(
            cudaMemcpyAsync(out, in, (size_t)rows * cols, cudaMemcpyDeviceToDevice, stream));
    if (!tiles && !scale_inv) return MG_OK;
    dim3 grid(tiles ? (unsigned)((cols + CAST_TILE - 1) / CAST_TILE) : 1u,
              tiles ? (unsigned)((rows + CAST_TILE - 1) / CAST_TILE) : 1u);
    fp8_transpose_kernel<<<grid, CAST_THREADS, 0, stream>>>(
        out == in || !tiles ? NULL : out, tiles ? out_t : NULL, in, tiles ? rows : 0,
        tiles ? cols : 0, scale, scale_inv);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- blockwise (fp8_cast_blocks; core/fp8_block.h) ----
 * A CUDA block takes one 128 x 128 region of the input: it loads the region into shared memory
 * (16-byte loads where the rows allow, zeros past the edges, which no amax sees), then casts
 * it in every form asked for, each scaling block's amax the maximum of its magnitudes' fp32 bit
 * patterns (NaN above infinity, as in the casts above) and its scale core/fp8_block.h's rule:
 *   - 1 x 128 along rows: a warp per row, 4 elements a lane, one 4-byte store a lane;
 *   - 1 x 128 down columns (the transpose's rows): a warp per column, lane l reading rows l,
 *     l + 32, l + 64, l + 96 (the tile's row stride of 65 words puts them in 32 banks), each
 *     store 32 consecutive bytes of the transpose;
 *   - a 128 x 128 tile: one scale, the region's amax, then both of the above with it.
 * So the input is read once for the forward's and the weight gradient's forms together. */

#define BT         MG_FP8_BLOCK /* the region's side */
#define BT_LD      (BT + 2)     /* the shared tile's row stride in elements (65 words) */
#define BT_THREADS 256

/* The region's elements (r0, c0) .. (r0 + h, c0 + w) of in (rows, cols) into tile; returns the
 * thread's maximum of the magnitudes' bit patterns where tiles (a tile's one scale). */
template <typename h16>
static __device__ unsigned int load_region(h16 *tile, const h16 *in, int cols, int r0, int c0,
                                           int h, int w, bool tiles) {
    unsigned int m = 0u;
    const bool vec = (cols & 7) == 0 && w == BT && ((uintptr_t)in & 15) == 0;
    for (int v = threadIdx.x; v < BT * (BT / 8); v += BT_THREADS) {
        const int i = v / (BT / 8), j = (v % (BT / 8)) * 8;
        union {
            uint4 u;
            uint32_t w2[4];
            h16 e[8];
        } x;
        if (i < h && vec) {
            x.u = *(const uint4 *)(in + (size_t)(r0 + i) * cols + c0 + j);
        } else {
            for (int k = 0; k < 8; k++)
                x.e[k] = i < h && j + k < w ? in[(size_t)(r0 + i) * cols + c0 + j + k]
                                            : f_to_h16<h16>(0.0f);
        }
        if (tiles)
            for (int k = 0; k < 8; k++) m = max(m, __float_as_uint(fabsf(h16_to_f(x.e[k]))));
        uint32_t *t = (uint32_t *)(tile + i * BT_LD + j); /* 4-byte aligned: BT_LD and j even */
        for (int k = 0; k < 4; k++) t[k] = x.w2[k];
    }
    return m;
}

/* The scale of a run whose lanes hold the magnitudes' maxima m (a warp), or the tile's. */
static __device__ float run_scale(unsigned int m, int format, bool pow2) {
    const float amax = __uint_as_float(__reduce_max_sync(0xffffffffu, m));
    return mg_fp8_block_scale(amax, mg_fp8_max((mg_fp8_format)format), pow2);
}

/* blockIdx (x, y): the region of column block x, row block y. out / sinv: the row-major bytes
 * and their scales (1 x 128 along rows, or the tile grid); out_t / sinv_t: the transpose's (1 x
 * 128 down columns, or the transpose's tile grid); either pair NULL. */
template <typename h16>
static __global__ void __launch_bounds__(BT_THREADS)
    fp8_block_cast_kernel(uint8_t *out, float *sinv, uint8_t *out_t, float *sinv_t, const h16 *in,
                          int rows, int cols, bool tiles, int format, bool pow2) {
    __shared__ __align__(16) h16 tile[BT * BT_LD];
    __shared__ unsigned int tile_max;
    const int bc = blockIdx.x, br = blockIdx.y, r0 = br * BT, c0 = bc * BT;
    const int h = min(BT, rows - r0), w = min(BT, cols - c0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = BT_THREADS / 32;
    if (threadIdx.x == 0) tile_max = 0u;
    __syncthreads();
    unsigned int m = load_region<h16>(tile, in, cols, r0, c0, h, w, tiles);
    float ts = 1.0f;
    if (tiles) {
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0) atomicMax(&tile_max, m);
    }
    __syncthreads();
    if (tiles) {
        ts = mg_fp8_block_scale(__uint_as_float(tile_max), mg_fp8_max((mg_fp8_format)format), pow2);
        if (threadIdx.x == 0) {
            if (out) sinv[mg_fp8_tile_at(cols, br, bc)] = __fdiv_rn(1.0f, ts);
            if (out_t) sinv_t[mg_fp8_tile_at(rows, bc, br)] = __fdiv_rn(1.0f, ts);
        }
    }
    if (out)
        for (int i = warp; i < h; i += warps) { /* row r0 + i: lane's columns 4 lane .. + 3 */
            float v[4];
            unsigned int lm = 0u;
            for (int k = 0; k < 4; k++) {
                v[k] = h16_to_f(tile[i * BT_LD + 4 * lane + k]);
                lm = max(lm, __float_as_uint(fabsf(v[k])));
            }
            const float s = tiles ? ts : run_scale(lm, format, pow2);
            uint8_t q[4];
            for (int k = 0; k < 4; k++) q[k] = to_fp8(v[k] * s, format);
            uint8_t *o = out + (size_t)(r0 + i) * cols + c0 + 4 * lane;
            if ((cols & 3) == 0 && ((uintptr_t)out & 3) == 0 && 4 * lane + 3 < w)
                *(uint32_t *)o = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                                 (uint32_t)q[3] << 24;
            else
                for (int k = 0; k < 4; k++)
                    if (4 * lane + k < w) o[k] = q[k];
            if (!tiles && lane == 0) sinv[mg_fp8_block_at(rows, r0 + i, bc)] = __fdiv_rn(1.0f, s);
        }
    if (out_t)
        for (int j = warp; j < w; j += warps) { /* column c0 + j: lane's rows lane + 32 k */
            float v[4];
            unsigned int lm = 0u;
            for (int k = 0; k < 4; k++) {
                v[k] = h16_to_f(tile[(lane + 32 * k) * BT_LD + j]);
                lm = max(lm, __float_as_uint(fabsf(v[k])));
            }
            const float s = tiles ? ts : run_scale(lm, format, pow2);
            uint8_t *o = out_t + (size_t)(c0 + j) * rows + r0;
            for (int k = 0; k < 4; k++)
                if (lane + 32 * k < h) o[lane + 32 * k] = to_fp8(v[k] * s, format);
            if (!tiles && lane == 0) sinv_t[mg_fp8_block_at(cols, c0 + j, br)] = __fdiv_rn(1.0f, s);
        }
}

MG_CUDA_DTYPES(mg_status, fp8_cast_blocks,
               (mg_backend * be, uint8_t *out, float *scale_inv, uint8_t *out_t, float *scale_inv_t,
                const void *in, int rows, int cols, bool tiles, int format, bool pow2),
               (be, out, scale_inv, out_t, scale_inv_t, in, rows, cols, tiles, format, pow2)) {
    if (rows < 0 || cols < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_cast_blocks: negative shape %d x %d", rows, cols);
    if (rows == 0 || cols == 0 || (!out && !out_t)) return MG_OK;
    if (tiles && !out)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_cast_blocks: tiles without their bytes");
    const int nr = mg_fp8_block_count(rows), nc = mg_fp8_block_count(cols);
    if (nr > 65535)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "fp8_cast_blocks: %d rows are too many (at most %d)",
                       rows, 65535 * BT);
    fp8_block_cast_kernel<h16>
        <<<dim3((unsigned)nc, (unsigned)nr), BT_THREADS, 0, mg_cuda_stream(be)>>>(
            out, scale_inv, out_t, scale_inv_t, (const h16 *)in, rows, cols, tiles, format, pow2);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ---- the experts' rows (fp8_cast_grouped; core/fp8.h's grouped transpose) ---- */

#define GROUP_SCAN_THREADS 1024

/* One block: row_off (G+1) each group's first row, then the rows in all; col_off (G) each group's
 * first column of the grouped transpose. */
static __global__ void __launch_bounds__(GROUP_SCAN_THREADS)
    group_offsets_kernel(int32_t *row_off, int32_t *col_off, const int32_t *counts, int G) {
    __shared__ int32_t warp_sums[GROUP_SCAN_THREADS / 32];
    int32_t rows = 0, cols = 0;
    for (int base = 0; base < G; base += blockDim.x) {
        int g = base + threadIdx.x;
        int32_t r0, c0;
        block_group_scan(g < G ? max(counts[g], 0) : 0, warp_sums, &rows, &cols, &r0, &c0);
        if (g < G) row_off[g] = r0, col_off[g] = c0;
    }
    if (threadIdx.x == 0) row_off[G] = rows;
}

/* The transposing tile of fp8_cast_transpose_kernel over the rows of the groups: row i's bytes
 * go to column col_of[i - r0] of the grouped transpose (-1: a row past the groups, not read). */
template <typename h16>
static __global__ void
fp8_cast_grouped_kernel(uint8_t *out, uint8_t *out_t, const h16 *in, const int32_t *row_off,
                        const int32_t *col_off, int G, int cols, int64_t ld, const float *scale,
                        float *scale_inv, float *amax, int format, bool aligned) {
    __shared__ __align__(16) uint8_t tile[CAST_TILE][CAST_TILE + CAST_VEC];
    __shared__ int64_t col_of[CAST_TILE];
    __shared__ unsigned int block_max;
    const int tid = threadIdx.x, per_row = CAST_TILE / CAST_VEC;
    const int r0 = blockIdx.y * CAST_TILE, c0 = blockIdx.x * CAST_TILE, rows = row_off[G];
    const float s = scale[0];
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && tid == 0)
        scale_inv[0] = __fdiv_rn(1.0f, s);
    if (r0 >= rows) return; /* the whole block: past the groups */
    if (tid == 0) block_max = 0u;
    if (tid < CAST_TILE) { /* the row's column, through its group */
        const int i = r0 + tid, g = i < rows ? find_group(row_off, G, i) : 0;
        col_of[tid] = i < rows ? (int64_t)col_off[g] + (i - row_off[g]) : -1;
    }
    unsigned int m = 0u;
    cast_tile_rows<h16>(tile, out, in, r0, c0, rows, cols, s, format, aligned, &m);
    __syncthreads();
    for (int item = tid; out_t && item < CAST_TILE * per_row; item += CAST_THREADS) {
        int c = item / per_row, r = (item % per_row) * CAST_VEC, i = r0 + r, j = c0 + c;
        if (i >= rows || j >= cols) continue;
        int k = rows - i < CAST_VEC ? rows - i : CAST_VEC;
        /* one 8-byte store where the chunk's rows are consecutive columns, 8-aligned */
        const int64_t d0 = col_of[r];
        bool vec = k == CAST_VEC && d0 % CAST_VEC == 0 && ld % CAST_VEC == 0 &&
                   col_of[r + CAST_VEC - 1] == d0 + CAST_VEC - 1;
        __align__(8) uint8_t q[CAST_VEC];
#pragma unroll
        for (int e = 0; e < CAST_VEC; e++)
            if (e < k) q[e] = tile[r + e][c];
        uint8_t *row_t = out_t + (size_t)j * ld;
        if (vec)
            *(uint2 *)(row_t + d0) = *(const uint2 *)q;
        else
#pragma unroll
            for (int e = 0; e < CAST_VEC; e++)
                if (e < k) row_t[col_of[r + e]] = q[e];
    }
    if (amax) amax_publish(&block_max, m, amax);
}

MG_CUDA_DTYPES(mg_status, fp8_cast_grouped,
               (mg_backend * be, uint8_t *out, uint8_t *out_t, const void *in,
                const int32_t *counts, int G, int R, int cols, const float *scale, float *scale_inv,
                float *amax, int format),
               (be, out, out_t, in, counts, G, R, cols, scale, scale_inv, amax, format)) {
    if (R < 0 || cols < 0 || G < 1)
        return MG_FAIL(MG_ERR_INTERNAL, "fp8_cast_grouped: bad shape %d x %d, %d groups", R, cols,
                       G);
    cudaStream_t stream = mg_cuda_stream(be);
    size_t half = ((size_t)(G + 1) * sizeof(int32_t) + 255) & ~(size_t)255;
    void *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, 2 * half, &ws, "fp8_cast_grouped"));
    int32_t *row_off = (int32_t *)ws, *col_off = (int32_t *)((char *)ws + half);
    group_offsets_kernel<<<1, GROUP_SCAN_THREADS, 0, stream>>>(row_off, col_off, counts, G);
    MG_CUDA_CHECK_LAUNCH();
    bool aligned = (uintptr_t)in % 16 == 0 && (uintptr_t)out % 8 == 0 && cols % CAST_VEC == 0;
    dim3 grid((unsigned)(cols > 0 ? (cols + CAST_TILE - 1) / CAST_TILE : 1),
              (unsigned)(R > 0 ? (R + CAST_TILE - 1) / CAST_TILE : 1));
    fp8_cast_grouped_kernel<h16><<<grid, CAST_THREADS, 0, stream>>>(
        out, out_t, (const h16 *)in, row_off, col_off, G, cols, mg_fp8_group_ld(R, G), scale,
        scale_inv, amax, format, aligned);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* One thread per tensor: its history, amax and scale, as the CPU updates them. */
static __global__ void fp8_update_kernel(float *state, int n, int len, int margin, int algo,
                                         float max_fwd, float max_bwd) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float *amax = state, *scale = state + n, *h = state + 2 * (size_t)n + (size_t)t * len;
    h[0] = amax[t];
    amax[t] = 0.0f;
    scale[t] = mg_fp8_delayed_update(h, len, scale[t], t % 3 == 2 ? max_bwd : max_fwd, margin,
                                     (mg_fp8_amax_algo)algo);
}

MG_CUDA_DTYPES(mg_status, fp8_update,
               (mg_backend * be, float *state, int n, int len, int margin, int algo, float max_fwd,
                float max_bwd),
               (be, state, n, len, margin, algo, max_fwd, max_bwd)) {
    if (n <= 0) return MG_OK;
    fp8_update_kernel<<<(n + 127) / 128, 128, 0, mg_cuda_stream(be)>>>(state, n, len, margin, algo,
                                                                       max_fwd, max_bwd);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
