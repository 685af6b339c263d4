/* `megatron generate`: load a checkpoint and continue a prompt, greedy or top-k.
 *   megatron generate --load DIR (--prompt TEXT | --prompt-ids "1 2 3") [--max-new-tokens N]
 *                     [--top-k K] [--temperature T] [--seed S] [--tokenizer-type T
 *                     (--vocab-file F --merge-file F | --tokenizer-model P)]
 *                     [--logits-file PATH] [--json]
 * Text prompts use the run's tokenizer (data/tokenizer.h), or the flags'; --prompt-ids works for
 * any vocabulary (mock-data models).
 * --logits-file writes the logits at every prompt position as a .npy, float32 (prompt tokens,
 * vocab_size): the vocabulary's columns, not the padding's (for comparing with other
 * implementations, e.g. transformers' model(ids).logits[0]). The model is built whole on one
 * process whatever layout the checkpoint was trained with. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "config/flags_command.h"
#include "data/npy.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "train/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *load, *prompt, *prompt_ids, *vocab_file, *merge_file, *logits_file;
    const char *tokenizer_type, *tokenizer_model;
    int max_new_tokens, top_k, threads;
    int64_t seed;
    double temperature;
    bool json;
    mg_generate_options opt; /* from the flags above, after their checks */
} gen_args;

static const char usage[] =
    "usage: megatron generate --load DIR (--prompt TEXT | --prompt-ids \"1 2 3\") [flags]\n\n"
    "Continues a prompt with the newest checkpoint in DIR, greedily (--top-k 1) or by top-k\n"
    "sampling, on one process whatever layout the checkpoint was trained with. Text prompts use\n"
    "the run's tokenizer (or --tokenizer-type with its files); --prompt-ids works\n"
    "for any vocabulary.\n";

enum { G_INPUT, G_SAMPLING, G_OUTPUT };
static const char *const groups[] = {"checkpoint and prompt", "sampling", "output and runtime"};
#define ARG(f) MG_FLAG_FIELD(gen_args, f)
static const mg_flag_spec flags[] = {
    {"--load", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(load), .arg = "DIR",
     .def = "required", .help = "checkpoint directory; its newest iteration is loaded"},
    {"--prompt", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(prompt), .arg = "TEXT",
     .help = "text to continue (the run's tokenizer); or --prompt-ids"},
    {"--prompt-ids", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(prompt_ids),
     .arg = "IDS", .help = "token ids to continue, separated by spaces or commas (\"1 2 3\")"},
    {"--vocab-file", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(vocab_file),
     .arg = "PATH", .def = "the run's", .help = "GPT-2 vocab.json for --prompt"},
    {"--merge-file", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(merge_file),
     .arg = "PATH", .def = "the run's", .help = "GPT-2 merges.txt for --prompt"},
    {"--tokenizer-type", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(tokenizer_type),
     .arg = "T", .def = "the run's",
     .help = "tokenizer for --prompt: GPT2BPETokenizer, HuggingFaceTokenizer, "
             "SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer"},
    {"--tokenizer-model", MG_FLAG_GROUP(G_INPUT), .kind = MG_FLAG_STRING_REF, ARG(tokenizer_model),
     .arg = "PATH", .def = "the run's",
     .help = "tokenizer.json (or its directory) or SentencePiece .model for --prompt"},
    {"--max-new-tokens", MG_FLAG_GROUP(G_SAMPLING), .kind = MG_FLAG_INT, ARG(max_new_tokens),
     .arg = "N", .help = "tokens to generate, in [0, 1048576] (fewer at <|endoftext|>)"},
    {"--top-k", MG_FLAG_GROUP(G_SAMPLING), .kind = MG_FLAG_INT, ARG(top_k), .arg = "K",
     .help = "sample among the K most likely tokens; 1: greedy"},
    {"--temperature", MG_FLAG_GROUP(G_SAMPLING), .kind = MG_FLAG_DOUBLE, ARG(temperature),
     .arg = "T", .help = "divides the logits before sampling; positive"},
    {"--seed", MG_FLAG_GROUP(G_SAMPLING), .kind = MG_FLAG_INT64, ARG(seed), .arg = "S",
     .help = "sampling seed, in [0, 2147483647]"},
    {"--logits-file", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_STRING_REF, ARG(logits_file),
     .arg = "PATH", .help = "write the prompt's logits as float32 .npy (tokens, vocab_size)"},
    {"--num-threads", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_INT, ARG(threads), .arg = "N",
     .def = "all cores", .help = "CPU threads, in [1, 4096]"},
    {"--json", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_BOOL, ARG(json),
     .help = "print {\"iteration\", \"prompt_ids\", \"ids\"} instead of the text"},
};
#undef ARG

static mg_status check_range(const char *flag, long long v, long long lo, long long hi) {
    if (v < lo || v > hi)
        return MG_FAIL(MG_ERR_USAGE, "%s expects an integer in [%lld, %lld], got %lld", flag, lo,
                       hi, v);
    return MG_OK;
}

