/* A small training-like step for the graph tests, on any backend (tests/unit/test_graph.c runs it
 * on the CPU backend's recorder, tests/cuda/test_cuda_graph.c on CUDA graphs): a linear layer
 * with bias and residual, hidden dropout drawn from a device stream, its backward, the squared
 * gradient norm, AdamW with the learning rate read from backend memory, the stream advanced, and
 * the input moved by the input gradient, so each step starts from a different state. The dropout
 * descriptor lives on graph_step's stack, so a replay after the capture's return also checks that
 * the graph kept its own copy. Everything a step changes is in the buffers (twin() makes a second,
 * equal set), and the learning rate is set between steps with graph_set_lr, outside any graph.
 * Header-only (static functions), with the check both tests make (graph_replay_check). */
#ifndef MG_TESTS_GRAPH_STEP_H
#define MG_TESTS_GRAPH_STEP_H

#include "test.h"

#include "backend/backend.h"
#include "core/dropout.h"
#include "core/rng.h"

#include <stdlib.h>
#include <string.h>

enum { GS_N = 48, GS_IC = 32, GS_OC = 32 };

typedef struct {
    void *x, *w, *bias, *res, *out,
        *dx;                         /* compute dtype: (N,IC) (OC,IC) (OC) (N,OC) (N,OC) (N,IC) */
    float *dw, *db, *master, *m, *v; /* fp32: (OC,IC) (OC) (OC,IC) (OC,IC) (OC,IC) */
    float *ctl;                      /* fp32: lr, wd, bc1, bc2, grad scale, sum of squares */
    uint64_t *rng;                   /* {seed, offset} */
} graph_bufs;

static inline size_t gs_act_bytes(const mg_backend *be, size_t n) {
    return n * mg_dtype_size(be->compute_dtype);
}

/* n seeded normal values times scale in host memory (malloc'd; NULL: out of memory) */
static inline float *gs_normal(uint64_t seed, uint32_t id, size_t n, float scale) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; h && i < n; i++) h[i] = scale * mg_rng_normal(seed, id, i);
    return h;
}

/* fills dst (compute dtype, n values) with seeded normal values */
static inline mg_status gs_fill(mg_backend *be, void *dst, uint32_t id, size_t n, float scale) {
    float *h = gs_normal(77, id, n, scale);
    if (!h) return MG_FAIL(MG_ERR_NOMEM, "graph test: host memory");
    mg_status st = be->upload_f32(be, dst, h, n);
    free(h);
    return st;
}

/* the same for an fp32 buffer */
static inline mg_status gs_fill_f32(mg_backend *be, float *dst, uint32_t id, size_t n,
                                    float scale) {
    float *h = gs_normal(78, id, n, scale);
    if (!h) return MG_FAIL(MG_ERR_NOMEM, "graph test: host memory");
    mg_status st = be->copy_h2d(be, dst, h, n * sizeof *h);
    free(h);
    return st;
}

static inline mg_status graph_set_lr(mg_backend *be, graph_bufs *g, float lr) {
    const float ctl[5] = {lr, 0.1f, 0.1f, 0.01f, 1.0f}; /* lr, wd, bc1, bc2, grad scale */
    return be->copy_h2d(be, g->ctl, ctl, sizeof ctl);
}

/* Allocates and fills one set of buffers (the same values for the same backend dtype). */
static inline mg_status graph_bufs_init(mg_backend *be, graph_bufs *g) {
    const size_t nx = (size_t)GS_N * GS_IC, nw = (size_t)GS_OC * GS_IC, no = (size_t)GS_N * GS_OC;
    MG_CHECK(be->alloc(be, gs_act_bytes(be, nx), &g->x));
    MG_CHECK(be->alloc(be, gs_act_bytes(be, nw), &g->w));
    MG_CHECK(be->alloc(be, gs_act_bytes(be, GS_OC), &g->bias));
    MG_CHECK(be->alloc(be, gs_act_bytes(be, no), &g->res));
    MG_CHECK(be->alloc(be, gs_act_bytes(be, no), &g->out));
    MG_CHECK(be->alloc(be, gs_act_bytes(be, nx), &g->dx));
    void **f[] = {(void **)&g->dw, (void **)&g->master, (void **)&g->m, (void **)&g->v};
    for (int i = 0; i < 4; i++) MG_CHECK(be->alloc(be, nw * sizeof(float), f[i]));
    MG_CHECK(be->alloc(be, GS_OC * sizeof(float), (void **)&g->db));
    MG_CHECK(be->alloc(be, 8 * sizeof(float), (void **)&g->ctl));
    MG_CHECK(be->alloc(be, 2 * sizeof(uint64_t), (void **)&g->rng));
    MG_CHECK(gs_fill(be, g->x, 1, nx, 1.0f));
    MG_CHECK(gs_fill(be, g->w, 2, nw, 0.2f));
    MG_CHECK(gs_fill(be, g->bias, 3, GS_OC, 0.1f));
    MG_CHECK(gs_fill(be, g->res, 4, no, 1.0f));
    MG_CHECK(gs_fill_f32(be, g->master, 2, nw, 0.2f));
    const uint64_t rng[2] = {20261129u, 7};
    MG_CHECK(be->copy_h2d(be, g->rng, rng, sizeof rng));
    return graph_set_lr(be, g, 1e-3f);
}

