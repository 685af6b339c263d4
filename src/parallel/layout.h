/* The parallel layout of a run from its config and world size: the one reading of Megatron's
 * parallel flags that `megatron train` (its checks before the ranks meet, then its groups) and
 * `megatron plan` share. It gives the sizes of the five dimensions and the rank order
 * (parallel/parallel_state.h: tensor, pipeline, context, expert and expert-tensor sizes from the
 * flags; data and expert-data sizes from what the world leaves), and the parameters of a step's
 * pipeline schedule (parallel/pipeline/schedule.h).
 *
 * The rank order: --parallel-order ORDER, else --use-tp-pp-dp-mapping's tp-cp-ep-pp-dp, else
 * Megatron's default tp-cp-ep-dp-pp; both flags naming different orders is refused.
 *
 * Usage (cli/train.c):
 *   MG_CHECK(mg_layout_check(&cfg, world_size));       // one line per refusal, on every rank
 *   mg_parallel_sizes s;
 *   MG_CHECK(mg_layout_sizes(&cfg, world_size, &s));
 *   MG_CHECK(mg_parallel_layout_build(&s, &layout));   // the groups
 *
 * Exports: mg_layout_sizes, mg_layout_schedule, mg_layout_check.
 * Needs: config (mg_config), parallel/parallel_state, parallel/pipeline/layers,
 * parallel/pipeline/schedule, core/status. */
#ifndef MG_PARALLEL_LAYOUT_H
#define MG_PARALLEL_LAYOUT_H

#include "core/status.h"
#include "parallel/parallel_state.h"
#include "parallel/pipeline/schedule.h"

/* The sizes of world_size ranks under c's flags, with the rank order resolved (above). Refuses
 * (MG_ERR_USAGE) only the two order flags disagreeing; the sizes themselves are judged by
 * mg_parallel_sizes_check or mg_parallel_layout_build. */
mg_status mg_layout_sizes(const mg_config *c, int world_size, mg_parallel_sizes *out);

/* The schedule of `microbatches` microbatches per step over vpp model chunks per pipeline rank,
 * with c's pipeline size, microbatch group (--microbatch-group-size-per-virtual-pipeline-stage)
 * and p2p overlap. */
mg_pp_schedule_params mg_layout_schedule(const mg_config *c, int vpp, int microbatches);

/* Every check of c's layout that needs no communication, in Megatron's order
 * (initialize_model_parallel, then the layer placement, then the schedule of one global batch):
 * the same flags give every rank the same one-line refusal (MG_ERR_USAGE). c is validated
 * (mg_config_validate), so its global batch divides into microbatches. */
mg_status mg_layout_check(const mg_config *c, int world_size);

#endif
