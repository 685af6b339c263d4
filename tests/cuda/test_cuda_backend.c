/* CUDA backend, part 1: creation, the op table and the memory entries (alloc, copies, memset,
 * fp32 <-> compute-dtype upload and download, synchronize), and the counters the other tests
 * rely on. */
#include "cuda_test_util.h"

#include <float.h>
#include <math.h>

MG_TEST(cuda_backend_create_and_table) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    MG_EXPECT(strcmp(g->name, "cuda") == 0, "name %s", g->name);
    MG_EXPECT(g->compute_dtype == ct_dtype() && g->device == MG_DEVICE_CUDA, "dtype %s/device",
              mg_dtype_name(g->compute_dtype));
    MG_EXPECT_OK(mg_backend_validate(g));
    mg_cuda_ctx *c = mg_cuda_ctx_of(g);
    MG_EXPECT(c->stream != NULL && c->lt != NULL, "no stream or cuBLASLt handle");
    MG_EXPECT(c->workspace != NULL && c->workspace_bytes >= (1u << 20), "workspace %zu bytes",
              c->workspace_bytes);
    MG_EXPECT(c->num_sms > 0, "num_sms %d", c->num_sms);
    MG_EXPECT(c->n_device_allocs >= 1, "the workspace allocation was not counted");
}

MG_TEST(cuda_backend_create_rejects_missing_device) {
    if (!ct_cuda(t)) return; /* the CUDA runtime must be usable for this to mean anything */
    mg_backend *be = (mg_backend *)&be;
    MG_EXPECT_ERROR(mg_backend_cuda_create(&be, 4096), MG_ERR_UNSUPPORTED, "no CUDA device 4096");
    MG_EXPECT(be == NULL, "out not cleared on failure");
    MG_EXPECT_ERROR(mg_backend_cuda_create(&be, -1), MG_ERR_UNSUPPORTED, "no CUDA device -1");
    MG_EXPECT_ERROR(mg_backend_cuda_create_dtype(&be, 4096, MG_F16), MG_ERR_UNSUPPORTED,
                    "no CUDA device 4096");
    /* a compute dtype the backend has not: refused before the device is looked at */
    be = (mg_backend *)&be;
    MG_EXPECT_ERROR(mg_backend_cuda_create_dtype(&be, 0, MG_F32), MG_ERR_USAGE, "bf16 or fp16");
    MG_EXPECT(be == NULL, "out not cleared on failure");
}

MG_TEST(cuda_memory_entries) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    uint64_t a0 = ct_allocs(g), f0 = mg_cuda_ctx_of(g)->n_device_frees;
    unsigned char *p = NULL, *q = NULL, *z = NULL;
    MG_EXPECT_OK(g->alloc(g, 1000, (void **)&p));
    MG_EXPECT_OK(g->alloc(g, 0, (void **)&z));
    MG_EXPECT_OK(g->alloc(g, 4096, (void **)&q));
    if (!p || !q || !z) return;
    MG_EXPECT(z != p && z != q, "a 0-byte allocation is not a distinct pointer");
    MG_EXPECT((uintptr_t)p % 256 == 0 && (uintptr_t)q % 256 == 0, "not 256-byte aligned");
    MG_EXPECT(ct_allocs(g) == a0 + 3, "allocs counted %llu, want 3",
              (unsigned long long)(ct_allocs(g) - a0));
    unsigned char h[1000];
    memset(h, 0x5a, sizeof h);
    MG_EXPECT_OK(g->copy_d2h(g, h, p, sizeof h));
    int nz = 0;
    for (int i = 0; i < 1000; i++) nz += h[i] != 0;
    MG_EXPECT(nz == 0, "alloc not zeroed (%d non-zero bytes)", nz);

    unsigned char src[1000], back[1000];
    for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 37 + 11);
    MG_EXPECT_OK(g->copy_h2d(g, p, src, sizeof src));
    MG_EXPECT_OK(g->copy_d2d(g, q + 256, p, sizeof src));
    MG_EXPECT_OK(g->memset_zero(g, q + 256 + 100, 50));
    MG_EXPECT_OK(g->copy_d2h(g, back, q + 256, sizeof back));
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += back[i] != (i >= 100 && i < 150 ? 0 : src[i]);
    MG_EXPECT(bad == 0, "h2d/d2d/memset/d2h: %d bytes wrong", bad);
    /* zero-byte transfers are no-ops, also with NULL pointers */
    MG_EXPECT_OK(g->copy_h2d(g, NULL, NULL, 0));
    MG_EXPECT_OK(g->copy_d2h(g, NULL, NULL, 0));
    MG_EXPECT_OK(g->memset_zero(g, NULL, 0));
    uint64_t s0 = ct_syncs(g);
    MG_EXPECT_OK(g->synchronize(g));
    MG_EXPECT(ct_syncs(g) == s0 + 1, "synchronize not counted");
    g->free(g, p);
    g->free(g, q);
    g->free(g, z);
    g->free(g, NULL);
    MG_EXPECT(mg_cuda_ctx_of(g)->n_device_frees == f0 + 3, "frees counted %llu, want 3",
              (unsigned long long)(mg_cuda_ctx_of(g)->n_device_frees - f0));
}

