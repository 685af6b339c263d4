/* Per-layer graphs (model/layer_graphs.h). */
#include "model/layer_graphs.h"

#include "parallel/graph_capture.h"

#include <stdlib.h>

typedef struct {
    mg_graph *g;
    int eager; /* runs so far without a graph */
} entry;

struct mg_layer_graphs {
    int n_layers, max_mb, warmup;
    unsigned parts;
    entry *e; /* (n_layers, MG_LAYER_PARTS, 2, max_mb) */
    int captured;
    size_t nodes, bytes;
};

mg_status mg_layer_graphs_create(mg_layer_graphs **out, int n_layers, int max_microbatches,
                                 unsigned parts, int warmup) {
    *out = NULL;
    if (n_layers < 0 || max_microbatches < 1 || warmup < 1)
        return MG_FAIL(MG_ERR_INTERNAL, "per-layer graphs: %d layers, %d microbatches, warm-up %d",
                       n_layers, max_microbatches, warmup);
    mg_layer_graphs *lg = calloc(1, sizeof *lg);
    size_t n = (size_t)n_layers * MG_LAYER_PARTS * 2 * (size_t)max_microbatches;
    if (lg) lg->e = calloc(n ? n : 1, sizeof *lg->e);
    if (!lg || !lg->e) {
        free(lg);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory (per-layer graphs)");
    }
    lg->n_layers = n_layers, lg->max_mb = max_microbatches, lg->warmup = warmup;
    lg->parts = parts;
    *out = lg;
    return MG_OK;
}

bool mg_layer_graphs_covers(const mg_layer_graphs *lg, mg_layer_part part) {
    return lg && (lg->parts >> part & 1u);
}

mg_status mg_layer_graphs_run(mg_layer_graphs *lg, mg_backend *be, int layer, mg_layer_part part,
                              bool backward, int mb, mg_status (*fn)(void *ctx), void *ctx) {
    if (!mg_layer_graphs_covers(lg, part)) return fn(ctx);
    if (layer < 0 || layer >= lg->n_layers || mb < 0 || mb >= lg->max_mb)
        return MG_FAIL(MG_ERR_INTERNAL, "per-layer graph of layer %d, microbatch %d (of %d, %d)",
                       layer, mb, lg->n_layers, lg->max_mb);
    entry *e = &lg->e[(((size_t)layer * MG_LAYER_PARTS + part) * 2 + backward) * lg->max_mb + mb];
    if (!e->g && e->eager < lg->warmup) {
        e->eager++;
        return fn(ctx);
    }
    if (!e->g) {
        mg_graph_info info = {0, 0};
        MG_CHECK(mg_graph_capture(be, fn, ctx, &e->g, &info));
        lg->captured++;
        lg->nodes += info.nodes;
        lg->bytes += info.bytes;
    }
    return be->graph_launch(be, e->g);
}

int mg_layer_graphs_captured(const mg_layer_graphs *lg, size_t *nodes, size_t *bytes) {
    if (nodes) *nodes = lg ? lg->nodes : 0;
    if (bytes) *bytes = lg ? lg->bytes : 0;
    return lg ? lg->captured : 0;
}

void mg_layer_graphs_free(mg_layer_graphs *lg, mg_backend *be) {
    if (!lg) return;
    size_t n = (size_t)lg->n_layers * MG_LAYER_PARTS * 2 * (size_t)lg->max_mb;
    for (size_t i = 0; i < n; i++)
        if (lg->e[i].g) be->graph_free(be, lg->e[i].g);
    free(lg->e);
    free(lg);
}
