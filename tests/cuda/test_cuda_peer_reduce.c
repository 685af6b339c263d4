/* CUDA backend: the reduce-scatter and the gathers over peer-mapped memory (peer_push,
 * peer_sum, peer_take, peer_put; contract: backend_ops.h). Ranks on one GPU: one CUDA backend per
 * rank (streams of its own) and one buffer per rank standing for its peer-mapped window; every
 * rank's calls are enqueued before any is waited for, so the ranks meet only at the device
 * hand-offs (a wrong hand-off hangs or races). Two and three ranks, in one window each, the
 * epochs counting on from exchange to exchange:
 *  - sums: rank r's result is the sum over the ranks, in rank order in fp32, of their block r
 *    (the values the device holds), rounded once (CT_TOL_ACT); three rounds: a second block
 *    size (the slots move), the sum written over this rank's own block (dst = own), a size with
 *    no 16-byte vectors;
 *  - fp32 sums on the communication stream, as the data-parallel gradients take them (the host's
 *    order: exact);
 *  - sums that close rows of H with a bias and a residual (a row-parallel layer's end) against
 *    the plain sum followed by bias_residual_add: bit for bit, with 16-byte vectors and without,
 *    bias and residual together and the bias alone;
 *  - gathers, each rank's block to every rank (exact): pushed and taken into place, the same
 *    from a copy of the block elsewhere, and put straight into the other ranks' buffers between
 *    the meetings (twice);
 *  - all of it again with blocks of 2 MiB between two backends that cut their copies over three
 *    copy streams (MG_PEER_COPY_STREAMS=3). */
#include "cuda_test_util.h"

#include "core/env.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_RANKS = 3 };

/* Block r of the P ranks' sources (n values each) summed in rank order in fp32: what rank r's
 * reduce-scatter holds before its rounding. */
static const float *rank_sum(ct_pool *pool, float *const *src, int P, int r, size_t n) {
    float *ref = ct_host(pool, n * sizeof(float));
    for (size_t i = 0; ref && i < n; i++) {
        float acc = 0.0f;
        for (int s = 0; s < P; s++) acc += src[s][(size_t)r * n + i];
        ref[i] = acc;
    }
    return ref;
}

/* A rank's take of an exchange (exchange's): its sum on the compute stream after its push; own:
 * this rank's block of its push (n values). */
typedef void (*take_fn)(mg_test_ctx *t, mg_backend *be, const mg_peer_window *pw, int s,
                        const void *own, size_t n, int pass, void *ctx);

/* Every rank's push of its P blocks of n values (esz bytes each) from d_src and its take, enqueued
 * rank after rank before any is waited for, then every stream drained; false where a push failed
 * (a peer's take would wait for ever). */
static bool exchange(mg_test_ctx *t, mg_backend *const *be, const mg_peer_window *pw, int P,
                     void *const *d_src, size_t n, size_t esz, take_fn take, int pass, void *ctx) {
    for (int s = 0; s < P; s++) {
        mg_status st = be[s]->peer_push(be[s], &pw[s], d_src[s], n * esz, n * esz, MG_STREAM_TP);
        MG_EXPECT_OK(st);
        if (st != MG_OK) return false;
        take(t, be[s], &pw[s], s, (const char *)d_src[s] + (size_t)s * n * esz, n, pass, ctx);
        MG_EXPECT_OK(be[s]->stream_wait(be[s], MG_STREAM_COMPUTE, MG_STREAM_TP));
    }
    for (int s = 0; s < P; s++) MG_EXPECT_OK(be[s]->synchronize(be[s]));
    return true;
}

/* The plain sums: rank s's sum into dst[s]. */
static void take_sum(mg_test_ctx *t, mg_backend *be, const mg_peer_window *pw, int s,
                     const void *own, size_t n, int pass, void *ctx) {
    (void)pass;
    void **dst = ctx;
    MG_EXPECT_OK(
        be->peer_sum(be, pw, dst[s], own, n, be->compute_dtype, NULL, NULL, 0, MG_STREAM_COMPUTE));
}

