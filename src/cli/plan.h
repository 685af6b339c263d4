/* Internal to `megatron plan` (cli/plan.c builds, cli/plan_text.c and cli/plan_json.c print):
 * the parallel layout, the pipeline schedule and the layer placement of one set of flags,
 * computed without launching anything. */
#ifndef MG_CLI_PLAN_H
#define MG_CLI_PLAN_H

#include "parallel/parallel_state.h"
#include "parallel/pipeline/layers.h"
#include "parallel/pipeline/schedule.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    mg_config cfg;
    int world_size;
    bool json;
    mg_parallel_layout layout;
    int vpp; /* model chunks per pipeline rank (1: no virtual stages) */

    bool has_pipeline; /* --num-microbatches (or a global batch) given */
    mg_schedule_params sched;
    int *orders;              /* (P, 2*M*V) each rank's order in Megatron's encoding */
    int *warmup;              /* (P) */
    int *slots;               /* (P) activation slots */
    mg_schedule_entry *table; /* (M*V) */
    mg_schedule_timeline timeline;

    bool has_layers;         /* --num-layers given */
    mg_layers_chunk *chunks; /* (P, V) rank-major */
} mg_plan;

void mg_plan_print_text(const mg_plan *p, FILE *f);
mg_status mg_plan_print_json(const mg_plan *p, FILE *f);

#endif
