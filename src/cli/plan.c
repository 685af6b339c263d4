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
#include "parallel/pipeline/p2p.h"

#include "config/flags_command.h"
#include "parallel/layout.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int world_size, microbatches; /* -1: not given */
    const char *param_sizes, *shared_embedding_param;
    const char *echo_counts; /* --moe-echo-token-counts */
    bool json;
} plan_args;

static const char usage[] =
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
    "(`megatron train --help` lists them). The flags of plan itself:\n";

enum { G_LAYOUT, G_GRAD, G_MOE, G_OUTPUT };
static const char *const groups[] = {"layout and schedule", "grad buffer", "mixture of experts",
                                     "output"};
#define ARG(f) MG_FLAG_FIELD(plan_args, f)
static const mg_flag_spec flags[] = {
    {"--world-size", MG_FLAG_GROUP(G_LAYOUT), .kind = MG_FLAG_INT, ARG(world_size), .arg = "N",
     .def = "required", .help = "processes in all, a multiple of tensor x pipeline x context"},
    {"--num-microbatches", MG_FLAG_GROUP(G_LAYOUT), .kind = MG_FLAG_INT, ARG(microbatches),
     .arg = "M", .def = "from the batch",
     .help = "microbatches per step (else --global-batch-size / (--micro-batch-size x dp))"},
    {"--param-sizes", MG_FLAG_GROUP(G_GRAD), .kind = MG_FLAG_STRING_REF, ARG(param_sizes),
     .arg = "A,B,C", .def = "the model's",
     .help = "elements per parameter, in registration order (instead of a model)"},
    {"--shared-embedding-param", MG_FLAG_GROUP(G_GRAD), .kind = MG_FLAG_STRING_REF,
     ARG(shared_embedding_param), .arg = "I[,J..]",
     .help = "indices into --param-sizes of shared embeddings (a bucket each)"},
    {"--moe-echo-token-counts", MG_FLAG_GROUP(G_MOE), .kind = MG_FLAG_STRING_REF, ARG(echo_counts),
     .arg = "FILE",
     .help = "with --moe-enable-echo: a JSON [EP][E] matrix of the tokens each expert-parallel "
             "rank routes to each expert; prints ECHO's plan for them"},
    {"--json", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_BOOL, ARG(json),
     .help = "one JSON object on stdout instead of the text"},
};
#undef ARG

static mg_status check_count(const char *flag, int v) {
    if (v < 1 || v > (1 << 24))
        return MG_FAIL(MG_ERR_USAGE, "%s expects a positive integer, got '%d'", flag, v);
    return MG_OK;
}

static void plan_prepare(mg_cli_context *cx) {
    plan_args *a = cx->args;
    *a = (plan_args){.world_size = -1, .microbatches = -1};
    cx->flags = MG_FLAG_COMMAND("plan", usage, flags, groups, a);
}

/* The plan's own flags, checked, into p (Megatron's are in p->cfg). */
static mg_status take_args(mg_plan *p, const plan_args *a, const mg_flag_command *cmd) {
    if (mg_flags_command_seen(cmd, "--world-size"))
        MG_CHECK(check_count("--world-size", a->world_size));
    if (mg_flags_command_seen(cmd, "--num-microbatches"))
        MG_CHECK(check_count("--num-microbatches", a->microbatches));
    p->world_size = a->world_size;
    p->param_sizes = a->param_sizes;
    p->shared_embedding_param = a->shared_embedding_param;
    p->json = a->json;
    return MG_OK;
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
    mg_parallel_sizes s;
    MG_CHECK(mg_layout_sizes(c, p->world_size, &s));
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
    p->schedule = mg_layout_schedule(c, v, m);
    MG_CHECK(mg_pp_schedule_check(&p->schedule));
    size_t len = 2 * (size_t)m * (size_t)v;
    p->orders = malloc((size_t)pp * len * sizeof *p->orders);
    p->warmup = malloc((size_t)pp * sizeof *p->warmup);
    p->slots = malloc((size_t)pp * sizeof *p->slots);
    p->table = malloc((size_t)m * (size_t)v * sizeof *p->table);
    if (!p->orders || !p->warmup || !p->slots || !p->table)
        return MG_FAIL(MG_ERR_NOMEM, "out of memory for the schedule of %d microbatches", m);
    p->has_pipeline = true;
    MG_CHECK(mg_pp_schedule_table(&p->schedule, p->table));
    /* Megatron's usual cost model: a backward costs twice a forward. */
    MG_CHECK(mg_pp_schedule_timeline_build(&p->schedule, 1.0, 2.0, &p->timeline));
    MG_CHECK(mg_plan_build_placed(p));
    for (int async = 0; async < 2 && pp > 1; async++) {
        mg_p2p_plan msg;
        MG_CHECK(mg_p2p_plan_build(&p->schedule, false, async, 0, &msg));
        double r = msg.makespan / p->timeline.makespan;
        *(async ? &p->msg_async_ratio : &p->msg_blocking_ratio) = r;
        mg_p2p_plan_free(&msg);
    }
    /* Each rank's order and slot count come from the ops the timeline already built. */
    mg_pp_schedule_op *ops = malloc(len * sizeof *ops); /* (2*M*V) one rank's ops */
    if (!ops) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the schedule of %d microbatches", m);
    mg_status st = MG_OK;
    for (int r = 0; r < pp; r++) {
        mg_pp_schedule_counts counts;
        MG_CHECK_GOTO(mg_pp_schedule_rank_counts(&p->schedule, r, &counts), st, done);
        p->warmup[r] = counts.warmup;
        for (size_t i = 0; i < len; i++) ops[i] = p->timeline.ops[(size_t)r * len + i].op;
        mg_pp_schedule_ops_encode(ops, (int)len, p->orders + (size_t)r * len);
        p->slots[r] = mg_pp_schedule_ops_slots(ops, (int)len);
    }
done:
    free(ops);
    return st;
}

static void plan_free(mg_plan *p) {
    mg_parallel_layout_free(&p->layout);
    if (p->has_pipeline) mg_pp_schedule_timeline_free(&p->timeline);
    free(p->orders);
    mg_pp_placement_free(&p->placed);
    free(p->warmup);
    free(p->slots);
    free(p->table);
    free(p->chunks);
    mg_plan_free_grad(p);
    mg_plan_free_memory(p);
    mg_plan_free_echo(p);
}

static mg_status plan_build(mg_plan *p, const plan_args *a, const mg_flag_command *cmd) {
    MG_CHECK(take_args(p, a, cmd));
    p->memory_dtype = mg_plan_dtype(&p->cfg);
    MG_CHECK(build_layout(p));
    MG_CHECK(build_layers(p));
    int m;
    MG_CHECK(resolve_microbatches(p, a->microbatches, &m));
    if (m > 0) MG_CHECK(build_pipeline(p, m));
    MG_CHECK(mg_plan_build_grad(p));
    MG_CHECK(mg_plan_build_memory(p));
    MG_CHECK(mg_plan_build_echo(p, a->echo_counts));
    if (p->json) return mg_plan_print_json(p, stdout);
    mg_plan_print_text(p, stdout);
    return MG_OK;
}

static mg_status plan_run(mg_cli_context *cx) {
    mg_plan p;
    memset(&p, 0, sizeof p);
    p.cfg = cx->cfg;
    mg_status st = plan_build(&p, cx->args, &cx->flags);
    plan_free(&p);
    return st;
}

const mg_cli_command mg_cli_plan = {sizeof(plan_args), plan_prepare, plan_run};
