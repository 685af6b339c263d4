/* Megatron-LM's process-group layout (megatron/core/parallel_state.py: RankGenerator,
 * generate_masked_orthogonal_rank_groups, initialize_model_parallel), as pure functions: no
 * communication, so `megatron plan` can print it and the tests can check every layout.
 *
 * The model. An order such as "tp-cp-ep-dp-pp" lists five dimensions, fastest first; a rank is
 *   rank = c[0] + c[1]*s[0] + c[2]*s[0]*s[1] + ...   (c = coordinates, s = sizes, in order)
 * Two generators share the order, as in Megatron:
 *   dense  (attention and dense layers): tp, cp, ep = 1, dp = world / (tp*pp*cp), pp
 *   expert (MoE layers):                 tp = etp, cp = 1, ep, dp = edp = world / (etp*ep*pp), pp
 * A group kind is a set of dimensions of one generator: its groups are the ranks that agree on all
 * other coordinates. Groups are listed in Megatron's order (the remaining coordinates counted
 * fastest-first in the order) and a group's ranks in Megatron's order (its own coordinates counted
 * the same way), so `ranks[offsets[g] + i]` is what new_group received for the g-th group.
 *
 *   kind                 generator  dims       Megatron's group
 *   tp                   dense      tp         _TENSOR_MODEL_PARALLEL_GROUP
 *   pp                   dense      pp         _PIPELINE_MODEL_PARALLEL_GROUP
 *   dp                   dense      dp         _DATA_PARALLEL_GROUP
 *   dp_cp                dense      dp,cp      _DATA_PARALLEL_GROUP_WITH_CP
 *   cp                   dense      cp         _CONTEXT_PARALLEL_GROUP
 *   mp                   dense      tp,pp      _MODEL_PARALLEL_GROUP
 *   tp_dp                dense      tp,dp      _TENSOR_AND_DATA_PARALLEL_GROUP
 *   tp_dp_cp             dense      tp,dp,cp   _TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP
 *   tp_cp                dense      tp,cp      _TENSOR_AND_CONTEXT_PARALLEL_GROUP
 *   embedding            (pp groups) first and last rank of each pp group (one rank if pp = 1)
 *   position_embedding   (pp groups) first rank of each pp group
 *   ep                   expert     ep         _EXPERT_MODEL_PARALLEL_GROUP
 *   expert_tp            expert     tp         _EXPERT_TENSOR_PARALLEL_GROUP
 *   expert_tp_ep         expert     tp,ep      _EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP
 *   expert_tp_ep_pp      expert     tp,ep,pp   _EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP
 *   expert_dp            expert     dp         _EXPERT_DATA_PARALLEL_GROUP
 *
 * Coordinates (mg_rank_coords). The dense generator's ep dimension has size 1, so its ep
 * coordinate is always 0 and is not reported; `ep` is the expert generator's (Megatron's
 * get_expert_model_parallel_rank). tp, cp, dp, pp are the dense coordinates, etp and edp the expert
 * ones; each equals the rank's index in its group of that kind (tp in its tp group, ep in its ep
 * group, etp in expert_tp, edp in expert_dp). (tp, cp, dp, pp) is a bijection onto the dense grid
 * and (etp, ep, edp, pp) onto the expert grid; pp is the same in both (Megatron requires equal
 * pipeline groups).
 *
 * Orders. Default "tp-cp-ep-dp-pp" (MG_PARALLEL_ORDER_DEFAULT); Megatron's
 * --use-tp-pp-dp-mapping is "tp-cp-ep-pp-dp"; our --parallel-order takes any dash-separated
 * permutation of tp, cp, ep, dp, pp (Megatron's RankGenerator also accepts orders that omit size-1
 * tokens or use upper case; we ask for all five, in lower case).
 *
 * Rejections (MG_ERR_USAGE, one line, with the reason and the valid choices), in Megatron's order:
 * a size < 1 (etp may be -1: = tp) or an invalid order; world % (tp*pp*cp) != 0; world %
 * (etp*ep*pp) != 0; an order not ending in pp with pp > 1 and edp != dp; dense and expert pipeline
 * groups that differ (only possible with custom orders).
 *
 * Usage:
 *   mg_parallel_sizes s = {.world_size = 16, .tp = 2, .pp = 4, .cp = 1, .ep = 1, .etp = -1};
 *   mg_parallel_layout l;
 *   MG_CHECK(mg_parallel_layout_build(&s, &l));
 *   const mg_group_list *tp = &l.groups[MG_GROUP_TP];   // tp->ranks[tp->offsets[g] + i]
 *   int g = mg_parallel_group_of(&l, MG_GROUP_DP, rank);
 *   mg_parallel_layout_free(&l);
 *
 * Exports: mg_group_kind, mg_group_kind_name, mg_group_kind_from_name, mg_parallel_sizes,
 * mg_rank_coords, mg_group_list, mg_parallel_layout, mg_parallel_order_parse,
 * mg_parallel_sizes_check, mg_parallel_layout_build, mg_parallel_layout_free,
 * mg_parallel_rank_coords, mg_parallel_group_of, mg_parallel_group_ranks.
 * Needs: core/status. */
