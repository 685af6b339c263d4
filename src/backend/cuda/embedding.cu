/* Token (+ learned position) embedding (CPU reference: cpu/cpu_embedding.c). Vocab-parallel: this
 * rank holds the rows [v0, v0 + Vl) of the word embedding; other tokens get a zero word row in
 * forward (the position row is still added) and are skipped in backward.
 *
 * Forward: one work item per (token, 8 columns), fp32 add of the two h16 rows, one rounding.
 *
 * Backward, deterministic and atomic-free:
 *  1. stable radix sort of (local row, position) pairs with CUB (ships with CUDA), so the
 *     positions of each row become one contiguous, ascending segment. The keys are the local rows
 *     tokens[i] - v0, with every token outside the range (or negative) mapped to the sentinel Vl,
 *     written by the kernel that also writes the positions 0..N-1; the sort covers only the
 *     bits that can hold Vl (16 for GPT-2's 50304 rows instead of the 32 of raw ids: about half
 *     the radix passes). The sentinel segment sorts last and both dwte kernels skip it;
 *  2. dwte, one kernel with two kinds of blocks that own disjoint rows. Short segments (a token
 * used at most DW_LONG = 32 times, nearly all of them): one warp per segment does, per column
 * chunk, acc = dwte; acc += dout rows in position order -- the CPU's order, so bitwise equal to it.
 *     Long segments (frequent tokens: ~4% of a GPT-2 batch is "the" or ","): one block of DW_W
 *     warps per (segment, column tile); warp y sums entries y, y + DW_W, ... in order, and the
 *     warp sums are added to the row in warp order: deterministic, another association than the
 *     CPU's. Both kernels find segment bounds from the sorted keys alone (no extra scan).
 *  3. dwpe: one thread per (position, VEC columns) walks the rows i = s, s + S, ... in order,
 *     starting from the old dwpe value: bitwise the CPU order. With per-token positions (pos,
 *     --reset-position-ids) a position's rows are no longer one stride apart: dwpe is then
 *     steps 1-2 again with the positions as the keys (sentinel S), i.e. the dwte kernel's
 *     segments over rows of dwpe (the workspace reused after dwte, in stream order).
 * A segment's positions and its long/short kind do not depend on the range, so the dwte rows of
 * a range are bitwise those of the full vocabulary's backward.
 * Workspace: 4 * N int32 (keys in, sorted keys, positions in, positions out) + CUB's temporary
 * storage, each at a 256-byte offset; about 0.5 MB + CUB's (small) need at N = 32k. */
#include "backend/cuda/cuda_common.cuh"

#include <cub/device/device_radix_sort.cuh>

#define DW_LONG   32 /* a segment longer than this is summed by a whole block */
#define DW_W      8  /* warps per block of the dwte kernel */
#define DW_UNROLL 4  /* rows in flight per warp for long segments */

template <typename h16, int VEC>
static __global__ void embedding_forward_kernel(h16 *out, const int32_t *tokens, const h16 *wte,
                                                const h16 *wpe, const int32_t *pos, int N, int S,
                                                int H, int v0, int Vl) {
    // out (N, H); tokens (N); wte (Vl, H); wpe (P, H) or NULL; pos (N) or NULL: i % S
    size_t per_row = (size_t)H / VEC, items = (size_t)N * per_row;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t i = u / per_row, j = (u % per_row) * VEC;
        float e[VEC], p[VEC];
        int r = mg_cuda_vocab_row(tokens[i], v0, Vl);
        if (r >= 0)
            mg_loadv<VEC>(wte + (size_t)r * H + j, e);
        else
#pragma unroll
            for (int k = 0; k < VEC; k++) e[k] = 0.0f;
        if (wpe) {
            mg_loadv<VEC>(wpe + (pos ? (size_t)pos[i] : i % S) * H + j, p);
#pragma unroll
            for (int k = 0; k < VEC; k++) e[k] += p[k];
        }
        mg_storev<VEC>(out + i * H + j, e);
    }
}

