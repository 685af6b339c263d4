/* End-to-end training on the CUDA backend (`megatron train --device cuda`'s trainer), against the
 * CPU backend and against itself.
 *
 * Model: the CLI tests' tiny GPT-2 (2 layers, hidden 64, 4 heads of 16, seq 32, vocab 256 of mock
 * data, micro-batch 2, global batch 4: two microbatches of gradient accumulation) and its Llama
 * twin (RMSNorm, SwiGLU, RoPE, 2 query groups, no biases, untied output), 5 steps at lr 3e-3
 * (1 warm-up step, then cosine), clipping at 1.0.
 *
 * Tolerances (CPU fp32 vs CUDA bf16 with fp32 masters, same fp32 initial values and batches):
 *  - step 1 sees the same weights up to their bf16 rounding (2^-9 relative each) and the same
 *    batch. Every activation is rounded to bf16 once per op (~2^-9 relative; the op tests bound
 *    each op at 8e-3 .. 2e-2 of max|ref|); the loss is a mean over 128 tokens of logsumexp -
 *    logit with logits O(0.1 .. 1) at this init, so its error is a few 1e-3 absolute against a
 *    loss of ln(256) = 5.5: relative 1e-2 leaves a wide margin and still catches a wrong term
 *    (a missing bias or a wrong norm moves the loss by O(0.1 .. 1)). The grad norm aggregates
 *    every gradient, each with the bf16 chain error of its backward path (the op tests: up to
 *    2e-2): relative 5e-2.
 *  - steps 2..5: Adam's first updates are close to lr * sign(g), so the elements whose gradient
 *    is within bf16 noise of zero move by +-lr on one side and the other; the trajectories part a
 *    little every step. Losses stay within relative 2e-2 of each other (an unrelated model would
 *    be off by the whole drop, ~0.1 .. 1, over these steps); grad norms within 0.25.
 *  - trend: the CPU loss falls over the 5 steps, and the CUDA run takes at least half of that
 *    drop (a broken update, e.g. masters not written back, shows no drop at all).
 * Dropout is Megatron's default (0.1 attention and hidden). The comparisons with the CPU use
 * --layout-invariant-dropout, whose masks are the CPU's bit for bit; the other tests run the
 * default stream masks, cuDNN's attention dropout included. The CUDA runs themselves are
 * deterministic (fixed reduction orders, no atomics in the ops, the masks a function of the
 * stream's seed and offset), so two runs give bitwise the same losses, grad norms and final
 * master weights.
 *
 * Host syncs (trainer.h): mg_trainer_step reads the loss and grad norm with one copy, so one host
 * sync per step; mg_trainer_step_async none. After step 1 no step allocates device memory
 * (backend counters, and cudaMemGetInfo's free memory unchanged, which also covers libraries). */
#include "cuda_test_util.h"

#include "core/env.h"

#include "config/flags.h"
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>

enum { STEPS = 5 };

typedef struct {
    double loss[STEPS], norm[STEPS];
    float *weights; /* (numel) fp32 masters after the last step, malloc'd */
    size_t numel;
} train_result;

/* MG_TEST_CUDA_AS_CPU (cuda_test_util.h): the "cuda" runs use a second CPU trainer, which checks
 * this file's logic on a machine without a GPU (the comparisons then pass with errors of 0, the
 * counter test fails as every ct_cuda test does). */
static const char *gpu_device(void) {
    return ct_as_cpu() ? "cpu" : "cuda";
}

/* The tiny models: GPT-2 shaped, Llama shaped, the Llama shape with Mixture-of-Experts layers
 * (Mixtral's routing: softmax top-2 of 4 SwiGLU experts, aux loss and z-loss), and the Llama
 * shape with partial RoPE and zero-centred norm weights (--rotary-percent 0.5
 * --apply-layernorm-1p). */
typedef enum { TINY_GPT2, TINY_LLAMA, TINY_MOE, TINY_LLAMA_1P } tiny_kind;

/* No --num-threads: the CPU backend sets OpenMP's thread count for the whole process, so every
 * CPU reference of a later test would run on that many threads (OpenMP's default: every core). */
