/* Linear layer on the GPU: out = inp @ w^T + bias (+ residual), w stored (OC, IC) as
 * torch.nn.Linear, h16 activations and weights, fp32 main grads. The three products go to
 * cuBLASLt with fp32 compute (CUBLAS_COMPUTE_32F, fp32 alpha/beta); the bias gradient is a
 * deterministic two-pass column sum of our own (colsum.cuh) unless MG_DBIAS=epilogue.
 *
 * Fusions, all in cuBLASLt's epilogue (no extra pass over the output):
 *  - bias: CUBLASLT_EPILOGUE_BIAS;
 *  - residual: C = residual, beta = 1, D = out (C and D distinct, same layout);
 *  - GELU forward: CUBLASLT_EPILOGUE_GELU_AUX(_BIAS) writes gelu(x) to D and x (the
 *    pre-activation, saved for backward) to the aux buffer, ld = OC;
 *  - GELU backward: CUBLASLT_EPILOGUE_DGELU on the dinp product multiplies it by gelu'(aux);
 *  - bias gradient with MG_DBIAS=epilogue: CUBLASLT_EPILOGUE_BGRADB on the dw product writes the
 *    column sums of dout (fp32, the C type) to scratch, which one small kernel adds to dbias (the
 *    contract accumulates; the epilogue writes). Its order of additions is the library's, fixed
 *    for a given algorithm and shape, so runs repeat bitwise.
 * cuBLASLt's GELU is the tanh form, as backend_ops.h specifies. An epilogue the heuristic has no
 * algorithm for (or an aux leading dimension not a multiple of 8, which cuBLASLt requires) falls
 * back to the plain product and our kernels (activation.cu, elementwise.cu); the result is the
 * same up to h16 rounding of the intermediate.
 *
 * cuBLASLt is column-major; a row-major (R, C) matrix is the column-major (C, R) matrix with
 * ld = C, i.e. its transpose. So every product is written for the transposes:
 *   forward  out (OC,N)  = T(w (IC,OC)) . inp (IC,N)          m=OC n=N  k=IC
 *   dinp     dinp (IC,N) = w (IC,OC) . dout (OC,N)             m=IC n=N  k=OC
 *   dw       dw (IC,OC) += inp (IC,N) . T(dout (OC,N))         m=IC n=OC k=N
 * (all shapes here column-major, as cuBLASLt sees the row-major buffers; T = CUBLAS_OP_T)
 * The forward bias has length m = OC = rows of D, which is exactly what CUBLASLT_EPILOGUE_BIAS
 * broadcasts. dw uses h16 A/B with fp32 C = D and beta = 1: a combination cuBLASLt supports for
 * CUBLAS_COMPUTE_32F (A/B CUDA_R_16BF or CUDA_R_16F, C/D CUDA_R_32F), and it gives the
 * ACCUMULATE contract without a temporary. The plan cache is per object, so the bf16 and fp16
 * builds of this file never share a plan.
 *
 * The bias gradient by default is our column sum of dout (colsum.cuh), run before the two
 * products, right after the op that wrote dout, so much of dout is still in L2: on an H200 it
 * costs less than the epilogue, whose separate reduction kernel (~50 us per GPT-2 124M weight
 * gradient) reads dout again (bench/NOTES.md, 2026-11-29). It is also the fallback where BGRADB
 * has no algorithm for the shape.
 *
 * Plans (descriptors, layouts, heuristic's algo) are cached per (op, shape, epilogue, pointer
 * alignments, device, workspace size) in a static fixed-size table; a shape with no algorithm is
 * cached too, so a fallback costs one heuristic query in all. The cuBLASLt descriptors are the
 * semi-opaque kind initialised in place (cublasLt*Init), so the cache allocates nothing, ever:
 * first use of a shape costs one heuristic query (host only, no synchronisation), later uses a
 * linear scan. Pointer alignment is part of the key because the heuristic chooses kernels for the
 * alignment it is told (default 256 bytes), and activations may live at any 2-byte offset.
 *
 * Workspace (mg_cuda_ctx.workspace, all stream-ordered on the compute stream):
 *   [0, MG_LT_WS_MAX)                      cuBLASLt workspace (or all of it if smaller;
 *                                          tensor-scaled fp8 products: none, see key_of)
 *   then OC fp32 (BGRADB's output) or the column sums' partials (colsum.cuh: at most 512 * OC
 *   fp32, 6.3 MB for OC = 3072).
 * Choice of algorithm: the heuristic's first usable candidate, which depends only on the shapes,
 * so the same run repeats bitwise. MG_CUBLASLT_TUNE=1 instead times up to 16 candidates on the
 * first use of each plan (events on the compute stream, one host wait per plan) and keeps the
 * fastest: sometimes a few percent faster, but the choice can then differ between processes, and
 * with it the last bits of the results (docs/environment.md).
 * Exports: mg_cuda_linear_forward, mg_cuda_linear_gelu_forward, mg_cuda_linear_backward. */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/colsum.cuh"
