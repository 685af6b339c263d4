/* Activation recomputation's flags (config/config_recompute.c): --recompute-activations is the
 * selective granularity, the modules resolve to their bits (core_attn by default), and every
 * combination Megatron refuses fails validation in one line, in its words, the config left
 * untouched. */
#include "test.h"

#include "config_test_util.h"

#include "config/flags.h"

#include <string.h>

MG_TEST(flags_recompute_resolve) {
    static const struct {
        const char *extra[10];
        bool full;
        unsigned modules;
    } cases[] = {
        {{NULL}, false, 0},
        {{"--recompute-activations", NULL}, false, MG_RECOMPUTE_CORE_ATTN},
        {{"--recompute-granularity", "selective", NULL}, false, MG_RECOMPUTE_CORE_ATTN},
        {{"--recompute-granularity", "selective", "--recompute-modules", "layernorm", "mlp_act",
          "moe", NULL},
         false,
         MG_RECOMPUTE_LAYERNORM | MG_RECOMPUTE_MLP_ACT | MG_RECOMPUTE_MOE},
        {{"--recompute-granularity", "full", "--recompute-method", "block",
          "--recompute-num-layers", "2", NULL},
         true,
         0},
        /* Megatron: --recompute-activations means selective, whatever the granularity says */
        {{"--recompute-activations", "--recompute-granularity", "full", NULL},
         false,
         MG_RECOMPUTE_CORE_ATTN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, cases[i].extra));
        MG_EXPECT_OK(mg_config_validate(&c));
        MG_EXPECT(mg_config_recompute_full(&c) == cases[i].full &&
                      mg_config_recompute_modules(&c) == cases[i].modules,
                  "case %zu: full %d modules %#x, expected %d %#x", i,
                  (int)mg_config_recompute_full(&c), mg_config_recompute_modules(&c),
                  (int)cases[i].full, cases[i].modules);
    }
}

MG_TEST(flags_recompute_refuse_bad_combinations) {
    static const struct {
        const char *extra[12];
        const char *msg;
    } cases[] = {
        {{"--recompute-granularity", "full", "--recompute-num-layers", "1"},
         "Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\""},
        {{"--recompute-granularity", "full", "--recompute-method", "block"},
         "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 2 (got none"},
        {{"--recompute-granularity", "full", "--recompute-method", "uniform",
          "--recompute-num-layers", "3"},
         "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 2 (got 3)"},
        {{"--recompute-granularity", "full", "--recompute-method", "uniform",
          "--recompute-num-layers", "0"},
         "num_layers_per_pipeline_rank: 2 (got 0)"},
        {{"--recompute-granularity", "selective", "--recompute-num-layers", "1"},
         "When using recompute_granularity: selective recompute_num_layers must be None."},
        {{"--recompute-granularity", "selective", "--recompute-method", "uniform"},
         "recompute method is not yet supported for selective recomputing granularity"},
        {{"--recompute-granularity", "selective", "--recompute-modules", "attention"},
         "Invalid choices for recompute_modules: {'attention'}. Allowed modules are:"},
        {{"--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj"},
         "mla_up_proj in recompute_modules is only supported with multi_latent_attention"},
        {{"--recompute-granularity", "selective", "--recompute-modules", "shared_experts",
          "--num-experts", "4", "--moe-shared-expert-intermediate-size", "32",
          "--moe-shared-expert-overlap", "--moe-token-dispatcher-type", "alltoall"},
         "shared_experts recompute cannot work with --moe-shared-expert-overlap."},
        {{"--distribute-saved-activations", "--recompute-granularity", "full", "--recompute-method",
          "uniform", "--recompute-num-layers", "1"},
         "can distribute recomputed activations only across tensor model parallel groups"},
        {{"--distribute-saved-activations", "--tensor-model-parallel-size", "2",
          "--recompute-activations"},
         "distributed recompute activations is only application to full recompute granularity"},
        {{"--distribute-saved-activations", "--tensor-model-parallel-size", "2",
          "--recompute-granularity", "full", "--recompute-num-layers", "1"},
         "for distributed recompute activations to work you need to use a recompute method"},
        {{"--distribute-saved-activations", "--tensor-model-parallel-size", "2",
          "--sequence-parallel", "--recompute-granularity", "full", "--recompute-method", "uniform",
          "--recompute-num-layers", "1"},
         "distribute_saved_activations: True must be false when sequence parallel is enabled"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, cases[i].extra));
        mg_config before = c;
        MG_EXPECT_ERROR(mg_config_validate(&c), MG_ERR_USAGE, cases[i].msg);
        MG_EXPECT(!memcmp(&c, &before, sizeof c), "case %zu: failed validation changed the config",
                  i);
    }
    /* a bad choice of granularity or method is the parser's */
    mg_config c;
    const char *const gran[] = {"--recompute-granularity", "partial", NULL};
    MG_EXPECT_ERROR(mg_test_parse_base(&c, NULL, gran), MG_ERR_USAGE, "one of full or selective");
}
