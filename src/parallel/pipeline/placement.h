/* The pipeline's layers as placed, in the schedule's timeline model (schedule.h): each chunk's
 * ops take its layer count, the last chunk's also the output layer and loss as out_layers layers
 * (the caller's estimate: train/metrics.h's mg_output_layer_cost), the embedding nothing. Gives
 * each rank's idle share of the step and the step over an even split of the same work, then
 * searches for a faster split: one layer at a time from one chunk to another while the modelled
 * step shortens (a local search; every chunk keeps a layer; the embedding stays on the first
 * stage and the loss on the last, as --pipeline-model-parallel-layout requires; on a schedule of
 * at most 8 P microbatches, the split then timed at the real count), written as that flag's
 * string (only when asked: the search simulates the schedule once per candidate move, seconds
 * at P x V of 64). `megatron plan` searches and prints both; `megatron train` logs the idle
 * shares at start-up without the search.
 * A model: bench/NOTES.md (2026-11-30) compares it with the bubbles measured on 2 H200s.
 * Exports: mg_pp_placement, mg_pp_placement_model, mg_pp_placement_free. Needs: layers, schedule.
 */
#ifndef MG_PIPELINE_PLACEMENT_H
#define MG_PIPELINE_PLACEMENT_H

#include "parallel/pipeline/layers.h"
#include "parallel/pipeline/schedule.h"

typedef struct {
    double *idle;           /* (P) each rank's idle share of the modelled step */
    double ratio;           /* the step over an even split's */
    char *suggested;        /* a faster split's layout string, or NULL (none 0.1% faster) */
    double suggested_ratio; /* its step over an even split's */
} mg_pp_placement;

/* chunks (P * V, rank-major: mg_layers_plan's): each chunk's transformer layers; out_layers > 0;
 * search: also look for a faster split (suggested stays NULL without). On failure *out is empty
 * (safe to free). */
mg_status mg_pp_placement_model(const mg_pp_schedule_params *s, const mg_layers_chunk *chunks,
                                double out_layers, bool search, mg_pp_placement *out);
void mg_pp_placement_free(mg_pp_placement *p);

#endif
