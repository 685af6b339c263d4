/* The lr schedule against values computed by hand from Megatron's OptimizerParamScheduler.get_lr
 * (megatron/core/optimizer_param_scheduler.py) and get_optimizer_param_scheduler
 * (megatron/training/training.py: steps are iterations * global batch size). */
#include "test.h"

#include "core/status.h"
#include "train/lr_schedule.h"

#include <string.h>

/* max 1.0, min 0.1, warm-up 2 iterations, 10 train iterations, global batch 4:
 * warm-up ends at 8 samples, decay at 40 samples, so decay runs over 32 samples. */
static mg_config base_config(mg_lr_style style) {
    mg_config c;
    memset(&c, 0, sizeof c);
    c.train_iters = 10;
    c.global_batch_size = 4;
    c.micro_batch_size = 4;
    c.lr = 1.0;
    c.min_lr = 0.1;
    c.lr_decay_style = style;
    c.lr_warmup_iters = 2;
    c.lr_warmup_fraction = -1;
    c.lr_warmup_init = 0.0;
    c.lr_decay_iters = -1;
    return c;
}

static double lr_at(mg_lr_schedule s, int64_t n) {
    s.num_steps = 0;
    mg_lr_schedule_step(&s, n);
    return mg_lr_schedule_lr(&s);
}

/* The hand values are the exact decimal results; 1e-15 relative covers one or two roundings. */
#define EXPECT_NEAR(got, want)                                                                     \
    MG_EXPECT(fabs((got) - (want)) <= 1e-15 * fmax(1.0, fabs(want)), "%s = %.17g, want %.17g",     \
              #got, (double)(got), (double)(want))

MG_TEST(lr_init_counts_samples) {
    mg_config c = base_config(MG_LR_LINEAR);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    MG_EXPECT(s.warmup_steps == 8.0, "warmup_steps %g, want 2 iters * 4 = 8", s.warmup_steps);
    MG_EXPECT(s.decay_steps == 40, "decay_steps %lld, want 10 * 4 = 40", (long long)s.decay_steps);
    MG_EXPECT(s.num_steps == 0, "num_steps %lld", (long long)s.num_steps);
    MG_EXPECT(s.max_lr == 1.0 && s.min_lr == 0.1 && s.init_lr == 0.0, "lr bounds not copied");

    c.lr_decay_iters = 5; /* decay over 5 iterations, not train_iters */
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    MG_EXPECT(s.decay_steps == 20, "decay_steps %lld, want 5 * 4 = 20", (long long)s.decay_steps);

    mg_lr_schedule_step(&s, 4);
    mg_lr_schedule_step(&s, 4);
    MG_EXPECT(s.num_steps == 8, "two steps of 4 give num_steps %lld", (long long)s.num_steps);
}

MG_TEST(lr_warmup_ramp_and_boundary) {
    mg_config c = base_config(MG_LR_LINEAR);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 0), 0.0);      /* 0 + (1 - 0) * 0/8 */
    EXPECT_NEAR(lr_at(s, 4), 0.5);      /* 4/8 */
    EXPECT_NEAR(lr_at(s, 6), 0.75);     /* 6/8 */
    EXPECT_NEAR(lr_at(s, 8), 1.0);      /* n == warmup is still warm-up: 8/8 */
    EXPECT_NEAR(lr_at(s, 9), 0.971875); /* first decay step: r = 1/32, 0.1 + (31/32) * 0.9 */

    c.lr_warmup_init = 0.2; /* ramp from init, not from zero */
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 0), 0.2);
    EXPECT_NEAR(lr_at(s, 4), 0.6); /* 0.2 + 0.8 * 4/8 */

    c.lr_warmup_init = 0.0;
    c.lr_warmup_iters = 0; /* no warm-up: decay starts at max_lr at step 0 */
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 0), 1.0);
    EXPECT_NEAR(lr_at(s, 20), 0.55); /* r = 20/40: 0.1 + 0.5 * 0.9 */
}

MG_TEST(lr_linear_decay) {
    mg_config c = base_config(MG_LR_LINEAR);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 12), 0.8875); /* r = 4/32 = 0.125: 0.1 + 0.875 * 0.9 */
    EXPECT_NEAR(lr_at(s, 24), 0.55);   /* r = 0.5 */
    EXPECT_NEAR(lr_at(s, 40), 0.1);    /* r = 1 at decay_steps exactly: min_lr */
    EXPECT_NEAR(lr_at(s, 44), 0.1);    /* past decay: min_lr */
    EXPECT_NEAR(lr_at(s, 1000), 0.1);
}

