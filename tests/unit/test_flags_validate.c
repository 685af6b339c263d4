/* Config checks against Megatron-LM's arguments.py (validate_args): derived values, the warm-up
 * fraction, bad combinations, data parallelism, the device, the padded vocabulary. Every
 * bad-input case asserts the status, a piece of the one-line message, and that the config was
 * left untouched. */
#include "test.h"

#include "config_test_util.h"

#include "config/flags.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void expect_validated(mg_test_ctx *t, const char *const *extra, mg_config *out) {
    MG_EXPECT_OK(mg_test_parse_base(out, NULL, extra));
    MG_EXPECT_OK(mg_config_validate(out));
}

MG_TEST(flags_validate_resolves_derived_values) {
    mg_config c;
    expect_validated(t, NULL, &c);
    MG_EXPECT(c.ffn_hidden_size == 256, "ffn %d, want 4*64", c.ffn_hidden_size);
    MG_EXPECT(c.kv_channels == 16, "kv %d, want 64/4", c.kv_channels);
    MG_EXPECT(c.num_query_groups == 4, "groups %d, want heads", c.num_query_groups);
    MG_EXPECT(c.max_position_embeddings == 32, "max pos %d", c.max_position_embeddings);
    MG_EXPECT(c.global_batch_size == 1, "gbs %d, want mbs 1 x dp 1", c.global_batch_size);
    MG_EXPECT(c.lr_decay_iters == 10, "decay iters %lld", (long long)c.lr_decay_iters);
    MG_EXPECT(c.min_lr == 0 && c.lr_warmup_iters == 0, "min lr / warmup");

    /* Megatron's SwiGLU rule int((4*h*2/3)/64)*64: 64 -> 128, 4096 -> 10880, 768 -> 2048. */
    const int h[] = {64, 4096, 768}, want[] = {128, 10880, 2048};
    for (int i = 0; i < 3; i++) {
        char hs[16];
        snprintf(hs, sizeof hs, "%d", h[i]);
        const char *extra[] = {"--swiglu", "--hidden-size", hs, NULL};
        expect_validated(t, extra, &c);
        MG_EXPECT(c.ffn_hidden_size == want[i], "swiglu hidden %d: ffn %d, want %d", h[i],
                  c.ffn_hidden_size, want[i]);
    }
    const char *given[] = {"--ffn-hidden-size", "100", "--kv-channels", "10", "--swiglu", NULL};
    expect_validated(t, given, &c);
    MG_EXPECT(c.ffn_hidden_size == 100 && c.kv_channels == 10, "explicit values kept");

    /* --num-query-groups counts only with --group-query-attention; there its default is 1. */
    const char *ng_only[] = {"--num-query-groups", "2", NULL};
    expect_validated(t, ng_only, &c);
    MG_EXPECT(c.num_query_groups == 4, "groups %d without GQA, want heads", c.num_query_groups);
    const char *gqa[] = {"--group-query-attention", NULL};
    expect_validated(t, gqa, &c);
    MG_EXPECT(c.num_query_groups == 1, "GQA default groups %d, want Megatron's 1",
              c.num_query_groups);
    const char *gqa2[] = {"--group-query-attention", "--num-query-groups", "2", NULL};
    expect_validated(t, gqa2, &c);
    MG_EXPECT(c.num_query_groups == 2, "groups %d", c.num_query_groups);

    const char *batch[] = {"--micro-batch-size",
                           "4",
                           "--global-batch-size",
                           "12",
                           "--lr-decay-iters",
                           "8",
                           "--max-position-embeddings",
                           "64",
                           NULL};
    expect_validated(t, batch, &c);
    MG_EXPECT(c.global_batch_size == 12 && c.micro_batch_size == 4, "batch kept");
    MG_EXPECT(c.lr_decay_iters == 8 && c.max_position_embeddings == 64, "explicit kept");

    /* Validation is idempotent: a validated config (e.g. read back from a checkpoint) passes
     * again unchanged. */
    mg_config again = c;
    MG_EXPECT_OK(mg_config_validate(&again));
    MG_EXPECT(!memcmp(&again, &c, sizeof c), "second validation changed the config");
}

