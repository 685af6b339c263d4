/* Pipeline-parallel training against the one-rank run: every rank trains a tiny GPT twice, alone
 * (the reference: the whole model, the whole global batch of 8 microbatches per replica) and as
 * pipeline rank p of the layout under test, 10 steps, and compares the losses (on the last
 * stage, which computes them), the grad norms (every rank: the norm spans the model-parallel
 * group) and every element of this rank's parameters with the reference's (by name: layers keep
 * their global numbers; the last stage's copy of a tied embedding against the embedding). fp32
 * on the cpu backend: 1e-5 relative (the bound). The layouts:
 *   2 ranks   GPT-2 and Llama style P 2 (messages overlapped, Megatron's default, and in the
 *             schedule's order); interleaved P 2 x V 2; uneven first/last stages
 *             (--decoder-first/last-pipeline-num-layers); the embedding and the loss accounted
 *             as layers (--account-for-*-in-pipeline-split)
 *             and, under MG_TEST_PP_STREAMED=1, interleaved P 2 x V 2 and Llama P 2 with the
 *             streamed executor GPUs use (run.h: untagged messages, matched in posting order)
 *   4 ranks   P 4 both styles; interleaved P 4 x V 2 (16 layers, tied and untied; and 8 layers
 *             with --no-overlap-p2p-communication; Llama 16 layers also streamed); P 2 x D 2
 *             with the distributed optimizer and --overlap-grad-reduce
 *   8 ranks   T 2 x P 2 x D 2 with sequence parallelism and the distributed optimizer
 * And the activation memory: the slots a pipeline rank plans are the schedule's count, the same
 * for 8 and 64 microbatches per step (the memory plan does not grow with them). Dropout is
 * Megatron's default 0.1 with --layout-invariant-dropout, whose masks every layout draws alike.
 * On GPUs (NCCL, `make test-nccl`) the layouts of the world run in bf16 against one GPU: losses
 * within BF16_TOL, grad norms within NORM_TOL (test_train_tp.c's bounds), an interleaved
 * schedule's messages on the pipeline stream (run.h's streamed executor), and a steady step that
 * waits for nothing on the host and allocates nothing. */
#include "dist.h"
#include "train_compare.h"

#include "core/env.h"
#include "core/log.h"
#include "train/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS    10
#define TOL      1e-5
#define BF16_TOL 2e-2 /* a few bf16 ulps of relative difference, as test_train_tp.c */
#define NORM_TOL 6e-2

typedef struct {
    const char *label;
    bool llama;
    int world, layers, tp, pp; /* the world it runs on; D = world / (tp * pp) */
    const char *layout[12];    /* flags beyond the sizes, NULL-terminated */
} variant;

static void model_flags(const dist_ctx *t, const variant *v, const char **argv, char *layers) {
    snprintf(layers, 8, "%d", v->layers);
    const char *gpt2[] = {"--hidden-size", "32", "--num-attention-heads", "2", NULL};
    /* two heads of 16 channels (the fewest the CUDA attention kernels take) in one query group,
     * or under TP 2 in two (one per rank) */
    const char *llama[] = {"--hidden-size",
                           "32",
                           "--num-attention-heads",
                           "2",
                           "--group-query-attention",
                           "--num-query-groups",
                           v->tp > 1 ? "2" : "1",
                           "--ffn-hidden-size",
                           "64",
                           "--normalization",
                           "RMSNorm",
                           "--swiglu",
                           "--position-embedding-type",
                           "rope",
                           "--disable-bias-linear",
                           "--untie-embeddings-and-output-weights",
                           NULL};
    const char *common[] = {"--num-layers",
                            layers,
                            "--seq-length",
                            "16",
                            "--vocab-size",
                            "128",
                            "--make-vocab-size-divisible-by",
                            "32",
                            "--mock-data",
                            "--micro-batch-size",
                            "1",
                            "--train-iters",
                            "20",
                            "--lr",
                            "3e-3",
                            "--eval-iters",
                            "0",
                            "--device",
                            dist_on_device(t) ? "cuda" : "cpu",
                            "--num-threads",
                            "1",
                            "--layout-invariant-dropout",
                            NULL};
    int n = 0;
    for (const char *const *m = v->llama ? llama : gpt2; *m; m++) argv[n++] = *m;
    for (const char *const *m = common; *m; m++) argv[n++] = *m;
    argv[n] = NULL;
}

