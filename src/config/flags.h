/* Megatron-LM's command-line flags: defaults, parsing, help, validation and JSON round trip of
 * mg_config. The flags are described by one static table (config/flags_table.c): name, group, value
 * kind, field, help text and a status (implemented, accepted and ignored, or recognised but not
 * supported yet), so a later feature flips one entry instead of adding parser code.
 *
 * Typical use (src/cli/train.c):
 *   mg_config c; mg_config_defaults(&c);
 *   MG_CHECK(mg_flags_parse(&c, argc, argv, &help));   // help: print mg_flags_print_help, stop
 *   MG_CHECK(mg_config_validate(&c));                 // resolves -1 defaults, rejects bad combos
 *
 * Errors are MG_ERR_USAGE (exit 2) with one line naming the problem and the fix; a Megatron flag
 * this build recognises but cannot run yet (e.g. --fp8-format hybrid, or --device cuda in a
 * build without the CUDA backend) is MG_ERR_UNSUPPORTED (exit 1). A command line with several
 * refused flags (unknown, not yet, retired, bad values) has each printed on its own line
 * (mg_log_error), then fails with one MG_ERR_USAGE line naming them all. On error the config is
 * left untouched.
 *
 * Data flags: --data-path takes several values (argparse nargs='*') stored space-joined;
 * validation requires exactly one of --mock-data / --data-path and, with --tokenizer-type
 * GPT2BPETokenizer, existing --vocab-file and --merge-file. vocab_size then stays -1: the caller
 * takes the tokenizer's size (50257) before mg_config_padded_vocab. --split is parsed when the
 * dataset is built (data/gpt_dataset.h), not here.
 *
 * Warm-up note: with --lr-warmup-fraction, validation sets lr_warmup_iters to the integer part
 * of fraction × decay iterations and keeps lr_warmup_fraction; Megatron's scheduler uses the
 * unrounded product (in samples), so schedules must prefer the fraction when it is >= 0.
 *
 * Exports: mg_config_defaults, mg_tokenizer_type_choices, mg_config_single_process, mg_flags_parse,
 * mg_flags_seen, mg_flags_take_unseen, mg_flags_no_effect_seen, mg_flags_print_help,
 * mg_config_validate, mg_config_resolve_model, mg_config_rotary_dim, mg_config_data_parallel_size,
 * mg_config_check_tp, mg_config_log_level, mg_config_padded_vocab, mg_config_to_json,
 * mg_config_from_json, mg_config_from_cjson. Needs: core/status, cJSON (JSON reading). */
#ifndef MG_FLAGS_H
#define MG_FLAGS_H

#include "core/echo_plan.h"
#include "core/status.h"

#include <stdbool.h>
#include <stdio.h>

/* Megatron's defaults, as commented in megatron.h; -1 marks "absent" (resolved by validate). */
void mg_config_defaults(mg_config *c);
/* The --tokenizer-type values implemented (NULL-terminated), for every command that takes it. */
extern const char *const mg_tokenizer_type_choices[];
/* The parallel layout's flags at their defaults: one process holding the whole model (tools that
 * read a checkpoint of any layout). */
void mg_config_single_process(mg_config *c);

/* Parses argv (the subcommand name excluded): `--flag value`, `--flag=value`, boolean flags take
 * no value, a flag given twice keeps the last value (as argparse). --help or -h anywhere sets
 * *help_requested and returns MG_OK without parsing the rest. */
mg_status mg_flags_parse(mg_config *c, int argc, char **argv, bool *help_requested);

/* Whether `flag` (e.g. "--bf16") appeared on the last successful mg_flags_parse, so callers can
 * print notes about accepted-but-ignored flags. Process-wide state, not thread safe. */
bool mg_flags_seen(const char *flag);

/* Sets each of the n flags (e.g. "--num-layers") that the last successful mg_flags_parse did not
 * see to its value in `from` (a checkpoint's saved configuration); given flags keep theirs.
 * MG_ERR_INTERNAL for a name that is not a flag with a field. */
/* The flags with no effect here (MG_FLAG_IGNORED) that the last mg_flags_parse saw, as
 * "--a, --b" in out (cap bytes; cut short if it does not fit); returns how many. */
