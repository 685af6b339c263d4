/* `megatron plan` without --json: the layout, groups, layers and schedule as readable text, an
 * ASCII timeline per pipeline rank (a forward takes one time unit, a backward two; each unit is
 * one cell of `w` characters; "F3b" is the forward of microbatch 3 on chunk b, '.' is idle), and
 * the grad buffers: buckets, parameters and each data-parallel rank's shard. */
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
static int op_label(const mg_pp_schedule_op *op, int vpp, char *buf, size_t cap) {
    if (vpp > 1 && vpp <= 26)
        return snprintf(buf, cap, "%c%d%c", op->forward ? 'F' : 'B', op->microbatch,
                        'a' + op->chunk);
    if (vpp > 1)
        return snprintf(buf, cap, "%c%d.%d", op->forward ? 'F' : 'B', op->microbatch, op->chunk);
    return snprintf(buf, cap, "%c%d", op->forward ? 'F' : 'B', op->microbatch);
}

static void print_timeline(const mg_plan *p, FILE *f) {
    const mg_pp_schedule_timeline *t = &p->timeline;
    const mg_pp_schedule_params *s = &p->schedule;
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
            const mg_pp_schedule_timed_op *o = &t->ops[(size_t)r * t->ops_per_rank + i];
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
    const mg_pp_schedule_params *s = &p->schedule;
    int mv = s->microbatches * s->vpp;
    fprintf(f, "\npipeline: %s, %d microbatches, %d model chunk%s per rank",
            s->pp == 1   ? "no pipelining"
            : s->vpp > 1 ? "interleaved 1F1B"
                         : "1F1B",
            s->microbatches, s->vpp, s->vpp == 1 ? "" : "s");
    if (s->vpp > 1) fprintf(f, ", microbatch group %d", mg_pp_schedule_group(s));
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
    if (p->has_placed) {
        fprintf(f,
                "  as placed (each chunk's layers; the output layer and loss %.2f layers, their "
                "GEMM FLOPs): idle",
                p->out_layers);
        for (int r = 0; r < s->pp; r++) fprintf(f, " %.4f", p->placed.idle[r]);
        fprintf(f, " of the step per rank; the step %.4fx an even split's\n", p->placed.ratio);
        if (p->placed.suggested)
            fprintf(f,
                    "  a faster split in the same model: --pipeline-model-parallel-layout '%s' "
                    "(the step %.4fx an even split's)\n",
                    p->placed.suggested, p->placed.suggested_ratio);
    }
    if (s->pp > 1)
        fprintf(f,
                "  messages: in the same model the step takes %.4fx the schedule's time when "
                "each send holds its sender (MPI in the schedule's order; NCCL's 1F1B), %.4fx "
                "when sends run beside the compute (NCCL's interleaved executor)\n",
                p->msg_blocking_ratio, p->msg_async_ratio);
}

#define GRAD_TEXT_MAX_RANKS 64 /* shard rows of more ranks are left to --json */

static void range_text(mg_grad_range r, char *buf, size_t cap) {
    snprintf(buf, cap, "[%lld, %lld)", (long long)r.start, (long long)r.end);
}

static void print_bucketing(const mg_plan *p, const mg_grad_buffer_layout *l, FILE *f) {
    const mg_grad_buffer_config *c = &l->cfg;
    if (l->bucket_size != MG_GRAD_BUFFER_NO_BUCKET_SIZE)
        fprintf(f, "buckets close at >= %lld elements (%s)", (long long)l->bucket_size,
                c->bucket_size > 0 ? "--ddp-bucket-size" : "Megatron's default max(40M, 1M x D)");
    else if (!c->overlap_grad_reduce)
        fprintf(f, "one bucket: no --overlap-grad-reduce%s",
                p->cfg.ddp_bucket_size > 0 ? " (--ddp-bucket-size is ignored without it)" : "");
    else
        fprintf(f, "one bucket: only pipeline rank 0's first model chunk is bucketed");
}

