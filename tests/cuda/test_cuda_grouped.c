/* CUDA backend against the CPU backend: the experts' grouped linear (grouped_gemm.cu), forward
 * (with and without bias) and backward (dinp with and without the GELU derivative, dbias or not,
 * no dinp), on skewed group sizes: empty groups, one group with every row, sizes that are not
 * multiples of the 128-row tile, one source (n_src = 1) and two sources sharing the weights
 * (n_src = 2, so two groups accumulate into each dW_j), and widths that are not multiples of 8
 * (the portable kernel's element-wise path), and depths on both sides of 2048 (CUTLASS's
 * ping-pong and cooperative kernels). Each case runs three ways: the backend's table entry, the
 * CUTLASS entry (CUTLASS where the build and the device have it, else the portable kernel: the
 * test says which) and the portable kernel itself. Method and tolerances:
 * cuda_test_util.h; dW and dbias are fp32 accumulated onto non-zero values, compared at
 * CT_TOL_F32. Rows past the groups must stay untouched (still poisoned).
 *
 * A second test captures forward and backward in a CUDA graph (capture fails on any host
 * synchronisation or allocation), then changes the counts on the device and replays: the replay
 * must equal an eager run with the new counts bit for bit, which shows the group sizes are read
 * on the device at run time. It also checks the backend's allocation and sync counters. */
#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>

#define GG_TAIL  3 /* rows after the groups, which the ops must not touch */
#define GG_MAX_W 8

static const int32_t k_skew[8] = {0, 1, 37, 0, 300, 129, 0, 7};
static const int32_t k_one[8] = {0, 0, 0, 333, 0, 0, 0, 0};
/* n_src 2 x n_w 4: weight 1 has no rows, weight 2 none from the first source */
static const int32_t k_two_src[8] = {5, 0, 0, 194, 0, 0, 257, 1};
static const int32_t k_empty[4] = {0, 0, 0, 0};

typedef struct {
    int IC, OC, n_src, n_w;
    const int32_t *counts;
} gg_case;

