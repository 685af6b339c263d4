/* The full-iteration graph (--cuda-graph-impl full_iteration, train/trainer_graph.h) on the CPU
 * backend, whose graphs replay the recorded calls with the arguments given at capture: a value
 * the step took by argument instead of from a buffer would be frozen and the replayed losses
 * would drift from the eager ones. So a run with graphs equals the same run without, bit for bit
 * (losses, gradient norms, the weights at the end), with dropout on (the streams advance on the
 * device), for GPT-2, Llama and MoE shapes, with evaluations between replayed steps (their own
 * graph: the losses equal too), and across
 * a --rampup-batch-size change of the microbatch count (the graph is dropped and captured
 * again). */
#include "test.h"

#include "config_test_util.h"

#include "model/layer_graphs.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 7

typedef struct {
    double loss[STEPS], norm[STEPS], eval[2];
    float *w;
    size_t numel;
    int captured; /* the graph exists at the end */
} run_out;

/* Trains STEPS steps (evaluating 3 batches after steps 4 and 7: with 2 warm-up runs the second
 * evaluation replays the evaluation graph), keeps the losses, norms and final weights. */
static void run(mg_test_ctx *t, const char *flags, const char *graph, run_out *o) {
    char all[1400];
    snprintf(all, sizeof all, "%s %s", flags, graph);
    mg_trainer *tr = mg_test_trainer(t, all, NULL);
    if (!tr) return;
    for (int s = 0; s < STEPS && !t->failures; s++) {
        MG_EXPECT_OK(mg_trainer_step(tr, &o->loss[s], &o->norm[s]));
        if (s == 3 || s == STEPS - 1)
            MG_EXPECT_OK(mg_trainer_evaluate(tr, &o->eval[s == 3 ? 0 : 1]));
    }
    o->numel = tr->model.params.numel;
    o->w = malloc(o->numel * sizeof(float));
    MG_EXPECT_OK(mg_trainer_get_weights(tr, o->w));
    o->captured =
        tr->model.blk.graphs
            ? mg_layer_graphs_captured(tr->model.blk.graphs, NULL, NULL) > 0
            : tr->graph.k[MG_GRAPH_TRAIN].g != NULL &&
                  (tr->graph.k[MG_GRAPH_EVAL].g != NULL || tr->eod_id >= 0); /* eager eval */
    mg_test_trainer_free(tr);
}

#define FULL "--cuda-graph-impl full_iteration --cuda-graph-warmup-steps 2"

static void same_as(mg_test_ctx *t, const char *flags, const char *graphs, const char *label) {
    run_out e = {0}, g = {0};
    run(t, flags, "", &e);
    run(t, flags, graphs, &g);
    if (!e.w || !g.w) goto done;
    MG_EXPECT(g.captured, "%s: the graphs were not captured", label);
    for (int s = 0; s < STEPS; s++)
        MG_EXPECT(e.loss[s] == g.loss[s] && e.norm[s] == g.norm[s],
                  "%s step %d: graph loss %.9g norm %.9g, eager %.9g %.9g", label, s + 1, g.loss[s],
                  g.norm[s], e.loss[s], e.norm[s]);
    for (int k = 0; k < 2; k++)
        MG_EXPECT(e.eval[k] == g.eval[k], "%s: evaluation %d: %.9g with graphs, %.9g without",
                  label, k + 1, g.eval[k], e.eval[k]);
    MG_EXPECT(e.numel == g.numel && memcmp(e.w, g.w, e.numel * sizeof(float)) == 0,
              "%s: the weights after %d steps differ", label, STEPS);
done:
    free(e.w);
    free(g.w);
}

static void same_as_eager(mg_test_ctx *t, const char *flags, const char *label) {
    same_as(t, flags, FULL, label);
}

#define BASE                                                                                       \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 2 --lr 3e-3 --eval-iters 3 --num-threads 2 --device cpu "      \
    "--attention-dropout 0.1 --hidden-dropout 0.1 "

MG_TEST(train_graph_replay_equals_eager_gpt2) {
    same_as_eager(t, BASE "--train-iters 8 --global-batch-size 4", "gpt2");
}

MG_TEST(train_graph_replay_equals_eager_llama) {
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --normalization RMSNorm --swiglu "
                       "--position-embedding-type rope --group-query-attention --num-query-groups "
                       "2 --disable-bias-linear --untie-embeddings-and-output-weights",
                  "llama");
}

/* Global batches 2, 2, 4, 6, 8, 8, 8 (1 to 4 microbatches): two eager steps, the graph of 2
 * microbatches captured at step 3, dropped at the change to 3, eager steps, the graph of 4
 * captured at step 6 and replayed at step 7; every step equals the eager run's. */
