/* The parallel layout of a run from its config and world size (layout.h). */
#include "parallel/layout.h"

#include "parallel/pipeline/layers.h"

#include <stdio.h>
#include <string.h>

mg_status mg_layout_sizes(const mg_config *c, int world_size, mg_parallel_sizes *out) {
    if (c->parallel_order[0] && c->use_tp_pp_dp_mapping &&
        strcmp(c->parallel_order, MG_PARALLEL_ORDER_TP_PP_DP))
        return MG_FAIL(MG_ERR_USAGE,
                       "--use-tp-pp-dp-mapping means --parallel-order %s, but --parallel-order "
                       "is %s; give one of them",
                       MG_PARALLEL_ORDER_TP_PP_DP, c->parallel_order);
    *out = (mg_parallel_sizes){.world_size = world_size,
                               .tp = c->tensor_model_parallel_size,
                               .pp = c->pipeline_model_parallel_size,
                               .cp = c->context_parallel_size,
                               .ep = c->expert_model_parallel_size,
                               .etp = c->expert_tensor_parallel_size};
    snprintf(out->order, sizeof out->order, "%s",
             c->parallel_order[0]      ? c->parallel_order
             : c->use_tp_pp_dp_mapping ? MG_PARALLEL_ORDER_TP_PP_DP
                                       : MG_PARALLEL_ORDER_DEFAULT);
    return MG_OK;
}

mg_pp_schedule_params mg_layout_schedule(const mg_config *c, int vpp, int microbatches) {
    int group = c->microbatch_group_size_per_vp_stage;
    return (mg_pp_schedule_params){.pp = c->pipeline_model_parallel_size,
                                   .vpp = vpp,
                                   .microbatches = microbatches,
                                   .group = group > 0 ? group : 0,
                                   .no_overlap_p2p = c->no_overlap_p2p_communication};
}

mg_status mg_layout_check(const mg_config *c, int world_size) {
    mg_parallel_sizes s;
    int dp, vpp;
    MG_CHECK(mg_layout_sizes(c, world_size, &s));
    MG_CHECK(mg_parallel_sizes_check(&s, &dp, NULL));
    mg_layers_params lp = mg_layers_params_of(c);
    MG_CHECK(mg_layers_check(&lp, &vpp));
    mg_pp_schedule_params sched =
        mg_layout_schedule(c, vpp, c->global_batch_size / (c->micro_batch_size * dp));
    return mg_pp_schedule_check(&sched);
}
