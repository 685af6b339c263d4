/* The matrix-multiply peak of the CUDA backend in its compute dtype h16 (bf16 or fp16), measured in
 * the running process: an optional entry of the table (matmul_peak_tflops), used by `megatron
 * bench`.
 *
 * The product is D = A B with A, B, D (n, n) h16 and fp32 accumulation (CUBLAS_COMPUTE_32F, fp32
 * alpha and beta = 0): the product torch.matmul does on two bf16 (fp16) tensors, so the PyTorch
 * baseline (bench/baselines/torch_gpt2.py) measures the same thing. The inputs are uniform in
 * [-1, 1), never zeros (a bf16 product on zeros ran 13% faster on an H200 of this workplace);
 * each (n, n) h16 matrix of the default n = 8192 is 128 MiB, far larger than L2, so one set of
 * inputs is not a cache measurement. cuBLASLt's first usable heuristic choice, the backend's
 * workspace (up to 32 MiB); PEAK_WARMUP untimed products, then PEAK_REPS products each between
 * two CUDA events on the compute stream; the median of their times gives 2 n^3 / t.
 * Exports: mg_cuda_matmul_peak_tflops. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"

#include <algorithm>
#include <stdint.h>

#define PEAK_WARMUP     10
#define PEAK_REPS       20
#define PEAK_DEFAULT_N  8192
#define PEAK_WS_MAX     ((size_t)32 << 20)
#define PEAK_HEURISTICS 8

/* p[i] = uniform in [-1, 1) from a hash of (i, seed). */
template <typename h16> static __global__ void peak_fill_kernel(h16 *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B9u ^ (uint32_t)(i >> 32) ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        h *= 0x846ca68bu;
        h ^= h >> 16;
        p[i] = f_to_h16<h16>((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

/* Everything the measurement holds, released by peak_release whatever happened. */
typedef struct {
    void *a, *b, *d;
    cudaEvent_t ev[2 * PEAK_REPS];
    int n_events;
} peak_res;

static void peak_release(mg_backend *be, peak_res *r) {
    for (int i = 0; i < r->n_events; i++) (void)cudaEventDestroy(r->ev[i]);
    mg_cuda_free(be, r->a);
    mg_cuda_free(be, r->b);
    mg_cuda_free(be, r->d);
}

template <typename h16>
static mg_status peak_run(mg_backend *be, peak_res *r, int n, double *tflops) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cudaStream_t stream = ctx->stream;
    size_t elems = (size_t)n * (size_t)n, bytes = elems * sizeof(h16);
    MG_CHECK(mg_cuda_alloc(be, bytes, &r->a));
    MG_CHECK(mg_cuda_alloc(be, bytes, &r->b));
    MG_CHECK(mg_cuda_alloc(be, bytes, &r->d));
    unsigned blocks = (unsigned)std::min<size_t>((size_t)ctx->num_sms * 8, MG_CUDA_MAX_BLOCKS);
    peak_fill_kernel<h16><<<blocks, MG_CUDA_THREADS, 0, stream>>>((h16 *)r->a, elems, 0x1234u);
    MG_CUDA_CHECK_LAUNCH();
    peak_fill_kernel<h16><<<blocks, MG_CUDA_THREADS, 0, stream>>>((h16 *)r->b, elems, 0xabcdu);
    MG_CUDA_CHECK_LAUNCH();
    for (; r->n_events < 2 * PEAK_REPS; r->n_events++)
        MG_CUDA_CHECK(cudaEventCreate(&r->ev[r->n_events]));

    /* column-major (n, n) everywhere: D = A B, no transposes */
    cublasLtMatmulDescOpaque_t desc_mem;
    cublasLtMatmulDesc_t desc = &desc_mem;
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
    MG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MG_CUBLAS_CHECK(
        cublasLtMatrixLayoutInit(&la, mg_h16<h16>::cuda_r, (uint64_t)n, (uint64_t)n, n));
    MG_CUBLAS_CHECK(
        cublasLtMatrixLayoutInit(&lb, mg_h16<h16>::cuda_r, (uint64_t)n, (uint64_t)n, n));
    MG_CUBLAS_CHECK(
        cublasLtMatrixLayoutInit(&ld, mg_h16<h16>::cuda_r, (uint64_t)n, (uint64_t)n, n));
    uint64_t ws = std::min(ctx->workspace_bytes, PEAK_WS_MAX);
    cublasLtMatmulPreferenceOpaque_t pref_mem;
    cublasLtMatmulPreference_t pref = &pref_mem;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res[PEAK_HEURISTICS];
    int found = 0;
    MG_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, &la, &lb, &ld, &ld, pref,
                                                   PEAK_HEURISTICS, res, &found));
    int pick = -1;
    for (int i = 0; i < found && pick < 0; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws) pick = i;
    if (pick < 0)
        return MG_FAIL(
            MG_ERR_UNSUPPORTED,
            "cuBLASLt has no algorithm for the %s peak product %d x %d x %d (%d candidates)",
            mg_h16<h16>::name, n, n, n, found);
    const float alpha = 1.0f, beta = 0.0f;
#define PEAK_MATMUL()                                                                              \
    MG_CUBLAS_CHECK(cublasLtMatmul(ctx->lt, desc, &alpha, r->a, &la, r->b, &lb, &beta, r->d, &ld,  \
                                   r->d, &ld, &res[pick].algo, ctx->workspace, ws, stream))
    for (int i = 0; i < PEAK_WARMUP; i++) PEAK_MATMUL();
    for (int i = 0; i < PEAK_REPS; i++) {
        MG_CUDA_CHECK(cudaEventRecord(r->ev[2 * i], stream));
        PEAK_MATMUL();
        MG_CUDA_CHECK(cudaEventRecord(r->ev[2 * i + 1], stream));
    }
#undef PEAK_MATMUL
    ctx->n_host_syncs++;
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
    float ms[PEAK_REPS];
    for (int i = 0; i < PEAK_REPS; i++)
        MG_CUDA_CHECK(cudaEventElapsedTime(&ms[i], r->ev[2 * i], r->ev[2 * i + 1]));
    std::sort(ms, ms + PEAK_REPS);
    double median_s = 0.5e-3 * ((double)ms[(PEAK_REPS - 1) / 2] + (double)ms[PEAK_REPS / 2]);
    if (!(median_s > 0))
        return MG_FAIL(MG_ERR_INTERNAL, "%s peak product: median time %g ms is not positive",
                       mg_h16<h16>::name, median_s * 1e3);
    *tflops = 2.0 * (double)n * (double)n * (double)n / median_s / 1e12;
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, matmul_peak_tflops, (mg_backend * be, int n, double *tflops),
               (be, n, tflops)) {
    *tflops = 0;
    if (mg_cuda_capturing(be)) return mg_cuda_refuse_in_capture(be, "matmul_peak_tflops");
    if (n <= 0) n = PEAK_DEFAULT_N;
    peak_res r = {};
    mg_status st = peak_run<h16>(be, &r, n, tflops);
    /* after a failure the stream may still hold products that read the buffers */
    (void)cudaStreamSynchronize(mg_cuda_stream(be));
    peak_release(be, &r);
    return st;
}
