/* `megatron bench`: training throughput of a GPT-2 shape on mock data, with the same numbers the
 * PyTorch baseline (bench/baselines/torch_gpt2.py) prints, so the two can be compared line by line
 * (bench/gpu_bench.sh runs both).
 *
 * The run: the GPT-2 shape (--model, or Megatron's model flags on top of it) as `megatron train`
 * would build it (learned positions, LayerNorm, GELU, biases, tied embeddings, vocabulary 50304,
 * mock data, AdamW lr 6e-4 constant, weight decay 0.1, betas (0.9, 0.95), clipping 1.0; bf16 on
 * CUDA, or fp16 with --fp16), --warmup untimed steps, then --iters steps each timed by the wall
 * clock around mg_trainer_step (which reads the loss back, so every step ends synchronised).
 *
 * Reported: ms/step (mean and median), tokens/s (tokens of the timed steps over their total time),
 * model FLOPs per token 6N + 12·L·H·T (nanoGPT/PaLM: N = parameters without the position
 * embeddings, the tied embedding counted once; L layers, H = heads × head dim, T = sequence
 * length), achieved TFLOP/s, the bf16 matrix-multiply peak measured in this process before the
 * model exists (the backend's matmul_peak_tflops, or timed linear_forward calls where the backend
 * has none, e.g. the CPU) and MFU = achieved / peak, the memory peak (the device's memory in use
 * after the timed steps, as the driver sees it, context included: everything is allocated before
 * the first step, so that is the peak; on the CPU the process's peak resident size) and the
 * trainer's arenas. --json prints exactly one JSON line on stdout (logs and the table go to
 * stderr). */
#include "cli/cli.h"
#include "core/clock.h"

#include "comm/comm.h"
#include "config/flags.h"
#include "config/flags_command.h"
#include "core/log.h"
#include "core/rng.h"
#include "train/backend_select.h"
#include "train/metrics.h"
#include "train/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int layers, hidden, heads;
} bench_shape;

/* GPT-2's four sizes (head dim 64) */
static const bench_shape g_shapes[] = {
    {"gpt2-124m", 12, 768, 12},
    {"gpt2-350m", 24, 1024, 16},
    {"gpt2-774m", 36, 1280, 20},
    {"gpt2-1.5b", 48, 1600, 25},
};
#define N_SHAPES    ((int)(sizeof g_shapes / sizeof *g_shapes))
#define BENCH_SEQ   1024
#define BENCH_VOCAB 50304

typedef struct {
    const char *model; /* --model, resolved to `shape` */
    const bench_shape *shape;
    int iters, warmup, peak_n;
    bool json;
} bench_opts;

typedef struct {
    double peak_tflops;
    int peak_n;
    const char *peak_how;
    double *step_s;   /* (iters) */
    double enqueue_s; /* host time to enqueue the timed steps (mg_trainer_step_async), in all */
    double loss_first, loss_last;
    double mem_peak, mem_arenas; /* bytes */
    const char *mem_how;
    int64_t params, params_flops;
    double flops_per_token;
} bench_result;

static const char usage[] =
    "usage: megatron bench [--model NAME] [--iters N] [--warmup N] [--peak-size N] [--json] "
    "[Megatron flags]\n\n"
    "Times training steps of a GPT-2 shape on mock data and prints ms/step, tokens/s,\n"
    "model TFLOP/s (6N + 12*L*H*T FLOPs per token), MFU against the bf16 matmul peak\n"
    "measured in the same process, and peak memory. Megatron's training flags\n"
    "(`megatron train --help`) override the shape and the run, e.g. --device cuda\n"
    "--micro-batch-size 32 (default 32) --seq-length 1024 --num-layers 2 --hidden-size 64\n"
    "--num-attention-heads 4 --vocab-size 512 --num-threads 2. A step is one micro-batch\n"
    "unless --global-batch-size asks for gradient accumulation over several.\n";

