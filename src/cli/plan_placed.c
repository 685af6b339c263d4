/* `megatron plan`: the pipeline's layers as placed (cli/plan.h's has_placed), in the schedule's
 * model with the output layer and loss as train/metrics.h estimates them
 * (parallel/pipeline/placement.h). */
#include "cli/plan.h"
#include "train/metrics.h"

#include <stdlib.h>

mg_status mg_plan_build_placed(mg_plan *p) {
    const int pp = p->schedule.pp, n = pp * p->schedule.vpp;
    p->out_layers = mg_output_layer_cost(&p->cfg);
    if (!p->has_layers || pp < 2 || !(p->out_layers > 0)) return MG_OK;
    int *count = malloc((size_t)n * sizeof *count);
    if (!count) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n; k++) count[k] = p->chunks[k].count;
    mg_status st = mg_pp_placement_model(&p->schedule, count, p->out_layers, &p->placed);
    free(count);
    MG_CHECK(st);
    p->has_placed = true;
    return MG_OK;
}