/* upload_f32 must round exactly as core/tensor.c (ties to even, NaN kept, overflow to Inf, fp16's
 * subnormals), and download_f32 must widen exactly. The special values hold the cases of both
 * dtypes; the random ones span 2^-30 .. 2^30, beyond fp16's range at both ends. */
MG_TEST(cuda_upload_rounds_like_the_host) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    ct_pool P = ct_pool_of(t, g);
    enum { NSPECIAL = 28, NRAND = 100003 };
    size_t n = NSPECIAL + NRAND;
    float *x = ct_host(&P, n * sizeof(float));
    uint32_t nan_payload = 0x7fc12345u, neg_nan = 0xff800001u;
    float special[NSPECIAL] = {
        1.0f, 1.0f + 0x1p-8f, /* halfway, even below: rounds down */
        1.0f + 0x3p-8f,       /* halfway, odd below: rounds up */
        1.0f + 0x1p-9f,       /* below halfway */
        -0.0f, 1e-40f,        /* fp32 subnormal */
        -3e-39f, FLT_MAX,     /* rounds up to Inf */
        -FLT_MAX, INFINITY, -INFINITY, 0.0f, 3.14159265f, -65504.5f, 0.0f, 0.0f,
        /* fp16: ties at 2^-11 (even below: down; odd below: up); the largest finite value, the
         * last value below the overflow threshold and the threshold itself (ties to Inf);
         * subnormals: the smallest, half of it (a tie: to 0), just above half of it, the largest
         * subnormal and the smallest normal */
        1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 0x1p-24f,
        0x1p-25f, 0x1.000002p-25f, -0x1.ff8p-15f, 0x1p-14f, 0x1.ffcp-15f};
    memcpy(&special[14], &nan_payload, 4);
    memcpy(&special[15], &neg_nan, 4);
    memcpy(x, special, sizeof special);
    float *r = ct_rand_act(&P, 1, NRAND, 1.0f);
    for (size_t i = 0; i < NRAND; i++) /* un-round: spread values over many exponents */
        x[NSPECIAL + i] =
            r[i] * (1.0f + 0x1p-12f * (float)(i % 97)) * ldexpf(1.0f, (int)(i % 61) - 30);
    void *d = ct_up_act(&P, x, n);
    if (P.failed) goto done;
    uint16_t *bits = ct_down_raw(&P, d, n * 2);
    float *back = ct_down_act(&P, d, n);
    size_t bad = 0, first = 0, badw = 0, firstw = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t want = ct_act_bits(x[i]);
        if (bits[i] != want && bad++ == 0) first = i;
        float w = ct_act_value(bits[i]);
        if (memcmp(&w, &back[i], 4) != 0 && badw++ == 0) firstw = i;
    }
    MG_EXPECT(bad == 0,
              "%zu of %zu values rounded differently (first [%zu] %a: got 0x%04x, want "
              "0x%04x)",
              bad, n, first, (double)x[first], bits[first], ct_act_bits(x[first]));
    MG_EXPECT(badw == 0, "%zu of %zu values widened wrongly (first [%zu])", badw, n, firstw);
done:
    ct_pool_free(&P);
}

