/* Causal self-attention through cuDNN's fused flash attention (the "SDPA" runtime-fusion engines),
 * reached with the C backend (graph) API only: no cudnn_frontend. Same contract as attention.cu
 * (backend_ops.h): h16, causal, GQA over the fused qkv layout, scale 1/sqrt(hd).
 *
 * The engines are found by pattern: the operation graph must be the one cuDNN's frontend builds
 * for SDPA (composite node, cuDNN 9.x):
 *   forward   S = Q K^T; S *= scale; causal mask (row >= col, else -inf); M = rowmax S;
 *             E = exp(S - M); Z = rowsum E; stats = M + log Z; P = E / Z (h16); O = P V
 *   backward  Dsum = rowsum(dO * O) (fp32, in our workspace); S = Q K^T * scale, masked;
 *             P = exp(S - stats); dV = P^T dO; dS = P (dO V^T - Dsum) * scale;
 *             dK = dS^T Q; dQ = dS K
 * with GQA dK, dV computed per query head and reduced over the group inside the graph.
 * Q, K, V, O, dO, dQ, dK, dV are strided 4-D views (batch, head, seq, hd) straight into the qkv,
 * out and dqkv buffers: no copies. K^T and V^T are K and V with dims 2, 3 and their strides
 * swapped. `saved` holds cuDNN's stats: natural-log logsumexp of the scaled scores, (B, nq, S)
 * fp32, the same size as attention.cu's base-2 one (not interchangeable: see consistency below).
 *
 * Heads: for r = 1 (multi-head) every head has stride 3 hd and one call covers the batch. For
 * r > 1 the query heads are not equally spaced (group stride (r+2) hd, head stride hd inside a
 * group), which a 4-D tensor cannot say; so the view is per sequence: "batch" = kv group
 * (stride (r+2) hd), "head" = query head inside the group (stride hd), one K/V head; B calls of
 * the same plan at shifted pointers.
 *
 * Determinism: the frontend's deterministic mode on Hopper is the graph where dQ = dS K writes
 * dQ directly (no fp32 dQ accumulator): cuDNN then runs its deterministic dQ path. The default
 * here (MG_ATTENTION=cudnn) builds that graph, and also drops engines whose numerical notes say
 * NONDETERMINISTIC. MG_ATTENTION=cudnn-nondet builds the accumulator graph (dQ_accum, fp32
 * (B, nq, S, hd) in our workspace, atomics inside cuDNN), the frontend's default and probably
 * faster.
 *
 * Attention dropout with stream masks (drop->mode MG_DROPOUT_STREAM, core/dropout.h) runs inside
 * the graphs, as the frontend builds it: an RNG operation draws the keep mask (Bernoulli 1 - p)
 * from the stream's seed (read from device memory) and a per-call Philox offset that a small
 * kernel writes from the stream's device offset and the op's use number (cd_offsets); the
 * forward multiplies P by keep / (1 - p) before P V; the backward draws the same mask from the
 * same seed and offset, and uses (P f)^T dO for dV, P (keep dP - Dsum (1 - p)) / (1 - p) for dS.
 * No host value changes from step to step, so a step with dropout can be captured in a CUDA
 * graph. cuDNN's mask is its own (not the CPU's bits): tests/cuda/test_cuda_attention_dropout.c
 * reads it back through the forward and checks both directions against it. Positional masks
 * (--layout-invariant-dropout), keyed by global positions and identical to the CPU's, run
 * attention.cu's kernels; one log line says so at the first such call. The document mask of packed
 * sequences (doc_start != NULL, --reset-attention-mask) also runs attention.cu's kernels: this
 * graph is plain causal (cuDNN's padding/ragged masks are not our per-token doc_start). A forward
 * and its backward get the same drop and doc_start, so they always take the same path and agree
 * on what `saved` holds.
 *
 * Plans: both graphs for a shape are built together at the first call with that shape, executed
 * plan kept in a small per-backend table (never evicted). If either graph has no working engine
 * the shape is marked "ours" and both directions use attention.cu's kernels (one log line), so a
 * forward and its backward always agree on what `saved` holds. The table is per backend context
 * because plans belong to the context's cuDNN handle (bound to the compute stream).
 *
 * Workspace (mg_cuda_ctx.workspace): backward [Dsum (B*nq*S fp32) | dQ_accum (nondet only) |
 * cuDNN's]; forward [cuDNN's]. The deterministic backward's own part is about B*nq*S*S*2 bytes
 * (cuDNN 9.14 on H200: 806 MB at B=32, nq=12, S=1024; it keeps dP in h16), the non-deterministic
 * one's B*nq*S*hd*4 (dQ_accum, 101 MB there). The workspace grows to what a shape's plan needs
 * (mg_cuda_workspace_reserve, one log line), unless MG_CUDA_WORKSPACE_MB fixed its size: then a
 * shape needing more fails with MG_ERR_NOMEM naming it and the size. The graphs themselves are
 * built in attention_cudnn_graphs.cuh. Exports: mg_cuda_attention_cudnn_* (cuda_ops.h). */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"

