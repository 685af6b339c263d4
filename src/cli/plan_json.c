/* `megatron plan --json`: exactly one JSON object on stdout,
 *   {"world_size", "order", "sizes", "ranks": [{"rank","tp","cp","ep","dp","pp"}...],
 *    "groups": {kind: [[ranks]...]...},
 *    "pipeline": {"num_microbatches","num_model_chunks","microbatch_group_size",
 *                 "schedule_table": [[microbatch, chunk]...],
 *                 "per_rank": [{"pp_rank","num_warmup_microbatches","order","activation_slots"}],
 *                 "bubble_fraction","bubble_ratio","analytic_bubble_ratio",
 *                 "messages_blocking_time_ratio","messages_async_time_ratio" (P > 1)},
 *                                                                  (with microbatches)
 *    "layers": [{"pp_rank","vp_stage","offset","num_layers"}...],              (with --num-layers)
 *    "grad_buffer": BUFFER,                                                     (--param-sizes)
 *    "grad_buffers": [{"pp_rank","vp_stage", ...BUFFER's members}...]}          (a model's flags)
 * BUFFER = {"data_parallel_size","use_distributed_optimizer","bucket_size" (null: one bucket),
 *   "numel","numel_unpadded",
 *   "params": [{"index","start","end","bucket"[,"name"][,"shared_embedding": true]}...]
 *             (buffer order, i.e. reverse registration order; index = registration index),
 *   "buckets": [{"start","end","numel_unpadded"}...],
 *   "shards": [{"dp_rank","buckets": [{"bucket","range": [a,b],
 *               "params": [{"index","world","world_in_bucket","local","param"}...]}...]}...]}
 *             (only with --use-distributed-optimizer; ranges are [start, end) pairs)
 * "ep" is the expert-parallel rank (Megatron's get_expert_model_parallel_rank); vp_stage is null
 * without virtual stages. */
#include "cli/plan.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static cJSON *int_array(const int *v, int n) {
    return cJSON_CreateIntArray(v, n);
}

static cJSON *groups_json(const mg_parallel_layout *l) {
    cJSON *groups = cJSON_CreateObject();
    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        cJSON *list = cJSON_AddArrayToObject(groups, mg_group_kind_name((mg_group_kind)k));
        for (int g = 0; list && g < l->groups[k].n_groups; g++) {
            int n;
            const int *r = mg_parallel_group_ranks(l, (mg_group_kind)k, g, &n);
            cJSON_AddItemToArray(list, int_array(r, n));
        }
    }
    return groups;
}

static cJSON *ranks_json(const mg_parallel_layout *l, int world) {
    cJSON *ranks = cJSON_CreateArray();
    for (int r = 0; r < world; r++) {
        mg_rank_coords c;
        if (mg_parallel_rank_coords(l, r, &c) != MG_OK) break;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddNumberToObject(o, "tp", c.tp);
        cJSON_AddNumberToObject(o, "cp", c.cp);
        cJSON_AddNumberToObject(o, "ep", c.ep);
        cJSON_AddNumberToObject(o, "dp", c.dp);
        cJSON_AddNumberToObject(o, "pp", c.pp);
        cJSON_AddNumberToObject(o, "expert_tp", c.etp);
        cJSON_AddNumberToObject(o, "expert_dp", c.edp);
        cJSON_AddItemToArray(ranks, o);
    }
    return ranks;
}