#include "core/fp8.h"
#include "core/env.h"
#include "core/log.h"

#include <mutex>
#include <stdint.h>
#include <string.h>

#define MG_LT_WS_MAX     ((size_t)32 << 20) /* cuBLAS's recommended workspace on Hopper */
#define MG_LT_CACHE_SIZE 96                 /* a model uses ~4 linear shapes x 3 products */
#define MG_LT_HEURISTICS 16                 /* candidates asked from the heuristic */
#define MG_LT_TUNE_REPS  3

typedef enum { GEMM_FWD = 0, GEMM_DINP, GEMM_DW } gemm_op;
static const char *const k_gemm_op_names[] = {"forward", "dinp", "dw"};
typedef enum { AUX_NONE = 0, AUX_GELU_OUT, AUX_DGELU_IN } gemm_aux;

/* One call's operands: D = op(A) op(B) [+ beta C] [+ bias], with the aux epilogue. */
typedef struct {
    gemm_op op;
    int m, n, k;
    const void *A, *B, *C; /* C NULL: beta = 0 */
    void *D;
    float beta;
    const void *bias; /* forward: (m) h16 added; GEMM_DW: (n) fp32 bias gradient written */
    gemm_aux aux_kind;
    const void *aux; /* (n, m) row-major = (m, n) column-major h16, ld m */
    /* fp8 operands (linear_fp8): A's and B's format + 1 (0: the compute dtype), their scales'
     * inverses (device, (1)), and cuBLASLt's fast accumulation (fp8 only) */
    int a8, b8;
    const float *a_scale, *b_scale;
    int fast_accum;
    /* block-scaled fp8 (the blockwise recipe): cublasLtMatmulMatrixScale_t of A and B, 0 for one
     * scale per tensor; the scales then are arrays in core/fp8_block.h's layouts */
    int a_mode, b_mode;
} gemm_call;

/* A call in the compute dtype (the fp8 fields zero: linear_fp8 sets them). */
static gemm_call call_of(gemm_op op, int m, int n, int k, const void *A, const void *B,
                         const void *C, void *D, float beta, const void *bias, gemm_aux aux_kind,
                         const void *aux) {
    gemm_call c;
    memset(&c, 0, sizeof c);
    c.op = op, c.m = m, c.n = n, c.k = k, c.A = A, c.B = B, c.C = C, c.D = D, c.beta = beta;
    c.bias = bias, c.aux_kind = aux_kind, c.aux = aux;
    return c;
}

/* Everything that selects a plan. Alignments are in bytes (power of two, capped at 256). */
typedef struct {
    int device, op, m, n, k, has_bias, has_c, aux_kind, a8, b8, fast_accum, a_mode, b_mode;
    uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
    size_t ws_bytes;
} gemm_key;

typedef struct {
    int used, ok; /* ok = 0: the heuristic had no algorithm (cached so as not to ask again) */
    gemm_key key;
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

/* Process-wide, one cache per compute dtype (g_cache<h16>): plans depend on the device (in the
 * key), not on the cuBLASLt handle. The mutex also covers the per-call bias/aux-pointer update of
 * a shared descriptor and the enqueue that reads it. */
struct plan_cache {
    gemm_plan plans[MG_LT_CACHE_SIZE];
    unsigned next_evict;
    std::mutex mu;
};
template <typename h16> static plan_cache g_cache;

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

static gemm_key key_of(const mg_cuda_ctx *ctx, const gemm_call *c) {
    gemm_key key;
    memset(&key, 0, sizeof key); /* compared with memcmp: no stray padding bytes */
    key.device = ctx->device;
    key.op = c->op, key.m = c->m, key.n = c->n, key.k = c->k;
    key.has_bias = c->bias != NULL;
    key.has_c = c->C != NULL && c->C != c->D;
    key.aux_kind = c->aux_kind;
    key.a8 = c->a8, key.b8 = c->b8, key.fast_accum = c->fast_accum;
    key.a_mode = c->a_mode, key.b_mode = c->b_mode;
    key.align_a = ptr_align(c->A);
    key.align_b = ptr_align(c->B);
    key.align_c = c->C ? ptr_align(c->C) : 256;
    key.align_d = ptr_align(c->D);
    key.align_bias = c->bias ? ptr_align(c->bias) : 0;
    key.align_aux = c->aux ? ptr_align(c->aux) : 0;
    /* a tensor-scaled fp8 product gets no workspace: with one, cuBLASLt's choices for these
     * shapes clear a part of it before every call (a memset each, some 2,100 a step at GPT-2
     * 1.5B); without, it takes their stream-scheduled forms, as fast, and the step 1% faster
     * (bench/NOTES.md, 2026-11-30) */
    key.ws_bytes = c->a8 && !c->a_mode && !c->b_mode ? 0 : lt_workspace_bytes(ctx);
    return key;
}

static cublasLtEpilogue_t epilogue_of(const gemm_key *key) {
    if (key->op == GEMM_DW)
        return key->has_bias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    if (key->aux_kind == AUX_GELU_OUT)
        return key->has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (key->aux_kind == AUX_DGELU_IN) return CUBLASLT_EPILOGUE_DGELU;
    return key->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

/* The per-call pointers a cached descriptor holds (the heuristic also reads them once, for their
 * alignment). */
static mg_status set_pointers(gemm_plan *p, const gemm_call *c) {
    if (c->bias)
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &c->bias, sizeof c->bias));
    if (c->aux)
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            &p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c->aux, sizeof c->aux));
    if (c->a_scale)
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            &p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c->a_scale, sizeof c->a_scale));
    if (c->b_scale)
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            &p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c->b_scale, sizeof c->b_scale));
    return MG_OK;
}

