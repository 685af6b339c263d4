/* The CUDA-graph flags (config/config_graphs.c): the spellings Megatron has had resolve to one
 * implementation, and every combination this build refuses fails validation in one line, with
 * the config left untouched. */
#include "test.h"

#include "config_test_util.h"

#include "config/flags.h"

#include <string.h>

MG_TEST(flags_graphs_resolve_to_full_iteration) {
    static const char *const spellings[][6] = {
        {"--cuda-graph-impl", "full_iteration", NULL},
        {"--cuda-graph-impl", "local", "--cuda-graph-modules", "full_iteration", NULL},
        {"--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration", NULL},
        {"--enable-cuda-graph", "--cuda-graph-scope", "full_iteration", NULL},
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, spellings[i]));
        MG_EXPECT_OK(mg_config_validate(&c));
        MG_EXPECT(c.cuda_graph_impl == MG_GRAPH_FULL_ITERATION && c.cuda_graph_warmup_steps == 3,
                  "spelling %zu: impl %d, warm-up %d", i, (int)c.cuda_graph_impl,
                  c.cuda_graph_warmup_steps);
    }
    mg_config c;
    MG_EXPECT_OK(mg_test_parse_base(&c, NULL, NULL));
    MG_EXPECT_OK(mg_config_validate(&c));
    MG_EXPECT(c.cuda_graph_impl == MG_GRAPH_NONE, "graphs on by default");
}

MG_TEST(flags_graphs_per_layer_scopes) {
    static const struct {
        const char *extra[6];
        mg_cuda_graph_impl impl;
        unsigned parts;
    } cases[] = {
        {{"--cuda-graph-impl", "local", NULL}, MG_GRAPH_LOCAL, 7u},
        {{"--enable-cuda-graph", NULL}, MG_GRAPH_LOCAL, 7u},
        {{"--external-cuda-graph", "--cuda-graph-scope", "attn", "moe", NULL},
         MG_GRAPH_TRANSFORMER_ENGINE,
         MG_GRAPH_SCOPE_ATTN | MG_GRAPH_SCOPE_MOE},
        {{"--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "mlp", NULL},
         MG_GRAPH_TRANSFORMER_ENGINE,
         MG_GRAPH_SCOPE_MLP},
        {{"--cuda-graph-impl", "local", "--eod-mask-loss", "--vocab-size", "64", NULL},
         MG_GRAPH_LOCAL,
         7u},
        {{"--external-cuda-graph", "--cuda-graph-scope", "moe_router", "moe_preprocess", NULL},
         MG_GRAPH_TRANSFORMER_ENGINE,
         MG_GRAPH_SCOPE_MOE_ROUTER | MG_GRAPH_SCOPE_MOE_PREPROCESS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, cases[i].extra));
        MG_EXPECT_OK(mg_config_validate(&c));
        MG_EXPECT(c.cuda_graph_impl == cases[i].impl && mg_config_graph_parts(&c) == cases[i].parts,
                  "case %zu: impl %d parts %u, want %d %u", i, (int)c.cuda_graph_impl,
                  mg_config_graph_parts(&c), (int)cases[i].impl, cases[i].parts);
    }
}

MG_TEST(flags_graphs_refuse_bad_combinations) {
    static const struct {
        const char *extra[10];
        mg_status code;
        const char *msg;
    } cases[] = {
        {{"--cuda-graph-impl", "full_iteration", "--cuda-graph-warmup-steps", "0"},
         MG_ERR_USAGE,
         "--cuda-graph-warmup-steps must be at least 1 here, got 0"},
        {{"--cuda-graph-impl", "local", "--cuda-graph-modules", "moe", "moe_router"},
         MG_ERR_USAGE,
         "--cuda-graph-modules: moe captures the whole MoE sublayer, its router and preprocessing "
         "included"},
        {{"--enable-cuda-graph", "--cuda-graph-impl", "full_iteration"},
         MG_ERR_USAGE,
         "--enable-cuda-graph is deprecated, use --cuda-graph-impl=local instead"},
        {{"--external-cuda-graph", "--cuda-graph-impl", "local"},
         MG_ERR_USAGE,
         "--external-cuda-graph is deprecated, use --cuda-graph-impl=transformer_engine"},
        {{"--cuda-graph-impl", "local", "--cuda-graph-modules", "attn", "--cuda-graph-scope",
          "attn"},
         MG_ERR_USAGE,
         "--cuda-graph-scope is the older spelling of --cuda-graph-modules: give one of them"},
        {{"--cuda-graph-impl", "local", "--cuda-graph-modules", "attention"},
         MG_ERR_USAGE,
         "--cuda-graph-modules: unknown scope 'attention'"},
        {{"--cuda-graph-modules", "attn"},
         MG_ERR_USAGE,
         "--cuda-graph-modules needs --cuda-graph-impl"},
        {{"--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration", "attn"},
         MG_ERR_USAGE,
         "--cuda-graph-scope full_iteration captures the whole iteration: it cannot be combined"},
        {{"--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "full_iteration"},
         MG_ERR_USAGE,
         "full_iteration is only supported with --cuda-graph-impl local"},
        {{"--cuda-graph-impl", "full_iteration", "--eod-mask-loss", "--vocab-size", "64",
          "--calculate-per-token-loss", "--num-experts", "4"},
         MG_ERR_USAGE,
         "CUDA graphs with --eod-mask-loss, --calculate-per-token-loss and MoE layers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        MG_EXPECT_OK(mg_test_parse_base(&c, NULL, cases[i].extra));
        mg_config before = c;
        MG_EXPECT_ERROR(mg_config_validate(&c), cases[i].code, cases[i].msg);
        MG_EXPECT(!memcmp(&c, &before, sizeof c), "case %zu: failed validation changed the config",
                  i);
    }
}