static mg_status tiny_config(mg_config *c, const char *device, tiny_kind kind, bool positional,
                             const char *const *more) {
    const char *extra[64] = {
        "--num-layers", "2", "--global-batch-size", "4", "--lr", "3e-3", "--min-lr", "3e-4",
        "--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--train-iters", "5", "--seed", "7",
        /* TINY_MOE from here */
        "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "48",
        "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3", NULL, NULL, NULL, NULL};
    int n = kind == TINY_MOE ? 26 : 16;
    if (kind == TINY_LLAMA_1P) {
        extra[16] = "--rotary-percent", extra[17] = "0.5", extra[18] = "--apply-layernorm-1p";
        n = 19;
    }
    /* the fp16 run (MG_TEST_CUDA_DTYPE=fp16): the trainer in fp16 with its dynamic loss scaler, at
     * a scale these small gradients never overflow (the cpu side runs the same scaler in fp32:
     * a power-of-two scale changes none of its values) */
    if (CT_F16) extra[n++] = "--fp16", extra[n++] = "--initial-loss-scale", extra[n++] = "1024";
    /* Megatron's default dropout (0.1) is on: positional masks are the CPU's bit for bit (on CUDA
     * they run our attention kernels), stream masks draw cuDNN's own in the attention */
    if (positional) extra[n++] = "--layout-invariant-dropout";
    for (int i = 0; more && more[i] && n < 63; i++) extra[n++] = more[i];
    extra[n] = NULL;
    return ct_tiny_config(c, device, kind != TINY_GPT2, extra);
}

/* Trains STEPS steps with mg_trainer_step; 0 on success (failures are recorded in t). */
static int train(mg_test_ctx *t, const char *device, tiny_kind kind, bool positional,
                 const char *const *more, train_result *r) {
    memset(r, 0, sizeof *r);
    mg_config c;
    MG_EXPECT_OK(tiny_config(&c, device, kind, positional, more));
    if (t->failures) return -1;
    mg_trainer *tr = calloc(1, sizeof *tr);
    int rc = -1;
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    if (t->failures) goto done;
    MG_EXPECT(!strcmp(tr->cfg.device, device), "asked for %s, got %s", device, tr->cfg.device);
    for (int s = 0; s < STEPS; s++) MG_EXPECT_OK(mg_trainer_step(tr, &r->loss[s], &r->norm[s]));
    r->numel = tr->model.params.numel;
    r->weights = malloc(r->numel * sizeof(float));
    if (r->weights) MG_EXPECT_OK(mg_trainer_get_weights(tr, r->weights));
    if (!t->failures) rc = 0;
done:
    mg_trainer_free(tr);
    free(tr);
    return rc;
}

static double rel(double got, double ref) {
    return fabs(got - ref) / fabs(ref);
}

/* more: flags after the shape's (NULL-terminated, or NULL); label: the runs' name, or NULL for
 * the shape's. */
static void compare_with_cpu_as(mg_test_ctx *t, tiny_kind kind, const char *const *more,
                                const char *label) {
    const char *name = label                   ? label
                       : kind == TINY_MOE      ? "moe"
                       : kind == TINY_LLAMA    ? "llama"
                       : kind == TINY_LLAMA_1P ? "llama rotary 0.5 + layernorm 1p"
                                               : "gpt2";
    train_result cpu, gpu;
    if (train(t, "cpu", kind, true, more, &cpu) || train(t, gpu_device(), kind, true, more, &gpu))
        goto done;
    for (int s = 0; s < STEPS; s++) {
        double el = rel(gpu.loss[s], cpu.loss[s]), en = rel(gpu.norm[s], cpu.norm[s]);
        double tl = s == 0 ? 1e-2 : 2e-2, tn = s == 0 ? 5e-2 : 0.25;
        if (ct_verbose())
            printf("  %s step %d: loss cpu %.6f cuda %.6f (rel %.2e), grad norm cpu %.5f cuda "
                   "%.5f (rel %.2e)\n",
                   name, s + 1, cpu.loss[s], gpu.loss[s], el, cpu.norm[s], gpu.norm[s], en);
        MG_EXPECT(isfinite(gpu.loss[s]) && el <= tl,
                  "%s step %d: loss %.6f on cuda, %.6f on cpu (relative %.2e > %.0e)", name, s + 1,
                  gpu.loss[s], cpu.loss[s], el, tl);
        MG_EXPECT(isfinite(gpu.norm[s]) && en <= tn,
                  "%s step %d: grad norm %.5f on cuda, %.5f on cpu (relative %.2e > %.2g)", name,
                  s + 1, gpu.norm[s], cpu.norm[s], en, tn);
    }
    double drop_cpu = cpu.loss[0] - cpu.loss[STEPS - 1],
           drop_gpu = gpu.loss[0] - gpu.loss[STEPS - 1];
    MG_EXPECT(drop_cpu > 0.02,
              "%s: the cpu loss does not fall (%.4f -> %.4f); the test needs a "
              "larger lr",
              name, cpu.loss[0], cpu.loss[STEPS - 1]);
    MG_EXPECT(drop_gpu >= 0.5 * drop_cpu,
              "%s: the cuda loss falls by %.4f over %d steps, the cpu loss by %.4f", name, drop_gpu,
              STEPS, drop_cpu);
done:
    free(cpu.weights);
    free(gpu.weights);
}

