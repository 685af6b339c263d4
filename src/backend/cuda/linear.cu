/* Linear layer on the GPU: out = inp @ w^T + bias, w stored (OC, IC) as torch.nn.Linear, bf16
 * activations and weights, fp32 main grads. The three products go to cuBLASLt with fp32 compute
 * (CUBLAS_COMPUTE_32F, fp32 alpha/beta); the bias gradient is a deterministic two-pass reduction
 * of our own (below).
 *
 * cuBLASLt is column-major; a row-major (R, C) matrix is the column-major (C, R) matrix with
 * ld = C, i.e. its transpose. So every product is written for the transposes:
 *   forward  out (OC,N)  = T(w (IC,OC)) . inp (IC,N)          m=OC n=N  k=IC
 *   dinp     dinp (IC,N) = w (IC,OC) . dout (OC,N)             m=IC n=N  k=OC
 *   dw       dw (IC,OC) += inp (IC,N) . T(dout (OC,N))         m=IC n=OC k=N
 * (all shapes here column-major, as cuBLASLt sees the row-major buffers; T = CUBLAS_OP_T)
 * The forward bias has length m = OC = rows of D, which is exactly what CUBLASLT_EPILOGUE_BIAS
 * broadcasts. dw uses bf16 A/B with fp32 C = D and beta = 1: a combination cuBLASLt supports for
 * CUBLAS_COMPUTE_32F (A/B CUDA_R_16BF, C/D CUDA_R_32F), and it gives the ACCUMULATE contract
 * without a temporary.
 *
 * Why not the BGRADB epilogue for dbias: it writes (never accumulates) the bias gradient in the
 * output type, so it would still need a temporary and an add, its availability depends on the
 * heuristic for each shape, and its summation order is the library's. The reduction below costs
 * one read of dout (small next to the dw product reading it too) and is bitwise reproducible.
 *
 * Plans (descriptors, layouts, heuristic's algo) are cached per (op, shape, pointer alignments,
 * device, workspace size) in a static fixed-size table. The cuBLASLt descriptors are the
 * semi-opaque kind initialised in place (cublasLt*Init), so the cache allocates nothing, ever:
 * first use of a shape costs one heuristic query (host only, no synchronisation), later uses a
 * linear scan. Pointer alignment is part of the key because the heuristic chooses kernels for the
 * alignment it is told (default 256 bytes), and activations may live at any 2-byte offset.
 *
 * Workspace (mg_cuda_ctx.workspace, all stream-ordered on the compute stream):
 *   [0, MG_LT_WS_MAX)                      cuBLASLt workspace (or all of it if smaller)
 *   then ceil(N / rows_per_chunk) * OC fp32  dbias partial sums, at most 64 * OC floats
 *   (64 * 50304 * 4 B = 12.9 MB for the largest vocabulary-sized OC).
 * Exports: mg_cuda_linear_forward, mg_cuda_linear_backward. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"

#include <cuda_bf16.h>
#include <mutex>
#include <stdint.h>
#include <string.h>

#define MG_LT_WS_MAX        ((size_t)32 << 20) /* cuBLAS's recommended workspace on Hopper */
#define MG_LT_CACHE_SIZE    64                 /* a model uses ~4 linear shapes x 3 products */
#define MG_LT_HEURISTICS    8                  /* candidates asked from the heuristic */
#define MG_DBIAS_COLS       32                 /* columns per block: one warp-wide row segment */
#define MG_DBIAS_WARPS      8
#define MG_DBIAS_MAX_CHUNKS 64

typedef enum { GEMM_FWD = 0, GEMM_DINP, GEMM_DW } gemm_op;

/* Everything that selects a plan. Alignments are in bytes (power of two, capped at 256). */
typedef struct {
    int device, op, m, n, k, has_bias;
    uint32_t align_a, align_b, align_c, align_bias;
    size_t ws_bytes;
} gemm_key;

