/* The lr schedule in checkpoints: what is saved, and Megatron's checks on resume
 * (OptimizerParamScheduler.load_state_dict / _check_and_set; train/lr_schedule.h). */
#include "train/lr_schedule.h"

#include "core/log.h"
#include "core/status.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Megatron's names of the styles (its --lr-decay-style and --weight-decay-incr-style choices) */
static const char *const lr_styles[] = {"constant", "linear", "cosine", "inverse-square-root",
                                        "WSD"};
static const char *const wd_styles[] = {"constant", "linear", "cosine"};
#define N_LR_STYLES ((int)(sizeof lr_styles / sizeof *lr_styles))
#define N_WD_STYLES ((int)(sizeof wd_styles / sizeof *wd_styles))

mg_lr_saved mg_lr_schedule_saved(const mg_lr_schedule *s) {
    return (mg_lr_saved){
        .present = true,
        .max_lr = s->max_lr,
        .min_lr = s->min_lr,
        .warmup_steps = s->warmup_steps,
        .decay_steps = s->decay_steps,
        .style = s->style,
        .start_wd = s->start_wd,
        .end_wd = s->end_wd,
        .wd_incr_steps = s->wd_incr_steps,
        .wd_style = s->wd_style,
        .decoupled = s->decoupled,
        .decoupled_max_lr = s->decoupled_max_lr,
        .decoupled_min_lr = s->decoupled_min_lr,
    };
}

/* Python's repr of a float (as Megatron's f-strings print it): the shortest digits that read
 * back exactly; positional for decimal exponents in [-4, 16) with at least one fractional digit,
 * else d.ddde+XX. Integral values (the step counts: Python ints) print without a fraction. */
static void py_repr(double v, bool integer, char *out, size_t cap) {
    if (integer && v == floor(v) && fabs(v) < 9e15) {
        snprintf(out, cap, "%.0f", v);
        return;
    }
    if (!isfinite(v)) {
        snprintf(out, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    const bool neg = e[0] == '-';
    char digits[24];
    int nd = 0;
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.' && nd < 23) digits[nd++] = *q;
    digits[nd] = '\0';
    const int x = atoi(q + 1);
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__)
    if (neg) PUT("-");
    if (x < -4 || x >= 16) {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", x < 0 ? '-' : '+', abs(x));
    } else if (x < 0) {
        PUT("0.%.*s%s", -x - 1, "0000", digits);
    } else {
        for (int i = 0; i <= x; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".%s", nd > x + 1 ? digits + x + 1 : "0");
    }
#undef PUT
}

/* One value through _check_and_set: *cls (the schedule's) becomes what the run uses. */
typedef struct {
    bool override, use_checkpoint;
} load_mode;

static mg_status check_and_set(const load_mode *m, const char *name, const char *cls_text,
                               const char *sd_text, bool differ, bool *take_checkpoint) {
    *take_checkpoint = false;
    if (m->override) {
        mg_log_info(" > overriding %s value to %s", name, cls_text);
        return MG_OK;
    }
    if (!m->use_checkpoint && differ)
        return MG_FAIL(MG_ERR_FORMAT,
                       "OptimizerParamScheduler: class input value %s and checkpoint value %s for "
                       "%s do not match; pass --override-opt-param-scheduler to use the command "
                       "line's or --use-checkpoint-opt_param-scheduler to use the checkpoint's",
                       cls_text, sd_text, name);
    mg_log_info(" > using checkpoint value %s for %s", sd_text, name);
    *take_checkpoint = true;
    return MG_OK;
}

static mg_status check_double(const load_mode *m, const char *name, double *cls, double sd,
                              bool integer) {
    char a[48], b[48];
    py_repr(*cls, integer, a, sizeof a);
    py_repr(sd, integer, b, sizeof b);
    bool take;
    MG_CHECK(check_and_set(m, name, a, b, *cls != sd, &take));
    if (take) *cls = sd;
    return MG_OK;
}

static mg_status check_i64(const load_mode *m, const char *name, int64_t *cls, int64_t sd) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%" PRId64, *cls);
    snprintf(b, sizeof b, "%" PRId64, sd);
    bool take;
    MG_CHECK(check_and_set(m, name, a, b, *cls != sd, &take));
    if (take) *cls = sd;
    return MG_OK;
}

static mg_status check_style(const load_mode *m, const char *name, int *cls, int sd,
                             const char *const *names) {
    bool take;
    MG_CHECK(check_and_set(m, name, names[*cls], names[sd], *cls != sd, &take));
    if (take) *cls = sd;
    return MG_OK;
}

