/* The trainer and `megatron plan` share one memory plan (train/memory.h): for the same flags and
 * layout (one rank, cpu backend) the prediction is each arena the trainer committed, byte for
 * byte, for a dense GPT-2, a Llama with every batch array (packed documents, loss mask) and an
 * MoE model. The pipeline-parallel layouts are compared the same way under mpirun
 * (tests/dist/test_train_pp.c). */
#include "config_test_util.h"

#include "train/memory.h"

#include <string.h>

#define TINY                                                                                       \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr 3e-3 "            \
    "--num-threads 2 --device cpu "

static void expect_plan_agrees(mg_test_ctx *t, const char *label, const char *flags) {
    mg_trainer *tr = mg_test_trainer(t, flags, NULL);
    if (!tr) return;
    mg_memory_stage m;
    MG_EXPECT_OK(mg_memory_stage_estimate(&tr->cfg, tr->layout.pp_rank, tr->layout.dp_size,
                                          tr->be->compute_dtype, &m));
    const mg_memory_plan *p = &tr->mem.plan;
    MG_EXPECT(m.weights == p->params.size && m.grads == p->grads.size && m.master_weights == 0 &&
                  m.optimizer == p->optim.size && m.activations == p->acts.size &&
                  m.workspace == p->work.size && m.batch == p->io.size &&
                  m.total == tr->mem.planned_bytes,
              "%s: predicted weights %zu grads %zu masters %zu optimizer %zu activations %zu "
              "workspace %zu batch %zu total %zu; committed %zu %zu - %zu %zu %zu %zu total %zu",
              label, m.weights, m.grads, m.master_weights, m.optimizer, m.activations, m.workspace,
              m.batch, m.total, p->params.size, p->grads.size, p->optim.size, p->acts.size,
              p->work.size, p->io.size, tr->mem.planned_bytes);
    MG_EXPECT(m.slots == tr->model.n_slots && m.slot_bytes == tr->model.slot_bytes &&
                  m.recompute_bytes == tr->model.rc_bytes &&
                  m.params == mg_params_count(&tr->model.params),
              "%s: predicted %d slots of %zu B, %lld parameters; the trainer's %d of %zu B, %lld",
              label, m.slots, m.slot_bytes, (long long)m.params, tr->model.n_slots,
              tr->model.slot_bytes, (long long)mg_params_count(&tr->model.params));
    /* not vacuous: every arena holds something */
    MG_EXPECT(m.weights > 0 && m.optimizer > 0 && m.activations > 0 && m.workspace > 0 &&
                  m.batch > 0,
              "%s: an empty arena", label);
    mg_test_trainer_free(tr);
}

MG_TEST(train_memory_plan_is_the_trainers_dense) {
    expect_plan_agrees(t, "gpt2", TINY "--eval-iters 1");
}

MG_TEST(train_memory_plan_is_the_trainers_llama_with_batch_arrays) {
    expect_plan_agrees(t, "llama",
                       TINY "--eval-iters 1 --normalization RMSNorm --swiglu "
                            "--position-embedding-type rope --group-query-attention "
                            "--num-query-groups 2 --disable-bias-linear "
                            "--untie-embeddings-and-output-weights --reset-position-ids "
                            "--reset-attention-mask --eod-mask-loss --attention-dropout 0.1 "
                            "--hidden-dropout 0.1");
}

MG_TEST(train_memory_plan_is_the_trainers_moe) {
    expect_plan_agrees(t, "moe",
                       TINY "--eval-iters 1 --num-experts 4 --moe-router-topk 2 "
                            "--moe-ffn-hidden-size 24 --moe-layer-freq [0,1] "
                            "--moe-shared-expert-intermediate-size 16 --use-distributed-optimizer");
}

/* With activation recomputation the slots keep less and the shared recomputation buffers are
 * part of the activation arena: predicted as committed. */
MG_TEST(train_memory_plan_is_the_trainers_recompute) {
    expect_plan_agrees(t, "full recomputation, uniform groups of 2",
                       TINY "--num-layers 4 --recompute-granularity full --recompute-method "
                            "uniform --recompute-num-layers 2");
    expect_plan_agrees(t, "selective recomputation",
                       TINY "--recompute-granularity selective --recompute-modules core_attn "
                            "layernorm mlp_act");
}

/* fp8 layers that keep their inputs' transposes (model/fp8.h) read their norms' outputs and their
 * activation only in the forward: every layer's slot entry goes without them (one shared set in
 * the activation arena instead), predicted as committed. TINY: N = 2 x 16 tokens, H = 32,
 * F = 4H, 2 layers, fp32 on the cpu backend. */
MG_TEST(train_memory_plan_is_the_trainers_fp8) {
    expect_plan_agrees(t, "fp8", TINY "--fp8-format hybrid");
    /* the routed experts in fp8: their grouped casts' workspace and weight copies */
    expect_plan_agrees(t, "fp8 MoE",
                       TINY "--fp8-format hybrid --num-experts 4 --moe-router-topk 2 "
                            "--moe-ffn-hidden-size 24 --moe-layer-freq [0,1]");
    expect_plan_agrees(t, "fp8, selective recomputation",
                       TINY "--fp8-format hybrid --recompute-granularity selective "
                            "--recompute-modules layernorm mlp_act");
    mg_trainer *bf = mg_test_trainer(t, TINY, NULL);
    mg_trainer *f8 = mg_test_trainer(t, TINY "--fp8-format hybrid", NULL);
    if (bf && f8) {
        const size_t N = 32, H = 32, F = 128, L = 2, each = N * (2 * H + F) * sizeof(float);
        MG_EXPECT(bf->model.slot_bytes - f8->model.slot_bytes == L * each &&
                      f8->model.rc_bytes == each && bf->model.rc_bytes == 0,
                  "fp8 slot %zu B + %zu B shared; without fp8 %zu B + %zu B; expected %zu B less "
                  "per slot and %zu B shared",
                  f8->model.slot_bytes, f8->model.rc_bytes, bf->model.slot_bytes,
                  bf->model.rc_bytes, L * each, each);
    }
    mg_test_trainer_free(bf);
    mg_test_trainer_free(f8);
}