static void gen_prepare(mg_cli_context *cx) {
    gen_args *a = cx->args;
    *a = (gen_args){
        .max_new_tokens = 32, .top_k = 1, .temperature = 1.0, .seed = 1234, .threads = -1};
    cx->flags = MG_FLAG_COMMAND("generate", usage, flags, groups, a);
}

/* What the parser cannot say: required flags and the values' ranges; then a->opt. */
static mg_status check_args(gen_args *a, const mg_flag_command *cmd) {
    MG_CHECK(check_range("--max-new-tokens", a->max_new_tokens, 0, 1 << 20));
    MG_CHECK(check_range("--top-k", a->top_k, 1, 1 << 20));
    MG_CHECK(check_range("--seed", a->seed, 0, 0x7fffffff));
    if (mg_flags_command_seen(cmd, "--num-threads"))
        MG_CHECK(check_range("--num-threads", a->threads, 1, 4096));
    if (!(a->temperature > 0) || a->temperature > 1e6)
        return MG_FAIL(MG_ERR_USAGE, "--temperature expects a positive number, got %g",
                       a->temperature);
    if (!a->load)
        return MG_FAIL(MG_ERR_USAGE, "`megatron generate` needs --load DIR (a checkpoint)");
    if (!a->prompt == !a->prompt_ids)
        return MG_FAIL(MG_ERR_USAGE,
                       "give exactly one of --prompt TEXT and --prompt-ids \"1 2 3\"");
    a->opt = (mg_generate_options){.max_new_tokens = a->max_new_tokens,
                                   .top_k = a->top_k,
                                   .temperature = (float)a->temperature,
                                   .seed = (uint64_t)a->seed,
                                   .stop_token = -1};
    return MG_OK;
}

static mg_status parse_ids(const char *s, int V, int32_t *ids, size_t cap, size_t *n) {
    *n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s)
            return MG_FAIL(MG_ERR_USAGE, "--prompt-ids: expected integers, found '%.20s'", s);
        if (x < 0 || x >= V)
            return MG_FAIL(MG_ERR_USAGE, "--prompt-ids: id %ld is outside the vocabulary [0, %d)",
                           x, V);
        if (*n == cap) return MG_FAIL(MG_ERR_USAGE, "--prompt-ids: too many ids");
        ids[(*n)++] = (int32_t)x;
        s = end;
        while (*s == ' ' || *s == ',') s++;
    }
    return MG_OK;
}

typedef struct {
    mg_config cfg; /* the checkpoint's run configuration */
    mg_backend *be;
    mg_gpt g;
    mg_arena params, acts, work, io;
    mg_tokenizer *tok;
    int32_t *ids;
    float *host;
} gen_state;

static mg_status setup_model(gen_state *s, const gen_args *a, int64_t it) {
    MG_CHECK(mg_checkpoint_load_config(a->load, it, &s->cfg));
    mg_config cfg = s->cfg;
    mg_config_single_process(&cfg);
    cfg.micro_batch_size = 1;
    MG_CHECK(mg_backend_cpu_create(&s->be, a->threads));
    MG_CHECK(mg_gpt_build(&s->g, &cfg, 0, 0, 0));
    size_t off_p, off_t;
    mg_arena_init(&s->params, "parameters");
    mg_arena_init(&s->acts, "activations");
    mg_arena_init(&s->work, "workspace");
    mg_arena_init(&s->io, "tokens");
    size_t esz = mg_dtype_size(s->be->compute_dtype);
    MG_CHECK(mg_arena_reserve(&s->params, s->g.params.numel * esz, 0, &off_p));
    MG_CHECK(mg_arena_reserve(&s->io, (size_t)cfg.seq_length * sizeof(int32_t), 0, &off_t));
    MG_CHECK(mg_gpt_plan(&s->g, mg_gpt_target_of(&s->g, s->be, 1), 1, 1, &s->acts, &s->work));
    MG_CHECK(mg_arena_commit(&s->params, NULL));
    MG_CHECK(mg_arena_commit(&s->acts, NULL));
    MG_CHECK(mg_arena_commit(&s->work, NULL));
    MG_CHECK(mg_arena_commit(&s->io, NULL));
    MG_CHECK(mg_gpt_bind(&s->g, s->be, mg_arena_ptr(&s->params, off_p), NULL, NULL));
    s->host = calloc(s->g.params.numel, sizeof *s->host);
    if (!s->host) return MG_FAIL(MG_ERR_NOMEM, "out of memory loading %s", a->load);
    MG_CHECK(mg_checkpoint_load_weights(a->load, it, &s->g, s->host));
    MG_CHECK(s->be->upload_f32(s->be, s->g.blk.param_buf, s->host, s->g.params.numel));
    return MG_OK;
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
}

