/* `megatron plan`: what a parallel layout would do, without launching anything.
 *   megatron plan --world-size N [Megatron's parallel flags] [--num-layers L]
 *                 [--num-microbatches M | --global-batch-size B --micro-batch-size b]
 *                 [--param-sizes A,B,C [--shared-embedding-param I[,J..]] | model flags]
 *                 [--use-distributed-optimizer] [--overlap-grad-reduce [--ddp-bucket-size B]]
 *                 [--ddp-pad-buckets-for-high-nccl-busbw] [--json]
 * prints the process groups (Megatron's initialize_model_parallel), each rank's coordinates, the
 * layer placement per (pipeline rank, virtual stage), with microbatches each pipeline rank's
 * schedule (warm-up count, order, activation slots and a timeline with the bubble fraction) and,
 * with --param-sizes or a model, the grad buffer: buckets, padding and each data-parallel rank's
 * shard (cli/plan_grad.c). An invalid layout exits 2 with one line naming the problem and the
 * valid choices. */
#include "cli/cli.h"
#include "cli/plan.h"

#include "core/flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static mg_status parse_count(const char *flag, const char *v, int *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < 1 || x > (1 << 24))
        return MG_FAIL(MG_ERR_USAGE, "%s expects a positive integer, got '%s'", flag,
                       v ? v : "(nothing)");
    *out = (int)x;
    return MG_OK;
}

/* A comma list of parameter indices ("3" or "0,5"), at most cap of them. */
static mg_status parse_indices(const char *flag, const char *v, int *out, int cap, int *n) {
    *n = 0;
    const char *s = v ? v : "";
    do {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || (*end && (*end != ',' || !end[1])) || errno || x < 0 || x > (1 << 24) ||
            *n == cap)
            return MG_FAIL(MG_ERR_USAGE,
                           "%s expects parameter indices (0, 1, ...; a comma list of at most %d), "
                           "got '%s'",
                           flag, cap, v ? v : "(nothing)");
        out[(*n)++] = (int)x;
        s = *end ? end + 1 : end;
    } while (*s);
    return MG_OK;
}

/* Takes the plan-only flags out of argv; the rest are Megatron's and go to mg_flags_parse. */
static mg_status parse_args(mg_plan *p, int argc, char **argv, int *microbatches, bool *help) {
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return MG_FAIL(MG_ERR_NOMEM, "out of memory parsing flags");
    int n = 0;
    mg_status st = MG_OK;
    p->world_size = -1;
    p->n_shared = 0;
    *microbatches = -1;
    for (int i = 0; i < argc && st == MG_OK; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        if (!strcmp(a, "--json")) {
            p->json = true;
        } else if (name_len == 12 && !strncmp(a, "--world-size", name_len)) {
            st = parse_count("--world-size", val, &p->world_size);
            i += eq ? 0 : 1;
        } else if (name_len == 18 && !strncmp(a, "--num-microbatches", name_len)) {
            st = parse_count("--num-microbatches", val, microbatches);
            i += eq ? 0 : 1;
        } else if (name_len == 13 && !strncmp(a, "--param-sizes", name_len)) {
            p->param_sizes = val;
            if (!val || !*val)
                st = MG_FAIL(MG_ERR_USAGE, "--param-sizes expects comma-separated positive "
                                           "element counts (e.g. 10,20,30), got nothing");
            i += eq ? 0 : 1;
        } else if (name_len == 24 && !strncmp(a, "--shared-embedding-param", name_len)) {
            st = parse_indices("--shared-embedding-param", val, p->shared_embedding_params,
                               MG_PLAN_SHARED_MAX, &p->n_shared);
            i += eq ? 0 : 1;
        } else {
            rest[n++] = argv[i];
        }
    }
    if (st == MG_OK) st = mg_flags_parse(&p->cfg, n, rest, help);
    free(rest);
    return st;
}