#include "core/log.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MG_HAVE_CUDNN
#include "backend/cuda/attention_cudnn_graphs.cuh"

#define CD_PLANS     32  /* shapes per backend: a model has one or two */
#define CD_MAX_DESCS 400 /* descriptors one shape's two graphs use (about 170, 200 with dropout) */

typedef struct {
    int used, B, S, nq, ng, hd, det;
    uint32_t drop; /* the dropout's threshold (core/dropout.h): 0 for none; p = drop / 2^32 */
    int ok; /* 1: cuDNN plans below; 0: this shape runs on attention.cu's kernels */
    cudnnBackendDescriptor_t fwd, bwd;
    int64_t fwd_ws, bwd_ws;
    /* every descriptor the graphs were made of, kept alive as long as the plans */
    cudnnBackendDescriptor_t descs[CD_MAX_DESCS];
    int ndescs;
} cd_plan;

typedef struct {
    cudnnHandle_t handle;
    int det; /* 1: MG_ATTENTION=cudnn (deterministic), 0: cudnn-nondet */
    size_t version;
    cd_plan plans[CD_PLANS];
    uint64_t *offsets; /* device: one 16-byte slot per call of a dropout graph (cd_offsets) */
    int offset_slots;
} cd_state;

/* ---------------------------------------------------------------- state and plans */

static void cd_plan_release(cd_plan *p) {
    if (p->fwd) cudnnBackendDestroyDescriptor(p->fwd);
    if (p->bwd) cudnnBackendDestroyDescriptor(p->bwd);
    for (int i = p->ndescs - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]);
    memset(p, 0, sizeof *p);
}

static mg_status cd_error(cudnnStatus_t s, const char *what, int line) {
    char detail[256] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    return MG_FAIL(s == CUDNN_STATUS_NOT_SUPPORTED ? MG_ERR_UNSUPPORTED : MG_ERR_INTERNAL,
                   "cuDNN attention: %s: %s (attention_cudnn.cu:%d)%s%s", what,
                   cudnnGetErrorString(s), line, detail[0] ? ": " : "", detail);
}

static mg_status cd_state_of(mg_backend *be, cd_state **out) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    if (!ctx->cudnn_attn) {
        cd_state *s = (cd_state *)calloc(1, sizeof(cd_state));
        if (!s) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the cuDNN attention state");
        cudnnStatus_t st = cudnnCreate(&s->handle);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(s->handle, ctx->stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            if (s->handle) cudnnDestroy(s->handle);
            free(s);
            return cd_error(st, "cudnnCreate", __LINE__);
        }
        s->version = cudnnGetVersion();
        s->det = 1;
        ctx->cudnn_attn = s;
    }
    *out = (cd_state *)ctx->cudnn_attn;
    return MG_OK;
}

