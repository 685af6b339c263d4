/* `megatron plan`: the pipeline's layers as placed (cli/plan.h's has_placed). The schedule's
 * timeline model (parallel/pipeline/schedule.h) with each chunk's ops weighted by its layers,
 * the last chunk's also by the output layer and loss (their GEMM FLOPs over an average layer's:
 * train/metrics.h), the embedding weightless; then a split of the same layers the model finds
 * faster, by moving one layer at a time from one chunk to another while the step shortens (a
 * local search: every chunk keeps a layer; the embedding stays on the first stage and the loss
 * on the last, as --pipeline-model-parallel-layout requires). A model: on 2 H200s it had GPT-2
 * 1.5B's even split right to 1.5 points and counted the output layer heavier than it ran
 * (bench/NOTES.md, 2026-11-30). */
#include "cli/plan.h"
#include "train/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The output layer and loss in layers: their GEMM FLOPs (train/metrics.h counts the logits' and
 * every layer's) over one layer's average; 0 where that cannot be told. */
static double output_layers(const mg_config *c) {
    if (c->num_layers <= 0 || c->vocab_size <= 0 || c->hidden_size <= 0) return 0.0;
    mg_config none = *c;
    none.num_layers = 0;
    double all = mg_flops_per_iteration(c, 1), logits = mg_flops_per_iteration(&none, 1);
    double layer = (all - logits) / c->num_layers;
    return layer > 0 ? logits / layer : 0.0;
}

/* The step's time in the model with count[k] layers in chunk k (rank-major), w its scratch;
 * busy (P, may be NULL) each rank's compute. */
static mg_status step_time(const mg_plan *p, const int *count, double *w, double *busy,
                           double *out) {
    const int n = p->schedule.pp * p->schedule.vpp;
    for (int k = 0; k < n; k++) w[k] = count[k] + (k == n - 1 ? p->out_layers : 0.0);
    mg_pp_schedule_timeline tl;
    MG_CHECK(mg_pp_schedule_timeline_weighted(&p->schedule, 1.0, 2.0, w, busy, &tl));
    *out = tl.makespan;
    mg_pp_schedule_timeline_free(&tl);
    return MG_OK;
}

/* count (rank-major) as --pipeline-model-parallel-layout's string: stages in virtual-stage
 * order (stage s is rank s % P's chunk s / P), "E" on the first, "L" on the last. */
static char *layout_string(const int *count, int pp, int v) {
    size_t cap = (size_t)pp * v * 16 + 8, at = 0;
    char *s = malloc(cap);
    for (int st = 0; s && st < pp * v; st++) {
        int k = (st % pp) * v + st / pp;
        at += (size_t)snprintf(s + at, cap - at, "%s%st*%d%s", st ? "|" : "", st ? "" : "E",
                               count[k], st == pp * v - 1 ? "L" : "");
    }
    return s;
}

mg_status mg_plan_build_placed(mg_plan *p) {
    const int pp = p->schedule.pp, v = p->schedule.vpp, n = pp * v, m = p->schedule.microbatches;
    p->out_layers = output_layers(&p->cfg);
    if (!p->has_layers || pp < 2 || !(p->out_layers > 0)) return MG_OK;
    double *w = malloc((size_t)n * sizeof *w), *busy = malloc((size_t)pp * sizeof *busy);
    int *count = malloc((size_t)n * sizeof *count);
    p->placed_idle = malloc((size_t)pp * sizeof *p->placed_idle);
    mg_status st =
        w && busy && count && p->placed_idle ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory");
    double total = p->out_layers, now = 0.0;
    for (int k = 0; st == MG_OK && k < n; k++) total += count[k] = p->chunks[k].count;
    if (st == MG_OK) st = step_time(p, count, w, busy, &now);
    if (st != MG_OK) goto done;
    /* an even split: every chunk total / (P V), the schedule's own makespan for it */
    const double even = 3.0 * total / n * (m * v + pp - 1);
    for (int r = 0; r < pp; r++) p->placed_idle[r] = 1.0 - busy[r] / now;
    p->placed_ratio = now / even;
    p->has_placed = true;
    /* one layer at a time, while the step shortens */
    double best = now;
    for (bool moved = true; moved && st == MG_OK;) {
        moved = false;
        for (int i = 0; i < n && st == MG_OK; i++)
            for (int j = 0; j < n && count[i] > 1 && st == MG_OK; j++) {
                if (i == j) continue;
                double t;
                count[i]--, count[j]++;
                st = step_time(p, count, w, NULL, &t);
                if (st == MG_OK && t < best * (1 - 1e-9)) {
                    best = t, moved = true;
                } else {
                    count[i]++, count[j]--;
                }
            }
    }
    if (st == MG_OK && best < now * (1 - 1e-3)) {
        p->suggested = layout_string(count, pp, v);
        if (!p->suggested) st = MG_FAIL(MG_ERR_NOMEM, "out of memory");
        p->suggested_ratio = best / even;
    }
done:
    free(w);
    free(busy);
    free(count);
    return st;
}
