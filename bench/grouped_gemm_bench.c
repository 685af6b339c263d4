/* The experts' grouped GEMM against one dense cuBLASLt GEMM of the same FLOPs, on the CUDA
 * backend (src/backend/cuda/grouped_gemm.cu).
 *   build/grouped_gemm_bench [--iters 10] [--reps 5]
 * Shapes: 8 experts, T*k = 16384 rows, the two expert layers of a Mixtral-like block with
 * hidden 1024 and FFN 2816 under SwiGLU: fc1 IC=1024, OC=2*2816 and fc2 IC=2816, OC=1024;
 * forward (out = x W^T), backward (dinp and dW, no bias, no GELU) and dW alone (dinp NULL; the
 * dense dW of the same FLOPs accumulates one (OC, IC) fp32 matrix where the grouped one
 * accumulates eight, 8x the fp32 traffic); both again with the grouped dW written over rather
 * than accumulated (bwd-over, dw-over: the first micro-batch of a step, whose gradients were not
 * zeroed; the dense baseline still accumulates). Counts: balanced (2048
 * each), skewed (6144 .. 256) and hot (12288, 4096, then six empty experts). The dense baseline
 * is the backend's linear_forward / linear_backward on all 16384 rows with one weight, so the
 * FLOPs are the same: 2 R IC OC forward and dW alone, 4 R IC OC backward.
 *
 * Timing: each op is captured `iters` times into one CUDA graph on the compute stream
 * (cudaStreamBeginCapture, global mode), replayed once to warm up, then `reps` replays are timed
 * with CUDA events; the median per op is reported. The capture is also the host-sync check: a
 * stream synchronisation, a blocking copy or a cudaMalloc inside an op invalidates a global-mode
 * capture, and the backend's own counters of host syncs and device allocations must not move
 * across it; the bench fails if either happens. Every input is seeded random (GEMMs on zeros
 * run faster). The grouped op is the backend table's entry (MG_GROUPED_GEMM: CUTLASS by default
 * where available) and the portable kernel, each reported.
 * Prints a table and one JSON line per measurement. */
#define BENCH_NAME "grouped_gemm_bench"
#include "bench_backend.h"

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"
#include "core/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E        8
#define ROWS     16384
#define MAX_REPS 32

typedef mg_status (*fwd_fn)(mg_backend *, void *, const void *, void *const *, void *const *,
                            const int32_t *, int, int, int, int);
typedef mg_status (*bwd_fn)(mg_backend *, void *, float *const *, float *const *, const void *,
                            const void *, void *const *, const void *, const int32_t *, int, int,
                            int, int, bool);

typedef struct {
    void *x, *y, *dy, *dx; /* (ROWS, IC or OC) activations */
    void *w[E];            /* (OC, IC) bf16 */
    float *dw[E];          /* (OC, IC) fp32 */
    void *const *w_arr;    /* device arrays of the E pointers */
    float *const *dw_arr;
    int32_t *counts; /* (E) */
} bufs;

typedef struct {
    int grouped, backward; /* backward: 1 dinp and dW, 2 dW alone (dinp NULL); 3, 4: the same
                              with dW written over (the first micro-batch of a step) */
    fwd_fn gf;
    bwd_fn gb;
    int IC, OC;
} op;

/* n elements of seeded uniform values in [-a, a): one host chunk, repeated */
static void fill(mg_backend *be, void *p, size_t n, int f32, float a, uint64_t seed) {
    enum { CHUNK = 1 << 20 };
    static float host[CHUNK];
    for (size_t i = 0; i < CHUNK; i++) host[i] = a * (2.0f * mg_rng_uniform(seed, 0, i) - 1.0f);
    size_t esz = f32 ? 4 : 2;
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        mg_status st = f32 ? be->copy_h2d(be, (char *)p + off * esz, host, m * 4)
                           : be->upload_f32(be, (char *)p + off * esz, host, m);
        if (st != MG_OK) die("fill");
    }
}