/* streamed: under MG_TEST_PP_STREAMED=1 (run.h's hook, CPU ranks) */
static void check_variant(dist_ctx *t, const variant *v, bool streamed) {
    const int D = t->size / (v->tp * v->pp);
    char layers[8], gbs1[16], gbsD[16], tp[8], pp[8];
    const char *model[64];
    model_flags(t, v, model, layers);
    snprintf(gbs1, sizeof gbs1, "%d", 8 * D);
    snprintf(gbsD, sizeof gbsD, "%d", 8 * D);
    snprintf(tp, sizeof tp, "%d", v->tp);
    snprintf(pp, sizeof pp, "%d", v->pp);
    const char *one[] = {"--global-batch-size", gbs1, NULL};
    const char *lay[24] = {"--global-batch-size",
                           gbsD,
                           "--tensor-model-parallel-size",
                           tp,
                           "--pipeline-model-parallel-size",
                           pp};
    int n = 6;
    for (int i = 0; v->layout[i]; i++) lay[n++] = v->layout[i];
    lay[n] = NULL;
    mg_config c1, cP;
    tc_config(t, &c1, model, one, 1);
    tc_config(t, &cP, model, lay, t->size);
    mg_train_groups g = {0};
    tc_run ref = {0}, got = {0};
    if (streamed) {
        setenv("MG_TEST_PP_STREAMED", "1", 1);
        mg_env_forget();
    }
    tc_train_both(t, &c1, &cP,
                  (mg_parallel_sizes){
                      .world_size = t->size, .tp = v->tp, .pp = v->pp, .cp = 1, .ep = 1, .etp = -1},
                  STEPS, &g, &ref, &got);
    DEXPECT(got.tr->layout.pp_size == v->pp && got.tr->layout.dp_size == D &&
                got.tr->num_microbatches == 8,
            "%s: pp %d, dp %d, %d microbatches", v->label, got.tr->layout.pp_size,
            got.tr->layout.dp_size, got.tr->num_microbatches);
    /* the messages overlap (MPI: tagged; NCCL: on the pipeline stream, Megatron's default)
     * unless the layout says otherwise */
    const bool dev = dist_on_device(t);
    const mg_pipeline *pipe = &got.tr->pipe;
    const mg_pipe_comm comm = cP.no_overlap_p2p_communication ? MG_PIPE_IN_ORDER
                              : streamed                      ? MG_PIPE_STREAMED
                              : !dev                          ? MG_PIPE_TAGGED
                              : pipe->schedule.vpp > 1        ? MG_PIPE_STREAMED
                                                              : MG_PIPE_IN_ORDER;
    DEXPECT(pipe->comm == comm, "%s: messages move as %d, want %d", v->label, pipe->comm, comm);
    tc_expect_steps(t, v->label, &got, &ref, STEPS, dev ? BF16_TOL : TOL, dev ? NORM_TOL : TOL);
    if (dev) { /* bf16: the losses and norms are the check, and the steady state */
        tc_expect_steady_step(t, v->label, got.tr);
        tc_release(&ref);
        tc_release(&got);
        tc_free_groups(&g);
        return;
    }
    const char *which = "";
    double e = tc_model_error(&got, &ref, &which, NULL);
    DEXPECT(e <= TOL,
            "%s: pipeline rank %d's parameters after %d steps differ by %.3g (most in %s)",
            v->label, got.tr->layout.pp_rank, STEPS, e, which);
    /* activation memory: the schedule's slots, each one chunk's saved activations */
    int want;
    DOK(mg_pp_schedule_activation_slots(&got.tr->pipe.schedule, got.tr->layout.pp_rank, &want));
    DEXPECT(got.tr->model.n_slots == want &&
                got.tr->mem.plan.acts.size >= (size_t)want * got.tr->model.slot_bytes,
            "%s: %d slots of %zu B in %zu B, the schedule's %d", v->label, got.tr->model.n_slots,
            got.tr->model.slot_bytes, got.tr->mem.plan.acts.size, want);
    /* `megatron plan`'s prediction (train/memory.h) is what the trainer reserved */
    mg_memory_stage m;
    DOK(mg_memory_stage_estimate(&cP, got.tr->layout.pp_rank, D, MG_F32, &m));
    const mg_trainer *tr = got.tr;
    DEXPECT(tr->layout.tp_rank != 0 ||
                (m.weights == tr->mem.plan.params.size && m.grads == tr->mem.plan.grads.size &&
                 m.master_weights == 0 && m.optimizer == tr->mem.plan.optim.size &&
                 m.activations == tr->mem.plan.acts.size && m.workspace == tr->mem.plan.work.size &&
                 m.batch == tr->mem.plan.io.size && m.total == tr->mem.planned_bytes),
            "%s: pipeline rank %d: predicted weights %zu grads %zu optimizer %zu activations %zu "
            "workspace %zu batch %zu; reserved %zu %zu %zu %zu %zu %zu",
            v->label, tr->layout.pp_rank, m.weights, m.grads, m.optimizer, m.activations,
            m.workspace, m.batch, tr->mem.plan.params.size, tr->mem.plan.grads.size,
            tr->mem.plan.optim.size, tr->mem.plan.acts.size, tr->mem.plan.work.size,
            tr->mem.plan.io.size);
    tc_release(&ref);
    tc_release(&got);
    tc_free_groups(&g);
    if (streamed) {
        unsetenv("MG_TEST_PP_STREAMED");
        mg_env_forget();
    }
}

