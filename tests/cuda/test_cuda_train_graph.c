/* CUDA graphs in training (train/trainer_graph.h, model/layer_graphs.h) on the backend under
 * test, in the test's compute dtype (fp16 with its dynamic loss scaler and an overflowing,
 * skipped step after the capture): GPT-2 and Llama shapes with Megatron's default dropout
 * (streams advanced on the device, drawn inside cuDNN's attention) and Mixtral-style MoE layers
 * (the routing, the per-expert counts and the grouped products in device memory; CUTLASS's
 * grouped GEMM in bf16), and positional (--layout-invariant-dropout) masks. A run with the
 * full-iteration graph, or with per-layer graphs of each scope, equals the same run without
 * graphs bit for bit: losses, gradient norms, final weights. So does a run with activation
 * recomputation, with graphs or without.
 * A replayed full-iteration step makes no host synchronisation, no device allocation and exactly
 * one graph launch (besides the input copies). */
#include "cuda_test_util.h"

#include "core/env.h"
#include "model/layer_graphs.h"
#include "train/trainer.h"

#include <stdlib.h>
#include <string.h>

#define STEPS 6

typedef struct {
    double loss[STEPS], norm[STEPS];
    float *w;
    size_t numel;
    int captured;
} graph_run;

#define MOE "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "96"

/* model: extra flags of the shape (NULL-terminated); graph: the graph flags, NULL for none. */
static void run(mg_test_ctx *t, const char *dev, bool llama, const char *const *model,
                const char *const *graph, graph_run *o) {
    const char *extra[48] = {"--num-layers", "2",    "--global-batch-size", "4",
                             "--lr",         "3e-3", "--train-iters",       "8",
                             "--seed",       "7"};
    int n = 10;
    if (CT_F16) extra[n++] = "--fp16", extra[n++] = "--initial-loss-scale", extra[n++] = "1024";
    for (int i = 0; model && model[i] && n < 47; i++) extra[n++] = model[i];
    for (int i = 0; graph && graph[i] && n < 47; i++) extra[n++] = graph[i];
    extra[n] = NULL;
    const bool full = graph && !strcmp(graph[1], "full_iteration");
    mg_config c;
    MG_EXPECT_OK(ct_tiny_config(&c, dev, llama, extra));
    if (t->failures) return;
    /* fp16: step 5 (a replay) overflows and is skipped, the scale halves; read at creation */
    if (CT_F16) setenv("MG_FAULT_OVERFLOW", "5:5", 1);
    mg_env_forget();
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    for (int s = 0; s < STEPS && !t->failures; s++) {
        mg_cuda_ctx *x = tr->be->device == MG_DEVICE_CUDA ? mg_cuda_ctx_of(tr->be) : NULL;
        const bool steady = full && s >= 3;
        uint64_t s0 = x ? x->n_host_syncs : 0, a0 = x ? x->n_device_allocs : 0;
        uint64_t l0 = x ? x->n_graph_launches : 0;
        MG_EXPECT_OK(mg_trainer_step_async(tr));
        if (x && steady)
            MG_EXPECT(x->n_host_syncs == s0 && x->n_device_allocs == a0 &&
                          x->n_graph_launches == l0 + 1,
                      "replayed step %d: %llu host syncs, %llu device allocations, %llu graph "
                      "launches (want 0, 0, 1)",
                      s + 1, (unsigned long long)(x->n_host_syncs - s0),
                      (unsigned long long)(x->n_device_allocs - a0),
                      (unsigned long long)(x->n_graph_launches - l0));
        mg_step_stats st;
        MG_EXPECT_OK(mg_trainer_read_stats(tr, &st, false));
        o->loss[s] = st.loss, o->norm[s] = st.grad_norm;
    }
    o->numel = tr->model.params.numel;
    o->w = malloc(o->numel * sizeof(float));
    if (o->w) MG_EXPECT_OK(mg_trainer_get_weights(tr, o->w));
    o->captured = tr->model.blk.graphs ? mg_layer_graphs_captured(tr->model.blk.graphs, NULL, NULL)
                                       : tr->graph.k[MG_GRAPH_TRAIN].g != NULL;
    mg_trainer_free(tr);
    free(tr);
    unsetenv("MG_FAULT_OVERFLOW");
    mg_env_forget();
}

