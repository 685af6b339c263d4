/* Flag parsing against Megatron-LM's arguments.py (defaults, syntax, help, unknown, ignored and
 * not-yet flags), the JSON round trip and the flag table's coverage (the config checks of
 * validate_args: test_flags_validate.c). Every bad-input case asserts the status, a piece of the
 * one-line message, and that the config was left untouched. */
#include "test.h"

#include "config_test_util.h"

#include "core/file.h"
#include "config/flags.h"
#include "config/flags_table.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

MG_TEST(flags_defaults_match_megatron) {
    mg_config c;
    mg_config_defaults(&c);
    MG_EXPECT(c.num_layers == -1 && c.hidden_size == -1 && c.seq_length == -1, "required unset");
    MG_EXPECT(c.ffn_hidden_size == -1 && c.kv_channels == -1 && c.num_query_groups == -1,
              "derived");
    MG_EXPECT(c.position_embedding == MG_POS_LEARNED && c.normalization == MG_NORM_LAYERNORM,
              "learned_absolute, LayerNorm");
    MG_EXPECT(c.rotary_base == 10000 && c.norm_epsilon == 1e-5 && c.init_method_std == 0.02,
              "rotary 10000, eps 1e-5, std 0.02");
    MG_EXPECT(c.make_vocab_size_divisible_by == 128 && c.vocab_size == -1, "vocab padding 128");
    MG_EXPECT(c.micro_batch_size == 1 && c.global_batch_size == -1 && c.train_iters == -1, "batch");
    MG_EXPECT(c.min_lr == 0 && c.lr_decay_style == MG_LR_LINEAR && c.lr_warmup_iters == 0 &&
                  c.lr_warmup_fraction == -1 && c.lr_warmup_init == 0 && c.lr_decay_iters == -1,
              "lr schedule defaults");
    MG_EXPECT(c.weight_decay == 0.01 && c.adam_beta1 == 0.9 && c.adam_beta2 == 0.999 &&
                  c.adam_eps == 1e-8 && c.clip_grad == 1.0 && c.seed == 1234,
              "optimizer defaults");
    MG_EXPECT(c.log_interval == 100 && c.eval_interval == 1000 && c.eval_iters == 100 &&
                  c.exit_interval == -1 && c.save_interval == -1,
              "logging defaults");
    MG_EXPECT(!strcmp(c.device, "auto") && c.num_threads == -1 && !c.mock_data, "runtime");
    MG_EXPECT(!c.save[0] && !c.load[0] && !c.metrics_file[0], "no paths");
}

MG_TEST(flags_parse_space_and_equals_syntax) {
    mg_config c;
    mg_config_defaults(&c);
    const char *args[] = {"--num-layers",
                          "3",
                          "--hidden-size=96",
                          "--position-embedding-type=rope",
                          "--normalization",
                          "RMSNorm",
                          "--swiglu",
                          "--lr=3e-4",
                          "--min-lr",
                          "-0.5", /* a negative number is a value, not a flag */
                          "--lr-decay-style",
                          "cosine",
                          "--train-iters=9007199254740992",
                          "--save",
                          "/tmp/x=y",
                          "--metrics-file=a=b",
                          "--seed=0",
                          NULL};
    MG_EXPECT_OK(mg_test_parse(&c, args));
    MG_EXPECT(c.num_layers == 3 && c.hidden_size == 96, "ints: %d %d", c.num_layers, c.hidden_size);
    MG_EXPECT(c.position_embedding == MG_POS_ROPE && c.normalization == MG_NORM_RMSNORM, "enums");
    MG_EXPECT(c.lr_decay_style == MG_LR_COSINE, "decay style %d", (int)c.lr_decay_style);
    MG_EXPECT(c.swiglu && !c.disable_bias_linear, "bools");
    MG_EXPECT(c.lr == 3e-4 && c.min_lr == -0.5, "doubles %g %g", c.lr, c.min_lr);
    MG_EXPECT(c.train_iters == 9007199254740992LL, "int64 %lld", (long long)c.train_iters);
    MG_EXPECT(!strcmp(c.save, "/tmp/x=y") && !strcmp(c.metrics_file, "a=b"), "'=' in values: %s %s",
              c.save, c.metrics_file);
    MG_EXPECT(c.seed == 0, "seed %lld", (long long)c.seed);
}