MG_CUDA_DTYPES(mg_status, embedding_forward,
               (mg_backend * be, void *out, const int32_t *tokens, const void *wte, const void *wpe,
                const int32_t *pos, int N, int S, int H, int v0, int Vl),
               (be, out, tokens, wte, wpe, pos, N, S, H, v0, Vl)) {
    // out (N, H); tokens (N); wte (Vl, H); wpe (P, H) or NULL; pos (N) or NULL
    if (N <= 0 || H <= 0) return MG_OK;
    if (wpe && S <= 0) return MG_FAIL(MG_ERR_INTERNAL, "embedding_forward: sequence length %d", S);
    if (v0 < 0 || Vl <= 0)
        return MG_FAIL(MG_ERR_INTERNAL, "embedding_forward: vocabulary range [%d, %d + %d)", v0, v0,
                       Vl);
    cudaStream_t st = mg_cuda_stream(be);
    bool vec = H % 8 == 0 && mg_cuda_aligned16(out) && mg_cuda_aligned16(wte) &&
               (!wpe || mg_cuda_aligned16(wpe));
    if (vec)
        embedding_forward_kernel<h16, 8>
            <<<mg_cuda_blocks((size_t)N * (H / 8), MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (h16 *)out, tokens, (const h16 *)wte, (const h16 *)wpe, pos, N, S, H, v0, Vl);
    else
        embedding_forward_kernel<h16, 1>
            <<<mg_cuda_blocks((size_t)N * H, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
                (h16 *)out, tokens, (const h16 *)wte, (const h16 *)wpe, pos, N, S, H, v0, Vl);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* The sort's input: keys[i] = local row of tokens[i], or the sentinel Vl; pos[i] = i. */
static __global__ void sort_input_kernel(int32_t *keys, int32_t *pos, const int32_t *tokens, int N,
                                         int v0, int Vl) {
    // keys, pos, tokens (N)
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        int r = mg_cuda_vocab_row(tokens[i], v0, Vl);
        keys[i] = r >= 0 ? r : Vl;
        pos[i] = i;
    }
}

/* First index >= k whose key differs from `key` (or N); keys are sorted and keys[k] == key.
 * Coarse ballots 32 * 32 keys apart, then one fine ballot: a few dependent loads even for a token
 * used thousands of times. Warp-uniform. */
static __device__ int segment_end(const int32_t *keys, int k, int key, int N) {
    int lane = threadIdx.x & 31;
    for (;;) { /* find the 32-key window holding the end */
        int q = k + 32 * (lane + 1) - 1;
        unsigned diff = __ballot_sync(0xffffffffu, q >= N || keys[q] != key);
        if (diff) {
            k += 32 * (__ffs(diff) - 1);
            break;
        }
        k += 32 * 32;
    }
    int q = k + lane; /* the end is in [k, k + 32) */
    unsigned diff = __ballot_sync(0xffffffffu, q >= N || keys[q] != key);
    return k + __ffs(diff) - 1;
}

/* Short segment starting at sorted index k (at most DW_LONG entries), by one warp over all
 * columns: acc = dwte row; acc += dout rows in position order (the CPU's order, bitwise). */
template <typename h16, int VEC>
static __device__ void dwte_short(float *__restrict__ dwte, const h16 *__restrict__ dout,
                                  const int32_t *__restrict__ keys, const int32_t *__restrict__ pos,
                                  int k, int N, int H, int Vl) {
    int lane = threadIdx.x;
    if (k >= N) return;
    int key = keys[k];
    if (key >= Vl || (k > 0 && keys[k - 1] == key)) return;  /* sentinel, or not a start */
    if (k + DW_LONG < N && keys[k + DW_LONG] == key) return; /* long: not ours */
    int q = k + 1 + lane; /* lane 31 looks at k + DW_LONG, which differs or is past the end */
    unsigned diff = __ballot_sync(0xffffffffu, q >= N || keys[q] != key);
    int L = __ffs(diff); /* segment length, 1..DW_LONG */
    int my_pos = lane < L ? pos[k + lane] : 0;
    float *row = dwte + (size_t)key * H;
    /* the chunk loop is uniform across the warp (the shuffles need every lane); c >= H idles */
    for (int c0 = 0; c0 < H; c0 += 32 * VEC) {
        int c = c0 + lane * VEC;
        bool ok = c < H; /* VEC = 8 implies H % 8 == 0: a lane's chunk is all in or all out */
        float acc[VEC];
#pragma unroll
        for (int t = 0; t < VEC; t++) acc[t] = ok ? row[c + t] : 0.0f;
#pragma unroll 4
        for (int p = 0; p < L; p++) {
            size_t src = (size_t)__shfl_sync(0xffffffffu, my_pos, p);
            if (ok) {
                float f[VEC];
                mg_loadv<VEC>(dout + src * H + c, f);
#pragma unroll
                for (int t = 0; t < VEC; t++) acc[t] += f[t];
            }
        }
        if (ok)
#pragma unroll
            for (int t = 0; t < VEC; t++) row[c + t] = acc[t];
    }
}

/* Long segment (more than DW_LONG entries) containing sorted index k = kb * DW_LONG, column tile
 * `tile`, by the whole block (DW_W warps). Every long segment contains a multiple of DW_LONG; the
 * block at the first such index owns it. Warp y takes entries y, y + DW_W, ... in order, 32 at a
 * time (lane l holds the position of the l-th, shuffled out), DW_UNROLL rows in flight; then warp
 * 0 adds the warp sums to the dwte row in warp order. Deterministic; not the CPU's association. */