/* convert_bf16 (--grad-reduce-in-bf16's bucket copies): fp32 to bf16 on the communication
 * stream, then back on the compute stream after it, bit for bit the CPU's (core/tensor.h's
 * rounding: ties to even, NaN kept, overflow to infinity, subnormals), on values of every
 * exponent. */
MG_TEST(cuda_convert_bf16_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    ct_pool P = ct_pool_of(t, gpu);
    enum { NSPECIAL = 12, NRAND = 50001 };
    const size_t n = NSPECIAL + NRAND;
    float *x = ct_host(&P, n * sizeof(float));
    uint16_t *want = ct_host(&P, n * 2);
    float *want_back = ct_host(&P, n * sizeof(float));
    if (P.failed) goto done;
    const float special[NSPECIAL] = {
        1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-9f, -0.0f,     1e-40f, -3e-39f,
        FLT_MAX,        -FLT_MAX,       INFINITY,       -INFINITY, NAN,    3.14159265f};
    memcpy(x, special, sizeof special);
    for (size_t i = NSPECIAL; i < n; i++)
        x[i] =
            sinf(0.7f * (float)i) * ldexpf(1.0f + 0x1p-12f * (float)(i % 97), (int)(i % 61) - 30);
    float *d_x = ct_up_f32(&P, x, n), *d_back = ct_poison(&P, n * sizeof(float));
    uint16_t *d_b = ct_poison(&P, n * 2);
    if (P.failed) goto done;
    MG_EXPECT_OK(gpu->convert_bf16(gpu, d_b, d_x, n, true, MG_STREAM_COMM));
    if (gpu->stream_wait) /* (absent where the cpu backend stands in: MG_TEST_CUDA_AS_CPU) */
        MG_EXPECT_OK(gpu->stream_wait(gpu, MG_STREAM_COMPUTE, MG_STREAM_COMM));
    MG_EXPECT_OK(gpu->convert_bf16(gpu, d_back, d_b, n, false, MG_STREAM_COMPUTE));
    MG_EXPECT_OK(cpu->convert_bf16(cpu, want, x, n, true, MG_STREAM_COMM));
    MG_EXPECT_OK(cpu->convert_bf16(cpu, want_back, want, n, false, MG_STREAM_COMPUTE));
    uint16_t *got = ct_down_raw(&P, d_b, n * 2);
    float *back = ct_down_raw(&P, d_back, n * sizeof(float));
    if (!got || !back) goto done;
    CT_EXPECT_SAME_BITS(got, want, n * 2, "convert_bf16: fp32 to bf16");
    CT_EXPECT_SAME_BITS(back, want_back, n * sizeof(float), "convert_bf16: bf16 to fp32");
done:
    ct_pool_free(&P);
}

/* Uploads and downloads larger than the workspace go through it in chunks of the workspace's
 * recorded size: on a CUDA backend of the test's own whose recorded size is lowered to 16 MiB
 * (its real allocation is larger, so every chunk fits), the round trip is two chunks of 4M values,
 * the second of 1001. The shared backend's workspace is 2 GiB or more (cuDNN's plans grow it),
 * which would make this gigabytes of host memory; MG_CUDA_WORKSPACE_MB cannot shrink it here, the
 * environment being read once per process. */
MG_TEST(cuda_upload_download_span_workspace_chunks) {
    if (!ct_cuda(t)) return;
    mg_backend *g = NULL;
    MG_EXPECT_OK(mg_backend_cuda_create_dtype(&g, 0, ct_dtype()));
    if (!g) return;
    MG_EXPECT(mg_cuda_ctx_of(g)->workspace_bytes >= (16u << 20), "workspace %zu bytes",
              mg_cuda_ctx_of(g)->workspace_bytes);
    mg_cuda_ctx_of(g)->workspace_bytes = 16u << 20;
    ct_pool P = ct_pool_of(t, g);
    size_t n = mg_cuda_ctx_of(g)->workspace_bytes / sizeof(float) + 1001;
    float *x = ct_host(&P, n * sizeof(float));
    /* a cheap pattern, rounded to compute-dtype values so the round trip must be exact */
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 4093) - 2000.5f;
    ct_round_act(x, n);
    void *d = ct_up_act(&P, x, n);
    if (P.failed) goto done;
    float *back = ct_down_act(&P, d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (back[i] != x[i] && bad++ == 0) first = i;
    MG_EXPECT(bad == 0, "%zu of %zu values wrong after the round trip (first [%zu]: %g, want %g)",
              bad, n, first, back[first], x[first]);
done:
    ct_pool_free(&P);
    g->destroy(g);
}

