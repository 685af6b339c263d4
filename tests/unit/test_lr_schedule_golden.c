/* Megatron's schedules against its own code: tests/golden/lr_schedule/megatron_lr_scheduler.json, written by
 * tools/reference/megatron_lr_scheduler.py from Megatron-LM's OptimizerParamScheduler (get_lr, get_wd,
 * step) and RampupBatchsizeNumMicroBatchesCalculator, imported unchanged. Each case's flags go
 * through the real parser and mg_config_validate; then train/lr_schedule and
 * train/batch_schedule walk the run as the trainer does (the update uses the rates before the
 * scheduler's step; the log shows the lr after it) and must give every recorded iteration's
 * global batch, microbatches and consumed samples exactly, and its lrs and weight decay to
 * 1e-12 relative (the same operations in the same order as Python; only libm may differ). */
#include "test.h"

#include "golden_io.h"

#include "core/file.h"
#include "config/flags.h"
#include "core/status.h"
#include "train/batch_schedule.h"
#include "train/lr_schedule.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const MODEL[] = {"--num-layers",          "1",  "--hidden-size", "8",
                                    "--num-attention-heads", "1",  "--seq-length",  "8",
                                    "--vocab-size",          "16", "--mock-data"};
#define N_MODEL ((int)(sizeof MODEL / sizeof *MODEL))

static bool close_rel(double got, double want) {
    return got == want || fabs(got - want) <= 1e-12 * fabs(want);
}

/* The case's config: the tiny model's flags, then the case's schedule flags, validated with a
 * world of dp ranks. */
static mg_status case_config(const cJSON *args, int dp, mg_config *c) {
    char *argv[64];
    int argc = 0;
    for (int i = 0; i < N_MODEL; i++) argv[argc++] = (char *)MODEL[i];
    const cJSON *a;
    cJSON_ArrayForEach(a, args) {
        if (argc == 64) return MG_FAIL(MG_ERR_INTERNAL, "too many flags in a golden case");
        argv[argc++] = a->valuestring;
    }
    mg_config_defaults(c);
    bool help;
    MG_CHECK(mg_flags_parse(c, argc, argv, &help));
    c->world_size = dp;
    MG_CHECK(mg_config_validate(c));
    mg_config again = *c; /* validation is idempotent (--lr-decay-samples resolved once) */
    MG_CHECK(mg_config_validate(&again));
    if (memcmp(&again, c, sizeof again))
        return MG_FAIL(MG_ERR_INTERNAL, "validating a validated config changed it");
    return MG_OK;
}

typedef struct {
    int compared, worst_iteration;
    double worst_rel;
} case_stats;

/* Walks the run and compares the recorded steps; returns the failures. */
static int check_case(mg_test_ctx *t, const cJSON *o, case_stats *st) {
    const char *name = cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring;
    int dp = cJSON_GetObjectItemCaseSensitive(o, "dp")->valueint;
    int64_t want_iters = (int64_t)cJSON_GetObjectItemCaseSensitive(o, "train_iters")->valuedouble;
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps");
    int before = t->failures;
    mg_config c;
    mg_lr_schedule s;
    mg_batch_schedule b;
    MG_EXPECT_OK(case_config(cJSON_GetObjectItemCaseSensitive(o, "args"), dp, &c));
    MG_EXPECT_OK(mg_lr_schedule_init(&s, &c));
    MG_EXPECT_OK(mg_batch_schedule_init(&b, &c, dp));
    if (t->failures > before) return t->failures - before;
    int64_t iters = mg_batch_schedule_train_iters(&b, &c);
    MG_EXPECT(iters == want_iters, "%s: %lld iterations, Megatron %lld", name, (long long)iters,
              (long long)want_iters);
    const cJSON *rec = steps->child;
    int64_t consumed = 0;
    for (int64_t it = 1; it <= iters && rec; it++) {
        int64_t g = mg_batch_schedule_global(&b, consumed);
        int64_t m = g / (c.micro_batch_size * (int64_t)dp);
        double used[3] = {mg_lr_schedule_lr(&s), mg_lr_schedule_decoupled_lr(&s),
                          mg_lr_schedule_wd(&s)};
        mg_lr_schedule_step(&s, g);
        consumed += g;
        if ((int64_t)cJSON_GetArrayItem(rec, 0)->valuedouble != it) continue;
        double v[8];
        for (int k = 0; k < 8; k++) v[k] = cJSON_GetArrayItem(rec, k)->valuedouble;
        MG_EXPECT(g == (int64_t)v[1] && m == (int64_t)v[2] && consumed == (int64_t)v[3],
                  "%s iteration %lld: global batch %lld, %lld microbatches, consumed %lld; "
                  "Megatron %.0f, %.0f, %.0f",
                  name, (long long)it, (long long)g, (long long)m, (long long)consumed, v[1], v[2],
                  v[3]);
        const double got[4] = {used[0], used[1], used[2], mg_lr_schedule_lr(&s)};
        static const char *what[4] = {"lr used", "decoupled lr used", "weight decay used",
                                      "lr logged"};
        for (int k = 0; k < 4; k++) {
            MG_EXPECT(close_rel(got[k], v[4 + k]), "%s iteration %lld: %s %.17g, Megatron %.17g",
                      name, (long long)it, what[k], got[k], v[4 + k]);
            double rel = v[4 + k] != 0 ? fabs(got[k] - v[4 + k]) / fabs(v[4 + k]) : 0;
            if (rel > st->worst_rel) st->worst_rel = rel, st->worst_iteration = (int)it;
        }
        st->compared++;
        rec = rec->next;
    }
    MG_EXPECT(rec == NULL, "%s: recorded steps left over (iteration %.0f never reached)", name,
              rec ? cJSON_GetArrayItem(rec, 0)->valuedouble : 0.0);
    return t->failures - before;
}