/* The run with `extra` (graph or recomputation flags) equals the run without, bit for bit; with
 * `graphs` a graph must have been captured. */
static void equal_runs(mg_test_ctx *t, bool llama, const char *const *model,
                       const char *const *graph, const char *label, bool graphs) {
    mg_backend *gpu = ct_gpu(t);
    if (!gpu) return;
    const char *dev = gpu->device == MG_DEVICE_CUDA ? "cuda" : "cpu";
    graph_run e = {0}, g = {0};
    run(t, dev, llama, model, NULL, &e);
    run(t, dev, llama, model, graph, &g);
    if (e.w && g.w) {
        MG_EXPECT(!graphs || g.captured, "%s: no graph was captured", label);
        for (int s = 0; s < STEPS; s++)
            MG_EXPECT(e.loss[s] == g.loss[s] && e.norm[s] == g.norm[s],
                      "%s step %d: graph loss %.9g norm %.9g, eager %.9g %.9g", label, s + 1,
                      g.loss[s], g.norm[s], e.loss[s], e.norm[s]);
        MG_EXPECT(e.numel == g.numel && !memcmp(e.w, g.w, e.numel * sizeof(float)),
                  "%s: the weights after %d steps differ", label, STEPS);
    }
    free(e.w);
    free(g.w);
}

static void replay_equals_eager(mg_test_ctx *t, bool llama, const char *const *model,
                                const char *const *graph, const char *label) {
    equal_runs(t, llama, model, graph, label, true);
}

static const char *const k_full[] = {"--cuda-graph-impl", "full_iteration",
                                     "--cuda-graph-warmup-steps", "2", NULL};

MG_TEST(cuda_train_graph_replay_equals_eager_gpt2) {
    replay_equals_eager(t, false, NULL, k_full, "gpt2");
}

MG_TEST(cuda_train_graph_replay_equals_eager_llama) {
    replay_equals_eager(t, true, NULL, k_full, "llama");
}

/* Positional masks (our attention kernels draw them; cuDNN cannot) keyed by the iteration the
 * step advances on the device. */
MG_TEST(cuda_train_graph_replay_equals_eager_layout_invariant_dropout) {
    static const char *const lid[] = {"--layout-invariant-dropout", NULL};
    replay_equals_eager(t, false, lid, k_full, "layout-invariant dropout");
}

MG_TEST(cuda_train_graph_replay_equals_eager_moe) {
    static const char *const moe[] = {
        MOE, "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3", NULL};
    replay_equals_eager(t, true, moe, k_full, "moe");
}

/* fp8 linears (cuBLASLt's fp8 products): the casts read their scales from device memory and the
 * step's end updates them there; with --fp8-param-gather the step also casts the optimizer's
 * shard of each fp8 weight and gathers the bytes, all inside the graph. fp8 needs bf16. */
MG_TEST(cuda_train_graph_replay_equals_eager_fp8) {
    if (CT_F16) return;
    static const char *const delayed[] = {
        "--fp8-format", "hybrid", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo",
        "max",          NULL};
    static const char *const gather[] = {
        "--fp8-format",       "e4m3", "--fp8-recipe", "tensorwise", "--use-distributed-optimizer",
        "--fp8-param-gather", NULL};
    replay_equals_eager(t, false, delayed, k_full, "gpt2 fp8 delayed");
    replay_equals_eager(t, true, gather, k_full, "llama fp8 tensorwise, param gather");
}

/* Per-layer graphs: each scope of each layer and microbatch, forward and backward, its own
 * graph; the rest of the layer eager between them. */