static void cd_plan_key(cd_plan *p, int B, int S, int nq, int ng, int hd, int det, uint32_t drop) {
    p->used = 1, p->B = B, p->S = S, p->nq = nq, p->ng = ng, p->hd = hd, p->det = det;
    p->drop = drop;
}

/* A shape the plans can describe at all (anything else goes to our kernels, which report it). */
static bool cd_shape_ok(int B, int S, int nq, int ng) {
    return B > 0 && S > 0 && nq > 0 && ng > 0 && nq % ng == 0;
}

/* The plans for a shape, built on first use; NULL in *out only with an error. */
template <typename h16>
static mg_status cd_plan_for(mg_backend *be, int B, int S, int nq, int ng, int hd, uint32_t drop,
                             cd_plan **out) {
    cd_state *st;
    MG_CHECK(cd_state_of(be, &st));
    *out = NULL;
    cd_plan *free_slot = NULL;
    for (int i = 0; i < CD_PLANS; i++) {
        cd_plan *p = &st->plans[i];
        if (!p->used) {
            if (!free_slot) free_slot = p;
            continue;
        }
        if (p->B == B && p->S == S && p->nq == nq && p->ng == ng && p->hd == hd &&
            p->det == st->det && p->drop == drop) {
            *out = p;
            return MG_OK;
        }
    }
    if (!free_slot)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "cuDNN attention: more than %d attention shapes in one process; use "
                       "MG_ATTENTION=ours",
                       CD_PLANS);
    cd_plan *p = free_slot;
    cd_plan_key(p, B, S, nq, ng, hd, st->det, drop);
    cd_views w = cd_views_of(B, S, nq, ng, hd);
    cd_graph gf, gb;
    memset(&gf, 0, sizeof gf), memset(&gb, 0, sizeof gb);
    gf.descs = gb.descs = p->descs;
    gf.ndescs = gb.ndescs = &p->ndescs;
    gf.max_descs = gb.max_descs = CD_MAX_DESCS;
    gf.next_uid = gb.next_uid = CD_UID_VIRT;
    cd_build_forward<h16>(&gf, &w, drop);
    cd_make_plan(&gf, st->handle, 0, &p->fwd, &p->fwd_ws);
    if (gf.st == CUDNN_STATUS_SUCCESS) {
        cd_build_backward<h16>(&gb, &w, st->det, drop);
        cd_make_plan(&gb, st->handle, st->det, &p->bwd, &p->bwd_ws);
    }
    p->ok = gf.st == CUDNN_STATUS_SUCCESS && gb.st == CUDNN_STATUS_SUCCESS;
    if (!p->ok) {
        const cd_graph *bad = gf.st != CUDNN_STATUS_SUCCESS ? &gf : &gb;
        char detail[256] = "";
        cudnnGetLastErrorString(detail, sizeof detail);
        mg_log_warn("attention: cuDNN %zu has no fused %s plan for B=%d S=%d nq=%d ng=%d hd=%d%s "
                    "(%s at %s:%d%s%s); this shape uses our kernels",
                    st->version, bad == &gf ? "forward" : "backward", B, S, nq, ng, hd,
                    drop ? " with dropout" : "",
                    cudnnGetErrorString(bad->st), bad->file, bad->line, detail[0] ? ": " : "",
                    detail);
        cd_plan_release(p); /* keeps nothing but the verdict (the key; ok stays 0) */
        cd_plan_key(p, B, S, nq, ng, hd, st->det, drop);
    }
    *out = p;
    return MG_OK;
}

/* The plan's workspace, grown to it where needed (mg_cuda_workspace_reserve). */
static mg_status cd_workspace_check(mg_backend *be, size_t need, const char *dir, int B, int S,
                                    int nq, int hd) {
    char who[128];
    snprintf(who, sizeof who, "cuDNN attention %s (B=%d S=%d nq=%d hd=%d)", dir, B, S, nq, hd);
    return mg_cuda_workspace_reserve(be, need, who);
}

