/* Reduce-scatters and gathers as copies into the peers' memory (contract: backend_ops.h,
 * peer_push, peer_sum, peer_take and peer_put; the memory: core/peer_window.h). Each rank copies
 * the partial sums of every other rank's block straight into that rank's buffer with the copy
 * engines, which take no multiprocessor from the GEMMs running beside them, and each rank then
 * adds what arrived to its own block (peer_sum); a gather pushes one block to every peer, and
 * each rank copies what arrived into place (peer_take), or, where the destination itself is
 * peer-mapped, copies straight into it between two meetings of the ranks (peer_put: the first
 * says every rank's destination is free, the second that every copy has arrived). Nothing goes
 * through the host, so all are plain nodes of a captured graph.
 *
 * The hand-offs. Two flag entries of the window serve the pushes: READY, raised in the receiver's
 * buffer by each sender once its copy is complete, and FREE, raised in the sender's buffer by
 * each receiver once it has taken in what that sender put there. A push first waits until every
 * receiver has taken in this rank's previous push (so a slot is never written while it is
 * read), then copies, then raises READY; a sum or a take waits for every sender's READY, adds or
 * copies, then raises FREE. The counts live in the owner's epochs (entry READY: pushes made,
 * FREE: pushes taken in), the same on every rank because every rank pushes and takes in the
 * same order; the caller orders a rank's takes one after another, whatever their streams. The
 * waits are one-block kernels, so a wait never keeps another stream's kernels off the device. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/peer_flags.cuh"

#define PR_READY  0
#define PR_FREE   1
#define PR_ARRIVE 2 /* peer_put's meetings: before its copies */
#define PR_DONE   3 /* and after them */

/* The window's bases, and that its slots hold blocks of `slot` bytes (as the CPU backend's
 * check). */
static mg_status bases_of(const mg_peer_window *pw, const char *what, size_t slot,
                          mg_peer_bases *pb) {
    if (!mg_peer_bases_of(pw, pb)) return MG_FAIL(MG_ERR_INTERNAL, "%s: no peer window", what);
    if ((size_t)pw->n * slot > pw->bytes)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: %d blocks of %zu bytes exceed the window", what, pw->n,
                       slot);
    return MG_OK;
}

/* The copies to the peers of one call: src (+ q x stride) to dst[q] for every q != rank, in
 * order with stream s (st). With the backend's copy_split > 1 (MG_PEER_COPY_STREAMS) each copy
 * is cut into that many pieces (256-byte aligned), piece i of every copy on s's copy stream i,
 * forked from st and joined back to it by events, so that as many copy engines move them at
 * once. */
static mg_status copy_out(mg_backend *be, mg_stream_id s, cudaStream_t st, char *const *dst,
                          const char *src, size_t stride, size_t bytes, int P, int rank) {
    mg_cuda_ctx *c = mg_cuda_ctx_of(be);
    const int k = bytes >= ((size_t)1 << 20) ? c->copy_split : 1; /* small copies whole */
    if (k <= 1) {
        for (int i = 1; i < P; i++) {
            const int q = (rank + i) % P; /* each rank starts elsewhere */
            MG_CUDA_CHECK(
                cudaMemcpyAsync(dst[q], src + (size_t)q * stride, bytes, cudaMemcpyDefault, st));
        }
        return MG_OK;
    }
    const size_t piece = ((bytes + (size_t)k - 1) / (size_t)k + 255) & ~(size_t)255;
    cudaStream_t *cs = c->copy_stream[s];
    cudaEvent_t *join = c->copy_join[s];
    MG_CUDA_CHECK(cudaEventRecord(c->copy_fork[s], st));
    for (int j = 0; j < k; j++) {
        const size_t at = (size_t)j * piece;
        MG_CUDA_CHECK(cudaStreamWaitEvent(cs[j], c->copy_fork[s], 0));
        for (int i = 1; i < P && at < bytes; i++) {
            const int q = (rank + i) % P;
            const size_t n = bytes - at < piece ? bytes - at : piece;
            MG_CUDA_CHECK(cudaMemcpyAsync(dst[q] + at, src + (size_t)q * stride + at, n,
                                          cudaMemcpyDefault, cs[j]));
        }
        MG_CUDA_CHECK(cudaEventRecord(join[j], cs[j]));
        MG_CUDA_CHECK(cudaStreamWaitEvent(st, join[j], 0));
    }
    return MG_OK;
}

