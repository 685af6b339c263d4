/* Graph capture and replay on the CPU backend (backend/graph_record.h): a replayed step equals
 * the same step run eagerly, bitwise, step after step, with the learning rate changed between
 * steps in backend memory; a capture runs nothing; the arguments are frozen at capture (a
 * structure passed by pointer is copied); the refused entries fail in one line and spoil the
 * capture, after which the table runs eagerly again. */
#include "graph_step.h"
#include "test.h"

#include "backend/backend.h"
#include "core/status.h"

#include <string.h>

static mg_backend *cpu_backend(mg_test_ctx *t) {
    mg_backend *be = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    return be;
}

MG_TEST(graph_cpu_replay_equals_eager_step_after_step) {
    mg_backend *be = cpu_backend(t);
    if (!be) return;
    const float lrs[4] = {1e-3f, 3e-3f, 5e-4f, 2e-3f};
    mg_graph_info info;
    graph_replay_check(t, be, lrs, 4, &info, NULL);
    /* 10 ops: 3 zeroings, forward, dropout, backward, sumsq, adamw, advance, add */
    MG_EXPECT(info.nodes == 10 && info.bytes > 0, "graph info: %zu calls, %zu bytes", info.nodes,
              info.bytes);
    be->destroy(be);
}

/* A scalar argument is the one given at capture: the graph does not see a later value. */
MG_TEST(graph_cpu_arguments_are_frozen_at_capture) {
    mg_backend *be = cpu_backend(t);
    if (!be) return;
    float *x = NULL, *acc = NULL;
    MG_EXPECT_OK(be->alloc(be, 4 * sizeof(float), (void **)&x));
    MG_EXPECT_OK(be->alloc(be, sizeof(float), (void **)&acc));
    if (!x || !acc) return;
    for (int i = 0; i < 4; i++) x[i] = (float)(i + 1); /* host memory on this backend */
    float scale = 2.0f;
    mg_graph *g = NULL;
    MG_EXPECT_OK(be->graph_begin(be));
    MG_EXPECT_OK(be->sum_f32(be, acc, x, NULL, 4, scale));
    MG_EXPECT_OK(be->graph_end(be, &g, NULL));
    scale = 100.0f;
    x[3] = 14.0f; /* buffers are read at launch: 1 + 2 + 3 + 14 */
    if (g) MG_EXPECT_OK(be->graph_launch(be, g));
    MG_EXPECT(*acc == 40.0f, "sum after one launch: %g, want 2 * 20 = 40", *acc);
    be->graph_free(be, g);
    be->free(be, x);
    be->free(be, acc);
    be->destroy(be);
}

MG_TEST(graph_cpu_refuses_host_reads_and_collectives) {
    mg_backend *be = cpu_backend(t);
    if (!be) return;
    float *x = NULL, h = 0;
    MG_EXPECT_OK(be->alloc(be, 4 * sizeof(float), (void **)&x));
    if (!x) return;
    const char *refused[] = {"copy_d2h", "synchronize", "alloc", "copy_h2d", "collective"};
    for (int k = 0; k < 5; k++) {
        mg_graph *g = NULL;
        void *p = NULL, *stream = NULL;
        MG_EXPECT_OK(be->graph_begin(be));
        MG_EXPECT_OK(be->memset_zero(be, x, 4 * sizeof(float)));
        mg_status st = k == 0   ? be->copy_d2h(be, &h, x, sizeof h)
                       : k == 1 ? be->synchronize(be)
                       : k == 2 ? be->alloc(be, 64, &p)
                       : k == 3 ? be->copy_h2d(be, x, &h, sizeof h)
                                : mg_backend_comm_begin(be, &stream);
        MG_EXPECT(st == MG_ERR_UNSUPPORTED && strstr(mg_error_message(), refused[k]) &&
                      strstr(mg_error_message(), "graph capture"),
                  "%s in a capture: status %d, '%s'", refused[k], (int)st, mg_error_message());
        MG_EXPECT_ERROR(be->graph_end(be, &g, NULL), MG_ERR_UNSUPPORTED, "graph capture abandoned");
        MG_EXPECT(g == NULL, "a spoilt capture returned a graph");
        /* eager again: the table is back */
        x[0] = 5.0f;
        MG_EXPECT_OK(be->copy_d2h(be, &h, x, sizeof h));
        MG_EXPECT(h == 5.0f && be->recording == NULL, "%s: the table is not back", refused[k]);
    }
    MG_EXPECT_ERROR(be->graph_end(be, &(mg_graph *){NULL}, NULL), MG_ERR_UNSUPPORTED,
                    "graph_end without graph_begin");
    be->free(be, x);
    be->destroy(be);
}