enum { G_RUN, G_OUTPUT };
static const char *const groups[] = {"benchmark", "output"};
#define ARG(f) MG_FLAG_FIELD(bench_opts, f)
static const mg_flag_spec flags[] = {
    {"--model", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_STRING_REF, ARG(model), .arg = "NAME",
     .help = "gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b (12x768, 24x1024, 36x1280, 48x1600; "
             "seq 1024, vocab 50304)"},
    {"--iters", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT, ARG(iters), .arg = "N",
     .help = "timed steps, at least 1"},
    {"--warmup", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT, ARG(warmup), .arg = "N",
     .help = "untimed steps first"},
    {"--peak-size", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT, ARG(peak_n), .arg = "N",
     .def = "by device",
     .help = "side of the square matmul timed for the peak, >= 16 (8192 on cuda, 1024 on cpu)"},
    {"--json", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_BOOL, ARG(json),
     .help = "print one JSON line on stdout; logs and the table go to stderr"},
};
#undef ARG

static const bench_shape *find_shape(const char *name) {
    for (int i = 0; i < N_SHAPES; i++) {
        /* "124m" names "gpt2-124m" too */
        if (!strcmp(name, g_shapes[i].name) || !strcmp(name, g_shapes[i].name + 5))
            return &g_shapes[i];
    }
    return NULL;
}

static mg_status check_min(const char *flag, int v, int min) {
    if (v < min) return MG_FAIL(MG_ERR_USAGE, "%s expects an integer >= %d, got %d", flag, min, v);
    return MG_OK;
}

/* The GPT-2 run of `shape` in Megatron's terms; the user's flags are applied on top. */
static void bench_config(mg_config *c, const bench_shape *s) {
    mg_config_defaults(c);
    c->num_layers = s->layers;
    c->hidden_size = s->hidden;
    c->num_attention_heads = s->heads;
    c->seq_length = BENCH_SEQ;
    c->position_embedding = MG_POS_LEARNED;
    c->normalization = MG_NORM_LAYERNORM;
    c->swiglu = false;
    c->disable_bias_linear = false;
    c->untie_embeddings = false;
    c->vocab_size = BENCH_VOCAB; /* 50257 padded to a multiple of 128 */
    c->make_vocab_size_divisible_by = 128;
    c->micro_batch_size = 32;
    c->lr = 6e-4;
    c->min_lr = 6e-4;
    c->lr_decay_style = MG_LR_CONSTANT;
    c->weight_decay = 0.1;
    c->adam_beta1 = 0.9;
    c->adam_beta2 = 0.95;
    c->adam_eps = 1e-8;
    c->clip_grad = 1.0;
    /* the baselines train without dropout (nanoGPT's dropout 0); flags on top measure its cost */
    c->attention_dropout = 0;
    c->hidden_dropout = 0;
    c->mock_data = true;
    c->eval_iters = 0;
    c->log_interval = 1000000;
}

/* The bench's own flags go into its options, Megatron's into cx->cfg on top of the GPT-2 run
 * of the first shape (then of --model's, below), in one pass. */
static void bench_prepare(mg_cli_context *cx) {
    bench_opts *o = cx->args;
    *o = (bench_opts){.model = g_shapes[0].name, .iters = 20, .warmup = 5, .peak_n = 0};
    bench_config(&cx->cfg, &g_shapes[0]);
    cx->flags = MG_FLAG_COMMAND("bench", usage, flags, groups, o);
}

