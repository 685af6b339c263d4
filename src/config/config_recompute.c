/* Activation recomputation's flags (config/flags.h): --recompute-activations resolved into the
 * selective granularity, and Megatron's checks of the granularity, method, layer count, modules
 * and --distribute-saved-activations, each in its words (its arguments.py and TransformerConfig).
 * The model reads the result (model/gpt.h: which layers and modules it recomputes). */
#include "config/flags.h"

#include <stdio.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

static const struct {
    const char *name;
    unsigned bit;
} k_modules[] = {{"core_attn", MG_RECOMPUTE_CORE_ATTN},
                 {"layernorm", MG_RECOMPUTE_LAYERNORM},
                 {"mlp", MG_RECOMPUTE_MLP},
                 {"mlp_act", MG_RECOMPUTE_MLP_ACT},
                 {"moe", MG_RECOMPUTE_MOE},
                 {"moe_act", MG_RECOMPUTE_MOE_ACT},
                 {"shared_experts", MG_RECOMPUTE_SHARED_EXPERTS}};
#define N_MODULES (sizeof k_modules / sizeof k_modules[0])
#define ALLOWED   "{'core_attn', 'layernorm', 'mlp', 'mlp_act', 'moe', 'moe_act', 'shared_experts'}"

/* The bit of one module name; 0 for a name this build does not know. */
static unsigned module_bit(const char *w) {
    for (size_t i = 0; i < N_MODULES; i++)
        if (strcmp(w, k_modules[i].name) == 0) return k_modules[i].bit;
    return 0;
}

bool mg_config_recompute_full(const mg_config *c) {
    return strcmp(c->recompute_granularity, "full") == 0;
}

unsigned mg_config_recompute_modules(const mg_config *c) {
    if (strcmp(c->recompute_granularity, "selective") != 0) return 0;
    if (!c->recompute_modules[0]) return MG_RECOMPUTE_CORE_ATTN; /* Megatron's default */
    char buf[sizeof c->recompute_modules];
    snprintf(buf, sizeof buf, "%s", c->recompute_modules);
    unsigned bits = 0;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        bits |= module_bit(w);
    return bits;
}

static mg_status check_modules(const mg_config *c) {
    char buf[sizeof c->recompute_modules];
    snprintf(buf, sizeof buf, "%s", c->recompute_modules);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (strcmp(w, "mla_up_proj") == 0)
            return USAGE("mla_up_proj in recompute_modules is only supported with "
                         "multi_latent_attention (Megatron's words; there is no multi-latent "
                         "attention here)");
        if (!module_bit(w))
            return USAGE("Invalid choices for recompute_modules: {'%s'}. Allowed modules are: "
                         "%s",
                         w, ALLOWED);
    }
    if ((mg_config_recompute_modules(c) & MG_RECOMPUTE_SHARED_EXPERTS) &&
        c->moe_shared_expert_intermediate_size > 0 && c->moe_shared_expert_overlap)
        return USAGE("shared_experts recompute cannot work with --moe-shared-expert-overlap.");
    return MG_OK;
}

mg_status mg_config_check_recompute(mg_config *c) {
    if (c->recompute_activations) /* Megatron: it means the selective granularity */
        snprintf(c->recompute_granularity, sizeof c->recompute_granularity, "selective");
    const bool full = mg_config_recompute_full(c);
    const bool selective = strcmp(c->recompute_granularity, "selective") == 0;
    const int pp = c->pipeline_model_parallel_size > 0 ? c->pipeline_model_parallel_size : 1;
    if (c->distribute_saved_activations) {
        if (c->tensor_model_parallel_size <= 1)
            return USAGE("can distribute recomputed activations only across tensor model "
                         "parallel groups");
        if (!full)
            return USAGE("distributed recompute activations is only application to full "
                         "recompute granularity");
        if (!c->recompute_method[0])
            return USAGE("for distributed recompute activations to work you need to use a "
                         "recompute method");
    }
    if (selective && c->recompute_method[0])
        return USAGE("recompute method is not yet supported for selective recomputing "
                     "granularity");
    if (full && !c->recompute_method[0])
        return USAGE("Using recompute_granularity: full so recompute_method must be \"block\" or "
                     "\"uniform\"");
    /* Megatron asks for a count where full needs one; a count past the layers of a stage would
     * recompute no more than all of them: refused here, the likelier mistake */
    const int per_stage = c->num_layers / pp;
    if (full && (c->recompute_num_layers < 1 || c->recompute_num_layers > per_stage))
        return USAGE("When using recompute_granularity: full recompute_num_layers must be between "
                     "1 and num_layers_per_pipeline_rank: %d (got %s%d)",
                     per_stage, c->recompute_num_layers < 0 ? "none, " : "",
                     c->recompute_num_layers < 0 ? 0 : c->recompute_num_layers);
    if (selective && c->recompute_num_layers != -1)
        return USAGE("When using recompute_granularity: selective recompute_num_layers must be "
                     "None.");
    if ((full || selective) && c->distribute_saved_activations && c->sequence_parallel)
        return USAGE("distribute_saved_activations: True must be false when sequence parallel is "
                     "enabled: True");
    return selective ? check_modules(c) : MG_OK;
}
