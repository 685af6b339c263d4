/* Activation recomputation (--recompute-granularity full|selective, model/gpt.h) changes where
 * activations live, never a number: a run with it equals the same run without, bit for bit (the
 * losses and gradient norms of every step, the gradients of the last step, the weights at the
 * end), with dropout on (the recomputed forward draws the forward's masks), for GPT-2, Llama and
 * MoE models (the routing reused), for full recomputation (uniform groups of one and of several
 * layers, block) and each selective module, and under CUDA graphs (the CPU backend replays what
 * it recorded). And it pays: the memory plan's activations of a 24 x 2048 model at sequence 4096
 * fall below half with full recomputation, the selective modules in between, and the trainer
 * commits what the plan predicts. */
#include "test.h"

#include "config_test_util.h"

#include "train/memory.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 4

typedef struct {
    double loss[STEPS], norm[STEPS];
    float *w, *g;
    size_t numel;
    size_t acts; /* the committed activation arena */
} run_out;

static void run(mg_test_ctx *t, const char *flags, const char *extra, run_out *o) {
    char all[1600];
    snprintf(all, sizeof all, "%s %s", flags, extra);
    mg_trainer *tr = mg_test_trainer(t, all, NULL);
    if (!tr) return;
    for (int s = 0; s < STEPS && !t->failures; s++)
        MG_EXPECT_OK(mg_trainer_step(tr, &o->loss[s], &o->norm[s]));
    o->numel = tr->model.params.numel;
    o->w = malloc(o->numel * sizeof(float));
    o->g = malloc(o->numel * sizeof(float));
    MG_EXPECT_OK(mg_trainer_get_weights(tr, o->w));
    memcpy(o->g, tr->model.blk.grad_buf, o->numel * sizeof(float)); /* the cpu backend's */
    o->acts = tr->mem.plan.acts.size;
    mg_test_trainer_free(tr);
}

/* The run with `rc` equals the run without, bit for bit, and (`smaller`) keeps fewer
 * activations. */
static void same_as(mg_test_ctx *t, const char *flags, const char *rc, const char *label,
                    bool smaller) {
    run_out a = {0}, b = {0};
    run(t, flags, "", &a);
    run(t, flags, rc, &b);
    if (!a.w || !b.w) goto done;
    for (int s = 0; s < STEPS; s++)
        MG_EXPECT(a.loss[s] == b.loss[s] && a.norm[s] == b.norm[s],
                  "%s step %d: loss %.9g norm %.9g with recomputation, %.9g %.9g without", label,
                  s + 1, b.loss[s], b.norm[s], a.loss[s], a.norm[s]);
    MG_EXPECT(a.numel == b.numel && memcmp(a.g, b.g, a.numel * sizeof(float)) == 0,
              "%s: the gradients of step %d differ", label, STEPS);
    MG_EXPECT(a.numel == b.numel && memcmp(a.w, b.w, a.numel * sizeof(float)) == 0,
              "%s: the weights after %d steps differ", label, STEPS);
    MG_EXPECT(!smaller || b.acts < a.acts,
              "%s: activations %zu B with recomputation, %zu B without", label, b.acts, a.acts);
done:
    free(a.w);
    free(a.g);
    free(b.w);
    free(b.g);
}

static void same_as_without(mg_test_ctx *t, const char *flags, const char *rc, const char *label) {
    same_as(t, flags, rc, label, true);
}

#define BASE                                                                                       \
    "--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --eval-iters 0 "             \
    "--num-threads 2 --device cpu --train-iters 8 --attention-dropout 0.1 --hidden-dropout 0.1 "
#define LLAMA                                                                                      \
    BASE "--normalization RMSNorm --swiglu --position-embedding-type rope "                        \
         "--group-query-attention --num-query-groups 2 --disable-bias-linear "                     \
         "--untie-embeddings-and-output-weights "
/* MoE layers at positions 1 and 2, dense MLPs at 0 and 3; shared experts */
#define MOE                                                                                        \
    LLAMA                                                                                          \
    "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 "      \
    "--moe-z-loss-coeff 1e-3 --moe-shared-expert-intermediate-size 16 "                            \
    "--moe-layer-freq ([0,1,1,0]) "
#define FULL(method, n)                                                                            \
    "--recompute-granularity full --recompute-method " method " --recompute-num-layers " #n
#define SELECTIVE(m) "--recompute-granularity selective --recompute-modules " m

MG_TEST(train_recompute_full_is_bitwise_gpt2) {
    same_as_without(t, BASE, FULL("uniform", 1), "gpt2 uniform 1");
    same_as_without(t, BASE, FULL("uniform", 3), "gpt2 uniform 3");
    same_as_without(t, BASE, FULL("block", 2), "gpt2 block 2");
}

