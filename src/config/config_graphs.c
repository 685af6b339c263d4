/* The CUDA-graph checks of mg_config_validate (config/flags.h): Megatron's deprecated spellings
 * and its scope list resolved into cfg->cuda_graph_impl, and the combinations this build's graphs
 * do not hold yet refused in one line each. */
#include "config/flags.h"

#include <stdio.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

/* Whether the space-separated list holds `word`. */
static bool list_has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

static const char *const k_scopes[] = {"attn",           "mlp",           "moe", "moe_router",
                                       "moe_preprocess", "full_iteration"};

static mg_status check_scopes(const char *flag, const char *list) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        bool known = false;
        for (size_t i = 0; i < sizeof k_scopes / sizeof k_scopes[0]; i++)
            known = known || strcmp(w, k_scopes[i]) == 0;
        if (!known)
            return USAGE("%s: unknown scope '%s' (choose from attn, mlp, moe, moe_router, "
                         "moe_preprocess, full_iteration)",
                         flag, w);
    }
    return MG_OK;
}

unsigned mg_config_graph_parts(const mg_config *c) {
    const char *scopes = c->cuda_graph_scope[0] ? c->cuda_graph_scope : c->cuda_graph_modules;
    if (!scopes[0]) return MG_GRAPH_SCOPE_ATTN | MG_GRAPH_SCOPE_MLP | MG_GRAPH_SCOPE_MOE;
    return (list_has(scopes, "attn") ? MG_GRAPH_SCOPE_ATTN : 0u) |
           (list_has(scopes, "mlp") ? MG_GRAPH_SCOPE_MLP : 0u) |
           (list_has(scopes, "moe") ? MG_GRAPH_SCOPE_MOE : 0u) |
           (list_has(scopes, "moe_router") ? MG_GRAPH_SCOPE_MOE_ROUTER : 0u) |
           (list_has(scopes, "moe_preprocess") ? MG_GRAPH_SCOPE_MOE_PREPROCESS : 0u);
}

mg_status mg_config_check_graphs(mg_config *c) {
    if (c->enable_cuda_graph) {
        if (c->cuda_graph_impl != MG_GRAPH_NONE && c->cuda_graph_impl != MG_GRAPH_LOCAL)
            return USAGE("--enable-cuda-graph is deprecated, use --cuda-graph-impl=local instead "
                         "(not together with another --cuda-graph-impl)");
        c->cuda_graph_impl = MG_GRAPH_LOCAL;
    }
    if (c->external_cuda_graph) {
        if (c->cuda_graph_impl != MG_GRAPH_NONE &&
            c->cuda_graph_impl != MG_GRAPH_TRANSFORMER_ENGINE)
            return USAGE("--external-cuda-graph is deprecated, use "
                         "--cuda-graph-impl=transformer_engine instead (not together with another "
                         "--cuda-graph-impl)");
        c->cuda_graph_impl = MG_GRAPH_TRANSFORMER_ENGINE;
    }
    if (c->cuda_graph_modules[0] && c->cuda_graph_scope[0])
        return USAGE("--cuda-graph-scope is the older spelling of --cuda-graph-modules: give one "
                     "of them");
    const char *flag = c->cuda_graph_scope[0] ? "--cuda-graph-scope" : "--cuda-graph-modules";
    const char *scopes = c->cuda_graph_scope[0] ? c->cuda_graph_scope : c->cuda_graph_modules;
    MG_CHECK(check_scopes(flag, scopes));
    if (scopes[0] && c->cuda_graph_impl == MG_GRAPH_NONE)
        return USAGE("%s needs --cuda-graph-impl (local or transformer_engine)", flag);
    if (list_has(scopes, "full_iteration")) {
        if (strcmp(scopes, "full_iteration") != 0)
            return USAGE("%s full_iteration captures the whole iteration: it cannot be combined "
                         "with other scopes",
                         flag);
        if (c->cuda_graph_impl == MG_GRAPH_TRANSFORMER_ENGINE)
            return USAGE("%s full_iteration is only supported with --cuda-graph-impl local", flag);
        c->cuda_graph_impl = MG_GRAPH_FULL_ITERATION;
    }
    if (c->cuda_graph_impl == MG_GRAPH_NONE) return MG_OK;
    if (c->cuda_graph_warmup_steps < 1)
        return USAGE("--cuda-graph-warmup-steps must be at least 1 here, got %d: the first eager "
                     "step builds the GEMM and attention plans and sizes the workspace, which a "
                     "capture cannot",
                     c->cuda_graph_warmup_steps);
    if (list_has(scopes, "moe") &&
        (list_has(scopes, "moe_router") || list_has(scopes, "moe_preprocess")))
        return USAGE("%s: moe captures the whole MoE sublayer, its router and preprocessing "
                     "included; name moe, or moe_router and moe_preprocess",
                     flag);
    /* what the graphs cannot hold yet: a per-step value the host computes */
    if (c->eod_mask_loss && c->calculate_per_token_loss && c->num_experts > 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "CUDA graphs with --eod-mask-loss, --calculate-per-token-loss and MoE "
                       "layers: the aux losses' weight 1 / (unmasked tokens) is a per-step host "
                       "value; drop one of them");
    if (mg_config_rank_capacity(c) > 0 && c->expert_model_parallel_size > 1 &&
        (c->cuda_graph_impl == MG_GRAPH_FULL_ITERATION ||
         (mg_config_graph_parts(c) & MG_GRAPH_SCOPE_MOE)))
        return USAGE("--moe-expert-rank-capacity-factor with CUDA graphs of whole MoE layers: a "
                     "step over the receive budget takes extra dispatch rounds that the host "
                     "counts; graph attn, moe_router and moe_preprocess only, or drop the budget");
    return MG_OK;
}