/* The options' checks, and --model's shape where the command line does not give one. */
static mg_status check_opts(bench_opts *o, mg_config *cfg, const mg_flag_command *cmd) {
    o->shape = find_shape(o->model);
    if (!o->shape)
        return MG_FAIL(MG_ERR_USAGE,
                       "--model %s: unknown; choose gpt2-124m, gpt2-350m, gpt2-774m or "
                       "gpt2-1.5b (or give --num-layers/--hidden-size/... yourself)",
                       o->model);
    MG_CHECK(check_min("--iters", o->iters, 1));
    MG_CHECK(check_min("--warmup", o->warmup, 0));
    if (mg_flags_command_seen(cmd, "--peak-size"))
        MG_CHECK(check_min("--peak-size", o->peak_n, 16));
    /* the shape of --model where the command line does not give it */
    static const char *const shape_flags[] = {"--num-layers", "--hidden-size",
                                              "--num-attention-heads"};
    mg_config shape;
    bench_config(&shape, o->shape);
    return mg_flags_take_unseen(cfg, &shape, shape_flags, 3);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The peak through the backend's linear_forward (backends without matmul_peak_tflops): an
 * (n, n) x (n, n)^T product on random inputs, 2 warm-up calls, then the median of 5, each
 * between two synchronisations. */
static mg_status peak_by_linear(mg_backend *be, int n, double *tflops) {
    size_t elems = (size_t)n * (size_t)n, bytes = elems * mg_dtype_size(be->compute_dtype);
    void *a = NULL, *w = NULL, *out = NULL;
    float *host = malloc(elems * sizeof *host);
    mg_status st = host ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "cannot allocate the peak's inputs");
    if (st == MG_OK) st = be->alloc(be, bytes, &a);
    if (st == MG_OK) st = be->alloc(be, bytes, &w);
    if (st == MG_OK) st = be->alloc(be, bytes, &out);
    for (size_t i = 0; st == MG_OK && i < elems; i++) /* uniform in [-1, 1), seeded */
        host[i] = 2.0f * mg_rng_uniform(0x9E3779B97F4A7C15ull, 0, i) - 1.0f;
    if (st == MG_OK) st = be->upload_f32(be, a, host, elems);
    if (st == MG_OK) st = be->upload_f32(be, w, host, elems);
    double t[5];
    for (int i = 0; st == MG_OK && i < 7; i++) {
        double t0 = 0;
        st = be->synchronize(be);
        if (st == MG_OK) t0 = mg_clock_seconds();
        if (st == MG_OK) st = be->linear_forward(be, out, a, w, NULL, NULL, n, n, n);
        if (st == MG_OK) st = be->synchronize(be);
        if (st == MG_OK && i >= 2) t[i - 2] = mg_clock_seconds() - t0;
    }
    if (st == MG_OK) {
        qsort(t, 5, sizeof *t, cmp_double);
        *tflops = 2.0 * (double)n * (double)n * (double)n / t[2] / 1e12;
    }
    if (out) be->free(be, out);
    if (w) be->free(be, w);
    if (a) be->free(be, a);
    free(host);
    return st;
}

/* Measured on a backend of its own, before the trainer allocates anything; chosen as the trainer
 * chooses (train/backend_select.h), c->device receiving the one used, so the trainer then takes
 * the same. */
static mg_status measure_peak(mg_config *c, int n, bench_result *r) {
    mg_backend *be = NULL;
    int gpu;
    MG_CHECK(mg_train_backend_create(c, "benchmarking", &be, &gpu));
    r->peak_n = n > 0 ? n : be->device == MG_DEVICE_CPU ? 1024 : 8192;
    mg_status st;
    if (be->matmul_peak_tflops) {
        r->peak_how = "matmul_peak_tflops";
        st = be->matmul_peak_tflops(be, r->peak_n, &r->peak_tflops);
    } else {
        r->peak_how = "linear_forward";
        st = peak_by_linear(be, r->peak_n, &r->peak_tflops);
    }
    be->destroy(be);
    return st;
}

/* Each step is mg_trainer_step split in two, so the host's share shows: the time to enqueue the
 * step (data, launches) and the wait for the device (the loss read back). */
static mg_status run_steps(mg_trainer *t, const bench_opts *o, bench_result *r) {
    for (int i = 0; i < o->warmup + o->iters; i++) {
        double t0 = mg_clock_seconds();
        MG_CHECK(mg_trainer_step_async(t));
        double t_enq = mg_clock_seconds() - t0;
        mg_step_stats s;
        MG_CHECK(mg_trainer_read_stats(t, &s, false));
        double dt = mg_clock_seconds() - t0, loss = s.loss;
        if (!isfinite(loss))
            return MG_FAIL(MG_ERR_NUMERIC, "bench: the loss of step %d is %g", i + 1, loss);
        if (i == 0) r->loss_first = loss;
        r->loss_last = loss;
        if (i >= o->warmup) r->step_s[i - o->warmup] = dt, r->enqueue_s += t_enq;
    }
    return MG_OK;
}