MG_TEST(train_graph_recaptured_when_the_microbatches_change) {
    same_as_eager(t, BASE "--train-samples 80 --global-batch-size 8 --rampup-batch-size 2 2 12",
                  "rampup");
}

/* Mixtral-style MoE layers (softmax top-2 of 4 experts, aux loss and z-loss): the routing, the
 * per-expert counts and the grouped products stay in backend memory, so they replay. */
/* A loss mask: each microbatch's gradient and reported-loss weights are staged with its ids (the
 * pass's unmasked tokens counted first); evaluation stays eager. */
MG_TEST(train_graph_replay_equals_eager_eod_mask) {
    same_as_eager(t, BASE "--train-iters 8 --global-batch-size 4 --eod-mask-loss", "eod mask");
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --eod-mask-loss "
                       "--calculate-per-token-loss",
                  "eod mask, per-token loss");
}

/* Positional (layout-invariant) masks are keyed by the iteration, which the graph reads from the
 * step-control block the step advances on the device: each replayed step draws its own masks, as
 * the eager steps do (a frozen iteration would repeat one step's masks and drift). */
MG_TEST(train_graph_replay_equals_eager_layout_invariant_dropout) {
    same_as_eager(t, BASE "--train-iters 8 --global-batch-size 4 --layout-invariant-dropout",
                  "layout-invariant dropout");
    same_as(t, BASE "--train-iters 8 --global-batch-size 4 --layout-invariant-dropout",
            "--cuda-graph-impl local --cuda-graph-warmup-steps 2",
            "layout-invariant dropout per layer");
}

/* fp8 linears: the casts read their scales from backend memory and the step's end updates them
 * there, so replayed steps scale as the eager ones (a scale frozen at capture would drift) */
MG_TEST(train_graph_replay_equals_eager_fp8) {
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --fp8-format hybrid "
                       "--fp8-amax-history-len 4 --fp8-amax-compute-algo max",
                  "fp8 delayed");
    same_as_eager(
        t, BASE "--train-iters 8 --global-batch-size 4 --fp8-format e4m3 --fp8-recipe tensorwise",
        "fp8 tensorwise");
    /* --fp8-param-gather: the step's end casts the optimizer's shard of each fp8 weight with the
     * next forward's scale (delayed: the updated history's; tensorwise: the weights' amax
     * reduced first) and gathers the bytes, all inside the graph */
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --fp8-format hybrid "
                       "--fp8-amax-history-len 4 --fp8-amax-compute-algo max "
                       "--use-distributed-optimizer --fp8-param-gather",
                  "fp8 delayed, param gather");
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --fp8-format e4m3 --fp8-recipe "
                       "tensorwise --use-distributed-optimizer --fp8-param-gather",
                  "fp8 tensorwise, param gather");
    /* blockwise: each cast takes its scales from the block's amax now, on the device */
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --fp8-format e4m3 --fp8-recipe "
                       "blockwise",
                  "fp8 blockwise");
}

MG_TEST(train_graph_replay_equals_eager_moe) {
    same_as_eager(t,
                  BASE "--train-iters 8 --global-batch-size 4 --num-experts 4 --moe-router-topk 2 "
                       "--moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3",
                  "moe");
}

/* Per-layer graphs (model/layer_graphs.h): each sublayer of each microbatch, forward and
 * backward, its own graph; the rest of the step eager between them. */
MG_TEST(train_graph_per_layer_equals_eager) {
    same_as(t, BASE "--train-iters 8 --global-batch-size 4",
            "--cuda-graph-impl local --cuda-graph-warmup-steps 2", "gpt2 per layer");
    same_as(t,
            BASE "--train-iters 8 --global-batch-size 4 --normalization RMSNorm --swiglu "
                 "--position-embedding-type rope --disable-bias-linear",
            "--cuda-graph-impl transformer_engine --cuda-graph-modules attn "
            "--cuda-graph-warmup-steps 1",
            "llama attn");
    same_as(t,
            BASE "--train-iters 8 --global-batch-size 4 --num-experts 4 --moe-router-topk 2 "
                 "--moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-layer-freq [0,1]",
            "--enable-cuda-graph --cuda-graph-scope attn moe --cuda-graph-warmup-steps 2",
            "moe per layer");
    same_as(t,
            BASE "--train-iters 8 --global-batch-size 4 --num-experts 4 --moe-router-topk 2 "
                 "--moe-ffn-hidden-size 24 --moe-z-loss-coeff 1e-3",
            "--cuda-graph-impl local --cuda-graph-modules moe_router moe_preprocess "
            "--cuda-graph-warmup-steps 2",
            "moe router and preprocessing");
}