MG_TEST(train_recompute_selective_is_bitwise_gpt2) {
    same_as_without(t, BASE, "--recompute-activations", "gpt2 core_attn");
    same_as_without(t, BASE, SELECTIVE("layernorm mlp_act"), "gpt2 layernorm mlp_act");
    same_as_without(t, BASE, SELECTIVE("core_attn layernorm mlp"), "gpt2 core_attn layernorm mlp");
}

/* fp8 linears (model/fp8.h): the recomputed forward casts with the step's scales again, and its
 * amaxes are the forward's (a maximum takes them twice alike) */
MG_TEST(train_recompute_is_bitwise_fp8) {
    same_as_without(
        t, BASE "--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max ",
        FULL("uniform", 1), "gpt2 fp8 full uniform 1");
    same_as_without(t, LLAMA "--fp8-format e4m3 --fp8-recipe tensorwise ",
                    SELECTIVE("core_attn layernorm mlp"), "llama fp8 tensorwise selective");
    same_as_without(t, MOE "--fp8-format hybrid ", SELECTIVE("shared_experts moe_act layernorm"),
                    "moe fp8 (shared experts in fp8) selective");
}

MG_TEST(train_recompute_is_bitwise_llama) {
    same_as_without(t, LLAMA, FULL("uniform", 2), "llama uniform 2");
    same_as_without(t, LLAMA, SELECTIVE("core_attn layernorm mlp_act"), "llama selective");
}

MG_TEST(train_recompute_is_bitwise_moe) {
    same_as_without(t, MOE, FULL("uniform", 1), "moe uniform 1");
    /* one group of every layer: its buffers are a whole slot's, on top of the kept input */
    same_as(t, MOE, FULL("uniform", 4), "moe uniform 4", false);
    same_as_without(t, MOE, SELECTIVE("moe layernorm"), "moe moe layernorm");
    same_as_without(t, MOE, SELECTIVE("moe_act shared_experts mlp"), "moe moe_act shared_experts");
}

/* With graphs: the recomputed forward is part of the full-iteration graph; with per-layer graphs
 * it runs eagerly between them, and the selective recomputation inside a sublayer's backward is
 * in that sublayer's graph. */
MG_TEST(train_recompute_is_bitwise_under_graphs) {
    same_as_without(t,
                    MOE "--cuda-graph-impl full_iteration --cuda-graph-warmup-steps 2 --num-layers "
                        "4",
                    FULL("uniform", 2), "moe full-iteration graph");
    same_as_without(t, BASE "--cuda-graph-impl local --cuda-graph-warmup-steps 2",
                    SELECTIVE("core_attn layernorm mlp_act"), "gpt2 per-layer graphs, selective");
    same_as_without(t, BASE "--cuda-graph-impl local --cuda-graph-warmup-steps 2", FULL("block", 3),
                    "gpt2 per-layer graphs, full");
}

/* The memory plan of a 24 x 2048 GPT at sequence 4096 (bf16, one GPU): the activations with
 * full recomputation of every layer fall below half, each selective set lies in between, and
 * more modules free more. */
static size_t plan_acts(mg_test_ctx *t, const char *extra) {
    char flags[1200];
    snprintf(flags, sizeof flags,
             "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 "
             "--max-position-embeddings 4096 --vocab-size 50257 --micro-batch-size 1 "
             "--global-batch-size 8 --train-iters 1 --lr 1e-4 --mock-data --bf16 %s",
             extra);
    mg_config c;
    mg_memory_stage m = {0};
    MG_EXPECT_OK(mg_test_config(&c, flags, NULL));
    MG_EXPECT_OK(mg_memory_stage_estimate(&c, 0, 1, MG_BF16, &m));
    return m.activations;
}

MG_TEST(train_recompute_plan_activations_fall) {
    size_t none = plan_acts(t, ""), full = plan_acts(t, FULL("uniform", 1));
    size_t attn = plan_acts(t, "--recompute-activations");
    size_t more = plan_acts(t, SELECTIVE("core_attn layernorm mlp_act"));
    size_t most = plan_acts(t, SELECTIVE("core_attn layernorm mlp"));
    MG_EXPECT(full > 0 && full * 2 < none, "full recomputation: %zu B of %zu B", full, none);
    MG_EXPECT(full < most && most < more && more < attn && attn < none,
              "activations full %zu < selective (core_attn layernorm mlp) %zu < (core_attn "
              "layernorm mlp_act) %zu < (core_attn) %zu < none %zu",
              full, most, more, attn, none);
}