static mg_status build_layout(mg_plan *p) {
    const mg_config *c = &p->cfg;
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    int cp = c->context_parallel_size;
    if (p->world_size < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "`megatron plan` needs --world-size N; the smallest for these flags is %lld "
                       "(tensor %d x pipeline %d x context %d)",
                       (long long)tp * pp * cp, tp, pp, cp);
    mg_parallel_sizes s = {.world_size = p->world_size,
                           .tp = tp,
                           .pp = pp,
                           .cp = cp,
                           .ep = c->expert_model_parallel_size,
                           .etp = c->expert_tensor_parallel_size};
    const char *order = c->parallel_order[0]      ? c->parallel_order
                        : c->use_tp_pp_dp_mapping ? MG_PARALLEL_ORDER_TP_PP_DP
                                                  : MG_PARALLEL_ORDER_DEFAULT;
    if (c->parallel_order[0] && c->use_tp_pp_dp_mapping &&
        strcmp(c->parallel_order, MG_PARALLEL_ORDER_TP_PP_DP))
        return MG_FAIL(MG_ERR_USAGE,
                       "--use-tp-pp-dp-mapping means --parallel-order %s, but --parallel-order "
                       "is %s; give one of them",
                       MG_PARALLEL_ORDER_TP_PP_DP, c->parallel_order);
    snprintf(s.order, sizeof s.order, "%s", order);
    return mg_parallel_layout_build(&s, &p->layout);
}

static mg_status build_layers(mg_plan *p) {
    const mg_config *c = &p->cfg;
    int pp = c->pipeline_model_parallel_size;
    int vflag = c->virtual_pipeline_model_parallel_size;
    p->vpp = vflag > 0 ? vflag : 1;
    if (c->num_layers < 0) {
        if (c->num_layers_per_virtual_pipeline_stage > 0)
            return MG_FAIL(MG_ERR_USAGE, "--num-layers-per-virtual-pipeline-stage needs "
                                         "--num-layers; or give --virtual-pipeline-model-"
                                         "parallel-size");
        if (p->vpp > 1 && pp == 1)
            return MG_FAIL(MG_ERR_USAGE,
                           "--virtual-pipeline-model-parallel-size %d needs "
                           "--pipeline-model-parallel-size > 1",
                           p->vpp);
        return MG_OK;
    }
    mg_layers_params lp = mg_layers_params_of(c);
    MG_CHECK(mg_layers_check(&lp, &p->vpp));
    p->chunks = calloc((size_t)pp * (size_t)p->vpp, sizeof *p->chunks);
    if (!p->chunks) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the layer plan");
    p->has_layers = true;
    return mg_layers_plan(&lp, p->chunks);
}

/* Megatron's number of microbatches: global batch / (micro batch x data-parallel size). */
static mg_status resolve_microbatches(const mg_plan *p, int given, int *m) {
    const mg_config *c = &p->cfg;
    *m = given;
    if (given > 0 || c->global_batch_size < 0) return MG_OK;
    long long per_step = (long long)c->micro_batch_size * p->layout.dp;
    if (c->micro_batch_size < 1 || c->global_batch_size % per_step)
        return MG_FAIL(MG_ERR_USAGE,
                       "--global-batch-size %d is not divisible by --micro-batch-size %d x "
                       "data-parallel size %d; use a multiple of %lld",
                       c->global_batch_size, c->micro_batch_size, p->layout.dp, per_step);
    *m = (int)(c->global_batch_size / per_step);
    return MG_OK;
}

