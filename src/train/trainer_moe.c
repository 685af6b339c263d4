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

/* Before a step: the load counts and the logged losses start from zero. */
mg_status mg_trainer_moe_step_begin(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    mg_backend *be = t->be;
    MG_CHECK(be->memset_zero(be, &t->stats[MG_STAT_MOE_AUX], 2 * sizeof(float)));
    for (int i = 0; i < w->n_layers; i++)
        MG_CHECK(be->memset_zero(be, mg_gpt_moe_load(&t->model, i),
                                 (size_t)t->model.cfg.moe.E * sizeof(float)));
    return MG_OK;
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
     * global batch's (E values per layer) */
    for (int i = 0; t->dp && i < w->n_layers; i++) {
        float *load = mg_gpt_moe_load(&t->model, i);
        MG_CHECK(
            mg_comm_all_reduce(t->dp, load, load, (size_t)m->E, MG_F32, MG_REDUCE_SUM, stream));
    }
    MG_CHECK(mg_backend_comm_end(be));
    for (int i = 0; m->expert_bias && i < w->n_layers; i++)
        MG_CHECK(be->moe_expert_bias_update(be, mg_gpt_moe_bias(&t->model, i),
                                            mg_gpt_moe_load(&t->model, i), m->E, m->bias_rate));
    return MG_OK;
}

double mg_trainer_expert_load(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    int E = t->model.cfg.moe.E;
    double worst = 0;
    float *h = malloc((size_t)(E > 0 ? E : 1) * sizeof *h);
    for (int i = 0; h && i < w->n_layers; i++) {
        if (t->be->copy_d2h(t->be, h, mg_gpt_moe_load(&t->model, i), (size_t)E * sizeof *h) !=
            MG_OK) {
            mg_error_clear();
            break;
        }
        double sum = 0, max = 0;
        for (int e = 0; e < E; e++) {
            sum += h[e];
            max = h[e] > max ? h[e] : max;
        }
        if (sum > 0 && max * E / sum > worst) worst = max * E / sum;
    }
    free(h);
    return worst;
}