static void print_shards(const mg_grad_buffer_layout *l, FILE *f) {
    int d = l->cfg.data_parallel_size;
    mg_grad_shard_param *sp = malloc((size_t)l->n_params * sizeof *sp);
    if (!sp) return;
    fprintf(f, "  shards (each rank's part of each bucket; ranges of the parameters in it):\n");
    fprintf(f, "    %5s %6s %-20s %6s %-20s %-20s %-20s %s\n", "dp", "bucket", "shard", "index",
            "world", "in bucket", "local", "param");
    char a[48], b[48], c[48], e[48], g[48];
    for (int r = 0; r < d && r < GRAD_TEXT_MAX_RANKS; r++)
        for (int k = 0; k < l->n_buckets; k++) {
            mg_grad_range s;
            int n;
            if (mg_grad_buffer_shard_range(l, k, r, &s) != MG_OK ||
                mg_grad_buffer_shard_params(l, k, r, sp, &n) != MG_OK)
                continue;
            range_text(s, a, sizeof a);
            fprintf(f, "    %5d %6d %-20s", r, k, a);
            if (!n) fprintf(f, " %6s (padding only)\n", "-");
            for (int i = 0; i < n; i++) {
                range_text(sp[i].world, b, sizeof b);
                range_text(sp[i].world_in_bucket, c, sizeof c);
                range_text(sp[i].local, e, sizeof e);
                range_text(sp[i].param, g, sizeof g);
                if (i) fprintf(f, "    %5s %6s %-20s", "", "", "");
                fprintf(f, " %6d %-20s %-20s %-20s %s\n", sp[i].index, b, c, e, g);
            }
        }
    if (d > GRAD_TEXT_MAX_RANKS)
        fprintf(f, "    (%d more ranks; `--json` has every shard)\n", d - GRAD_TEXT_MAX_RANKS);
    free(sp);
}

static void print_grad_buffer(const mg_plan *p, const mg_plan_grad_buffer *gb, FILE *f) {
    const mg_grad_buffer_layout *l = &gb->layout;
    fprintf(f, "\n%s%sgrad buffer", gb->expert ? "expert " : "", gb->fp8 ? "fp8 " : "");
    if (gb->pp_rank >= 0) fprintf(f, " of pp %d", gb->pp_rank);
    if (gb->vp_stage >= 0) fprintf(f, " vp %d", gb->vp_stage);
    if (gb->n == 0) {
        fprintf(f, ": no parameters\n");
        return;
    }
    fprintf(f, " (%s %d, %s; ",
            gb->expert ? "expert-parallel rank 0's experts, expert-data-parallel size"
                       : "data-parallel size",
            l->cfg.data_parallel_size,
            l->cfg.use_distributed_optimizer ? "distributed optimizer" : "all-reduce");
    print_bucketing(p, l, f);
    fprintf(f, "):\n  %lld elements, %lld used, %lld padding; %d parameter%s in %d bucket%s\n",
            (long long)l->numel, (long long)l->numel_unpadded,
            (long long)(l->numel - l->numel_unpadded), l->n_params, l->n_params == 1 ? "" : "s",
            l->n_buckets, l->n_buckets == 1 ? "" : "s");
    char a[48];
    for (int k = 0; k < l->n_buckets; k++) {
        const mg_grad_buffer_bucket *b = &l->buckets[k];
        range_text(b->range, a, sizeof a);
        fprintf(f, "  bucket %d: %s, %lld used\n", k, a, (long long)b->numel_unpadded);
        fprintf(f, "    %6s %14s %14s %12s%s\n", "index", "start", "end", "numel",
                gb->names ? "  name" : "");
        for (int r = b->first; r < b->first + b->count; r++) {
            const mg_grad_buffer_param *q = &l->params[r];
            fprintf(f, "    %6d %14lld %14lld %12lld", q->index, (long long)q->range.start,
                    (long long)q->range.end, (long long)(q->range.end - q->range.start));
            if (gb->names) fprintf(f, "  %s", gb->names[q->index]);
            if (l->shared[q->index]) fprintf(f, "  (shared embedding)");
            fputc('\n', f);
        }
    }
    if (l->cfg.use_distributed_optimizer) print_shards(l, f);
}

/* The token dispatch's rows and the bytes of one MoE layer's buffers that scale with them, under
 * the receive budget (--moe-expert-rank-capacity-factor) and in the worst case. */
static void print_moe_dispatch(const mg_plan *p, FILE *f) {
    const mg_gpt_moe_dispatch *d = &p->moe;
    const double e = (double)mg_dtype_size(p->memory_dtype), mib = 1048576.0;
    fprintf(f,
            "  token dispatch buffers per microbatch and MoE layer: %d rows of permuted pairs, up "
            "to %d rows for this rank's experts (%s)\n",
            d->sent, d->received,
            d->capacity                       ? "capacity-limited"
            : d->received < d->received_worst ? "dropless under the receive budget"
                                              : "dropless: sized for the worst case");
    fprintf(f,
            "    per MoE layer: %.1f MiB of activations per microbatch in flight, %.1f MiB of "
            "workspace",
            d->received * d->act_elems_per_row * e / mib,
            d->received * d->work_elems_per_row * e / mib);
    if (d->received < d->received_worst)
        fprintf(f, "; without the budget %d rows: %.1f and %.1f MiB", d->received_worst,
                d->received_worst * d->act_elems_per_row * e / mib,
                d->received_worst * d->work_elems_per_row * e / mib);
    fprintf(f, "\n");
}

