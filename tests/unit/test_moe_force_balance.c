/* --moe-router-force-load-balancing (Megatron's benchmark routing): the router's logits are
 * replaced by standard normal draws from the default dropout stream (backend normal_f32,
 * core/normal.h). The draws: mean 0 and variance 1, a function of the stream's seed and offset
 * and the use number only, new at another offset. The routing: independent of the weights (two
 * initialisations route the same tokens to the same experts), new every step, and near-uniform
 * over the experts. */
#include "test.h"

#include "config_test_util.h"

#include "backend/backend.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

MG_TEST(normal_f32_draws_standard_normals_keyed_by_the_stream) {
    mg_backend *be = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 2));
    if (!be) return;
    enum { n = 200003 };
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    uint64_t state[2] = {1234, 40}, moved[2] = {1234, 41};
    if (a && b && c) {
        MG_EXPECT_OK(be->normal_f32(be, a, n, state, 1));
        MG_EXPECT_OK(be->normal_f32(be, b, n, moved, 0)); /* the same offset 41 */
        MG_EXPECT_OK(be->normal_f32(be, c, n, state, 2));
        double s = 0, s2 = 0, s4 = 0;
        size_t same = 0, beyond4 = 0;
        for (size_t i = 0; i < n; i++) {
            s += a[i], s2 += (double)a[i] * a[i], s4 += (double)a[i] * a[i] * a[i] * a[i];
            same += a[i] == c[i];
            beyond4 += fabsf(a[i]) > 4.0f;
        }
        const double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var);
        /* standard errors at n = 2e5: mean 0.0022, variance 0.0032, kurtosis 0.011 */
        MG_EXPECT(fabs(mean) < 0.01 && fabs(var - 1) < 0.015 && fabs(kurt - 3) < 0.06,
                  "normal draws: mean %.4f, variance %.4f, kurtosis %.3f (want 0, 1, 3)", mean, var,
                  kurt);
        MG_EXPECT(beyond4 < 30, "%zu of %d draws beyond 4 sigma (expected ~13)", beyond4, n);
        MG_EXPECT(!memcmp(a, b, n * sizeof *a), "the draw depends on offset + use, not the split");
        MG_EXPECT(same < 5, "another use draws the same values %zu times", same);
    }
    free(a), free(b), free(c);
    be->destroy(be);
}

#define BASE                                                                                       \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 4 --global-batch-size 4 --lr 3e-3 --train-iters 4 "            \
    "--eval-iters 0 --num-threads 2 --device cpu --num-experts 4 --moe-router-topk 2 "             \
    "--moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-layer-freq [0,1] "

/* The tokens per expert of the MoE layer after each of two steps. */
static void loads(mg_test_ctx *t, const char *flags, float out[2][4]) {
    mg_trainer *tr = mg_test_trainer(t, flags, NULL);
    if (!tr) return;
    for (int s = 0; s < 2 && !t->failures; s++) {
        double loss, norm;
        MG_EXPECT_OK(mg_trainer_step(tr, &loss, &norm));
        MG_EXPECT_OK(
            tr->be->copy_d2h(tr->be, out[s], mg_gpt_moe_load(&tr->model, 0), 4 * sizeof(float)));
    }
    mg_test_trainer_free(tr);
}

MG_TEST(moe_force_load_balancing_routes_by_random_logits) {
    float a[2][4] = {{0}}, b[2][4] = {{0}}, plain_a[2][4] = {{0}}, plain_b[2][4] = {{0}};
    loads(t, BASE "--moe-router-force-load-balancing --init-method-std 0.02", a);
    loads(t, BASE "--moe-router-force-load-balancing --init-method-std 0.3", b);
    loads(t, BASE "--init-method-std 0.02", plain_a);
    loads(t, BASE "--init-method-std 0.3", plain_b);
    if (t->failures) return;
    MG_EXPECT(!memcmp(a, b, sizeof a),
              "forced balancing: the loads depend on the weights (%g %g %g %g vs %g %g %g %g)",
              a[0][0], a[0][1], a[0][2], a[0][3], b[0][0], b[0][1], b[0][2], b[0][3]);
    MG_EXPECT(memcmp(plain_a, plain_b, sizeof plain_a) != 0,
              "without forced balancing two initialisations route alike: the test cannot tell");
    MG_EXPECT(memcmp(a[0], a[1], sizeof a[0]) != 0, "the second step drew the first's logits");
    for (int s = 0; s < 2; s++) { /* 512 routed pairs: 128 per expert, sd ~9.8 */
        float lo = a[s][0], hi = a[s][0], sum = 0;
        for (int e = 0; e < 4; e++) {
            lo = fminf(lo, a[s][e]), hi = fmaxf(hi, a[s][e]);
            sum += a[s][e];
        }
        MG_EXPECT(sum == 512 && lo > 0.75f * 128 && hi < 1.25f * 128,
                  "step %d: loads %g %g %g %g (want ~128 each, 512 in all)", s + 1, a[s][0],
                  a[s][1], a[s][2], a[s][3]);
    }
}