/* The same model and layout with 8 and with 64 microbatches plans the same activation memory. */
static void check_memory_flat(dist_ctx *t) {
    if (t->size != 4 || dist_on_device(t)) return; /* a plan of the cpu backend's */
    size_t acts[2];
    for (int k = 0; k < 2; k++) {
        const variant v = {"memory", false, 4, 8, 1, 4, {NULL}};
        char layers[8], gbs[16];
        const char *model[64];
        model_flags(t, &v, model, layers);
        snprintf(gbs, sizeof gbs, "%d", k ? 64 : 8);
        const char *lay[] = {"--global-batch-size", gbs, "--pipeline-model-parallel-size", "4",
                             NULL};
        mg_config c;
        tc_config(t, &c, model, lay, t->size);
        mg_train_groups g = {0};
        tc_groups(
            t, (mg_parallel_sizes){.world_size = 4, .tp = 1, .pp = 4, .cp = 1, .ep = 1, .etp = -1},
            &g);
        mg_trainer *tr = calloc(1, sizeof *tr);
        DOK(tr ? MG_OK : MG_ERR_NOMEM);
        DOK(mg_trainer_init(tr, &c, &g));
        acts[k] = tr->mem.plan.acts.size;
        DEXPECT(tr->num_microbatches == (k ? 64 : 8), "%d microbatches", tr->num_microbatches);
        mg_trainer_free(tr);
        free(tr);
        tc_free_groups(&g);
    }
    DEXPECT(acts[0] == acts[1] && acts[0] > 0,
            "activation memory %zu B with 8 microbatches, %zu B with 64", acts[0], acts[1]);
}

void test_train_pp(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    const variant all[] = {
        {"gpt2 pp2", false, 2, 4, 1, 2, {NULL}},
        {"llama pp2", true, 2, 4, 1, 2, {NULL}},
        {"gpt2 pp2 vpp2", false, 2, 4, 1, 2, {"--virtual-pipeline-model-parallel-size", "2", NULL}},
        {"llama pp2 uneven 1+3",
         true,
         2,
         4,
         1,
         2,
         {"--decoder-first-pipeline-num-layers", "1", "--decoder-last-pipeline-num-layers", "3",
          NULL}},
        {"gpt2 pp2 embedding and loss as layers",
         false,
         2,
         4,
         1,
         2,
         {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
          NULL}},
        {"gpt2 pp2, each message a rendezvous in the schedule's order",
         false,
         2,
         4,
         1,
         2,
         {"--no-overlap-p2p-communication", NULL}},
        {"gpt2 pp4", false, 4, 8, 1, 4, {NULL}},
        {"llama pp4 vpp2, each message a rendezvous in the schedule's order",
         true,
         4,
         8,
         1,
         4,
         {"--virtual-pipeline-model-parallel-size", "2", "--no-overlap-p2p-communication", NULL}},
        {"llama pp4", true, 4, 8, 1, 4, {NULL}},
        {"gpt2 pp4 vpp2 (16 layers)",
         false,
         4,
         16,
         1,
         4,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
        {"llama pp4 vpp2 (16 layers)",
         true,
         4,
         16,
         1,
         4,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
        {"gpt2 pp2 x dp2, distributed optimizer, overlap-grad-reduce",
         false,
         4,
         4,
         1,
         2,
         {"--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size", "3000",
          NULL}},
        {"gpt2 tp2+sp x pp2 x dp2, distributed optimizer",
         false,
         8,
         4,
         2,
         2,
         {"--sequence-parallel", "--use-distributed-optimizer", NULL}},
        {"llama tp2 x pp2 vpp2 x dp2",
         true,
         8,
         8,
         2,
         2,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i].world == t->size) check_variant(t, &all[i], false);
    /* the streamed executor (GPUs' for interleaved schedules) on CPU ranks */
    const variant streamed[] = {
        {"gpt2 pp2 vpp2, streamed",
         false,
         2,
         4,
         1,
         2,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
        {"llama pp2, streamed", true, 2, 4, 1, 2, {NULL}},
        {"llama pp4 vpp2 (16 layers), streamed",
         true,
         4,
         16,
         1,
         4,
         {"--virtual-pipeline-model-parallel-size", "2", NULL}},
    };
    for (size_t i = 0; i < sizeof streamed / sizeof *streamed && !dist_on_device(t); i++)
        if (streamed[i].world == t->size) check_variant(t, &streamed[i], true);
    check_memory_flat(t);
}