typedef struct {
    int used;
    gemm_key key;
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

/* Process-wide: plans depend on the device (in the key), not on the cuBLASLt handle. The mutex
 * also covers the per-call bias-pointer update of a shared descriptor and the enqueue that reads
 * it. */
static gemm_plan g_plans[MG_LT_CACHE_SIZE];
static unsigned g_next_evict;
static std::mutex g_plans_mu;

/* The part of the workspace cuBLASLt gets: [0, lt_workspace_bytes); the dbias partials follow. */
static size_t lt_workspace_bytes(const mg_cuda_ctx *ctx) {
    return ctx->workspace_bytes < MG_LT_WS_MAX ? ctx->workspace_bytes : MG_LT_WS_MAX;
}

static uint32_t ptr_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    if (v == 0) return 256;
    uint32_t a = (uint32_t)(v & (~v + 1)); /* lowest set bit */
    return a > 256 || a == 0 ? 256 : a;
}

static int key_eq(const gemm_key *x, const gemm_key *y) {
    return x->device == y->device && x->op == y->op && x->m == y->m && x->n == y->n &&
           x->k == y->k && x->has_bias == y->has_bias && x->align_a == y->align_a &&
           x->align_b == y->align_b && x->align_c == y->align_c && x->align_bias == y->align_bias &&
           x->ws_bytes == y->ws_bytes;
}

/* Fills descriptors and layouts for key->op (see the table at the top) and asks the heuristic. */
static mg_status plan_build(mg_cuda_ctx *ctx, gemm_plan *p, const gemm_key *key, const void *bias) {
    const int m = key->m, n = key->n, k = key->k;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cudaDataType_t cd_type = CUDA_R_16BF;
    /* stored (rows, cols, ld) of A, B and C = D, column-major */
    uint64_t ar, ac, br, bc;
    int64_t lda, ldb;
    switch (key->op) {
    case GEMM_FWD: /* A = w (IC,OC) transposed, B = inp (IC,N), D = out (OC,N) */
        ta = CUBLAS_OP_T;
        ar = k, ac = m, lda = k;
        br = k, bc = n, ldb = k;
        break;
    case GEMM_DINP: /* A = w (IC,OC), B = dout (OC,N), D = dinp (IC,N) */
        ar = m, ac = k, lda = m;
        br = k, bc = n, ldb = k;
        break;
    default: /* GEMM_DW: A = inp (IC,N), B = dout (OC,N) transposed, C = D = dw (IC,OC) fp32 */
        tb = CUBLAS_OP_T;
        ar = m, ac = k, lda = m;
        br = n, bc = k, ldb = n;
        cd_type = CUDA_R_32F;
        break;
    }
    cublasLtMatmulDesc_t desc = &p->desc;
    MG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->has_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = CUDA_R_16BF;
        MG_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &bias_type, sizeof bias_type));
        /* the heuristic reads the pointer's value for its alignment */
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias));
    }
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->a, CUDA_R_16BF, ar, ac, lda));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->b, CUDA_R_16BF, br, bc, ldb));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->c, cd_type, (uint64_t)m, (uint64_t)n, m));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->d, cd_type, (uint64_t)m, (uint64_t)n, m));

    cublasLtMatmulPreferenceOpaque_t pref_mem;
    cublasLtMatmulPreference_t pref = &pref_mem;
    uint64_t ws = key->ws_bytes;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_a, sizeof(uint32_t)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_b, sizeof(uint32_t)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_c, sizeof(uint32_t)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_c, sizeof(uint32_t)));

    cublasLtMatmulHeuristicResult_t res[MG_LT_HEURISTICS];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, &p->a, &p->b, &p->c, &p->d,
                                                       pref, MG_LT_HEURISTICS, res, &found);
    /* results come best first; take the first that is usable */
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; i++) {
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= key->ws_bytes) {
            p->algo = res[i].algo;
            p->key = *key;
            p->used = 1;
            return MG_OK;
        }
    }
    static const char *names[] = {"forward", "dinp", "dw"};
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "cuBLASLt has no algorithm for the linear %s product m=%d n=%d k=%d%s "
                   "(alignments A %u B %u C %u bytes; heuristic status %d, %d candidates)",
                   names[key->op], m, n, k, key->has_bias ? " with bias" : "", key->align_a,
                   key->align_b, key->align_c, (int)st, found);
}

