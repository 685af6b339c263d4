/* Tensor (and sequence) parallel training against the one-rank run: every rank trains a tiny GPT
 * twice, alone (the reference: the whole model, the whole global batch) and as tensor-parallel
 * rank r of a model split over T ranks (T x D = the world, D data-parallel replicas), 10 steps
 * of 4 samples with gradient accumulation, and compares the losses, the grad norms and every
 * element of this rank's parameter shards with the matching element of the reference's whole
 * tensors (model/params.h: mg_param_global_index). fp32 on the cpu backend: tolerance 1e-5
 * relative, the bound; the split GEMMs and the reductions sum in other orders, so bitwise
 * equality is not expected. The padded vocabulary is the same in both runs
 * (--make-vocab-size-divisible-by 32 with a vocabulary of 128, which 32 x T divides).
 *   GPT-2 style: LayerNorm, GELU, learned positions, linear biases, tied embeddings.
 *   Llama style: RMSNorm, SwiGLU, RoPE, GQA with T query groups, no biases, untied output.
 * Each with and without --sequence-parallel; the Llama style also with --rotary-percent 0.5 and
 * --apply-layernorm-1p (SP), the GPT-2 style with --apply-layernorm-1p; both with SP and
 * --tp-comm-overlap (the all-gathers beside the GEMMs of a rank's own rows, the row-parallel
 * products reduce-scattered in chunks), the GPT-2 style also without SP (all-reduced in chunks).
 * Every variant reduces QKV's and fc1's input gradient beside their weight gradient (the
 * default) except the --no-tp-comm-bulk-wgrad ones (everything in the compute stream). Dropout is
 * on (Megatron's 0.1, explicit) with --layout-invariant-dropout: the masks are keyed by global
 * head, global row and the sequence's place in the global batch (core/dropout.h), so a rank's heads
 * and (SP) rows draw exactly the one-rank model's masks (Megatron's own streams: test_train_rng.c).
 * On 2 ranks T = 2; on 4 ranks T = 4, and T = 2 x D = 2 with the distributed optimizer and
 * --overlap-grad-reduce; on 8 ranks T = 4 x D = 2.
 * The key bias of the fused QKV has a true gradient of exactly zero (softmax ignores a constant
 * added to every score of a row): both runs hold rounding noise there that Adam turns into
 * steps of arbitrary sign, so those elements (and only those) are not compared; nothing else
 * depends on them.
 * On device buffers (NCCL, `make test-nccl`, 2 or 4 GPUs): TP = 2 (GPT-2 style, with and without
 * SP; Llama style with SP; also in fp8, and with full recomputation) in bf16 against one GPU with
 * the same flags, 20 steps: losses within bf16 tolerance
 * (BF16_TOL), grad norms within NORM_TOL, the tensor-parallel collectives running on the compute
 * stream; and a further step of the tensor-parallel trainer (mg_trainer_step_async) makes no
 * host synchronisation and no device allocation (the cuda backend's counters), as one GPU's. The
 * grad norm is the looser check: a row-parallel product is rounded to bf16 on each rank before the
 * sum, and at lr 3e-3 on a 64-wide model one step's norm moved by 3.3% (H200, Llama style with SP,
 * step 6 of 20) while every loss stayed within 2%. Under SP the gathers and reduce-scatters go as
 * copies into the peers' memory where the GPUs map each other's (the default,
 * parallel/tensor_parallel.h); two variants also run with the group's collectives
 * (MG_TP_EXCHANGE=collectives) and compare. */
#include "dist.h"
#include "train_compare.h"

#include "config/flags.h"
#include "core/env.h"
#include "core/log.h"
#include "parallel/parallel_state.h"
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS        10
#define GPU_STEPS    TC_MAX_STEPS
#define TOL          1e-5
#define BF16_TOL     2e-2 /* a few bf16 ulps (2^-8) of relative difference, as test_train_dp.c */
#define NORM_TOL     6e-2 /* bf16 grad norms (see the top) */
#define FP8_NORM_TOL 0.2  /* fp8 grad norms: a cast's rounding flip moves them most */

typedef struct {
    const char *label;
    bool llama, sp, distopt;
    int tp;        /* D = world / tp */
    double rotary; /* --rotary-percent (0: the default, 1) */
    bool onep;     /* --apply-layernorm-1p */
    int overlap;   /* 1: --tp-comm-overlap (chunked reductions, SP's all-gathers beside the GEMMs
                    * of a rank's own rows); -1: --no-tp-comm-bulk-wgrad (every collective in the
                    * compute stream); 0: the default (the bulk wgrad overlap alone) */
} variant;

