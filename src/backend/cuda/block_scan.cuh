/* A block-wide exclusive scan of int32 values, in chunks of blockDim.x (a multiple of 32, at most
 * 1024): the group offsets of the experts' kernels (grouped_gemm_cutlass*.cu, fp8.cu's grouped
 * cast), the grouped rows' offsets built on it, and the search of a row's group among such
 * offsets. Device code only. */
#ifndef MG_BLOCK_SCAN_CUH
#define MG_BLOCK_SCAN_CUH

#include "core/fp8.h"

#include <stdint.h>

/* One chunk of a block-wide exclusive scan (blockDim.x threads, one value each; warp_sums has
 * blockDim.x / 32 entries): returns the sum of the values of the threads before this one,
 * *total the chunk's sum. Every thread of the block calls it. */
static __device__ __forceinline__ int32_t block_exclusive_scan(int32_t v, int32_t *warp_sums,
                                                               int32_t *total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int32_t incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    __syncthreads(); /* the previous chunk's reads of warp_sums are done */
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int32_t s = lane < nwarps ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t t = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += t;
        }
        if (lane < nwarps) warp_sums[lane] = s; /* inclusive over warps */
    }
    __syncthreads();
    *total = warp_sums[nwarps - 1];
    return (warp ? warp_sums[warp - 1] : 0) + incl - v;
}

/* One chunk of the scans of grouped rows (fp8.cu's grouped cast, grouped_gemm_cutlass_fp8.cu):
 * this thread's group of n rows starts at row *r0 and at column *c0 of core/fp8.h's grouped
 * transpose; *rows and *cols, the totals of the chunks before, advance by this chunk's. Every
 * thread of the block calls it. */
static __device__ __forceinline__ void block_group_scan(int32_t n, int32_t *warp_sums,
                                                        int32_t *rows, int32_t *cols, int32_t *r0,
                                                        int32_t *c0) {
    int32_t n_rows, n_cols;
    *r0 = *rows + block_exclusive_scan(n, warp_sums, &n_rows);
    *c0 = *cols + block_exclusive_scan((int32_t)mg_fp8_group_cols(n), warp_sums, &n_cols);
    *rows += n_rows;
    *cols += n_cols;
}

/* The group holding row (or tile) r: the last g < G with off[g] <= r, given off[G] > r (the
 * offsets such a scan writes). Empty groups share their offset with the next one, so the search
 * lands on the non-empty group. */
static __device__ __forceinline__ int find_group(const int32_t *off, int G, int32_t r) {
    int lo = 0, hi = G - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (off[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#endif