static void compare_with_cpu(mg_test_ctx *t, tiny_kind kind) {
    compare_with_cpu_as(t, kind, NULL, NULL);
}

MG_TEST(cuda_train_gpt2_matches_cpu) {
    compare_with_cpu(t, TINY_GPT2);
}

MG_TEST(cuda_train_llama_matches_cpu) {
    compare_with_cpu(t, TINY_LLAMA);
}

MG_TEST(cuda_train_moe_matches_cpu) {
    compare_with_cpu(t, TINY_MOE);
}

MG_TEST(cuda_train_llama_rotary_percent_layernorm_1p_matches_cpu) {
    compare_with_cpu(t, TINY_LLAMA_1P);
}

/* fp8 linears (cuBLASLt's fp8 products on the GPU, the CPU's exact emulation of the casts on its
 * fp32 values): the CPU's inputs to each cast are the GPU's up to bf16 rounding, so now and then
 * an element lands in the next fp8 step, which the loss averages away; the tolerances above hold.
 * Hidden 128 and 128 tokens per microbatch make every blockwise product whole 128-blocks (and
 * the GPT-2 shape's FFN 512, four). fp8 needs bf16. */
MG_TEST(cuda_train_fp8_matches_cpu) {
    if (CT_F16) return;
#define FP8_SHAPE "--hidden-size", "128", "--seq-length", "64", "--max-position-embeddings", "64"
    static const char *const delayed[] = {FP8_SHAPE, "--fp8-format",
                                          "hybrid",  "--fp8-amax-history-len",
                                          "4",       "--fp8-amax-compute-algo",
                                          "max",     NULL};
    static const char *const tensorwise[] = {FP8_SHAPE,      "--fp8-format", "e4m3",
                                             "--fp8-recipe", "tensorwise",   NULL};
    static const char *const blockwise[] = {FP8_SHAPE,      "--fp8-format", "hybrid",
                                            "--fp8-recipe", "blockwise",    NULL};
#undef FP8_SHAPE
    compare_with_cpu_as(t, TINY_GPT2, delayed, "gpt2 fp8 delayed");
    compare_with_cpu_as(t, TINY_LLAMA, tensorwise, "llama fp8 tensorwise");
    compare_with_cpu_as(t, TINY_GPT2, blockwise, "gpt2 fp8 blockwise");
    compare_with_cpu_as(t, TINY_LLAMA, blockwise, "llama fp8 blockwise");
}

MG_TEST(cuda_train_is_deterministic) {
    train_result a, b;
    /* stream masks: cuDNN's attention dropout included */
    if (train(t, gpu_device(), TINY_LLAMA, false, NULL, &a) ||
        train(t, gpu_device(), TINY_LLAMA, false, NULL, &b))
        goto done;
    for (int s = 0; s < STEPS; s++)
        MG_EXPECT(!memcmp(&a.loss[s], &b.loss[s], sizeof a.loss[s]) &&
                      !memcmp(&a.norm[s], &b.norm[s], sizeof a.norm[s]),
                  "step %d: loss %.9g vs %.9g, grad norm %.9g vs %.9g", s + 1, a.loss[s], b.loss[s],
                  a.norm[s], b.norm[s]);
    MG_EXPECT(a.weights && b.weights && a.numel == b.numel &&
                  !memcmp(a.weights, b.weights, a.numel * sizeof(float)),
              "the master weights after %d steps differ between two runs", STEPS);
done:
    free(a.weights);
    free(b.weights);
}