static cJSON *pipeline_json(const mg_plan *p) {
    const mg_pp_schedule_params *s = &p->schedule;
    int mv = s->microbatches * s->vpp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_microbatches", s->microbatches);
    cJSON_AddNumberToObject(o, "num_model_chunks", s->vpp);
    cJSON_AddNumberToObject(o, "microbatch_group_size", mg_pp_schedule_group(s));
    cJSON *table = cJSON_AddArrayToObject(o, "schedule_table");
    for (int k = 0; table && k < mv; k++) {
        int e[2] = {p->table[k].microbatch, p->table[k].chunk};
        cJSON_AddItemToArray(table, int_array(e, 2));
    }
    cJSON *per_rank = cJSON_AddArrayToObject(o, "per_rank");
    for (int r = 0; per_rank && r < s->pp; r++) {
        cJSON *rank = cJSON_CreateObject();
        cJSON_AddNumberToObject(rank, "pp_rank", r);
        cJSON_AddNumberToObject(rank, "num_warmup_microbatches", p->warmup[r]);
        cJSON_AddItemToObject(rank, "order", int_array(p->orders + (size_t)r * 2 * mv, 2 * mv));
        cJSON_AddNumberToObject(rank, "activation_slots", p->slots[r]);
        cJSON_AddItemToArray(per_rank, rank);
    }
    cJSON_AddNumberToObject(o, "bubble_fraction", p->timeline.bubble_fraction);
    cJSON_AddNumberToObject(o, "bubble_ratio", p->timeline.bubble_ratio);
    cJSON_AddNumberToObject(o, "analytic_bubble_ratio", p->timeline.analytic_ratio);
    if (p->has_placed) {
        cJSON *placed = cJSON_AddObjectToObject(o, "placed");
        cJSON_AddNumberToObject(placed, "output_layer_and_loss_in_layers", p->out_layers);
        cJSON *idle = cJSON_AddArrayToObject(placed, "idle_fraction_per_rank");
        for (int r = 0; idle && r < s->pp; r++)
            cJSON_AddItemToArray(idle, cJSON_CreateNumber(p->placed.idle[r]));
        cJSON_AddNumberToObject(placed, "time_over_even_split", p->placed.ratio);
        if (p->placed.suggested) {
            cJSON_AddStringToObject(placed, "suggested_layout", p->placed.suggested);
            cJSON_AddNumberToObject(placed, "suggested_time_over_even_split",
                                    p->placed.suggested_ratio);
        }
    }
    if (s->pp > 1) {
        cJSON_AddNumberToObject(o, "messages_blocking_time_ratio", p->msg_blocking_ratio);
        cJSON_AddNumberToObject(o, "messages_async_time_ratio", p->msg_async_ratio);
    }
    return o;
}

static cJSON *layers_json(const mg_plan *p) {
    int pp = p->cfg.pipeline_model_parallel_size;
    cJSON *layers = cJSON_CreateArray();
    for (int r = 0; r < pp; r++)
        for (int v = 0; v < p->vpp; v++) {
            const mg_layers_chunk *ch = &p->chunks[r * p->vpp + v];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "pp_rank", r);
            if (p->vpp > 1)
                cJSON_AddNumberToObject(o, "vp_stage", v);
            else
                cJSON_AddNullToObject(o, "vp_stage");
            cJSON_AddNumberToObject(o, "offset", ch->offset);
            cJSON_AddNumberToObject(o, "num_layers", ch->count);
            cJSON_AddItemToArray(layers, o);
        }
    return layers;
}

static cJSON *range_json(mg_grad_range r) {
    double v[2] = {(double)r.start, (double)r.end};
    return cJSON_CreateDoubleArray(v, 2);
}

static cJSON *shards_json(const mg_grad_buffer_layout *l) {
    cJSON *shards = cJSON_CreateArray();
    mg_grad_shard_param *sp = malloc((size_t)l->n_params * sizeof *sp);
    for (int r = 0; shards && sp && r < l->cfg.data_parallel_size; r++) {
        cJSON *rank = cJSON_CreateObject();
        cJSON_AddNumberToObject(rank, "dp_rank", r);
        cJSON *buckets = cJSON_AddArrayToObject(rank, "buckets");
        for (int k = 0; buckets && k < l->n_buckets; k++) {
            mg_grad_range s;
            int n;
            if (mg_grad_buffer_shard_range(l, k, r, &s) != MG_OK ||
                mg_grad_buffer_shard_params(l, k, r, sp, &n) != MG_OK)
                continue;
            cJSON *b = cJSON_CreateObject();
            cJSON_AddNumberToObject(b, "bucket", k);
            cJSON_AddItemToObject(b, "range", range_json(s));
            cJSON *params = cJSON_AddArrayToObject(b, "params");
            for (int i = 0; params && i < n; i++) {
                cJSON *q = cJSON_CreateObject();
                cJSON_AddNumberToObject(q, "index", sp[i].index);
                cJSON_AddItemToObject(q, "world", range_json(sp[i].world));
                cJSON_AddItemToObject(q, "world_in_bucket", range_json(sp[i].world_in_bucket));
                cJSON_AddItemToObject(q, "local", range_json(sp[i].local));
                cJSON_AddItemToObject(q, "param", range_json(sp[i].param));
                cJSON_AddItemToArray(params, q);
            }
            cJSON_AddItemToArray(buckets, b);
        }
        cJSON_AddItemToArray(shards, rank);
    }
    free(sp);
    return shards;
}

/* [{"pp_rank", "weights", "grads", "master_weights", "optimizer", "activations", ...}]: bytes
 * on one rank of each stage (train/memory.h). */
