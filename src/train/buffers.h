/* The trainer's parameter and gradient buffers, as megatron-core groups them
 * (distributed/distributed_data_parallel.py: one _ParamAndGradBuffer for the dense parameters,
 * another for the experts'): each buffer has its own grad-buffer layout (parallel/grad_buffer.h),
 * its own reduction group and its own distributed-optimizer shards.
 *   dense   every parameter but the experts', reduced over the data-parallel group (D ranks);
 *   expert  the experts' weights (metadata `expert`, model/params.h) of this expert-parallel
 *           rank, reduced over the expert-data-parallel group (D / EP ranks); only MoE models.
 * With --fp8-param-gather the weights of the fp8 linears (mg_param_meta.fp8_tensor, model/fp8.h)
 * leave those two for buffers of their own, "dense fp8" and "expert fp8" (Megatron keeps its fp8
 * parameters in buffers of their own dtype too): the same groups, but the distributed optimizer
 * gathers their fp8 bytes (the trainer's fp8 parameter array), not the compute dtype's values.
 * In the trainer's parameter and gradient arrays the dense buffer comes first, then the expert
 * buffer, then the fp8 buffers (base; from mg_param_table.fp8_from on). Each layout is built over
 * its own parameters alone, in local
 * coordinates (indices 0 .. n-1 of its own, elements from 0): `index` maps a layout index to the
 * parameter table's, and a parameter's table offset is base + its layout offset.
 * Exports: mg_train_buffer, mg_train_buffers, mg_train_buffers_build, mg_train_buffers_free.
 * Needs: model/params, parallel/grad_buffer, core. */
#ifndef MG_TRAIN_BUFFERS_H
#define MG_TRAIN_BUFFERS_H

#include "config/flags.h"
#include "model/params.h"
#include "parallel/grad_buffer.h"

#define MG_TRAIN_BUFFERS_MAX 4

typedef struct {
    const char *name;             /* "dense", "expert", "dense fp8" or "expert fp8" */
    bool expert;                  /* the experts' buffer */
    bool fp8;                     /* gathered as fp8 bytes (--fp8-param-gather) */
    mg_grad_buffer_layout layout; /* over this buffer's parameters, local coordinates */
    int *index;                   /* (layout.n_params) table index of layout index i */
    size_t base;                  /* its first element in the parameter and gradient arrays */
} mg_train_buffer;

typedef struct {
    int n; /* 1 (dense models) to 4 */
    mg_train_buffer b[MG_TRAIN_BUFFERS_MAX];
    size_t numel; /* both together */
} mg_train_buffers;

/* Lays out the parameters of pt (dense over dp_size ranks, experts over edp_size ranks) with
 * cfg's data-parallel options and moves pt's offsets there (mg_params_relayout; pt->fp8_from the
 * first fp8 buffer's base). pp_rank > 0 disables bucketing (Megatron's rule for the later
 * stages). On failure *out is empty. */
mg_status mg_train_buffers_build(mg_param_table *pt, const mg_config *c, int dp_size, int edp_size,
                                 int pp_rank, mg_train_buffers *out);
void mg_train_buffers_free(mg_train_buffers *b);
/* --grad-reduce-in-bf16: the bytes of the one bf16 copy of a bucket its reductions go through
 * (parallel/ddp.h): the largest bucket of a buffer reduced over more than one rank; 0 without
 * the flag or such a buffer. */
size_t mg_train_buffers_bf16_stage(const mg_train_buffers *b, const mg_config *c);

#endif