static mg_status measure_memory(mg_trainer *t, bench_result *r) {
    r->mem_arenas = (double)t->mem.planned_bytes;
    if (t->be->memory_info) {
        size_t free_b = 0, total_b = 0;
        MG_CHECK(t->be->memory_info(t->be, &free_b, &total_b));
        r->mem_peak = (double)(total_b - free_b);
        r->mem_how = "device memory in use";
    } else {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r->mem_peak = (double)ru.ru_maxrss * 1024.0; /* KiB on Linux */
        r->mem_how = "peak resident set";
    }
    return MG_OK;
}

static const char *shape_name(const mg_model_config *m) {
    for (int i = 0; i < N_SHAPES; i++)
        if (m->L == g_shapes[i].layers && m->H == g_shapes[i].hidden &&
            m->nq == g_shapes[i].heads && m->S == BENCH_SEQ && m->V == BENCH_VOCAB && !m->swiglu &&
            m->pos == MG_POS_LEARNED && m->norm == MG_NORM_LAYERNORM && m->tied && m->bias)
            return g_shapes[i].name;
    return "custom";
}

static void report(FILE *table, FILE *json, const mg_trainer *t, const bench_opts *o,
                   bench_result *r) {
    const mg_config *c = &t->cfg;
    const mg_model_config *m = &t->model.cfg;
    double total = 0;
    for (int i = 0; i < o->iters; i++) total += r->step_s[i];
    qsort(r->step_s, (size_t)o->iters, sizeof *r->step_s, cmp_double); /* for the median */
    double median = 0.5 * (r->step_s[(o->iters - 1) / 2] + r->step_s[o->iters / 2]);
    double tokens = (double)c->global_batch_size * c->seq_length;
    double tok_s = tokens * o->iters / total;
    double tflops = r->flops_per_token * tok_s / 1e12;
    double mfu = tflops / r->peak_tflops;
    double meg_tflops = mg_flops_per_iteration(c, c->global_batch_size) * o->iters / total / 1e12;
    mg_dtype cd = t->be->compute_dtype;
    const char *dtype = cd == MG_BF16  ? "bf16"
                        : cd == MG_F16 ? "fp16"
                        : cd == MG_F32 ? "fp32"
                                       : mg_dtype_name(cd);
    const char *name = shape_name(m);
    const double gib = 1024.0 * 1024.0 * 1024.0;

    fprintf(table,
            "megatron bench: %s on %s (%s), %d layers, hidden %d, %d heads, seq %d, micro-batch "
            "%d, vocab %d\n",
            name, t->be->name, dtype, m->L, m->H, m->nq, m->S, c->micro_batch_size, m->V);
    fprintf(table,
            "  parameters         %" PRId64 " (%" PRId64
            " without position embeddings and, for MoE, the experts a token does not use)\n",
            r->params, r->params_flops);
    fprintf(table,
            "  step time          %.2f ms mean, %.2f ms median (%d steps after %d warm-up)\n",
            1e3 * total / o->iters, 1e3 * median, o->iters, o->warmup);
    fprintf(table,
            "  host enqueue       %.2f ms per step (launches and data, inside the step time)\n",
            1e3 * r->enqueue_s / o->iters);
    fprintf(table, "  tokens/s           %.0f\n", tok_s);
    fprintf(table, "  FLOPs/token        %.4g (6N + 12*L*H*T)\n", r->flops_per_token);
    fprintf(table, "  achieved           %.4g TFLOP/s (Megatron's formula: %.4g)\n", tflops,
            meg_tflops);
    fprintf(table, "  %s matmul peak   %.4g TFLOP/s (%d^3, %s, measured now)\n", dtype,
            r->peak_tflops, r->peak_n, r->peak_how);
    fprintf(table, "  MFU                %.1f%%\n", 100.0 * mfu);
    fprintf(table, "  memory             %.2f GiB peak (%s), arenas %.2f GiB\n", r->mem_peak / gib,
            r->mem_how, r->mem_arenas / gib);
    fprintf(table, "  loss               %.4f (first step) -> %.4f (last)\n", r->loss_first,
            r->loss_last);
    fflush(table);
    if (!json) return;
    fprintf(json,
            "{\"impl\": \"megatron.c\", \"model\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", "
            "\"num_layers\": %d, \"hidden_size\": %d, \"num_attention_heads\": %d, "
            "\"seq_length\": %d, \"micro_batch_size\": %d, \"global_batch_size\": %d, "
            "\"vocab_size\": %d, "
            "\"params\": %" PRId64 ", \"params_flops\": %" PRId64 ", \"flops_per_token\": %.0f, "
            "\"iters\": %d, \"warmup\": %d, \"ms_per_step\": %.6g, \"ms_per_step_median\": %.6g, "
            "\"ms_host_enqueue\": %.6g, "
            "\"tokens_per_s\": %.6g, \"tflops\": %.6g, \"megatron_tflops\": %.6g, "
            "\"peak_tflops\": %.6g, \"peak_n\": %d, \"mfu\": %.6g, \"mem_peak_gib\": %.6g, "
            "\"mem_alloc_gib\": %.6g, \"loss_first\": %.6g, \"loss_last\": %.6g}\n",
            name, t->be->name, dtype, m->L, m->H, m->nq, m->S, c->micro_batch_size,
            c->global_batch_size, m->V, r->params, r->params_flops, r->flops_per_token, o->iters,
            o->warmup, 1e3 * total / o->iters, 1e3 * median, 1e3 * r->enqueue_s / o->iters, tok_s,
            tflops, meg_tflops, r->peak_tflops, r->peak_n, mfu, r->mem_peak / gib,
            r->mem_arenas / gib, r->loss_first, r->loss_last);
    fflush(json);
}