template <typename h16, int VEC>
static __device__ void dwte_long(float *__restrict__ dwte, const h16 *__restrict__ dout,
                                 const int32_t *__restrict__ keys, const int32_t *__restrict__ pos,
                                 int kb, int tile, int N, int H, int Vl) {
    __shared__ float part[DW_W][32 * VEC];
    int k = kb * DW_LONG, lane = threadIdx.x, y = threadIdx.y;
    int key = keys[k];
    if (key >= Vl || (k >= DW_LONG && keys[k - DW_LONG] == key)) return; /* block-uniform */
    /* start in (k - DW_LONG, k]: the nearest differing key below k */
    int qb = k - 1 - lane;
    unsigned back = __ballot_sync(0xffffffffu, qb >= 0 && keys[qb] != key);
    int s = back ? k - (__ffs(back) - 1) : 0; /* no differing key: k < DW_LONG, so s = 0 */
    if (s + DW_LONG >= N || keys[s + DW_LONG] != key) return; /* short: not ours */
    int e = segment_end(keys, k, key, N);
    int j = (tile * 32 + lane) * VEC; /* VEC = 8 implies H % 8 == 0 */
    bool ok = j < H;
    float acc[VEC];
#pragma unroll
    for (int t = 0; t < VEC; t++) acc[t] = 0.0f;
    for (int p0 = s + y; p0 < e; p0 += 32 * DW_W) { /* 32 entries of this warp */
        int my_p = p0 + lane * DW_W;
        int my_pos = my_p < e ? pos[my_p] : 0;
        int cnt = (e - p0 + DW_W - 1) / DW_W;
        if (cnt > 32) cnt = 32;
        for (int u0 = 0; u0 < cnt; u0 += DW_UNROLL) {
            float f[DW_UNROLL][VEC];
#pragma unroll
            for (int u = 0; u < DW_UNROLL; u++) { /* all loads first: rows in flight */
                size_t src = (size_t)__shfl_sync(0xffffffffu, my_pos, (u0 + u) & 31);
                if (ok && u0 + u < cnt) mg_loadv<VEC>(dout + src * H + j, f[u]);
            }
#pragma unroll
            for (int u = 0; u < DW_UNROLL; u++)
                if (ok && u0 + u < cnt)
#pragma unroll
                    for (int t = 0; t < VEC; t++) acc[t] += f[u][t];
        }
    }
#pragma unroll
    for (int t = 0; t < VEC; t++) part[y][lane * VEC + t] = acc[t];
    __syncthreads();
    if (y != 0 || !ok) return;
    float *row = dwte + (size_t)key * H + j;
    for (int t = 0; t < VEC; t++) {
        float o = row[t];
        for (int w = 0; w < DW_W; w++) o += part[w][lane * VEC + t];
        row[t] = o;
    }
}

/* One launch for both kinds so the long segments' tail overlaps the short ones: block (32, DW_W);
 * the first n_long blocks are (index multiple of DW_LONG, column tile) pairs for long segments,
 * the rest give each of their DW_W warps one sorted index for short segments. The two kinds own
 * disjoint dwte rows. */
template <typename h16, int VEC>
static __global__ void __launch_bounds__(32 * DW_W, 4)
    embedding_dwte_kernel(float *__restrict__ dwte, const h16 *__restrict__ dout,
                          const int32_t *__restrict__ keys, const int32_t *__restrict__ pos, int N,
                          int H, int Vl, int tiles, int n_long) {
    // dwte (Vl, H) accumulated; dout (N, H); keys, pos (N) sorted local rows (or the sentinel Vl)
    // and their positions
    int b = blockIdx.x;
    if (b < n_long)
        dwte_long<h16, VEC>(dwte, dout, keys, pos, b / tiles, b % tiles, N, H, Vl);
    else
        dwte_short<h16, VEC>(dwte, dout, keys, pos, (b - n_long) * DW_W + threadIdx.y, N, H, Vl);
}

/* dwpe[s, j] += dout[s, j] + dout[s + S, j] + ... in row order, one thread per (s, j). */
template <typename h16>
static __global__ void embedding_dwpe_kernel(float *dwpe, const h16 *dout, int N, int S, int H) {
    // dwpe (P, H) accumulated; dout (N, H)
    int rows = S < N ? S : N;
    size_t items = (size_t)rows * H, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < items; u += stride) {
        size_t s = u / H, j = u % H;
        float o = dwpe[s * H + j];
#pragma unroll 4
        for (size_t i = s; i < (size_t)N; i += S) o += h16_to_f(dout[i * H + j]);
        dwpe[s * H + j] = o;
    }
}

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* The bits that hold every key in [0, bound] (the sort looks at no more). */
static int key_bits(int bound) {
    int end_bit = 1;
    while (end_bit < 31 && (bound >> end_bit) != 0) end_bit++;
    return end_bit;
}

