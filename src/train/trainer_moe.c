/* The trainer's part of a Mixture-of-Experts model (train/trainer_moe.h): the weights of the
 * aux losses, the step's load and logged losses, the expert bias update, the expert load. */
#include "train/trainer_moe.h"

#include <stdlib.h>

/* The MoE layers' share of the objective and of the logged values: an aux loss counts as much
 * as one microbatch's mean lm loss (Megatron's MoEAuxLossAutoScaler at 1 / microbatches, the
 * gradients then averaged over the data-parallel group: 1/D); the logged values are the mean
 * over the MoE layers and microbatches, summed over the group (then a mean). */
void mg_trainer_moe_bind(mg_trainer *t) {
    mg_moe_ws *w = &t->model.moe_ws;
    double mb_d = (double)t->num_microbatches * t->dp_size;
    w->stats = &t->stats[MG_STAT_MOE_AUX];
    w->loss_weight = (float)(1.0 / mb_d);
    w->stat_weight = (float)(1.0 / (mb_d * t->model.cfg.moe.n_layers));
    w->ep = t->ep;
}

/* The loads of this rank's MoE layers: one block of n_layers x E values (model/gpt.h). */
static size_t load_values(const mg_trainer *t) {
    return (size_t)t->model.moe_ws.n_layers * (size_t)t->model.cfg.moe.E;
}

/* Before a step: the load counts and the logged losses start from zero. */
mg_status mg_trainer_moe_step_begin(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    mg_backend *be = t->be;
    MG_CHECK(be->memset_zero(be, &t->stats[MG_STAT_MOE_AUX], 2 * sizeof(float)));
    if (w->n_layers == 0) return MG_OK; /* a pipeline stage without MoE layers */
    return be->memset_zero(be, mg_gpt_moe_load(&t->model, 0), load_values(t) * sizeof(float));
}

/* After backward: the logged losses summed over the replicas and the stages, the loads summed
 * over the replicas; with expert bias each bias updated (Megatron's finalize_model_grads:
 * _update_router_expert_bias, before the optimizer). */
mg_status mg_trainer_moe_step_end(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    const mg_moe_config *m = &t->model.cfg.moe;
    mg_backend *be = t->be;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(be, &stream));
    mg_comm *groups[] = {t->dp, t->pp};
    for (int g = 0; g < 2; g++)
        if (groups[g])
            MG_CHECK(mg_comm_all_reduce(groups[g], &t->stats[MG_STAT_MOE_AUX],
                                        &t->stats[MG_STAT_MOE_AUX], 2, MG_F32, MG_REDUCE_SUM,
                                        stream));
    /* the step's load over every replica: the expert bias needs it, and the logged load is the
     * global batch's (E values per layer, all layers in one call) */
    if (t->dp && w->n_layers > 0) {
        float *load = mg_gpt_moe_load(&t->model, 0);
        MG_CHECK(mg_comm_all_reduce(t->dp, load, load, load_values(t), MG_F32, MG_REDUCE_SUM,
                                    stream));
    }
    MG_CHECK(mg_backend_comm_end(be));
    for (int i = 0; m->expert_bias && i < w->n_layers; i++)
        MG_CHECK(be->moe_expert_bias_update(be, mg_gpt_moe_bias(&t->model, i),
                                            mg_gpt_moe_load(&t->model, i), m->E, m->bias_rate));
    return MG_OK;
}

double mg_trainer_expert_load(mg_trainer *t) {
    int E = t->model.cfg.moe.E;
    double worst = 0;
    size_t n = load_values(t);
    float *h = n ? malloc(n * sizeof *h) : NULL;
    if (h && t->be->copy_d2h(t->be, h, mg_gpt_moe_load(&t->model, 0), n * sizeof *h) != MG_OK) {
        mg_error_clear();
        n = 0;
    }
    for (size_t at = 0; h && at < n; at += (size_t)E) { /* layer after layer */
        const float *row = h + at;
        double sum = 0, max = 0;
        for (int e = 0; e < E; e++) {
            sum += row[e];
            max = row[e] > max ? row[e] : max;
        }
        if (sum > 0 && max * E / sum > worst) worst = max * E / sum;
    }
    free(h);
    return worst;
}
