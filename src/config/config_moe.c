/* The Mixture-of-Experts flags: Megatron's defaults and checks (transformer_config.py,
 * arguments.py) and --moe-layer-freq's pattern language (arguments.py: moe_freq_type). */
#include "config/flags.h"
#include "core/log.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

/* ---- --moe-layer-freq ----
 * An integer N (layer l is MoE when l % N == 0) or a list expression made of 0/1 list literals,
 * `*` by a count, `+` (concatenation) and parentheses: "([1]*3+[0]*1)*3". A recursive-descent
 * parser over the expression, into a bounded list. */

typedef struct {
    const char *s; /* the next character */
    uint8_t *out;  /* (cap) */
    int n, cap;
    bool overflow;
} pattern_parser;

static void skip_space(pattern_parser *p) {
    while (isspace((unsigned char)*p->s)) p->s++;
}

static bool parse_count(pattern_parser *p, long *v) {
    skip_space(p);
    if (!isdigit((unsigned char)*p->s)) return false;
    char *end;
    *v = strtol(p->s, &end, 10);
    p->s = end;
    return *v >= 0 && *v <= 1 << 20;
}

static bool parse_sum(pattern_parser *p);

static void push(pattern_parser *p, uint8_t v) {
    if (p->n < p->cap)
        p->out[p->n] = v;
    else
        p->overflow = true;
    p->n++;
}

/* atom := '[' (0|1) (',' (0|1))* ']' | '(' sum ')' */
static bool parse_atom(pattern_parser *p) {
    skip_space(p);
    if (*p->s == '(') {
        p->s++;
        if (!parse_sum(p)) return false;
        skip_space(p);
        if (*p->s != ')') return false;
        p->s++;
        return true;
    }
    if (*p->s != '[') return false;
    p->s++;
    for (;;) {
        long v;
        if (!parse_count(p, &v) || v > 1) return false;
        push(p, (uint8_t)v);
        skip_space(p);
        if (*p->s == ']') break;
        if (*p->s != ',') return false;
        p->s++;
    }
    p->s++;
    return true;
}

/* term := atom ('*' count)* — repeats what the atom appended */
static bool parse_term(pattern_parser *p) {
    int start = p->n;
    if (!parse_atom(p)) return false;
    for (;;) {
        skip_space(p);
        if (*p->s != '*') return true;
        p->s++;
        long times;
        if (!parse_count(p, &times)) return false;
        int len = p->n - start;
        if (times == 0) {
            p->n = start;
            continue;
        }
        for (long t = 1; t < times; t++)
            for (int i = 0; i < len; i++) push(p, start + i < p->cap ? p->out[start + i] : 0);
        if (p->n > p->cap) return true; /* too long: reported by the caller */
    }
}

/* sum := term ('+' term)* */
static bool parse_sum(pattern_parser *p) {
    if (!parse_term(p)) return false;
    for (;;) {
        skip_space(p);
        if (*p->s != '+') return true;
        p->s++;
        if (!parse_term(p)) return false;
    }
}

