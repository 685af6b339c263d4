/* fp8 casts (core/fp8.h) and delayed scaling (core/fp8_scaling.h) against
 * tests/golden/fp8/fp8.json, written by tools/reference/fp8_golden.py: every byte of e4m3 and
 * e5m2 decodes to the reference's value; ~4800 fp32 inputs per format (the specials, every
 * value, every midpoint between neighbours and the fp32 values next to it, the subnormal and
 * overflow edges, random magnitudes) cast to the reference's byte, plain (NaN or infinity past
 * the largest value) and saturating; and Transformer Engine's delayed-scaling recipe gives the
 * reference's scale after every step and its final history, for both formats, history lengths 1
 * to 1024, both amax algorithms and a margin, through zero, infinite, subnormal and NaN amaxes. */
#include "test.h"

#include "golden_io.h"

#include "core/fp8.h"
#include "core/fp8_scaling.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN MG_GOLDEN_DIR "/fp8/fp8.json"

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}
static uint32_t u32_at(const cJSON *a, int i) {
    return (uint32_t)cJSON_GetArrayItem(a, i)->valuedouble;
}

/* The bits of a decoded value, every NaN as the reference writes it (0x7fc00000, its sign). */
static uint32_t canonical(float v) {
    uint32_t b = mg_hb_bits(v);
    return isnan(v) ? (b & 0x80000000u) | 0x7fc00000u : b;
}

static void check_format(mg_test_ctx *t, const cJSON *c, mg_fp8_format f, const char *name) {
    const cJSON *dec = item(c, "decode"), *in = item(c, "inputs"), *plain = item(c, "plain"),
                *sat = item(c, "saturated");
    MG_EXPECT(cJSON_GetArraySize(dec) == 256, "%s: %d decoded bytes", name,
              cJSON_GetArraySize(dec));
    int bad = 0;
    for (int b = 0; b < 256 && bad < 5; b++) {
        uint32_t got = canonical(mg_fp8_to_f32((uint8_t)b, f)), want = u32_at(dec, b);
        if (got != want) {
            MG_EXPECT(0, "%s: byte 0x%02x decodes to 0x%08x, the reference 0x%08x", name, b, got,
                      want);
            bad++;
        }
    }
    int n = cJSON_GetArraySize(in);
    MG_EXPECT(n > 4500 && cJSON_GetArraySize(plain) == n && cJSON_GetArraySize(sat) == n,
              "%s: %d inputs", name, n);
    for (int i = 0; i < n && bad < 10; i++) {
        float x = mg_hb_float(u32_at(in, i));
        int p = mg_fp8_from_f32(x, f, false), s = mg_fp8_from_f32(x, f, true);
        int wp = cJSON_GetArrayItem(plain, i)->valueint, ws = cJSON_GetArrayItem(sat, i)->valueint;
        /* a NaN's payload and sign are the converter's own: NaN for NaN is what matters */
        bool pn = isnan(mg_fp8_to_f32((uint8_t)p, f)), wpn = isnan(mg_fp8_to_f32((uint8_t)wp, f));
        if ((pn || wpn) ? pn != wpn : p != wp) {
            MG_EXPECT(0, "%s: %.9g (0x%08x) casts to 0x%02x, the reference 0x%02x", name, (double)x,
                      u32_at(in, i), p, wp);
            bad++;
        }
        bool sn = isnan(mg_fp8_to_f32((uint8_t)s, f)), wsn = isnan(mg_fp8_to_f32((uint8_t)ws, f));
        if ((sn || wsn) ? sn != wsn : s != ws) {
            MG_EXPECT(0, "%s: %.9g saturates to 0x%02x, the reference 0x%02x", name, (double)x, s,
                      ws);
            bad++;
        }
    }
}

MG_TEST(fp8_casts_match_the_reference) {
    cJSON *g = mg_golden_json(t, GOLDEN);
    if (!g) return;
    const cJSON *casts = item(g, "casts");
    check_format(t, item(casts, "e4m3"), MG_FP8_E4M3, "e4m3");
    check_format(t, item(casts, "e5m2"), MG_FP8_E5M2, "e5m2");
    /* the largest values, the saturation and the round trip of a plain value, by hand */
    MG_EXPECT(mg_fp8_to_f32(mg_fp8_from_f32(1e9f, MG_FP8_E4M3, true), MG_FP8_E4M3) == 448.0f &&
                  mg_fp8_to_f32(mg_fp8_from_f32(-INFINITY, MG_FP8_E5M2, true), MG_FP8_E5M2) ==
                      -57344.0f &&
                  mg_fp8_to_f32(mg_fp8_from_f32(0.3125f, MG_FP8_E4M3, false), MG_FP8_E4M3) ==
                      0.3125f,
              "saturation or round trip");
    cJSON_Delete(g);
}

MG_TEST(fp8_delayed_scaling_matches_transformer_engine) {
    cJSON *g = mg_golden_json(t, GOLDEN);
    if (!g) return;
    const cJSON *cases = item(g, "delayed"), *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cases) {
        mg_fp8_format f =
            strcmp(item(c, "format")->valuestring, "e4m3") ? MG_FP8_E5M2 : MG_FP8_E4M3;
        int len = item(c, "len")->valueint, margin = item(c, "margin")->valueint;
        mg_fp8_amax_algo algo =
            strcmp(item(c, "algo")->valuestring, "max") ? MG_FP8_AMAX_MOST_RECENT : MG_FP8_AMAX_MAX;
        const cJSON *amax = item(c, "amax"), *scale = item(c, "scale"), *hist = item(c, "history");
        float *h = calloc((size_t)len, sizeof *h), s = 1.0f;
        int steps = cJSON_GetArraySize(amax), bad = 0;
        for (int i = 0; i < steps && h; i++) {
            h[0] = mg_hb_float(u32_at(amax, i));
            s = mg_fp8_delayed_update(h, len, s, mg_fp8_max(f), margin, algo);
            if (mg_hb_bits(s) != u32_at(scale, i) && !bad++)
                MG_EXPECT(0, "case %d (len %d, margin %d) step %d: scale %.9g, the reference %.9g",
                          n_cases, len, margin, i + 1, (double)s,
                          (double)mg_hb_float(u32_at(scale, i)));
        }
        for (int i = 0; i < len && h && !bad; i++)
            if (canonical(h[i]) != canonical(mg_hb_float(u32_at(hist, i)))) {
                MG_EXPECT(0, "case %d: history[%d] %.9g, the reference %.9g", n_cases, i,
                          (double)h[i], (double)mg_hb_float(u32_at(hist, i)));
                bad++;
            }
        free(h);
        n_cases++;
    }
    MG_EXPECT(n_cases == 10, "%d delayed-scaling cases", n_cases);
    cJSON_Delete(g);
}