/* flags: NULL, or more flags (NULL-terminated) for both runs */
static void make_config(dist_ctx *t, mg_config *c, const variant *v, int tp, int world,
                        const char *const *flags) {
    /* Heads of 16 channels, the fewest the CUDA attention kernels take, in the smallest models
     * that T splits: GPT-2 style T heads (one per rank); Llama style 4 heads in T query groups
     * (T = 2: two query heads per group). */
    char tsize[8], g_hidden[8];
    snprintf(tsize, sizeof tsize, "%d", v->tp);
    snprintf(g_hidden, sizeof g_hidden, "%d", 16 * v->tp);
    char *gpt2[] = {"--num-layers", "2", "--hidden-size", g_hidden, "--num-attention-heads", tsize};
    char *llama[] = {"--num-layers",
                     "2",
                     "--hidden-size",
                     "64",
                     "--num-attention-heads",
                     "4",
                     "--group-query-attention",
                     "--num-query-groups",
                     tsize,
                     "--ffn-hidden-size",
                     "64",
                     "--normalization",
                     "RMSNorm",
                     "--swiglu",
                     "--position-embedding-type",
                     "rope",
                     "--disable-bias-linear",
                     "--untie-embeddings-and-output-weights"};
    char *common[] = {"--seq-length",
                      "16",
                      "--vocab-size",
                      "128",
                      "--make-vocab-size-divisible-by",
                      "32",
                      "--mock-data",
                      "--micro-batch-size",
                      "1",
                      "--global-batch-size",
                      "4",
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
                      "--attention-dropout",
                      "0.1",
                      "--hidden-dropout",
                      "0.1",
                      "--layout-invariant-dropout"};
    char *argv[64];
    int argc = 0;
    char **model = v->llama ? llama : gpt2;
    int nm = v->llama ? (int)(sizeof llama / sizeof *llama) : (int)(sizeof gpt2 / sizeof *gpt2);
    for (int i = 0; i < nm; i++) argv[argc++] = model[i];
    for (size_t i = 0; i < sizeof common / sizeof *common; i++) argv[argc++] = common[i];
    for (int i = 0; flags && flags[i] && argc < 64; i++) argv[argc++] = (char *)flags[i];
    bool help = false;
    mg_config_defaults(c);
    DOK(mg_flags_parse(c, argc, argv, &help));
    c->tensor_model_parallel_size = tp;
    c->sequence_parallel = v->sp && tp > 1;
    c->world_size = world;
    c->use_distributed_optimizer = v->distopt;
    c->overlap_grad_reduce = v->distopt;
    c->ddp_bucket_size = v->distopt ? 3000 : -1;
    c->overlap_param_gather = v->distopt && v->llama; /* the parameters gathered in forward */
    if (v->rotary > 0) c->rotary_percent = v->rotary;
    c->apply_layernorm_1p = v->onep;
    c->tp_comm_overlap = v->overlap > 0;
    c->no_tp_comm_bulk_wgrad = v->overlap < 0;
    DOK(mg_config_validate(c));
}

static int steps(const dist_ctx *t) {
    return dist_on_device(t) ? GPU_STEPS : STEPS;
}

/* Whether global element g of the fused QKV bias is a key bias (see the top). */
static bool key_bias(const mg_param_meta *m, const mg_model_config *c, int64_t g) {
    if (!strstr(m->name, "linear_qkv.bias")) return false;
    int r = c->nq / c->ng, pos = (int)(g % ((r + 2) * c->hd));
    return pos >= r * c->hd && pos < (r + 1) * c->hd;
}

/* flags: more flags for both runs (NULL: none); norm_tol: the grad norms' tolerance on devices
 * (0: NORM_TOL) */