MG_TEST(flags_repeated_flag_last_wins) {
    mg_config c;
    mg_config_defaults(&c);
    const char *args[] = {
        "--num-layers", "2",  "--save", "/a/much/longer/path", "--num-layers", "7",
        "--save",       "/b", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, args));
    MG_EXPECT(c.num_layers == 7, "num_layers %d, want the last value 7", c.num_layers);
    MG_EXPECT(!strcmp(c.save, "/b"), "save '%s'", c.save);
    /* The shorter value leaves no tail of the longer one: configs compare bytewise. */
    for (size_t i = strlen(c.save); i < sizeof c.save; i++)
        if (c.save[i]) {
            MG_EXPECT(0, "stale byte at save[%zu]", i);
            break;
        }
}

MG_TEST(flags_help_anywhere) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    char *argv[] = {"--num-layers", "abc", "--hiden-size", "-h"};
    bool help = false;
    MG_EXPECT_OK(mg_flags_parse(&c, 4, argv, &help));
    MG_EXPECT(help, "-h not seen");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "help must not change the config");
    char *argv2[] = {"--help"};
    help = false;
    MG_EXPECT_OK(mg_flags_parse(&c, 1, argv2, &help));
    MG_EXPECT(help, "--help not seen");
    char *argv3[] = {"--num-layers", "2"};
    MG_EXPECT_OK(mg_flags_parse(&c, 2, argv3, &help));
    MG_EXPECT(!help, "help set without --help");
}

MG_TEST(flags_help_lists_groups_and_flags) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mg_flags_print_help(f);
    fclose(f);
    const char *groups[] = {"model:",         "regularisation and optimizer:",
                            "learning rate:", "training:",
                            "logging:",       "checkpointing:",
                            "data:",          "runtime:"};
    for (int i = 0; i < 8; i++)
        MG_EXPECT(strstr(text, groups[i]) != NULL, "help lacks group %s", groups[i]);
    for (int i = 0; i < mg_flag_count; i++)
        MG_EXPECT(strstr(text, mg_flag_table[i].name) != NULL, "help lacks %s",
                  mg_flag_table[i].name);
    MG_EXPECT(strstr(text, "--lr-decay-style STYLE") && strstr(text, "linear"), "arg and default");
    MG_EXPECT(strstr(text, "[not yet]") && strstr(text, "[no effect here]"), "status tags");
    free(text);
}

MG_TEST(flags_unknown_flag_suggests_closest) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    const char *a1[] = {"--num-layers", "4", "--hiden-size", "8", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a1), MG_ERR_USAGE,
                    "unknown flag '--hiden-size'; did you mean '--hidden-size'?");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "a failed parse must not change the config");
    const char *a2[] = {"--num_layers", "4", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a2), MG_ERR_USAGE, "did you mean '--num-layers'?");
    const char *a3[] = {"--tensor-parallel-size", "2", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a3), MG_ERR_USAGE, "did you mean '--tensor-model-parallel-size'?");
    const char *a4[] = {"--hidden", "8", NULL}; /* no abbreviations, but suggest the full name */
    MG_EXPECT_ERROR(mg_test_parse(&c, a4), MG_ERR_USAGE, "did you mean '--hidden-size'?");
    const char *a5[] = {"--xyzzy", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a5), MG_ERR_USAGE, "see `megatron train --help`");
    const char *a6[] = {"--xyzzy=3", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a6), MG_ERR_USAGE, "unknown flag '--xyzzy';");
    const char *a7[] = {"train", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a7), MG_ERR_USAGE, "unexpected argument 'train'");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed parses must not change the config");
}