static cJSON *memory_json(const mg_plan *p) {
    cJSON *arr = cJSON_CreateArray();
    for (int r = 0; arr && r < p->n_memory; r++) {
        const mg_memory_stage *m = &p->memory[r];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddNumberToObject(o, "pp_rank", m->pp_rank);
        cJSON_AddStringToObject(o, "dtype", mg_dtype_name(p->memory_dtype));
        cJSON_AddNumberToObject(o, "params", (double)m->params);
        cJSON_AddNumberToObject(o, "weights", (double)m->weights);
        cJSON_AddNumberToObject(o, "grads", (double)m->grads);
        cJSON_AddNumberToObject(o, "master_weights", (double)m->master_weights);
        cJSON_AddNumberToObject(o, "optimizer", (double)m->optimizer);
        cJSON_AddNumberToObject(o, "activations", (double)m->activations);
        cJSON_AddNumberToObject(o, "activation_slots", m->slots);
        cJSON_AddNumberToObject(o, "slot_bytes", (double)m->slot_bytes);
        cJSON_AddNumberToObject(o, "recompute_bytes", (double)m->recompute_bytes);
        cJSON_AddNumberToObject(o, "workspace", (double)m->workspace);
        cJSON_AddNumberToObject(o, "batch", (double)m->batch);
        cJSON_AddNumberToObject(o, "graph_inputs", (double)m->graph_inputs);
        cJSON_AddNumberToObject(o, "total", (double)m->total);
        cJSON_AddNumberToObject(o, "peer_windows", (double)m->peer_windows);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* {"params_total", "params_per_tp_rank", "tensors": [{"name", "global_shape", "shape",
 * "tp_split_dim", "tp_split_chunks", "sequence_parallel"}...]} */
static cJSON *weights_json(const mg_plan *p) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "params_total", (double)p->params_total);
    cJSON_AddNumberToObject(o, "params_per_tp_rank", (double)p->params_tp);
    if (p->params_expert > 0) {
        cJSON_AddNumberToObject(o, "params_expert_per_ep_rank", (double)p->params_expert);
        const mg_gpt_moe_dispatch *d = &p->moe;
        cJSON_AddNumberToObject(o, "moe_rows_sent", d->sent);
        cJSON_AddNumberToObject(o, "moe_rows_received", d->received);
        cJSON_AddNumberToObject(o, "moe_capacity", d->capacity);
        if (d->sent > 0) { /* bytes per rank for one MoE layer: a microbatch's activations and
                              the workspace, with the budget (if any) and in the worst case */
            const double e = (double)mg_dtype_size(p->memory_dtype);
            cJSON *b = cJSON_AddObjectToObject(o, "moe_dispatch_bytes");
            cJSON_AddNumberToObject(b, "rows_received_worst_case", d->received_worst);
            cJSON_AddNumberToObject(b, "activations_per_layer_microbatch",
                                    (double)d->received * d->act_elems_per_row * e);
            cJSON_AddNumberToObject(b, "workspace",
                                    (double)d->received * d->work_elems_per_row * e);
            cJSON_AddNumberToObject(b, "activations_per_layer_microbatch_worst_case",
                                    (double)d->received_worst * d->act_elems_per_row * e);
            cJSON_AddNumberToObject(b, "workspace_worst_case",
                                    (double)d->received_worst * d->work_elems_per_row * e);
        }
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
    for (int i = 0; arr && i < p->n_weights; i++) {
        const mg_plan_weight *w = &p->weights[i];
        cJSON *x = cJSON_CreateObject();
        if (!x) break;
        cJSON_AddStringToObject(x, "name", w->name);
        double gs[2] = {(double)w->global_shape[0], (double)w->global_shape[1]};
        double ls[2] = {(double)w->local_shape[0], (double)w->local_shape[1]};
        cJSON_AddItemToObject(x, "global_shape", cJSON_CreateDoubleArray(gs, w->ndim));
        cJSON_AddItemToObject(x, "shape", cJSON_CreateDoubleArray(ls, w->ndim));
        cJSON_AddNumberToObject(x, "tp_split_dim", w->split_dim);
        cJSON_AddNumberToObject(x, "tp_split_chunks", w->split_chunks);
        cJSON_AddBoolToObject(x, "sequence_parallel", w->sequence_parallel);
        cJSON_AddItemToArray(arr, x);
    }
    return o;
}

/* BUFFER's members, added to o. */
static void grad_buffer_json(const mg_plan_grad_buffer *gb, cJSON *o) {
    const mg_grad_buffer_layout *l = &gb->layout;
    if (gb->expert) cJSON_AddBoolToObject(o, "expert", true); /* an MoE chunk's experts */
    if (gb->fp8) cJSON_AddBoolToObject(o, "fp8", true);       /* --fp8-param-gather's fp8 weights */
    cJSON_AddNumberToObject(o, "data_parallel_size", l->cfg.data_parallel_size);
    cJSON_AddBoolToObject(o, "use_distributed_optimizer", l->cfg.use_distributed_optimizer);
    if (l->bucket_size == MG_GRAD_BUFFER_NO_BUCKET_SIZE)
        cJSON_AddNullToObject(o, "bucket_size");
    else
        cJSON_AddNumberToObject(o, "bucket_size", (double)l->bucket_size);
    cJSON_AddNumberToObject(o, "numel", (double)l->numel);
    cJSON_AddNumberToObject(o, "numel_unpadded", (double)l->numel_unpadded);
    cJSON *params = cJSON_AddArrayToObject(o, "params");
    for (int r = 0; params && r < l->n_params; r++) {
        const mg_grad_buffer_param *q = &l->params[r];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "index", q->index);
        cJSON_AddNumberToObject(x, "start", (double)q->range.start);
        cJSON_AddNumberToObject(x, "end", (double)q->range.end);
        cJSON_AddNumberToObject(x, "bucket", q->bucket);
        if (gb->names) cJSON_AddStringToObject(x, "name", gb->names[q->index]);
        if (l->shared[q->index]) cJSON_AddTrueToObject(x, "shared_embedding");
        cJSON_AddItemToArray(params, x);
    }
    cJSON *buckets = cJSON_AddArrayToObject(o, "buckets");
    for (int k = 0; buckets && k < l->n_buckets; k++) {
        const mg_grad_buffer_bucket *b = &l->buckets[k];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "start", (double)b->range.start);
        cJSON_AddNumberToObject(x, "end", (double)b->range.end);
        cJSON_AddNumberToObject(x, "numel_unpadded", (double)b->numel_unpadded);
        cJSON_AddItemToArray(buckets, x);
    }
    if (l->cfg.use_distributed_optimizer) cJSON_AddItemToObject(o, "shards", shards_json(l));
}

