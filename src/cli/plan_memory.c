/* `megatron plan`'s memory per pipeline rank (train/memory.h): what one rank of each stage holds
 * for the model's flags, the layout and the batch, on the device the flags name (--device cpu:
 * fp32 parameters; cuda or auto: bf16 parameters with fp32 masters, as the cuda backend trains). */
#include "cli/plan.h"

#include "config/flags.h"

#include <stdlib.h>
#include <string.h>

mg_dtype mg_plan_dtype(const mg_config *c) {
    return strcmp(c->device, "cpu") ? MG_BF16 : MG_F32;
}

mg_status mg_plan_build_memory(mg_plan *p) {
    if (!p->grad_from_model || !p->has_pipeline) return MG_OK;
    mg_config m = p->cfg;
    MG_CHECK(mg_config_resolve_model(&m));
    const mg_parallel_layout *l = &p->layout;
    m.tensor_model_parallel_size = l->sizes.tp;
    if (m.micro_batch_size < 1) m.micro_batch_size = 1;
    /* the batch of the schedule: M microbatches per data-parallel rank */
    m.global_batch_size = p->schedule.microbatches * m.micro_batch_size * l->dp;
    int pp = l->sizes.pp;
    p->memory = calloc((size_t)pp, sizeof *p->memory);
    if (!p->memory) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the memory plan");
    p->n_memory = pp;
    for (int r = 0; r < pp; r++)
        MG_CHECK(mg_memory_stage_estimate(&m, r, l->dp, p->memory_dtype, &p->memory[r]));
    return MG_OK;
}

void mg_plan_free_memory(mg_plan *p) {
    free(p->memory);
    p->memory = NULL;
    p->n_memory = 0;
}