static cublasStatus_t matmul_status(mg_cuda_ctx *ctx, gemm_plan *p,
                                    const cublasLtMatmulAlgo_t *algo, const gemm_call *c, void *D,
                                    const void *C, float beta) {
    const float alpha = 1.0f;
    return cublasLtMatmul(ctx->lt, &p->desc, &alpha, c->A, &p->a, c->B, &p->b, &beta, C ? C : D,
                          &p->c, D, &p->d, algo, ctx->workspace, p->key.ws_bytes, ctx->stream);
}

static mg_status matmul(mg_cuda_ctx *ctx, gemm_plan *p, const cublasLtMatmulAlgo_t *algo,
                        const gemm_call *c, void *D, const void *C, float beta) {
    MG_CUBLAS_CHECK(matmul_status(ctx, p, algo, c, D, C, beta));
    return MG_OK;
}

/* MG_CUBLASLT_TUNE: the fastest of the candidates, each timed over MG_LT_TUNE_REPS runs after one
 * warm-up, on this call's operands. The weight-gradient product accumulates into dw, so it is
 * timed writing to scratch after cuBLASLt's workspace (beta = 0) instead, when that fits; the
 * other products only write their outputs, which the real call then overwrites. */
static mg_status tune(mg_cuda_ctx *ctx, gemm_plan *p, const gemm_call *c,
                      const cublasLtMatmulHeuristicResult_t *res, int found, int *best) {
    void *D = c->D;
    const void *C = c->C;
    float beta = c->beta;
    if (c->op == GEMM_DW) { /* scratch after cuBLASLt's workspace and BGRADB's output */
        size_t lt = p->key.ws_bytes + (((size_t)c->n * sizeof(float) + 255) & ~(size_t)255);
        size_t need = (size_t)c->m * c->n * sizeof(float);
        if (lt + need > ctx->workspace_bytes) return MG_OK; /* keep the heuristic's first */
        D = (char *)ctx->workspace + lt;
        C = NULL;
        beta = 0.0f;
    }
    cudaEvent_t ev[2] = {NULL, NULL};
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
        if (ev[0]) cudaEventDestroy(ev[0]);
        (void)cudaGetLastError();
        return MG_OK; /* untuned: the heuristic's first */
    }
    float best_ms = 0.0f;
    for (int i = 0; i < found; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > p->key.ws_bytes)
            continue;
        bool ok = matmul(ctx, p, &res[i].algo, c, D, C, beta) == MG_OK &&
                  cudaEventRecord(ev[0], ctx->stream) == cudaSuccess;
        for (int r = 0; ok && r < MG_LT_TUNE_REPS; r++)
            ok = matmul(ctx, p, &res[i].algo, c, D, C, beta) == MG_OK;
        float ms = 0.0f;
        ok = ok && cudaEventRecord(ev[1], ctx->stream) == cudaSuccess &&
             cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
        ctx->n_host_syncs++;
        mg_error_clear(); /* a candidate that fails to run is skipped */
        if (ok && (*best < 0 || ms < best_ms)) *best = i, best_ms = ms;
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    return MG_OK;
}