static cJSON *grad_buffers_json(const mg_plan *p) {
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list && i < p->n_grad; i++) {
        const mg_plan_grad_buffer *gb = &p->grad[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "pp_rank", gb->pp_rank);
        if (gb->vp_stage >= 0)
            cJSON_AddNumberToObject(o, "vp_stage", gb->vp_stage);
        else
            cJSON_AddNullToObject(o, "vp_stage");
        if (gb->n > 0) grad_buffer_json(gb, o);
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

mg_status mg_plan_print_json(const mg_plan *p, FILE *f) {
    const mg_parallel_layout *l = &p->layout;
    cJSON *root = cJSON_CreateObject();
    if (!root) return MG_FAIL(MG_ERR_NOMEM, "out of memory building the plan JSON");
    cJSON_AddNumberToObject(root, "world_size", p->world_size);
    cJSON_AddStringToObject(root, "order", l->sizes.order);
    cJSON *sizes = cJSON_AddObjectToObject(root, "sizes");
    if (sizes) {
        cJSON_AddNumberToObject(sizes, "tp", l->sizes.tp);
        cJSON_AddNumberToObject(sizes, "pp", l->sizes.pp);
        cJSON_AddNumberToObject(sizes, "cp", l->sizes.cp);
        cJSON_AddNumberToObject(sizes, "ep", l->sizes.ep);
        cJSON_AddNumberToObject(sizes, "dp", l->dp);
        cJSON_AddNumberToObject(sizes, "expert_tp", l->sizes.etp);
        cJSON_AddNumberToObject(sizes, "expert_dp", l->edp);
    }
    cJSON_AddItemToObject(root, "ranks", ranks_json(l, p->world_size));
    cJSON_AddItemToObject(root, "groups", groups_json(l));
    if (p->has_pipeline) cJSON_AddItemToObject(root, "pipeline", pipeline_json(p));
    if (p->has_layers) cJSON_AddItemToObject(root, "layers", layers_json(p));
    if (p->n_weights) cJSON_AddItemToObject(root, "weights", weights_json(p));
    if (p->n_memory) cJSON_AddItemToObject(root, "memory", memory_json(p));
    if (p->n_grad && p->grad_from_model) {
        cJSON_AddItemToObject(root, "grad_buffers", grad_buffers_json(p));
    } else if (p->n_grad) {
        cJSON *gb = cJSON_AddObjectToObject(root, "grad_buffer");
        if (gb) grad_buffer_json(&p->grad[0], gb);
    }
    mg_plan_echo_json(p, root);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return MG_FAIL(MG_ERR_NOMEM, "out of memory printing the plan JSON");
    int bad = fprintf(f, "%s\n", text) < 0;
    cJSON_free(text);
    return bad ? MG_FAIL(MG_ERR_IO, "could not write the plan to stdout") : MG_OK;
}