static mg_status run(mg_backend *be, const op *o, const bufs *b) {
    if (!o->grouped && !o->backward)
        return be->linear_forward(be, b->y, b->x, b->w[0], NULL, NULL, ROWS, o->IC, o->OC);
    void *dx = o->backward % 2 == 0 ? NULL : b->dx;
    if (!o->grouped)
        return be->linear_backward(be, dx, b->dw[0], NULL, b->dy, b->x, b->w[0], NULL, ROWS, o->IC,
                                   o->OC);
    if (!o->backward) return o->gf(be, b->y, b->x, b->w_arr, NULL, b->counts, 1, E, o->IC, o->OC);
    return o->gb(be, dx, b->dw_arr, NULL, b->dy, b->x, b->w_arr, NULL, b->counts, 1, E, o->IC,
                 o->OC, o->backward < 3);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of one op over `reps` replays of a graph of `iters` ops. */
static double time_op(mg_backend *be, const op *o, const bufs *b, int iters, int reps) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cudaStream_t s = ctx->stream;
    if (run(be, o, b) != MG_OK) die("warm-up"); /* plans, attributes: outside the capture */
    if (be->synchronize(be) != MG_OK) die("synchronize");
    uint64_t syncs = ctx->n_host_syncs, allocs = ctx->n_device_allocs;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) die("capture");
    for (int i = 0; i < iters; i++)
        if (run(be, o, b) != MG_OK) {
            (void)cudaStreamEndCapture(s, &graph);
            die("op inside the capture");
        }
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (e != cudaSuccess || ctx->n_host_syncs != syncs || ctx->n_device_allocs != allocs) {
        fprintf(stderr,
                "grouped_gemm_bench: the op synchronised with the host or allocated inside the "
                "capture (%s; host syncs +%llu, allocations +%llu)\n",
                cudaGetErrorString(e), (unsigned long long)(ctx->n_host_syncs - syncs),
                (unsigned long long)(ctx->n_device_allocs - allocs));
        exit(1);
    }
    cudaEvent_t ev[2];
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
        cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess ||
        cudaGraphLaunch(exec, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        fprintf(stderr, "grouped_gemm_bench: graph: %s\n", cudaGetErrorString(cudaGetLastError()));
        exit(1);
    }
    float ms[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        if (cudaEventRecord(ev[0], s) != cudaSuccess || cudaGraphLaunch(exec, s) != cudaSuccess ||
            cudaEventRecord(ev[1], s) != cudaSuccess ||
            cudaEventSynchronize(ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&ms[r], ev[0], ev[1]) != cudaSuccess) {
            fprintf(stderr, "grouped_gemm_bench: timing: %s\n",
                    cudaGetErrorString(cudaGetLastError()));
            exit(1);
        }
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    qsort(ms, reps, sizeof *ms, cmp_f);
    return ms[reps / 2] / iters;
}

