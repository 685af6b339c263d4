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
 * shape needing more fails with MG_ERR_NOMEM naming it and the size. Exports:
 * mg_cuda_attention_cudnn_* (cuda_ops.h). */
/* first: it declares the core error API with C linkage (core/status.h has no guards) */
#include "backend/cuda/cuda_common.cuh"

#include "core/log.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MG_HAVE_CUDNN
#include "backend/cuda/cudnn_graph.cuh"

/* the 16-bit type's cuDNN code */
template <typename h16>
static constexpr cudnnDataType_t cd_h16 =
    std::is_same<h16, __half>::value ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;

#define CD_PLANS     32  /* shapes per backend: a model has one or two */
#define CD_MAX_DESCS 400 /* descriptors one shape's two graphs use (about 170, 200 with dropout) */

/* variant-pack uids of the non-virtual tensors; virtual ones count up from CD_UID_VIRT */
enum {
    CD_UID_Q = 1,
    CD_UID_K,
    CD_UID_V,
    CD_UID_O,
    CD_UID_STATS,
    CD_UID_SCALE,
    CD_UID_NEGINF,
    CD_UID_ONE,
    CD_UID_DO,
    CD_UID_DQ,
    CD_UID_DK,
    CD_UID_DV,
    CD_UID_DSUM,
    CD_UID_DQACC,
    CD_UID_SEED,   /* dropout: the stream's seed, int64 in device memory */
    CD_UID_OFFSET, /* dropout: the call's Philox offset, int64 in device memory */
    CD_UID_DSCALE, /* dropout: 1 / (1 - p), by value */
    CD_UID_VIRT = 100
};

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

/* ---------------------------------------------------------------- graph building */

/* Views of one call: "batch" nb, query heads hq, kv heads hk (see the top comment). Strides in
 * elements, order (batch, head, seq, hd); stats and Dsum are (nb, hq, S, 1) packed. */
typedef struct {
    int64_t nb, hq, hk, S, D;
    int64_t q[4], k[4], v[4], o[4], dq[4], dk[4], dv[4];
} cd_views;

static cd_views cd_views_of(int B, int S, int nq, int ng, int hd) {
    const int64_t r = nq / ng, C = (int64_t)ng * (r + 2) * hd, OW = (int64_t)nq * hd;
    cd_views w;
    memset(&w, 0, sizeof w);
    w.S = S, w.D = hd;
    if (r == 1) { /* one call: batch B, heads nq, head stride 3 hd */
        w.nb = B, w.hq = nq, w.hk = nq;
        const int64_t qs[4] = {(int64_t)S * C, 3 * (int64_t)hd, C, 1};
        const int64_t os[4] = {(int64_t)S * OW, hd, OW, 1};
        memcpy(w.q, qs, sizeof qs), memcpy(w.o, os, sizeof os);
    } else { /* per sequence: batch = group, heads = the r query heads of the group */
        w.nb = ng, w.hq = r, w.hk = 1;
        const int64_t qs[4] = {(r + 2) * hd, hd, C, 1};
        const int64_t os[4] = {r * hd, hd, OW, 1};
        memcpy(w.q, qs, sizeof qs), memcpy(w.o, os, sizeof os);
    }
    memcpy(w.k, w.q, sizeof w.q);
    if (r > 1) w.k[1] = (r + 2) * hd; /* one kv head: any stride, kept consistent */
    memcpy(w.v, w.k, sizeof w.k);
    memcpy(w.dq, w.q, sizeof w.q), memcpy(w.dk, w.k, sizeof w.k), memcpy(w.dv, w.v, sizeof w.v);
    return w;
}

/* dims/strides helpers */
static void cd_dims(int64_t out[4], int64_t a, int64_t b, int64_t c, int64_t d) {
    out[0] = a, out[1] = b, out[2] = c, out[3] = d;
}
static void cd_swap23(int64_t out[4], const int64_t in[4]) {
    out[0] = in[0], out[1] = in[1], out[2] = in[3], out[3] = in[2];
}

