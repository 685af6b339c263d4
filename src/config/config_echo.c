/* The expert-parallel receive budget and ECHO's spare expert slots (core/echo_plan.h): the
 * checks of their flags, shared by `megatron plan`, which shows both, and `megatron train`
 * (config/flags.h). */
#include "config/flags.h"

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

/* The spare slots in all: --moe-num-echo-experts, Megatron's default the number of experts. */
int mg_config_echo_slots(const mg_config *c) {
    return c->moe_num_echo_experts >= 0 ? c->moe_num_echo_experts : c->num_experts;
}

bool mg_config_echo_bin_packing(const mg_config *c) {
    const int a = c->moe_echo_assignment;
    return a == 2 || (a == 0 && mg_config_echo_slots(c) == c->expert_model_parallel_size);
}

mg_echo_params mg_config_echo_params(const mg_config *c) {
    return (mg_echo_params){.ep = c->expert_model_parallel_size,
                            .experts = c->num_experts,
                            .spares = mg_config_echo_slots(c),
                            .method = mg_config_echo_bin_packing(c) ? MG_ECHO_APPROX_BIN_PACKING
                                                                    : MG_ECHO_ONE_SHOT_GREEDY,
                            .threshold = c->moe_echo_threshold_multiplier};
}

double mg_config_rank_capacity(const mg_config *c) {
    return c->moe_expert_rank_capacity_factor != -1 ? c->moe_expert_rank_capacity_factor
                                                    : c->moe_received_token_capacity;
}

mg_status mg_config_check_echo(const mg_config *c) {
    const double a = c->moe_expert_rank_capacity_factor, b = c->moe_received_token_capacity;
    if (a != -1 && b != -1 && a != b)
        return USAGE("--moe-expert-rank-capacity-factor %g and --moe-received-token-capacity %g "
                     "name the same receive budget; pass one",
                     a, b);
    const double f = mg_config_rank_capacity(c);
    if (f != -1 && !(f > 0))
        return USAGE("--moe-expert-rank-capacity-factor must be positive (1.0 is the balanced "
                     "share of routed tokens per rank), got %g",
                     f);
    if (f > 0 && c->num_experts <= 0)
        return USAGE("--moe-expert-rank-capacity-factor needs --num-experts");
    if (!c->moe_enable_echo) return MG_OK;
    const int ep = c->expert_model_parallel_size, n = mg_config_echo_slots(c);
    if (c->num_experts <= 0) return USAGE("--moe-enable-echo needs --num-experts");
    if (ep < 2)
        return USAGE("--moe-enable-echo needs --expert-model-parallel-size of at least 2: spare "
                     "slots clone hot experts onto other expert-parallel ranks");
    if (n < 1 || n % ep)
        return USAGE("--moe-num-echo-experts %d must be a positive multiple of "
                     "--expert-model-parallel-size %d (each rank holds the same number of spare "
                     "slots)",
                     n, ep);
    if (c->moe_expert_capacity_factor > 0)
        return USAGE("--moe-enable-echo with --moe-expert-capacity-factor: echo rebalances "
                     "dropless routing; drop the capacity factor (token dropping)");
    if (c->moe_echo_assignment == 2 && n != ep)
        return USAGE("--moe-echo-assignment approx_bin_packing assigns one spare slot per "
                     "expert-parallel rank: --moe-num-echo-experts must be %d, got %d",
                     ep, n);
    if (c->moe_echo_threshold_multiplier < 0)
        return USAGE("--moe-echo-threshold-multiplier must not be negative, got %g",
                     c->moe_echo_threshold_multiplier);
    if (c->moe_echo_threshold_multiplier > 0 && mg_config_echo_bin_packing(c))
        return USAGE("--moe-echo-threshold-multiplier applies to one_shot_greedy assignment; "
                     "approx_bin_packing (one spare slot per rank) frees no slots");
    return MG_OK;
}