MG_TEST(cuda_train_graph_per_layer_equals_eager) {
    static const char *const whole[] = {"--cuda-graph-impl", "local", "--cuda-graph-warmup-steps",
                                        "2", NULL};
    static const char *const attn[] = {"--cuda-graph-impl",
                                       "transformer_engine",
                                       "--cuda-graph-modules",
                                       "attn",
                                       "--cuda-graph-warmup-steps",
                                       "1",
                                       NULL};
    static const char *const attn_moe[] = {"--enable-cuda-graph",
                                           "--cuda-graph-scope",
                                           "attn",
                                           "moe",
                                           "--cuda-graph-warmup-steps",
                                           "2",
                                           NULL};
    static const char *const router[] = {"--cuda-graph-impl",
                                         "local",
                                         "--cuda-graph-modules",
                                         "moe_router",
                                         "moe_preprocess",
                                         "--cuda-graph-warmup-steps",
                                         "2",
                                         NULL};
    static const char *const moe_mixed[] = {
        MOE, "--moe-aux-loss-coeff", "1e-2", "--moe-layer-freq", "[0,1]", NULL};
    static const char *const moe_z[] = {MOE, "--moe-z-loss-coeff", "1e-3", NULL};
    replay_equals_eager(t, false, NULL, whole, "gpt2 per layer");
    replay_equals_eager(t, true, NULL, attn, "llama attn");
    replay_equals_eager(t, true, moe_mixed, attn_moe, "moe per layer");
    replay_equals_eager(t, true, moe_z, router, "moe router and preprocessing");
}

/* Activation recomputation (model/gpt.h) on the device: the recomputed forward runs the same
 * deterministic kernels (cuDNN's attention with its dropout, the GEMMs, the MoE dispatch with the
 * routing reused), so losses, norms and weights equal the run without, bit for bit; also inside
 * the full-iteration graph. */
MG_TEST(cuda_train_recompute_equals_plain) {
    static const char *const full1[] = {"--recompute-granularity",
                                        "full",
                                        "--recompute-method",
                                        "uniform",
                                        "--recompute-num-layers",
                                        "1",
                                        NULL};
    static const char *const full2[] = {"--recompute-granularity",
                                        "full",
                                        "--recompute-method",
                                        "uniform",
                                        "--recompute-num-layers",
                                        "2",
                                        NULL};
    static const char *const sel[] = {"--recompute-granularity",
                                      "selective",
                                      "--recompute-modules",
                                      "core_attn",
                                      "layernorm",
                                      "mlp_act",
                                      NULL};
    static const char *const sel_mlp[] = {"--recompute-granularity",
                                          "selective",
                                          "--recompute-modules",
                                          "core_attn",
                                          "layernorm",
                                          "mlp",
                                          NULL};
    static const char *const sel_moe[] = {"--recompute-granularity",
                                          "selective",
                                          "--recompute-modules",
                                          "moe",
                                          "moe_act",
                                          "layernorm",
                                          NULL};
    static const char *const full_graph[] = {"--cuda-graph-impl",
                                             "full_iteration",
                                             "--cuda-graph-warmup-steps",
                                             "2",
                                             "--recompute-granularity",
                                             "full",
                                             "--recompute-method",
                                             "block",
                                             "--recompute-num-layers",
                                             "1",
                                             NULL};
    static const char *const moe[] = {
        MOE, "--moe-aux-loss-coeff", "1e-2", "--moe-layer-freq", "[1,1]", NULL};
    equal_runs(t, false, NULL, full1, "gpt2 full uniform 1", false);
    /* GPT-2's mlp_act is left out: it moves GELU out of fc1's GEMM epilogue, which applies it
     * to the fp32 accumulator, so the activations round differently (docs/recompute.md) */
    equal_runs(t, false, NULL, sel_mlp, "gpt2 selective core_attn layernorm mlp", false);
    equal_runs(t, true, NULL, full2, "llama full uniform 2", false);
    equal_runs(t, true, NULL, sel, "llama selective", false);
    equal_runs(t, true, moe, full1, "moe full uniform 1", false);
    equal_runs(t, true, moe, sel_moe, "moe selective moe moe_act layernorm", false);
    equal_runs(t, false, NULL, full_graph, "gpt2 full block 1 in the full-iteration graph", true);
}
