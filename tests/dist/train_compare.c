#include "train_compare.h"

#if defined(MG_HAVE_CUDA) && defined(MG_HAVE_NCCL)
#include "backend/cuda/cuda_internal.h"
#endif

#include "config/flags.h"

#include <math.h>
#include <stdlib.h>

const char *const tc_recompute_full[] = {"--recompute-granularity",
                                         "full",
                                         "--recompute-method",
                                         "uniform",
                                         "--recompute-num-layers",
                                         "1",
                                         NULL};

void tc_config(dist_ctx *t, mg_config *c, const char *const *model, const char *const *layout,
               int world) {
    char *argv[128];
    int argc = 0;
    for (int i = 0; model && model[i] && argc < 127; i++) argv[argc++] = (char *)model[i];
    for (int i = 0; layout && layout[i] && argc < 127; i++) argv[argc++] = (char *)layout[i];
    argv[argc] = NULL;
    bool help = false;
    mg_config_defaults(c);
    DOK(mg_flags_parse(c, argc, argv, &help));
    c->world_size = world;
    DOK(mg_config_validate(c));
}

void tc_train(dist_ctx *t, const mg_config *c, const mg_train_groups *g, int steps, tc_run *out) {
    tc_train_eval(t, c, g, steps, 0, out);
}

void tc_train_eval(dist_ctx *t, const mg_config *c, const mg_train_groups *g, int steps,
                   unsigned evals, tc_run *out) {
    out->tr = calloc(1, sizeof *out->tr);
    DOK(out->tr ? MG_OK : MG_ERR_NOMEM);
    DOK(mg_trainer_init(out->tr, c, g));
    for (int s = 0; s < steps && s < TC_MAX_STEPS; s++) {
        DOK(mg_trainer_step(out->tr, &out->loss[s], &out->norm[s]));
        if (evals >> s & 1u) DOK(mg_trainer_evaluate(out->tr, &out->eval[s]));
    }
    out->w = calloc(out->tr->model.params.numel, sizeof *out->w);
    DOK(out->w ? MG_OK : MG_ERR_NOMEM);
    DOK(mg_trainer_get_weights(out->tr, out->w));
}

void tc_release(tc_run *r) {
    mg_trainer_free(r->tr);
    free(r->tr);
    free(r->w);
}

mg_comm *tc_group(dist_ctx *t, const mg_parallel_layout *l, mg_group_kind k) {
    const mg_group_list *g = &l->groups[k];
    mg_comm *c = NULL;
    DOK(mg_comm_group_create(t->w, mg_group_kind_name(k), g->n_groups, g->offsets, g->ranks, &c));
    if (c && mg_comm_size(c) == 1) {
        mg_comm_group_free(c);
        c = NULL;
    }
    return c;
}

void tc_groups(dist_ctx *t, mg_parallel_sizes s, mg_train_groups *g) {
    mg_parallel_layout l;
    DOK(mg_parallel_layout_build(&s, &l));
    g->dp = tc_group(t, &l, MG_GROUP_DP);
    g->tp = tc_group(t, &l, MG_GROUP_TP);
    g->pp = tc_group(t, &l, MG_GROUP_PP);
    g->embedding = tc_group(t, &l, MG_GROUP_EMBEDDING);
    if (s.ep > 1) { /* the expert groups, for MoE layouts */
        g->ep = tc_group(t, &l, MG_GROUP_EP);
        g->edp = tc_group(t, &l, MG_GROUP_EXPERT_DP);
    }
    mg_parallel_layout_free(&l);
}

void tc_free_groups(mg_train_groups *g) {
    mg_comm *all[] = {g->dp, g->tp, g->pp, g->embedding, g->ep, g->edp};
    for (int i = 0; i < 6; i++)
        if (all[i]) mg_comm_group_free(all[i]);
    memset(g, 0, sizeof *g);
}

void tc_expect_steady_step(dist_ctx *t, const char *label, mg_trainer *tr) {
#if defined(MG_HAVE_CUDA) && defined(MG_HAVE_NCCL)
    if (!dist_on_device(t)) return;
    const mg_cuda_ctx *x = tr->be->ctx;
    uint64_t s0 = x->n_host_syncs, a0 = x->n_device_allocs;
    DOK(mg_trainer_step_async(tr));
    DEXPECT(x->n_host_syncs == s0 && x->n_device_allocs == a0,
            "%s: a step synchronised %llu times, allocated %llu times", label,
            (unsigned long long)(x->n_host_syncs - s0),
            (unsigned long long)(x->n_device_allocs - a0));
    DOK(mg_trainer_sync_params(tr));
    DOK(tr->be->synchronize(tr->be));
#else
    (void)t, (void)label, (void)tr;
#endif
}

double tc_rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

void tc_expect_steps(dist_ctx *t, const char *label, const tc_run *got, const tc_run *ref,
                     int steps, double tol, double norm_tol) {
    const bool has_loss = got->tr->model.lnf_w >= 0;
    for (int i = 0; i < steps; i++) {
        if (has_loss)
            DEXPECT(tc_rel(got->loss[i], ref->loss[i]) <= tol,
                    "%s step %d: loss %.9g, one rank %.9g", label, i + 1, got->loss[i],
                    ref->loss[i]);
        DEXPECT(tc_rel(got->norm[i], ref->norm[i]) <= norm_tol,
                "%s step %d: grad norm %.9g, one rank %.9g", label, i + 1, got->norm[i],
                ref->norm[i]);
    }
}

double tc_model_error(const tc_run *got, const tc_run *ref, const char **which,
                      bool (*skip)(const mg_param_meta *m, const mg_model_config *c, int64_t g)) {
    const mg_param_table *a = &got->tr->model.params, *b = &ref->tr->model.params;
    double worst = 0, dsum = 0, nsum = 0;
    for (int i = 0; i < a->n; i++) {
        const mg_param_meta *m = &a->p[i];
        /* a stage's copy of the tied embedding is the embedding */
        int k = mg_params_find(b, m->shared ? "embedding.word_embeddings.weight" : m->name);
        if (k < 0) {
            *which = m->name;
            return INFINITY;
        }
        const float *x = got->w + m->offset, *y = ref->w + b->p[k].offset;
        double d = 0, n = 0;
        for (int64_t j = 0; j < m->numel; j++) {
            int64_t g = mg_param_global_index(m, j);
            if (skip && skip(m, &ref->tr->model.cfg, g)) continue;
            d += ((double)x[j] - y[g]) * ((double)x[j] - y[g]);
            n += (double)y[g] * y[g];
        }
        dsum += d;
        nsum += n;
        double e = sqrt(d) / fmax(sqrt(n), 1e-3);
        if (e > worst) {
            worst = e;
            *which = m->name;
        }
    }
    return nsum > 0 ? sqrt(dsum) / sqrt(nsum) : 0;
}

void tc_train_both(dist_ctx *t, const mg_config *c1, const mg_config *cL, mg_parallel_sizes s,
                   int steps, mg_train_groups *g, tc_run *ref, tc_run *got) {
    tc_groups(t, s, g);
    tc_train(t, c1, NULL, steps, ref);
    tc_train(t, cL, g, steps, got);
}
