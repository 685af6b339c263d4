/* Expert parallelism against one rank (the MPI harness on the CPU in `make test`, NCCL on GPUs
 * in `make test-nccl`): a tiny MoE model (4 experts, top-2, aux loss and z-loss, dropless and
 * capacity-limited) trained with its experts spread over EP ranks of the data-parallel group —
 * the token dispatch's fixed-size all-to-alls (model/moe_dispatch.c), the experts' gradient
 * buffer over the expert-data-parallel group, the gradient norm over both — must log the losses
 * and gradient norms of the same model trained on one rank, and each rank's experts (global
 * numbers in their names) must end equal to the one-rank model's; so must the same run under a
 * receive budget small enough for extra dispatch rounds, with ECHO's spare slots, with full
 * recomputation, replayed from a full-iteration graph, and with ECHO inside that graph; in fp8
 * (the experts' grouped fp8 products too) the losses within FP8_TOL, both places. On the CPU
 * within 1e-5 relative (fp32); on GPUs within the bf16 tolerances of test_train_tp.c, and a step
 * neither synchronises with the host nor allocates. Dropout is Megatron's default 0.1 with
 * --layout-invariant-dropout, whose masks every layout draws alike. */
#include "train_compare.h"

#include "core/env.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS        10
#define TOL          1e-5
#define BF16_TOL     2e-2
#define NORM_TOL     5e-2
#define FP8_TOL      2e-3
#define FP8_NORM_TOL 0.2

typedef struct {
    const char *label;
    int ep;
    bool distopt, capacity;
    const char *const *extra;  /* flags of the EP run only (the reference is plain), NULL-ended */
    bool host_reads;           /* a step reads a count on the host (the receive budget's rounds) */
    const char *const *both;   /* flags of both runs (the model), NULL-ended; NULL: none */
    double loss_tol, norm_tol; /* 0: the defaults (fp8: a cast's rounding flip, see below) */
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
    tc_expect_steps(t, v->label, &got, &ref, steps,
                    v->loss_tol > 0 ? v->loss_tol
                    : dev           ? BF16_TOL
                                    : TOL,
                    v->norm_tol > 0 ? v->norm_tol
                    : dev           ? NORM_TOL
                                    : TOL);
    if (!dev && v->loss_tol == 0) {
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

/* On GPUs: the rows stored straight into the peers' receive slabs (MG_MOE_EXCHANGE=stores, the
 * default where the ranks map each other's memory) give the numbers of the slabs sent by the
 * group's all-to-all bit for bit: the same rows land in the same places. Skipped where the
 * environment already asks for the all-to-all (run_nccl.sh's run of that path). */
static void check_exchange(dist_ctx *t, const variant *v) {
    const char *env = getenv("MG_MOE_EXCHANGE");
    if (!dist_on_device(t) || (env && strcmp(env, "stores") != 0)) return;
    mg_parallel_sizes s = {
        .world_size = t->size, .tp = 1, .pp = 1, .cp = 1, .ep = v->ep, .etp = -1};
    mg_train_groups gr = {0};
    mg_config c;
    make_config(t, &c, v, v->ep, t->size, v->extra);
    tc_groups(t, s, &gr);
    tc_run a2a = {0}, stores = {0};
    setenv("MG_MOE_EXCHANGE", "all-to-all", 1);
    mg_env_forget();
    tc_train(t, &c, &gr, STEPS, &a2a);
    unsetenv("MG_MOE_EXCHANGE");
    mg_env_forget();
    tc_train(t, &c, &gr, STEPS, &stores);
    char label[160];
    snprintf(label, sizeof label, "%s: stores into the peers' slabs against the all-to-all",
             v->label);
    if (stores.tr && a2a.tr) {
        DEXPECT(stores.tr->model.moe_ws.peer != NULL && a2a.tr->model.moe_ws.peer == NULL,
                "%s: the exchange paths are not the ones asked for (stores %s, all-to-all %s)",
                label, stores.tr->model.moe_ws.peer ? "on" : "off",
                a2a.tr->model.moe_ws.peer ? "on" : "off");
        tc_expect_steps(t, label, &stores, &a2a, STEPS, 0.0, 0.0);
        size_t n = (size_t)stores.tr->model.params.numel;
        DEXPECT(memcmp(stores.w, a2a.w, n * sizeof(float)) == 0,
                "%s: the weights after %d steps differ", label, STEPS);
    }
    if (env) setenv("MG_MOE_EXCHANGE", env, 1);
    mg_env_forget();
    tc_release(&a2a);
    tc_release(&stores);
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
    /* fp8 (hybrid, delayed): the routed experts' grouped casts and fp8 grouped GEMMs on each
     * rank's rows; a cast turns a rounding difference of another summation order into a whole
     * fp8 step now and then, which the later steps carry: the losses within FP8_TOL, the grad
     * norms within FP8_NORM_TOL, the parameters not compared */
    static const char *const fp8[] = {
        "--fp8-format", "hybrid", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo",
        "max",          NULL};
    const variant all[] = {
        {"moe ep=world", t->size, false, false, NULL, false, NULL, 0, 0},
        {"moe ep=world, capacity 1.0 padded", t->size, false, true, NULL, false, NULL, 0, 0},
        {"moe ep2 x edp, distributed optimizer", 2, true, false, NULL, false, NULL, 0, 0},
        {"moe ep=world, receive budget 0.5 (extra rounds)", t->size, false, false, budget, true,
         NULL, 0, 0},
        {"moe ep=world, ECHO", t->size, false, false, echo, false, NULL, 0, 0},
        {"moe ep2 x edp, full recomputation", 2, true, false, tc_recompute_full, false, NULL, 0, 0},
        {"moe ep=world, full-iteration graph", t->size, false, false, graph, false, NULL, 0, 0},
        {"moe ep=world, ECHO in a full-iteration graph", t->size, false, false, echo_graph, false,
         NULL, 0, 0},
        {"moe ep=world, shared experts", t->size, false, false, NULL, false, shared, 0, 0},
        {"moe ep=world, shared experts beside the exchange", t->size, false, false, overlap, false,
         shared, 0, 0},
        {"moe ep=world, fp8", t->size, false, false, NULL, false, fp8, FP8_TOL, FP8_NORM_TOL},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) check_variant(t, &all[i]);
    check_exchange(t, &all[0]); /* plain */
    check_exchange(t, &all[3]); /* a receive budget's rounds through the same slabs */
    check_exchange(t, &all[4]); /* ECHO's spare slots among the receiving experts */
}