MG_TEST(flags_bad_values) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    const char *a1[] = {"--num-layers", "abc", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a1), MG_ERR_USAGE, "--num-layers expects an integer, got 'abc'");
    const char *a2[] = {"--num-layers", "2.0", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a2), MG_ERR_USAGE, "--num-layers expects an integer, got '2.0'");
    const char *a3[] = {"--num-layers", "99999999999", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a3), MG_ERR_USAGE, "expects an integer in [-2147483648, 2147483647]");
    const char *a4[] = {"--train-iters", "9007199254740993", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a4), MG_ERR_USAGE, "--train-iters expects an integer in");
    const char *a5[] = {"--lr", "fast", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a5), MG_ERR_USAGE, "--lr expects a number, got 'fast'");
    const char *a6[] = {"--lr=nan", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a6), MG_ERR_USAGE, "--lr expects a finite number, got 'nan'");
    const char *a7[] = {"--lr=", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a7), MG_ERR_USAGE, "--lr expects a number, got ''");
    const char *a8[] = {"--normalization", "rmsnorm", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a8), MG_ERR_USAGE,
                    "--normalization expects one of LayerNorm or RMSNorm, got 'rmsnorm'");
    const char *a9[] = {"--position-embedding-type", "alibi", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a9), MG_ERR_USAGE, "learned_absolute, rope or none");
    const char *a10[] = {"--position-embedding-type", "mrope", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a10), MG_ERR_UNSUPPORTED,
                    "--position-embedding-type mrope is not supported yet by this build; use "
                    "learned_absolute, rope");
    const char *a11[] = {"--num-layers", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a11), MG_ERR_USAGE,
                    "--num-layers expects a value; write --num-layers N");
    const char *a12[] = {"--save", "--load", "x", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a12), MG_ERR_USAGE, "--save expects a value, got the flag '--load'");
    const char *a13[] = {"--swiglu=true", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a13), MG_ERR_USAGE, "--swiglu takes no value");
    const char *a14[] = {"--device", "tpu", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a14), MG_ERR_USAGE,
                    "--device expects one of auto, cpu or cuda, got 'tpu'");
    char longpath[2000];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    const char *a15[] = {"--save", longpath, NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a15), MG_ERR_USAGE, "--save value is too long");
    const char *a16[] = {"--lr-warmup-iters", "5", "--lr-warmup-fraction", "0.1", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a16), MG_ERR_USAGE, "are both given; pass only one");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed parses must not change the config");
    /* Megatron allows the pair when the iterations are 0. */
    const char *a17[] = {"--lr-warmup-iters", "0", "--lr-warmup-fraction", "0.1", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a17));
}

MG_TEST(flags_ignored_flags_are_accepted_and_seen) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    const char *args[] = {"--use-mcore-models",
                          "--transformer-impl",
                          "transformer_engine",
                          "--use-flash-attn",
                          "--no-masked-softmax-fusion",
                          "--no-bias-gelu-fusion",
                          "--no-bias-swiglu-fusion",
                          "--no-bias-dropout-fusion",
                          "--no-rope-fusion",
                          "--no-gradient-accumulation-fusion",
                          "--distributed-backend=nccl",
                          "--attention-softmax-in-fp32",
                          "--accumulate-allreduce-grads-in-fp32",
                          "--hidden-dropout",
                          "0.1",
                          "--attention-dropout=0.1",
                          "--log-throughput",
                          "--no-async-tensor-model-parallel-allreduce",
                          "--bf16",
                          "--tensor-model-parallel-size",
                          "1",
                          "--pipeline-model-parallel-size=1",
                          "--context-parallel-size",
                          "1",
                          "--expert-model-parallel-size",
                          "1",
                          "--optimizer",
                          "adam",
                          NULL};
    MG_EXPECT_OK(mg_test_parse(&c, args));
    before.bf16 = true; /* the one field among them: --bf16, the CUDA backend's default anyway */
    MG_EXPECT(!memcmp(&c, &before, sizeof c),
              "ignored and trivial flags must not change the config");
    MG_EXPECT(mg_flags_seen("--bf16") && mg_flags_seen("--use-flash-attn"), "seen");
    MG_EXPECT(!mg_flags_seen("--fp16") && !mg_flags_seen("--nonexistent"), "not seen");
    /* A failed parse keeps the record of the last successful one. */
    const char *bad[] = {"--fp16", "--bogus", NULL};
    MG_EXPECT(mg_test_parse(&c, bad) == MG_ERR_USAGE, "--bogus accepted");
    MG_EXPECT(mg_flags_seen("--bf16") && !mg_flags_seen("--fp16"), "seen changed by a failure");
    const char *next[] = {"--fp16", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, next));
    MG_EXPECT(!mg_flags_seen("--bf16") && mg_flags_seen("--fp16"), "seen is per parse");
}

/* Validates `c` with the minimum model, training and data flags filled in, so that only the
 * runtime checks can fail. */
static mg_status check_runtime_only(const mg_config *c) {
    mg_config v = *c;
    v.num_layers = 2;
    v.hidden_size = 64;
    v.num_attention_heads = 4;
    v.seq_length = 16;
    v.train_iters = 1;
    v.lr = 1e-3;
    v.mock_data = true;
    v.vocab_size = 128;
    return mg_config_validate(&v);
}