static void warmed_free(mg_trainer *tr) {
    mg_trainer_free(tr);
    free(tr);
}

/* A trainer of config c on the CUDA backend past its first two steps (which may load kernels and
 * build plans), or NULL with the failure recorded (also when the backend under test is not
 * CUDA: MG_TEST_CUDA_AS_CPU). Free with warmed_free. */
static mg_trainer *warmed_trainer(mg_test_ctx *t, const mg_config *c) {
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT(tr != NULL, "out of memory");
    if (!tr) return NULL;
    MG_EXPECT_OK(mg_trainer_init(tr, c, NULL));
    if (!t->failures && tr->be->device != MG_DEVICE_CUDA)
        MG_EXPECT(0, "the trainer runs on '%s', not cuda (MG_TEST_CUDA_AS_CPU)", tr->be->name);
    double loss, norm;
    for (int s = 0; s < 2 && !t->failures; s++) MG_EXPECT_OK(mg_trainer_step(tr, &loss, &norm));
    if (!t->failures) return tr;
    warmed_free(tr);
    return NULL;
}

/* The steady state of a dense model, and of an MoE model: its per-expert token counts, routing
 * and grouped products stay on the device (backend.h, "mixture of experts"). */
static void steady_state(mg_test_ctx *t, tiny_kind kind) {
    mg_config c;
    MG_EXPECT_OK(tiny_config(&c, gpu_device(), kind, false, NULL));
    if (t->failures) return;
    mg_trainer *tr = warmed_trainer(t, &c);
    if (!tr) return;
    mg_backend *g = tr->be;
    mg_cuda_ctx *x = mg_cuda_ctx_of(g);
    double loss, norm;
    size_t free0 = 0, free1 = 0, total = 0;
    MG_EXPECT_OK(g->memory_info(g, &free0, &total));
    uint64_t a0 = x->n_device_allocs, f0 = x->n_device_frees;
    /* steps 3 and 4: one host sync each (the stats read), with a loss scaler too (the fp16 run:
     * the overflow check and the scaler run on the device, train/trainer_scaler.h) */
    for (int s = 3; s <= 4; s++) {
        uint64_t s0 = x->n_host_syncs;
        MG_EXPECT_OK(mg_trainer_step(tr, &loss, &norm));
        MG_EXPECT(x->n_host_syncs - s0 == 1, "step %d (mg_trainer_step) synchronised %llu times", s,
                  (unsigned long long)(x->n_host_syncs - s0));
        MG_EXPECT(isfinite(loss) && isfinite(norm), "step %d: loss %g, grad norm %g", s, loss,
                  norm);
    }
    /* step 5: none until the stats are read */
    uint64_t s0 = x->n_host_syncs;
    MG_EXPECT_OK(mg_trainer_step_async(tr));
    MG_EXPECT(x->n_host_syncs == s0, "step 5 (mg_trainer_step_async) synchronised %llu times",
              (unsigned long long)(x->n_host_syncs - s0));
    mg_step_stats st;
    MG_EXPECT_OK(mg_trainer_read_stats(tr, &st, true));
    MG_EXPECT(x->n_host_syncs == s0 + 1, "reading the stats synchronised %llu times",
              (unsigned long long)(x->n_host_syncs - s0));
    MG_EXPECT(isfinite(st.loss) && st.loss > 0 && isfinite(st.grad_norm) && st.grad_norm > 0 &&
                  st.loss_sum > 4 * st.loss,
              "stats: loss %g, grad norm %g, loss sum over 5 steps %g", st.loss, st.grad_norm,
              st.loss_sum);
    MG_EXPECT(x->n_device_allocs == a0 && x->n_device_frees == f0,
              "steps 3..5 allocated %llu and freed %llu device buffers",
              (unsigned long long)(x->n_device_allocs - a0),
              (unsigned long long)(x->n_device_frees - f0));
    MG_EXPECT_OK(g->memory_info(g, &free1, &total));
    MG_EXPECT(free1 == free0, "free device memory went from %zu to %zu bytes during steps 3..5",
              free0, free1);
    warmed_free(tr);
}