/* cuBLASLt's type of an operand: fp8 format + 1, or 0 for the compute dtype. */
template <typename h16> static cudaDataType_t operand_type(int f8) {
    if (f8 == 0) return mg_h16<h16>::cuda_r;
    return f8 - 1 == MG_FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* Fills descriptors and layouts for key->op (see the table at the top) and asks the heuristic;
 * p->ok = 0 when it has no usable algorithm. */
template <typename h16>
static mg_status plan_build(mg_cuda_ctx *ctx, gemm_plan *p, const gemm_key *key,
                            const gemm_call *c) {
    const int m = key->m, n = key->n, k = key->k;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cudaDataType_t cd_type = mg_h16<h16>::cuda_r;
    /* stored (rows, cols, ld) of A, B and C = D, column-major */
    uint64_t ar, ac, br, bc;
    int64_t lda, ldb;
    switch (key->a8 ? -1 : key->op) {
    case -1: /* fp8: every product in the forward's form, A transposed (linear_fp8's operands) */
        ta = CUBLAS_OP_T;
        ar = k, ac = m, lda = k;
        br = k, bc = n, ldb = k;
        if (key->op == GEMM_DW) cd_type = CUDA_R_32F;
        break;
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
    p->key = *key;
    p->used = 1;
    p->ok = 0;
    cublasLtMatmulDesc_t desc = &p->desc;
    MG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = epilogue_of(key);
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (key->a8) {
        int8_t fast = (int8_t)key->fast_accum;
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                       sizeof fast));
    }
    if (key->a_mode || key->b_mode) { /* block scaling: 1 x 128 vectors or 128 x 128 tiles */
        int32_t am = key->a_mode, bm = key->b_mode;
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am,
                                                       sizeof am));
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm,
                                                       sizeof bm));
    }
    if (key->has_bias) {
        int32_t bias_type = key->op == GEMM_DW ? CUDA_R_32F : mg_h16<h16>::cuda_r;
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &bias_type, sizeof bias_type));
    }
    if (key->aux_kind != AUX_NONE) {
        int64_t ld = m;
        MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                       &ld, sizeof ld));
    }
    MG_CHECK(set_pointers(p, c));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->a, operand_type<h16>(key->a8), ar, ac, lda));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->b, operand_type<h16>(key->b8), br, bc, ldb));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->c, cd_type, (uint64_t)m, (uint64_t)n, m));
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&p->d, cd_type, (uint64_t)m, (uint64_t)n, m));

    cublasLtMatmulPreferenceOpaque_t pref_mem;
    cublasLtMatmulPreference_t pref = &pref_mem;
    uint64_t ws = key->ws_bytes;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        uint32_t align;
    } aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key->align_a},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key->align_b},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key->align_c},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key->align_d}};
    for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++)
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &aligns[i].align,
                                                             sizeof(uint32_t)));

    cublasLtMatmulHeuristicResult_t res[MG_LT_HEURISTICS];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, &p->a, &p->b, &p->c, &p->d,
                                                       pref, MG_LT_HEURISTICS, res, &found);
    if (st != CUBLAS_STATUS_SUCCESS) found = 0;
    int best = -1;
    if (mg_env_int("MG_CUBLASLT_TUNE", 0) == 1) MG_CHECK(tune(ctx, p, c, res, found, &best));
    /* results come best first; without tuning take the first that is usable */
    for (int i = 0; best < 0 && i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= key->ws_bytes)
            best = i;
    if (best >= 0) {
        p->algo = res[best].algo;
        p->ok = 1;
    }
    mg_log_debug("cuBLASLt linear %s%s m=%d n=%d k=%d epilogue %d%s: %s (candidate %d of %d)",
                 k_gemm_op_names[key->op], key->a8 ? " fp8" : "", m, n, k, (int)epi,
                 key->has_c ? " +C" : "", p->ok ? "planned" : "no algorithm, falling back", best,
                 found);
    return MG_OK;
}

/* Runs the call with its cached plan (built on first use). *done = false when cuBLASLt has no
 * algorithm for it (nothing was enqueued): the caller falls back or reports. */
