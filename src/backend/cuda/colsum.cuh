/* Deterministic column sums of an (N, C) matrix in two stages, no atomics: stage 1 writes one fp32
 * partial per (chunk of rows, column), stage 2 adds a column's partials in a fixed order and
 * accumulates (+=) into an fp32 vector. The chunking depends on N alone, so a given shape always
 * adds in the same order. Users: the linear layer's bias gradient (stage 1 below on dout) and the
 * norms' weight and bias gradients (their own stage 1, fused into the dx kernel, then stage 2).
 * Workspace: nchunks * C floats per summed matrix (mg_colsum_chunks). */
#ifndef MG_BACKEND_CUDA_COLSUM_CUH
#define MG_BACKEND_CUDA_COLSUM_CUH

#include "backend/cuda/cuda_common.cuh"

#define MG_COLSUM_WARPS       8   /* row-interleaved warps of a stage-1 block */
#define MG_COLSUM_FINAL_WARPS 16  /* chunk-interleaved warps of a stage-2 block */
#define MG_COLSUM_MAX_CHUNKS  512 /* stage 2 reads at most 32 partials per thread */
#define MG_DBIAS_MIN_ROWS     32  /* rows per chunk of a bias gradient's column sums, at least */

/* Rows per chunk for N rows, at least min_rows: at most MG_COLSUM_MAX_CHUNKS chunks. */
static inline int mg_colsum_rows(int N, int min_rows) {
    int r = (N + MG_COLSUM_MAX_CHUNKS - 1) / MG_COLSUM_MAX_CHUNKS;
    return r < min_rows ? min_rows : r;
}

static inline int mg_colsum_chunks(int N, int rows) {
    return (N + rows - 1) / rows;
}

/* Stage 1 for a plain h16 matrix: block = (256 columns when VEC = 8, 32 when 1) x
 * MG_COLSUM_WARPS warps over one chunk of `rows` rows; warp w sums rows w, w + 8, ... in order
 * (four rows' loads in flight per lane), then the warp sums are added in warp order. */
template <typename h16, int VEC>
static __global__ void mg_colsum_partial_kernel(float *part /* (nchunks, C) */,
                                                const h16 *a /* (N, C) */, int N, int C, int rows) {
    __shared__ float sums[MG_COLSUM_WARPS][32 * VEC];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunk = blockIdx.y;
    const int j0 = (blockIdx.x * 32 + lane) * VEC; /* VEC = 8 implies C % 8 == 0 */
    const int r0 = chunk * rows, r1 = min(N, r0 + rows);
    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (j0 < C) {
#pragma unroll 4
        for (int i = r0 + warp; i < r1; i += MG_COLSUM_WARPS) {
            float v[VEC];
            mg_loadv<VEC>(a + (size_t)i * C + j0, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sums[warp][lane * VEC + k] = acc[k];
    __syncthreads();
    for (int t = threadIdx.x; t < 32 * VEC; t += blockDim.x) {
        int j = blockIdx.x * 32 * VEC + t;
        if (j >= C) continue;
        float s = sums[0][t];
        for (int w = 1; w < MG_COLSUM_WARPS; w++) s += sums[w][t];
        part[(size_t)chunk * C + j] = s;
    }
}

/* Stage 2: block = 32 columns x MG_COLSUM_FINAL_WARPS warps; warp y adds chunks y, y + 16, ... in
 * order, then the warp sums are added in warp order: out0[j] += sum of part0[:, j], and the same
 * for out1/part1 when out1 is not NULL. */
static __global__ void mg_colsum_final_kernel(float *out0, float *out1, const float *part0,
                                              const float *part1, int nchunks, int C) {
    __shared__ float s0[MG_COLSUM_FINAL_WARPS][32], s1[MG_COLSUM_FINAL_WARPS][32];
    int lane = threadIdx.x, y = threadIdx.y, j = blockIdx.x * 32 + lane;
    float a = 0.0f, b = 0.0f;
    if (j < C) {
#pragma unroll 4
        for (int c = y; c < nchunks; c += MG_COLSUM_FINAL_WARPS) {
            a += part0[(size_t)c * C + j];
            if (out1) b += part1[(size_t)c * C + j];
        }
    }
    s0[y][lane] = a, s1[y][lane] = b;
    __syncthreads();
    if (y != 0 || j >= C) return;
    for (int q = 1; q < MG_COLSUM_FINAL_WARPS; q++) a += s0[q][lane], b += s1[q][lane];
    out0[j] += a;
    if (out1) out1[j] += b;
}

static inline void mg_colsum_final(cudaStream_t st, float *out0, float *out1, const float *part0,
                                   const float *part1, int nchunks, int C) {
    mg_colsum_final_kernel<<<(unsigned)((C + 31) / 32), dim3(32, MG_COLSUM_FINAL_WARPS), 0, st>>>(
        out0, out1, part0, part1, nchunks, C);
}

/* out[j] += sum over the N rows of a[:, j], through `part` (mg_colsum_chunks(N, rows) * C floats of
 * workspace). */
template <typename h16>
static inline void mg_colsum(cudaStream_t st, float *out, float *part, const h16 *a, int N, int C,
                             int rows) {
    int nchunks = mg_colsum_chunks(N, rows);
    if (C % 8 == 0 && mg_cuda_aligned16(a))
        mg_colsum_partial_kernel<h16, 8>
            <<<dim3((unsigned)((C + 255) / 256), (unsigned)nchunks), 32 * MG_COLSUM_WARPS, 0, st>>>(
                part, a, N, C, rows);
    else
        mg_colsum_partial_kernel<h16, 1>
            <<<dim3((unsigned)((C + 31) / 32), (unsigned)nchunks), 32 * MG_COLSUM_WARPS, 0, st>>>(
                part, a, N, C, rows);
    mg_colsum_final(st, out, NULL, part, NULL, nchunks, C);
}

#endif