size_t mg_flags_no_effect_seen(char *out, size_t cap);

mg_status mg_flags_take_unseen(mg_config *c, const mg_config *from, const char *const *flags,
                               int n);

/* Every flag grouped (model, regularisation/optimizer, learning rate, training, logging,
 * checkpointing, data, runtime): flag, argument, default, one-line description. */
void mg_flags_print_help(FILE *f);

/* Resolves derived defaults (ffn_hidden_size, kv_channels, num_query_groups,
 * max_position_embeddings, global_batch_size, lr_decay_iters, warm-up from the fraction) and
 * rejects invalid combinations. Idempotent: validating a validated config changes nothing. */
mg_status mg_config_validate(mg_config *c);

/* Only the model part of mg_config_validate (required shape flags, derived ffn_hidden_size,
 * kv_channels, num_query_groups, max_position_embeddings; activation recomputation), for tools
 * that size a model without training it (`megatron plan`). On error *c is untouched. */
mg_status mg_config_resolve_model(mg_config *c);

/* RoPE's rotated channels per head: int(kv_channels * rotary_percent) below 1 (Megatron's
 * RotaryEmbedding), else kv_channels. Validation makes it even and positive. */
int mg_config_rotary_dim(int kv_channels, double rotary_percent);

/* Megatron's data-parallel size: world_size / (TP x PP x CP), or 1 where those do not divide the
 * world (validation then refuses the layout). config/config_layout.c, with mg_config_check_tp. */
int mg_config_data_parallel_size(const mg_config *c);

/* Megatron's rules for splitting the model over --tensor-model-parallel-size (heads, query groups,
 * the MLP, and the sequence with --sequence-parallel), each a one-line MG_ERR_USAGE. Needs the
 * model flags resolved (mg_config_validate calls it; so does model/config.c). */
mg_status mg_config_check_tp(const mg_config *c);

/* --logging-level as this build's log level (core/log.h: 0 errors only, 1 the default lines, 2
 * debug too): Python's DEBUG (10) or below 2, ERROR (40) or above 0, else 1; -1 when not given. */
int mg_config_log_level(const mg_config *c);

/* The vocabulary padded up to a multiple of make_vocab_size_divisible_by × TP size, as
 * Megatron's _vocab_size_with_padding. Needs a validated config. */
int mg_config_padded_vocab(const mg_config *c);
/* The Mixture-of-Experts checks of mg_config_validate (Megatron's defaults resolved in place:
 * --moe-ffn-hidden-size, a negative capacity factor). Dense models: only that the expert
 * flags need --num-experts. */
mg_status mg_config_check_moe(mg_config *c);
/* The receive budget's and ECHO's flags (config/config_echo.c): a positive factor; echo with
 * experts, at least two expert-parallel ranks, spare slots a multiple of them, no token dropping,
 * approximate bin packing with one slot per rank. `megatron plan` shows both; training runs
 * both (model/moe.c). */
mg_status mg_config_check_echo(const mg_config *c);
/* The receive budget's factor: --moe-expert-rank-capacity-factor or its ECHO name
 * --moe-received-token-capacity (mg_config_check_echo refuses two different values); -1: none. */
double mg_config_rank_capacity(const mg_config *c);
/* ECHO's spare slots in all: --moe-num-echo-experts, else --num-experts (Megatron's default). */
int mg_config_echo_slots(const mg_config *c);
/* Whether ECHO assigns spillover by approximate bin packing: --moe-echo-assignment, or auto:
 * Megatron's rule, bin packing with one spare slot per rank, else one-shot greedy. */
bool mg_config_echo_bin_packing(const mg_config *c);
/* ECHO's planner settings from the flags (core/echo_plan.h): EP, experts, spare slots, method,
 * threshold. */
mg_echo_params mg_config_echo_params(const mg_config *c);
/* The CUDA-graph checks of mg_config_validate (config/config_graphs.c): --enable-cuda-graph,
 * --external-cuda-graph and a full_iteration scope resolved into cuda_graph_impl; the scopes
 * known; at least one warm-up step; what the graphs do not hold yet refused. */