/* One execution's variant pack: the non-virtual tensors' uids and pointers (host pointers for
 * by-value scalars), added in any order. */
typedef struct {
    int64_t uids[CD_UID_DSCALE];
    void *ptrs[CD_UID_DSCALE];
    int n;
} cd_pack;

static void cd_put(cd_pack *k, int64_t uid, const void *ptr) {
    k->uids[k->n] = uid;
    k->ptrs[k->n++] = (void *)ptr;
}

/* The dropout's three: the stream's seed, call `call`'s offset slot (cd_offsets), 1 / (1 - p). */
static void cd_put_dropout(cd_pack *k, const cd_state *st, const mg_dropout *drop, int call,
                           const float *dscale) {
    if (!drop) return;
    cd_put(k, CD_UID_SEED, drop->state);
    cd_put(k, CD_UID_OFFSET, st->offsets + 2 * call);
    cd_put(k, CD_UID_DSCALE, dscale);
}

static mg_status cd_execute(cd_state *st, cudnnBackendDescriptor_t plan, const cd_pack *k,
                            void *ws) {
    const int64_t *uids = k->uids;
    void *const *ptrs = k->ptrs;
    const int n = k->n;
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                     uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                     n, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                     &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(st->handle, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (s != CUDNN_STATUS_SUCCESS) return cd_error(s, "cudnnBackendExecute", __LINE__);
    return MG_OK;
}

/* ---------------------------------------------------------------- exports */

MG_CUDA_DTYPES(int, attention_cudnn_available, (void), ()) {
    return 1;
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_init, (mg_backend * be, int deterministic),
               (be, deterministic)) {
    cd_state *st;
    MG_CHECK(cd_state_of(be, &st));
    st->det = deterministic != 0; /* plans carry det in their key: old ones just go unused */
    mg_log_info("attention: cuDNN %zu fused attention (%sdeterministic backward)", st->version,
                st->det ? "" : "non-");
    return MG_OK;
}

MG_CUDA_DTYPES(void, attention_cudnn_destroy, (mg_backend * be), (be)) {
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cd_state *st = (cd_state *)ctx->cudnn_attn;
    if (!st) return;
    for (int i = 0; i < CD_PLANS; i++)
        if (st->plans[i].used) cd_plan_release(&st->plans[i]);
    if (st->offsets) cudaFree(st->offsets);
    cudnnDestroy(st->handle);
    free(st);
    ctx->cudnn_attn = NULL;
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_supported,
               (mg_backend * be, int B, int S, int nq, int ng, int hd, uint32_t drop,
                int *supported),
               (be, B, S, nq, ng, hd, drop, supported)) {
    cd_plan *p;
    *supported = 0;
    if (!cd_shape_ok(B, S, nq, ng)) return MG_OK;
    MG_CHECK(cd_plan_for<h16>(be, B, S, nq, ng, hd, drop, &p));
    *supported = p->ok;
    return MG_OK;
}

MG_CUDA_DTYPES(size_t, attention_cudnn_saved_bytes, (mg_backend * be, int B, int S, int nq, int hd),
               (be, B, S, nq, hd)) {
    /* cuDNN's stats (B, nq, S) fp32: the same size as ours, so a shape that falls back fits */
    return MG_CUDA_OF(h16, attention_saved_bytes)(be, B, S, nq, hd);
}

static bool cd_aligned(const void *const *ptrs, int n) {
    for (int i = 0; i < n; i++)
        if (!mg_cuda_aligned16(ptrs[i])) return false;
    return true;
}

/* Positional (layout-invariant) masks go to attention.cu (see the top); said once per process. */
static bool cd_positional(const mg_dropout *drop) {
    static bool said = false;
    if (!drop || drop->mode != MG_DROPOUT_POSITIONAL) return false;
    if (!said)
        mg_log_info("attention: --layout-invariant-dropout runs our attention kernels (their "
                    "position-keyed mask matches the CPU's and every parallel layout's; cuDNN's "
                    "generator cannot)");
    said = true;
    return true;
}

/* The document mask goes to attention.cu too (see the top); said once per process. */
static bool cd_documents(const int32_t *doc_start) {
    static bool said = false;
    if (!doc_start) return false;
    if (!said)
        mg_log_info("attention: --reset-attention-mask runs our attention kernels (cuDNN's graph "
                    "here has no per-token document mask)");
    said = true;
    return true;
}

/* The Philox offset of call `call` of the op numbered `use` in its stream at stream offset
 * `base`: calls and uses apart by 64 offset units (cuDNN's attention advances a thread's
 * generator by at most 16 per call: the stride its integrations reserve), calls of one op by
 * sequence (GQA runs a plan once per sequence, see the top). */
static __device__ __forceinline__ uint64_t cd_philox_offset(uint64_t base, uint64_t use, int call) {
    return (((base + use) << 16) | (uint64_t)call) << 6;
}

static __global__ void cd_offsets_kernel(uint64_t *slots, const uint64_t *state, uint64_t use,
                                         int calls) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < calls) slots[2 * c] = cd_philox_offset(state[1], use, c);
}