/* This rank's count of entry b. */
static __device__ __forceinline__ volatile uint32_t *own_epoch(const mg_peer_bases &pb,
                                                               size_t bytes, int rank, int b) {
    return mg_peer_flag(pb.base[rank], bytes, MG_PEER_MAX, b);
}

/* Thread q < P waits until rank q has raised entry `wait` in this rank's buffer to this rank's
 * count of `count` plus `ahead`. */
static __global__ void wait_kernel(mg_peer_bases pb, size_t bytes, int P, int rank, int wait,
                                   int count, uint32_t ahead) {
    const int q = threadIdx.x;
    if (q < P && q != rank)
        mg_peer_wait(mg_peer_flag(pb.base[rank], bytes, q, wait),
                     *own_epoch(pb, bytes, rank, count) + ahead, pb.abort);
    __threadfence_system(); /* what the peers wrote before their flags, before what follows */
}

/* This rank's next count of entry b, raised by thread q as entry b of this rank's flags in peer
 * q's buffer, after what this stream did before (no peer's memory is touched once the world has
 * failed). */
static __device__ __forceinline__ uint32_t raise_peers(const mg_peer_bases &pb, size_t bytes, int P,
                                                       int rank, int b) {
    const int q = threadIdx.x;
    const uint32_t e = *own_epoch(pb, bytes, rank, b) + 1;
    __threadfence_system();
    const bool gone = pb.abort && *pb.abort;
    if (q < P && q != rank && !gone) *mg_peer_flag(pb.base[q], bytes, rank, b) = e;
    return e;
}

/* This rank's count of entry b goes up by one and is raised in every peer's buffer. */
static __global__ void raise_kernel(mg_peer_bases pb, size_t bytes, int P, int rank, int b) {
    const uint32_t e = raise_peers(pb, bytes, P, rank, b);
    __syncthreads();
    if (threadIdx.x == 0) *own_epoch(pb, bytes, rank, b) = e;
}

extern "C" mg_status mg_cuda_peer_push(mg_backend *be, const mg_peer_window *pw, const void *src,
                                       size_t stride, size_t bytes, mg_stream_id s) {
    mg_peer_bases pb;
    MG_CHECK(bases_of(pw, "peer_push", bytes, &pb));
    if (pw->n == 1 || bytes == 0) return MG_OK;
    cudaStream_t st = (cudaStream_t)be->stream_handle(be, s);
    const int P = pw->n, r = pw->rank;
    /* every receiver has summed this rank's previous push (FREE as far as this rank's pushes) */
    wait_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_FREE, PR_READY, 0);
    MG_CUDA_CHECK_LAUNCH();
    char *dst[MG_PEER_MAX];
    for (int q = 0; q < P; q++) dst[q] = pb.base[q] + (size_t)r * bytes;
    MG_CHECK(copy_out(be, s, st, dst, (const char *)src, stride, bytes, P, r));
    raise_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_READY);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* Rank `rank` meets the others through entry b: its count of b goes up by one and is raised in
 * every peer's buffer, after this stream's earlier work; then thread q waits until rank q has
 * raised b in this rank's buffer as far. */
static __global__ void meet_kernel(mg_peer_bases pb, size_t bytes, int P, int rank, int b) {
    const int q = threadIdx.x;
    const uint32_t e = raise_peers(pb, bytes, P, rank, b);
    if (q < P && q != rank) mg_peer_wait(mg_peer_flag(pb.base[rank], bytes, q, b), e, pb.abort);
    __threadfence_system();
    __syncthreads();
    if (q == 0) *own_epoch(pb, bytes, rank, b) = e;
}

