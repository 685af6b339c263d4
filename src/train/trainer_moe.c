/* The trainer's part of a Mixture-of-Experts model (train/trainer_moe.h): the weights of the
 * aux losses, the step's load and logged losses, the expert bias update, the expert load. */
#include "train/trainer_moe.h"

#include "core/env.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

/* The MoE layers' share of the objective and of the logged values: an aux loss counts as much
 * as one microbatch's mean lm loss (Megatron's MoEAuxLossAutoScaler at 1 / microbatches, the
 * gradients then averaged over the data-parallel group: 1/D); the logged values are the mean
 * over the MoE layers and microbatches, summed over the group (then a mean). */
static int by_offset(const void *a, const void *b) {
    const mg_param_meta *x = *(const mg_param_meta *const *)a;
    const mg_param_meta *y = *(const mg_param_meta *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The runs of the gradient buffer a step zeroes: the non-expert parameters in buffer order, a run
 * continuing over the padding up to the next non-expert one and ending at an expert. */
static mg_status plan_zero_spans(mg_trainer *t) {
    const mg_param_table *pt = &t->model.params;
    const mg_param_meta **order = malloc((size_t)(pt->n ? pt->n : 1) * sizeof *order);
    t->zero_spans = malloc((size_t)(2 * pt->n + 2) * sizeof *t->zero_spans);
    if (!order || !t->zero_spans) {
        free(order);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory (gradient zeroing plan)");
    }
    for (int i = 0; i < pt->n; i++) order[i] = &pt->p[i];
    qsort(order, (size_t)pt->n, sizeof *order, by_offset);
    int n = 0;
    bool open = false;
    for (int i = 0; i < pt->n; i++) {
        const mg_param_meta *m = order[i];
        if (m->expert) {
            open = false;
            continue;
        }
        if (!open) t->zero_spans[2 * n] = m->offset, t->zero_spans[2 * n + 1] = 0, n++;
        t->zero_spans[2 * n - 1] = m->offset + (size_t)m->numel - t->zero_spans[2 * n - 2];
        open = true;
    }
    t->n_zero_spans = n;
    free(order);
    return MG_OK;
}

void mg_trainer_moe_set_weights(mg_trainer *t) {
    mg_moe_ws *w = &t->model.moe_ws;
    double mb_d = (double)t->num_microbatches * t->layout.dp_size;
    w->loss_weight = (float)(1.0 / mb_d);
    w->loss_scale = &t->mem.ctl->scale; /* the loss scale, as the head's weights: on the device */
    w->stat_weight = (float)(1.0 / (mb_d * t->model.cfg.moe.n_layers));
}

/* MG_TEST_EXPERT_BIAS="b0,b1,...": a skewed router for tests (a stated test hook, as
 * MG_FAULT_*): with --moe-router-enable-expert-bias every MoE layer's expert bias starts at these E
 * values (--moe-router-bias-update-rate 0 keeps them), so the experts with the largest values
 * get most tokens. Unset: nothing. */
static mg_status test_expert_bias(mg_trainer *t) {
    const char *v = mg_env_str("MG_TEST_EXPERT_BIAS", "");
    const mg_moe_config *m = &t->model.cfg.moe;
    if (!v[0] || !m->expert_bias) return MG_OK;
    float *b = calloc((size_t)m->E, sizeof *b);
    if (!b) return MG_FAIL(MG_ERR_NOMEM, "out of memory (expert bias)");
    char *end = (char *)v;
    for (int e = 0; e < m->E && *end; e++) {
        b[e] = strtof(end, &end);
        if (*end == ',') end++;
    }
    mg_status st = MG_OK;
    for (int i = 0; st == MG_OK && i < t->model.moe_ws.n_layers; i++)
        st = t->be->copy_h2d(t->be, mg_gpt_moe_bias(&t->model, i), b, (size_t)m->E * sizeof *b);
    free(b);
    return st;
}

mg_status mg_trainer_moe_bind(mg_trainer *t) {
    mg_moe_ws *w = &t->model.moe_ws;
    w->stats = &t->mem.stats[MG_STAT_MOE_AUX];
    mg_trainer_moe_set_weights(t);
    w->ep = t->layout.ep;
    MG_CHECK(plan_zero_spans(t));
    MG_CHECK(test_expert_bias(t));
    return t->be->memset_zero(t->be, t->mem.grads, t->model.params.numel * sizeof(float));
}

mg_status mg_trainer_moe_zero_grads(mg_trainer *t) {
    for (int s = 0; s < t->n_zero_spans; s++)
        MG_CHECK(t->be->memset_zero(t->be, t->mem.grads + t->zero_spans[2 * s],
                                    t->zero_spans[2 * s + 1] * sizeof(float)));
    mg_gpt_expert_grads_unwritten(&t->model);
    return MG_OK;
}

/* The loads of this rank's MoE layers: one block of n_layers x E values (model/gpt.h). */
static size_t load_values(const mg_trainer *t) {
    const mg_moe_config *m = &t->model.cfg.moe;
    return (size_t)t->model.moe_ws.n_layers * (size_t)(m->E + (m->echo ? m->ep : 0));
}

/* Before a step: the load counts and the logged losses start from zero. */
mg_status mg_trainer_moe_step_begin(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    mg_backend *be = t->be;
    _Static_assert(MG_STAT_MOE_OVER == MG_STAT_MOE_AUX + 2, "the MoE sums are adjacent");
    MG_CHECK(be->memset_zero(be, &t->mem.stats[MG_STAT_MOE_AUX], 3 * sizeof(float)));
    *t->model.moe_ws.overflows = 0;
    if (w->n_layers == 0) return MG_OK; /* a pipeline stage without MoE layers */
    return be->memset_zero(be, mg_gpt_moe_load(&t->model, 0), load_values(t) * sizeof(float));
}

/* The logged losses summed over the replicas and the stages, the loads over the replicas. */
static mg_status sum_over_ranks(mg_trainer *t, mg_comm *const groups[2]) {
    const mg_moe_ws *w = &t->model.moe_ws;
    mg_backend *be = t->be;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(be, &stream));
    for (int g = 0; g < 2; g++)
        if (groups[g])
            MG_CHECK(mg_comm_all_reduce(groups[g], &t->mem.stats[MG_STAT_MOE_AUX],
                                        &t->mem.stats[MG_STAT_MOE_AUX], 3, MG_F32, MG_REDUCE_SUM,
                                        stream));
    /* the step's load over every replica: the expert bias needs it, and the logged load is the
     * global batch's (E values per layer, all layers in one call) */
    if (t->layout.dp && w->n_layers > 0) {
        float *load = mg_gpt_moe_load(&t->model, 0);
        MG_CHECK(mg_comm_all_reduce(t->layout.dp, load, load, load_values(t), MG_F32, MG_REDUCE_SUM,
                                    stream));
    }
    return mg_backend_comm_end(be);
}

/* After backward: the logged losses summed over the replicas and the stages, the loads summed
 * over the replicas; under a receive budget the step counted if any rank's dispatch took extra
 * rounds (a host read: the rounds are read on the host anyway); with expert bias each bias updated
 * (Megatron's finalize_model_grads: _update_router_expert_bias, before the optimizer). */
mg_status mg_trainer_moe_step_end(mg_trainer *t) {
    const mg_moe_ws *w = &t->model.moe_ws;
    const mg_moe_config *m = &t->model.cfg.moe;
    mg_backend *be = t->be;
    mg_comm *groups[] = {t->layout.dp, t->layout.pp};
    const bool summed = groups[0] || groups[1];
    float over = (float)*w->overflows; /* this rank's layer passes over the receive budget */
    if (w->budget && summed)           /* through the device, summed with the logged losses */
        MG_CHECK(be->copy_h2d(be, &t->mem.stats[MG_STAT_MOE_OVER], &over, sizeof over));
    if (summed) MG_CHECK(sum_over_ranks(t, groups));
    if (w->budget) { /* every rank counts the step if any rank's dispatch took extra rounds (the
                        expert-parallel ranks of a layer agree on its rounds) */
        if (summed) MG_CHECK(be->copy_d2h(be, &over, &t->mem.stats[MG_STAT_MOE_OVER], sizeof over));
        if (over > 0) t->moe_overflow_steps++;
    }
    for (int i = 0; m->expert_bias && i < w->n_layers; i++)
        MG_CHECK(be->moe_expert_bias_update(be, mg_gpt_moe_bias(&t->model, i),
                                            mg_gpt_moe_load(&t->model, i), m->E, m->bias_rate));
    return MG_OK;
}

void mg_moe_load_stats(const float *loads, int layers, int E, int ep, double *expert_load,
                       double *ep_imbalance) {
    double worst = 0, imb = 0;
    int counted = 0;
    const int per = ep > 0 ? E / ep : E;
    for (int l = 0; l < layers; l++) { /* layer after layer */
        const float *row = loads + (size_t)l * E;
        double sum = 0, max = 0, rank_max = 0;
        for (int e = 0; e < E; e++) {
            sum += row[e];
            max = row[e] > max ? row[e] : max;
        }
        for (int r = 0; r < ep && per > 0; r++) { /* rank r's experts [r per, (r + 1) per) */
            double s = 0;
            for (int e = r * per; e < (r + 1) * per; e++) s += row[e];
            rank_max = s > rank_max ? s : rank_max;
        }
        if (!(sum > 0)) continue;
        if (max * E / sum > worst) worst = max * E / sum;
        imb += rank_max * ep / sum;
        counted++;
    }
    *expert_load = worst;
    *ep_imbalance = counted ? imb / counted : 0;
}

void mg_trainer_moe_loads(mg_trainer *t, double *expert_load, double *ep_imbalance,
                          double *after_echo) {
    const mg_moe_config *m = &t->model.cfg.moe;
    const int E = m->E, layers = t->model.moe_ws.n_layers;
    size_t n = load_values(t);
    float *h = n ? malloc(n * sizeof *h) : NULL;
    *expert_load = *ep_imbalance = 0;
    *after_echo = -1;
    if (!h) return;
    if (t->be->copy_d2h(t->be, h, mg_gpt_moe_load(&t->model, 0), n * sizeof *h) != MG_OK) {
        mg_error_clear();
    } else {
        mg_moe_load_stats(h, layers, E, m->ep, expert_load, ep_imbalance);
        /* after ECHO: each layer's tokens per rank (one expert per rank for the statistic) */
        double unused;
        if (m->echo)
            mg_moe_load_stats(h + (size_t)layers * E, layers, m->ep, m->ep, &unused, after_echo);
    }
    free(h);
}
