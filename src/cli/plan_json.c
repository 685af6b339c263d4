/* `megatron plan --json`: exactly one JSON object on stdout,
 *   {"world_size", "order", "sizes", "ranks": [{"rank","tp","cp","ep","dp","pp"}...],
 *    "groups": {kind: [[ranks]...]...},
 *    "pipeline": {"num_microbatches","num_model_chunks","microbatch_group_size",
 *                 "schedule_table": [[microbatch, chunk]...],
 *                 "per_rank": [{"pp_rank","num_warmup_microbatches","order","activation_slots"}],
 *                 "bubble_fraction","bubble_ratio","analytic_bubble_ratio"},   (with microbatches)
 *    "layers": [{"pp_rank","vp_stage","offset","num_layers"}...]}               (with --num-layers)
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
    const mg_schedule_params *s = &p->sched;
    int mv = s->microbatches * s->vpp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_microbatches", s->microbatches);
    cJSON_AddNumberToObject(o, "num_model_chunks", s->vpp);
    cJSON_AddNumberToObject(o, "microbatch_group_size", mg_schedule_group(s));
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
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return MG_FAIL(MG_ERR_NOMEM, "out of memory printing the plan JSON");
    int bad = fprintf(f, "%s\n", text) < 0;
    cJSON_free(text);
    return bad ? MG_FAIL(MG_ERR_IO, "could not write the plan to stdout") : MG_OK;
}
