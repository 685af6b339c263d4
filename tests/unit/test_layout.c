/* The parallel layout of a run from its config and world size (src/parallel/layout.c): the sizes
 * and rank order `megatron train` and `megatron plan` read from the flags, the schedule of a
 * step, and the checks that run on every rank before the ranks meet. */
#include "test.h"

#include "config/flags.h"
#include "core/status.h"
#include "parallel/layout.h"

#include <string.h>

/* Megatron's defaults with a small model: L layers, micro batch 1, global batch gbs (a validated
 * config's fields, set directly). */
static mg_config run_config(int tp, int pp, int L, int gbs) {
    mg_config c;
    mg_config_defaults(&c);
    c.tensor_model_parallel_size = tp;
    c.pipeline_model_parallel_size = pp;
    c.num_layers = L;
    c.micro_batch_size = 1;
    c.global_batch_size = gbs;
    return c;
}

MG_TEST(layout_sizes_read_the_flags) {
    mg_config c = run_config(2, 4, 8, 8);
    c.context_parallel_size = 1;
    c.expert_model_parallel_size = 2;
    c.expert_tensor_parallel_size = -1;
    mg_parallel_sizes s;
    MG_EXPECT_OK(mg_layout_sizes(&c, 16, &s));
    MG_EXPECT(s.world_size == 16 && s.tp == 2 && s.pp == 4 && s.cp == 1 && s.ep == 2 && s.etp == -1,
              "sizes %d: tp %d pp %d cp %d ep %d etp %d", s.world_size, s.tp, s.pp, s.cp, s.ep,
              s.etp);
    MG_EXPECT(!strcmp(s.order, MG_PARALLEL_ORDER_DEFAULT), "default order %s", s.order);
    /* the groups they give: the data-parallel sizes from what the world leaves, 16 / (2 x 4)
     * and 16 / (expert tensor 2 (= tp) x expert 2 x pipeline 4) */
    mg_parallel_layout l;
    MG_EXPECT_OK(mg_parallel_layout_build(&s, &l));
    MG_EXPECT(l.dp == 2 && l.edp == 1, "dp %d edp %d, want 2 and 1", l.dp, l.edp);
    mg_parallel_layout_free(&l);
}

MG_TEST(layout_sizes_rank_order) {
    mg_config c = run_config(2, 2, 4, 8);
    mg_parallel_sizes s;
    c.use_tp_pp_dp_mapping = true;
    MG_EXPECT_OK(mg_layout_sizes(&c, 8, &s));
    MG_EXPECT(!strcmp(s.order, MG_PARALLEL_ORDER_TP_PP_DP), "--use-tp-pp-dp-mapping: %s", s.order);
    /* both flags naming the same order is fine */
    snprintf(c.parallel_order, sizeof c.parallel_order, "%s", MG_PARALLEL_ORDER_TP_PP_DP);
    MG_EXPECT_OK(mg_layout_sizes(&c, 8, &s));
    MG_EXPECT(!strcmp(s.order, MG_PARALLEL_ORDER_TP_PP_DP), "both: %s", s.order);
    c.use_tp_pp_dp_mapping = false;
    snprintf(c.parallel_order, sizeof c.parallel_order, "tp-dp-pp");
    MG_EXPECT_OK(mg_layout_sizes(&c, 8, &s));
    MG_EXPECT(!strcmp(s.order, "tp-dp-pp"), "--parallel-order: %s", s.order);
    /* two different orders: refused by the sizes and by the check alike */
    c.use_tp_pp_dp_mapping = true;
    MG_EXPECT_ERROR(mg_layout_sizes(&c, 8, &s), MG_ERR_USAGE,
                    "--use-tp-pp-dp-mapping means --parallel-order tp-cp-ep-pp-dp, but "
                    "--parallel-order is tp-dp-pp; give one of them");
    MG_EXPECT_ERROR(mg_layout_check(&c, 8), MG_ERR_USAGE, "give one of them");
}

MG_TEST(layout_schedule_of_the_flags) {
    mg_config c = run_config(1, 4, 8, 16);
    mg_pp_schedule_params s = mg_layout_schedule(&c, 2, 6);
    MG_EXPECT(s.pp == 4 && s.vpp == 2 && s.microbatches == 6 && s.group == 0 && !s.no_overlap_p2p,
              "pp %d vpp %d m %d group %d overlap %d", s.pp, s.vpp, s.microbatches, s.group,
              !s.no_overlap_p2p);
    c.microbatch_group_size_per_vp_stage = 5;
    c.no_overlap_p2p_communication = true;
    s = mg_layout_schedule(&c, 2, 10);
    MG_EXPECT(s.group == 5 && s.no_overlap_p2p, "group %d no-overlap %d", s.group,
              s.no_overlap_p2p);
}

MG_TEST(layout_check_accepts_and_refuses) {
    /* 8 ranks of tp 2 x pp 2 leave dp 2: a global batch of 8 is 4 microbatches of 1 */
    mg_config c = run_config(2, 2, 4, 8);
    MG_EXPECT_OK(mg_layout_check(&c, 8));
    /* Megatron's initialize_model_parallel: the world must hold whole model replicas */
    MG_EXPECT_ERROR(mg_layout_check(&c, 6), MG_ERR_USAGE,
                    "world size 6 is not divisible by tensor (2) x pipeline (2)");
    /* the layer placement: 3 layers do not split over 2 pipeline ranks */
    c = run_config(1, 2, 3, 8);
    MG_EXPECT_ERROR(mg_layout_check(&c, 2), MG_ERR_USAGE, "is not divisible by");
    /* the schedule: with 2 virtual stages, 4 ranks of pp 2 leave dp 2, so a global batch of 2 is
     * one microbatch, fewer than the pipeline's 2 ranks; a batch of 4 is two, enough */
    c = run_config(1, 2, 4, 2);
    c.virtual_pipeline_model_parallel_size = 2;
    MG_EXPECT_ERROR(mg_layout_check(&c, 4), MG_ERR_USAGE,
                    "interleaving needs at least --pipeline-model-parallel-size 2 microbatches "
                    "per iteration, got 1");
    c.global_batch_size = 4;
    MG_EXPECT_OK(mg_layout_check(&c, 4));
}
