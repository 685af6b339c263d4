/* Host entry points of the ECHO planner (echo_plan.h holds the algorithm): shape checks and
 * error reporting around mg_echo_plan_run and mg_echo_reroute_run. */
#include "core/echo_plan.h"

#include "core/status.h"

#include <math.h>

mg_status mg_echo_params_check(const mg_echo_params *p) {
    if (p->ep < 1) return MG_FAIL(MG_ERR_USAGE, "echo: EP size %d, need at least 1", p->ep);
    if (p->experts < 1 || p->experts % p->ep != 0)
        return MG_FAIL(MG_ERR_USAGE, "echo: %d experts do not split evenly over EP %d", p->experts,
                       p->ep);
    if (p->spares < p->ep || p->spares % p->ep != 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "echo: %d spare expert slots do not split evenly over EP %d (need at "
                       "least one per rank)",
                       p->spares, p->ep);
    int per = p->spares / p->ep;
    if (per > p->experts)
        return MG_FAIL(MG_ERR_USAGE,
                       "echo: %d spare slots per EP rank exceed the %d experts they are chosen "
                       "from",
                       per, p->experts);
    if (p->method == MG_ECHO_APPROX_BIN_PACKING && per != 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "echo: approximate bin packing takes one spare slot per EP rank, got %d "
                       "(use one-shot greedy)",
                       per);
    if (p->method != MG_ECHO_APPROX_BIN_PACKING && p->method != MG_ECHO_ONE_SHOT_GREEDY)
        return MG_FAIL(MG_ERR_USAGE, "echo: unknown assignment method %d", (int)p->method);
    if (!isfinite(p->threshold))
        return MG_FAIL(MG_ERR_USAGE, "echo: the reclaim threshold multiplier is not finite");
    return MG_OK;
}

mg_status mg_echo_plan_compute(const mg_echo_params *p, const int32_t *counts, mg_echo_plan *plan,
                               int32_t *scratch, size_t scratch_ints) {
    MG_CHECK(mg_echo_params_check(p));
    if (scratch_ints < mg_echo_plan_scratch_ints(p))
        return MG_FAIL(MG_ERR_INTERNAL, "echo: plan scratch of %zu ints, need %zu", scratch_ints,
                       mg_echo_plan_scratch_ints(p));
    int64_t total = 0;
    for (size_t i = 0; i < (size_t)p->ep * p->experts; i++) {
        if (counts[i] < 0)
            return MG_FAIL(MG_ERR_INTERNAL, "echo: negative token count %d (rank %zu, expert %zu)",
                           counts[i], i / p->experts, i % p->experts);
        total += counts[i];
    }
    if (total > INT32_MAX)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "echo: %lld tokens in one step exceed int32",
                       (long long)total);
    mg_echo_plan_run(p, counts, plan, scratch);
    return MG_OK;
}

mg_status mg_echo_reroute(const mg_echo_params *p, const mg_echo_plan *plan, int rank, int tokens,
                          int k, const int32_t *ids, int32_t *out, int32_t *scratch,
                          size_t scratch_ints) {
    MG_CHECK(mg_echo_params_check(p));
    if (rank < 0 || rank >= p->ep)
        return MG_FAIL(MG_ERR_USAGE, "echo: rank %d outside EP size %d", rank, p->ep);
    if (tokens < 0 || k < 1 || k > p->experts)
        return MG_FAIL(MG_ERR_USAGE, "echo: %d tokens with top-%d of %d experts", tokens, k,
                       p->experts);
    if (scratch_ints < mg_echo_reroute_scratch_ints(p))
        return MG_FAIL(MG_ERR_INTERNAL, "echo: reroute scratch of %zu ints, need %zu", scratch_ints,
                       mg_echo_reroute_scratch_ints(p));
    int bad = -1;
    switch (mg_echo_reroute_run(p, plan, rank, tokens, k, ids, out, scratch, &bad)) {
    case MG_ECHO_REROUTE_BAD_ID:
        return MG_FAIL(MG_ERR_INTERNAL,
                       "echo: token %d's expert ids are out of [0, %d) or repeated", bad,
                       p->experts);
    case MG_ECHO_REROUTE_SHORT:
        return MG_FAIL(MG_ERR_INTERNAL,
                       "echo: the plan moves more of expert %d's tokens than rank %d routes to "
                       "it (plan counts disagree with the routing)",
                       bad, rank);
    default:
        return MG_OK;
    }
}