/* The closing sums' section: pass 0 fused (bias, residual in peer_sum's pass) into fused[s];
 * pass 1 peer_sum then bias_residual_add into apart[s]. */
typedef struct {
    void **fused, **apart, **bias, **res;
    int H;
} close_ctx;

static void take_close(mg_test_ctx *t, mg_backend *be, const mg_peer_window *pw, int s,
                       const void *own, size_t n, int pass, void *ctx_) {
    const close_ctx *c = ctx_;
    if (pass == 0) {
        MG_EXPECT_OK(be->peer_sum(be, pw, c->fused[s], own, n, be->compute_dtype, c->bias[s],
                                  c->res[s], c->H, MG_STREAM_COMPUTE));
        return;
    }
    MG_EXPECT_OK(be->peer_sum(be, pw, c->apart[s], own, n, be->compute_dtype, NULL, NULL, 0,
                              MG_STREAM_COMPUTE));
    MG_EXPECT_OK(be->bias_residual_add(be, c->apart[s], c->apart[s], c->bias[s], c->res[s],
                                       (int)(n / (size_t)c->H), c->H));
}

/* sizes: values per block of three rounds, the first the largest */
static void check_ranks(mg_test_ctx *t, mg_backend *const *be, int P, const size_t *sizes) {
    ct_pool P_ = ct_pool_of(t, be[0]);
    const size_t esz = mg_dtype_size(be[0]->compute_dtype), most = sizes[0];
    const size_t data = (size_t)P * most * sizeof(float); /* slots for fp32 blocks too */
    void *win[MAX_RANKS];
    mg_peer_window pw[MAX_RANKS];
    for (int s = 0; s < P; s++) {
        MG_EXPECT_OK(be[0]->alloc(be[0], data + MG_PEER_FLAG_BYTES, &win[s]));
        if (!win[s]) return;
    }
    for (int s = 0; s < P; s++) {
        memset(&pw[s], 0, sizeof pw[s]);
        pw[s].n = P, pw[s].rank = s, pw[s].bytes = data;
        for (int q = 0; q < P; q++) pw[s].base[q] = win[q];
    }
    for (int round = 0; round < 3 && !P_.failed; round++) {
        const size_t n = sizes[round];
        void *d_src[MAX_RANKS], *d_dst[MAX_RANKS];
        float *src[MAX_RANKS];
        for (int s = 0; s < P; s++) {
            src[s] =
                ct_rand_act(&P_, 700 + 10 * (uint32_t)round + (uint32_t)s, (size_t)P * n, 1.0f);
            d_src[s] = ct_up_act(&P_, src[s], (size_t)P * n);
            src[s] = ct_down_act(&P_, d_src[s], (size_t)P * n); /* the device's values */
            d_dst[s] = round == 1 ? (char *)d_src[s] + (size_t)s * n * esz : ct_poison_act(&P_, n);
        }
        /* the zeroed windows and the uploads (on be[0]'s stream) done before the other ranks'
         * streams read them */
        MG_EXPECT_OK(be[0]->synchronize(be[0]));
        if (P_.failed) break;
        if (!exchange(t, be, pw, P, d_src, n, esz, take_sum, 0, d_dst)) goto out;
        for (int r = 0; r < P; r++) {
            const float *ref = rank_sum(&P_, src, P, r, n);
            CT_EXPECT_CLOSE(ct_down_act(&P_, d_dst[r], n), ref, n, CT_TOL_ACT,
                            "peer_sum: rank %d of %d, %zu values, round %d", r, P, n, round);
        }
    }
    /* fp32 blocks on the communication stream (the data-parallel gradients' reduce-scatter): the
     * same sums in the same order as the host's, so exact */
    {
        const size_t n = sizes[1];
        void *d_src[MAX_RANKS];
        float *src[MAX_RANKS];
        for (int s = 0; s < P; s++) {
            src[s] = ct_uniform_f32(&P_, 900 + (uint32_t)s, (size_t)P * n, -1.0f, 1.0f);
            d_src[s] = ct_up_f32(&P_, src[s], (size_t)P * n);
        }
        MG_EXPECT_OK(be[0]->synchronize(be[0]));
        for (int s = 0; s < P && !P_.failed; s++) {
            mg_status st = be[s]->peer_push(be[s], &pw[s], d_src[s], n * 4, n * 4, MG_STREAM_COMM);
            MG_EXPECT_OK(st);
            if (st != MG_OK) goto out;
            float *mine = (float *)d_src[s] + (size_t)s * n;
            MG_EXPECT_OK(be[s]->peer_sum(be[s], &pw[s], mine, mine, n, MG_F32, NULL, NULL, 0,
                                         MG_STREAM_COMM));
            MG_EXPECT_OK(be[s]->stream_wait(be[s], MG_STREAM_COMPUTE, MG_STREAM_COMM));
        }
        for (int s = 0; s < P; s++) MG_EXPECT_OK(be[s]->synchronize(be[s]));
        for (int r = 0; r < P && !P_.failed; r++) {
            const float *ref = rank_sum(&P_, src, P, r, n);
            CT_EXPECT_CLOSE(ct_down_f32(&P_, (float *)d_src[r] + (size_t)r * n, n), ref, n, 0.0,
                            "peer_sum fp32: rank %d of %d, %zu values", r, P, n);
        }
    }
    /* sums closing rows: fused (bias, residual in peer_sum's pass) against peer_sum then
     * bias_residual_add, from the same pushes: exact */
    static const struct {
        int size, H;
        bool residual;
    } tails[3] = {{0, 64, true}, {2, 37, true}, {1, 8, false}};
    for (int round = 0; round < 3 && !P_.failed; round++) {
        const size_t n = sizes[tails[round].size];
        const int H = tails[round].H;
        if (n % (size_t)H != 0) continue; /* the sizes above divide: 4096, 777, 1032 */
        void *d_src[MAX_RANKS], *fused[MAX_RANKS], *apart[MAX_RANKS], *bias[MAX_RANKS],
            *res[MAX_RANKS];
        for (int s = 0; s < P; s++) {
            const uint32_t seed = 1100 + 10 * (uint32_t)round + (uint32_t)s;
            d_src[s] = ct_up_act(&P_, ct_rand_act(&P_, seed, (size_t)P * n, 1.0f), (size_t)P * n);
            bias[s] = ct_up_act(&P_, ct_rand_act(&P_, seed + 500, (size_t)H, 1.0f), (size_t)H);
            res[s] = tails[round].residual
                         ? ct_up_act(&P_, ct_rand_act(&P_, seed + 700, n, 1.0f), n)
                         : NULL;
            fused[s] = ct_poison_act(&P_, n);
            apart[s] = ct_poison_act(&P_, n);
        }
        /* bias_residual_add's kernel loaded before any rank's sum waits on the device: under lazy
         * loading its first launch would wait for the device, behind a sum whose peer (served by
         * this same thread) has not pushed yet (apart is overwritten below) */
        MG_EXPECT_OK(be[0]->bias_residual_add(be[0], apart[0], apart[0], bias[0], res[0],
                                              (int)(n / (size_t)H), H));
        MG_EXPECT_OK(be[0]->synchronize(be[0]));
        close_ctx cc = {fused, apart, bias, res, H};
        for (int pass = 0; pass < 2 && !P_.failed; pass++)
            if (!exchange(t, be, pw, P, d_src, n, esz, take_close, pass, &cc)) goto out;
        for (int r = 0; r < P && !P_.failed; r++)
            CT_EXPECT_CLOSE(ct_down_act(&P_, fused[r], n), ct_down_act(&P_, apart[r], n), n, 0.0,
                            "peer_sum closing rows of %d (residual %d): rank %d of %d, %zu values",
                            H, (int)tails[round].residual, r, P, n);
    }
    /* gathers, rank s's block s of its buffer to every rank: pushed into the slots and taken
     * into place (kind 0), the same from a copy of the block elsewhere, its place zeroed (1),
     * and put straight into every other rank's buffer (standing for its activations) between
     * the meetings (2, twice: the epochs count on); every rank's buffer must then hold every
     * rank's block: exact */
    static const int kinds[4] = {0, 1, 2, 2};
    for (int round = 0; round < 4 && !P_.failed; round++) {
        const int kind = kinds[round];
        const size_t n = sizes[round % 3];
        void *d_buf[MAX_RANKS], *copy[MAX_RANKS] = {NULL};
        float *src[MAX_RANKS];
        for (int s = 0; s < P; s++) {
            src[s] =
                ct_rand_act(&P_, 800 + 10 * (uint32_t)round + (uint32_t)s, (size_t)P * n, 1.0f);
            d_buf[s] = ct_up_act(&P_, src[s], (size_t)P * n);
            src[s] = ct_down_act(&P_, d_buf[s], (size_t)P * n);
            char *mine = (char *)d_buf[s] + (size_t)s * n * esz;
            if (kind == 1) {
                copy[s] = ct_up_act(&P_, src[s] + (size_t)s * n, n);
                MG_EXPECT_OK(be[0]->memset_zero(be[0], mine, n * esz));
            }
        }
        MG_EXPECT_OK(be[0]->synchronize(be[0]));
        if (P_.failed) break;
        for (int s = 0; s < P; s++) {
            void *dst[MAX_RANKS];
            for (int q = 0; q < P; q++) dst[q] = (char *)d_buf[q] + (size_t)s * n * esz;
            const void *own = copy[s] ? copy[s] : dst[s];
            mg_status st = kind == 2
                               ? be[s]->peer_put(be[s], &pw[s], dst, own, n * esz, MG_STREAM_TP)
                               : be[s]->peer_push(be[s], &pw[s], own, 0, n * esz, MG_STREAM_TP);
            MG_EXPECT_OK(st);
            if (st != MG_OK) goto out; /* a peer would wait for ever */
            if (kind < 2)
                MG_EXPECT_OK(
                    be[s]->peer_take(be[s], &pw[s], d_buf[s], copy[s], n * esz, MG_STREAM_TP));
            MG_EXPECT_OK(be[s]->stream_wait(be[s], MG_STREAM_COMPUTE, MG_STREAM_TP));
        }
        for (int s = 0; s < P; s++) MG_EXPECT_OK(be[s]->synchronize(be[s]));
        for (int r = 0; r < P; r++) {
            float *ref = ct_host(&P_, (size_t)P * n * sizeof(float));
            for (int q = 0; q < P; q++)
                memcpy(ref + (size_t)q * n, src[q] + (size_t)q * n, n * sizeof(float));
            CT_EXPECT_CLOSE(ct_down_act(&P_, d_buf[r], (size_t)P * n), ref, (size_t)P * n, 0.0,
                            "gather kind %d: rank %d of %d, %zu values, round %d", kind, r, P, n,
                            round);
        }
    }
out:
    for (int s = 0; s < P; s++) MG_EXPECT_OK(be[s]->synchronize(be[s]));
    for (int s = 0; s < P; s++) be[0]->free(be[0], win[s]);
    ct_pool_free(&P_);
}