/* CUB's temporary storage for sorting N pairs on end_bit bits (a size query: no allocation, no
 * synchronisation). */
static mg_status sort_bytes(int N, int end_bit, cudaStream_t st, size_t *bytes) {
    *bytes = 0;
    MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, *bytes, (const int32_t *)NULL,
                                                  (int32_t *)NULL, (const int32_t *)NULL,
                                                  (int32_t *)NULL, N, 0, end_bit, st));
    return MG_OK;
}

/* dst[ids[i] - v0, :] += dout[i, :] for the ids in [v0, v0 + rows), deterministically: steps 1
 * and 2 of the top comment over the workspace ws (4 int arrays `ints` bytes apart, then CUB's
 * cub_bytes). dwte: ids the tokens; dwpe with per-token positions: ids the positions. */
template <typename h16>
static mg_status segment_sum(cudaStream_t st, char *ws, size_t ints, size_t cub_bytes, float *dst,
                             const h16 *dout, const int32_t *ids, int N, int H, int v0, int rows) {
    int32_t *keys_in = (int32_t *)ws;             // (N) local rows, or the sentinel `rows`
    int32_t *keys = (int32_t *)(ws + ints);       // (N) sorted
    int32_t *idx_in = (int32_t *)(ws + 2 * ints); // (N) 0..N-1
    int32_t *idx = (int32_t *)(ws + 3 * ints);    // (N) dout rows in sorted order
    sort_input_kernel<<<mg_cuda_blocks((size_t)N, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
        keys_in, idx_in, ids, N, v0, rows);
    MG_CUDA_CHECK_LAUNCH();
    MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + 4 * ints, cub_bytes, keys_in, keys, idx_in,
                                                  idx, N, 0, key_bits(rows), st));
    bool vec = H % 8 == 0 && mg_cuda_aligned16(dout) && mg_cuda_aligned16(dst);
    int vw = vec ? 8 : 1;
    int tiles = (H + 32 * vw - 1) / (32 * vw);
    int n_long = (N + DW_LONG - 1) / DW_LONG * tiles;
    unsigned grid = (unsigned)(n_long + (N + DW_W - 1) / DW_W);
    if (vec)
        embedding_dwte_kernel<h16, 8>
            <<<grid, dim3(32, DW_W), 0, st>>>(dst, dout, keys, idx, N, H, rows, tiles, n_long);
    else
        embedding_dwte_kernel<h16, 1>
            <<<grid, dim3(32, DW_W), 0, st>>>(dst, dout, keys, idx, N, H, rows, tiles, n_long);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, embedding_backward,
               (mg_backend * be, float *dwte, float *dwpe, const void *dout, const int32_t *tokens,
                const int32_t *pos, int N, int S, int H, int v0, int Vl),
               (be, dwte, dwpe, dout, tokens, pos, N, S, H, v0, Vl)) {
    // dwte (Vl, H), dwpe (P, H) or NULL, both accumulated; dout (N, H); tokens (N); pos (N) or
    // NULL: i % S
    if (N <= 0 || H <= 0) return MG_OK;
    if (dwpe && S <= 0)
        return MG_FAIL(MG_ERR_INTERNAL, "embedding_backward: sequence length %d", S);
    if (v0 < 0 || Vl <= 0 || Vl == INT32_MAX) /* the sentinel Vl must be an int32 key */
        return MG_FAIL(MG_ERR_INTERNAL, "embedding_backward: vocabulary range [%d, %d + %d)", v0,
                       v0, Vl);
    cudaStream_t st = mg_cuda_stream(be);
    const bool pos_sort = dwpe && pos; /* dwpe by segments of equal positions */
    size_t ints = align256((size_t)N * sizeof(int32_t)), cub_bytes = 0, cub_pos = 0;
    MG_CHECK(sort_bytes(N, key_bits(Vl), st, &cub_bytes));
    if (pos_sort) MG_CHECK(sort_bytes(N, key_bits(S), st, &cub_pos));
    if (cub_pos > cub_bytes) cub_bytes = cub_pos;
    char *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, 4 * ints + cub_bytes, (void **)&ws, "embedding_backward"));
    const h16 *d = (const h16 *)dout;
    MG_CHECK(segment_sum(st, ws, ints, cub_bytes, dwte, d, tokens, N, H, v0, Vl));
    if (pos_sort) /* the same workspace: the dwte kernel before it is done in stream order */
        return segment_sum(st, ws, ints, cub_bytes, dwpe, d, pos, N, H, 0, S);
    if (dwpe) {
        size_t items = (size_t)(S < N ? S : N) * H;
        embedding_dwpe_kernel<h16>
            <<<mg_cuda_blocks(items, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(dwpe, d, N, S, H);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}