static void check_variant(dist_ctx *t, const variant *v, const char *const *flags,
                          double norm_tol) {
    mg_parallel_sizes s = {
        .world_size = t->size, .tp = v->tp, .pp = 1, .cp = 1, .ep = 1, .etp = -1};
    mg_train_groups gr = {0};
    mg_config c1, cT;
    make_config(t, &c1, v, 1, 1, flags);
    make_config(t, &cT, v, v->tp, t->size, flags);
    tc_run ref = {0}, got = {0};
    tc_train_both(t, &c1, &cT, s, steps(t), &gr, &ref, &got);
    DEXPECT(got.tr->model.cfg.V == ref.tr->model.cfg.V && got.tr->layout.tp_size == v->tp &&
                got.tr->layout.dp_size == t->size / v->tp,
            "%s: vocabulary %d vs %d, tp %d, dp %d", v->label, got.tr->model.cfg.V,
            ref.tr->model.cfg.V, got.tr->layout.tp_size, got.tr->layout.dp_size);
    tc_expect_steps(t, v->label, &got, &ref, steps(t), dist_on_device(t) ? BF16_TOL : TOL,
                    dist_on_device(t) ? (norm_tol > 0 ? norm_tol : NORM_TOL) : TOL);
    if (dist_on_device(t)) { /* bf16: the losses and norms are the check, and the steady state */
        tc_expect_steady_step(t, v->label, got.tr);
        tc_release(&ref);
        tc_release(&got);
        tc_free_groups(&gr);
        return;
    }
    const char *which = "";
    double e = tc_model_error(&got, &ref, &which, key_bias);
    DEXPECT(e <= TOL,
            "%s: tp rank %d's parameters after %d steps differ from one rank's by %.3g "
            "(most in %s)",
            v->label, got.tr->layout.tp_rank, STEPS, e, which);
    /* this rank holds 1/T of every split parameter */
    const mg_param_table *pa = &got.tr->model.params;
    int64_t mine = mg_params_count(pa), whole = 0;
    for (int i = 0; i < pa->n; i++) whole += pa->p[i].global_shape[0] * pa->p[i].global_shape[1];
    DEXPECT(whole == mg_model_config_num_params(&ref.tr->model.cfg) && mine < whole,
            "%s: %lld local of %lld parameters", v->label, (long long)mine, (long long)whole);
    tc_release(&ref);
    tc_release(&got);
    tc_free_groups(&gr);
}

/* SP's gathers and reduce-scatters as copies into the peers' memory (MG_TP_EXCHANGE's default
 * where the ranks map each other's memory: GPUs of one host, or MPI ranks of one node) against
 * the group's collectives (MG_TP_EXCHANGE=collectives), the same flags: each run takes the path
 * asked for, and the two agree within TOL on CPU ranks (fp32), within bf16 tolerance on GPUs (the
 * same sums; the GEMMs run per rank's rows when pushed). flags: more flags for both (NULL: none);
 * with the dropout off the copies close each row-parallel layer (bias, residual) in the sum's
 * pass, the collectives after it. */
static void check_reduce_paths(dist_ctx *t, const variant *v, const char *const *flags,
                               const char *what) {
    const char *env = getenv("MG_TP_EXCHANGE");
    if (env && strcmp(env, "copies") != 0) return;
    mg_parallel_sizes s = {
        .world_size = t->size, .tp = v->tp, .pp = 1, .cp = 1, .ep = 1, .etp = -1};
    mg_train_groups gr = {0};
    mg_config c;
    make_config(t, &c, v, v->tp, t->size, flags);
    tc_groups(t, s, &gr);
    tc_run coll = {0}, copies = {0};
    setenv("MG_TP_EXCHANGE", "collectives", 1);
    mg_env_forget();
    tc_train(t, &c, &gr, steps(t), &coll);
    unsetenv("MG_TP_EXCHANGE");
    mg_env_forget();
    tc_train(t, &c, &gr, steps(t), &copies);
    char label[160];
    snprintf(label, sizeof label, "%s%s: exchanges by copies against the collectives", v->label,
             what);
    if (copies.tr && coll.tr) {
        DEXPECT(copies.tr->model.tp.peer != NULL && coll.tr->model.tp.peer == NULL,
                "%s: the exchange paths are not the ones asked for (copies %s, collectives %s)",
                label, copies.tr->model.tp.peer ? "on" : "off",
                coll.tr->model.tp.peer ? "on" : "off");
        const bool dev = dist_on_device(t);
        /* on GPUs the activations and the workspace in peer-mapped memory: the gathers go
         * straight into the peers' buffers (unless NCCL gathers on the copy engines itself) */
        const bool direct = dev && !mg_comm_copy_engine(copies.tr->layout.tp);
        DEXPECT(!direct || (copies.tr->model.tp.direct[0] && copies.tr->model.tp.direct[1]),
                "%s: the activations' and the workspace's arenas are not peer-mapped", label);
        tc_expect_steps(t, label, &copies, &coll, steps(t), dev ? BF16_TOL : TOL,
                        dev ? NORM_TOL : TOL);
        if (dev) tc_expect_steady_step(t, label, copies.tr);
    }
    if (env) setenv("MG_TP_EXCHANGE", env, 1);
    mg_env_forget();
    tc_release(&coll);
    tc_release(&copies);
    tc_free_groups(&gr);
}