template <typename h16> static mg_status gemm_try(mg_backend *be, const gemm_call *c, bool *done) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    gemm_key key = key_of(ctx, c);
    *done = false;
    if (c->aux_kind != AUX_NONE && c->m % 8) return MG_OK; /* cuBLASLt: aux ld % 8 == 0 */
    plan_cache &cache = g_cache<h16>;
    std::lock_guard<std::mutex> lock(cache.mu);
    gemm_plan *p = NULL;
    for (int i = 0; i < MG_LT_CACHE_SIZE && !p; i++)
        if (cache.plans[i].used && !memcmp(&cache.plans[i].key, &key, sizeof key))
            p = &cache.plans[i];
    if (!p) {
        for (int i = 0; i < MG_LT_CACHE_SIZE && !p; i++)
            if (!cache.plans[i].used) p = &cache.plans[i];
        if (!p) p = &cache.plans[cache.next_evict++ % MG_LT_CACHE_SIZE]; /* full: round-robin */
        p->used = 0;
        MG_CHECK(plan_build<h16>(ctx, p, &key, c));
    }
    if (!p->ok) return MG_OK;
    MG_CHECK(set_pointers(p, c));
    cublasStatus_t st = matmul_status(ctx, p, &p->algo, c, c->D, c->C, c->beta);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && c->a8) {
        /* an fp8 combination (epilogue, C, output type) the heuristic offered and the library then
         * refuses: treated as having no algorithm, once (nothing was enqueued) */
        p->ok = 0;
        mg_log_debug("cuBLASLt linear %s fp8 m=%d n=%d k=%d: not supported, falling back",
                     k_gemm_op_names[c->op], c->m, c->n, c->k);
        return MG_OK;
    }
    MG_CUBLAS_CHECK(st);
    *done = true;
    return MG_OK;
}

/* A plain product (no aux epilogue), which must have an algorithm. */
template <typename h16> static mg_status gemm_run(mg_backend *be, const gemm_call *c) {
    bool done = false;
    MG_CHECK(gemm_try<h16>(be, c, &done));
    if (done) return MG_OK;
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "cuBLASLt has no algorithm for the linear %s product m=%d n=%d k=%d%s%s "
                   "(alignments A %u B %u D %u bytes)",
                   k_gemm_op_names[c->op], c->m, c->n, c->k, c->bias ? " with bias" : "",
                   c->C && c->C != c->D ? " with residual" : "", ptr_align(c->A), ptr_align(c->B),
                   ptr_align(c->D));
}

/* out[i, j] = bias[j] or 0: the forward when IC = 0 (an empty product). */
template <typename h16>
static __global__ void linear_fill_bias_kernel(h16 *out /* (N,OC) */, const h16 *bias /* (OC) */,
                                               int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias ? bias[i % OC] : f_to_h16<h16>(0.0f);
}

/* dbias[j] += g[j]: the epilogue's bias gradient into the accumulating main grad. */
static __global__ void linear_dbias_add_kernel(float *dbias, const float *g, int OC) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < OC) dbias[j] += g[j];
}

/* `bytes` of fp32 scratch right after cuBLASLt's part of the workspace (the bias gradient's
 * partial sums or BGRADB's output). */
static mg_status dbias_scratch(mg_backend *be, size_t bytes, float **out) {
    size_t lt_ws = lt_workspace_bytes(mg_cuda_ctx_of(be));
    void *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, lt_ws + bytes, &ws, "linear backward (bias gradient)"));
    *out = (float *)((char *)ws + lt_ws);
    return MG_OK;
}

