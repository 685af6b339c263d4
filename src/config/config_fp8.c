/* fp8 training's flags (config/flags.h): Megatron's checks of --fp8-format, --fp8-recipe, the
 * delayed-scaling settings and the bf16 layers, each in one line; the model
 * reads the result (model/fp8.h). */
#include "config/flags.h"

#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

bool mg_config_fp8(const mg_config *c) {
    return c->fp8_format[0] != '\0';
}

bool mg_config_fp8_layer(const mg_config *c, int layer) {
    if (!mg_config_fp8(c)) return false;
    if (!c->first_last_layers_bf16) return true;
    return layer >= c->num_layers_at_start_in_bf16 &&
           layer < c->num_layers - c->num_layers_at_end_in_bf16;
}

mg_status mg_config_check_fp8(const mg_config *c) {
    if (c->fp8_param_gather && !c->use_distributed_optimizer)
        return USAGE("--fp8-param-gather only supported with distributed optimizer or torch fsdp2 "
                     "(Megatron's words; add --use-distributed-optimizer)");
    if (!mg_config_fp8(c)) return MG_OK;
    const char *r = c->fp8_recipe;
    if (strcmp(r, "mxfp8") == 0)
        return USAGE("--fp8-recipe mxfp8 needs Blackwell's tensor cores (block-scaled MXFP8 "
                     "GEMMs); Hopper has none: use --fp8-recipe delayed");
    if (strcmp(r, "blockwise") == 0 && c->fp8_param_gather)
        return USAGE("--fp8-param-gather with --fp8-recipe blockwise is not supported yet (the "
                     "gathered weights' 128 x 128 scales); drop one of them");
    if (c->fp8_amax_history_len < 1)
        return USAGE("--fp8-amax-history-len must be at least 1, got %d", c->fp8_amax_history_len);
    if (c->fp8_margin < 0)
        return USAGE("--fp8-margin must be 0 or more (the scale is divided by 2^margin), got %d",
                     c->fp8_margin);
    if (c->num_layers_at_start_in_bf16 < 0 || c->num_layers_at_end_in_bf16 < 0)
        return USAGE("--num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16 must be 0 or "
                     "more, got %d and %d",
                     c->num_layers_at_start_in_bf16, c->num_layers_at_end_in_bf16);
    return MG_OK;
}
