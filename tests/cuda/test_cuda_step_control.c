/* CUDA backend against the CPU backend: the step-control op (core/step_rules.h) over a run of
 * steps with overflows, NaN losses and growth of a dynamic scaler, a warm-up + cosine schedule
 * with a decoupled lr; scale_f32 (the loss weights times the device's loss scale); sumsq_f32 with
 * the unscale read from device memory. The counts, the schedule's position and the scale must be
 * the CPU's exactly; the rates agree to the last place or one more (the device's double cos and
 * pow may round differently from the host's). */
#include "cuda_test_util.h"

#include <math.h>
#include <string.h>

static mg_step_rules test_rules(void) {
    mg_step_rules r;
    memset(&r, 0, sizeof r);
    r.lr.max_lr = 3e-3, r.lr.min_lr = 1e-4, r.lr.init_lr = 0;
    r.lr.warmup_steps = 12, r.lr.decay_steps = 80, r.lr.style = MG_LR_COSINE;
    r.lr.start_wd = 0.01, r.lr.end_wd = 0.1, r.lr.wd_incr_steps = 80, r.lr.wd_style = MG_WD_LINEAR;
    r.lr.decoupled = true, r.lr.decoupled_max_lr = 1e-2, r.lr.decoupled_min_lr = 1e-4;
    r.scaler.on = r.scaler.dynamic = true;
    r.scaler.scale = 1024, r.scaler.min_scale = 1, r.scaler.growth_interval = 3;
    r.scaler.hysteresis = r.scaler.hysteresis_tracker = 2;
    r.beta1 = 0.9, r.beta2 = 0.95, r.samples = 4;
    return r;
}

MG_TEST(cuda_step_control_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const char *pattern = "0010022000000000100"; /* 1: overflow, 2: overflow with a NaN loss */
    const mg_step_rules r = test_rules();
    mg_step_ctl ref = {.scale = 1024.0f, .inv_scale = 1.0f / 1024, .hysteresis_tracker = 2};
    float ref_sums[2] = {0, 0};
    ct_pool P = ct_pool_of(t, gpu);
    mg_step_ctl *d_ctl = ct_poison(&P, sizeof ref);
    float *d_in = ct_poison(&P, 4 * sizeof(float)); /* norm, loss, sums (2) */
    if (!P.failed) {
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d_ctl, &ref, sizeof ref));
        MG_EXPECT_OK(gpu->memset_zero(gpu, d_in, 4 * sizeof(float)));
    }
    for (int i = 0; pattern[i] && !P.failed && !t->failures; i++) {
        const float in[2] = {pattern[i] != '0' ? INFINITY : 0.5f + 0.25f * (float)i,
                             pattern[i] == '2' ? NAN : 3.0f};
        MG_EXPECT_OK(cpu->step_control(cpu, &ref, &in[0], &in[1], ref_sums, &r));
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d_in, in, sizeof in));
        MG_EXPECT_OK(gpu->step_control(gpu, d_ctl, &d_in[0], &d_in[1], &d_in[2], &r));
        mg_step_ctl got;
        float got_sums[2];
        MG_EXPECT_OK(gpu->copy_d2h(gpu, &got, d_ctl, sizeof got));
        MG_EXPECT_OK(gpu->copy_d2h(gpu, got_sums, &d_in[2], sizeof got_sums));
        MG_EXPECT(got.adam_step == ref.adam_step && got.lr_num_steps == ref.lr_num_steps &&
                      got.skipped_iters == ref.skipped_iters && got.nan_iters == ref.nan_iters &&
                      got.last_skipped == ref.last_skipped && got.scale == ref.scale &&
                      got.inv_scale == ref.inv_scale &&
                      got.growth_tracker == ref.growth_tracker &&
                      got.hysteresis_tracker == ref.hysteresis_tracker,
                  "step %d: adam step %lld/%lld samples %lld/%lld skipped %lld/%lld nan %lld/%lld "
                  "scale %g/%g trackers %d %d/%d %d",
                  i + 1, (long long)got.adam_step, (long long)ref.adam_step,
                  (long long)got.lr_num_steps, (long long)ref.lr_num_steps,
                  (long long)got.skipped_iters, (long long)ref.skipped_iters,
                  (long long)got.nan_iters, (long long)ref.nan_iters, (double)got.scale,
                  (double)ref.scale, got.growth_tracker, got.hysteresis_tracker,
                  ref.growth_tracker, ref.hysteresis_tracker);
        CT_EXPECT_SAME_BITS(got_sums, ref_sums, sizeof got_sums, "step %d: the sums", i + 1);
        if (!ref.last_skipped) /* a skipped step's rates are not used */
            CT_EXPECT_CLOSE(got.rate, ref.rate, MG_RATE_COUNT, 2e-7, "step %d: the rates", i + 1);
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_scale_f32_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const size_t sizes[] = {1, 1000, 65537};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        ct_pool P = ct_pool_of(t, gpu);
        float *x = ct_uniform_f32(&P, 40 + k, n, 0.0f, 1e-3f), s = 0x1p20f;
        float *ref = ct_host(&P, n * sizeof(float));
        if (P.failed) goto next;
        MG_EXPECT_OK(cpu->scale_f32(cpu, ref, x, n, &s));
        float *dx = ct_up_f32(&P, x, n), *ds = ct_up_f32(&P, &s, 1);
        float *dout = ct_poison(&P, n * sizeof(float));
        if (P.failed) goto next;
        MG_EXPECT_OK(gpu->scale_f32(gpu, dout, dx, n, ds));
        float *got = ct_down_f32(&P, dout, n);
        if (got) CT_EXPECT_SAME_BITS(got, ref, n * sizeof(float), "scale_f32 n=%zu", n);
        MG_EXPECT_OK(gpu->scale_f32(gpu, dx, dx, n, ds)); /* in place */
        got = ct_down_f32(&P, dx, n);
        if (got) CT_EXPECT_SAME_BITS(got, ref, n * sizeof(float), "scale_f32 in place n=%zu", n);
    next:
        ct_pool_free(&P);
    }
}

/* Gradients held x 2^10: the unscaled sum of squares, the unscale read on the device. */
MG_TEST(cuda_sumsq_unscale_from_device_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { N = 70001 };
    ct_pool P = ct_pool_of(t, gpu);
    float *y = ct_uniform_f32(&P, 9, N, -2048.0f, 2048.0f), un = 0x1p-10f, ref = 0.5f;
    if (!P.failed) MG_EXPECT_OK(cpu->sumsq_f32(cpu, &ref, y, N, &un));
    float *dy = ct_up_f32(&P, y, N), *dun = ct_up_f32(&P, &un, 1), init = 0.5f;
    float *dout = ct_up_f32(&P, &init, 1);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->sumsq_f32(gpu, dout, dy, N, dun));
        float *got = ct_down_f32(&P, dout, 1);
        if (got) CT_EXPECT_CLOSE(got, &ref, 1, CT_TOL_F32, "sumsq_f32 with a device unscale");
    }
    ct_pool_free(&P);
}