/* Our bias gradient: the deterministic column sums of dout (colsum.cuh), accumulated into dbias. */
template <typename h16>
static mg_status dbias_reduce(mg_backend *be, float *dbias, const void *dout, int N, int OC) {
    int rows = mg_colsum_rows(N, MG_DBIAS_MIN_ROWS);
    float *partial = NULL; // (nchunks, OC)
    MG_CHECK(dbias_scratch(be, (size_t)mg_colsum_chunks(N, rows) * OC * sizeof(float), &partial));
    mg_colsum<h16>(mg_cuda_stream(be), dbias, partial, (const h16 *)dout, N, OC, rows);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* MG_DBIAS (core/env.h): "ours" (the default) computes the bias gradient with dbias_reduce,
 * "epilogue" with cuBLASLt's BGRADB epilogue; anything else is a usage error. */
static mg_status dbias_ours(bool *ours) {
    const char *v = mg_env_str("MG_DBIAS", "ours");
    *ours = strcmp(v, "ours") == 0;
    if (!*ours && strcmp(v, "epilogue") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_DBIAS=%s: expected epilogue or ours", v);
    return MG_OK;
}

static mg_status check_dims(int N, int IC, int OC) {
    if (N < 0 || IC < 0 || OC < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "linear: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, linear_forward,
               (mg_backend * be, void *out /* (N,OC) */, const void *inp /* (N,IC) */,
                const void *w /* (OC,IC) */, const void *bias /* (OC) or NULL */,
                const void *residual /* (N,OC) or NULL */, int N, int IC, int OC),
               (be, out, inp, w, bias, residual, N, IC, OC)) {
    MG_CHECK(check_dims(N, IC, OC));
    if (N == 0 || OC == 0) return MG_OK;
    if (IC == 0) {
        linear_fill_bias_kernel<h16>
            <<<mg_cuda_blocks((size_t)N * OC, MG_CUDA_THREADS), MG_CUDA_THREADS, 0,
               mg_cuda_stream(be)>>>((h16 *)out, (const h16 *)bias, N, OC);
        MG_CUDA_CHECK_LAUNCH();
        return residual ? MG_CUDA_OF(h16, add)(be, out, out, residual, (size_t)N * OC) : MG_OK;
    }
    gemm_call c = call_of(GEMM_FWD, OC, N, IC, w, inp, residual, out, residual ? 1.0f : 0.0f, bias,
                          AUX_NONE, NULL);
    bool done = false;
    MG_CHECK(gemm_try<h16>(be, &c, &done));
    if (done) return MG_OK;
    if (!residual) return gemm_run<h16>(be, &c); /* reports the missing algorithm */
    /* no algorithm takes C here: the product, then the add */
    c.C = NULL, c.beta = 0.0f;
    MG_CHECK(gemm_run<h16>(be, &c));
    return MG_CUDA_OF(h16, add)(be, out, out, residual, (size_t)N * OC);
}

MG_CUDA_DTYPES(mg_status, linear_gelu_forward,
               (mg_backend * be, void *out /* (N,OC) */, void *pre /* (N,OC) */,
                const void *inp /* (N,IC) */, const void *w /* (OC,IC) */,
                const void *bias /* (OC) or NULL */, int N, int IC, int OC),
               (be, out, pre, inp, w, bias, N, IC, OC)) {
    MG_CHECK(check_dims(N, IC, OC));
    if (N == 0 || OC == 0) return MG_OK;
    bool done = false;
    if (IC > 0) {
        gemm_call c =
            call_of(GEMM_FWD, OC, N, IC, w, inp, NULL, out, 0.0f, bias, AUX_GELU_OUT, pre);
        MG_CHECK(gemm_try<h16>(be, &c, &done));
    }
    if (done) return MG_OK;
    MG_CHECK(linear_forward<h16>(be, pre, inp, w, bias, NULL, N, IC, OC));
    return MG_CUDA_OF(h16, gelu_forward)(be, out, pre, (size_t)N * OC);
}

/* dw^T += inp^T-as-(IC,N) . dout, with dbias from the BGRADB epilogue where it has one */
template <typename T>
static mg_status weight_grad(mg_backend *be, float *dw, float *dbias, const void *dout,
                             const void *inp, int N, int IC, int OC) {
    gemm_call cw = call_of(GEMM_DW, IC, OC, N, inp, dout, dw, dw, 1.0f, NULL, AUX_NONE, NULL);
    bool done = false;
    bool ours = false;
    if (dbias) MG_CHECK(dbias_ours(&ours));
    if (ours) { /* MG_DBIAS=ours: our reduction, the product without epilogue */
        MG_CHECK(dbias_reduce<T>(be, dbias, dout, N, OC));
        dbias = NULL;
    }
    if (dbias) {
        float *g = NULL; // (OC)
        MG_CHECK(dbias_scratch(be, (size_t)OC * sizeof(float), &g));
        cw.bias = g;
        MG_CHECK(gemm_try<T>(be, &cw, &done));
        if (done) {
            linear_dbias_add_kernel<<<(OC + 255) / 256, 256, 0, mg_cuda_stream(be)>>>(dbias, g, OC);
            MG_CUDA_CHECK_LAUNCH();
        } else {
            MG_CHECK(dbias_reduce<T>(be, dbias, dout, N, OC));
            cw.bias = NULL;
        }
    }
    return done ? MG_OK : gemm_run<T>(be, &cw);
}

/* dinp = dout . w (through the GELU of gelu_pre where given); nothing when dinp is NULL */
template <typename T>
static mg_status input_grad(mg_backend *be, void *dinp, const void *dout, const void *w,
                            const void *gelu_pre, int N, int IC, int OC) {
    if (!dinp) return MG_OK;
    gemm_call ci = call_of(GEMM_DINP, IC, N, OC, w, dout, NULL, dinp, 0.0f, NULL,
                           gelu_pre ? AUX_DGELU_IN : AUX_NONE, gelu_pre);
    bool done = false;
    if (gelu_pre) MG_CHECK(gemm_try<T>(be, &ci, &done));
    if (done) return MG_OK;
    ci.aux_kind = AUX_NONE, ci.aux = NULL;
    MG_CHECK(gemm_run<T>(be, &ci));
    return gelu_pre ? MG_CUDA_OF(T, gelu_backward)(be, dinp, gelu_pre, dinp, (size_t)N * IC)
                    : MG_OK;
}

MG_CUDA_DTYPES(mg_status, linear_backward,
               (mg_backend * be, void *dinp /* (N,IC) or NULL */, float *dw /* (OC,IC) */,
                float *dbias /* (OC) or NULL */, const void *dout /* (N,OC) */,
                const void *inp /* (N,IC) */, const void *w /* (OC,IC) */,
                const void *gelu_pre /* (N,IC) or NULL */, int N, int IC, int OC),
               (be, dinp, dw, dbias, dout, inp, w, gelu_pre, N, IC, OC)) {
    MG_CHECK(check_dims(N, IC, OC));
    cudaStream_t stream = mg_cuda_stream(be);
    if (N == 0) return MG_OK;
    if (OC == 0) { /* empty product: dinp = 0, nothing accumulates */
        if (dinp && IC > 0)
            MG_CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * IC * sizeof(h16), stream));
        return MG_OK;
    }
    if (IC == 0 || !dw) { /* no weight gradient (dw NULL: the caller takes it apart) */
        if (dbias) MG_CHECK(dbias_reduce<h16>(be, dbias, dout, N, OC));
        if (IC == 0) return MG_OK;
    } else
        MG_CHECK(weight_grad<h16>(be, dw, dbias, dout, inp, N, IC, OC));
    return input_grad<h16>(be, dinp, dout, w, gelu_pre, N, IC, OC);
}

/* ---- fp8 operands (backend_ops.h's fp8_linear_forward and fp8_linear_backward) ----
 * cuBLASLt's fp8 kernels on Hopper take only the "TN" form: A transposed, both operands with the
 * reduced dimension contiguous. The forward already has it (w (OC,IC) and inp (N,IC) are rows of
 * IC); the input's gradient reads the weight's transpose (IC,OC) and the gradient's rows, the
 * weight's gradient the transposes of the input (IC,N) and of the gradient (OC,N): the casts
 * write those (fp8.cu). Each product is multiplied by its operands' scale_inv in the epilogue
 * (A/B scale pointers), with bf16 (fp16) output, or fp32 accumulating into the weight's main
 * gradient (C = D fp32, beta 1). The forward uses the fast accumulation of Hopper's fp8 MMA, the
 * two gradients the precise one, as Transformer Engine does. The bias gradient is our column sum
 * of the compute-dtype gradient. An epilogue without an algorithm falls back to the plain product
 * and our kernels, as above; cuBLASLt's fp8 kernels also need every dimension a multiple of 16,
 * which is checked first. */
static mg_status check_fp8_dims(int N, int IC, int OC) {
    MG_CHECK(check_dims(N, IC, OC));
    if (N % 16 || IC % 16 || OC % 16)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "fp8 linear with %d tokens, %d inputs and %d outputs: cuBLASLt's fp8 "
                       "products need each a multiple of 16 (choose the micro-batch size, sequence "
                       "length and hidden sizes so, or leave this layer in bf16)",
                       N, IC, OC);
    return MG_OK;
}

