/* The layers as placed in the schedule's model, and a faster split (placement.h). */
#include "parallel/pipeline/placement.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The step's time in the model with count[k] layers in chunk k (rank-major); w: scratch (P V);
 * busy (P, may be NULL): each rank's compute. */
static mg_status step_time(const mg_pp_schedule_params *s, const int *count, double out_layers,
                           double *w, double *busy, double *out) {
    const int n = s->pp * s->vpp;
    for (int k = 0; k < n; k++) w[k] = count[k] + (k == n - 1 ? out_layers : 0.0);
    mg_pp_schedule_timeline tl;
    MG_CHECK(mg_pp_schedule_timeline_weighted(s, 1.0, 2.0, w, busy, &tl));
    *out = tl.makespan;
    mg_pp_schedule_timeline_free(&tl);
    return MG_OK;
}

/* count (rank-major) as --pipeline-model-parallel-layout's string: stages in virtual-stage
 * order (stage s is rank s % P's chunk s / P), "E" on the first, "L" on the last. */
static char *layout_string(const int *count, int pp, int v) {
    size_t cap = (size_t)pp * v * 16 + 8, at = 0;
    char *str = malloc(cap);
    for (int st = 0; str && st < pp * v; st++) {
        int k = (st % pp) * v + st / pp;
        at += (size_t)snprintf(str + at, cap - at, "%s%st*%d%s", st ? "|" : "", st ? "" : "E",
                               count[k], st == pp * v - 1 ? "L" : "");
    }
    return str;
}

mg_status mg_pp_placement_model(const mg_pp_schedule_params *s, const mg_layers_chunk *chunks,
                                double out_layers, bool search, mg_pp_placement *out) {
    memset(out, 0, sizeof *out);
    const int pp = s->pp, v = s->vpp, n = pp * v, m = s->microbatches;
    if (!(out_layers > 0))
        return MG_FAIL(MG_ERR_INTERNAL, "placement model: output layer cost %g", out_layers);
    double *w = malloc((size_t)n * sizeof *w), *busy = malloc((size_t)pp * sizeof *busy);
    int *count = malloc((size_t)n * sizeof *count);
    out->idle = malloc((size_t)pp * sizeof *out->idle);
    mg_status st = w && busy && count && out->idle ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory");
    double total = out_layers, now = 0.0;
    for (int k = 0; st == MG_OK && k < n; k++) total += count[k] = chunks[k].count;
    if (st == MG_OK) st = step_time(s, count, out_layers, w, busy, &now);
    if (st != MG_OK) goto done;
    /* an even split: every chunk total / (P V), the schedule's own makespan for it */
    const double even = 3.0 * total / n * (m * v + pp - 1);
    for (int r = 0; r < pp; r++) out->idle[r] = 1.0 - busy[r] / now;
    out->ratio = now / even;
    if (!search) goto done;
    /* The search runs on a schedule of at most 8 P microbatches where that is a valid one
     * (each step of it simulates every op: at M 1024 and 64 chunks a full-length search takes
     * tens of seconds), and its split is then timed at the real M. */
    mg_pp_schedule_params short_s = *s;
    if (m > 8 * pp) {
        short_s.microbatches = 8 * pp;
        if (mg_pp_schedule_check(&short_s) != MG_OK) short_s.microbatches = m;
        mg_error_clear();
    }
    double best = 0.0;
    st = step_time(&short_s, count, out_layers, w, NULL, &best);
    for (bool moved = true; moved && st == MG_OK;) {
        moved = false;
        for (int i = 0; i < n && st == MG_OK; i++)
            for (int j = 0; j < n && count[i] > 1 && st == MG_OK; j++) {
                if (i == j) continue;
                double t;
                count[i]--, count[j]++;
                st = step_time(&short_s, count, out_layers, w, NULL, &t);
                if (st == MG_OK && t < best * (1 - 1e-9)) {
                    best = t, moved = true;
                } else {
                    count[i]++, count[j]--;
                }
            }
    }
    if (st == MG_OK) st = step_time(s, count, out_layers, w, NULL, &best);
    if (st == MG_OK && best < now * (1 - 1e-3)) {
        out->suggested = layout_string(count, pp, v);
        if (!out->suggested) st = MG_FAIL(MG_ERR_NOMEM, "out of memory");
        out->suggested_ratio = best / even;
    }
done:
    free(w);
    free(busy);
    free(count);
    if (st != MG_OK) mg_pp_placement_free(out);
    return st;
}

void mg_pp_placement_free(mg_pp_placement *p) {
    free(p->idle);
    free(p->suggested);
    memset(p, 0, sizeof *p);
}