/* The shared front of both graphs: masked, scaled scores (nb, hq, S, S) fp32, virtual. */
static cudnnBackendDescriptor_t cd_masked_scores(cd_graph *g, const cd_views *w,
                                                 cudnnBackendDescriptor_t q,
                                                 cudnnBackendDescriptor_t kt) {
    int64_t sd[4], ss[4];
    cd_dims(sd, w->nb, w->hq, w->S, w->S);
    cd_dims(ss, w->hq * w->S * w->S, w->S * w->S, w->S, 1);
    cudnnBackendDescriptor_t s = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_matmul(g, q, kt, s);
    cudnnBackendDescriptor_t scaled = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, cd_scalar(g, CD_UID_SCALE), NULL,
                 scaled, -1);
    /* causal, top-left aligned: keep row >= col (the frontend's diagonal band, right bound 0) */
    cudnnBackendDescriptor_t row = cd_tensor(g, 0, CUDNN_DATA_INT32, sd, ss);
    cudnnBackendDescriptor_t col = cd_tensor(g, 0, CUDNN_DATA_INT32, sd, ss);
    cudnnBackendDescriptor_t keep = cd_tensor(g, 0, CUDNN_DATA_BOOLEAN, sd, ss);
    cudnnBackendDescriptor_t masked = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scaled, NULL, NULL, row, 2);
    cd_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scaled, NULL, NULL, col, 3);
    cd_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cd_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scaled,
                 cd_scalar(g, CD_UID_NEGINF), keep, masked, -1);
    return masked;
}

/* The dropout's keep mask (nb, hq, S, S) fp32, virtual: Bernoulli(1 - p) draws of cuDNN's Philox
 * generator from the seed and offset tensors (int64 scalars in device memory). */
static cudnnBackendDescriptor_t cd_keep_mask(cd_graph *g, const cd_views *w, double p) {
    static const int64_t one[4] = {1, 1, 1, 1};
    int64_t sd[4], ss[4];
    cd_dims(sd, w->nb, w->hq, w->S, w->S);
    cd_dims(ss, w->hq * w->S * w->S, w->S * w->S, w->S, 1);
    cudnnBackendDescriptor_t seed = cd_tensor(g, CD_UID_SEED, CUDNN_DATA_INT64, one, one);
    cudnnBackendDescriptor_t offset = cd_tensor(g, CD_UID_OFFSET, CUDNN_DATA_INT64, one, one);
    cudnnBackendDescriptor_t mask = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_rng_bernoulli(g, 1.0 - p, seed, offset, mask);
    return mask;
}

/* p of a plan's threshold (the value mg_dropout_set_p rounded to it, to within 2^-32). */
static double cd_drop_p(uint32_t threshold) {
    return (double)threshold / 4294967296.0;
}

template <typename h16> static void cd_build_forward(cd_graph *g, const cd_views *w, uint32_t drop) {
    int64_t d[4], s[4], kd[4], ks[4], rd[4], rs[4], sd[4], ss[4];
    cd_dims(d, w->nb, w->hq, w->S, w->D);
    cd_dims(kd, w->nb, w->hk, w->D, w->S);
    cd_swap23(ks, w->k);
    cudnnBackendDescriptor_t q = cd_tensor(g, CD_UID_Q, cd_h16<h16>, d, w->q);
    cudnnBackendDescriptor_t kt = cd_tensor(g, CD_UID_K, cd_h16<h16>, kd, ks);
    cd_dims(s, w->nb, w->hk, w->S, w->D);
    cudnnBackendDescriptor_t v = cd_tensor(g, CD_UID_V, cd_h16<h16>, s, w->v);
    cudnnBackendDescriptor_t o = cd_tensor(g, CD_UID_O, cd_h16<h16>, d, w->o);
    cudnnBackendDescriptor_t x = cd_masked_scores(g, w, q, kt);

    cd_dims(rd, w->nb, w->hq, w->S, 1); /* per-row statistics */
    cd_dims(rs, w->hq * w->S, w->S, 1, 1);
    cd_dims(sd, w->nb, w->hq, w->S, w->S);
    cd_dims(ss, w->hq * w->S * w->S, w->S * w->S, w->S, 1);
    cudnnBackendDescriptor_t m = cd_tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t xm = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t e = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t z = cd_tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t lz = cd_tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t stats = cd_tensor(g, CD_UID_STATS, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t p = cd_tensor(g, 0, drop ? CUDNN_DATA_FLOAT : cd_h16<h16>, sd, ss);
    cd_reduce(g, CUDNN_REDUCE_TENSOR_MAX, x, m);
    cd_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, x, m, NULL, xm, -1);
    cd_pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, xm, NULL, NULL, e, -1);
    cd_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, z);
    cd_pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, z, NULL, NULL, lz, -1);
    cd_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, m, lz, NULL, stats, -1);
    cd_pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, z, NULL, p, -1);
    if (drop) { /* P f = (P keep) / (1 - p), h16 into the second product */
        cudnnBackendDescriptor_t mask = cd_keep_mask(g, w, cd_drop_p(drop));
        cudnnBackendDescriptor_t pm = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
        cudnnBackendDescriptor_t pf = cd_tensor(g, 0, cd_h16<h16>, sd, ss);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, p, mask, NULL, pm, -1);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, pm, cd_scalar(g, CD_UID_DSCALE),
                     NULL, pf, -1);
        p = pf;
    }
    cd_matmul(g, p, v, o);
}