mg_status mg_config_check_graphs(mg_config *c);
/* The parts per-layer graphs hold (--cuda-graph-impl local or transformer_engine): the scopes
 * of --cuda-graph-modules (or --cuda-graph-scope); attn, mlp and moe when none is named. */
#define MG_GRAPH_SCOPE_ATTN           1u
#define MG_GRAPH_SCOPE_MLP            2u
#define MG_GRAPH_SCOPE_MOE            4u
#define MG_GRAPH_SCOPE_MOE_ROUTER     8u
#define MG_GRAPH_SCOPE_MOE_PREPROCESS 16u
unsigned mg_config_graph_parts(const mg_config *c);
/* fp8 training (config/config_fp8.c): Megatron's checks of the --fp8-* flags; the recipes this
 * build lacks refused with the reason. */
mg_status mg_config_check_fp8(const mg_config *c);
/* --fp8-format given. */
bool mg_config_fp8(const mg_config *c);
/* Whether global layer `layer`'s linears compute in fp8 (not one of --first-last-layers-bf16's). */
bool mg_config_fp8_layer(const mg_config *c, int layer);
/* Activation recomputation (config/config_recompute.c): --recompute-activations resolved into
 * --recompute-granularity selective, and Megatron's checks of the granularity, method, layer
 * count, modules and --distribute-saved-activations. */
mg_status mg_config_check_recompute(mg_config *c);
/* --recompute-granularity full: each recomputed layer (or uniform group) keeps only its input. */
bool mg_config_recompute_full(const mg_config *c);
/* The modules selective recomputation frees (--recompute-modules; core_attn when none is
 * named); 0 without the selective granularity. */
#define MG_RECOMPUTE_CORE_ATTN      1u  /* the attention's output */
#define MG_RECOMPUTE_LAYERNORM      2u  /* both norms' outputs */
#define MG_RECOMPUTE_MLP            4u  /* a dense MLP's, but its input */
#define MG_RECOMPUTE_MLP_ACT        8u  /* a dense MLP's activation output */
#define MG_RECOMPUTE_MOE            16u /* an MoE MLP's, but its input and the routing */
#define MG_RECOMPUTE_MOE_ACT        32u /* the experts' activation output */
#define MG_RECOMPUTE_SHARED_EXPERTS 64u /* the shared experts' fc1 and activation outputs */
unsigned mg_config_recompute_modules(const mg_config *c);
/* The training-length and schedule checks of mg_config_validate (config/config_lr.c):
 * iteration- or sample-based training (--train-samples resolves --lr-decay-samples), WSD, the
 * weight-decay schedule, --decoupled-lr and --rampup-batch-size, each in Megatron's words. */
mg_status mg_config_check_schedule(mg_config *c);
/* --rampup-batch-size's three integers (START INCR SAMPLES); MG_ERR_USAGE unless exactly three. */
mg_status mg_config_rampup(const mg_config *c, int64_t out[3]);
/* Which of the n_layers layers are MoE layers (1) under --moe-layer-freq; all 0 for a dense
 * model. MG_ERR_USAGE on a malformed pattern or one whose length is not n_layers. */
mg_status mg_config_moe_layers(const mg_config *c, uint8_t *is_moe, int n_layers);

/* A malloc'd JSON object {"num_layers": 2, ...} keyed by field name; doubles as %.17g so they read
 * back bit-exactly, enums as their flag choice ("RMSNorm"). The caller frees *json_out. */
mg_status mg_config_to_json(const mg_config *c, char **json_out);

/* The inverse: sets each field named in the object; fields not named keep their value (start
 * from mg_config_defaults). Unknown keys and wrong types are MG_ERR_FORMAT errors. */
mg_status mg_config_from_json(mg_config *c, const char *json);

/* The same from an object already parsed with cJSON (e.g. the "config" member of a checkpoint's
 * state.json). Prefer it to re-printing the object: cJSON_Print* keeps only 15 significant digits
 * when they round-trip to within a relative epsilon, so a re-printed config is not bit-exact. */
struct cJSON;
mg_status mg_config_from_cjson(mg_config *c, const struct cJSON *obj);

#endif
