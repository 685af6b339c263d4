/* `megatron plan --moe-enable-echo --moe-echo-token-counts FILE`: ECHO's plan (core/echo_plan.h)
 * for given token counts, FILE a JSON [EP][E] integer matrix (the tokens each expert-parallel
 * rank routes to each expert), as every rank would compute it in a step with those counts: the
 * average load, each home expert's spillover, each rank's spare capacity, the tokens each home
 * expert and each source rank sends to each spare slot (slot j lives on rank j / (N / EP)), and
 * the load of each rank before and after. */
#include "cli/plan.h"

#include "config/flags.h"
#include "core/file.h"
#include "core/echo_plan.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

struct mg_plan_echo {
    mg_echo_params par;
    int32_t *counts; /* (EP, E) */
    int32_t *before; /* (EP) tokens each rank's home experts receive */
    mg_echo_plan plan;
    int32_t *mem; /* the arrays above and the plan's */
};

/* counts[r][e] from the file's JSON matrix, checked against ep x experts. */
static mg_status read_counts(const char *path, int ep, int experts, int32_t *counts) {
    char *text = NULL;
    size_t size = 0;
    MG_CHECK(mg_file_read(path, &text, &size));
    cJSON *m = cJSON_ParseWithLength(text, size);
    free(text);
    mg_status st = MG_OK;
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != ep) {
        st = MG_FAIL(MG_ERR_USAGE,
                     "--moe-echo-token-counts %s: expected a JSON array of %d rows (one per "
                     "expert-parallel rank, --expert-model-parallel-size), got %s%d",
                     path, ep, cJSON_IsArray(m) ? "" : "no array, ",
                     cJSON_IsArray(m) ? cJSON_GetArraySize(m) : 0);
        goto done;
    }
    for (int r = 0; r < ep && st == MG_OK; r++) {
        const cJSON *row = cJSON_GetArrayItem(m, r);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != experts) {
            st = MG_FAIL(MG_ERR_USAGE,
                         "--moe-echo-token-counts %s: row %d must hold %d token counts (one per "
                         "expert, --num-experts)",
                         path, r, experts);
            break;
        }
        for (int e = 0; e < experts; e++) {
            const cJSON *v = cJSON_GetArrayItem(row, e);
            double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
            if (!(d >= 0 && d < (1 << 24)) || d != (double)(int32_t)d) {
                st = MG_FAIL(MG_ERR_USAGE,
                             "--moe-echo-token-counts %s: [%d][%d] is not a token count (an "
                             "integer from 0 to 2^24)",
                             path, r, e);
                break;
            }
            counts[(size_t)r * experts + e] = (int32_t)d;
        }
    }
done:
    cJSON_Delete(m);
    return st;
}

mg_status mg_plan_build_echo(mg_plan *p, const char *path) {
    const mg_config *c = &p->cfg;
    MG_CHECK(mg_config_check_echo(c)); /* the receive budget's factor too */
    if (!c->moe_enable_echo && !path) return MG_OK;
    if (!path)
        return MG_FAIL(MG_ERR_USAGE, "`megatron plan --moe-enable-echo` needs "
                                     "--moe-echo-token-counts FILE (a JSON [EP][E] matrix of the "
                                     "tokens each expert-parallel rank routes to each expert)");
    if (!c->moe_enable_echo)
        return MG_FAIL(MG_ERR_USAGE, "--moe-echo-token-counts needs --moe-enable-echo");
    struct mg_plan_echo *x = calloc(1, sizeof *x);
    if (!x) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the echo plan");
    p->echo = x;
    x->par = mg_config_echo_params(c);
    MG_CHECK(mg_echo_params_check(&x->par));
    const size_t R = (size_t)x->par.ep, E = (size_t)x->par.experts, S = (size_t)x->par.spares;
    const size_t scratch = mg_echo_plan_scratch_ints(&x->par);
    const size_t n = R * E + R + E + R + E * S + R * S + R * E + R + scratch;
    x->mem = malloc(n * sizeof *x->mem);
    if (!x->mem) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the echo plan");
    int32_t *w = x->mem;
    x->counts = w, w += R * E;
    x->before = w, w += R;
    x->plan.spillover = w, w += E;
    x->plan.spare_capacity = w, w += R;
    x->plan.home_to_spare = w, w += E * S;
    x->plan.rank_to_spare = w, w += R * S;
    x->plan.rank_from_home = w, w += R * E;
    x->plan.rank_load = w, w += R;
    MG_CHECK(read_counts(path, (int)R, (int)E, x->counts));
    const size_t per = E / R;
    for (size_t r = 0; r < R; r++) { /* rank r's home experts' tokens, from every source */
        int64_t s = 0;
        for (size_t src = 0; src < R; src++)
            for (size_t e = r * per; e < (r + 1) * per; e++) s += x->counts[src * E + e];
        x->before[r] = (int32_t)s;
    }
    return mg_echo_plan_compute(&x->par, x->counts, &x->plan, w, scratch);
}

