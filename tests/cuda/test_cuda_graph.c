/* Graphs on the backend under test (backend_ops.h's graph entries; on CUDA, stream capture into a
 * CUDA graph, src/backend/cuda/graph.c): the step of tests/graph_step.h replayed equals the same
 * step run eagerly, bitwise, over several steps with the learning rate changed in device memory
 * between them; the capture runs nothing; a launch makes no host synchronisation; copy_d2h inside
 * a capture is refused in one line, spoils the capture, and eager work runs afterwards. */
#include "cuda_test_util.h"
#include "graph_step.h"

#include <string.h>

MG_TEST(cuda_graph_replay_equals_eager) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    const float lrs[3] = {1e-3f, 4e-3f, 5e-4f};
    mg_graph_info info;
    const bool cuda = gpu->device == MG_DEVICE_CUDA;
    graph_replay_check(t, gpu, lrs, 3, &info, cuda ? &mg_cuda_ctx_of(gpu)->n_host_syncs : NULL);
    MG_EXPECT(info.nodes >= 10, "graph of the step: %zu nodes", info.nodes);
}

MG_TEST(cuda_graph_refuses_a_host_read) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    float *x = NULL, h = 0, five = 5.0f;
    MG_EXPECT_OK(gpu->alloc(gpu, 4 * sizeof(float), (void **)&x));
    if (!x) return;
    mg_graph *g = NULL;
    MG_EXPECT_OK(gpu->graph_begin(gpu));
    MG_EXPECT_OK(gpu->memset_zero(gpu, x, 4 * sizeof(float)));
    MG_EXPECT_ERROR(gpu->copy_d2h(gpu, &h, x, sizeof h), MG_ERR_UNSUPPORTED,
                    "copy_d2h inside a graph capture");
    MG_EXPECT_ERROR(gpu->graph_end(gpu, &g, NULL), MG_ERR_UNSUPPORTED, "graph capture abandoned");
    MG_EXPECT(g == NULL, "a spoilt capture returned a graph");
    MG_EXPECT_OK(gpu->copy_h2d(gpu, x, &five, sizeof five)); /* eager again */
    MG_EXPECT_OK(gpu->copy_d2h(gpu, &h, x, sizeof h));
    MG_EXPECT(h == 5.0f, "after the abandoned capture: read %g, want 5", h);
    gpu->free(gpu, x);
}