#ifndef MG_PARALLEL_STATE_H
#define MG_PARALLEL_STATE_H

#include "core/status.h"

typedef enum {
    MG_GROUP_TP = 0,
    MG_GROUP_PP,
    MG_GROUP_DP,
    MG_GROUP_DP_CP,
    MG_GROUP_CP,
    MG_GROUP_MP,
    MG_GROUP_TP_DP,
    MG_GROUP_TP_DP_CP,
    MG_GROUP_TP_CP,
    MG_GROUP_EMBEDDING,
    MG_GROUP_POSITION_EMBEDDING,
    MG_GROUP_EP,
    MG_GROUP_EXPERT_TP,
    MG_GROUP_EXPERT_TP_EP,
    MG_GROUP_EXPERT_TP_EP_PP,
    MG_GROUP_EXPERT_DP,
    MG_GROUP_KIND_COUNT
} mg_group_kind;

/* "tp", "pp", "dp", "dp_cp", ..., "expert_dp" (the JSON names); NULL for an invalid kind. */
const char *mg_group_kind_name(mg_group_kind k);
/* The kind called name, or -1. */
int mg_group_kind_from_name(const char *name);

/* The five dimensions, as tokens of an order. */
enum { MG_DIM_TP = 0, MG_DIM_CP, MG_DIM_EP, MG_DIM_DP, MG_DIM_PP, MG_DIM_COUNT };

#define MG_PARALLEL_ORDER_DEFAULT  "tp-cp-ep-dp-pp"
#define MG_PARALLEL_ORDER_TP_PP_DP "tp-cp-ep-pp-dp" /* Megatron's --use-tp-pp-dp-mapping */
#define MG_PARALLEL_ORDER_MAX      64

typedef struct {
    int world_size;
    int tp;                            /* --tensor-model-parallel-size */
    int pp;                            /* --pipeline-model-parallel-size */
    int cp;                            /* --context-parallel-size */
    int ep;                            /* --expert-model-parallel-size */
    int etp;                           /* --expert-tensor-parallel-size; -1: = tp */
    char order[MG_PARALLEL_ORDER_MAX]; /* "" = MG_PARALLEL_ORDER_DEFAULT */
} mg_parallel_sizes;

typedef struct {
    int tp, cp, dp, pp; /* dense generator (its ep coordinate is always 0) */
    int ep, etp, edp;   /* expert generator (its cp is always 0, its pp equals pp) */
} mg_rank_coords;

/* The groups of one kind, in the layout that mg_comm_group_create takes. */
typedef struct {
    int n_groups;
    int *offsets; /* (n_groups + 1); group g is ranks[offsets[g] .. offsets[g+1]) */
    int *ranks;   /* (offsets[n_groups]) */
} mg_group_list;

typedef struct {
    mg_parallel_sizes sizes; /* as resolved: etp >= 1, order filled in */
    int dp;                  /* world / (tp*pp*cp) */
    int edp;                 /* world / (etp*ep*pp) */
    int order[MG_DIM_COUNT]; /* the MG_DIM_* of each order position, fastest first */
    mg_group_list groups[MG_GROUP_KIND_COUNT];
    int *member; /* (MG_GROUP_KIND_COUNT, world): group index of each rank per kind, -1 none */
    int *block;  /* the one allocation every array above points into */
} mg_parallel_layout;

/* Parses an order ("" = the default) into dims[MG_DIM_COUNT] (the MG_DIM_* of each position).
 * A dimension the order leaves out is appended (slowest) when sizes[d] is 1, as Megatron's
 * RankGenerator does, and refused otherwise (sizes NULL: every dimension must be named). */
mg_status mg_parallel_order_parse(const char *order, const int sizes[MG_DIM_COUNT],
                                  int dims[MG_DIM_COUNT]);
/* Every check of mg_parallel_layout_build, without building; *dp and *edp may be NULL. */
mg_status mg_parallel_sizes_check(const mg_parallel_sizes *s, int *dp, int *edp);
/* Validates s and builds every group. On failure *out is left empty (safe to free). */
mg_status mg_parallel_layout_build(const mg_parallel_sizes *s, mg_parallel_layout *out);
void mg_parallel_layout_free(mg_parallel_layout *l);

/* The coordinates of rank; MG_ERR_USAGE when rank is outside [0, world). */
mg_status mg_parallel_rank_coords(const mg_parallel_layout *l, int rank, mg_rank_coords *c);
/* Index of the group of kind k holding rank; -1 when none (embedding kinds, bad rank or kind). */
int mg_parallel_group_of(const mg_parallel_layout *l, mg_group_kind k, int rank);
/* The ranks of group g of kind k and their count (*n); NULL when g or k is out of range. */
const int *mg_parallel_group_ranks(const mg_parallel_layout *l, mg_group_kind k, int g, int *n);

#endif