/* D = op(A) op(B) + beta C (C = D), plus the bias epilogue when bias is not NULL, with the cached
 * plan for (op, m, n, k) and the pointers' alignments. */
static mg_status gemm_run(mg_backend *be, gemm_op op, int m, int n, int k, const void *A,
                          const void *B, void *D, float beta, const void *bias) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.op = op, key.m = m, key.n = n, key.k = k, key.has_bias = bias != NULL;
    key.device = ctx->device;
    key.ws_bytes = lt_workspace_bytes(ctx);
    key.align_a = ptr_align(A);
    key.align_b = ptr_align(B);
    key.align_c = ptr_align(D);
    key.align_bias = key.has_bias ? ptr_align(bias) : 0;

    std::lock_guard<std::mutex> lock(g_plans_mu);
    gemm_plan *p = NULL;
    for (int i = 0; i < MG_LT_CACHE_SIZE && !p; i++)
        if (g_plans[i].used && key_eq(&g_plans[i].key, &key)) p = &g_plans[i];
    if (!p) {
        for (int i = 0; i < MG_LT_CACHE_SIZE && !p; i++)
            if (!g_plans[i].used) p = &g_plans[i];
        if (!p) p = &g_plans[g_next_evict++ % MG_LT_CACHE_SIZE]; /* full: replace round-robin */
        p->used = 0;
        MG_CHECK(plan_build(ctx, p, &key, bias));
    }
    if (key.has_bias)
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias));
    const float alpha = 1.0f;
    MG_CUBLAS_CHECK(cublasLtMatmul(ctx->lt, &p->desc, &alpha, A, &p->a, B, &p->b, &beta, D, &p->c,
                                   D, &p->d, &p->algo, ctx->workspace, key.ws_bytes,
                                   mg_cuda_stream(be)));
    return MG_OK;
}

/* out[i, j] = bias[j] or 0: the forward when IC = 0 (an empty product). */
static __global__ void linear_fill_bias_kernel(bf16 *out /* (N,OC) */, const bf16 *bias /* (OC) */,
                                               int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias ? bias[i % OC] : __float2bfloat16(0.0f);
}

/* Pass 1 of dbias: partial[c, j] = sum of dout[rows of chunk c, j] (fp32). Block = 32 columns x
 * 8 warps; warp w sums rows w, w+8, ... of the chunk, lane = column (a warp reads 64 contiguous
 * bytes of a row); the 8 warp sums are then added in warp order. Every partial's order of
 * additions depends on (N, OC) alone. */
static __global__ void linear_dbias_partial_kernel(float *partial /* (nchunks, OC) */,
                                                   const bf16 *dout /* (N,OC) */, int N, int OC,
                                                   int rows_per_chunk) {
    __shared__ float sums[MG_DBIAS_WARPS][MG_DBIAS_COLS];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int j = blockIdx.x * MG_DBIAS_COLS + lane, c = blockIdx.y;
    int r0 = c * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float acc = 0.0f;
    if (j < OC)
        for (int i = r0 + warp; i < r1; i += MG_DBIAS_WARPS)
            acc += __bfloat162float(dout[(size_t)i * OC + j]);
    sums[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && j < OC) {
        float s = sums[0][lane];
        for (int w = 1; w < MG_DBIAS_WARPS; w++) s += sums[w][lane];
        partial[(size_t)c * OC + j] = s;
    }
}

