/* Expert parallelism against one rank (the MPI harness on the CPU in `make test`, NCCL on GPUs
 * in `make test-nccl`): a tiny MoE model (4 experts, top-2, aux loss and z-loss, dropless and
 * capacity-limited) trained with its experts spread over EP ranks of the data-parallel group —
 * the token dispatch's fixed-size all-to-alls (model/moe_dispatch.c), the experts' gradient
 * buffer over the expert-data-parallel group, the gradient norm over both — must log the losses
 * and gradient norms of the same model trained on one rank, and each rank's experts (global
 * numbers in their names) must end equal to the one-rank model's; so must the same run under a
 * receive budget small enough for extra dispatch rounds, with ECHO's spare slots, with full
 * recomputation, replayed from a full-iteration graph, and with ECHO inside that graph. On the CPU
 * within 1e-5 relative (fp32); on GPUs within the bf16 tolerances of test_train_tp.c, and a step
 * neither synchronises with the host nor allocates. Dropout is Megatron's default 0.1 with
 * --layout-invariant-dropout, whose masks every layout draws alike. */
#include "train_compare.h"

#include "core/log.h"

#include <string.h>

#define STEPS    10
#define TOL      1e-5
#define BF16_TOL 2e-2
#define NORM_TOL 5e-2

typedef struct {
    const char *label;
    int ep;
    bool distopt, capacity;
    const char *const *extra; /* flags of the EP run only (the reference is plain), NULL-ended */
    bool host_reads;          /* a step reads a count on the host (the receive budget's rounds) */
    const char *const *both;  /* flags of both runs (the model), NULL-ended; NULL: none */
} variant;

static void make_config(dist_ctx *t, mg_config *c, const variant *v, int ep, int world,
                        const char *const *extra) {
    char gbs[16];
    snprintf(gbs, sizeof gbs, "%d", 4 * t->size);
    const char *model[] = {"--num-layers",
                           "2",
                           "--hidden-size",
                           "32",
                           "--num-attention-heads",
                           "2",
                           "--seq-length",
                           "16",
                           "--vocab-size",
                           "96",
                           "--mock-data",
                           "--micro-batch-size",
                           "1",
                           "--global-batch-size",
                           gbs,
                           "--lr",
                           "3e-3",
                           "--train-iters",
                           "10",
                           "--eval-iters",
                           "0",
                           "--num-threads",
                           "1",
                           "--disable-bias-linear",
                           "--normalization",
                           "RMSNorm",
                           "--swiglu",
                           "--num-experts",
                           "4",
                           "--moe-router-topk",
                           "2",
                           "--moe-ffn-hidden-size",
                           "48",
                           "--moe-aux-loss-coeff",
                           "1e-2",
                           "--moe-z-loss-coeff",
                           "1e-3",
                           "--device",
                           dist_on_device(t) ? "cuda" : "cpu",
                           "--layout-invariant-dropout",
                           NULL};
    char eps[16];
    snprintf(eps, sizeof eps, "%d", ep);
    const char *layout[16] = {"--expert-model-parallel-size", eps, NULL};
    int n = 2;
    if (v->capacity) {
        layout[n++] = "--moe-expert-capacity-factor";
        layout[n++] = "1.0";
        layout[n++] = "--moe-pad-expert-input-to-capacity";
    }
    for (int i = 0; extra && extra[i] && n < 15; i++) layout[n++] = extra[i];
    for (int i = 0; v->both && v->both[i] && n < 15; i++) layout[n++] = v->both[i];
    tc_config(t, c, model, layout, world);
    c->expert_model_parallel_size = ep;
    c->use_distributed_optimizer = v->distopt;
    DOK(mg_config_validate(c));
}

static void check_variant(dist_ctx *t, const variant *v) {
    mg_parallel_sizes s = {
        .world_size = t->size, .tp = 1, .pp = 1, .cp = 1, .ep = v->ep, .etp = -1};
    mg_train_groups gr = {0};
    mg_config c1, cE;
    make_config(t, &c1, v, 1, 1, NULL);
    make_config(t, &cE, v, v->ep, t->size, v->extra);
    int steps = STEPS;
    tc_run ref = {0}, got = {0};
    tc_train_both(t, &c1, &cE, s, steps, &gr, &ref, &got);
    DEXPECT(got.tr->layout.ep_size == v->ep && got.tr->layout.edp_size == t->size / v->ep &&
                got.tr->model.cfg.moe.E_l == 4 / v->ep,
            "%s: ep %d, edp %d, %d experts here", v->label, got.tr->layout.ep_size,
            got.tr->layout.edp_size, got.tr->model.cfg.moe.E_l);
    bool dev = dist_on_device(t);
    tc_expect_steps(t, v->label, &got, &ref, steps, dev ? BF16_TOL : TOL, dev ? NORM_TOL : TOL);
    if (!dev) {
        const char *which = "";
        double e = tc_model_error(&got, &ref, &which, NULL);
        DEXPECT(e <= TOL,
                "%s: ep rank %d's parameters after %d steps differ from one rank's by %.3g "
                "(most in %s)",
                v->label, got.tr->layout.ep_rank, steps, e, which);
    }
    if (!v->host_reads) /* on GPUs: no host sync, no allocation */
        tc_expect_steady_step(t, v->label, got.tr);
    tc_release(&ref);
    tc_release(&got);
    tc_free_groups(&gr);
}

void test_train_ep(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    if (t->size != 2 && t->size != 4) return;
    static const char *const budget[] = {"--moe-expert-rank-capacity-factor", "0.5", NULL};
    static const char *const echo[] = {"--moe-enable-echo", NULL};
    static const char *const graph[] = {"--cuda-graph-impl", "full_iteration",
                                        "--cuda-graph-warmup-steps", "2", NULL};
    static const char *const shared[] = {"--moe-shared-expert-intermediate-size", "32", NULL};
    static const char *const overlap[] = {"--moe-shared-expert-overlap",
                                          "--moe-token-dispatcher-type", "alltoall", NULL};
    static const char *const echo_graph[] = {"--moe-enable-echo",
                                             "--cuda-graph-impl",
                                             "full_iteration",
                                             "--cuda-graph-warmup-steps",
                                             "2",
                                             NULL};
    const variant all[] = {
        {"moe ep=world", t->size, false, false, NULL, false, NULL},
        {"moe ep=world, capacity 1.0 padded", t->size, false, true, NULL, false, NULL},
        {"moe ep2 x edp, distributed optimizer", 2, true, false, NULL, false, NULL},
        {"moe ep=world, receive budget 0.5 (extra rounds)", t->size, false, false, budget, true,
         NULL},
        {"moe ep=world, ECHO", t->size, false, false, echo, false, NULL},
        {"moe ep2 x edp, full recomputation", 2, true, false, tc_recompute_full, false, NULL},
        {"moe ep=world, full-iteration graph", t->size, false, false, graph, false, NULL},
        {"moe ep=world, ECHO in a full-iteration graph", t->size, false, false, echo_graph, false,
         NULL},
        {"moe ep=world, shared experts", t->size, false, false, NULL, false, shared},
        {"moe ep=world, shared experts beside the exchange", t->size, false, false, overlap, false,
         shared},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) check_variant(t, &all[i]);
}