/* Small host-to-device copies go through the pinned ring (staging.c): the caller's buffer is
 * reusable at once (each of 100 copies, over three turns of the ring, sees its own values, though
 * the host buffer is overwritten right after each call), and a copy does not wait for the device:
 * behind a long queue of products the stream is still busy when copy_h2d returns. */
MG_TEST(cuda_small_copies_are_staged_and_do_not_wait) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    ct_pool P = ct_pool_of(t, g);
    enum { K = 100, M = 4096, G = 4096 };
    int32_t *d = ct_up_i32(&P, ct_host(&P, (size_t)K * M * 4), (size_t)K * M);
    float *a = ct_uniform_act(&P, 7, (size_t)G * G, -1, 1);
    void *da = ct_up_act(&P, a, (size_t)G * G), *dout = ct_poison_act(&P, (size_t)G * G);
    int32_t *host = ct_host(&P, M * 4);
    if (P.failed) goto done;
    MG_EXPECT_OK(g->synchronize(g));
    for (int r = 0; r < 20; r++) /* ~20 x 0.17 ms of queued work */
        MG_EXPECT_OK(g->linear_forward(g, dout, da, da, NULL, NULL, G, G, G));
    uint64_t syncs = mg_cuda_ctx_of(g)->n_host_syncs;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < M; i++) host[i] = k * 1000003 + i;
        MG_EXPECT_OK(g->copy_h2d(g, d + (size_t)k * M, host, M * 4));
        if (k == 0)
            MG_EXPECT(cudaStreamQuery(mg_cuda_stream(g)) == cudaErrorNotReady,
                      "the stream was idle after the first copy: copy_h2d waited for it");
    }
    MG_EXPECT(mg_cuda_ctx_of(g)->n_host_syncs == syncs, "copy_h2d counted a host sync");
    int32_t *back = ct_down_raw(&P, d, (size_t)K * M * 4);
    size_t bad = 0, first = 0;
    for (size_t i = 0; back && i < (size_t)K * M; i++)
        if (back[i] != (int32_t)((i / M) * 1000003 + i % M) && bad++ == 0) first = i;
    MG_EXPECT(back && bad == 0, "%zu of %d values wrong after staged copies (first [%zu])", bad,
              K * M, first);
done:
    ct_pool_free(&P);
}

/* The two ways to order the streams: stream_wait (everything enqueued so far) or a numbered
 * mark recorded at that point (stream_mark + stream_wait_mark). */
static mg_status order_streams(mg_backend *g, bool marks, mg_stream_id waiter,
                               mg_stream_id signaller, int slot) {
    if (!marks) return g->stream_wait(g, waiter, signaller);
    MG_CHECK(g->stream_mark(g, signaller, slot));
    return g->stream_wait_mark(g, waiter, slot);
}

/* A copy on the communication stream ordered after a queue of long products on the compute
 * stream reads their finished output, and compute work ordered after the copy sees the copy
 * done; the streams are distinct and nothing waits on the host. */