MG_TEST(flags_not_yet_flags_fail_unless_trivial) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    /* Layout flags parse (`megatron plan` uses them); training takes tensor parallelism, with
     * Megatron's divisibility rules, and refuses the layouts not built yet at validation. */
    const char *a1[] = {"--tensor-model-parallel-size", "2", "--sequence-parallel", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a1));
    MG_EXPECT(c.tensor_model_parallel_size == 2 && c.sequence_parallel, "tp %d sp %d",
              c.tensor_model_parallel_size, c.sequence_parallel);
    MG_EXPECT_OK(check_runtime_only(&c));
    c.tensor_model_parallel_size = 3;
    MG_EXPECT_ERROR(check_runtime_only(&c), MG_ERR_USAGE,
                    "num_attention_heads (4) must be a multiple of tensor_model_parallel_size (3)");
    /* tensor-parallel runs save and load checkpoints */
    c.tensor_model_parallel_size = 2;
    snprintf(c.save, sizeof c.save, "/tmp/never-written");
    MG_EXPECT_OK(check_runtime_only(&c));
    /* Megatron turns sequence parallelism off (with a warning) when TP = 1 */
    mg_config_defaults(&c);
    c.sequence_parallel = true;
    mg_config v = c;
    v.num_layers = 2, v.hidden_size = 64, v.num_attention_heads = 4, v.seq_length = 16;
    v.train_iters = 1, v.lr = 1e-3, v.mock_data = true, v.vocab_size = 128;
    MG_EXPECT_OK(mg_config_validate(&v));
    MG_EXPECT(!v.sequence_parallel, "--sequence-parallel stays on with TP = 1");
    mg_config_defaults(&c);
    /* pipeline parallelism trains (and checkpoints); its size must be positive */
    const char *a2[] = {"--pipeline-model-parallel-size=4", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a2));
    MG_EXPECT_OK(check_runtime_only(&c));
    c.pipeline_model_parallel_size = 0;
    MG_EXPECT_ERROR(check_runtime_only(&c), MG_ERR_USAGE,
                    "--pipeline-model-parallel-size must be positive, got 0");
    mg_config_defaults(&c);
    const char *a2b[] = {"--expert-tensor-parallel-size", "0", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a2b));
    MG_EXPECT_ERROR(check_runtime_only(&c), MG_ERR_USAGE,
                    "--expert-tensor-parallel-size must be positive, got 0");
    /* The grad buffer flags train (data parallelism); a bucket size must be positive. */
    mg_config_defaults(&c);
    const char *a5[] = {"--use-distributed-optimizer", "--overlap-grad-reduce", "--ddp-bucket-size",
                        "1000", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a5));
    MG_EXPECT(c.use_distributed_optimizer && c.overlap_grad_reduce && c.ddp_bucket_size == 1000,
              "ddp flags not stored");
    MG_EXPECT_OK(check_runtime_only(&c));
    mg_config_defaults(&c);
    const char *a5c[] = {"--ddp-bucket-size", "0", "--ddp-pad-buckets-for-high-nccl-busbw", NULL};
    MG_EXPECT_OK(mg_test_parse(&c, a5c));
    MG_EXPECT_ERROR(check_runtime_only(&c), MG_ERR_USAGE,
                    "--ddp-bucket-size must be positive, got 0");
    mg_config_defaults(&c);
    before = c;
    const char *a3[] = {"--tensor-model-parallel-size", "two", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a3), MG_ERR_USAGE, "expects an integer, got 'two'");
    const char *a6[] = {"--moe-router-score-function", "sqrtsoftplus", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a6), MG_ERR_UNSUPPORTED,
                    "--moe-router-score-function sqrtsoftplus is not supported yet");
    const char *a7[] = {"--hidden-dropout", "0.1x", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a7), MG_ERR_USAGE, "--hidden-dropout expects a number, got '0.1x'");
    const char *a8[] = {"--tokenizer-type", "TikTokenizer", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a8), MG_ERR_UNSUPPORTED,
                    "--tokenizer-type TikTokenizer is not supported yet by this build; use "
                    "GPT2BPETokenizer, HuggingFaceTokenizer");
    const char *a11[] = {"--wandb-project", "proj", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a11), MG_ERR_UNSUPPORTED,
                    "--wandb-project proj is not supported yet");
    const char *a12[] = {"--optimizer", "sgd", NULL};
    MG_EXPECT_ERROR(mg_test_parse(&c, a12), MG_ERR_UNSUPPORTED, "--optimizer sgd");
    const char *names[] = {"--check-for-spiky-loss"};
    for (int i = 0; i < 1; i++)
        MG_EXPECT(mg_flag_find(names[i]) >= 0 &&
                      mg_flag_table[mg_flag_find(names[i])].status == MG_FLAG_NOT_YET,
                  "%s should be a not-yet flag", names[i]);
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed parses must not change the config");
}

