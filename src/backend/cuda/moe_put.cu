/* Expert parallelism's exchange as stores into the peers' memory (contract: backend_ops.h,
 * moe_put_rows; the memory: core/peer_window.h). One kernel moves only the rows there are: each
 * block walks every peer's window of this rank's packed rows, one warp per row, and stores it
 * where the all-to-all of whole slabs would have left it in that peer's buffer. No slab travels
 * with its unused tail, no collective kernel runs, and nothing is read back to the host, so the
 * kernel is a plain node of a captured CUDA graph.
 *
 * The barrier. Block b of every rank meets block b of every other rank twice: on arrival (a rank
 * stores into a peer's buffer only after the peer's block b has started, so the peer's earlier
 * work on its buffer, its reads of the previous exchange, is done), and after its stores (the
 * kernel ends only when every peer's block b has stored its rows). A block arrives by raising
 * its row of flags in every peer's buffer to an epoch, after a system-scope fence, and waits
 * until every peer has raised its own row in this rank's buffer to that epoch. The epochs count
 * on in this rank's own memory (two per kernel), the same on every rank because every rank runs
 * the same exchanges in the same order. All blocks of the kernel must be resident at once on
 * every rank: the grid is MG_PEER_BARRIERS blocks. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/peer_flags.cuh"
#include "core/slab_rounds.h"

#define PUT_THREADS 512
#define PUT_WARPS   (PUT_THREADS / 32)

/* Block b raises its flag in every peer's buffer to `epoch` and waits until every peer has raised
 * its own in this rank's buffer as far. Threads 0..P-1 each take one peer. */
static __device__ void meet(const mg_peer_bases &pb, size_t bytes, int P, int rank,
                            uint32_t epoch) {
    const int b = blockIdx.x, q = threadIdx.x;
    __threadfence_system(); /* this block's stores (and the earlier work) before the flags */
    __syncthreads();
    if (q < P) {
        *mg_peer_flag(pb.base[q], bytes, rank, b) = epoch;
        volatile uint32_t *mine = mg_peer_flag(pb.base[rank], bytes, q, b);
        mg_peer_wait(mine, epoch, pb.abort);
        __threadfence_system(); /* the peer's stores before what follows */
    }
    __syncthreads();
}

static __global__ void __launch_bounds__(PUT_THREADS)
    put_rows_kernel(mg_peer_bases pb, size_t bytes, int P, int rank, const char *src,
                    const int32_t *counts, int El, int slab, int first, size_t row_bytes,
                    bool vec) {
    __shared__ uint32_t epoch;
    __shared__ int64_t at[MG_PEER_MAX], n[MG_PEER_MAX];
    const int b = blockIdx.x;
    if (threadIdx.x == 0) epoch = *mg_peer_flag(pb.base[rank], bytes, MG_PEER_MAX, b);
    if (threadIdx.x < P)
        n[threadIdx.x] = mg_slab_window(counts, threadIdx.x, El, slab, first, &at[threadIdx.x]);
    __syncthreads();
    meet(pb, bytes, P, rank, epoch + 1);
    const int lane = threadIdx.x & 31;
    const int64_t warp = (int64_t)b * PUT_WARPS + threadIdx.x / 32;
    const int64_t warps = (int64_t)gridDim.x * PUT_WARPS;
    for (int i = 0; i < P; i++) {
        const int p = (rank + 1 + i) % P; /* the others first, each rank starting elsewhere */
        char *dst = pb.base[p] + (size_t)rank * slab * row_bytes;
        const char *from = src + (size_t)at[p] * row_bytes;
        for (int64_t r = warp; r < n[p]; r += warps) {
            const char *s = from + (size_t)r * row_bytes;
            char *d = dst + (size_t)r * row_bytes;
            if (vec)
                for (size_t u = (size_t)lane * 16; u < row_bytes; u += 32 * 16)
                    *reinterpret_cast<uint4 *>(d + u) = *reinterpret_cast<const uint4 *>(s + u);
            else
                for (size_t u = lane; u < row_bytes; u += 32) d[u] = s[u];
        }
    }
    meet(pb, bytes, P, rank, epoch + 2);
    if (threadIdx.x == 0) *mg_peer_flag(pb.base[rank], bytes, MG_PEER_MAX, b) = epoch + 2;
}

MG_CUDA_DTYPES(mg_status, moe_put_rows,
               (mg_backend * be, const mg_peer_window *pw, const void *src, const int32_t *counts,
                int El, int slab, int first, int H),
               (be, pw, src, counts, El, slab, first, H)) {
    mg_peer_bases pb;
    if (!mg_peer_bases_of(pw, &pb)) return MG_FAIL(MG_ERR_INTERNAL, "moe_put_rows: no peer window");
    if (slab <= 0 || H <= 0 || El < 0) return MG_OK;
    const size_t row_bytes = (size_t)H * sizeof(h16);
    if ((size_t)pw->n * (size_t)slab * row_bytes > pw->bytes)
        return MG_FAIL(MG_ERR_INTERNAL, "moe_put_rows: %d slabs of %d rows exceed the window",
                       pw->n, slab);
    bool vec = row_bytes % 16 == 0 && mg_cuda_aligned16(src);
    for (int q = 0; q < MG_PEER_MAX; q++) vec = vec && mg_cuda_aligned16(pb.base[q]);
    put_rows_kernel<<<MG_PEER_BARRIERS, PUT_THREADS, 0, mg_cuda_stream(be)>>>(
        pb, pw->bytes, pw->n, pw->rank, (const char *)src, counts, El, slab, first, row_bytes, vec);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
