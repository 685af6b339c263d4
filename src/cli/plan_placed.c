/* `megatron plan`: the pipeline's layers as placed (cli/plan.h's has_placed), in the schedule's
 * model with the output layer and loss as train/metrics.h estimates them
 * (parallel/pipeline/placement.h). */
#include "cli/plan.h"
#include "train/metrics.h"

mg_status mg_plan_build_placed(mg_plan *p) {
    const int pp = p->schedule.pp;
    p->out_layers = mg_output_layer_cost(&p->cfg);
    if (!p->has_layers || pp < 2 || !(p->out_layers > 0)) return MG_OK;
    MG_CHECK(mg_pp_placement_model(&p->schedule, p->chunks, p->out_layers, true, &p->placed));
    p->has_placed = true;
    return MG_OK;
}
