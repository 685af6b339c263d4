/* AdamW over the model's parameters with Megatron's semantics: global-norm gradient clipping
 * (the norm over every gradient), decoupled weight decay only on parameters whose metadata says
 * so (not on biases and norm weights), bias correction by the step count. The clip coefficient
 * stays in backend memory, so no host read is needed to apply it.
 * Exports: mg_optimizer, mg_optimizer_*. Needs: model/params, backend, core/arena. */
#ifndef MG_TRAIN_OPTIMIZER_H
#define MG_TRAIN_OPTIMIZER_H

#include "backend/backend.h"
#include "core/arena.h"
#include "model/params.h"

typedef struct {
    double beta1, beta2, eps, weight_decay, clip_grad;
    int64_t step;     /* completed optimizer steps (Adam's t after the last update) */
    size_t off_m, off_v, off_scalars;
    float *m, *v;     /* (numel) fp32 moments, same layout as the parameter buffer */
    float *scalars;   /* backend fp32 [sumsq, norm, coef] */
    size_t numel;
} mg_optimizer;

void mg_optimizer_init(mg_optimizer *o, const mg_config *c, size_t numel);
/* Reserves the moments and scalars in the optimizer arena. */
mg_status mg_optimizer_plan(mg_optimizer *o, mg_arena *arena);
void mg_optimizer_bind(mg_optimizer *o, mg_arena *arena);
/* Computes the global gradient norm (into scalars[1], backend memory) and clips + updates every
 * parameter with learning rate lr. `params` compute dtype, `grads` fp32, both (numel). `master`
 * (numel) fp32 holds the master weights when the compute dtype is not fp32 (CUDA: bf16 params
 * receive the updated masters rounded); NULL when the parameters are themselves fp32 (CPU).
 * Nothing is read back to the host. */
mg_status mg_optimizer_step(mg_optimizer *o, mg_backend *be, const mg_param_table *t, void *params,
                            float *master, const float *grads, double lr);

#endif
