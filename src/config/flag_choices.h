/* Internal to config/flags_table.c, which includes it once: the value lists of the flag
 * table's enum and string flags (`choices`, and `later`: Megatron's values this build does not
 * have yet), and the checks that the enum fields the table reads and writes as int are int-sized.
 * The lists are static: a second includer would not compile (unused variables). */
#ifndef MG_CONFIG_FLAG_CHOICES_H
#define MG_CONFIG_FLAG_CHOICES_H

#include "config/flags_table.h"

/* Enum fields are read and written as int. */
_Static_assert(sizeof(mg_pos_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_norm_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_lr_style) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_wsd_style) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_wd_style) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_dataloader_type) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_moe_score) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_moe_balancing) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_moe_drop) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_moe_dispatcher) == sizeof(int), "enum size");
_Static_assert(sizeof(mg_cuda_graph_impl) == sizeof(int), "enum size");

static const char *const pos_choices[] = {"learned_absolute", "rope", "none", NULL};
/* Megatron's choices for flags that select what this build always does */
static const char *const impl_choices[] = {"local", "transformer_engine", "inference_optimized",
                                           NULL};
static const char *const attn_choices[] = {"flash", "fused", "unfused", "local", "auto", NULL};
static const char *const dist_choices[] = {"nccl", "gloo", NULL};
static const char *const ddp_impl_choices[] = {"local", "torch", NULL};
static const char *const timing_choices[] = {"max", "minmax", "all", NULL};
static const char *const loader_choices[] = {"single", "cyclic", NULL};
static const char *const loader_later[] = {"external", NULL};
static const char *const tiktoken_choices[] = {"v1", "v2", NULL};
static const char *const pos_later[] = {"mrope", "relative", NULL};
static const char *const norm_choices[] = {"LayerNorm", "RMSNorm", NULL};
static const char *const decay_choices[] = {"constant", "linear", "cosine", "inverse-square-root",
                                            "WSD",      NULL};
static const char *const wsd_choices[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};
static const char *const wd_incr_choices[] = {"constant", "linear", "cosine", NULL};
static const char *const moe_score_choices[] = {"softmax", "sigmoid", NULL};
static const char *const moe_score_later[] = {"sqrtsoftplus", NULL};
static const char *const moe_lb_choices[] = {"aux_loss", "seq_aux_loss", "none", NULL};
static const char *const moe_lb_later[] = {"global_aux_loss", "sinkhorn", "quantile_balancing",
                                           NULL};
static const char *const moe_drop_choices[] = {"probs", "position", NULL};
static const char *const moe_dispatcher_choices[] = {"allgather", "alltoall", "flex", NULL};
static const char *const moe_flex_backend_choices[] = {"deepep", "hybridep", NULL};
static const char *const echo_assignment_choices[] = {"auto", "one_shot_greedy",
                                                      "approx_bin_packing", NULL};
static const char *const fp8_format_choices[] = {"e4m3", "hybrid", NULL};
static const char *const fp8_recipe_choices[] = {"delayed", "tensorwise", "mxfp8", "blockwise",
                                                 NULL};
static const char *const fp8_algo_choices[] = {"most_recent", "max", NULL};
static const char *const recompute_granularity_choices[] = {"full", "selective", NULL};
static const char *const recompute_method_choices[] = {"uniform", "block", NULL};
static const char *const echo_dispatcher_choices[] = {"hybridep", "alltoall", NULL};
static const char *const moe_router_dtype_choices[] = {"fp32", NULL};
static const char *const moe_router_dtype_later[] = {"fp64", NULL};
static const char *const device_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const graph_impl_choices[] = {"none", "local", "transformer_engine",
                                                 "full_iteration", NULL};
static const char *const tokenizer_later[] = {"BertWordPieceLowerCase",
                                              "BertWordPieceCase",
                                              "TikTokenizer",
                                              "MultimodalTokenizer",
                                              "NullMultimodalTokenizer",
                                              "SFTTokenizer",
                                              NULL};

#endif
