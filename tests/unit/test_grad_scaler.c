/* The loss scaler (train/grad_scaler.h) against Megatron's own DynamicGradScaler:
 * tests/golden/grad_scaler/megatron_grad_scaler.json, written by
 * tools/reference/megatron_grad_scaler.py from megatron/core/optimizer/grad_scaler.py. Each case
 * replays its overflow sequence and compares the scale (exactly: both are fp32) and both trackers
 * after every update. Also which scaler a configuration gets. */
#include "test.h"

#include "golden_io.h"

#include "config_test_util.h"
#include "core/file.h"
#include "train/grad_scaler.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The steps of one case that differ from Megatron's (0: none). */
static int replay(mg_test_ctx *t, const cJSON *o) {
    const char *name = cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring;
    mg_config c;
    mg_config_defaults(&c);
    c.fp16 = true;
    c.initial_loss_scale = num(o, "initial");
    c.min_loss_scale = num(o, "min");
    c.loss_scale_window = num(o, "window");
    c.hysteresis = (int)num(o, "hysteresis");
    mg_grad_scaler s;
    mg_grad_scaler_init(&s, &c);
    MG_EXPECT(s.on && s.dynamic, "%s: --fp16 without --loss-scale is dynamic", name);
    const cJSON *inf = cJSON_GetObjectItemCaseSensitive(o, "found_inf"),
                *scale = cJSON_GetObjectItemCaseSensitive(o, "scale"),
                *growth = cJSON_GetObjectItemCaseSensitive(o, "growth"),
                *hyst = cJSON_GetObjectItemCaseSensitive(o, "hysteresis_left");
    int n = cJSON_GetArraySize(inf), bad = 0;
    for (int i = 0; i < n; i++) {
        mg_grad_scaler_update(&s, cJSON_GetArrayItem(inf, i)->valueint != 0);
        float want = (float)cJSON_GetArrayItem(scale, i)->valuedouble;
        int g = cJSON_GetArrayItem(growth, i)->valueint, h = cJSON_GetArrayItem(hyst, i)->valueint;
        if (s.scale != want || s.growth_tracker != g || s.hysteresis_tracker != h) {
            if (!bad)
                MG_EXPECT(0, "%s step %d: scale %g growth %d hysteresis %d, Megatron %g %d %d",
                          name, i + 1, (double)s.scale, s.growth_tracker, s.hysteresis_tracker,
                          (double)want, g, h);
            bad++;
        }
    }
    return bad;
}

MG_TEST(grad_scaler_matches_megatron_dynamic) {
    const char *path = "tests/golden/grad_scaler/megatron_grad_scaler.json";
    cJSON *root = mg_golden_json(t, path);
    if (!root) return;
    int cases = 0, steps = 0, failed = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        cases++;
        steps += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "found_inf"));
        failed += replay(t, o) > 0;
    }
    MG_EXPECT(cases >= 7 && steps >= 230, "%d cases, %d steps", cases, steps);
    MG_EXPECT(failed == 0, "%d of %d cases differ from Megatron", failed, cases);
    cJSON_Delete(root);
}

/* The tiny model the flag cases are added to. */
/* clang-format off */
static const char *const MODEL[] = {"--num-layers", "1", "--hidden-size", "8",
                                    "--num-attention-heads", "1", "--seq-length", "8",
                                    "--vocab-size", "16", "--mock-data", "--train-iters", "1",
                                    "--lr", "1e-3", NULL};
/* clang-format on */

/* Megatron's choice of scaler (optimizer/__init__.py): --loss-scale gives a constant one with
 * --fp16, --bf16 or the distributed optimizer; --fp16 alone a dynamic one; else none. */
MG_TEST(grad_scaler_kind_follows_megatron) {
    static const struct {
        const char *flags;
        bool on, dynamic;
        float scale;
    } cases[] = {
        {"", false, false, 1.0f},
        {"--bf16", false, false, 1.0f},
        {"--fp16", true, true, 4294967296.0f},
        {"--fp16 --initial-loss-scale 65536", true, true, 65536.0f},
        {"--fp16 --loss-scale 4096", true, false, 4096.0f},
        {"--bf16 --loss-scale 128", true, false, 128.0f},
        {"--loss-scale 128", false, false, 1.0f},
        {"--loss-scale 128 --use-distributed-optimizer", true, false, 128.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        mg_status st = mg_test_config(&c, cases[i].flags, MODEL);
        MG_EXPECT(st == MG_OK, "'%s': %s", cases[i].flags, mg_error_message());
        if (st != MG_OK) continue;
        mg_grad_scaler s;
        mg_grad_scaler_init(&s, &c);
        MG_EXPECT(s.on == cases[i].on && s.dynamic == cases[i].dynamic && s.scale == cases[i].scale,
                  "'%s': on %d dynamic %d scale %g", cases[i].flags, s.on, s.dynamic,
                  (double)s.scale);
    }
}

/* Megatron's asserts on the flags, as one-line usage errors naming the flag. */
MG_TEST(grad_scaler_flag_refusals) {
    static const struct {
        const char *flags, *says;
    } cases[] = {
        {"--fp16 --bf16", "--fp16 and --bf16 exclude each other"},
        {"--fp16 --loss-scale -1", "--loss-scale must be a positive number"},
        {"--fp16 --initial-loss-scale 0", "--initial-loss-scale must be positive"},
        {"--fp16 --min-loss-scale 0", "--min-loss-scale must be positive"},
        {"--fp16 --min-loss-scale 8 --initial-loss-scale 4", "is above --initial-loss-scale"},
        {"--fp16 --loss-scale-window 0", "--loss-scale-window must be positive"},
        {"--fp16 --hysteresis 0", "--hysteresis must be positive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        mg_status st = mg_test_config(&c, cases[i].flags, MODEL);
        MG_EXPECT(st == MG_ERR_USAGE && strstr(mg_error_message(), cases[i].says),
                  "'%s': status %d, '%s'", cases[i].flags, (int)st, mg_error_message());
        mg_error_clear();
    }
}
