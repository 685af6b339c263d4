/* `megatron plan` without --json: the layout, groups, layers and schedule as readable text, and an
 * ASCII timeline per pipeline rank (a forward takes one time unit, a backward two; each unit is
 * one cell of `w` characters; "F3b" is the forward of microbatch 3 on chunk b, '.' is idle). */
#include "cli/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TIMELINE_MAX_COLUMNS 4000 /* wider timelines are left to --json */

static void print_groups(const mg_parallel_layout *l, FILE *f) {
    fprintf(f, "\nprocess groups (Megatron's initialize_model_parallel; ranks in group order):\n");
    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        const mg_group_list *g = &l->groups[k];
        fprintf(f, "  %-18s %4d group%s:", mg_group_kind_name((mg_group_kind)k), g->n_groups,
                g->n_groups == 1 ? " " : "s");
        for (int i = 0; i < g->n_groups; i++) {
            int n;
            const int *r = mg_parallel_group_ranks(l, (mg_group_kind)k, i, &n);
            fputs(" [", f);
            for (int j = 0; j < n; j++) fprintf(f, "%s%d", j ? "," : "", r[j]);
            fputc(']', f);
        }
        fputc('\n', f);
    }
}

static void print_ranks(const mg_parallel_layout *l, int world, FILE *f) {
    fprintf(f,
            "\nrank coordinates (ep, expert_tp, expert_dp: the expert layout):\n"
            "  %6s %4s %4s %4s %4s %4s %9s %9s\n",
            "rank", "tp", "cp", "dp", "pp", "ep", "expert_tp", "expert_dp");
    for (int r = 0; r < world; r++) {
        mg_rank_coords c;
        if (mg_parallel_rank_coords(l, r, &c) != MG_OK) return;
        fprintf(f, "  %6d %4d %4d %4d %4d %4d %9d %9d\n", r, c.tp, c.cp, c.dp, c.pp, c.ep, c.etp,
                c.edp);
    }
}

static void print_layers(const mg_plan *p, FILE *f) {
    int pp = p->cfg.pipeline_model_parallel_size;
    fprintf(f, "\nlayers (%d transformer layers; chunk = pipeline rank x virtual stage):\n",
            p->cfg.num_layers);
    for (int r = 0; r < pp; r++)
        for (int v = 0; v < p->vpp; v++) {
            const mg_layers_chunk *ch = &p->chunks[r * p->vpp + v];
            fprintf(f, "  pp %d", r);
            if (p->vpp > 1) fprintf(f, " vp %d", v);
            if (ch->count)
                fprintf(f, ": layers %d-%d (%d)\n", ch->offset, ch->offset + ch->count - 1,
                        ch->count);
            else
                fprintf(f, ": no transformer layers\n");
        }
}

/* "F12b": direction, microbatch, chunk letter when there are several chunks. */
static int op_label(const mg_schedule_op *op, int vpp, char *buf, size_t cap) {
    if (vpp > 1 && vpp <= 26)
        return snprintf(buf, cap, "%c%d%c", op->forward ? 'F' : 'B', op->microbatch,
                        'a' + op->chunk);
    if (vpp > 1)
        return snprintf(buf, cap, "%c%d.%d", op->forward ? 'F' : 'B', op->microbatch, op->chunk);
    return snprintf(buf, cap, "%c%d", op->forward ? 'F' : 'B', op->microbatch);
}

static void print_timeline(const mg_plan *p, FILE *f) {
    const mg_schedule_timeline *t = &p->timeline;
    const mg_schedule_params *s = &p->sched;
    char label[32];
    int w = 1;
    for (int i = 0; i < t->pp * t->ops_per_rank; i++) {
        int n = op_label(&t->ops[i].op, s->vpp, label, sizeof label);
        if (n + 1 > w) w = n + 1; /* one column between blocks */
    }
    long units = lround(t->makespan);
    if (units * w > TIMELINE_MAX_COLUMNS) {
        fprintf(f, "  (timeline omitted: %ld columns; `--json` has every rank's order)\n",
                units * w);
        return;
    }
    char *line = malloc((size_t)(units * w) + 1);
    if (!line) return;
    fprintf(f, "  timeline (a forward is one cell, a backward two; '.' idle):\n");
    for (int r = 0; r < t->pp; r++) {
        memset(line, '.', (size_t)(units * w));
        line[units * w] = '\0';
        for (int i = 0; i < t->ops_per_rank; i++) {
            const mg_schedule_timed_op *o = &t->ops[(size_t)r * t->ops_per_rank + i];
            long a = lround(o->start) * w, b = lround(o->end) * w;
            int n = op_label(&o->op, s->vpp, label, sizeof label);
            for (long x = a; x < b; x++)
                line[x] = x - a < n ? label[x - a] : (o->op.forward ? '-' : '=');
            if (b - a > 1) line[b - 1] = ' ';
        }
        fprintf(f, "  pp %-3d|%s|\n", r, line);
    }
    free(line);
}

static void print_pipeline(const mg_plan *p, FILE *f) {
    const mg_schedule_params *s = &p->sched;
    int mv = s->microbatches * s->vpp;
    fprintf(f, "\npipeline: %s, %d microbatches, %d model chunk%s per rank",
            s->pp == 1   ? "no pipelining"
            : s->vpp > 1 ? "interleaved 1F1B"
                         : "1F1B",
            s->microbatches, s->vpp, s->vpp == 1 ? "" : "s");
    if (s->vpp > 1) fprintf(f, ", microbatch group %d", mg_schedule_group(s));
    fprintf(f, "\n  schedule table (microbatch, chunk):");
    for (int k = 0; k < mv && k < 64; k++)
        fprintf(f, " (%d,%d)", p->table[k].microbatch, p->table[k].chunk);
    fprintf(f, "%s\n", mv > 64 ? " ..." : "");
    for (int r = 0; r < s->pp; r++) {
        fprintf(f, "  pp %d: %d warm-up forwards, %d activation slots, order", r, p->warmup[r],
                p->slots[r]);
        const int *o = p->orders + (size_t)r * 2 * mv;
        for (int k = 0; k < 2 * mv && k < 64; k++) fprintf(f, " %d", o[k]);
        fprintf(f, "%s\n", 2 * mv > 64 ? " ..." : "");
    }
    print_timeline(p, f);
    fprintf(f,
            "  bubble: %.4f of the time idle (idle/compute %.4f; Megatron's (p-1)/(v*m) = %.4f)\n",
            p->timeline.bubble_fraction, p->timeline.bubble_ratio, p->timeline.analytic_ratio);
}

void mg_plan_print_text(const mg_plan *p, FILE *f) {
    const mg_parallel_layout *l = &p->layout;
    fprintf(f,
            "world size %d: tensor %d x context %d x data %d x pipeline %d (order %s); "
            "experts: expert-tensor %d x expert %d x expert-data %d x pipeline %d\n",
            p->world_size, l->sizes.tp, l->sizes.cp, l->dp, l->sizes.pp, l->sizes.order,
            l->sizes.etp, l->sizes.ep, l->edp, l->sizes.pp);
    print_groups(l, f);
    print_ranks(l, p->world_size, f);
    if (p->has_layers) print_layers(p, f);
    if (p->has_pipeline) print_pipeline(p, f);
}
