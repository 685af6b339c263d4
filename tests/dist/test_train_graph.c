/* Full-iteration graphs on parallel layouts against eager steps of the same layout: every rank
 * trains a tiny GPT twice on the same groups, eagerly and with --cuda-graph-impl full_iteration
 * (captured after two warm-up steps, then replayed), and the losses (on the last pipeline stage),
 * the grad norms and this rank's weights must be the eager run's. The graph holds the layout's
 * collectives and pipeline messages in order with the ops (NCCL kernels on the GPU; on the CPU
 * the recorded MPI calls), so the same operations run in the same order: on the CPU the runs
 * are equal bit for bit; on device buffers (`make test-nccl`) within a bf16 ulp (BF16_TOL; a
 * kernel's choice of algorithm is the same, but an atomic sum may land in another order), and a
 * further replayed step neither synchronises with the host nor allocates.
 * Layouts: 2 ranks TP 2 with sequence parallelism, also with --tp-comm-overlap (collectives on
 * a second stream inside the graph); PP 2 (1F1B); PP 2 x V 2 (interleaved); DP 2
 * with the distributed optimizer and overlapped gradient reduction in several buckets, also with
 * --overlap-param-gather (a step's gathers run into the next step's forward), once more with
 * evaluations before the capture, between replays and replayed from a graph of their own (an
 * evaluation's forward gathers every bucket: a capture from that state must still gather).
 * 4 ranks: TP 2 x PP 2 with SP, TP 2 x DP 2 with the distributed optimizer and both overlaps.
 * Dropout at Megatron's 0.1: a replay draws each step's masks from the step's own offsets. */
#include "dist.h"
#include "train_compare.h"

#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STEPS    8
#define BF16_TOL 2e-2

typedef struct {
    const char *label;
    int world, tp, pp, layers;
    const char *layout[12]; /* flags beyond the sizes, NULL-terminated */
} variant;

/* evals: an evaluation after step s + 1 for each bit s, in both runs (tc_train_eval). */
static void check_variant(dist_ctx *t, const variant *v, unsigned evals) {
    const bool dev = dist_on_device(t);
    char layers[8], tp[8], pp[8];
    snprintf(layers, sizeof layers, "%d", v->layers);
    snprintf(tp, sizeof tp, "%d", v->tp);
    snprintf(pp, sizeof pp, "%d", v->pp);
    /* two heads of 16 channels, the fewest the CUDA attention kernels take */
    const char *model[] = {"--num-layers",
                           layers,
                           "--hidden-size",
                           "32",
                           "--num-attention-heads",
                           "2",
                           "--seq-length",
                           "16",
                           "--vocab-size",
                           "128",
                           "--make-vocab-size-divisible-by",
                           "32",
                           "--mock-data",
                           "--micro-batch-size",
                           "1",
                           "--global-batch-size",
                           "8",
                           "--train-iters",
                           "20",
                           "--lr",
                           "3e-3",
                           "--eval-iters",
                           "0",
                           "--device",
                           dev ? "cuda" : "cpu",
                           "--num-threads",
                           "1",
                           NULL};
    const char *lay[24] = {"--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size",
                           pp};
    int n = 4;
    for (int i = 0; v->layout[i]; i++) lay[n++] = v->layout[i];
    lay[n] = NULL;
    const char *glay[28];
    memcpy(glay, lay, (size_t)n * sizeof *lay);
    const char *graph[] = {"--cuda-graph-impl", "full_iteration", "--cuda-graph-warmup-steps", "2",
                           NULL};
    for (int i = 0; i < 5; i++) glay[n + i] = graph[i];
    mg_config ce, cg;
    tc_config(t, &ce, model, lay, t->size);
    tc_config(t, &cg, model, glay, t->size);
    mg_train_groups g = {0};
    tc_groups(t,
              (mg_parallel_sizes){
                  .world_size = t->size, .tp = v->tp, .pp = v->pp, .cp = 1, .ep = 1, .etp = -1},
              &g);
    tc_run eager = {0}, replay = {0};
    tc_train_eval(t, &ce, &g, STEPS, evals, &eager);
    tc_train_eval(t, &cg, &g, STEPS, evals, &replay);
    DEXPECT(replay.tr->graph.k[MG_GRAPH_TRAIN].g != NULL,
            "%s: the graph run never captured its step", v->label);
    const double tol = dev ? BF16_TOL : 0;
    tc_expect_steps(t, v->label, &replay, &eager, STEPS, tol, tol);
    for (int i = 0; i < STEPS; i++)
        if (evals >> i & 1u)
            DEXPECT(fabs(replay.eval[i] - eager.eval[i]) <= tol * fabs(eager.eval[i]),
                    "%s: the evaluation after step %d: %.9g, eager %.9g", v->label, i + 1,
                    replay.eval[i], eager.eval[i]);
    if (!dev) { /* the same layout: this rank's weights element for element */
        const int64_t n = (int64_t)replay.tr->model.params.numel;
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (replay.w[i] != eager.w[i]) bad = i;
        DEXPECT(bad < 0 && n == (int64_t)eager.tr->model.params.numel,
                "%s: rank %d's weights after %d replayed steps differ from eager's (element "
                "%lld: %.9g vs %.9g)",
                v->label, t->rank, STEPS, (long long)bad, bad < 0 ? 0.0 : replay.w[bad],
                bad < 0 ? 0.0 : eager.w[bad]);
    } else { /* on GPUs, say whether the replay is bitwise eager's (the check is the tolerance) */
        bool same = true;
        for (int i = 0; i < STEPS; i++)
            same = same && replay.norm[i] == eager.norm[i] && replay.loss[i] == eager.loss[i];
        if (t->rank == 0)
            fprintf(stderr, "  %s: replay %s eager's\n", v->label,
                    same ? "bitwise equals" : "is within tolerance of");
    }
    tc_expect_steady_step(t, v->label, replay.tr);
    tc_release(&eager);
    tc_release(&replay);
    tc_free_groups(&g);
}