void mg_plan_free_echo(mg_plan *p) {
    if (p->echo) free(p->echo->mem);
    free(p->echo);
    p->echo = NULL;
}

static cJSON *ints(const int32_t *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *matrix(const int32_t *v, size_t rows, size_t cols) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < rows; i++) cJSON_AddItemToArray(a, ints(v + i * cols, cols));
    return a;
}

void mg_plan_echo_json(const mg_plan *p, cJSON *root) {
    const struct mg_plan_echo *x = p->echo;
    if (!x) return;
    const size_t R = (size_t)x->par.ep, E = (size_t)x->par.experts, S = (size_t)x->par.spares;
    cJSON *o = cJSON_AddObjectToObject(root, "echo");
    if (!o) return;
    cJSON_AddNumberToObject(o, "num_echo_experts", (double)S);
    cJSON_AddStringToObject(o, "assignment",
                            x->par.method == MG_ECHO_APPROX_BIN_PACKING ? "approx_bin_packing"
                                                                        : "one_shot_greedy");
    cJSON_AddNumberToObject(o, "threshold_multiplier", x->par.threshold);
    cJSON_AddNumberToObject(o, "avg_tokens_per_ep_rank", (double)x->plan.avg);
    cJSON_AddItemToObject(o, "spillover_per_home_expert", ints(x->plan.spillover, E));
    cJSON_AddItemToObject(o, "spare_capacity_per_ep_rank", ints(x->plan.spare_capacity, R));
    cJSON_AddItemToObject(o, "tokens_from_home_expert_to_spare",
                          matrix(x->plan.home_to_spare, E, S));
    cJSON_AddItemToObject(o, "tokens_offloaded_from_ep_rank_to_spare",
                          matrix(x->plan.rank_to_spare, R, S));
    cJSON_AddItemToObject(o, "tokens_offloaded_from_ep_rank_from_home_expert",
                          matrix(x->plan.rank_from_home, R, E));
    cJSON_AddItemToObject(o, "tokens_per_ep_rank_before", ints(x->before, R));
    cJSON_AddItemToObject(o, "tokens_per_ep_rank_after", ints(x->plan.rank_load, R));
}

/* A bar of `width` columns for v out of max. */
static void bar(FILE *f, int64_t v, int64_t max, int width) {
    int n = max > 0 ? (int)((v * width + max / 2) / max) : 0;
    for (int i = 0; i < width; i++) fputc(i < n ? '#' : '.', f);
}

void mg_plan_echo_text(const mg_plan *p, FILE *f) {
    const struct mg_plan_echo *x = p->echo;
    if (!x) return;
    const int R = x->par.ep, E = x->par.experts, S = x->par.spares;
    int64_t max = 1, moved = 0;
    for (int r = 0; r < R; r++) {
        if (x->before[r] > max) max = x->before[r];
        if (x->plan.rank_load[r] > max) max = x->plan.rank_load[r];
    }
    for (int i = 0; i < R * S; i++) moved += x->plan.rank_to_spare[i];
    fprintf(f,
            "\nECHO (%d experts, %d spare slots, %d per expert-parallel rank; %s%s): average "
            "%lld tokens per rank, %lld moved to spare slots\n",
            E, S, S / R,
            x->par.method == MG_ECHO_APPROX_BIN_PACKING ? "approx_bin_packing" : "one_shot_greedy",
            x->par.threshold > 0 ? ", reclaim threshold" : "", (long long)x->plan.avg,
            (long long)moved);
    for (int r = 0; r < R; r++) {
        fprintf(f, "  ep rank %-3d before %9d |", r, x->before[r]);
        bar(f, x->before[r], max, 30);
        fprintf(f, "|  after %9d |", x->plan.rank_load[r]);
        bar(f, x->plan.rank_load[r], max, 30);
        fprintf(f, "|\n");
    }
    for (int j = 0; j < S; j++) {
        int home = -1, got = 0;
        for (int e = 0; e < E; e++)
            if (x->plan.home_to_spare[(size_t)e * S + j] > 0)
                home = e, got = x->plan.home_to_spare[(size_t)e * S + j];
        if (home >= 0)
            fprintf(f, "  spare slot %d (ep rank %d): %d tokens of expert %d\n", j, j / (S / R),
                    got, home);
    }
}