/* A config exercising every kind: odd doubles, a negative zero, 2^53, escapes in strings. */
static void rich_config(mg_test_ctx *t, mg_config *c) {
    const char *extra[] = {"--swiglu",
                           "--normalization",
                           "RMSNorm",
                           "--position-embedding-type",
                           "rope",
                           "--lr",
                           "0.1",
                           "--min-lr",
                           "1.0000000000000002e-5",
                           "--init-method-std",
                           "0.0069999999999999993",
                           "--lr-warmup-init",
                           "-0.0",
                           "--lr-warmup-fraction",
                           "0.3333333333333333",
                           "--lr-decay-style",
                           "cosine",
                           "--train-iters",
                           "9007199254740992",
                           "--seed",
                           "4294967295",
                           "--save",
                           "dir with \"quotes\", \\backslash\\, tab\t and ünïcode",
                           "--metrics-file",
                           "m.jsonl",
                           "--group-query-attention",
                           "--num-query-groups",
                           "2",
                           NULL};
    MG_EXPECT_OK(mg_test_parse_base(c, NULL, extra));
    MG_EXPECT_OK(mg_config_validate(c));
}

static void expect_fields_equal(mg_test_ctx *t, const mg_config *a, const mg_config *b) {
    for (int i = 0; i < mg_flag_count; i++) {
        const mg_flag_spec *f = &mg_flag_table[i];
        if (f->key && memcmp(mg_flag_cfield(a, f), mg_flag_cfield(b, f), f->size))
            MG_EXPECT(0, "field %s differs after the round trip", f->key);
    }
    MG_EXPECT(!memcmp(a, b, sizeof *a), "configs differ bytewise");
}

MG_TEST(flags_json_round_trip_is_exact) {
    mg_config c, back;
    rich_config(t, &c);
    char *json = NULL;
    MG_EXPECT_OK(mg_config_to_json(&c, &json));
    if (!json) return;
    MG_EXPECT(strstr(json, "\"num_layers\": 2") != NULL, "JSON lacks num_layers: %s", json);
    MG_EXPECT(strstr(json, "\"normalization\": \"RMSNorm\"") != NULL, "enum as its choice");
    MG_EXPECT(strstr(json, "\"lr\": 0.10000000000000001") != NULL, "%%.17g doubles");
    mg_config_defaults(&back);
    MG_EXPECT_OK(mg_config_from_json(&back, json));
    expect_fields_equal(t, &c, &back);

    /* Reading an object already parsed by cJSON is exact too (re-printing it with cJSON is not:
     * cJSON_Print keeps 15 digits when they match to a relative epsilon). */
    cJSON *root = cJSON_Parse(json);
    mg_config_defaults(&back);
    MG_EXPECT_OK(mg_config_from_cjson(&back, root));
    expect_fields_equal(t, &c, &back);
    cJSON_Delete(root);

    /* Defaults (unvalidated, with their -1 markers) round-trip as well. */
    mg_config d;
    mg_config_defaults(&d);
    free(json);
    MG_EXPECT_OK(mg_config_to_json(&d, &json));
    memset(&back, 0, sizeof back);
    back.world_size = d.world_size; /* not a flag: the launch's, never in the JSON */
    MG_EXPECT_OK(mg_config_from_json(&back, json));
    expect_fields_equal(t, &d, &back);
    free(json);
}