MG_TEST(cuda_train_steady_state_allocates_nothing_and_syncs_once) {
    steady_state(t, TINY_GPT2);
}

MG_TEST(cuda_train_moe_steady_state_allocates_nothing_and_syncs_once) {
    steady_state(t, TINY_MOE);
}

/* fp16 with the dynamic loss scaler: steady steps, overflowing steps (MG_FAULT_OVERFLOW, whose
 * Inf reaches the gradients by a host-to-device copy, not a sync) and the clean step after them
 * enqueue everything without a host sync or a device allocation: the skip decision, Adam's step,
 * the rates and the loss scale are the device's (train/trainer_scaler.h). The lagged read then
 * sees Megatron's bookkeeping: two skipped steps, the scale halved once (hysteresis 2), Adam and
 * the schedule moved by the clean steps only. */
MG_TEST(cuda_train_fp16_steps_and_skips_without_host_sync) {
    const char *extra[] = {"--num-layers",
                           "2",
                           "--global-batch-size",
                           "4",
                           "--lr",
                           "3e-3",
                           "--lr-decay-style",
                           "cosine",
                           "--lr-warmup-iters",
                           "1",
                           "--train-iters",
                           "8",
                           "--seed",
                           "7",
                           "--fp16",
                           "--initial-loss-scale",
                           "1024",
                           "--loss-scale-window",
                           "100",
                           NULL};
    mg_config c;
    MG_EXPECT_OK(ct_tiny_config(&c, gpu_device(), false, extra));
    if (t->failures) return;
    mg_trainer *tr = warmed_trainer(t, &c);
    if (!tr) return;
    mg_cuda_ctx *x = mg_cuda_ctx_of(tr->be);
    mg_step_stats st;
    MG_EXPECT_OK(mg_trainer_read_stats(tr, &st, true)); /* zero the sums and the counts */
    setenv("MG_FAULT_OVERFLOW", "4:5", 1);
    mg_env_forget(); /* the trainer read it (unset) in steps 1 and 2 */
    uint64_t s0 = x->n_host_syncs, a0 = x->n_device_allocs;
    for (int s = 3; s <= 6; s++) { /* clean, two overflows, clean */
        uint64_t s1 = x->n_host_syncs;
        MG_EXPECT_OK(mg_trainer_step_async(tr));
        MG_EXPECT(
            x->n_host_syncs == s1, "step %d (mg_trainer_step_async%s) synchronised %llu times", s,
            s == 4 || s == 5 ? ", an overflow" : "", (unsigned long long)(x->n_host_syncs - s1));
    }
    unsetenv("MG_FAULT_OVERFLOW");
    mg_env_forget();
    MG_EXPECT(x->n_device_allocs == a0, "steps 3..6 allocated %llu device buffers",
              (unsigned long long)(x->n_device_allocs - a0));
    MG_EXPECT_OK(mg_trainer_read_stats(tr, &st, true));
    MG_EXPECT(x->n_host_syncs == s0 + 1, "steps 3..6 and the read synchronised %llu times",
              (unsigned long long)(x->n_host_syncs - s0));
    MG_EXPECT(st.skipped_iters == 2 && st.nan_iters == 0 && !st.last_skipped &&
                  st.loss_scale == 512.0 && isfinite(st.loss_sum) && isfinite(st.grad_norm_sum),
              "skipped %lld nan %lld last skipped %d scale %g, sums %g %g",
              (long long)st.skipped_iters, (long long)st.nan_iters, (int)st.last_skipped,
              st.loss_scale, st.loss_sum, st.grad_norm_sum);
    MG_EXPECT(tr->opt.step == 4 && tr->lr.num_steps == 16 && tr->state.iteration == 6 &&
                  tr->state.consumed_train_samples == 24,
              "Adam step %lld (want 4), schedule at %lld samples (want 16), iteration %lld",
              (long long)tr->opt.step, (long long)tr->lr.num_steps, (long long)tr->state.iteration);
    warmed_free(tr);
}