MG_TEST(cuda_peer_push_sum_and_take) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    if (!gpu->peer_push || !gpu->peer_sum || !gpu->peer_take || !gpu->peer_put) {
        MG_EXPECT(gpu->device != MG_DEVICE_CUDA,
                  "the cuda backend has no peer_push/peer_sum/peer_take/peer_put");
        return;
    }
    mg_backend *be[MAX_RANKS] = {gpu, NULL, NULL};
    for (int s = 1; s < MAX_RANKS; s++) {
        MG_EXPECT_OK(mg_backend_cuda_create_dtype(&be[s], 0, gpu->compute_dtype));
        if (!be[s]) goto out;
    }
    static const size_t sizes[3] = {4096, 1032, 777};
    check_ranks(t, be, 2, sizes);
    check_ranks(t, be, 3, sizes);
    /* copies of 1 MiB and more cut over three copy streams (MG_PEER_COPY_STREAMS, read when a
     * backend starts): two more ranks, blocks of 2 MiB and more */
    static const size_t large[3] = {((size_t)1 << 20) + 8, (size_t)1 << 20, 777};
    mg_backend *split[2] = {NULL, NULL};
    setenv("MG_PEER_COPY_STREAMS", "3", 1);
    mg_env_forget();
    for (int s = 0; s < 2; s++)
        MG_EXPECT_OK(mg_backend_cuda_create_dtype(&split[s], 0, gpu->compute_dtype));
    unsetenv("MG_PEER_COPY_STREAMS");
    mg_env_forget();
    if (split[0] && split[1]) check_ranks(t, split, 2, large);
    for (int s = 0; s < 2; s++)
        if (split[s]) split[s]->destroy(split[s]);