static const gg_case k_cases[] = {
    {64, 96, 1, 8, k_skew},
    {256, 384, 1, 8, k_skew},
    {1024, 512, 1, 8, k_skew},
    {96, 200, 1, 8, k_one},
    {256, 384, 2, 4, k_two_src},
    {200, 264, 2, 4, k_two_src},
    {36, 52, 2, 4, k_two_src}, /* widths not a multiple of 8 */
    {64, 96, 2, 2, k_empty},
    /* depth over 2048: CUTLASS's cooperative kernel for the forward, then for dinp */
    {2304, 136, 1, 8, k_skew},
    {72, 2112, 2, 4, k_two_src},
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

typedef mg_status (*gg_fwd_fn)(mg_backend *, void *, const void *, void *const *, void *const *,
                               const int32_t *, int, int, int, int);
typedef mg_status (*gg_bwd_fn)(mg_backend *, void *, float *const *, float *const *, const void *,
                               const void *, void *const *, const void *, const int32_t *, int, int,
                               int, int, bool);

typedef struct {
    const char *name;
    gg_fwd_fn fwd; /* NULL: the backend table's entry */
    gg_bwd_fn bwd;
} gg_impl;

/* The implementations to run on `g`: the table entry, and on the CUDA backend also the CUTLASS
 * entry (the portable kernel with fp16, whose grouped GEMM has no CUTLASS kernel) and the
 * portable kernel, in the backend's dtype. */
static int impls_of(mg_backend *g, gg_impl out[3]) {
    out[0] = (gg_impl){"table", NULL, NULL};
    if (g->device != MG_DEVICE_CUDA) return 1;
    out[1] = (gg_impl){"cutlass", CT_CUDA_OP(g, grouped_linear_forward),
                       CT_CUDA_OP(g, grouped_linear_backward)};
    out[2] = (gg_impl){"portable", CT_CUDA_OP(g, grouped_linear_forward_portable),
                       CT_CUDA_OP(g, grouped_linear_backward_portable)};
    return 3;
}

/* Every byte of rows [rows, rows + GG_TAIL) of a (.., width) compute-dtype buffer still 0xFF. */
static int tail_untouched(ct_pool *P, const void *d, int rows, int width) {
    size_t esz = mg_dtype_size(P->g->compute_dtype), bytes = (size_t)GG_TAIL * width * esz;
    const unsigned char *h = ct_down_raw(P, (const char *)d + (size_t)rows * width * esz, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (h[i] != 0xff) return 0;
    return 1;
}

static int total_rows(const gg_case *c) {
    int n = 0;
    for (int g = 0; g < c->n_src * c->n_w; g++) n += c->counts[g];
    return n;
}

/* The largest normalised error seen per implementation and output, printed at the end. */
static double g_max_err[3][4]; /* [impl][fwd, dinp, dw, dbias] */

static void note_err(int impl, int what, const float *got, const float *ref, size_t n) {
    double e = n ? mg_test_rel_err(got, ref, n) : 0.0;
    if (!(e <= g_max_err[impl][what])) g_max_err[impl][what] = e; /* NaN sticks */
}

MG_TEST(cuda_grouped_linear_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    gg_impl impls[3];
    int nimpl = impls_of(gpu, impls);
    if (gpu->device == MG_DEVICE_CUDA && gpu->compute_dtype == MG_F16) {
        printf("  grouped GEMM: the 'cutlass' entries run the portable kernel (CUTLASS's is bf16 "
               "only)\n");
    } else if (gpu->device == MG_DEVICE_CUDA) {
        mg_status st = mg_cuda_grouped_cutlass_init(mg_cuda_ctx_of(gpu)->device);
        printf("  grouped GEMM: the 'cutlass' entries run %s\n",
               st == MG_OK ? "CUTLASS (sm_90a)" : mg_error_message());
        mg_error_clear();
    }
    for (size_t k = 0; k < NCASES; k++) {
        const gg_case c = k_cases[k];
        const int G = c.n_src * c.n_w, rows = total_rows(&c), R = rows + GG_TAIL;
        const size_t ni = (size_t)R * c.IC, no = (size_t)R * c.OC, nw = (size_t)c.OC * c.IC;
        ct_pool P = ct_pool_of(t, gpu);
        float *inp = ct_rand_act(&P, 300, ni, 1.0f), *dout = ct_rand_act(&P, 301, no, 1.0f);
        float *pre = ct_rand_act(&P, 302, ni, 2.0f); /* GELU input: both signs, the bend */
        float *w = ct_rand_act(&P, 303, nw * c.n_w, 1.0f / sqrtf((float)(c.IC + 1)));
        float *b = ct_rand_act(&P, 304, (size_t)c.OC * c.n_w, 0.5f);
        float *dw0 = ct_uniform_f32(&P, 305, nw * c.n_w, -1.0f, 1.0f);
        float *db0 = ct_uniform_f32(&P, 306, (size_t)c.OC * c.n_w, -1.0f, 1.0f);
        /* CPU: host memory is its backend memory, so the pointer arrays are plain arrays */
        void *hw[GG_MAX_W], *hb[GG_MAX_W], *hdw[GG_MAX_W], *hdb[GG_MAX_W];
        float *ref_dw = ct_host(&P, nw * c.n_w * 4),
              *ref_db = ct_host(&P, (size_t)c.OC * c.n_w * 4);
        for (int j = 0; j < c.n_w; j++) {
            hw[j] = w + j * nw, hb[j] = b + (size_t)j * c.OC;
            hdw[j] = ref_dw + j * nw, hdb[j] = ref_db + (size_t)j * c.OC;
        }
        void *dwb[GG_MAX_W], *dbb[GG_MAX_W], *wb[GG_MAX_W], *bb[GG_MAX_W];
        int32_t *d_counts = ct_up_i32(&P, c.counts, G);
        void *d_inp = ct_up_act(&P, inp, ni), *d_dout = ct_up_act(&P, dout, no);
        void *d_pre = ct_up_act(&P, pre, ni);
        void *const *d_w = ct_up_ptrs(&P, w, c.n_w, nw, 0, wb);
        void *const *d_b = ct_up_ptrs(&P, b, c.n_w, c.OC, 0, bb);
        float *const *d_dw = (float *const *)ct_up_ptrs(&P, dw0, c.n_w, nw, 1, dwb);
        float *const *d_db = (float *const *)ct_up_ptrs(&P, db0, c.n_w, c.OC, 1, dbb);
        if (P.failed) goto next;

        for (int bias = 0; bias < 2; bias++) {
            float *ref = ct_host(&P, no * 4);
            MG_EXPECT_OK(cpu->grouped_linear_forward(cpu, ref, inp, hw, bias ? hb : NULL, c.counts,
                                                     c.n_src, c.n_w, c.IC, c.OC));
            for (int m = 0; m < nimpl; m++) {
                ct_pool Q = ct_pool_of(t, gpu);
                void *d_out = ct_poison_act(&Q, no);
                if (!Q.failed) {
                    gg_fwd_fn f = impls[m].fwd ? impls[m].fwd : gpu->grouped_linear_forward;
                    MG_EXPECT_OK(f(gpu, d_out, d_inp, d_w, bias ? d_b : NULL, d_counts, c.n_src,
                                   c.n_w, c.IC, c.OC));
                    float *got = ct_down_act(&Q, d_out, (size_t)rows * c.OC);
                    CT_EXPECT_CLOSE(got, ref, (size_t)rows * c.OC, CT_TOL_GEMM,
                                    "grouped forward [%s] case %zu IC=%d OC=%d bias=%d",
                                    impls[m].name, k, c.IC, c.OC, bias);
                    note_err(m, 0, got, ref, (size_t)rows * c.OC);
                    MG_EXPECT(tail_untouched(&Q, d_out, rows, c.OC),
                              "grouped forward [%s] case %zu wrote past the groups", impls[m].name,
                              k);
                }
                ct_pool_free(&Q);
            }
        }

        /* variant bit 0: through the GELU (gelu_pre); bit 1: dbias; 4: no dinp, dbias; 5, 6: 2
         * and 3 with dw and dbias written over (NaN before: every element must be written) */
        for (int v = 0; v < 7; v++) {
            int acc = v < 5, vv = acc ? v : v - 3;
            int gelu = vv < 4 && (vv & 1), want_db = vv >= 2, want_dinp = vv < 4;
            float *ref_dinp = ct_host(&P, ni * 4);
            memcpy(ref_dw, dw0, nw * c.n_w * 4);
            memcpy(ref_db, db0, (size_t)c.OC * c.n_w * 4);
            MG_EXPECT_OK(cpu->grouped_linear_backward(
                cpu, want_dinp ? ref_dinp : NULL, (float *const *)hdw,
                want_db ? (float *const *)hdb : NULL, dout, inp, hw, gelu ? pre : NULL, c.counts,
                c.n_src, c.n_w, c.IC, c.OC, acc));
            size_t n_nan = nw > (size_t)c.OC ? nw : (size_t)c.OC;
            float *nan_dw = ct_host(&P, n_nan * 4);
            for (size_t i = 0; i < n_nan; i++) nan_dw[i] = NAN;
            for (int m = 0; m < nimpl; m++) {
                ct_pool Q = ct_pool_of(t, gpu);
                void *d_dinp = ct_poison_act(&Q, ni);
                for (int j = 0; j < c.n_w; j++) {
                    ct_put_f32(&Q, dwb[j], acc ? dw0 + j * nw : nan_dw, nw);
                    ct_put_f32(&Q, dbb[j], acc ? db0 + (size_t)j * c.OC : nan_dw, c.OC);
                }
                if (!Q.failed) {
                    gg_bwd_fn f = impls[m].bwd ? impls[m].bwd : gpu->grouped_linear_backward;
                    MG_EXPECT_OK(f(gpu, want_dinp ? d_dinp : NULL, d_dw, want_db ? d_db : NULL,
                                   d_dout, d_inp, d_w, gelu ? d_pre : NULL, d_counts, c.n_src,
                                   c.n_w, c.IC, c.OC, acc));
                    if (want_dinp) {
                        float *got = ct_down_act(&Q, d_dinp, (size_t)rows * c.IC);
                        CT_EXPECT_CLOSE(got, ref_dinp, (size_t)rows * c.IC, CT_TOL_GEMM,
                                        "grouped backward dinp [%s] case %zu IC=%d OC=%d gelu=%d",
                                        impls[m].name, k, c.IC, c.OC, gelu);
                        note_err(m, 1, got, ref_dinp, (size_t)rows * c.IC);
                        MG_EXPECT(tail_untouched(&Q, d_dinp, rows, c.IC),
                                  "grouped backward [%s] case %zu wrote dinp past the groups",
                                  impls[m].name, k);
                    }
                    float *got_dw = ct_host(&Q, nw * c.n_w * 4);
                    float *got_db = ct_host(&Q, (size_t)c.OC * c.n_w * 4);
                    for (int j = 0; j < c.n_w; j++) {
                        if (gpu->copy_d2h(gpu, got_dw + j * nw, dwb[j], nw * 4) != MG_OK ||
                            gpu->copy_d2h(gpu, got_db + (size_t)j * c.OC, dbb[j], c.OC * 4) !=
                                MG_OK)
                            MG_EXPECT(0, "download: %s", mg_error_message());
                    }
                    CT_EXPECT_CLOSE(got_dw, ref_dw, nw * c.n_w, CT_TOL_F32,
                                    "grouped backward dw [%s] case %zu IC=%d OC=%d variant %d",
                                    impls[m].name, k, c.IC, c.OC, v);
                    note_err(m, 2, got_dw, ref_dw, nw * c.n_w);
                    if (want_db) {
                        CT_EXPECT_CLOSE(got_db, ref_db, (size_t)c.OC * c.n_w, CT_TOL_F32,
                                        "grouped backward dbias [%s] case %zu OC=%d variant %d",
                                        impls[m].name, k, c.OC, v);
                        note_err(m, 3, got_db, ref_db, (size_t)c.OC * c.n_w);
                    } else {
                        MG_EXPECT(memcmp(got_db, db0, (size_t)c.OC * c.n_w * 4) == 0,
                                  "grouped backward [%s] case %zu: dbias changed though NULL",
                                  impls[m].name, k);
                    }
                }
                ct_pool_free(&Q);
            }
        }
    next:
        ct_pool_free(&P);
    }
    for (int m = 0; m < nimpl; m++)
        printf("  grouped GEMM [%s] max normalised error: forward %.3g, dinp %.3g, dw %.3g, "
               "dbias %.3g\n",
               impls[m].name, g_max_err[m][0], g_max_err[m][1], g_max_err[m][2], g_max_err[m][3]);
}

/* Bad shapes are refused with a message naming them; nothing is launched. */
MG_TEST(cuda_grouped_linear_rejects_bad_shapes) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    MG_EXPECT_ERROR(g->grouped_linear_forward(g, NULL, NULL, NULL, NULL, NULL, 0, 4, 64, 64),
                    MG_ERR_INTERNAL, "n_src=0");
    MG_EXPECT_ERROR(g->grouped_linear_backward(g, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1,
                                               2, -8, 64, true),
                    MG_ERR_INTERNAL, "IC=-8");
}

/* One eager forward + backward (dw reset to dw0 first) into out, dinp, dw. */
static void run_eager(mg_test_ctx *t, ct_pool *P, mg_backend *g, const gg_case *c, void *out,
                      void *dinp, void **dwb, float *const *d_dw, const float *dw0, void *inp,
                      void *dout, void *pre, void *const *d_w, const int32_t *d_counts) {
    size_t nw = (size_t)c->OC * c->IC;
    for (int j = 0; j < c->n_w; j++) ct_put_f32(P, dwb[j], dw0 + j * nw, nw);
    MG_EXPECT_OK(g->grouped_linear_forward(g, out, inp, d_w, NULL, d_counts, c->n_src, c->n_w,
                                           c->IC, c->OC));
    MG_EXPECT_OK(g->grouped_linear_backward(g, dinp, d_dw, NULL, dout, inp, d_w, pre, d_counts,
                                            c->n_src, c->n_w, c->IC, c->OC, true));
}

MG_TEST(cuda_grouped_linear_graph_replay_reads_device_counts) {
    mg_backend *g = ct_cuda(t);
    if (!g) return;
    static const int32_t counts_b[8] = {200, 3, 0, 0, 0, 129, 64, 61}; /* same total as k_two_src */
    const gg_case c = {256, 384, 2, 4, k_two_src};
    const int G = 8, rows = total_rows(&c), R = rows + GG_TAIL;
    const size_t ni = (size_t)R * c.IC, no = (size_t)R * c.OC, nw = (size_t)c.OC * c.IC;
    ct_pool P = ct_pool_of(t, g);
    float *inp = ct_rand_act(&P, 310, ni, 1.0f), *dout = ct_rand_act(&P, 311, no, 1.0f);
    float *pre = ct_rand_act(&P, 312, ni, 2.0f);
    float *w = ct_rand_act(&P, 313, nw * c.n_w, 0.0625f);
    float *dw0 = ct_uniform_f32(&P, 314, nw * c.n_w, -1.0f, 1.0f);
    void *wb[GG_MAX_W], *dwb[GG_MAX_W];
    int32_t *d_counts = ct_up_i32(&P, c.counts, G);
    void *d_inp = ct_up_act(&P, inp, ni), *d_dout = ct_up_act(&P, dout, no);
    void *d_pre = ct_up_act(&P, pre, ni);
    void *const *d_w = ct_up_ptrs(&P, w, c.n_w, nw, 0, wb);
    float *const *d_dw = (float *const *)ct_up_ptrs(&P, dw0, c.n_w, nw, 1, dwb);
    void *e_out = ct_poison_act(&P, no), *e_dinp = ct_poison_act(&P, ni);
    void *r_out = ct_poison_act(&P, no), *r_dinp = ct_poison_act(&P, ni);
    float *e_dw = ct_host(&P, nw * c.n_w * 4), *r_dw = ct_host(&P, nw * c.n_w * 4);
    cudaStream_t stream = mg_cuda_stream(g);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (P.failed) goto done;

    /* warm-up: plans and attributes are set outside the capture */
    run_eager(t, &P, g, &c, e_out, e_dinp, dwb, d_dw, dw0, d_inp, d_dout, d_pre, d_w, d_counts);
    size_t esz = mg_dtype_size(g->compute_dtype), out_bytes = (size_t)rows * c.OC * esz;
    const void *out_a = ct_down_raw(&P, e_out, out_bytes); /* with the first counts */
    uint64_t allocs = ct_allocs(g), syncs = ct_syncs(g);
    MG_EXPECT_OK(g->grouped_linear_forward(g, e_out, d_inp, d_w, NULL, d_counts, c.n_src, c.n_w,
                                           c.IC, c.OC));
    MG_EXPECT_OK(g->grouped_linear_backward(g, e_dinp, d_dw, NULL, d_dout, d_inp, d_w, d_pre,
                                            d_counts, c.n_src, c.n_w, c.IC, c.OC, true));
    MG_EXPECT(ct_allocs(g) == allocs && ct_syncs(g) == syncs,
              "grouped linear allocated (%llu) or synchronised (%llu)",
              (unsigned long long)(ct_allocs(g) - allocs),
              (unsigned long long)(ct_syncs(g) - syncs));

    /* capture with the first counts, replay with the second */
    MG_EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess,
              "begin capture");
    mg_status s1 =
        g->grouped_linear_forward(g, r_out, d_inp, d_w, NULL, d_counts, c.n_src, c.n_w, c.IC, c.OC);
    mg_status s2 = g->grouped_linear_backward(g, r_dinp, d_dw, NULL, d_dout, d_inp, d_w, d_pre,
                                              d_counts, c.n_src, c.n_w, c.IC, c.OC, true);
    cudaError_t ce = cudaStreamEndCapture(stream, &graph);
    MG_EXPECT(s1 == MG_OK && s2 == MG_OK && ce == cudaSuccess,
              "capture of the grouped linear failed: %s / %s", mg_error_message(),
              cudaGetErrorString(ce));
    if (ce != cudaSuccess || !graph) {
        (void)cudaGetLastError();
        goto done;
    }
    MG_EXPECT(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "graph instantiate");
    if (!exec) goto done;

    if (g->copy_h2d(g, d_counts, counts_b, sizeof counts_b) != MG_OK) P.failed = 1;
    for (int j = 0; j < c.n_w; j++) ct_put_f32(&P, dwb[j], dw0 + j * nw, nw);
    MG_EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess, "graph launch");
    MG_EXPECT_OK(g->synchronize(g));
    for (int j = 0; j < c.n_w; j++)
        if (g->copy_d2h(g, r_dw + j * nw, dwb[j], nw * 4) != MG_OK) P.failed = 1;
    run_eager(t, &P, g, &c, e_out, e_dinp, dwb, d_dw, dw0, d_inp, d_dout, d_pre, d_w, d_counts);
    for (int j = 0; j < c.n_w; j++)
        if (g->copy_d2h(g, e_dw + j * nw, dwb[j], nw * 4) != MG_OK) P.failed = 1;
    const void *out_b = ct_down_raw(&P, e_out, out_bytes);
    CT_EXPECT_SAME_BITS(ct_down_raw(&P, r_out, out_bytes), out_b, out_bytes,
                        "graph replay forward, new counts");
    CT_EXPECT_SAME_BITS(ct_down_raw(&P, r_dinp, (size_t)rows * c.IC * esz),
                        ct_down_raw(&P, e_dinp, (size_t)rows * c.IC * esz),
                        (size_t)rows * c.IC * esz, "graph replay dinp, new counts");
    CT_EXPECT_SAME_BITS(r_dw, e_dw, nw * c.n_w * 4, "graph replay dw, new counts");
    /* the new counts give another result (rows moved between the weights), so the replay did
     * not just repeat the captured sizes */
    MG_EXPECT(memcmp(out_a, out_b, out_bytes) != 0, "the two counts gave the same forward");
done:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    ct_pool_free(&P);
}
