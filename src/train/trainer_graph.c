/* The full-iteration graph of a training step (train/trainer_graph.h). */
#include "train/trainer_graph.h"

#include "parallel/graph_capture.h"
#include "config/flags.h"
#include "core/log.h"
#include "model/layer_graphs.h"
#include "train/trainer_batch.h"
#include "train/trainer_docs.h"
#include "train/trainer_loss.h"
#include "train/trainer_weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

bool mg_trainer_graph_on(const mg_trainer *t) {
    return t->cfg.cuda_graph_impl == MG_GRAPH_FULL_ITERATION;
}

/* Per-layer graphs (model/layer_graphs.h) of the scopes named. */
static mg_status layer_graphs_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const unsigned scope = mg_config_graph_parts(c);
    static const struct {
        unsigned scope;
        mg_layer_part part;
        const char *name;
    } k[] = {{MG_GRAPH_SCOPE_ATTN, MG_LAYER_PART_ATTN, "attn"},
             {MG_GRAPH_SCOPE_MLP, MG_LAYER_PART_MLP, "mlp"},
             {MG_GRAPH_SCOPE_MOE, MG_LAYER_PART_MOE, "moe"},
             {MG_GRAPH_SCOPE_MOE_ROUTER, MG_LAYER_PART_MOE_ROUTER, "moe_router"},
             {MG_GRAPH_SCOPE_MOE_PREPROCESS, MG_LAYER_PART_MOE_PREPROCESS, "moe_preprocess"}};
    unsigned parts = 0;
    char names[96] = "";
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (scope & k[i].scope) {
            parts |= 1u << k[i].part;
            size_t at = strlen(names);
            snprintf(names + at, sizeof names - at, "%s%s", at ? " " : "", k[i].name);
        }
    MG_CHECK(mg_layer_graphs_create(&t->model.blk.graphs, c->num_layers, t->eval_microbatches,
                                    parts, c->cuda_graph_warmup_steps));
    mg_log_info("> CUDA graphs: per layer (%s), each part of each microbatch captured after %d "
                "eager run%s",
                names, c->cuda_graph_warmup_steps, c->cuda_graph_warmup_steps == 1 ? "" : "s");
    return MG_OK;
}

void mg_trainer_graph_note(mg_trainer *t) {
    size_t nodes = 0, bytes = 0;
    int n = mg_layer_graphs_captured(t->model.blk.graphs, &nodes, &bytes);
    if (n == t->graph.layer_captured) return;
    t->graph.layer_captured = n;
    mg_log_info("> per-layer graphs: %d captured by iteration %" PRId64 ": %zu nodes, %.1f KiB", n,
                t->state.iteration, nodes, (double)bytes / 1024.0);
}

mg_status mg_trainer_graph_init(mg_trainer *t) {
    const mg_cuda_graph_impl impl = t->cfg.cuda_graph_impl;
    if (impl == MG_GRAPH_LOCAL || impl == MG_GRAPH_TRANSFORMER_ENGINE) return layer_graphs_init(t);
    if (!mg_trainer_graph_on(t)) return MG_OK;
    const mg_memory_plan *p = &t->mem.plan;
    void *a[MG_STAGED_ARRAYS];
    for (int k = 0; k < MG_STAGED_ARRAYS; k++)
        a[k] = p->staged_array_bytes[k] ? mg_arena_ptr(&p->io, p->off_staged[k]) : NULL;
    t->graph.tokens = a[MG_STAGED_TOKENS], t->graph.targets = a[MG_STAGED_TARGETS];
    t->graph.positions = a[MG_STAGED_POSITIONS], t->graph.doc_starts = a[MG_STAGED_DOC_STARTS];
    t->graph.dloss = a[MG_STAGED_DLOSS], t->graph.loss_w = a[MG_STAGED_LOSS_W];
    mg_log_info("> CUDA graphs: the full iteration, captured after %d eager step%s",
                t->cfg.cuda_graph_warmup_steps, t->cfg.cuda_graph_warmup_steps == 1 ? "" : "s");
    return MG_OK;
}

/* Every microbatch of the pass's global batch (from sample `first` of src) into the staged
 * buffers: what stage_forward would load, one microbatch after another. */
static mg_status stage_inputs(mg_trainer *t, const mg_sample_source *src, int64_t first) {
    mg_backend *be = t->be;
    const size_t N = (size_t)t->model.blk.N, bytes = N * sizeof(int32_t);
    /* the pass's unmasked tokens first (with a loss mask every microbatch's weights use them);
     * the pass itself does not count them again */
    MG_CHECK(mg_trainer_loss_pass(t, src, first));
    for (int mb = 0; mb < t->num_microbatches; mb++) {
        size_t at = (size_t)mb * N;
        MG_CHECK(mg_trainer_load_microbatch(t, src, first, mb, t->graph.tokens + at,
                                            t->graph.targets + at));
        if (t->eod_id >= 0)
            MG_CHECK(mg_trainer_loss_weights(t, t->graph.dloss + at, t->graph.loss_w + at));
        if (t->docs_eod < 0) continue;
        int32_t *pos = t->mem.host_docs, *doc = t->mem.host_docs + N;
        mg_docs_compute(t->mem.host_tokens, t->model.blk.B, t->model.cfg.S, t->docs_eod, pos, doc);
        if (t->graph.positions) MG_CHECK(be->copy_h2d(be, t->graph.positions + at, pos, bytes));
        if (t->graph.doc_starts) MG_CHECK(be->copy_h2d(be, t->graph.doc_starts + at, doc, bytes));
    }
    return MG_OK;
}