out:
    for (int s = 1; s < MAX_RANKS; s++)
        if (be[s]) be[s]->destroy(be[s]);
}

/* A wait for a peer that never comes gives up once the world's abort word is set (the NCCL
 * backend's watchdog sets it when the world fails), so the stream drains instead of holding the
 * host for ever: rank 0 of two sums while rank 1 never pushes; the sum must still be waiting
 * after 50 ms, and the stream must finish once the word is set. */
MG_TEST(cuda_peer_wait_gives_up_on_abort) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    if (!gpu->peer_sum) {
        MG_EXPECT(gpu->device != MG_DEVICE_CUDA, "the cuda backend has no peer_sum");
        return;
    }
    const size_t n = 1024, esz = mg_dtype_size(gpu->compute_dtype), data = 2 * n * esz;
    void *win = NULL, *dst = NULL;
    uint32_t *word = NULL;
    void *word_dev = NULL;
    MG_EXPECT_OK(gpu->alloc(gpu, data + MG_PEER_FLAG_BYTES, &win));
    MG_EXPECT_OK(gpu->alloc(gpu, n * esz, &dst));
    MG_EXPECT(cudaHostAlloc((void **)&word, sizeof *word, cudaHostAllocMapped) == cudaSuccess &&
                  cudaHostGetDevicePointer(&word_dev, word, 0) == cudaSuccess,
              "cudaHostAlloc of a mapped word");
    if (!win || !dst || !word_dev) goto out;
    *word = 0;
    mg_peer_window pw = {.n = 2, .rank = 0, .bytes = data, .abort = word_dev};
    pw.base[0] = win;
    pw.base[1] = win; /* never pushed into: rank 1 does not exist */
    MG_EXPECT_OK(
        gpu->peer_sum(gpu, &pw, dst, dst, n, gpu->compute_dtype, NULL, NULL, 0, MG_STREAM_COMPUTE));
    cudaStream_t st = gpu->stream_handle(gpu, MG_STREAM_COMPUTE);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    MG_EXPECT(cudaStreamQuery(st) == cudaErrorNotReady,
              "the sum did not wait for the peer that never pushed");
    *(volatile uint32_t *)word = 1;
    MG_EXPECT(cudaStreamSynchronize(st) == cudaSuccess, "the stream did not drain after the abort");
out:
    if (word) cudaFreeHost(word);
    if (dst) gpu->free(gpu, dst);
    if (win) gpu->free(gpu, win);
}