MG_TEST(lr_cosine_decay) {
    mg_config c = base_config(MG_LR_COSINE);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 4), 0.5); /* warm-up is linear whatever the style */
    EXPECT_NEAR(lr_at(s, 8), 1.0);
    /* r = 0.125: 0.1 + 0.9 * (cos(pi/8) + 1)/2, cos(pi/8) = sqrt(2 + sqrt 2)/2 = 0.92387953251 */
    EXPECT_NEAR(lr_at(s, 12), 0.1 + 0.9 * 0.5 * (sqrt(2.0 + sqrt(2.0)) / 2.0 + 1.0));
    EXPECT_NEAR(lr_at(s, 12), 0.9657457896300791);
    EXPECT_NEAR(lr_at(s, 24), 0.55); /* r = 0.5: coeff 0.5 */
    EXPECT_NEAR(lr_at(s, 40), 0.1);  /* r = 1: coeff 0 */
    EXPECT_NEAR(lr_at(s, 41), 0.1);  /* past decay */
}

MG_TEST(lr_constant_style) {
    mg_config c = base_config(MG_LR_CONSTANT);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 4), 0.5); /* warm-up still applies to constant */
    EXPECT_NEAR(lr_at(s, 8), 1.0);
    EXPECT_NEAR(lr_at(s, 24), 1.0);
    EXPECT_NEAR(lr_at(s, 400), 1.0); /* constant wins over "past decay → min_lr" */
}

MG_TEST(lr_warmup_from_fraction) {
    mg_config c = base_config(MG_LR_LINEAR);
    c.lr_warmup_iters = 7; /* ignored: the fraction takes precedence, as in Megatron */
    c.lr_warmup_fraction = 0.1;
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    MG_EXPECT(s.warmup_steps == 4.0, "warmup_steps %g, want 0.1 * 40 = 4", s.warmup_steps);
    EXPECT_NEAR(lr_at(s, 2), 0.5);
    EXPECT_NEAR(lr_at(s, 4), 1.0);
    EXPECT_NEAR(lr_at(s, 22), 0.55); /* r = 18/36 */

    /* Megatron keeps fraction * decay_steps as a float: 0.07 * 40 = 2.8000000000000003 samples,
     * so step 2 is in warm-up (2/2.8) and step 3 already decays (r = 0.2/37.2). */
    c.lr_warmup_fraction = 0.07;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    EXPECT_NEAR(lr_at(s, 2), 0.7142857142857142);
    EXPECT_NEAR(lr_at(s, 3), 0.9951612903225806);
}

MG_TEST(lr_megatron_loop_order) {
    /* Megatron's loop: the update at iteration k uses the lr before the increment; the log line
     * shows the lr after it. With gbs 4 and warm-up 8 samples: updates use 0, 0.5, 1.0, ... and the
     * first log line (iteration 1) shows 0.5. */
    mg_config c = base_config(MG_LR_LINEAR);
    mg_lr_schedule s;
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    const double used[3] = {0.0, 0.5, 1.0}, logged[3] = {0.5, 1.0, 0.8875};
    for (int k = 0; k < 3; k++) {
        EXPECT_NEAR(mg_lr_schedule_lr(&s), used[k]);
        mg_lr_schedule_step(&s, c.global_batch_size);
        EXPECT_NEAR(mg_lr_schedule_lr(&s), logged[k]);
    }
}

MG_TEST(lr_rejects_bad_schedules) {
    mg_lr_schedule s;
    mg_config c = base_config(MG_LR_LINEAR);
    c.lr_warmup_iters = 10; /* warm-up == decay: Megatron asserts warmup < decay */
    MG_EXPECT(mg_lr_schedule_init(&s, &c) == MG_ERR_USAGE, "warm-up as long as decay accepted");
    MG_EXPECT(strstr(mg_error_message(), "--lr-warmup-iters") != NULL, "message: %s",
              mg_error_message());

    c = base_config(MG_LR_LINEAR);
    c.min_lr = 2.0; /* min above max */
    MG_EXPECT(mg_lr_schedule_init(&s, &c) == MG_ERR_USAGE, "min_lr > lr accepted");
    MG_EXPECT(strstr(mg_error_message(), "--min-lr") != NULL, "message: %s", mg_error_message());

    c = base_config(MG_LR_LINEAR);
    c.lr_warmup_init = 1.5;
    MG_EXPECT(mg_lr_schedule_init(&s, &c) == MG_ERR_USAGE, "warm-up init above lr accepted");

    c = base_config(MG_LR_LINEAR);
    c.lr_decay_iters = 0;
    MG_EXPECT(mg_lr_schedule_init(&s, &c) == MG_ERR_USAGE, "zero decay accepted");

    c = base_config(MG_LR_LINEAR);
    c.train_iters = 0;
    MG_EXPECT(mg_lr_schedule_init(&s, &c) == MG_ERR_USAGE, "zero train iters accepted");
}