MG_TEST(flags_validate_warmup_fraction) {
    mg_config c;
    const char *f[] = {"--train-iters", "100", "--lr-warmup-fraction", "0.1", NULL};
    expect_validated(t, f, &c);
    MG_EXPECT(c.lr_warmup_iters == 10 && c.lr_warmup_fraction == 0.1, "warmup %lld fraction %g",
              (long long)c.lr_warmup_iters, c.lr_warmup_fraction);
    /* 0.07 * 40 = 2.8000000000000003: the integer part, the fraction kept for the scheduler. */
    const char *g[] = {"--train-iters", "50", "--lr-decay-iters", "40", "--lr-warmup-fraction",
                       "0.07",          NULL};
    expect_validated(t, g, &c);
    MG_EXPECT(c.lr_warmup_iters == 2 && c.lr_warmup_fraction == 0.07, "warmup %lld",
              (long long)c.lr_warmup_iters);
    mg_config again = c;
    MG_EXPECT_OK(mg_config_validate(&again));
    MG_EXPECT(!memcmp(&again, &c, sizeof c), "revalidation changed the warm-up");

    /* Both given to the library directly (the parser refuses it earlier). */
    c.lr_warmup_iters = 5;
    mg_config before = c;
    MG_EXPECT_ERROR(mg_config_validate(&c), MG_ERR_USAGE, "are both given; pass only one");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed validation changed the config");
    const char *h[] = {"--lr-warmup-fraction", "1.0", NULL};
    MG_EXPECT_OK(mg_test_parse_base(&c, NULL, h));
    MG_EXPECT_ERROR(mg_config_validate(&c), MG_ERR_USAGE, "--lr-warmup-fraction must be in [0, 1)");
}