extern "C" mg_status mg_cuda_peer_put(mg_backend *be, const mg_peer_window *pw, void *const *dst,
                                      const void *src, size_t bytes, mg_stream_id s) {
    mg_peer_bases pb;
    MG_CHECK(bases_of(pw, "peer_put", 0, &pb));
    if (bytes == 0) return MG_OK;
    cudaStream_t st = (cudaStream_t)be->stream_handle(be, s);
    const int P = pw->n, r = pw->rank;
    if (dst[r] != src)
        MG_CUDA_CHECK(cudaMemcpyAsync(dst[r], src, bytes, cudaMemcpyDeviceToDevice, st));
    if (P == 1) return MG_OK;
    meet_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_ARRIVE);
    MG_CUDA_CHECK_LAUNCH();
    MG_CHECK(copy_out(be, s, st, (char *const *)dst, (const char *)src, 0, bytes, P, r));
    meet_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_DONE);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

extern "C" mg_status mg_cuda_peer_take(mg_backend *be, const mg_peer_window *pw, void *dst,
                                       const void *own, size_t bytes, mg_stream_id s) {
    mg_peer_bases pb;
    MG_CHECK(bases_of(pw, "peer_take", bytes, &pb));
    if (bytes == 0) return MG_OK;
    cudaStream_t st = (cudaStream_t)be->stream_handle(be, s);
    const int P = pw->n, r = pw->rank;
    char *mine = (char *)dst + (size_t)r * bytes;
    if (own && own != mine)
        MG_CUDA_CHECK(cudaMemcpyAsync(mine, own, bytes, cudaMemcpyDeviceToDevice, st));
    if (P == 1) return MG_OK;
    wait_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_READY, PR_FREE, 1);
    MG_CUDA_CHECK_LAUNCH();
    for (int q = 0; q < P; q++)
        if (q != r)
            MG_CUDA_CHECK(cudaMemcpyAsync((char *)dst + (size_t)q * bytes,
                                          pb.base[r] + (size_t)q * bytes, bytes,
                                          cudaMemcpyDeviceToDevice, st));
    raise_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_FREE);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* VEC values of T at p (16 bytes: 8 h16 or 4 floats; or one value) as fp32, and back. */
template <int VEC, typename T> static __device__ __forceinline__ void load_f(const T *p, float *f) {
    if constexpr (std::is_same<T, float>::value) {
        if (VEC == 4) {
            const float4 v = *reinterpret_cast<const float4 *>(p);
            f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
        } else {
            f[0] = p[0];
        }
    } else {
        mg_loadv<VEC>(p, f);
    }
}

template <int VEC, typename T>
static __device__ __forceinline__ void store_f(T *p, const float *f) {
    if constexpr (std::is_same<T, float>::value) {
        if (VEC == 4)
            *reinterpret_cast<float4 *>(p) = make_float4(f[0], f[1], f[2], f[3]);
        else
            p[0] = f[0];
    } else {
        mg_storev<VEC>(p, f);
    }
}

/* acc[k] += VEC values of T at p. */
template <int VEC, typename T>
static __device__ __forceinline__ void add_f(float *acc, const T *p) {
    float f[VEC];
    load_f<VEC>(p, f);
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] += f[k];
}

/* dst = the P blocks summed in rank order in fp32 (this rank's from own, the others' from the
 * slots of its buffer), rounded once to T; with bias (H) or residual, that rounded sum then
 * closed as bias_residual_add_kernel closes a row (+ bias, + residual in fp32, one rounding).
 * VEC: the values of a 16-byte vector (H a multiple of it), or 1. */