/* dX (nb, hk, rows, D) = a (nb, hq, rows, S) b: directly when hq == hk, else per query head
 * (virtual, h16 as in the frontend) and summed over the group. */
template <typename h16>
static void cd_grouped_matmul(cd_graph *g, const cd_views *w, cudnnBackendDescriptor_t a,
                              cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) {
    if (w->hq == w->hk) {
        cd_matmul(g, a, b, out);
        return;
    }
    int64_t fd[4], fs[4];
    cd_dims(fd, w->nb, w->hq, w->S, w->D);
    cd_dims(fs, w->hq * w->S * w->D, w->S * w->D, w->D, 1);
    cudnnBackendDescriptor_t full = cd_tensor(g, 0, cd_h16<h16>, fd, fs);
    cd_matmul(g, a, b, full);
    cd_reduce(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

template <typename h16>
static void cd_build_backward(cd_graph *g, const cd_views *w, int det, uint32_t drop) {
    int64_t d[4], kvd[4], td[4], ks[4], vs[4], rd[4], rs[4], sd[4], ss[4], tsd[4], tss[4], pd[4],
        ps[4];
    cd_dims(d, w->nb, w->hq, w->S, w->D);
    cd_dims(kvd, w->nb, w->hk, w->S, w->D);
    cd_dims(td, w->nb, w->hk, w->D, w->S);
    cd_swap23(ks, w->k);
    cd_swap23(vs, w->v);
    cd_dims(rd, w->nb, w->hq, w->S, 1);
    cd_dims(rs, w->hq * w->S, w->S, 1, 1);
    cd_dims(sd, w->nb, w->hq, w->S, w->S);
    cd_dims(ss, w->hq * w->S * w->S, w->S * w->S, w->S, 1);
    cd_dims(tsd, w->nb, w->hq, w->S, w->S); /* transposed scores: (kv, q) */
    cd_dims(tss, w->hq * w->S * w->S, w->S * w->S, 1, w->S);
    cd_dims(pd, w->nb, w->hq, w->S, w->D); /* packed fp32 (nb, hq, S, D) */
    cd_dims(ps, w->hq * w->S * w->D, w->S * w->D, w->D, 1);

    cudnnBackendDescriptor_t q = cd_tensor(g, CD_UID_Q, cd_h16<h16>, d, w->q);
    cudnnBackendDescriptor_t kt = cd_tensor(g, CD_UID_K, cd_h16<h16>, td, ks);
    cudnnBackendDescriptor_t vt = cd_tensor(g, CD_UID_V, cd_h16<h16>, td, vs);
    cudnnBackendDescriptor_t o = cd_tensor(g, CD_UID_O, cd_h16<h16>, d, w->o);
    cudnnBackendDescriptor_t dout = cd_tensor(g, CD_UID_DO, cd_h16<h16>, d, w->o);
    cudnnBackendDescriptor_t stats = cd_tensor(g, CD_UID_STATS, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t dq = cd_tensor(g, CD_UID_DQ, cd_h16<h16>, d, w->dq);
    cudnnBackendDescriptor_t dk = cd_tensor(g, CD_UID_DK, cd_h16<h16>, kvd, w->dk);
    cudnnBackendDescriptor_t dv = cd_tensor(g, CD_UID_DV, cd_h16<h16>, kvd, w->dv);

    /* the forward's keep mask, drawn again from the same seed and offset */
    cudnnBackendDescriptor_t mask = drop ? cd_keep_mask(g, w, cd_drop_p(drop)) : NULL;

    /* Dsum = rowsum(dO * O) * (1 - p) (1 without dropout: the ONE scalar carries it),
     * materialised in our workspace (the frontend's softmax_sum) */
    cudnnBackendDescriptor_t doo = cd_tensor(g, 0, CUDNN_DATA_FLOAT, pd, ps);
    cudnnBackendDescriptor_t dsum0 = cd_tensor(g, 0, CUDNN_DATA_FLOAT, rd, rs);
    cudnnBackendDescriptor_t dsum = cd_tensor(g, CD_UID_DSUM, CUDNN_DATA_FLOAT, rd, rs);
    cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, doo, -1);
    cd_reduce(g, CUDNN_REDUCE_TENSOR_ADD, doo, dsum0);
    cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dsum0, cd_scalar(g, CD_UID_ONE), NULL,
                 dsum, -1);

    /* P = exp(masked scores - stats) */
    cudnnBackendDescriptor_t x = cd_masked_scores(g, w, q, kt);
    cudnnBackendDescriptor_t xs = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t p = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, x, stats, NULL, xs, -1);
    cd_pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, xs, NULL, NULL, p, -1);

    /* dV = (P f)^T dO */
    cudnnBackendDescriptor_t pv = p;
    if (drop) {
        cudnnBackendDescriptor_t pm = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
        pv = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, p, mask, NULL, pm, -1);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, pm, cd_scalar(g, CD_UID_DSCALE),
                     NULL, pv, -1);
    }
    cudnnBackendDescriptor_t pt = cd_tensor(g, 0, cd_h16<h16>, tsd, tss);
    cd_reshape(g, pv, pt);
    cd_grouped_matmul<h16>(g, w, pt, dout, dv);

    /* dS = P (dO V^T - Dsum) * scale; with dropout P (keep dO V^T - Dsum (1 - p)) / (1 - p)
     * * scale, which is P (f dP - Dsum) * scale */
    cudnnBackendDescriptor_t dp = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t dpd = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t ds0 = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cudnnBackendDescriptor_t ds = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
    cd_matmul(g, dout, vt, dp);
    if (drop) {
        cudnnBackendDescriptor_t dpm = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp, mask, NULL, dpm, -1);
        dp = dpm;
    }
    cd_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, dsum, NULL, dpd, -1);
    cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dpd, p, NULL, ds0, -1);
    if (drop) {
        cudnnBackendDescriptor_t ds1 = cd_tensor(g, 0, CUDNN_DATA_FLOAT, sd, ss);
        cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds0, cd_scalar(g, CD_UID_DSCALE),
                     NULL, ds1, -1);
        ds0 = ds1;
    }
    cd_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds0, cd_scalar(g, CD_UID_SCALE), NULL,
                 ds, -1);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = cd_tensor(g, 0, cd_h16<h16>, tsd, tss);
    cd_reshape(g, ds, dst);
    cd_grouped_matmul<h16>(g, w, dst, q, dk);

    /* dQ = dS K (K back from K^T by a reshape, as the frontend does) */
    cudnnBackendDescriptor_t k = cd_tensor(g, 0, cd_h16<h16>, kvd, w->k);
    cd_reshape(g, kt, k);
    if (det) {
        cd_matmul(g, ds, k, dq);
    } else {
        cudnnBackendDescriptor_t acc = cd_tensor(g, CD_UID_DQACC, CUDNN_DATA_FLOAT, pd, ps);
        cd_matmul(g, ds, k, acc);
        cd_pointwise(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, dq, -1);
    }
}