static mg_status bench_run(mg_config *cfg, const bench_opts *o, FILE *table, FILE *json) {
    bench_result r = {0};
    r.step_s = calloc((size_t)o->iters, sizeof *r.step_s);
    if (!r.step_s) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    mg_status st = measure_peak(cfg, o->peak_n, &r);
    mg_trainer t;
    bool have_trainer = false;
    if (st == MG_OK) {
        st = mg_trainer_init(&t, cfg, NULL);
        have_trainer = true;
    }
    if (st == MG_OK) {
        const mg_model_config *m = &t.model.cfg;
        r.params = mg_model_config_num_params(m);
        r.params_flops = r.params - (m->pos == MG_POS_LEARNED ? (int64_t)m->P * m->H : 0);
        /* a token uses k of the E experts of each MoE layer: the active parameters */
        int64_t experts = 0;
        for (int i = 0; i < t.model.params.n; i++)
            experts += t.model.params.p[i].expert ? t.model.params.p[i].numel : 0;
        if (experts > 0) r.params_flops -= experts - experts * m->moe.k / m->moe.E;
        r.flops_per_token = 6.0 * (double)r.params_flops + 12.0 * m->L * m->attn_dim * m->S;
        st = run_steps(&t, o, &r);
    }
    if (st == MG_OK) st = measure_memory(&t, &r);
    if (st == MG_OK) report(table, json, &t, o, &r);
    if (have_trainer) mg_trainer_free(&t);
    free(r.step_s);
    return st;
}

static mg_status bench_main(mg_cli_context *cx) {
    bench_opts *o = cx->args;
    mg_config *cfg = &cx->cfg;
    MG_CHECK(check_opts(o, cfg, &cx->flags));
    /* one micro-batch per step unless --global-batch-size asks for gradient accumulation, and
     * exactly the steps the bench runs */
    if (!mg_flags_seen("--global-batch-size")) cfg->global_batch_size = -1;
    cfg->train_iters = o->warmup + o->iters;
    cfg->lr_decay_iters = -1;
    MG_CHECK(mg_config_validate(cfg));

    /* --json: stdout carries the JSON line alone; everything else printed to stdout (the
     * trainer's log lines, the table) goes to stderr */
    FILE *json = NULL, *table = stdout;
    if (o->json) {
        fflush(stdout);
        int fd = dup(STDOUT_FILENO);
        if (fd < 0 || !(json = fdopen(fd, "w")) || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
            return MG_FAIL(MG_ERR_IO, "--json: cannot redirect stdout: %s", strerror(errno));
    }
    mg_status st = bench_run(cfg, o, table, json);
    if (json) fclose(json);
    return st;
}

const mg_cli_command mg_cli_bench = {sizeof(bench_opts), bench_prepare, bench_main};