template <typename T, int VEC>
static __global__ void sum_kernel(T *dst, const T *own, const char *mine, size_t slot, int P,
                                  int rank, size_t n, const T *bias, const T *residual, int H) {
    const size_t stride = (size_t)gridDim.x * blockDim.x * VEC;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
        for (int p = 0; p < P; p++)
            add_f<VEC>(acc, p == rank ? own + i
                                      : reinterpret_cast<const T *>(mine + (size_t)p * slot) + i);
        if (bias || residual) {
            alignas(16) T rounded[VEC]; /* the sum as the separate pass would read it */
            store_f<VEC>(rounded, acc);
            load_f<VEC>(rounded, acc);
            if (bias) add_f<VEC>(acc, bias + i % (size_t)H);
            if (residual) add_f<VEC>(acc, residual + i);
        }
        store_f<VEC>(dst + i, acc);
    }
}

/* The sum of peer_sum in T (16 bytes = VEC values), on stream st. */
template <typename T, int VEC>
static mg_status launch_sum(void *dst, const void *own, const char *mine, size_t n, int P, int r,
                            const void *bias, const void *residual, int H, cudaStream_t st) {
    const size_t slot = n * sizeof(T);
    const bool vec = n % VEC == 0 && slot % 16 == 0 && mg_cuda_aligned16(dst) &&
                     mg_cuda_aligned16(own) && mg_cuda_aligned16(mine) &&
                     (!bias || (H % VEC == 0 && mg_cuda_aligned16(bias))) &&
                     (!residual || mg_cuda_aligned16(residual));
    const T *b = (const T *)bias, *res = (const T *)residual;
    if (vec)
        sum_kernel<T, VEC><<<mg_cuda_blocks(n / VEC, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
            (T *)dst, (const T *)own, mine, slot, P, r, n, b, res, H);
    else
        sum_kernel<T, 1><<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(
            (T *)dst, (const T *)own, mine, slot, P, r, n, b, res, H);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* Under lazy loading (CUDA's default) a kernel's first launch loads its code, which waits for the
 * device: where a hand-off kernel already waits on the device for another rank served by the
 * same process (ranks on one GPU, as the tests run them), that first launch would never return.
 * Loading every kernel of the hand-offs when the backend starts keeps the launches plain. */
extern "C" mg_status mg_cuda_peer_reduce_load(void) {
    cudaFuncAttributes a;
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, wait_kernel));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, raise_kernel));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, meet_kernel));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<__nv_bfloat16, 8>));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<__nv_bfloat16, 1>));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<__half, 8>));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<__half, 1>));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<float, 4>));
    MG_CUDA_CHECK(cudaFuncGetAttributes(&a, sum_kernel<float, 1>));
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, peer_sum,
               (mg_backend * be, const mg_peer_window *pw, void *dst, const void *own, size_t n,
                mg_dtype dt, const void *bias, const void *residual, int H, mg_stream_id s),
               (be, pw, dst, own, n, dt, bias, residual, H, s)) {
    if (dt != MG_F32 && dt != be->compute_dtype)
        return MG_FAIL(MG_ERR_INTERNAL, "peer_sum: %s values (the compute dtype or fp32)",
                       mg_dtype_name(dt));
    MG_CHECK(mg_peer_sum_rows_check(n, bias, residual, H));
    const size_t slot = n * mg_dtype_size(dt);
    mg_peer_bases pb;
    MG_CHECK(bases_of(pw, "peer_sum", slot, &pb));
    if (n == 0) return MG_OK;
    cudaStream_t st = (cudaStream_t)be->stream_handle(be, s);
    const int P = pw->n, r = pw->rank;
    if (P > 1) { /* every sender's next push has arrived (READY one past this rank's takes) */
        wait_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_READY, PR_FREE, 1);
        MG_CUDA_CHECK_LAUNCH();
    }
    const char *mine = pb.base[r];
    if (dt == MG_F32)
        MG_CHECK((launch_sum<float, 4>(dst, own, mine, n, P, r, bias, residual, H, st)));
    else
        MG_CHECK((launch_sum<h16, 8>(dst, own, mine, n, P, r, bias, residual, H, st)));
    if (P > 1) { /* the slots are free again */
        raise_kernel<<<1, MG_PEER_MAX, 0, st>>>(pb, pw->bytes, P, r, PR_FREE);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}