/* The operands' scalings: every operand one scale per tensor, or every one block-scaled
 * (cuBLASLt scales either all or none of a product's fp8 operands by blocks, and never both by
 * 128 x 128 tiles; the model's products are rows x tiles and rows x rows). */
static mg_status check_fp8_scaling(const mg_fp8_tensor *a, const mg_fp8_tensor *b,
                                   const mg_fp8_tensor *c) {
    const bool blocks = a->block != MG_FP8_SCALE_TENSOR;
    if ((b->block != MG_FP8_SCALE_TENSOR) != blocks ||
        (c && (c->block != MG_FP8_SCALE_TENSOR) != blocks))
        return MG_FAIL(MG_ERR_INTERNAL,
                       "fp8 linear: block-scaled and tensor-scaled operands mixed");
    return MG_OK;
}

/* An operand's scales as a product reads it: its row-major bytes or (transposed) its transposed
 * ones (mg_fp8_tensor: a block-scaled form has scales of its own), and cuBLASLt's scale mode. */
static const float *operand_scales(const mg_fp8_tensor *t, bool transposed, int *mode) {
    switch (t->block) {
    case MG_FP8_SCALE_ROWS:
        *mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        return transposed ? t->scale_inv_t : t->scale_inv;
    case MG_FP8_SCALE_TILES:
        *mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        return transposed ? t->scale_inv_t : t->scale_inv;
    default:
        *mode = 0;
        return t->scale_inv;
    }
}

