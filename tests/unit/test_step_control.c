/* The step-control op of the CPU backend (backend_ops.h, step_control; core/step_rules.h) against
 * the host's own functions: Megatron's dynamic scaler golden replayed through the op, and a run of
 * steps with overflows, growth, a non-finite loss and a warm-up + cosine schedule with a decoupled
 * lr and an increasing weight decay, every value compared bit for bit with the host's
 * (train/lr_schedule.h, train/grad_scaler.h, the Adam bias corrections). */
#include "test.h"

#include "cpu_test_util.h"
#include "golden_io.h"

#include "config/flags.h"
#include "core/step_rules.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The block a trainer starts from: the scaler's state, nothing counted. */
static mg_step_ctl ctl_of(const mg_grad_scaler *g) {
    mg_step_ctl c;
    memset(&c, 0, sizeof c);
    c.scale = g->scale;
    c.inv_scale = (float)(1.0 / (double)g->scale);
    c.growth_tracker = g->growth_tracker;
    c.hysteresis_tracker = g->hysteresis_tracker;
    return c;
}

/* One case of the golden through the op; returns the steps that differ. */
static int replay(mg_test_ctx *t, mg_backend *be, const cJSON *o) {
    const char *name = cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring;
    mg_config c;
    mg_config_defaults(&c);
    c.fp16 = true;
    c.initial_loss_scale = num(o, "initial");
    c.min_loss_scale = num(o, "min");
    c.loss_scale_window = num(o, "window");
    c.hysteresis = (int)num(o, "hysteresis");
    mg_step_rules r;
    memset(&r, 0, sizeof r); /* a zero schedule: constant style, lr 0 */
    mg_grad_scaler_init(&r.scaler, &c);
    r.beta1 = 0.9, r.beta2 = 0.95, r.samples = 1;
    mg_step_ctl ctl = ctl_of(&r.scaler);
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(o, "found_inf"),
                *scale = cJSON_GetObjectItemCaseSensitive(o, "scale"),
                *growth = cJSON_GetObjectItemCaseSensitive(o, "growth"),
                *hyst = cJSON_GetObjectItemCaseSensitive(o, "hysteresis_left");
    int n = cJSON_GetArraySize(inf), bad = 0, skips = 0;
    float sums[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        bool found = cJSON_GetArrayItem(inf, i)->valueint != 0;
        const float norm = found ? INFINITY : 1.0f, loss = 2.0f;
        skips += found;
        MG_EXPECT_OK(be->step_control(be, &ctl, &norm, &loss, sums, &r));
        float want = (float)cJSON_GetArrayItem(scale, i)->valuedouble;
        int g = cJSON_GetArrayItem(growth, i)->valueint, h = cJSON_GetArrayItem(hyst, i)->valueint;
        if (ctl.scale != want || ctl.growth_tracker != g || ctl.hysteresis_tracker != h ||
            ctl.inv_scale != (float)(1.0 / (double)want) || ctl.last_skipped != found ||
            ctl.skipped_iters != skips || ctl.adam_step != i + 1 - skips ||
            ctl.lr_num_steps != i + 1 - skips || ctl.nan_iters != 0) {
            if (!bad)
                MG_EXPECT(0,
                          "%s step %d: scale %g growth %d hysteresis %d, Megatron %g %d %d; "
                          "skipped %lld adam step %lld",
                          name, i + 1, (double)ctl.scale, ctl.growth_tracker,
                          ctl.hysteresis_tracker, (double)want, g, h, (long long)ctl.skipped_iters,
                          (long long)ctl.adam_step);
            bad++;
        }
    }
    MG_EXPECT(sums[0] == 2.0f * (float)(n - skips) && sums[1] == (float)(n - skips),
              "%s: the sums %g %g count %d clean steps", name, (double)sums[0], (double)sums[1],
              n - skips);
    return bad;
}

MG_TEST(step_control_replays_megatron_dynamic_scaler) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    cJSON *root = mg_golden_json(t, "tests/golden/grad_scaler/megatron_grad_scaler.json");
    if (root) {
        int cases = 0, failed = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
            cases++;
            failed += replay(t, be, o) > 0;
        }
        MG_EXPECT(cases >= 7, "%d cases", cases);
        MG_EXPECT(failed == 0, "%d of %d cases differ from Megatron", failed, cases);
        cJSON_Delete(root);
    }
    be->destroy(be);
}

/* A schedule with every part the rates read: warm-up, cosine decay, --decoupled-lr, a linear
 * weight-decay increment. 20 iterations of 4 samples. */
static mg_config schedule_config(void) {
    mg_config c;
    mg_config_defaults(&c);
    c.train_iters = 20;
    c.global_batch_size = 4;
    c.micro_batch_size = 4;
    c.lr = 3e-3;
    c.min_lr = 1e-4;
    c.lr_decay_style = MG_LR_COSINE;
    c.lr_warmup_iters = 3;
    c.lr_warmup_fraction = -1;
    c.lr_decay_iters = -1;
    c.decoupled_lr = 1e-2;
    c.weight_decay_incr_style = MG_WD_LINEAR;
    c.start_weight_decay = 0.01;
    c.end_weight_decay = 0.1;
    c.adam_beta1 = 0.9;
    c.adam_beta2 = 0.95;
    return c;
}