static bool cd_engine_nondeterministic(cd_graph *g, cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine = cd_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0;
    if (!engine) return false;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &engine) != CUDNN_STATUS_SUCCESS)
        return false;
    n = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return false;
    for (int64_t i = 0; i < n; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
    return false;
}

/* Operation graph of g's ops, heuristic mode A, first engine config that finalizes into a plan
 * (skipping non-deterministic ones if asked). *plan stays NULL when none does. */
static void cd_make_plan(cd_graph *g, cudnnHandle_t h, int det, cudnnBackendDescriptor_t *plan,
                         int64_t *ws) {
    *plan = NULL, *ws = 0;
    cudnnBackendDescriptor_t graph = cd_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cd_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    cd_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    cd_finalize(g, graph);
    cudnnBackendDescriptor_t heur = cd_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cd_set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    cd_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cd_finalize(g, heur);
    int64_t count = 0;
    CD_TRY(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    if (count > 8) count = 8;
    cudnnBackendDescriptor_t cfgs[8];
    for (int64_t i = 0; i < count; i++) cfgs[i] = cd_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    CD_TRY(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs));
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    for (int64_t i = 0; i < got && i < count; i++) {
        if (det && cd_engine_nondeterministic(g, cfgs[i])) continue;
        cudnnBackendDescriptor_t p = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) !=
            CUDNN_STATUS_SUCCESS)
            continue;
        int64_t w = 0;
        if (cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &h) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                     1, NULL, &w) == CUDNN_STATUS_SUCCESS) {
            *plan = p, *ws = w;
            return;
        }
        cudnnBackendDestroyDescriptor(p);
    }
    if (g->st == CUDNN_STATUS_SUCCESS) g->st = CUDNN_STATUS_NOT_SUPPORTED, g->line = __LINE__;
}

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