void test_train_graph(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    const variant all[] = {
        {"graph tp2+sp", 2, 2, 1, 2, {"--sequence-parallel", NULL}},
        {"graph tp2+sp, --tp-comm-overlap",
         2,
         2,
         1,
         2,
         {"--sequence-parallel", "--tp-comm-overlap", NULL}},
        {"graph pp2 1f1b", 2, 1, 2, 2, {NULL}},
        {"graph pp2 x vp2 interleaved",
         2,
         1,
         2,
         4,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
        {"graph dp2, distributed optimizer, overlapped reduction",
         2,
         1,
         1,
         2,
         {"--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size", "3000",
          NULL}},
        {"graph dp2, distributed optimizer, overlapped reduction in bf16",
         2,
         1,
         1,
         2,
         {"--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size", "3000",
          "--grad-reduce-in-bf16", NULL}},
        {"graph tp2 x pp2, sp", 4, 2, 2, 2, {"--sequence-parallel", NULL}},
        {"graph tp2 x dp2, distributed optimizer, both overlaps",
         4,
         2,
         1,
         2,
         {"--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
          "--ddp-bucket-size", "3000", NULL}},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i].world == t->size) check_variant(t, &all[i], 0);
    /* both overlaps: a step's parameter gathers cross into the next step (ddp.h's
     * mg_ddp_graph_boundary); then with evaluations (their forward gathers every bucket)
     * before the capture, between the replays and as a graph of their own (the third) */
    const variant both = {"graph dp2, distributed optimizer, both overlaps",
                          2,
                          1,
                          1,
                          2,
                          {"--use-distributed-optimizer", "--overlap-grad-reduce",
                           "--overlap-param-gather", "--ddp-bucket-size", "3000", "--eval-iters",
                           "1", NULL}};
    variant evals = both;
    evals.label = "graph dp2, distributed optimizer, both overlaps, evaluations";
    if (t->size == 2) {
        check_variant(t, &both, 0);
        check_variant(t, &evals, 1u << 1 | 1u << 4 | 1u << 5 | 1u << 6);
    }
}