/* The offsets of a stream dropout's `calls` plan runs, written on the device from the stream's
 * state (no host value: the step can be replayed as a CUDA graph). Slots are 16 bytes apart, the
 * alignment the graph's tensors declare. */
static mg_status cd_offsets(mg_backend *be, cd_state *st, const mg_dropout *drop, int calls) {
    if (calls > 65536)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "cuDNN attention dropout: %d calls over 65536", calls);
    if (st->offset_slots < calls) {
        if (st->offsets) MG_CUDA_CHECK(cudaFree(st->offsets));
        st->offsets = NULL, st->offset_slots = 0;
        MG_CUDA_CHECK(cudaMalloc((void **)&st->offsets, (size_t)calls * 16));
        st->offset_slots = calls;
    }
    cd_offsets_kernel<<<(calls + 127) / 128, 128, 0, mg_cuda_stream(be)>>>(st->offsets,
                                                                          drop->state, drop->use,
                                                                          calls);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* The plan for this call, or NULL: the call runs on attention.cu's kernels (positional masks,
 * documents, unaligned buffers, a shape or dropout cuDNN has no plan for). A dropout of p = 0 is
 * none (*drop becomes NULL), so both directions route it alike. */
template <typename h16>
static mg_status cd_route(mg_backend *be, const void *const *ptrs, int nptrs, int B, int S, int nq,
                          int ng, int hd, const mg_dropout **drop_io, const int32_t *doc_start,
                          cd_plan **out) {
    *out = NULL;
    if (*drop_io && (*drop_io)->threshold == 0) *drop_io = NULL;
    const mg_dropout *drop = *drop_io;
    if (cd_positional(drop) || cd_documents(doc_start)) return MG_OK;
    if (!cd_shape_ok(B, S, nq, ng) || !cd_aligned(ptrs, nptrs)) return MG_OK;
    cd_plan *p = NULL;
    MG_CHECK(cd_plan_for<h16>(be, B, S, nq, ng, hd, drop ? drop->threshold : 0u, &p));
    if (p->ok) *out = p;
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_forward,
               (mg_backend * be, void *out /* (B*S, nq*hd) */, void *saved /* (B, nq, S) fp32 */,
                const void *qkv /* (B*S, ng*(r+2)*hd) */, int B, int S, int nq, int ng, int hd,
                const mg_dropout *drop, const int32_t *doc_start /* (B*S) or NULL */),
               (be, out, saved, qkv, B, S, nq, ng, hd, drop, doc_start)) {
    const void *ptrs[] = {out, qkv, saved};
    cd_plan *p = NULL;
    MG_CHECK(cd_route<h16>(be, ptrs, 3, B, S, nq, ng, hd, &drop, doc_start, &p));
    if (!p)
        return MG_CUDA_OF(h16, attention_forward)(be, out, saved, qkv, B, S, nq, ng, hd, drop,
                                                  doc_start);
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cd_state *st = (cd_state *)ctx->cudnn_attn;
    MG_CHECK(cd_workspace_check(be, (size_t)p->fwd_ws, "forward", B, S, nq, hd));
    const int r = nq / ng;
    const size_t C = (size_t)ng * (r + 2) * hd, OW = (size_t)nq * hd;
    const int calls = r == 1 ? 1 : B; /* see the top comment: GQA runs per sequence */
    if (drop) MG_CHECK(cd_offsets(be, st, drop, calls));
    float scale = 1.0f / sqrtf((float)hd), neginf = -INFINITY, dscale = drop ? drop->scale : 1.0f;
    for (int b = 0; b < calls; b++) {
        const h16 *x = (const h16 *)qkv + (size_t)b * S * C;
        cd_pack k = {{0}, {0}, 0};
        cd_put(&k, CD_UID_Q, x);
        cd_put(&k, CD_UID_K, x + (size_t)r * hd);
        cd_put(&k, CD_UID_V, x + (size_t)(r + 1) * hd);
        cd_put(&k, CD_UID_O, (h16 *)out + (size_t)b * S * OW);
        cd_put(&k, CD_UID_STATS, (float *)saved + (size_t)b * nq * S);
        cd_put(&k, CD_UID_SCALE, &scale);
        cd_put(&k, CD_UID_NEGINF, &neginf);
        cd_put_dropout(&k, st, drop, b, &dscale);
        MG_CHECK(cd_execute(st, p->fwd, &k, ctx->workspace));
    }
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_backward,
               (mg_backend * be, void *dqkv /* (B*S, ng*(r+2)*hd) */,
                const void *dout /* (B*S, nq*hd) */, const void *qkv /* (B*S, ng*(r+2)*hd) */,
                const void *out /* (B*S, nq*hd) */, const void *saved /* (B, nq, S) fp32 */, int B,
                int S, int nq, int ng, int hd, const mg_dropout *drop,
                const int32_t *doc_start /* (B*S) or NULL */),
               (be, dqkv, dout, qkv, out, saved, B, S, nq, ng, hd, drop, doc_start)) {
    const void *ptrs[] = {dqkv, dout, qkv, out, saved};
    cd_plan *p = NULL;
    MG_CHECK(cd_route<h16>(be, ptrs, 5, B, S, nq, ng, hd, &drop, doc_start, &p));
    if (!p)
        return MG_CUDA_OF(h16, attention_backward)(be, dqkv, dout, qkv, out, saved, B, S, nq, ng,
                                                   hd, drop, doc_start);
    mg_cuda_ctx *ctx = mg_cuda_ctx_of(be);
    cd_state *st = (cd_state *)ctx->cudnn_attn;
    const int r = nq / ng, calls = r == 1 ? 1 : B, bq = r == 1 ? B : 1; /* sequences per call */
    const size_t C = (size_t)ng * (r + 2) * hd, OW = (size_t)nq * hd;
    /* workspace: [Dsum | dQ_accum (nondet) | cuDNN's], each 256-byte aligned */
    const size_t dsum_bytes = ((size_t)bq * nq * S * sizeof(float) + 255) & ~(size_t)255;
    const size_t acc_bytes =
        p->det ? 0 : ((size_t)bq * nq * S * hd * sizeof(float) + 255) & ~(size_t)255;
    MG_CHECK(cd_workspace_check(be, dsum_bytes + acc_bytes + (size_t)p->bwd_ws, "backward", B, S,
                                nq, hd));
    if (drop) MG_CHECK(cd_offsets(be, st, drop, calls)); /* the forward's: same state and use */
    char *ws = (char *)ctx->workspace;
    /* the ONE scalar scales Dsum: 1 - p with dropout (see cd_build_backward) */
    float scale = 1.0f / sqrtf((float)hd), neginf = -INFINITY;
    float one = drop ? 1.0f / drop->scale : 1.0f, dscale = drop ? drop->scale : 1.0f;
    for (int b = 0; b < calls; b++) {
        const h16 *x = (const h16 *)qkv + (size_t)b * S * C;
        h16 *dx = (h16 *)dqkv + (size_t)b * S * C;
        const size_t ob = (size_t)b * S * OW;
        /* cuDNN < 9.6 expects the fp32 dQ accumulator zeroed by the caller (frontend) */
        if (!p->det && st->version < 90600)
            MG_CUDA_CHECK(cudaMemsetAsync(ws + dsum_bytes, 0, acc_bytes, ctx->stream));
        cd_pack k = {{0}, {0}, 0};
        cd_put(&k, CD_UID_Q, x);
        cd_put(&k, CD_UID_K, x + (size_t)r * hd);
        cd_put(&k, CD_UID_V, x + (size_t)(r + 1) * hd);
        cd_put(&k, CD_UID_O, (const h16 *)out + ob);
        cd_put(&k, CD_UID_DO, (const h16 *)dout + ob);
        cd_put(&k, CD_UID_STATS, (const float *)saved + (size_t)b * nq * S);
        cd_put(&k, CD_UID_DQ, dx);
        cd_put(&k, CD_UID_DK, dx + (size_t)r * hd);
        cd_put(&k, CD_UID_DV, dx + (size_t)(r + 1) * hd);
        cd_put(&k, CD_UID_DSUM, ws);
        cd_put(&k, CD_UID_SCALE, &scale);
        cd_put(&k, CD_UID_NEGINF, &neginf);
        cd_put(&k, CD_UID_ONE, &one);
        if (!p->det) cd_put(&k, CD_UID_DQACC, ws + dsum_bytes);
        cd_put_dropout(&k, st, drop, b, &dscale);
        MG_CHECK(cd_execute(st, p->bwd, &k, ws + dsum_bytes + acc_bytes));
    }
    return MG_OK;
}