/* The host's bookkeeping of one step, as the trainer kept it before the device did. */
typedef struct {
    mg_lr_schedule lr;
    mg_grad_scaler scaler;
    int64_t adam_step, skipped, nan;
} host_ref;

static void host_step(host_ref *h, bool found_inf, bool nan_loss, float *rates, int64_t gbs,
                      double b1, double b2) {
    const bool skipped = h->scaler.on && found_inf;
    h->adam_step += !skipped;
    h->skipped += skipped;
    h->nan += skipped && nan_loss;
    rates[MG_RATE_LR] = (float)mg_lr_schedule_lr(&h->lr);
    rates[MG_RATE_DECOUPLED_LR] = (float)mg_lr_schedule_decoupled_lr(&h->lr);
    rates[MG_RATE_WD] = (float)mg_lr_schedule_wd(&h->lr);
    rates[MG_RATE_BC1] = (float)(1.0 - pow(b1, (double)h->adam_step));
    rates[MG_RATE_BC2] = (float)(1.0 - pow(b2, (double)h->adam_step));
    if (!skipped) mg_lr_schedule_step(&h->lr, gbs);
    mg_grad_scaler_update(&h->scaler, skipped);
}

/* Runs the op over the overflow pattern `inf` (1: overflow, 2: overflow with a NaN loss) against
 * host_step; returns the steps that differ. */
static int run_pattern(mg_test_ctx *t, mg_backend *be, const mg_config *c, const char *inf) {
    host_ref h;
    memset(&h, 0, sizeof h);
    MG_EXPECT_OK(mg_lr_schedule_init(&h.lr, c));
    mg_grad_scaler_init(&h.scaler, c);
    mg_step_rules r = {.lr = h.lr, .scaler = h.scaler, .beta1 = c->adam_beta1,
                       .beta2 = c->adam_beta2, .samples = c->global_batch_size};
    mg_step_ctl ctl = ctl_of(&h.scaler);
    float sums[2] = {0, 0};
    int bad = 0;
    for (int i = 0; inf[i]; i++) {
        const bool found = inf[i] != '0', nan_loss = inf[i] == '2';
        const float norm = found ? NAN : 0.5f + 0.25f * (float)i, loss = nan_loss ? NAN : 3.0f;
        float want[MG_RATE_COUNT];
        host_step(&h, found, nan_loss, want, c->global_batch_size, c->adam_beta1, c->adam_beta2);
        MG_EXPECT_OK(be->step_control(be, &ctl, &norm, &loss, sums, &r));
        const bool rates_same = memcmp(want, ctl.rate, sizeof want) == 0;
        /* a skipped step's rates are not used (the update writes nothing): compare the others */
        const bool used = !(h.scaler.on && found);
        if ((used && !rates_same) || ctl.adam_step != h.adam_step ||
            ctl.lr_num_steps != h.lr.num_steps || ctl.scale != h.scaler.scale ||
            ctl.inv_scale != (float)(1.0 / (double)h.scaler.scale) ||
            ctl.growth_tracker != h.scaler.growth_tracker ||
            ctl.hysteresis_tracker != h.scaler.hysteresis_tracker ||
            ctl.skipped_iters != h.skipped || ctl.nan_iters != h.nan ||
            ctl.last_skipped != (h.scaler.on && found)) {
            if (!bad)
                MG_EXPECT(0,
                          "step %d: lr %.9g/%.9g wd %.9g/%.9g bc %.9g/%.9g, adam step %lld/%lld, "
                          "samples %lld/%lld, scale %g/%g, skipped %lld/%lld nan %lld/%lld",
                          i + 1, (double)ctl.rate[MG_RATE_LR], (double)want[MG_RATE_LR],
                          (double)ctl.rate[MG_RATE_WD], (double)want[MG_RATE_WD],
                          (double)ctl.rate[MG_RATE_BC2], (double)want[MG_RATE_BC2],
                          (long long)ctl.adam_step, (long long)h.adam_step,
                          (long long)ctl.lr_num_steps, (long long)h.lr.num_steps,
                          (double)ctl.scale, (double)h.scaler.scale, (long long)ctl.skipped_iters,
                          (long long)h.skipped, (long long)ctl.nan_iters, (long long)h.nan);
            bad++;
        }
    }
    return bad;
}

MG_TEST(step_control_matches_the_host_schedule_scaler_and_adam) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const char *pattern = "0010022000000000100"; /* overflows, NaN losses, then growth */
    mg_config c = schedule_config();
    c.fp16 = true; /* dynamic: growth after 3 clean steps, back-off after 2 overflows */
    c.initial_loss_scale = 1024;
    c.min_loss_scale = 1;
    c.loss_scale_window = 3;
    c.hysteresis = 2;
    MG_EXPECT(run_pattern(t, be, &c, pattern) == 0, "dynamic scaler");
    c.loss_scale = 1024; /* constant: skips, never moves */
    MG_EXPECT(run_pattern(t, be, &c, pattern) == 0, "constant scaler");
    c.fp16 = false, c.loss_scale = 0; /* no scaler: nothing is skipped, Adam always steps */
    MG_EXPECT(run_pattern(t, be, &c, pattern) == 0, "no scaler");
    be->destroy(be);
}