void test_train_tp(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
    static const char *const no_dropout[] = {"--attention-dropout", "0", "--hidden-dropout", "0",
                                             NULL};
    if (dist_on_device(t)) {
        if (t->size != 2 && t->size != 4) return;
        const variant gpu[] = {
            {"gpu gpt2 tp2", false, false, false, 2, 0, false, 0},
            {"gpu gpt2 tp2+sp", false, true, false, 2, 0, false, 0},
            {"gpu llama tp2+sp", true, true, false, 2, 0, false, 0},
            {"gpu llama tp2+sp, rotary 0.5, layernorm 1p", true, true, false, 2, 0.5, true, 0},
            {"gpu gpt2 tp2+sp, --tp-comm-overlap", false, true, false, 2, 0, false, 1},
            {"gpu llama tp2+sp, --tp-comm-overlap", true, true, false, 2, 0, false, 1},
            {"gpu gpt2 tp2, --tp-comm-overlap", false, false, false, 2, 0, false, 1},
            {"gpu llama tp2+sp, --no-tp-comm-bulk-wgrad", true, true, false, 2, 0, false, -1},
        };
        for (size_t i = 0; i < sizeof gpu / sizeof *gpu; i++) check_variant(t, &gpu[i], NULL, 0);
        /* fp8 (hybrid, delayed scaling: the casts and fp8 GEMMs of TP's splits, the kept input
         * transposes) and full recomputation (the recomputed layers' collectives), each against
         * one GPU with the same flags; an fp8 cast turns a bf16 rounding difference into a
         * whole fp8 step now and then, which moves the grad norm most (FP8_NORM_TOL) */
        static const char *const fp8[] = {
            "--fp8-format", "hybrid", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo",
            "max",          NULL};
        const variant gpt_sp = {"gpu gpt2 tp2+sp, fp8", false, true, false, 2, 0, false, 0};
        const variant llama_sp = {"gpu llama tp2+sp, fp8", true, true, false, 2, 0, false, 0};
        const variant gpt_rc = {
            "gpu gpt2 tp2+sp, full recomputation", false, true, false, 2, 0, false, 0};
        check_variant(t, &gpt_sp, fp8, FP8_NORM_TOL);
        check_variant(t, &llama_sp, fp8, FP8_NORM_TOL);
        check_variant(t, &gpt_rc, tc_recompute_full, 0);
        check_reduce_paths(t, &gpu[1], NULL, ""); /* gpt2 tp2+sp */
        check_reduce_paths(t, &gpu[1], no_dropout, ", no dropout");
        check_reduce_paths(t, &gpu[5], NULL, ""); /* llama tp2+sp, --tp-comm-overlap */
        return;
    }
    if (t->size != 2 && t->size != 4 && t->size != 8) return;
    const int T = t->size == 8 ? 4 : t->size;
    const variant all[] = {
        {"gpt2 tp", false, false, false, T, 0, false, 0},
        {"gpt2 tp+sp", false, true, false, T, 0, false, 0},
        {"llama tp", true, false, false, T, 0, false, 0},
        {"llama tp+sp", true, true, false, T, 0, false, 0},
        {"gpt2 tp2 x dp, distributed optimizer, overlap-grad-reduce", false, false, true, 2, 0,
         false, 0},
        {"llama tp2+sp x dp, distributed optimizer, overlap-grad-reduce and param-gather", true,
         true, true, 2, 0, false, 0},
        /* partial RoPE (8 of 16 channels per head) and zero-centred norm weights (replicated,
         * partial gradients under SP) */
        {"llama tp+sp, --rotary-percent 0.5 --apply-layernorm-1p", true, true, false, T, 0.5, true,
         0},
        {"gpt2 tp, --apply-layernorm-1p", false, false, false, T, 0, true, 0},
        /* SP's all-gathers beside the GEMMs of this rank's rows (the rows split per rank) */
        {"gpt2 tp+sp, --tp-comm-overlap", false, true, false, T, 0, false, 1},
        {"llama tp+sp, --tp-comm-overlap", true, true, false, T, 0, false, 1},
        {"gpt2 tp, --tp-comm-overlap", false, false, false, T, 0, false, 1},
        {"gpt2 tp, --no-tp-comm-bulk-wgrad", false, false, false, T, 0, false, -1},
        {"llama tp+sp, --no-tp-comm-bulk-wgrad", true, true, false, T, 0, false, -1},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        /* T x D layouts only where there are data-parallel replicas; 8 ranks: the T = 4 ones */
        if (all[i].distopt && t->size != 4) continue;
        if (t->size == 8 && !all[i].sp) continue;
        check_variant(t, &all[i], NULL, 0);
    }
    /* the copies through the ranks' shared memory against MPI's collectives */
    check_reduce_paths(t, &all[1], NULL, ""); /* gpt2 tp+sp */
    check_reduce_paths(t, &all[1], no_dropout, ", no dropout");
    check_reduce_paths(t, &all[9], NULL, ""); /* llama tp+sp, --tp-comm-overlap */
}