static void check_ordered_copy(mg_test_ctx *t, bool marks) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    MG_EXPECT(g->stream_handle && g->stream_wait && g->stream_mark && g->stream_wait_mark,
              "the CUDA backend lacks its stream entries");
    if (!g->stream_handle || !g->stream_wait || !g->stream_mark || !g->stream_wait_mark) return;
    cudaStream_t comp = g->stream_handle(g, MG_STREAM_COMPUTE);
    cudaStream_t comm = g->stream_handle(g, MG_STREAM_COMM);
    MG_EXPECT(comp == mg_cuda_stream(g) && comm != comp && comm != NULL,
              "stream handles: compute %p (want %p), comm %p", (void *)comp,
              (void *)mg_cuda_stream(g), (void *)comm);
    ct_pool P = ct_pool_of(t, g);
    enum { G = 4096 };
    size_t n = (size_t)G * G;
    float *a = ct_uniform_act(&P, marks ? 9 : 8, n, -1, 1);
    void *da = ct_up_act(&P, a, n), *dout = ct_poison_act(&P, n), *dcopy = ct_poison_act(&P, n);
    void *dcopy2 = ct_poison_act(&P, n);
    if (P.failed) goto done;
    MG_EXPECT_OK(g->synchronize(g));
    uint64_t syncs = mg_cuda_ctx_of(g)->n_host_syncs;
    for (int r = 0; r < 10; r++) /* a queue of products; the copy must wait for the last */
        MG_EXPECT_OK(g->linear_forward(g, dout, da, da, NULL, NULL, G, G, G));
    MG_EXPECT_OK(order_streams(g, marks, MG_STREAM_COMM, MG_STREAM_COMPUTE, 5));
    MG_EXPECT(cudaMemcpyAsync(dcopy, dout, n * 2, cudaMemcpyDeviceToDevice, comm) == cudaSuccess,
              "copy on the communication stream");
    MG_EXPECT_OK(order_streams(g, marks, MG_STREAM_COMPUTE, MG_STREAM_COMM, 0));
    MG_EXPECT_OK(g->copy_d2d(g, dcopy2, dcopy, n * 2)); /* compute stream, after the copy */
    MG_EXPECT(mg_cuda_ctx_of(g)->n_host_syncs == syncs, "stream ordering counted a host sync");
    void *want = ct_down_raw(&P, dout, n * 2), *got = ct_down_raw(&P, dcopy2, n * 2);
    MG_EXPECT(want && got && memcmp(want, got, n * 2) == 0,
              "the copy ordered by %s differs from the product's output",
              marks ? "marks" : "stream_wait");
    if (marks)
        MG_EXPECT_ERROR(g->stream_mark(g, MG_STREAM_COMPUTE, MG_STREAM_MARKS), MG_ERR_INTERNAL,
                        "stream mark");
done:
    ct_pool_free(&P);
}

MG_TEST(cuda_comm_stream_ordered_by_events) {
    check_ordered_copy(t, false);
}

/* Stream marks: the same ordering through numbered points; a slot out of range is an error. */
MG_TEST(cuda_stream_marks_order_streams) {
    check_ordered_copy(t, true);
}

/* timer_mark / timer_seconds: points on the compute stream around a queue of long products; the
 * products take time, the spans add up (a to b plus b to c is a to c), a point out of range is an
 * error. */
MG_TEST(cuda_timer_measures_the_compute_stream) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    MG_EXPECT(g->timer_mark && g->timer_seconds, "the CUDA backend lacks its timer entries");
    if (!g->timer_mark || !g->timer_seconds) return;
    ct_pool P = ct_pool_of(t, g);
    enum { G = 4096 };
    size_t n = (size_t)G * G;
    float *a = ct_uniform_act(&P, 10, n, -1, 1);
    void *da = ct_up_act(&P, a, n), *dout = ct_poison_act(&P, n);
    if (P.failed) goto done;
    MG_EXPECT_OK(g->timer_mark(g, 0));
    for (int r = 0; r < 10; r++)
        MG_EXPECT_OK(g->linear_forward(g, dout, da, da, NULL, NULL, G, G, G));
    MG_EXPECT_OK(g->timer_mark(g, 1));
    MG_EXPECT_OK(g->linear_forward(g, dout, da, da, NULL, NULL, G, G, G));
    MG_EXPECT_OK(g->timer_mark(g, MG_TIMER_POINTS - 1));
    double ab = 0, bc = 0, ac = 0;
    MG_EXPECT_OK(g->timer_seconds(g, 0, 1, &ab));
    MG_EXPECT_OK(g->timer_seconds(g, 1, MG_TIMER_POINTS - 1, &bc));
    MG_EXPECT_OK(g->timer_seconds(g, 0, MG_TIMER_POINTS - 1, &ac));
    /* ten 4096^3 products: at least 1.4 TFLOP, over 1 ms on any GPU this builds for */
    MG_EXPECT(ab > 1e-3 && bc > 0 && bc < ab && fabs(ab + bc - ac) < 1e-5,
              "spans %.6f + %.6f s, whole %.6f s", ab, bc, ac);
    MG_EXPECT_ERROR(g->timer_mark(g, MG_TIMER_POINTS), MG_ERR_INTERNAL, "timer point");
done:
    ct_pool_free(&P);
}