static void shape_text(char *buf, size_t cap, const int64_t *s, int ndim) {
    if (ndim == 1)
        snprintf(buf, cap, "(%lld)", (long long)s[0]);
    else
        snprintf(buf, cap, "(%lld, %lld)", (long long)s[0], (long long)s[1]);
}

/* How tensor parallelism splits each weight, and what one rank holds. */
static void print_weights(const mg_plan *p, FILE *f) {
    int tp = p->layout.sizes.tp;
    fprintf(f,
            "\nweights under tensor parallelism %d%s: %lld parameters in the model, %lld on "
            "each tensor-parallel rank\n",
            tp, p->cfg.sequence_parallel && tp > 1 ? " with sequence parallelism" : "",
            (long long)p->params_total, (long long)p->params_tp);
    if (p->params_expert > 0) {
        fprintf(
            f,
            "  mixture of experts: %lld expert parameters on each expert-parallel rank (of %d), "
            "%lld dense\n",
            (long long)p->params_expert, p->layout.sizes.ep,
            (long long)(p->params_tp - p->params_expert));
        if (p->moe.sent > 0) print_moe_dispatch(p, f);
    }
    fprintf(f, "  %-24s %-24s %s\n", "global shape", "per rank", "split  name");
    for (int i = 0; i < p->n_weights; i++) {
        const mg_plan_weight *w = &p->weights[i];
        char g[48], l[48], how[64], blocks[32] = "";
        shape_text(g, sizeof g, w->global_shape, w->ndim);
        shape_text(l, sizeof l, w->local_shape, w->ndim);
        if (w->split_dim < 0)
            snprintf(how, sizeof how, "%s",
                     w->sequence_parallel ? "replicated, SP grad all-reduce" : "replicated");
        else {
            if (w->split_chunks > 1)
                snprintf(blocks, sizeof blocks, " (%d blocks)", w->split_chunks);
            snprintf(how, sizeof how, "%s%s",
                     w->vocab            ? "vocab-parallel"
                     : w->split_dim == 0 ? "column-parallel"
                                         : "row-parallel",
                     blocks);
        }
        fprintf(f, "  %-24s %-24s %s  %s\n", g, l, how, w->name);
    }
}

/* A line under the memory table where bytes is not 0: head, the MiB per rank, tail. */
static void memory_note(FILE *f, size_t bytes, const char *head, const char *tail) {
    if (bytes) fprintf(f, "  %s %.2f MiB per rank%s\n", head, (double)bytes / 1048576.0, tail);
}

/* Memory of one rank per pipeline stage. */
static void print_memory(const mg_plan *p, FILE *f) {
    const double MiB = 1048576.0;
    fprintf(
        f,
        "\nmemory per rank (%s parameters%s; MiB): weights, gradients, master weights, "
        "optimizer, activations (slots x MiB + MiB the slots share: recomputation's, fp8 layers' "
        "forward-only), workspace, batch, total\n",
        mg_dtype_name(p->memory_dtype), p->memory_dtype == MG_F32 ? "" : ", fp32 masters");
    for (int r = 0; r < p->n_memory; r++) {
        const mg_memory_stage *m = &p->memory[r];
        fprintf(f,
                "  pipeline rank %d: %.1f, %.1f, %.1f, %.1f, %.1f (%d x %.2f + %.2f), %.1f, %.1f, "
                "total %.1f MiB\n",
                r, m->weights / MiB, m->grads / MiB, m->master_weights / MiB, m->optimizer / MiB,
                m->activations / MiB, m->slots, m->slot_bytes / MiB, m->recompute_bytes / MiB,
                m->workspace / MiB, m->batch / MiB, m->total / MiB);
    }
    if (!p->n_memory) return;
    memory_note(f, p->memory[0].peer_windows,
                "peer-mapped windows (where a group's ranks share a host: sequence parallelism's "
                "copies, the distributed optimizer's overlapped buckets, expert parallelism's "
                "receive slabs on GPUs), outside the total:",
                "");
    memory_note(f, p->memory[0].graph_inputs,
                "CUDA graphs (full iteration): batch holds every microbatch's inputs,",
                "; the graphs' own memory is measured when they are captured (the training log)");
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
    if (p->n_weights) print_weights(p, f);
    if (p->n_memory) print_memory(p, f);
    mg_plan_echo_text(p, f);
    for (int i = 0; i < p->n_grad; i++) print_grad_buffer(p, &p->grad[i], f);
}
