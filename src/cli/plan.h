/* Internal to `megatron plan` (cli/plan.c and cli/plan_grad.c build, cli/plan_text.c and
 * cli/plan_json.c print): the parallel layout, the pipeline schedule, the layer placement and the
 * data-parallel grad buffer of one set of flags, computed without launching anything. */
#ifndef MG_CLI_PLAN_H
#define MG_CLI_PLAN_H

#include "parallel/grad_buffer.h"
#include "parallel/parallel_state.h"
#include "parallel/pipeline/layers.h"
#include "parallel/pipeline/placement.h"
#include "parallel/pipeline/schedule.h"
#include "train/memory.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define MG_PLAN_PARAM_NAME 96 /* as mg_param_meta.name */

/* One grad buffer: the parameters of one model chunk (or of --param-sizes) and their layout. */
typedef struct {
    int pp_rank, vp_stage; /* the chunk; -1 for --param-sizes, vp_stage -1 w/o VPP */
    bool expert;           /* the chunk's experts (expert-parallel rank 0's), reduced over the
                              expert-data-parallel group; else its dense parameters */
    bool fp8; /* --fp8-param-gather: the chunk's fp8 linears' weights (train/buffers.h),
                 gathered as fp8 bytes; else the rest */
    int n;    /* parameters, in registration order */
    char (*names)[MG_PLAN_PARAM_NAME]; /* (n) megatron-core names; NULL for --param-sizes */
    int64_t *numel;                    /* (n) elements per rank (after the tensor-parallel split) */
    mg_grad_buffer_layout layout;
} mg_plan_grad_buffer;

/* One weight of the model as tensor parallelism splits it (`megatron plan` with a model). */
typedef struct {
    char name[MG_PLAN_PARAM_NAME];
    int64_t global_shape[2], local_shape[2]; /* 1-D weights: [n, 1] */
    int ndim;
    int split_dim, split_chunks; /* -1: replicated */
    bool vocab;                  /* split over the vocabulary (embedding, output layer) */
    bool sequence_parallel;      /* gradient all-reduced over TP (norms under SP) */
} mg_plan_weight;

typedef struct {
    mg_config cfg;
    int world_size;
    bool json;
    mg_parallel_layout layout;
    int vpp; /* model chunks per pipeline rank (1: no virtual stages) */

    bool has_pipeline; /* --num-microbatches (or a global batch) given */
    mg_pp_schedule_params schedule;
    int *orders;                 /* (P, 2*M*V) each rank's order in Megatron's encoding */
    int *warmup;                 /* (P) */
    int *slots;                  /* (P) activation slots */
    mg_pp_schedule_entry *table; /* (M*V) */
    mg_pp_schedule_timeline timeline;
    /* the time the messages' placement gives the step in the same model (forward 1, backward 2),
     * over the schedule's own: sends that hold their sender (each message a rendezvous: MPI in
     * the schedule's order, NCCL's 1F1B) and sends beside the compute (NCCL's interleaved
     * executor: parallel/pipeline/p2p.h) */
    double msg_blocking_ratio, msg_async_ratio;
    /* the same model with each chunk's ops weighted by its layers as placed, the output layer and
     * loss costing out_layers layers (their GEMM FLOPs over a layer's: train/metrics.h) and the
     * embedding nothing (has_placed: layers and a vocabulary given, P > 1): each rank's idle share
     * of the step (P), and the step over an even split of the same work */
    bool has_placed;
    double out_layers;
    mg_pp_placement placed; /* parallel/pipeline/placement.h */

    bool has_layers;         /* --num-layers given */
    mg_layers_chunk *chunks; /* (P, V) rank-major */

    const char *param_sizes; /* --param-sizes A,B,C (plan only); NULL: not given */
    /* --shared-embedding-param I[,J...] (plan only, with --param-sizes; NULL: not given):
     * parameters with Megatron's shared_embedding attribute, each of which gets a bucket of its
     * own */
    const char *shared_embedding_param;
    bool grad_from_model;      /* buffers of the model's chunks ("grad_buffers"), else one
                                * buffer of --param-sizes ("grad_buffer") */
    int n_grad;                /* 0: no grad buffer section */
    mg_plan_grad_buffer *grad; /* (n_grad): one per model chunk, rank-major; or one */

    /* a model's weights under tensor parallelism (with the grad buffers of a model) */
    int n_weights;
    mg_plan_weight *weights;         /* (n_weights) registration order */
    int64_t params_total, params_tp; /* the whole model; one tensor-parallel rank's shards */
    /* MoE models: one expert-parallel rank's expert parameters (in params_tp), and the token
     * dispatch's static buffers per microbatch (model/moe.h): rows of one rank's permuted
     * pairs, rows its experts may receive, tokens kept per expert (0: dropless) */
    int64_t params_expert;
    mg_gpt_moe_dispatch moe; /* sent 0: no MoE dispatch planned */

    /* ECHO's plan for the token counts of --moe-echo-token-counts (cli/plan_echo.c); NULL: none */
    struct mg_plan_echo *echo;

    /* memory of one rank per pipeline stage (a model's flags and a schedule given) */
    int n_memory;
    mg_memory_stage *memory; /* (n_memory) by pipeline rank */
    mg_dtype memory_dtype;   /* the parameters' dtype it assumes */
} mg_plan;

/* The grad buffer(s) for --param-sizes, or for a model given by its flags (--hidden-size ...);
 * nothing when neither is given. Needs the layout and, for a model, the layer placement. */
/* cli/plan_placed.c: has_placed, out_layers, placed_idle, placed_ratio and suggested, from the
 * schedule and the chunks' layers (after the timeline). */
mg_status mg_plan_build_placed(mg_plan *p);
mg_status mg_plan_build_grad(mg_plan *p);
void mg_plan_free_grad(mg_plan *p);

/* The parameters' and activations' dtype the plan assumes: fp32 with --device cpu, else bf16. */
mg_dtype mg_plan_dtype(const mg_config *c);
/* Memory per pipeline rank (cli/plan_memory.c); nothing without a model and a schedule. */
mg_status mg_plan_build_memory(mg_plan *p);
void mg_plan_free_memory(mg_plan *p);

/* ECHO's plan (--moe-enable-echo with --moe-echo-token-counts FILE; nothing without either; one
 * without the other is a usage error), and its sections of the text and the JSON. */
mg_status mg_plan_build_echo(mg_plan *p, const char *counts_path);
void mg_plan_free_echo(mg_plan *p);
void mg_plan_echo_text(const mg_plan *p, FILE *f);
void mg_plan_echo_json(const mg_plan *p, struct cJSON *root);

void mg_plan_print_text(const mg_plan *p, FILE *f);
mg_status mg_plan_print_json(const mg_plan *p, FILE *f);

#endif