/* Pass 2: dbias[j] += sum over chunks c (in order) of partial[c, j]. */
static __global__ void linear_dbias_finish_kernel(float *dbias /* (OC) */,
                                                  const float *partial /* (nchunks, OC) */,
                                                  int nchunks, int OC) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0.0f;
    for (int c = 0; c < nchunks; c++) s += partial[(size_t)c * OC + j];
    dbias[j] += s;
}

static mg_status check_dims(int N, int IC, int OC) {
    if (N < 0 || IC < 0 || OC < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "linear: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    return MG_OK;
}

extern "C" mg_status mg_cuda_linear_forward(mg_backend *be, void *out /* (N,OC) */,
                                            const void *inp /* (N,IC) */,
                                            const void *w /* (OC,IC) */,
                                            const void *bias /* (OC) or NULL */, int N, int IC,
                                            int OC) {
    MG_CHECK(check_dims(N, IC, OC));
    if (N == 0 || OC == 0) return MG_OK;
    if (IC == 0) {
        linear_fill_bias_kernel<<<mg_cuda_blocks((size_t)N * OC, MG_CUDA_THREADS), MG_CUDA_THREADS,
                                  0, mg_cuda_stream(be)>>>((bf16 *)out, (const bf16 *)bias, N, OC);
        MG_CUDA_CHECK_LAUNCH();
        return MG_OK;
    }
    return gemm_run(be, GEMM_FWD, OC, N, IC, w, inp, out, 0.0f, bias);
}

extern "C" mg_status mg_cuda_linear_backward(mg_backend *be, void *dinp /* (N,IC) or NULL */,
                                             float *dw /* (OC,IC) */,
                                             float *dbias /* (OC) or NULL */,
                                             const void *dout /* (N,OC) */,
                                             const void *inp /* (N,IC) */,
                                             const void *w /* (OC,IC) */, int N, int IC, int OC) {
    MG_CHECK(check_dims(N, IC, OC));
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cudaStream_t stream = mg_cuda_stream(be);
    if (N == 0) return MG_OK;
    if (OC == 0) { /* empty product: dinp = 0, nothing accumulates */
        if (dinp && IC > 0)
            MG_CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * IC * sizeof(bf16), stream));
        return MG_OK;
    }
    if (dbias) {
        /* chunking depends on N only (at most 64 chunks of >= 128 rows): reproducible sums */
        int rows = (N + MG_DBIAS_MAX_CHUNKS - 1) / MG_DBIAS_MAX_CHUNKS;
        rows = rows < 128 ? 128 : rows;
        int nchunks = (N + rows - 1) / rows;
        size_t lt_ws = lt_workspace_bytes(ctx);
        size_t need = (size_t)nchunks * OC * sizeof(float);
        if (lt_ws + need > ctx->workspace_bytes)
            return MG_FAIL(MG_ERR_NOMEM,
                           "linear backward: bias gradient needs %zu bytes of workspace after "
                           "cuBLASLt's %zu, have %zu in all; raise MG_CUDA_WORKSPACE_MB",
                           need, lt_ws, ctx->workspace_bytes);
        float *partial = (float *)((char *)ctx->workspace + lt_ws); // (nchunks, OC)
        dim3 grid((OC + MG_DBIAS_COLS - 1) / MG_DBIAS_COLS, nchunks);
        linear_dbias_partial_kernel<<<grid, 32 * MG_DBIAS_WARPS, 0, stream>>>(
            partial, (const bf16 *)dout, N, OC, rows);
        MG_CUDA_CHECK_LAUNCH();
        linear_dbias_finish_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, partial, nchunks,
                                                                         OC);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (IC == 0) return MG_OK;
    /* dw^T += inp^T-as-(IC,N) . dout */
    MG_CHECK(gemm_run(be, GEMM_DW, IC, OC, N, inp, dout, dw, 1.0f, NULL));
    if (dinp) MG_CHECK(gemm_run(be, GEMM_DINP, IC, N, OC, w, dout, dinp, 0.0f, NULL));
    return MG_OK;
}