mg_status mg_config_moe_layers(const mg_config *c, uint8_t *is_moe, int n_layers) {
    const char *f = c->moe_layer_freq;
    if (c->num_experts <= 0) {
        memset(is_moe, 0, (size_t)n_layers);
        return MG_OK;
    }
    const char *q = f;
    while (isspace((unsigned char)*q)) q++;
    if (isdigit((unsigned char)*q)) { /* an integer: every N-th layer */
        char *end;
        long every = strtol(q, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (*end == '\0') {
            if (every < 1 || every > INT_MAX)
                return USAGE("--moe-layer-freq %s must be a positive integer or a 0/1 list such "
                             "as \"([1]*3+[0])*2\"",
                             f);
            for (int l = 0; l < n_layers; l++) is_moe[l] = l % every == 0;
            return MG_OK;
        }
    }
    pattern_parser p = {.s = f, .out = is_moe, .cap = n_layers};
    bool ok = parse_sum(&p);
    skip_space(&p);
    if (!ok || *p.s != '\0')
        return USAGE("--moe-layer-freq '%s' is not an integer or a 0/1 list expression such as "
                     "\"([1]*3+[0]*1)*3\" (near '%.16s')",
                     f, p.s);
    if (p.n != n_layers)
        return USAGE("--moe-layer-freq '%s' describes %d layers, but --num-layers is %d; give "
                     "one 0/1 entry per layer",
                     f, p.n, n_layers);
    return MG_OK;
}

/* ---- the checks ---- */

static mg_status non_negative(const char *flag, double v) {
    return v >= 0 ? MG_OK : USAGE("%s must not be negative, got %g", flag, v);
}

/* Flags of the expert layout that need experts to mean anything. */
static mg_status check_dense(const mg_config *c) {
    if (c->num_experts < 0)
        return USAGE("--num-experts must be positive, got %d (omit it for a dense model)",
                     c->num_experts);
    if (c->moe_router_force_load_balancing)
        return USAGE("--moe-router-force-load-balancing needs --num-experts (a dense model has no "
                     "router)");
    if (c->expert_model_parallel_size > 1)
        return USAGE("--expert-model-parallel-size %d needs --num-experts (a dense model has no "
                     "experts to split)",
                     c->expert_model_parallel_size);
    return MG_OK;
}

mg_status mg_config_check_moe(mg_config *c) {
    MG_CHECK(mg_config_check_echo(c));
    if (c->num_experts <= 0) return check_dense(c);
    const int E = c->num_experts, k = c->moe_router_topk;
    if (c->moe_ffn_hidden_size == -1) {
        mg_log_info("> --moe-ffn-hidden-size not given: the experts use --ffn-hidden-size %d",
                    c->ffn_hidden_size);
        c->moe_ffn_hidden_size = c->ffn_hidden_size;
    }
    if (c->moe_ffn_hidden_size <= 0)
        return USAGE("--moe-ffn-hidden-size must be positive, got %d", c->moe_ffn_hidden_size);
    if (k < 1 || k > E)
        return USAGE("--moe-router-topk %d must be between 1 and --num-experts %d", k, E);
    if (k == 1 && c->moe_router_score_function == MG_MOE_SCORE_SOFTMAX &&
        !c->moe_router_pre_softmax)
        return USAGE("--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax (a "
                     "softmax over one logit has no gradient), as Megatron requires");
    int ep = c->expert_model_parallel_size;
    if (ep < 1) return USAGE("--expert-model-parallel-size must be positive, got %d", ep);
    if (E % ep)
        return USAGE("--num-experts %d is not divisible by --expert-model-parallel-size %d; each "
                     "expert-parallel rank holds the same number of experts",
                     E, ep);
    /* Megatron carves the expert-parallel groups out of the data-parallel ones */
    int dp = mg_config_data_parallel_size(c);
    if (ep > 1 && dp % ep)
        return USAGE("--expert-model-parallel-size %d does not divide the data-parallel size %d "
                     "(world %d / tensor %d / pipeline %d); launch a multiple of %d ranks per "
                     "model replica",
                     ep, dp, c->world_size, c->tensor_model_parallel_size,
                     c->pipeline_model_parallel_size, ep);
    int etp = c->expert_tensor_parallel_size;
    if (etp != -1 && etp != 1)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "--expert-tensor-parallel-size %d is not supported yet (experts are whole "
                       "on each rank); use --expert-tensor-parallel-size 1",
                       etp);
    if (c->tensor_model_parallel_size > 1)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "--num-experts with --tensor-model-parallel-size %d is not supported yet; "
                       "split MoE models with --expert-model-parallel-size and data or pipeline "
                       "parallelism",
                       c->tensor_model_parallel_size);
    if (c->moe_router_group_topk > 0 || c->moe_router_num_groups > 0) {
        int g = c->moe_router_num_groups, gk = c->moe_router_group_topk;
        if (g <= 0)
            return USAGE("--moe-router-group-topk needs --moe-router-num-groups (group-limited "
                         "routing)");
        if (gk <= 0) return USAGE("--moe-router-num-groups needs --moe-router-group-topk");
        if (E % g)
            return USAGE("--num-experts %d is not divisible by --moe-router-num-groups %d", E, g);
        if (gk > g)
            return USAGE("--moe-router-group-topk %d exceeds --moe-router-num-groups %d", gk, g);
        if (k < gk || (long)gk * (E / g) < k)
            return USAGE("--moe-router-topk %d cannot be chosen from %d group(s) of %d experts "
                         "(--moe-router-group-topk); each selected group contributes topk / "
                         "group-topk experts",
                         k, gk, E / g);
    }
    if (c->moe_router_enable_expert_bias && c->moe_router_score_function != MG_MOE_SCORE_SIGMOID)
        return USAGE("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid "
                     "(Megatron: expert bias for aux-loss-free routing only supports sigmoid "
                     "scores)");
    MG_CHECK(non_negative("--moe-router-bias-update-rate", c->moe_router_bias_update_rate));
    MG_CHECK(non_negative("--moe-aux-loss-coeff", c->moe_aux_loss_coeff));
    MG_CHECK(non_negative("--moe-z-loss-coeff", c->moe_z_loss_coeff));
    MG_CHECK(non_negative("--moe-router-topk-scaling-factor", c->moe_router_topk_scaling_factor));
    if (c->moe_expert_capacity_factor < 0) c->moe_expert_capacity_factor = -1; /* Megatron: None */
    if (c->moe_pad_expert_input_to_capacity && c->moe_expert_capacity_factor < 0)
        return USAGE("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    if (c->moe_expert_capacity_factor == 0)
        return USAGE("--moe-expert-capacity-factor 0 drops every token; use a positive factor "
                     "(1.0 is the balanced load) or omit it for dropless routing");
    if (c->moe_shared_expert_intermediate_size < 0)
        return USAGE("--moe-shared-expert-intermediate-size must be positive, got %d",
                     c->moe_shared_expert_intermediate_size);
    if (c->moe_shared_expert_overlap && c->moe_token_dispatcher_type != MG_MOE_DISPATCH_ALLTOALL)
        return USAGE("--moe-shared-expert-overlap only works with --moe-token-dispatcher-type "
                     "alltoall");
    uint8_t *is_moe = malloc((size_t)c->num_layers);
    if (!is_moe) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    mg_status st = mg_config_moe_layers(c, is_moe, c->num_layers);
    free(is_moe);
    return st;
}