MG_TEST(flags_json_rejects_bad_input) {
    mg_config c, before;
    rich_config(t, &c);
    before = c;
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"num_layers\": 3, \"num_layer\": 2}"), MG_ERR_FORMAT,
                    "unknown key 'num_layer'");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"num_layers\": \"2\"}"), MG_ERR_FORMAT,
                    "'num_layers' must be an integer");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"num_layers\": 2.5}"), MG_ERR_FORMAT,
                    "'num_layers' must be an integer");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"num_layers\": 3e9}"), MG_ERR_FORMAT,
                    "'num_layers' must be an integer in");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"seed\": 1e17}"), MG_ERR_FORMAT, "'seed' must be");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"lr\": \"0.1\"}"), MG_ERR_FORMAT,
                    "'lr' must be a number");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"swiglu\": 1}"), MG_ERR_FORMAT,
                    "'swiglu' must be true or false");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"normalization\": \"BatchNorm\"}"), MG_ERR_FORMAT,
                    "'normalization' must be one of the --normalization choices");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"device\": 3}"), MG_ERR_FORMAT,
                    "'device' must be a string");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "{\"num_layers\": 2,"), MG_ERR_FORMAT, "malformed");
    MG_EXPECT_ERROR(mg_config_from_json(&c, "[1, 2]"), MG_ERR_FORMAT, "must be an object");
    MG_EXPECT_ERROR(mg_config_from_json(&c, NULL), MG_ERR_FORMAT, "no text");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed reads must not change the config");
    /* A partial object sets only what it names. */
    MG_EXPECT_OK(mg_config_from_json(&c, "{\"num_layers\": 5}"));
    MG_EXPECT(c.num_layers == 5 && c.hidden_size == before.hidden_size, "partial read");
}

/* Every byte of mg_config not covered by a table field must be padding: a gap is padding only
 * when it is shorter than the alignment of the field after it. Catches a field added to
 * megatron.h without a flag (it would never be parsed, printed or saved). */
MG_TEST(flags_table_covers_every_config_field) {
    unsigned char covered[sizeof(mg_config)] = {0};
    /* the one field that is not a flag: the launch's size, set by the front end */
    for (size_t b = 0; b < sizeof(int); b++) covered[offsetof(mg_config, world_size) + b] = 1;
    for (int i = 0; i < mg_flag_count; i++) {
        const mg_flag_spec *f = &mg_flag_table[i];
        if (!f->key) continue;
        MG_EXPECT(f->offset + f->size <= sizeof(mg_config), "%s out of range", f->key);
        for (size_t b = f->offset; b < f->offset + f->size; b++) {
            MG_EXPECT(!covered[b], "field %s overlaps another", f->key);
            covered[b] = 1;
        }
    }
    for (size_t b = 0; b < sizeof(mg_config);) {
        if (covered[b]) {
            b++;
            continue;
        }
        size_t end = b;
        while (end < sizeof(mg_config) && !covered[end]) end++;
        size_t align = 8; /* struct tail: the strictest alignment */
        for (int i = 0; i < mg_flag_count; i++) {
            const mg_flag_spec *f = &mg_flag_table[i];
            if (f->key && f->offset == end)
                align = f->kind == MG_FLAG_BOOL || f->kind == MG_FLAG_STRING ||
                                f->kind == MG_FLAG_STRING_LIST
                            ? 1
                            : f->size;
        }
        MG_EXPECT(end - b < align, "bytes [%zu, %zu) of mg_config belong to no flag", b, end);
        b = end;
    }
}

/* docs/flags.md (tools/reference/flags_doc.py) lists every flag of the table with its status, so
 * the document cannot drift from the code: a flag added, implemented or retired without
 * regenerating it fails here. */
MG_TEST(flags_doc_lists_every_flag_with_its_status) {
    char *doc = NULL;
    MG_EXPECT_OK(mg_file_read("docs/flags.md", &doc, NULL));
    if (!doc) return;
    int wrong = 0;
    for (int i = 0; i < mg_flag_count && wrong < 5; i++) {
        const mg_flag_spec *f = &mg_flag_table[i];
        /* the --help tag without its brackets ("[only 1]": "only 1"); none: implemented */
        char tag[48], row[192];
        mg_flag_status_tag(f, tag, sizeof tag);
        if (tag[0]) tag[strlen(tag) - 1] = '\0';
        snprintf(row, sizeof row, "| `%s` | %s |", f->name, tag[0] ? tag + 1 : "implemented");
        if (!strstr(doc, row)) {
            MG_EXPECT(0, "docs/flags.md lacks '%s' (regenerate it: tools/reference/flags_doc.py)",
                      row);
            wrong++;
        }
    }
    free(doc);
}