/* A's and B's formats and scales (each from its row-major or transposed bytes); fast
 * accumulation only with one scale per tensor (cuBLASLt has none for block scaling). */
static void fp8_operands(gemm_call *c, const mg_fp8_tensor *a, bool a_t, const mg_fp8_tensor *b,
                         bool b_t, bool fast) {
    c->a8 = 1 + a->format, c->b8 = 1 + b->format;
    c->a_scale = operand_scales(a, a_t, &c->a_mode);
    c->b_scale = operand_scales(b, b_t, &c->b_mode);
    c->fast_accum = fast && !c->a_mode && !c->b_mode;
}

MG_CUDA_DTYPES(mg_status, fp8_linear_forward,
               (mg_backend * be, void *out, void *gelu_pre, const mg_fp8_tensor *inp,
                const mg_fp8_tensor *w, const void *bias, const void *residual, int N, int IC,
                int OC),
               (be, out, gelu_pre, inp, w, bias, residual, N, IC, OC)) {
    MG_CHECK(check_fp8_dims(N, IC, OC));
    MG_CHECK(check_fp8_scaling(inp, w, NULL));
    if (N == 0 || OC == 0 || IC == 0) {
        MG_CHECK(linear_forward<h16>(be, gelu_pre ? gelu_pre : out, NULL, NULL, bias, residual, N,
                                     0, OC));
        return gelu_pre ? MG_CUDA_OF(h16, gelu_forward)(be, out, gelu_pre, (size_t)N * OC) : MG_OK;
    }
    gemm_call c =
        call_of(GEMM_FWD, OC, N, IC, w->data, inp->data, residual, out, residual ? 1.0f : 0.0f,
                bias, gelu_pre ? AUX_GELU_OUT : AUX_NONE, gelu_pre);
    fp8_operands(&c, w, false, inp, false, true);
    bool done = false;
    MG_CHECK(gemm_try<h16>(be, &c, &done));
    if (done) return MG_OK;
    /* the plain product, then bias, residual and GELU by our kernels */
    void *prod = gelu_pre ? gelu_pre : out;
    c.C = NULL, c.beta = 0.0f, c.bias = NULL, c.aux_kind = AUX_NONE, c.aux = NULL, c.D = prod;
    MG_CHECK(gemm_run<h16>(be, &c));
    if (bias || residual)
        MG_CHECK(MG_CUDA_OF(h16, bias_residual_add)(be, prod, prod, bias, residual, N, OC));
    return gelu_pre ? MG_CUDA_OF(h16, gelu_forward)(be, out, gelu_pre, (size_t)N * OC) : MG_OK;
}

MG_CUDA_DTYPES(mg_status, fp8_linear_backward,
               (mg_backend * be, void *dinp, float *dw, float *dbias, const void *dout,
                const mg_fp8_tensor *dout8, const mg_fp8_tensor *inp, const mg_fp8_tensor *w,
                const void *gelu_pre, int N, int IC, int OC),
               (be, dinp, dw, dbias, dout, dout8, inp, w, gelu_pre, N, IC, OC)) {
    MG_CHECK(check_fp8_dims(N, IC, OC));
    MG_CHECK(check_fp8_scaling(dout8, inp, w));
    if (N == 0 || OC == 0 || IC == 0)
        return linear_backward<h16>(be, dinp, dw, dbias, dout, NULL, NULL, gelu_pre, N, IC, OC);
    if (dbias) MG_CHECK(dbias_reduce<h16>(be, dbias, dout, N, OC));
    if (dw) { /* NULL: the caller takes the weight's gradient elsewhere (--no-fp8-wgrad) */
        gemm_call cw = call_of(GEMM_DW, IC, OC, N, inp->data_t, dout8->data_t, dw, dw, 1.0f, NULL,
                               AUX_NONE, NULL);
        fp8_operands(&cw, inp, true, dout8, true, false);
        MG_CHECK(gemm_run<h16>(be, &cw));
    }
    if (!dinp) return MG_OK;
    /* the GELU's gradient by our kernel: cuBLASLt runs its fp8 DGELU epilogue as a separate,
     * slow pass (2.5x our elementwise kernel on an H200, 2026-11-29) */
    gemm_call ci = call_of(GEMM_DINP, IC, N, OC, w->data_t, dout8->data, NULL, dinp, 0.0f, NULL,
                           AUX_NONE, NULL);
    fp8_operands(&ci, w, true, dout8, false, false);
    MG_CHECK(gemm_run<h16>(be, &ci));
    return gelu_pre ? MG_CUDA_OF(h16, gelu_backward)(be, dinp, gelu_pre, dinp, (size_t)N * IC)
                    : MG_OK;
}
