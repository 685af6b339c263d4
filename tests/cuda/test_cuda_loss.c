/* The loss and logging options on the CUDA backend against the CPU backend: the tiny Llama of
 * test_cuda_train.c (untied output, mock data) with --eod-mask-loss --calculate-per-token-loss,
 * 3 steps. The per-token weights (a masked token's 0, the others' 1 / T) travel as the
 * cross-entropy's dloss array and the loss sum's weights on both backends, so the CUDA run's
 * losses and grad norms must stay within test_cuda_train.c's bf16 tolerances of the CPU run's
 * (step 1: loss 1e-2, grad norm 5e-2 relative; later steps 2e-2 and 0.25), and the count of
 * masked positions, a function of the data, is the same. Afterwards:
 *  - mg_trainer_params_norm: the fp32 masters' norm on both (the CUDA run's masters start as the
 *    CPU's weights and move by Adam steps of ~lr per element over 3 steps; their norm over ~10^5
 *    elements agrees within 1e-3 relative, where a bf16-parameter norm would be off by ~2^-9 and a
 *    missing parameter by far more);
 *  - mg_trainer_num_zeros: the input embedding's rows of tokens no sample holds have exactly zero
 *    gradients on both backends (at least those rows' count), and the counts agree within 1% (an
 *    element exactly zero on one backend and bf16 noise on the other is possible, rare). */
#include "cuda_test_util.h"

#include "config/flags.h"
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>

enum { STEPS = 3 };

typedef struct {
    double loss[STEPS], norm[STEPS], params_norm;
    int64_t zeros, masked_tokens;
} loss_run;

static int run(mg_test_ctx *t, const char *device, loss_run *r) {
    const char *extra[] = {"--num-layers",
                           "2",
                           "--global-batch-size",
                           "4",
                           "--lr",
                           "3e-3",
                           "--train-iters",
                           "3",
                           "--seed",
                           "7",
                           "--eod-mask-loss",
                           "--calculate-per-token-loss",
                           NULL};
    mg_config c;
    MG_EXPECT_OK(ct_tiny_config(&c, device, true, extra));
    if (t->failures) return -1;
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    for (int s = 0; !t->failures && s < STEPS; s++) {
        MG_EXPECT_OK(mg_trainer_step(tr, &r->loss[s], &r->norm[s]));
        r->masked_tokens += 4 * 32 - tr->pass_tokens;
    }
    if (!t->failures) MG_EXPECT_OK(mg_trainer_params_norm(tr, &r->params_norm));
    if (!t->failures) MG_EXPECT_OK(mg_trainer_num_zeros(tr, &r->zeros));
    int rc = t->failures ? -1 : 0;
    mg_trainer_free(tr);
    free(tr);
    return rc;
}

static double rel(double got, double ref) {
    return fabs(got - ref) / fabs(ref);
}

MG_TEST(cuda_train_eod_mask_per_token_loss_matches_cpu) {
    loss_run cpu = {0}, gpu = {0};
    if (run(t, "cpu", &cpu) || run(t, ct_as_cpu() ? "cpu" : "cuda", &gpu)) return;
    MG_EXPECT(cpu.masked_tokens > 0 && gpu.masked_tokens == cpu.masked_tokens,
              "masked positions: %lld on the cpu, %lld on cuda (the data's end-of-document inputs)",
              (long long)cpu.masked_tokens, (long long)gpu.masked_tokens);
    for (int s = 0; s < STEPS; s++) {
        double tl = s == 0 ? 1e-2 : 2e-2, tn = s == 0 ? 5e-2 : 0.25;
        MG_EXPECT(rel(gpu.loss[s], cpu.loss[s]) <= tl, "step %d: loss %.6f on cuda, %.6f on cpu",
                  s + 1, gpu.loss[s], cpu.loss[s]);
        MG_EXPECT(rel(gpu.norm[s], cpu.norm[s]) <= tn,
                  "step %d: grad norm %.5f on cuda, %.5f on cpu", s + 1, gpu.norm[s], cpu.norm[s]);
    }
    MG_EXPECT(rel(gpu.params_norm, cpu.params_norm) <= 1e-3,
              "params norm %.6f on cuda, %.6f on cpu", gpu.params_norm, cpu.params_norm);
    /* vocabulary 256: mock documents of at most 64 tokens never hold ids 64 .. 254 */
    const int64_t unused_rows = (255 - 64) * 64;
    MG_EXPECT(cpu.zeros >= unused_rows && gpu.zeros >= unused_rows &&
                  llabs(gpu.zeros - cpu.zeros) <= cpu.zeros / 100,
              "num zeros %lld on cuda, %lld on cpu (at least %lld expected)", (long long)gpu.zeros,
              (long long)cpu.zeros, (long long)unused_rows);
}