#else /* !MG_HAVE_CUDNN: the entries exist so the table and tests link; they report absence */

MG_CUDA_DTYPES(int, attention_cudnn_available, (void), ()) {
    return 0;
}

static mg_status cd_absent(void) {
    return MG_FAIL(MG_ERR_UNSUPPORTED, "cuDNN attention: this build has no cuDNN (the Makefile "
                                       "found no cudnn.h); use MG_ATTENTION=ours");
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_init, (mg_backend * be, int deterministic),
               (be, deterministic)) {
    return cd_absent();
}

MG_CUDA_DTYPES(void, attention_cudnn_destroy, (mg_backend * be), (be)) {}

MG_CUDA_DTYPES(mg_status, attention_cudnn_supported,
               (mg_backend * be, int B, int S, int nq, int ng, int hd, uint32_t drop,
                int *supported),
               (be, B, S, nq, ng, hd, drop, supported)) {
    *supported = 0;
    return MG_OK;
}

MG_CUDA_DTYPES(size_t, attention_cudnn_saved_bytes, (mg_backend * be, int B, int S, int nq, int hd),
               (be, B, S, nq, hd)) {
    return MG_CUDA_OF(h16, attention_saved_bytes)(be, B, S, nq, hd);
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_forward,
               (mg_backend * be, void *out, void *saved, const void *qkv, int B, int S, int nq,
                int ng, int hd, const mg_dropout *drop, const int32_t *doc_start),
               (be, out, saved, qkv, B, S, nq, ng, hd, drop, doc_start)) {
    return cd_absent();
}

MG_CUDA_DTYPES(mg_status, attention_cudnn_backward,
               (mg_backend * be, void *dqkv, const void *dout, const void *qkv, const void *out,
                const void *saved, int B, int S, int nq, int ng, int hd, const mg_dropout *drop,
                const int32_t *doc_start),
               (be, dqkv, dout, qkv, out, saved, B, S, nq, ng, hd, drop, doc_start)) {
    return cd_absent();
}
#endif
