/* The operation graphs of cuDNN's fused attention (the SDPA "runtime fusion" engines), built
 * with the backend API through cudnn_graph.cuh, and their plans: the forward and backward graphs
 * attention_cudnn.cu describes at its top (causal mask, GQA views into the fused qkv layout,
 * deterministic or accumulating dQ, attention dropout from an RNG operation), and the choice of
 * the first engine configuration that finalises. Internal to attention_cudnn.cu, which includes
 * it once.
 * Exports: cd_h16, CD_UID_*, cd_views, cd_views_of, cd_build_forward, cd_build_backward,
 * cd_make_plan. Needs: cudnn_graph.cuh, cuda_fp16/bf16 types. */
#ifndef MG_BACKEND_CUDA_ATTENTION_CUDNN_GRAPHS_CUH
#define MG_BACKEND_CUDA_ATTENTION_CUDNN_GRAPHS_CUH

#include "backend/cuda/cudnn_graph.cuh"

#include <stdint.h>
#include <string.h>
#include <type_traits>

/* the 16-bit type's cuDNN code */
template <typename h16>
static constexpr cudnnDataType_t cd_h16 =
    std::is_same<h16, __half>::value ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;

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

#endif