MG_TEST(flags_validate_rejects_bad_combinations) {
    static const struct {
        const char *drop;
        const char *extra[10];
        mg_status code;
        const char *msg;
    } cases[] = {
        {"--num-layers", {NULL}, MG_ERR_USAGE, "missing required model flag --num-layers"},
        {"--seq-length", {NULL}, MG_ERR_USAGE, "missing required model flag --seq-length"},
        {NULL, {"--hidden-size", "0"}, MG_ERR_USAGE, "--hidden-size must be positive, got 0"},
        {NULL, {"--num-layers", "-3"}, MG_ERR_USAGE, "--num-layers must be positive, got -3"},
        {"--train-iters", {NULL}, MG_ERR_USAGE, "missing --train-iters N"},
        {NULL, {"--train-iters", "0"}, MG_ERR_USAGE, "--train-iters must be positive"},
        {NULL,
         {"--hidden-size", "100", "--num-attention-heads", "3"},
         MG_ERR_USAGE,
         "--hidden-size 100 is not divisible by --num-attention-heads 3; choose sizes that "
         "divide or pass --kv-channels"},
        {NULL,
         {"--group-query-attention", "--num-query-groups", "3"},
         MG_ERR_USAGE,
         "--num-attention-heads 4 is not divisible by --num-query-groups 3"},
        {NULL,
         {"--tensor-model-parallel-size", "0"},
         MG_ERR_USAGE,
         "--tensor-model-parallel-size must be positive, got 0"},
        {NULL,
         {"--tensor-model-parallel-size", "2", "--ffn-hidden-size", "33"},
         MG_ERR_USAGE,
         "--ffn-hidden-size 33 is not divisible by --tensor-model-parallel-size 2"},
        {NULL,
         {"--tensor-model-parallel-size", "2", "--group-query-attention", "--num-query-groups",
          "1"},
         MG_ERR_USAGE,
         "num_query_groups (1) must be a multiple of tensor_model_parallel_size (2)"},
        {NULL,
         {"--global-batch-size", "10", "--micro-batch-size", "4"},
         MG_ERR_USAGE,
         "global batch size (10) is not divisible by micro batch size (4) times data parallel "
         "size (1); make --global-batch-size a multiple of 4"},
        {NULL, {"--micro-batch-size", "0"}, MG_ERR_USAGE, "--micro-batch-size must be positive"},
        {NULL,
         {"--seq-length", "64", "--max-position-embeddings", "32"},
         MG_ERR_USAGE,
         "--seq-length 64 exceeds --max-position-embeddings 32"},
        {NULL,
         {"--hidden-size", "12", "--num-attention-heads", "4", "--position-embedding-type", "rope"},
         MG_ERR_USAGE,
         "rope needs an even head size"},
        {NULL, {"--swiglu", "--hidden-size", "16"}, MG_ERR_USAGE, "pass --ffn-hidden-size"},
        {"--lr", {NULL}, MG_ERR_USAGE, "missing --lr"},
        {NULL, {"--lr", "-0.5"}, MG_ERR_USAGE, "--lr must be >= 0, got -0.5"},
        {NULL, {"--min-lr", "0.1"}, MG_ERR_USAGE, "--min-lr 0.1 is larger than --lr 0.001"},
        {NULL,
         {"--lr-warmup-iters", "10"},
         MG_ERR_USAGE,
         "--lr-warmup-iters 10 must be less than the 10 decay iterations"},
        {NULL, {"--lr-decay-iters", "0"}, MG_ERR_USAGE, "--lr-decay-iters must be positive"},
        {NULL, {"--adam-beta1", "1"}, MG_ERR_USAGE, "--adam-beta1 must be in [0, 1), got 1"},
        {NULL, {"--adam-beta2", "-0.1"}, MG_ERR_USAGE, "--adam-beta2 must be in [0, 1)"},
        {NULL, {"--adam-eps", "0"}, MG_ERR_USAGE, "--adam-eps must be positive"},
        {NULL, {"--clip-grad", "-1"}, MG_ERR_USAGE, "--clip-grad must be >= 0"},
        {"--vocab-size",
         {NULL},
         MG_ERR_USAGE,
         "--mock-data needs --vocab-size N (no tokenizer files given)"},
        {"--mock-data",
         {NULL},
         MG_ERR_USAGE,
         "no training data: pass --mock-data or --data-path PREFIX"},
        {NULL,
         {"--make-vocab-size-divisible-by", "0"},
         MG_ERR_USAGE,
         "--make-vocab-size-divisible-by must be >= 1"},
        {NULL, {"--log-interval", "0"}, MG_ERR_USAGE, "--log-interval must be positive"},
        {NULL, {"--eval-interval", "-5"}, MG_ERR_USAGE, "--eval-interval must be positive"},
        {NULL, {"--save-interval", "0"}, MG_ERR_USAGE, "--save-interval must be positive"},
        {NULL, {"--exit-interval", "0"}, MG_ERR_USAGE, "--exit-interval must be positive"},
        {NULL, {"--seed", "-1"}, MG_ERR_USAGE, "--seed must be in [0, 4294967295]"},
        {NULL, {"--num-threads", "0"}, MG_ERR_USAGE, "--num-threads must be positive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, cases[i].drop, cases[i].extra));
        mg_config before = c;
        mg_error_clear();
        mg_status st = mg_config_validate(&c);
        MG_EXPECT(st == cases[i].code, "case %zu (%s): got %s, want %s: %s", i, cases[i].msg,
                  mg_status_name(st), mg_status_name(cases[i].code), mg_error_message());
        MG_EXPECT(strstr(mg_error_message(), cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i,
                  mg_error_message(), cases[i].msg);
        MG_EXPECT(!memcmp(&c, &before, sizeof c), "case %zu: failed validation changed the config",
                  i);
    }
}

/* The data-parallel size is the launch's world size (TP = PP = CP = 1): the default global batch
 * is micro x D, and a global batch that micro x D does not divide is Megatron's error. */
MG_TEST(flags_validate_data_parallel) {
    mg_config c;
    MG_EXPECT_OK(mg_test_parse_base(&c, NULL, (const char *[]){"--micro-batch-size", "2", NULL}));
    c.world_size = 4;
    MG_EXPECT(mg_config_data_parallel_size(&c) == 4, "dp %d", mg_config_data_parallel_size(&c));
    MG_EXPECT_OK(mg_config_validate(&c));
    MG_EXPECT(c.global_batch_size == 8, "default global batch %d, want 2 x 4", c.global_batch_size);
    MG_EXPECT_OK(mg_test_parse_base(
        &c, NULL, (const char *[]){"--micro-batch-size", "2", "--global-batch-size", "12", NULL}));
    c.world_size = 4;
    mg_config before = c;
    mg_error_clear();
    MG_EXPECT(mg_config_validate(&c) == MG_ERR_USAGE, "12 %% (2 x 4) accepted");
    MG_EXPECT(!strcmp(mg_error_message(),
                      "global batch size (12) is not divisible by micro batch size (2) times data "
                      "parallel size (4); make --global-batch-size a multiple of 8"),
              "message: '%s'", mg_error_message());
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed validation changed the config");
    /* --overlap-param-gather: Megatron's two preconditions, each one line */
    const struct {
        const char *extra[4], *msg;
    } bad[] = {
        {{"--overlap-param-gather", "--overlap-grad-reduce", NULL},
         "--overlap-param-gather needs --use-distributed-optimizer"},
        {{"--overlap-param-gather", "--use-distributed-optimizer", NULL},
         "--overlap-param-gather needs --overlap-grad-reduce as well"},
    };
    for (int i = 0; i < 2; i++) {
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, bad[i].extra));
        c.world_size = 2;
        mg_error_clear();
        mg_status st = mg_config_validate(&c);
        MG_EXPECT(st == MG_ERR_USAGE && strstr(mg_error_message(), bad[i].msg), "%s: %s: %s",
                  bad[i].msg, mg_status_name(st), mg_error_message());
    }
    MG_EXPECT_OK(mg_test_parse_base(&c, NULL,
                            (const char *[]){"--overlap-param-gather", "--overlap-grad-reduce",
                                             "--use-distributed-optimizer", NULL}));
    c.world_size = 2;
    MG_EXPECT_OK(mg_config_validate(&c));
    MG_EXPECT(c.overlap_param_gather && c.overlap_grad_reduce && c.use_distributed_optimizer,
              "the three flags set their fields");
}