int main(int argc, char **argv) {
    int iters = 10, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: grouped_gemm_bench [--iters N] [--reps N (<= %d)]\n", MAX_REPS);
            return 2;
        }
    }
    if (iters < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "grouped_gemm_bench: --iters >= 1, 1 <= --reps <= %d\n", MAX_REPS);
        return 2;
    }
    mg_backend *be = NULL;
    if (mg_backend_cuda_create(&be, 0) != MG_OK) die("cuda backend");
    int device = mg_cuda_ctx_of(be)->device;
    const char *table = be->grouped_linear_forward == mg_cuda_grouped_linear_forward_portable
                            ? "portable"
                        : mg_cuda_grouped_cutlass_available(device) ? "cutlass"
                                                                    : "portable";
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) die("device properties");

    const int layers[2][2] = {{1024, 2 * 2816}, {2816, 1024}}; /* IC, OC */
    const size_t max_w = (size_t)1024 * 2 * 2816, max_a = (size_t)ROWS * 2 * 2816;
    bufs b;
    b.x = dev(be, max_a * 2), b.y = dev(be, max_a * 2), b.dy = dev(be, max_a * 2);
    b.dx = dev(be, max_a * 2);
    fill(be, b.x, max_a, 0, 1.0f, 1), fill(be, b.dy, max_a, 0, 1.0f, 2);
    for (int j = 0; j < E; j++) {
        b.w[j] = dev(be, max_w * 2), b.dw[j] = dev(be, max_w * 4);
        fill(be, b.w[j], max_w, 0, 0.03f, 10 + j);
    }
    void **wa = dev(be, E * sizeof(void *)), **dwa = dev(be, E * sizeof(void *));
    if (be->copy_h2d(be, wa, b.w, sizeof b.w) != MG_OK ||
        be->copy_h2d(be, dwa, b.dw, sizeof b.dw) != MG_OK)
        die("pointer arrays");
    b.w_arr = (void *const *)wa, b.dw_arr = (float *const *)dwa;
    b.counts = dev(be, E * sizeof(int32_t));

    static const struct {
        const char *name;
        int32_t c[E];
    } cases[] = {
        {"balanced", {2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048}},
        {"skewed", {6144, 4096, 2048, 1536, 1024, 768, 512, 256}},
        {"hot", {12288, 4096, 0, 0, 0, 0, 0, 0}},
    };
    struct {
        const char *name;
        fwd_fn f;
        bwd_fn g;
    } impls[2] = {
        {table, be->grouped_linear_forward, be->grouped_linear_backward},
        {"portable", mg_cuda_grouped_linear_forward_portable,
         mg_cuda_grouped_linear_backward_portable},
    };
    int nimpl = strcmp(table, "portable") ? 2 : 1;

    printf("grouped_gemm_bench: %s, %d SMs; %d experts, %d rows; grouped GEMM of the table: %s; "
           "graph of %d ops, median of %d replays; host syncs and allocations inside: none (the "
           "capture would fail)\n",
           prop.name, prop.multiProcessorCount, E, ROWS, table, iters, reps);
    printf("%-9s %-4s %-8s %-9s %10s %10s %10s %10s %7s\n", "counts", "layer", "pass", "impl",
           "grouped ms", "TFLOP/s", "dense ms", "TFLOP/s", "ratio");
    static const char *const pass_name[5] = {"forward", "backward", "dw-only", "bwd-over",
                                             "dw-over"};
    for (int l = 0; l < 2; l++)
        for (int bwd = 0; bwd < 5; bwd++) {
            int IC = layers[l][0], OC = layers[l][1];
            double flops = (bwd % 2 == 1 ? 4.0 : 2.0) * ROWS * IC * OC;
            op dense = {0, bwd > 2 ? bwd - 2 : bwd, NULL, NULL, IC, OC};
            double dense_ms = time_op(be, &dense, &b, iters, reps);
            double dense_tf = flops / dense_ms * 1e-9;
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                if (be->copy_h2d(be, b.counts, cases[k].c, sizeof cases[k].c) != MG_OK)
                    die("counts");
                for (int m = 0; m < nimpl; m++) {
                    op g = {1, bwd, impls[m].f, impls[m].g, IC, OC};
                    double ms = time_op(be, &g, &b, iters, reps), tf = flops / ms * 1e-9;
                    printf("%-9s fc%d  %-8s %-9s %10.3f %10.1f %10.3f %10.1f %7.3f\n",
                           cases[k].name, l + 1, pass_name[bwd], impls[m].name, ms, tf, dense_ms,
                           dense_tf, tf / dense_tf);
                    printf("{\"bench\":\"grouped_gemm\",\"device\":\"%s\",\"counts\":\"%s\","
                           "\"IC\":%d,\"OC\":%d,\"rows\":%d,\"experts\":%d,\"pass\":\"%s\","
                           "\"impl\":\"%s\",\"grouped_ms\":%.4f,\"grouped_tflops\":%.1f,"
                           "\"dense_ms\":%.4f,\"dense_tflops\":%.1f,\"ratio\":%.3f,"
                           "\"host_syncs_in_capture\":0}\n",
                           prop.name, cases[k].name, IC, OC, ROWS, E, pass_name[bwd], impls[m].name,
                           ms, tf, dense_ms, dense_tf, tf / dense_tf);
                }
            }
        }
    be->destroy(be);
    return 0;
}