static inline void graph_bufs_free(mg_backend *be, graph_bufs *g) {
    void *p[] = {g->x,  g->w, g->bias,   g->res, g->out, g->dx, g->dw,
                 g->db, g->m, g->master, g->v,   g->ctl, g->rng};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) be->free(be, p[i]);
}

/* The step (see the header comment). */
static inline mg_status graph_step(mg_backend *be, graph_bufs *g) {
    const size_t nx = (size_t)GS_N * GS_IC, nw = (size_t)GS_OC * GS_IC;
    MG_CHECK(be->memset_zero(be, g->dw, nw * sizeof(float)));
    MG_CHECK(be->memset_zero(be, g->db, GS_OC * sizeof(float)));
    MG_CHECK(be->memset_zero(be, &g->ctl[5], sizeof(float)));
    MG_CHECK(be->linear_forward(be, g->out, g->x, g->w, g->bias, NULL, GS_N, GS_IC, GS_OC));
    mg_dropout drop = mg_dropout_stream_init(0.25, g->rng, 3);
    MG_CHECK(be->dropout_add(be, g->out, g->out, NULL, g->res, GS_N, GS_OC, GS_N, &drop));
    MG_CHECK(
        be->linear_backward(be, g->dx, g->dw, g->db, g->out, g->x, g->w, NULL, GS_N, GS_IC, GS_OC));
    MG_CHECK(be->sumsq_f32(be, &g->ctl[5], g->dw, nw, NULL));
    /* one span: lr ctl[0], wd ctl[1]; static, as a graph holding the call keeps the array */
    static const mg_adamw_span span = {0, 0, 0, (size_t)GS_OC * GS_IC, 0, 1};
    MG_CHECK(be->adamw(be, g->w, g->master, g->dw, g->m, g->v, &span, 1, g->ctl, &g->ctl[2], 0.9f,
                       0.95f, 1e-8f, &g->ctl[4]));
    MG_CHECK(be->rng_advance(be, g->rng, 1, 1));
    return be->add(be, g->x, g->x, g->dx, nx);
}

/* The state a step leaves, as host fp32 values (master, m, v, x, sum of squares), for
 * comparison. */
static inline mg_status graph_state(mg_backend *be, graph_bufs *g,
                                    float *out /* (3 nw + nx + 1) */) {
    const size_t nx = (size_t)GS_N * GS_IC, nw = (size_t)GS_OC * GS_IC;
    MG_CHECK(be->copy_d2h(be, out, g->master, nw * sizeof(float)));
    MG_CHECK(be->copy_d2h(be, out + nw, g->m, nw * sizeof(float)));
    MG_CHECK(be->copy_d2h(be, out + 2 * nw, g->v, nw * sizeof(float)));
    MG_CHECK(be->download_f32(be, out + 3 * nw, g->x, nx));
    return be->copy_d2h(be, out + 3 * nw + nx, &g->ctl[5], sizeof(float));
}
#define GS_STATE_FLOATS (3 * GS_OC * GS_IC + GS_N * GS_IC + 1)

/* The test both backends run: one step captured into a second set of buffers (the capture runs
 * nothing), then `steps` times the step run eagerly on the first set and the graph launched on
 * the second, with lrs[i] set in both first: the states equal bitwise and move on every time.
 * *info: the graph's size. host_syncs (NULL: not counted): the backend's host-synchronisation
 * counter, which a launch must leave alone. */
static inline void graph_replay_check(mg_test_ctx *t, mg_backend *be, const float *lrs, int steps,
                                      mg_graph_info *info, const uint64_t *host_syncs) {
    graph_bufs a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    static float sa[GS_STATE_FLOATS], sb[GS_STATE_FLOATS], s0[GS_STATE_FLOATS];
    MG_EXPECT_OK(graph_bufs_init(be, &a));
    MG_EXPECT_OK(graph_bufs_init(be, &b));
    MG_EXPECT_OK(graph_state(be, &b, s0));
    mg_graph *g = NULL;
    *info = (mg_graph_info){0, 0};
    MG_EXPECT_OK(be->graph_begin(be));
    MG_EXPECT_OK(graph_step(be, &b));
    MG_EXPECT_OK(be->graph_end(be, &g, info));
    if (g) {
        MG_EXPECT_OK(graph_state(be, &b, sb));
        MG_EXPECT(memcmp(s0, sb, sizeof sb) == 0, "the capture ran the step");
    }
    for (int step = 0; g && step < steps; step++) {
        MG_EXPECT_OK(graph_set_lr(be, &a, lrs[step]));
        MG_EXPECT_OK(graph_set_lr(be, &b, lrs[step]));
        MG_EXPECT_OK(graph_step(be, &a));
        uint64_t syncs = host_syncs ? *host_syncs : 0;
        MG_EXPECT_OK(be->graph_launch(be, g));
        MG_EXPECT(!host_syncs || *host_syncs == syncs, "a launch synchronised the host");
        MG_EXPECT_OK(graph_state(be, &a, sa));
        MG_EXPECT_OK(graph_state(be, &b, sb));
        MG_EXPECT(memcmp(sa, sb, sizeof sa) == 0, "step %d: replay differs from eager", step);
        MG_EXPECT(memcmp(sa, s0, sizeof sa) != 0, "step %d: the step changed nothing", step);
        memcpy(s0, sa, sizeof sa);
    }
    be->graph_free(be, g);
    graph_bufs_free(be, &a);
    graph_bufs_free(be, &b);
}

#endif