/* --device: auto (the default) and cpu always validate; cuda only in builds with the CUDA
 * backend (whether a GPU is present is the trainer's question, not validation's). */
MG_TEST(flags_validate_device) {
    const char *devs[] = {"auto", "cpu", "cuda"};
    for (int i = 0; i < 3; i++) {
        mg_config c;
        const char *extra[] = {"--device", devs[i], NULL};
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, extra));
#ifndef MG_HAVE_CUDA
        mg_config before = c;
#endif
        mg_error_clear();
        mg_status st = mg_config_validate(&c);
#ifndef MG_HAVE_CUDA
        if (i == 2) {
            MG_EXPECT(st == MG_ERR_UNSUPPORTED, "--device cuda without the CUDA backend: %s",
                      mg_status_name(st));
            MG_EXPECT(!strcmp(mg_error_message(),
                              "this build has no CUDA backend (nvcc/cuBLAS were not found when it "
                              "was built); use --device cpu"),
                      "message: '%s'", mg_error_message());
            MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed validation changed the config");
            continue;
        }
#endif
        MG_EXPECT(st == MG_OK, "--device %s: %s", devs[i], mg_error_message());
        MG_EXPECT(!strcmp(c.device, devs[i]), "--device %s became '%s'", devs[i], c.device);
    }
}

MG_TEST(flags_padded_vocab) {
    mg_config c;
    mg_config_defaults(&c);
    const int vocab[] = {50257, 128, 129, 1, 100}, div[] = {128, 128, 128, 128, 1};
    const int want[] = {50304, 128, 256, 128, 100};
    for (int i = 0; i < 5; i++) {
        c.vocab_size = vocab[i];
        c.make_vocab_size_divisible_by = div[i];
        MG_EXPECT(mg_config_padded_vocab(&c) == want[i], "vocab %d / %d: %d, want %d", vocab[i],
                  div[i], mg_config_padded_vocab(&c), want[i]);
    }
}