/* The logits at the n prompt positions (s->ids), as a float32 .npy (n, vocab_size). */
static mg_status write_logits(const char *path, gen_state *s, size_t n) {
    int vocab =
        s->cfg.vocab_size > 0 && s->cfg.vocab_size <= s->g.cfg.V ? s->cfg.vocab_size : s->g.cfg.V;
    int64_t shape[2] = {(int64_t)n, vocab};
    mg_status st = MG_OK;
    float *out = malloc(n * (size_t)vocab * sizeof *out + 1);
    if (!out) return MG_FAIL(MG_ERR_NOMEM, "out of memory for --logits-file");
    MG_CHECK_GOTO(
        mg_gpt_prompt_logits(&s->g, s->be, mg_arena_ptr(&s->io, 0), s->ids, n, vocab, out), st,
        done);
    MG_CHECK_GOTO(mg_npy_save_f32(path, 2, shape, out), st, done);
done:
    free(out);
    return st;
}

static mg_status generate(const gen_args *a, gen_state *s) {
    int64_t it;
    MG_CHECK(mg_checkpoint_latest(a->load, &it));
    if (it < 0)
        return MG_FAIL(MG_ERR_IO, "%s holds no checkpoint (no latest_checkpointed_iteration.txt)",
                       a->load);
    MG_CHECK(setup_model(s, a, it));
    size_t cap = 65536 + (size_t)a->opt.max_new_tokens, n = 0;
    s->ids = malloc(cap * sizeof *s->ids);
    if (!s->ids) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    mg_generate_options o = a->opt;
    o.vocab_limit = s->g.cfg.V;
    if (a->prompt) {
        /* the tokenizer: flags, else the one the checkpoint was trained with; GPT-2 files alone
           name GPT2BPETokenizer */
        mg_tokenizer_spec spec = {
            .type = a->tokenizer_type                      ? a->tokenizer_type
                    : a->vocab_file && !a->tokenizer_model ? "GPT2BPETokenizer"
                                                           : s->cfg.tokenizer_type,
            .vocab_file = a->vocab_file ? a->vocab_file : s->cfg.vocab_file,
            .merge_file = a->merge_file ? a->merge_file : s->cfg.merge_file,
            .model = a->tokenizer_model ? a->tokenizer_model : s->cfg.tokenizer_model};
        if (!mg_tokenizer_known_type(spec.type) && spec.vocab_file[0] && spec.merge_file[0])
            spec.type = "GPT2BPETokenizer"; /* checkpoints from before --tokenizer-type was kept */
        if (!mg_tokenizer_known_type(spec.type))
            return MG_FAIL(MG_ERR_USAGE,
                           "--prompt needs a tokenizer: this checkpoint was trained without one "
                           "(%s); pass --tokenizer-type with its files, or give --prompt-ids",
                           spec.type[0] ? spec.type : "no --tokenizer-type");
        MG_CHECK(mg_tokenizer_load(&s->tok, &spec));
        mg_tokenizer_worker *w;
        MG_CHECK(mg_tokenizer_worker_create(s->tok, &w));
        int32_t *enc = NULL;
        size_t m = 0, mcap = 0;
        mg_status st = mg_tokenizer_encode(w, a->prompt, strlen(a->prompt), &enc, &m, &mcap);
        mg_tokenizer_worker_free(w);
        if (st == MG_OK && m > 65536) st = MG_FAIL(MG_ERR_USAGE, "the prompt is too long");
        if (st == MG_OK) memcpy(s->ids, enc, m * sizeof *enc), n = m;
        free(enc);
        MG_CHECK(st);
        o.stop_token = mg_tokenizer_eod(s->tok);
        o.vocab_limit = mg_tokenizer_vocab_size(s->tok);
    } else {
        MG_CHECK(parse_ids(a->prompt_ids, s->g.cfg.V, s->ids, 65536, &n));
    }
    size_t prompt_len = n;
    if (a->logits_file) MG_CHECK(write_logits(a->logits_file, s, n));
    MG_CHECK(mg_gpt_generate(&s->g, s->be, mg_arena_ptr(&s->io, 0), s->ids, &n, &o));
    char *text = NULL;
    size_t len = 0;
    if (s->tok) MG_CHECK(mg_tokenizer_decode(s->tok, s->ids, n, &text, &len));
    if (a->json) {
        printf("{\"iteration\": %" PRId64 ", \"prompt_ids\": [", it);
        print_ids(stdout, s->ids, prompt_len);
        printf("], \"ids\": [");
        print_ids(stdout, s->ids + prompt_len, n - prompt_len);
        printf("]}\n");
    } else if (text) {
        printf("%s\n", text);
    } else {
        print_ids(stdout, s->ids, n);
        printf("\n");
    }
    free(text);
    return MG_OK;
}

static mg_status gen_run(mg_cli_context *cx) {
    gen_args *a = cx->args;
    MG_CHECK(check_args(a, &cx->flags));
    gen_state s;
    memset(&s, 0, sizeof s);
    mg_status st = generate(a, &s);
    free(s.ids);
    free(s.host);
    if (s.tok) mg_tokenizer_free(s.tok);
    mg_gpt_free(&s.g);
    mg_arena_free(&s.params);
    mg_arena_free(&s.acts);
    mg_arena_free(&s.work);
    mg_arena_free(&s.io);
    if (s.be) s.be->destroy(s.be);
    return st;
}

const mg_cli_command mg_cli_generate = {sizeof(gen_args), gen_prepare, gen_run};