MG_TEST(sched_golden_megatron_lr_wd_and_batch) {
    const char *path = "tests/golden/lr_schedule/megatron_lr_scheduler.json";
    cJSON *root = mg_golden_json(t, path);
    if (!root) return;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *o;
    int n = 0, failed = 0;
    case_stats st = {0};
    cJSON_ArrayForEach(o, cases) {
        n++;
        failed += check_case(t, o, &st) > 0;
    }
    /* every style, weight-decay style, decoupled lr, sample-based and rampup case is there */
    MG_EXPECT(n >= 18 && st.compared >= 390, "%d cases, %d steps compared", n, st.compared);
    MG_EXPECT(failed == 0, "%d of %d cases differ from Megatron", failed, n);
    cJSON_Delete(root);
}

/* The comparison can fail: the classic slip of updating with the lr after the scheduler's step
 * (one iteration late) is caught in every case whose lr moves. */
MG_TEST(sched_golden_detects_an_off_by_one_step) {
    const char *path = "tests/golden/lr_schedule/megatron_lr_scheduler.json";
    cJSON *root = mg_golden_json(t, path);
    if (!root) return;
    int caught = 0, moving = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        const cJSON *first = cJSON_GetObjectItemCaseSensitive(o, "steps")->child;
        bool moves = false, differs = false;
        for (const cJSON *r = first; r; r = r->next) {
            double used = cJSON_GetArrayItem(r, 4)->valuedouble;
            double logged = cJSON_GetArrayItem(r, 7)->valuedouble;
            moves |= used != cJSON_GetArrayItem(first, 4)->valuedouble;
            differs |= !close_rel(logged, used); /* "used" replaced by the lr after the step */
        }
        moving += moves;
        caught += moves && differs;
    }
    MG_EXPECT(moving >= 15 && caught == moving, "an lr one step late is caught in %d of %d cases",
              caught, moving);
    cJSON_Delete(root);
}

/* Megatron's refusals of the combinations (arguments.py, the calculator's asserts), one line. */
MG_TEST(sched_flags_refusals) {
    static const struct {
        const char *args[12];
        const char *text;
    } bad[] = {
        {{"--train-iters", "10", "--rampup-batch-size", "16", "16", "5859375", "--lr", "1e-4"},
         "expected no batch-size rampup for iteration-based training"},
        {{"--train-iters", "10", "--train-samples", "100", "--lr", "1e-4"},
         "expected iteration-based training"},
        {{"--train-samples", "100", "--lr-decay-iters", "5", "--lr", "1e-4"},
         "expected sample-based learning rate decay"},
        {{"--train-samples", "100", "--lr-warmup-iters", "5", "--lr", "1e-4"},
         "expected sample-based learning rate warmup"},
        {{"--train-iters", "10", "--lr-warmup-samples", "5", "--lr", "1e-4"},
         "expected iteration-based learning rate warmup"},
        {{"--train-samples", "100", "--lr-decay-style", "WSD", "--lr", "1e-4"},
         "--lr-wsd-decay-samples"},
        {{"--train-iters", "10", "--start-weight-decay", "0.1", "--lr", "1e-4"},
         "--weight-decay-incr-style"},
        {{"--train-iters", "10", "--weight-decay-incr-style", "linear", "--lr", "1e-4"},
         "--start-weight-decay X and --end-weight-decay Y"},
        {{"--train-samples", "100", "--rampup-batch-size", "3", "2", "50", "--lr", "1e-4"},
         "expected global batch size to be greater than or equal to start batch size"},
        {{"--train-samples", "100", "--global-batch-size", "8", "--rampup-batch-size", "2", "4",
          "50", "--lr", "1e-4"},
         "global batch size interval (6) to be divisible by global batch size increment (4)"},
        {{"--train-samples", "100", "--rampup-batch-size", "1", "1", "--lr", "1e-4"},
         "--rampup-batch-size expects 3 values"},
        {{"--lr", "1e-4"}, "either train-iters or train-samples should be provided"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[32];
        int argc = 0;
        for (int k = 0; k < N_MODEL; k++) argv[argc++] = (char *)MODEL[k];
        for (int k = 0; k < 12 && bad[i].args[k]; k++) argv[argc++] = (char *)bad[i].args[k];
        mg_config c;
        mg_config_defaults(&c);
        bool help;
        mg_status st = mg_flags_parse(&c, argc, argv, &help);
        mg_config before = c;
        if (st == MG_OK) st = mg_config_validate(&c);
        MG_EXPECT(st == MG_ERR_USAGE && strstr(mg_error_message(), bad[i].text) &&
                      !strchr(mg_error_message(), '\n'),
                  "case %zu: status %s, message '%s', want '%s'", i, mg_status_name(st),
                  mg_error_message(), bad[i].text);
        MG_EXPECT(memcmp(&before, &c, sizeof c) == 0, "case %zu: the config changed on error", i);
    }
}