mg_status mg_lr_schedule_restore(mg_lr_schedule *s, const mg_lr_saved *saved, bool override,
                                 bool use_checkpoint) {
    if (!saved->present) return MG_OK;
    const load_mode m = {override, use_checkpoint};
    mg_lr_schedule n = *s; /* the schedule changes only when every value passes */
    int style = (int)n.style, wd_style = (int)n.wd_style;
    MG_CHECK(check_double(&m, "learning rate", &n.max_lr, saved->max_lr, false));
    MG_CHECK(check_double(&m, "minimum learning rate", &n.min_lr, saved->min_lr, false));
    MG_CHECK(check_double(&m, "warmup iterations", &n.warmup_steps, saved->warmup_steps, true));
    MG_CHECK(check_i64(&m, "total number of iterations", &n.decay_steps, saved->decay_steps));
    MG_CHECK(check_style(&m, "learning rate decay style", &style, (int)saved->style, lr_styles));
    MG_CHECK(check_double(&m, "start weight decay", &n.start_wd, saved->start_wd, false));
    MG_CHECK(check_double(&m, "end weight decay", &n.end_wd, saved->end_wd, false));
    MG_CHECK(check_i64(&m, "total number of weight decay iterations", &n.wd_incr_steps,
                       saved->wd_incr_steps));
    MG_CHECK(
        check_style(&m, "weight decay incr style", &wd_style, (int)saved->wd_style, wd_styles));
    n.style = (mg_lr_style)style;
    n.wd_style = (mg_wd_style)wd_style;
    /* the decoupled group's bounds live in Megatron's optimizer param groups, which the
     * optimizer's state dict restores (unless --override-opt-param-scheduler re-applies the
     * command line's) */
    if (!override && n.decoupled && saved->decoupled &&
        (n.decoupled_max_lr != saved->decoupled_max_lr ||
         n.decoupled_min_lr != saved->decoupled_min_lr)) {
        mg_log_info("> the decoupled lr group (embedding, output layer) continues with the "
                    "checkpoint's bounds %g .. %g (--override-opt-param-scheduler: the command "
                    "line's)",
                    saved->decoupled_max_lr, saved->decoupled_min_lr);
        n.decoupled_max_lr = saved->decoupled_max_lr;
        n.decoupled_min_lr = saved->decoupled_min_lr;
    }
    *s = n;
    return MG_OK;
}

mg_status mg_lr_saved_to_json(const mg_lr_saved *s, char *buf, size_t cap) {
    int n = snprintf(buf, cap,
                     "{\"max_lr\": %.17g, \"min_lr\": %.17g, \"lr_warmup_steps\": %.17g, "
                     "\"lr_decay_steps\": %" PRId64 ", \"lr_decay_style\": \"%s\", "
                     "\"start_wd\": %.17g, \"end_wd\": %.17g, \"wd_incr_steps\": %" PRId64 ", "
                     "\"wd_incr_style\": \"%s\"",
                     s->max_lr, s->min_lr, s->warmup_steps, s->decay_steps, lr_styles[s->style],
                     s->start_wd, s->end_wd, s->wd_incr_steps, wd_styles[s->wd_style]);
    if (n >= 0 && (size_t)n < cap && s->decoupled)
        n += snprintf(buf + n, cap - (size_t)n,
                      ", \"decoupled_max_lr\": %.17g, \"decoupled_min_lr\": %.17g",
                      s->decoupled_max_lr, s->decoupled_min_lr);
    if (n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "}");
    if (n < 0 || (size_t)n >= cap)
        return MG_FAIL(MG_ERR_INTERNAL, "the lr schedule's JSON needs more than %zu bytes", cap);
    return MG_OK;
}

static mg_status json_number(const cJSON *o, const char *key, const char *path, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return MG_FAIL(MG_ERR_FORMAT, "%s: opt_param_scheduler lacks the number '%s'", path, key);
    *out = v->valuedouble;
    return MG_OK;
}

static mg_status json_style(const cJSON *o, const char *key, const char *path,
                            const char *const *names, int n, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    for (int i = 0; cJSON_IsString(v) && i < n; i++)
        if (!strcmp(v->valuestring, names[i])) {
            *out = i;
            return MG_OK;
        }
    return MG_FAIL(MG_ERR_FORMAT, "%s: opt_param_scheduler's '%s' is missing or unknown", path,
                   key);
}

mg_status mg_lr_saved_from_json(const cJSON *obj, const char *path, mg_lr_saved *out) {
    *out = (mg_lr_saved){0};
    if (!obj) return MG_OK;
    if (!cJSON_IsObject(obj))
        return MG_FAIL(MG_ERR_FORMAT, "%s: opt_param_scheduler is not an object", path);
    mg_lr_saved s = {.present = true};
    double decay = 0, incr = 0;
    int style = 0, wd_style = 0;
    MG_CHECK(json_number(obj, "max_lr", path, &s.max_lr));
    MG_CHECK(json_number(obj, "min_lr", path, &s.min_lr));
    MG_CHECK(json_number(obj, "lr_warmup_steps", path, &s.warmup_steps));
    MG_CHECK(json_number(obj, "lr_decay_steps", path, &decay));
    MG_CHECK(json_style(obj, "lr_decay_style", path, lr_styles, N_LR_STYLES, &style));
    MG_CHECK(json_number(obj, "start_wd", path, &s.start_wd));
    MG_CHECK(json_number(obj, "end_wd", path, &s.end_wd));
    MG_CHECK(json_number(obj, "wd_incr_steps", path, &incr));
    MG_CHECK(json_style(obj, "wd_incr_style", path, wd_styles, N_WD_STYLES, &wd_style));
    if (decay != floor(decay) || incr != floor(incr) || fabs(decay) > 9e15 || fabs(incr) > 9e15)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: opt_param_scheduler's lr_decay_steps and wd_incr_steps must be "
                       "integers",
                       path);
    s.decay_steps = (int64_t)decay;
    s.wd_incr_steps = (int64_t)incr;
    s.style = (mg_lr_style)style;
    s.wd_style = (mg_wd_style)wd_style;
    s.decoupled = cJSON_GetObjectItemCaseSensitive(obj, "decoupled_max_lr") != NULL;
    if (s.decoupled) {
        MG_CHECK(json_number(obj, "decoupled_max_lr", path, &s.decoupled_max_lr));
        MG_CHECK(json_number(obj, "decoupled_min_lr", path, &s.decoupled_min_lr));
    }
    *out = s;
    return MG_OK;
}