mg_status mg_trainer_graph_inputs(mg_trainer *t, int mb, int slot) {
    mg_backend *be = t->be;
    const size_t N = (size_t)t->model.blk.N, bytes = N * sizeof(int32_t);
    const size_t at = (size_t)mb * N, to = (size_t)slot * N;
    MG_CHECK(be->copy_d2d(be, t->mem.tokens + to, t->graph.tokens + at, bytes));
    MG_CHECK(be->copy_d2d(be, t->mem.targets + to, t->graph.targets + at, bytes));
    if (t->graph.positions)
        MG_CHECK(be->copy_d2d(be, t->mem.positions + to, t->graph.positions + at, bytes));
    if (t->graph.doc_starts)
        MG_CHECK(be->copy_d2d(be, t->mem.doc_starts + to, t->graph.doc_starts + at, bytes));
    if (t->graph.dloss) {
        MG_CHECK(be->copy_d2d(be, t->mem.dloss + to, t->graph.dloss + at, bytes));
        MG_CHECK(be->copy_d2d(be, t->mem.loss_w + to, t->graph.loss_w + at, bytes));
    }
    return MG_OK;
}

static const char *const k_kind_names[MG_GRAPH_KINDS] = {"full iteration", "evaluation batch"};

static void drop_graph(mg_trainer *t, mg_graph_kind kind) {
    mg_train_graph_one *G = &t->graph.k[kind];
    if (G->g) t->be->graph_free(t->be, G->g);
    G->g = NULL;
    G->eager = 0;
}

typedef struct {
    mg_trainer *t;
    mg_trainer_graph_body body;
    void *ctx;
} capture_ctx;

static mg_status run_body(void *c) {
    const capture_ctx *x = c;
    return x->body(x->t, x->ctx);
}

/* Captures body as kind's graph; the capture runs nothing. It starts from the state every
 * replay starts from: the parameter gathers a step leaves to the next (--overlap-param-gather)
 * brought to it first, as after each launch. */
static mg_status capture(mg_trainer *t, mg_graph_kind kind, mg_trainer_graph_body body, void *ctx) {
    mg_train_graph_one *G = &t->graph.k[kind];
    capture_ctx c = {t, body, ctx};
    mg_graph_info info = {0, 0};
    MG_CHECK(mg_trainer_params_graph_edge(t));
    MG_CHECK(mg_graph_capture(t->be, run_body, &c, &G->g, &info));
    G->m = t->num_microbatches;
    const bool mib = info.bytes >= ((size_t)1 << 20);
    mg_log_info("> captured the %s at iteration %" PRId64 ": %zu nodes, %.1f %s",
                k_kind_names[kind], t->state.iteration + (kind == MG_GRAPH_TRAIN), info.nodes,
                (double)info.bytes / (mib ? 1048576.0 : 1024.0), mib ? "MiB" : "KiB");
    return MG_OK;
}

mg_status mg_trainer_graph_run(mg_trainer *t, mg_graph_kind kind, const mg_sample_source *src,
                               int64_t first, mg_trainer_graph_body body, void *ctx) {
    mg_train_graph_one *G = &t->graph.k[kind];
    if (G->g && G->m != t->num_microbatches) {
        mg_log_info("> %d microbatches per rank from iteration %" PRId64 " (the %s graph has %d): "
                    "eager for %d runs, then captured again",
                    t->num_microbatches, t->state.iteration + 1, k_kind_names[kind], G->m,
                    t->cfg.cuda_graph_warmup_steps);
        drop_graph(t, kind);
    }
    MG_CHECK(stage_inputs(t, src, first));
    t->graph.staged = true;
    mg_status st = MG_OK;
    if (!G->g && G->eager < t->cfg.cuda_graph_warmup_steps) {
        st = body(t, ctx);
        G->eager++;
    } else {
        if (!G->g) st = capture(t, kind, body, ctx);
        if (st == MG_OK) st = t->be->graph_launch(t->be, G->g);
        /* the trainer's eager work after a launch starts from the state the launch leaves */
        if (st == MG_OK) st = mg_trainer_params_graph_edge(t);
    }
    t->graph.staged = false;
    return st;
}

void mg_trainer_graph_free(mg_trainer *t) {
    for (int k = 0; t->be && k < MG_GRAPH_KINDS; k++) drop_graph(t, (mg_graph_kind)k);
    if (t->be) mg_layer_graphs_free(t->model.blk.graphs, t->be);
    t->model.blk.graphs = NULL;
}