static mg_status cd_execute(cd_state *st, cudnnBackendDescriptor_t plan, const int64_t *uids,
                            void *const *ptrs, int n, void *ws) {
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
 * documents, unaligned buffers, a shape or dropout cuDNN has no plan for). */
template <typename h16>
static mg_status cd_route(mg_backend *be, const void *const *ptrs, int nptrs, int B, int S, int nq,
                          int ng, int hd, const mg_dropout *drop, const int32_t *doc_start,
                          cd_plan **out) {
    *out = NULL;
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
    if (drop && drop->threshold == 0) drop = NULL; /* p = 0 */
    const void *ptrs[] = {out, qkv, saved};
    cd_plan *p = NULL;
    MG_CHECK(cd_route<h16>(be, ptrs, 3, B, S, nq, ng, hd, drop, doc_start, &p));
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
        void *vp[] = {(void *)x,
                      (void *)(x + (size_t)r * hd),
                      (void *)(x + (size_t)(r + 1) * hd),
                      (h16 *)out + (size_t)b * S * OW,
                      (float *)saved + (size_t)b * nq * S,
                      &scale,
                      &neginf,
                      drop ? (void *)drop->state : NULL,
                      drop ? (void *)(st->offsets + 2 * b) : NULL,
                      &dscale};
        static const int64_t uids[] = {CD_UID_Q,     CD_UID_K,     CD_UID_V,      CD_UID_O,
                                       CD_UID_STATS, CD_UID_SCALE, CD_UID_NEGINF, CD_UID_SEED,
                                       CD_UID_OFFSET, CD_UID_DSCALE};
        MG_CHECK(cd_execute(st, p->fwd, uids, vp, drop ? 10 : 7, ctx->workspace));
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
    if (drop && drop->threshold == 0) drop = NULL; /* p = 0 */
    const void *ptrs[] = {dqkv, dout, qkv, out, saved};
    cd_plan *p = NULL;
    MG_CHECK(cd_route<h16>(be, ptrs, 5, B, S, nq, ng, hd, drop, doc_start, &p));
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
        void *vp[] = {(void *)x,
                      (void *)(x + (size_t)r * hd),
                      (void *)(x + (size_t)(r + 1) * hd),
                      (void *)((const h16 *)out + ob),
                      (void *)((const h16 *)dout + ob),
                      (void *)((const float *)saved + (size_t)b * nq * S),
                      dx,
                      dx + (size_t)r * hd,
                      dx + (size_t)(r + 1) * hd,
                      ws,
                      &scale,
                      &neginf,
                      &one,
                      ws + dsum_bytes,
                      drop ? (void *)drop->state : NULL,
                      drop ? (void *)(st->offsets + 2 * b) : NULL,
                      &dscale};
        int64_t uids[] = {CD_UID_Q,     CD_UID_K,     CD_UID_V,      CD_UID_O,   CD_UID_DO,
                          CD_UID_STATS, CD_UID_DQ,    CD_UID_DK,     CD_UID_DV,  CD_UID_DSUM,
                          CD_UID_SCALE, CD_UID_NEGINF, CD_UID_ONE,   CD_UID_DQACC, CD_UID_SEED,
                          CD_UID_OFFSET, CD_UID_DSCALE};
        int n = 13;
        if (!p->det) n++; /* the accumulator */
        if (drop) { /* the dropout's three after the (maybe absent) accumulator */
            if (p->det) vp[13] = vp[14], vp[14] = vp[15], vp[15] = vp[16];
            if (p->det) uids[13] = CD_UID_SEED, uids[14] = CD_UID_OFFSET, uids[15] = CD_UID_DSCALE;
            n += 3;
        }
        MG_CHECK(cd_execute(st, p->bwd, uids, vp, n, ws + dsum_bytes + acc_bytes));
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