static mg_status build_pipeline(mg_plan *p, int m) {
    const mg_config *c = &p->cfg;
    int pp = c->pipeline_model_parallel_size, v = p->vpp;
    p->sched = (mg_schedule_params){.pp = pp,
                                    .vpp = v,
                                    .microbatches = m,
                                    .group = c->microbatch_group_size_per_vp_stage > 0
                                                 ? c->microbatch_group_size_per_vp_stage
                                                 : 0,
                                    .no_overlap_p2p = c->no_overlap_p2p_communication};
    MG_CHECK(mg_schedule_check(&p->sched));
    size_t len = 2 * (size_t)m * (size_t)v;
    p->orders = malloc((size_t)pp * len * sizeof *p->orders);
    p->warmup = malloc((size_t)pp * sizeof *p->warmup);
    p->slots = malloc((size_t)pp * sizeof *p->slots);
    p->table = malloc((size_t)m * (size_t)v * sizeof *p->table);
    if (!p->orders || !p->warmup || !p->slots || !p->table)
        return MG_FAIL(MG_ERR_NOMEM, "out of memory for the schedule of %d microbatches", m);
    p->has_pipeline = true;
    MG_CHECK(mg_schedule_table(&p->sched, p->table));
    /* Megatron's usual cost model: a backward costs twice a forward. */
    MG_CHECK(mg_schedule_timeline_build(&p->sched, 1.0, 2.0, &p->timeline));
    /* Each rank's order and slot count come from the ops the timeline already built. */
    mg_schedule_op *ops = malloc(len * sizeof *ops); /* (2*M*V) one rank's ops */
    if (!ops) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the schedule of %d microbatches", m);
    mg_status st = MG_OK;
    for (int r = 0; r < pp; r++) {
        mg_schedule_counts counts;
        MG_CHECK_GOTO(mg_schedule_rank_counts(&p->sched, r, &counts), st, done);
        p->warmup[r] = counts.warmup;
        for (size_t i = 0; i < len; i++) ops[i] = p->timeline.ops[(size_t)r * len + i].op;
        mg_schedule_ops_encode(ops, (int)len, p->orders + (size_t)r * len);
        p->slots[r] = mg_schedule_ops_slots(ops, (int)len);
    }
done:
    free(ops);
    return st;
}

static void plan_free(mg_plan *p) {
    mg_parallel_layout_free(&p->layout);
    if (p->has_pipeline) mg_schedule_timeline_free(&p->timeline);
    free(p->orders);
    free(p->warmup);
    free(p->slots);
    free(p->table);
    free(p->chunks);
    mg_plan_free_grad(p);
    mg_plan_free_memory(p);
}

static mg_status plan_run(mg_plan *p, int argc, char **argv, bool *help) {
    int given_m;
    MG_CHECK(parse_args(p, argc, argv, &given_m, help));
    if (*help) return MG_OK;
    MG_CHECK(build_layout(p));
    MG_CHECK(build_layers(p));
    int m;
    MG_CHECK(resolve_microbatches(p, given_m, &m));
    if (m > 0) MG_CHECK(build_pipeline(p, m));
    MG_CHECK(mg_plan_build_grad(p));
    MG_CHECK(mg_plan_build_memory(p));
    if (p->json) return mg_plan_print_json(p, stdout);
    mg_plan_print_text(p, stdout);
    return MG_OK;
}

static void plan_usage(FILE *f) {
    fprintf(
        f,
        "usage: megatron plan --world-size N [--tensor-model-parallel-size T]\n"
        "         [--pipeline-model-parallel-size P] [--virtual-pipeline-model-parallel-size V]\n"
        "         [--context-parallel-size C] [--expert-model-parallel-size E]\n"
        "         [--expert-tensor-parallel-size ET] [--use-tp-pp-dp-mapping | --parallel-order "
        "ORDER]\n"
        "         [--num-layers L [--decoder-first-pipeline-num-layers F] ...]\n"
        "         [--num-microbatches M | --global-batch-size B --micro-batch-size b]\n"
        "         [--microbatch-group-size-per-virtual-pipeline-stage G]\n"
        "         [--param-sizes A,B,C [--shared-embedding-param I[,J..]] | --hidden-size H ...]\n"
        "         [--use-distributed-optimizer] [--overlap-grad-reduce [--ddp-bucket-size B]]\n"
        "         [--ddp-pad-buckets-for-high-nccl-busbw] [--json]\n"
        "Prints Megatron's process groups, each rank's coordinates, the layers of each\n"
        "pipeline stage, the pipeline schedule and, for --param-sizes (elements per parameter,\n"
        "in registration order) or a model's flags, the contiguous grad buffer: its buckets,\n"
        "padding and each data-parallel rank's shard, and (with a model and a batch) the\n"
        "memory of one rank per pipeline stage (--device cpu: fp32; else bf16 with fp32\n"
        "masters); launches nothing. Any other training flag is accepted and ignored\n"
        "(`megatron train --help` lists them).\n");
}

int mg_cli_plan(int argc, char **argv) {
    mg_plan p;
    memset(&p, 0, sizeof p);
    mg_config_defaults(&p.cfg);
    bool help = false;
    mg_status st = plan_run(&p, argc, argv, &help);
    if (st == MG_OK && help) plan_usage(stdout);
    plan_free(&p);
    return mg_cli_report(st);
}
