/* The flag table. A flag that a later feature implements flips its row from MG_FLAG_NOT_YET to
 * MG_FLAG_IMPLEMENTED and gains a field; the parser needs no change. Megatron's defaults are in
 * config_defaults.c; mg_tokenizer_type_choices, defined here, is declared in config/flags.h for
 * the commands (this file sees only the table's types). */
#include "config/flags_table.h"
#include "config/flag_choices.h"

#include <stdio.h>
#include <string.h>

const char *const mg_tokenizer_type_choices[] = {"GPT2BPETokenizer",
                                                 "HuggingFaceTokenizer",
                                                 "SentencePieceTokenizer",
                                                 "GPTSentencePieceTokenizer",
                                                 "Llama2Tokenizer",
                                                 "NullTokenizer",
                                                 NULL};

const char *const mg_flag_group_names[MG_FLAG_GROUP_COUNT] = {"model",
                                                              "mixture of experts",
                                                              "regularisation and optimizer",
                                                              "learning rate",
                                                              "training",
                                                              "logging",
                                                              "checkpointing",
                                                              "data",
                                                              "runtime",
                                                              "CUDA graphs"};

#define FIELD(f) .offset = offsetof(mg_config, f), .size = sizeof(((mg_config *)0)->f), .key = #f
/* another spelling of a FIELD(f) flag: the same bytes, no key of its own (not saved twice) */
#define ALIAS(f)    .offset = offsetof(mg_config, f), .size = sizeof(((mg_config *)0)->f)
#define MODEL       .group = MG_FLAG_GROUP_MODEL
#define MOE         .group = MG_FLAG_GROUP_MOE
#define OPTIM       .group = MG_FLAG_GROUP_OPTIMIZER
#define LR          .group = MG_FLAG_GROUP_LR
#define TRAIN       .group = MG_FLAG_GROUP_TRAINING
#define LOGGING     .group = MG_FLAG_GROUP_LOGGING
#define CKPT        .group = MG_FLAG_GROUP_CHECKPOINT
#define DATA        .group = MG_FLAG_GROUP_DATA
#define RUNTIME     .group = MG_FLAG_GROUP_RUNTIME
#define GRAPHS      .group = MG_FLAG_GROUP_GRAPHS
#define INT         .kind = MG_FLAG_INT, .arg = "N"
#define INT64       .kind = MG_FLAG_INT64, .arg = "N"
#define DOUBLE      .kind = MG_FLAG_DOUBLE, .arg = "X"
#define BOOL        .kind = MG_FLAG_BOOL
#define STRING      .kind = MG_FLAG_STRING
#define IGNORED     .status = MG_FLAG_IGNORED
#define NOT_YET     .status = MG_FLAG_NOT_YET
#define RETIRED     .status = MG_FLAG_RETIRED
#define PARTIAL_1   .status = MG_FLAG_PARTIAL, .trivial = "1"
#define PARTIAL_OFF .status = MG_FLAG_PARTIAL, .trivial = "off"
#define PROFILE     "; profile here with CUDA_INJECTION64_PATH=build/kernel_profile.so (tools/profile)"
#define ONLY_NAN_CHECK                                                                             \
    .why = "(only the NaN check: --no-check-for-nan-in-loss-and-grad turns it off); drop it"
#define STRAGGLER .why = "(no straggler detection: one rank's slowness shows in the iteration time)"
#define SINGLE    .why = "(single process); use 1", .trivial = "1"
#define WANDB                                                                                      \
    .why = "(Weights & Biases logs over the network, which most clusters lack); use "              \
           "--tensorboard-dir DIR and view or sync its event files"

const mg_flag_spec mg_flag_table[] = {
    /* model */
    {"--num-layers", MODEL, INT, FIELD(num_layers), .def = "required",
     .help = "number of transformer layers"},
    {"--hidden-size", MODEL, INT, FIELD(hidden_size), .def = "required",
     .help = "transformer hidden size"},
    {"--ffn-hidden-size", MODEL, INT, FIELD(ffn_hidden_size), .def = "4*hidden",
     .help = "MLP hidden size (with --swiglu: int(8*hidden/3/64)*64, as Megatron)"},
    {"--num-attention-heads", MODEL, INT, FIELD(num_attention_heads), .def = "required",
     .help = "number of attention heads"},
    {"--kv-channels", MODEL, INT, FIELD(kv_channels), .def = "hidden/heads",
     .help = "projection size of each attention head"},
    {"--group-query-attention", MODEL, BOOL, FIELD(group_query_attention),
     .help = "grouped-query attention with --num-query-groups key/value heads"},
    {"--num-query-groups", MODEL, INT, FIELD(num_query_groups), .def = "1 (GQA only)",
     .help = "key/value head groups; used only with --group-query-attention"},
    {"--seq-length", MODEL, INT, FIELD(seq_length), .def = "required",
     .help = "sequence length in tokens"},
    {"--max-position-embeddings", MODEL, INT, FIELD(max_position_embeddings), .def = "seq-length",
     .help = "size of the learned position table"},
    {"--position-embedding-type", MODEL, .kind = MG_FLAG_ENUM, .arg = "TYPE",
     FIELD(position_embedding), .choices = pos_choices, .later = pos_later,
     .help = "learned_absolute, rope or none"},
    {"--use-rotary-position-embeddings", MODEL, BOOL,
     .help = "Megatron's legacy spelling of --position-embedding-type rope (which it sets, "
             "whatever that flag says)"},
    {"--rotary-base", MODEL, DOUBLE, FIELD(rotary_base), .help = "RoPE base period"},
    {"--rotary-percent", MODEL, DOUBLE, FIELD(rotary_percent),
     .help = "fraction of each head RoPE rotates: its first int(kv-channels * P) channels, an "
             "even number; 0 < P <= 1"},
    {"--normalization", MODEL, .kind = MG_FLAG_ENUM, .arg = "KIND", FIELD(normalization),
     .choices = norm_choices, .help = "LayerNorm or RMSNorm"},
    {"--norm-epsilon", MODEL, DOUBLE, FIELD(norm_epsilon), .help = "epsilon of the norms"},
    {"--apply-layernorm-1p", MODEL, BOOL, FIELD(apply_layernorm_1p),
     .help = "zero-centred norm weights: w is stored (initialised to 0) and 1 + w scales "
             "(LayerNorm and RMSNorm)"},
    {"--swiglu", MODEL, BOOL, FIELD(swiglu), .help = "SwiGLU MLP instead of GeLU"},
    {"--disable-bias-linear", MODEL, BOOL, FIELD(disable_bias_linear),
     .help = "no biases in the linear layers"},
    {"--untie-embeddings-and-output-weights", MODEL, BOOL, FIELD(untie_embeddings),
     .help = "separate output layer instead of the tied word embedding"},
    {"--init-method-std", MODEL, DOUBLE, FIELD(init_method_std),
     .help = "standard deviation of the weight initialisation"},
    {"--vocab-size", MODEL, INT, FIELD(vocab_size), .def = "from tokenizer",
     .help = "vocabulary size (GPT2BPETokenizer: from the vocab file)"},
    {"--make-vocab-size-divisible-by", MODEL, INT, FIELD(make_vocab_size_divisible_by),
     .help = "pad the vocabulary to a multiple of this"},
    {"--num-experts", MOE, INT, FIELD(num_experts), .def = "dense",
     .help = "experts per MoE layer (a Mixture-of-Experts model)"},
    {"--moe-layer-freq", MOE, STRING, FIELD(moe_layer_freq), .arg = "N|PATTERN",
     .help = "MoE every N-th layer, or a 0/1 list per layer such as \"([1]*3+[0])*2\""},
    {"--moe-ffn-hidden-size", MOE, INT, FIELD(moe_ffn_hidden_size), .def = "ffn-hidden-size",
     .help = "hidden size of each expert's MLP"},
    {"--moe-router-topk", MOE, INT, FIELD(moe_router_topk), .help = "experts per token"},
    {"--moe-router-score-function", MOE, .kind = MG_FLAG_ENUM, .arg = "FN",
     FIELD(moe_router_score_function), .choices = moe_score_choices, .later = moe_score_later,
     .help = "softmax or sigmoid router scores"},
    {"--moe-router-pre-softmax", MOE, BOOL, FIELD(moe_router_pre_softmax),
     .help = "softmax over all experts before the top-k (else over the top-k logits)"},
    {"--moe-router-topk-scaling-factor", MOE, DOUBLE, FIELD(moe_router_topk_scaling_factor),
     .def = "none", .help = "multiply the routing weights by this"},
    {"--moe-router-num-groups", MOE, INT, FIELD(moe_router_num_groups), .def = "none",
     .help = "expert groups for group-limited routing"},
    {"--moe-router-group-topk", MOE, INT, FIELD(moe_router_group_topk), .def = "none",
     .help = "groups each token may route to"},
    {"--moe-router-enable-expert-bias", MOE, BOOL, FIELD(moe_router_enable_expert_bias),
     .help = "aux-loss-free balancing: a per-expert bias on the selection scores"},
    {"--moe-router-bias-update-rate", MOE, DOUBLE, FIELD(moe_router_bias_update_rate),
     .help = "step of the expert bias update per iteration"},
    {"--moe-router-load-balancing-type", MOE, .kind = MG_FLAG_ENUM, .arg = "TYPE",
     FIELD(moe_router_load_balancing_type), .choices = moe_lb_choices, .later = moe_lb_later,
     .help = "aux_loss, seq_aux_loss or none"},
    {"--moe-aux-loss-coeff", MOE, DOUBLE, FIELD(moe_aux_loss_coeff),
     .help = "weight of the load-balancing loss"},
    {"--moe-z-loss-coeff", MOE, DOUBLE, FIELD(moe_z_loss_coeff), .def = "none",
     .help = "weight of the router z-loss"},
    {"--moe-expert-capacity-factor", MOE, DOUBLE, FIELD(moe_expert_capacity_factor),
     .def = "dropless",
     .help = "expert capacity as a multiple of the balanced load; drops the rest"},
    {"--moe-token-drop-policy", MOE, .kind = MG_FLAG_ENUM, .arg = "POLICY",
     FIELD(moe_token_drop_policy), .choices = moe_drop_choices,
     .help = "over capacity, keep the highest probabilities or the earliest positions"},
    {"--moe-pad-expert-input-to-capacity", MOE, BOOL, FIELD(moe_pad_expert_input_to_capacity),
     .help = "every expert computes exactly its capacity (padding rows weigh 0)"},
    {"--moe-shared-expert-intermediate-size", MOE, INT, FIELD(moe_shared_expert_intermediate_size),
     .def = "none", .help = "hidden size of the shared experts every token passes through"},
    {"--moe-shared-expert-overlap", MOE, BOOL, FIELD(moe_shared_expert_overlap),
     .help = "under expert parallelism the shared experts' forward and backward run on the "
             "compute stream while the first token exchange's all-to-all runs (without it, "
             "after the routed experts)"},
    {"--moe-token-dispatcher-type", MOE, .kind = MG_FLAG_ENUM, .arg = "KIND",
     FIELD(moe_token_dispatcher_type), .choices = moe_dispatcher_choices,
     .help = "alltoall over the expert-parallel group; allgather and flex are accepted and run "
             "the same all-to-all dispatch (identical results)"},
    {"--moe-flex-dispatcher-backend", MOE, STRING, IGNORED, .arg = "BACKEND",
     .choices = moe_flex_backend_choices,
     .help = "the flex dispatcher's library (DeepEP, HybridEP); here the flex dispatcher is our "
             "all-to-all"},
    {"--moe-router-force-load-balancing", MOE, BOOL, FIELD(moe_router_force_load_balancing),
     .help = "benchmarks: the router's logits replaced by standard normal draws (a new draw each "
             "step, layer and microbatch; gradients pass straight through), so experts get "
             "near-equal loads"},
    {"--moe-expert-rank-capacity-factor", MOE, DOUBLE, FIELD(moe_expert_rank_capacity_factor),
     .def = "none",
     .help = "receive budget of each expert-parallel rank, as a multiple of the balanced share "
             "of routed tokens: the dispatch buffers hold that many rows; a step over it stays "
             "dropless in extra dispatch rounds (counted: moe_overflow_steps)"},
    {"--moe-received-token-capacity", MOE, DOUBLE, FIELD(moe_received_token_capacity),
     .def = "none", .help = "ECHO's name for --moe-expert-rank-capacity-factor"},
    {"--moe-enable-echo", MOE, BOOL, FIELD(moe_enable_echo),
     .help = "ECHO: clone hot experts into spare slots on other expert-parallel ranks, planned "
             "per layer and microbatch on the device; `megatron plan --moe-echo-token-counts "
             "FILE` shows the plan for given counts"},
    {"--moe-num-echo-experts", MOE, INT, FIELD(moe_num_echo_experts), .def = "num-experts",
     .help = "ECHO's spare expert slots in all (a multiple of --expert-model-parallel-size)"},
    {"--moe-echo-assignment", MOE, .kind = MG_FLAG_ENUM, .arg = "METHOD",
     FIELD(moe_echo_assignment), .choices = echo_assignment_choices,
     .help = "a megatron.c extension for exploring the ECHO planner: how spillover is assigned to "
             "spare slots; auto is Megatron's choice: approx_bin_packing with one spare slot per "
             "rank, else one_shot_greedy"},
    {"--moe-echo-threshold-multiplier", MOE, DOUBLE, FIELD(moe_echo_threshold_multiplier),
     .help = "a megatron.c extension: with one_shot_greedy, ECHO frees spare slots a rank does "
             "not need to stay under the average load x (1 + X); 0: keep every slot (Megatron's "
             "choice)"},
    {"--moe-echo-expert-dispatcher-type", MOE, STRING, IGNORED, .arg = "KIND",
     .choices = echo_dispatcher_choices,
     .help = "one dispatcher here (our all-to-all) for home and spare experts alike"},
    {"--moe-echo-expert-dispatch-overlap", MOE, BOOL, IGNORED,
     .help = "accepted with ECHO; the spare experts' dispatch is not overlapped yet"},
    {"--moe-echo-recompute-expert-dispatch", MOE, BOOL, IGNORED,
     .help =
         "accepted with ECHO; the dispatch is not recomputed on its own here (--recompute-modules "
         "moe recomputes the whole MoE layer, its dispatch included)"},
    {"--moe-use-device-initiated-grouped-gemm", MOE, BOOL, IGNORED,
     .help = "the grouped GEMM here always reads its per-expert sizes from device memory (no "
             "host synchronisation)"},
    {"--moe-paged-stash", MOE, BOOL, IGNORED,
     .help = "activations live in buffers planned before the first step (static sizes); there "
             "is no stash to page"},
    {"--moe-paged-stash-page-size", MOE, INT, IGNORED,
     .help = "no paged stash here (--moe-paged-stash)"},
    {"--moe-paged-stash-buffer-size-factor-cuda", MOE, DOUBLE, IGNORED,
     .help = "no paged stash here (--moe-paged-stash)"},
    {"--moe-paged-stash-buffer-size-factor-cpu", MOE, DOUBLE, IGNORED,
     .help = "no paged stash here (--moe-paged-stash)"},
    {"--moe-grouped-gemm", MOE, BOOL, IGNORED,
     .help = "experts always run as one grouped GEMM here"},
    {"--moe-permute-fusion", MOE, BOOL, IGNORED, .help = "permutation is always fused here"},
    {"--moe-router-fusion", MOE, BOOL, IGNORED, .help = "routing is always fused here"},
    {"--moe-router-dtype", MOE, STRING, IGNORED, .arg = "DTYPE",
     .choices = moe_router_dtype_choices, .later = moe_router_dtype_later,
     .help = "the router always computes in fp32 here"},
    {"--use-mcore-models", MODEL, BOOL, IGNORED, .help = "always Megatron-Core-style models here"},
    {"--transformer-impl", MODEL, STRING, IGNORED, .arg = "IMPL", .choices = impl_choices,
     .help = "one built-in implementation here"},
    {"--use-flash-attn", MODEL, BOOL, IGNORED, .help = "attention kernel chosen by the backend"},
    {"--attention-backend", MODEL, STRING, IGNORED, .arg = "KIND", .choices = attn_choices,
     .help = "attention kernel chosen by the backend"},
    {"--no-masked-softmax-fusion", MODEL, BOOL, IGNORED, .help = "fusions are the backend's"},
    {"--cross-entropy-loss-fusion", MODEL, BOOL, IGNORED,
     .help = "the cross-entropy is always fused here"},
    {"--no-position-embedding", MODEL, BOOL, FIELD(no_position_embedding),
     .help =
         "no learned position table (with learned_absolute: as --position-embedding-type none)"},
    {"--no-bias-gelu-fusion", MODEL, BOOL, IGNORED, .help = "fusions are the backend's"},
    {"--no-bias-swiglu-fusion", MODEL, BOOL, IGNORED, .help = "fusions are the backend's"},
    {"--no-bias-dropout-fusion", MODEL, BOOL, IGNORED, .help = "fusions are the backend's"},
    {"--no-rope-fusion", MODEL, BOOL, IGNORED, .help = "fusions are the backend's"},
    {"--attention-softmax-in-fp32", MODEL, BOOL, IGNORED, .help = "softmax is always fp32"},

    /* regularisation and optimizer */
    {"--weight-decay", OPTIM, DOUBLE, FIELD(weight_decay),
     .help = "AdamW weight decay (matrices and embeddings; not biases or norm weights)"},
    {"--start-weight-decay", OPTIM, DOUBLE, FIELD(start_weight_decay), .def = "weight-decay",
     .help = "weight decay at the start (needs --weight-decay-incr-style linear or cosine)"},
    {"--end-weight-decay", OPTIM, DOUBLE, FIELD(end_weight_decay), .def = "weight-decay",
     .help = "weight decay at the end of training (with --start-weight-decay)"},
    {"--weight-decay-incr-style", OPTIM, .kind = MG_FLAG_ENUM, .arg = "STYLE",
     FIELD(weight_decay_incr_style), .choices = wd_incr_choices,
     .help = "weight decay from start to end over training: constant, linear or cosine"},
    {"--adam-beta1", OPTIM, DOUBLE, FIELD(adam_beta1), .help = "AdamW beta1, in [0, 1)"},
    {"--adam-beta2", OPTIM, DOUBLE, FIELD(adam_beta2), .help = "AdamW beta2, in [0, 1)"},
    {"--adam-eps", OPTIM, DOUBLE, FIELD(adam_eps), .help = "AdamW epsilon"},
    {"--clip-grad", OPTIM, DOUBLE, FIELD(clip_grad), .help = "global gradient-norm clip; 0: off"},
    {"--optimizer", OPTIM, STRING, NOT_YET, .arg = "NAME", .def = "adam", .trivial = "adam",
     .why = "(AdamW only); use adam", .help = "only adam (AdamW)"},
    {"--hidden-dropout", OPTIM, DOUBLE, FIELD(hidden_dropout),
     .help = "dropout probability of each block's attention and MLP outputs before the residual "
             "add, in [0, 1); training only"},
    {"--attention-dropout", OPTIM, DOUBLE, FIELD(attention_dropout),
     .help = "dropout probability of the attention probabilities, in [0, 1); training only"},
    {"--layout-invariant-dropout", OPTIM, BOOL, FIELD(layout_invariant_dropout),
     .help = "a megatron.c extension: each dropout mask is a function of the element's place in "
             "the unsplit model and the global batch, so every parallel layout and micro-batch "
             "size trains the same model (default: Megatron's per-rank random streams)"},
    {"--use-distributed-optimizer", OPTIM, BOOL, FIELD(use_distributed_optimizer),
     .help = "ZeRO-1: each data-parallel rank keeps the Adam state of its shard of every "
             "gradient bucket (reduce-scatter, AdamW on the shard, all-gather)"},
    {"--accumulate-allreduce-grads-in-fp32", OPTIM, BOOL, IGNORED,
     .help = "gradients are always accumulated in fp32"},

    /* learning rate */
    {"--lr", LR, DOUBLE, FIELD(lr), .def = "required", .help = "peak learning rate"},
    {"--min-lr", LR, DOUBLE, FIELD(min_lr), .help = "learning rate at the end of the decay"},
    {"--lr-decay-style", LR, .kind = MG_FLAG_ENUM, .arg = "STYLE", FIELD(lr_decay_style),
     .choices = decay_choices,
     .help = "constant, linear, cosine, inverse-square-root or WSD (warmup-stable-decay)"},
    {"--lr-wsd-decay-style", LR, .kind = MG_FLAG_ENUM, .arg = "STYLE", FIELD(lr_wsd_decay_style),
     .choices = wsd_choices, .help = "WSD's anneal: exponential, linear, cosine or minus_sqrt"},
    {"--lr-wsd-decay-iters", LR, INT64, FIELD(lr_wsd_decay_iters), .def = "none",
     .help = "WSD: iterations of the anneal at the end of the decay (iteration-based)"},
    {"--lr-wsd-decay-samples", LR, INT64, FIELD(lr_wsd_decay_samples), .def = "none",
     .help = "WSD: samples of the anneal at the end of the decay (sample-based)"},
    {"--lr-warmup-iters", LR, INT64, FIELD(lr_warmup_iters),
     .help = "iterations of linear warm-up"},
    {"--lr-warmup-fraction", LR, DOUBLE, FIELD(lr_warmup_fraction), .def = "unset",
     .help = "warm-up as a fraction of the decay (iterations or samples)"},
    {"--lr-warmup-init", LR, DOUBLE, FIELD(lr_warmup_init),
     .help = "learning rate at the start of warm-up"},
    {"--lr-decay-iters", LR, INT64, FIELD(lr_decay_iters), .def = "train-iters",
     .help = "iterations over which the learning rate decays"},
    {"--lr-warmup-samples", LR, INT64, FIELD(lr_warmup_samples),
     .help = "samples of linear warm-up (with --train-samples)"},
    {"--lr-decay-samples", LR, INT64, FIELD(lr_decay_samples), .def = "train-samples",
     .help = "samples over which the learning rate decays (with --train-samples)"},
    {"--decoupled-lr", LR, DOUBLE, FIELD(decoupled_lr), .def = "none",
     .help = "peak learning rate of the word embedding and the output layer (their own schedule)"},
    {"--decoupled-min-lr", LR, DOUBLE, FIELD(decoupled_min_lr), .def = "min-lr",
     .help = "minimum learning rate of the word embedding and the output layer"},

    /* training */
    {"--micro-batch-size", TRAIN, INT, FIELD(micro_batch_size),
     .help = "sequences per forward/backward"},
    {"--global-batch-size", TRAIN, INT, FIELD(global_batch_size), .def = "micro-batch",
     .help = "sequences per optimizer step (gradient accumulation)"},
    {"--train-iters", TRAIN, INT64, FIELD(train_iters), .def = "or samples",
     .help = "optimizer steps to train (iteration-based training)"},
    {"--seed", TRAIN, INT64, FIELD(seed), .help = "random seed (initialisation and data order)"},
    {"--train-samples", TRAIN, INT64, FIELD(train_samples), .def = "or iters",
     .help = "samples to train (sample-based training: --lr-*-samples, --rampup-batch-size)"},
    {"--calculate-per-token-loss", TRAIN, BOOL, FIELD(calculate_per_token_loss),
     .help = "the loss is the sum over the global batch's unmasked tokens divided by their "
             "number (default: the mean over microbatches of each one's token mean)"},
    {"--rampup-batch-size", TRAIN, .kind = MG_FLAG_STRING_LIST, .arg = "START INCR SAMPLES",
     FIELD(rampup_batch_size), .def = "none",
     .help = "global batch from START up by INCR to --global-batch-size over SAMPLES samples "
             "(with --train-samples)"},
    {"--bf16", TRAIN, BOOL, FIELD(bf16),
     .help = "bf16 compute on GPU backends (their default here); the CPU backend trains in fp32"},
    {"--fp16", TRAIN, BOOL, FIELD(fp16),
     .help = "fp16 compute on GPU backends with dynamic loss scaling (the CPU backend computes "
             "in fp32 and runs the same loss scaler)"},
    {"--loss-scale", TRAIN, DOUBLE, FIELD(loss_scale), .def = "none",
     .help = "a constant loss scale (with --fp16, --bf16 or the distributed optimizer); none: "
             "dynamic with --fp16"},
    {"--initial-loss-scale", TRAIN, DOUBLE, FIELD(initial_loss_scale), .def = "2^32",
     .help = "first scale of dynamic loss scaling"},
    {"--min-loss-scale", TRAIN, DOUBLE, FIELD(min_loss_scale),
     .help = "floor of dynamic loss scaling"},
    {"--loss-scale-window", TRAIN, DOUBLE, FIELD(loss_scale_window),
     .help = "iterations without overflow before dynamic loss scaling doubles the scale"},
    {"--hysteresis", TRAIN, INT, FIELD(hysteresis),
     .help = "overflowing iterations before dynamic loss scaling halves the scale"},
    {"--fp8-format", TRAIN, STRING, .arg = "FORMAT", FIELD(fp8_format),
     .choices = fp8_format_choices,
     .help = "fp8 GEMMs in the transformer layers' linears: e4m3 for every tensor, or hybrid "
             "(e4m3 forward, e5m2 gradients); fp32 accumulation, fp32 master weights"},
    {"--fp8-recipe", TRAIN, STRING, .arg = "RECIPE", FIELD(fp8_recipe), .def = "delayed",
     .choices = fp8_recipe_choices,
     .help = "how each fp8 tensor is scaled: delayed (from the amax history of earlier steps) or "
             "tensorwise (from its amax now) or blockwise (each 1 x 128 block of inputs and "
             "gradients, each 128 x 128 tile of weights from its amax now; the cpu backend "
             "only, so far); mxfp8 needs Blackwell"},
    {"--fp8-margin", TRAIN, INT, FIELD(fp8_margin),
     .help = "delayed scaling: the scale is divided by 2^margin"},
    {"--moe-router-padding-for-fp8", MOE, BOOL, IGNORED,
     .help = "accepted and not needed: the routed experts' fp8 casts start each expert's rows on "
             "a 16-byte column themselves, so the token counts need no padding"},
    {"--fp8-interval", TRAIN, INT, IGNORED,
     .help = "deprecated in Megatron-LM and ignored there too: the scales update every step"},
    {"--fp8-amax-history-len", TRAIN, INT, FIELD(fp8_amax_history_len),
     .help = "delayed scaling: steps of amax each fp8 tensor remembers"},
    {"--fp8-amax-compute-algo", TRAIN, STRING, .arg = "ALGO", FIELD(fp8_amax_compute_algo),
     .def = "most_recent", .choices = fp8_algo_choices,
     .help = "delayed scaling: the amax a scale comes from, the history's latest or its maximum"},
    {"--no-fp8-wgrad", TRAIN, BOOL, FIELD(no_fp8_wgrad),
     .help = "fp8 layers: the weight gradients from the compute-dtype gradient and input (a "
             "compute-dtype GEMM) instead of their fp8 bytes; the input gradients stay fp8"},
    {"--fp8-param-gather", TRAIN, BOOL, FIELD(fp8_param_gather),
     .help = "the distributed optimizer gathers the fp8 linears' weights as fp8 bytes, cast where "
             "they are updated (half the bytes of bf16); needs --use-distributed-optimizer"},
    {"--first-last-layers-bf16", TRAIN, BOOL, FIELD(first_last_layers_bf16),
     .help = "fp8 training: the first and last layers stay in the compute dtype"},
    {"--num-layers-at-start-in-bf16", TRAIN, INT, FIELD(num_layers_at_start_in_bf16),
     .help = "with --first-last-layers-bf16: the layers at the start left in the compute dtype"},
    {"--num-layers-at-end-in-bf16", TRAIN, INT, FIELD(num_layers_at_end_in_bf16),
     .help = "with --first-last-layers-bf16: the layers at the end left in the compute dtype"},
    {"--recompute-activations", TRAIN, BOOL, FIELD(recompute_activations),
     .help = "selective recomputation (= --recompute-granularity selective)"},
    {"--recompute-granularity", TRAIN, STRING, .arg = "KIND", FIELD(recompute_granularity),
     .choices = recompute_granularity_choices,
     .help = "full: a recomputed layer keeps only its input and runs its forward again in the "
             "backward; selective: the modules of --recompute-modules"},
    {"--recompute-method", TRAIN, STRING, .arg = "METHOD", FIELD(recompute_method),
     .choices = recompute_method_choices,
     .help = "full recomputation: uniform (groups of --recompute-num-layers layers, each keeping "
             "its input) or block (the first --recompute-num-layers layers of each model chunk)"},
    {"--recompute-num-layers", TRAIN, INT, FIELD(recompute_num_layers), .def = "none",
     .help = "layers per recomputed group (uniform) or recomputed layers per model chunk (block)"},
    {"--recompute-modules", TRAIN, .kind = MG_FLAG_STRING_LIST, .arg = "M [M ...]",
     FIELD(recompute_modules),
     .help = "what selective recomputation frees and recomputes: core_attn (default), layernorm, "
             "mlp, mlp_act, moe, moe_act, shared_experts (docs/recompute.md)"},
    {"--distribute-saved-activations", TRAIN, BOOL, FIELD(distribute_saved_activations),
     .help = "full recomputation under tensor parallelism: the saved layer inputs split over the "
             "tensor-parallel ranks, gathered again for the recomputation"},
    {"--no-check-for-nan-in-loss-and-grad", TRAIN, BOOL, FIELD(no_check_for_nan_in_loss_and_grad),
     .help = "do not stop on a non-finite loss or grad norm (checked at each log, save and exit "
             "point); training goes on, as Megatron's"},
    {"--check-for-spiky-loss", TRAIN, BOOL, NOT_YET, ONLY_NAN_CHECK,
     .help = "Megatron's rerun engine's check for loss spikes"},
    {"--check-for-large-grads", TRAIN, BOOL, NOT_YET, ONLY_NAN_CHECK,
     .help = "Megatron's rerun engine's check for unexpectedly large gradients"},

    /* spellings Megatron-LM retired: its own words (arguments.py's asserts), or the flag that
     * took the name (renamed in 2022: activation checkpointing became recomputation; removed in
     * 2023: the DDP implementation choice and its contiguous-buffer switch) */
    {"--checkpoint-activations", TRAIN, BOOL, RETIRED,
     .why = "is no longer valid, use --recompute-activations, or, for more control, "
            "--recompute-granularity and --recompute-method. (Megatron-LM's words)"},
    {"--batch-size", TRAIN, INT, RETIRED,
     .why = "argument is no longer valid, use --micro-batch-size instead"},
    {"--warmup", LR, INT, RETIRED,
     .why = "argument is no longer valid, use --lr-warmup-fraction "
            "instead"},
    {"--model-parallel-size", RUNTIME, INT, RETIRED,
     .why = "is no longer valid, use --tensor-model-parallel-size instead"},
    {"--activations-checkpoint-method", TRAIN, STRING, .arg = "METHOD", RETIRED,
     .why = "is Megatron-LM's old name of --recompute-method (renamed in 2022): use "
            "--recompute-method"},
    {"--activations-checkpoint-num-layers", TRAIN, INT, RETIRED,
     .why = "is Megatron-LM's old name of --recompute-num-layers (renamed in 2022): use "
            "--recompute-num-layers"},
    {"--checkpoint-num-layers", TRAIN, INT, RETIRED,
     .why = "is Megatron-LM's oldest name of --recompute-num-layers (then "
            "--activations-checkpoint-num-layers): use --recompute-num-layers"},
    {"--distribute-checkpointed-activations", TRAIN, BOOL, RETIRED,
     .why = "is Megatron-LM's old name of --distribute-saved-activations (renamed in 2022): use "
            "--distribute-saved-activations"},
    {"--DDP-impl", RUNTIME, STRING, .arg = "IMPL", .choices = ddp_impl_choices, RETIRED,
     .why = "was removed from Megatron-LM in 2023 (torch DDP retired: its own data-parallel "
            "buffers are the only implementation, as here); drop it"},
    {"--use-contiguous-buffers-in-ddp", RUNTIME, BOOL, RETIRED,
     .why = "was removed from Megatron-LM in 2021: contiguous gradient buffers became the default "
            "(always, here); drop it"},
    {"--use-contiguous-buffers-in-local-ddp", RUNTIME, BOOL, RETIRED,
     .why = "is not a Megatron-LM flag: its contiguous gradient buffers are the default since "
            "2021 (always, here); drop it"},
    {"--no-contiguous-buffers-in-local-ddp", RUNTIME, BOOL, RETIRED,
     .why = "was removed from Megatron-LM in 2023 (gradient buffers are always contiguous, as "
            "here); drop it"},

    /* logging */
    {"--log-interval", LOGGING, INT, FIELD(log_interval), .help = "iterations between log lines"},
    {"--eval-interval", LOGGING, INT, FIELD(eval_interval),
     .help = "iterations between evaluations"},
    {"--eval-iters", LOGGING, INT, FIELD(eval_iters), .help = "iterations per evaluation; 0: none"},
    {"--exit-interval", LOGGING, INT64, FIELD(exit_interval), .def = "never",
     .help = "stop when the iteration is a multiple of this"},
    {"--exit-duration-in-mins", LOGGING, .kind = MG_FLAG_DOUBLE, .arg = "MIN",
     FIELD(exit_duration_in_mins), .def = "never",
     .help = "after this many minutes since start, save (with --save) and exit; checked every "
             "iteration on all ranks (fractions accepted)"},
    {"--exit-signal-handler", LOGGING, BOOL, FIELD(exit_signal_handler),
     .help = "on SIGTERM to any rank: every rank saves (with --save) at the next iteration and "
             "exits 0"},
    {"--metrics-file", LOGGING, STRING, FIELD(metrics_file), .arg = "PATH",
     .help = "append one JSON line of metrics per logged iteration"},
    {"--log-params-norm", LOGGING, BOOL, FIELD(log_params_norm),
     .help = "print the L2 norm of the parameters (fp32 masters) in the log line"},
    {"--log-num-zeros-in-grad", LOGGING, BOOL, FIELD(log_num_zeros_in_grad),
     .help = "print the number of zero gradient elements of the step in the log line"},
    {"--log-throughput", LOGGING, BOOL, IGNORED, .help = "throughput is always logged"},
    {"--logging-level", LOGGING, .kind = MG_FLAG_INT, FIELD(logging_level), .arg = "LEVEL",
     .def = "none",
     .help = "Python's logging level: 10 (DEBUG) or less adds the debug lines, 40 (ERROR) or more "
             "prints errors only, between: the default lines (as MG_LOG_LEVEL 2, 0, 1)"},
    {"--timing-log-level", LOGGING, .kind = MG_FLAG_INT, NOT_YET, .arg = "0|1|2", .def = "0",
     .trivial = "0", .why = "(only the iteration time is measured here, Megatron's level 0); use 0",
     .help = "timers of finer operations (levels 1 and 2)"},
    {"--timing-log-option", LOGGING, STRING, IGNORED, .arg = "OPT", .choices = timing_choices,
     .help = "how Megatron's timers combine ranks; only the iteration time (level 0) here"},
    {"--log-progress", LOGGING, BOOL, NOT_YET,
     .why = "(no progress.txt in the checkpoint directory); drop it",
     .help = "tokens and FLOPs so far, in progress.txt"},
    {"--log-memory-interval", LOGGING, INT, NOT_YET,
     .why = "(memory is logged once, after the first step; `megatron plan` predicts it); drop it",
     .help = "iterations between memory reports"},
    {"--log-device-memory-used", LOGGING, BOOL, NOT_YET,
     .why = "(nvidia-smi's reading is not logged); drop it",
     .help = "device memory used as nvidia-smi reports it"},
    {"--log-energy", LOGGING, BOOL, NOT_YET, .why = "(energy is not measured); drop it",
     .help = "energy consumed, in joules"},
    {"--log-max-attention-logit", LOGGING, BOOL, NOT_YET,
     .why = "(the attention kernels do not report their largest logit); drop it",
     .help = "the largest attention logit, to TensorBoard"},
    {"--log-straggler", LOGGING, BOOL, NOT_YET, STRAGGLER,
     .help = "per-GPU throughput of Megatron's straggler detector"},
    {"--straggler-ctrlr-port", LOGGING, INT, NOT_YET, STRAGGLER, .trivial = "65535", .def = "65535",
     .help = "see --log-straggler"},
    {"--straggler-minmax-count", LOGGING, INT, NOT_YET, STRAGGLER, .trivial = "1",
     .help = "see --log-straggler"},
    {"--disable-straggler-on-startup", LOGGING, BOOL, NOT_YET, STRAGGLER,
     .help = "see --log-straggler"},
    /* Megatron's profiling group: capture ranges and dumps of nsys and PyTorch's profiler; one
     * status for the whole family */
    {"--profile", LOGGING, BOOL, IGNORED,
     .help = "nsys's capture range (cudaProfilerStart/Stop at --profile-step-start/end)" PROFILE},
    {"--profile-step-start", LOGGING, INT, IGNORED, .help = "see --profile"},
    {"--profile-step-end", LOGGING, INT, IGNORED, .help = "see --profile"},
    {"--profile-ranks", LOGGING, .kind = MG_FLAG_STRING_LIST, IGNORED, .arg = "R [R ...]",
     .help = "see --profile"},
    {"--use-pytorch-profiler", LOGGING, BOOL, IGNORED, .help = "PyTorch's profiler" PROFILE},
    {"--pytorch-profiler-collect-shapes", LOGGING, BOOL, IGNORED,
     .help = "see --use-pytorch-profiler"},
    {"--pytorch-profiler-collect-callstack", LOGGING, BOOL, IGNORED,
     .help = "see --use-pytorch-profiler"},
    {"--pytorch-profiler-collect-chakra", LOGGING, BOOL, IGNORED,
     .help = "see --use-pytorch-profiler"},
    {"--record-shapes", LOGGING, BOOL, IGNORED, .help = "shapes in PyTorch's NVTX ranges" PROFILE},
    {"--nvtx-ranges", LOGGING, BOOL, IGNORED,
     .help = "NVTX ranges around Megatron's Python modules" PROFILE},
    {"--record-memory-history", LOGGING, BOOL, IGNORED,
     .help = "PyTorch's allocator history; memory is planned once here (`megatron plan` prints "
             "it, and the log line after the first step)"},
    {"--memory-snapshot-path", LOGGING, STRING, IGNORED, .arg = "PATH",
     .help = "see --record-memory-history"},
    {"--manual-gc", LOGGING, BOOL, IGNORED, .help = "Python's garbage collector; none here"},
    {"--manual-gc-interval", LOGGING, INT, IGNORED, .help = "see --manual-gc"},
    {"--no-manual-gc-eval", LOGGING, BOOL, IGNORED, .help = "see --manual-gc"},
    {"--disable-manual-gc-eval", LOGGING, BOOL, IGNORED, .help = "see --manual-gc"},
    {"--empty-unused-memory-level", LOGGING, INT, IGNORED,
     .help = "PyTorch's cache emptying; memory is planned once here"},
    {"--tensorboard-dir", LOGGING, STRING, FIELD(tensorboard_dir), .arg = "DIR", .def = "none",
     .help = "write Megatron's TensorBoard scalars to an event file in DIR (from the last rank)"},
    {"--tensorboard-log-interval", LOGGING, INT, FIELD(tensorboard_log_interval),
     .help = "iterations between TensorBoard scalars (each reads the loss: one host sync)"},
    {"--tensorboard-queue-size", LOGGING, INT, FIELD(tensorboard_queue_size),
     .help = "TensorBoard events buffered before a flush (also flushed at every log line)"},
    {"--log-timers-to-tensorboard", LOGGING, BOOL, FIELD(log_timers_to_tensorboard),
     .help = "write iteration-time and throughput (Megatron's timers at --timing-log-level 0)"},
    {"--no-log-loss-scale-to-tensorboard", LOGGING, BOOL, FIELD(no_log_loss_scale_to_tensorboard),
     .help = "do not write loss-scale to TensorBoard"},
    {"--disable-log-loss-scale-to-tensorboard", LOGGING, BOOL, /* Megatron's other spelling */
     ALIAS(no_log_loss_scale_to_tensorboard),
     .help = "the same as --no-log-loss-scale-to-tensorboard"},
    {"--log-validation-ppl-to-tensorboard", LOGGING, BOOL, FIELD(log_validation_ppl_to_tensorboard),
     .help = "write the validation perplexity to TensorBoard too"},
    {"--log-memory-to-tensorboard", LOGGING, BOOL, FIELD(log_memory_to_tensorboard),
     .help = "write mem-*-bytes and mem-allocated-count (the trainer's arenas) to TensorBoard"},
    {"--log-world-size-to-tensorboard", LOGGING, BOOL, FIELD(log_world_size_to_tensorboard),
     .help = "write world-size to TensorBoard"},
    {"--wandb-project", LOGGING, STRING, NOT_YET, .arg = "NAME", .trivial = "", WANDB,
     .help = "refused: Weights & Biases needs the network; use --tensorboard-dir"},
    {"--wandb-exp-name", LOGGING, STRING, NOT_YET, .arg = "NAME", .trivial = "", WANDB,
     .help = "refused, as --wandb-project"},
    {"--wandb-save-dir", LOGGING, STRING, NOT_YET, .arg = "DIR", .trivial = "", WANDB,
     .help = "refused, as --wandb-project"},
    {"--wandb-entity", LOGGING, STRING, NOT_YET, .arg = "NAME", .trivial = "", WANDB,
     .help = "refused, as --wandb-project"},

    /* checkpointing */
    {"--save", CKPT, STRING, FIELD(save), .arg = "DIR", .help = "directory to save checkpoints to"},
    {"--save-interval", CKPT, INT, FIELD(save_interval), .def = "end only",
     .help = "iterations between checkpoints"},
    {"--load", CKPT, STRING, FIELD(load), .arg = "DIR", .help = "directory to resume from"},
    {"--ckpt-format", CKPT, STRING, FIELD(ckpt_format), .arg = "FORMAT",
     .help = "torch_dist: layout-independent sharded checkpoints (here safetensors pieces with a "
             "JSON index, not PyTorch pickles); torch, zarr and fsdp_dtensor are refused"},
    {"--async-save", CKPT, BOOL, FIELD(async_save),
     .help = "write checkpoints in a background thread; training stalls only for the copy"},
    {"--no-save-optim", CKPT, BOOL, FIELD(no_save_optim),
     .help = "save checkpoints without the optimizer state"},
    {"--no-load-optim", CKPT, BOOL, FIELD(no_load_optim),
     .help = "do not load the optimizer state: Adam and the LR schedule start anew"},
    {"--finetune", CKPT, BOOL, FIELD(finetune),
     .help = "load the weights only; iteration, samples, optimizer and schedule start at 0"},
    {"--exit-on-missing-checkpoint", CKPT, BOOL, FIELD(exit_on_missing_checkpoint),
     .help = "with --load, fail when the directory holds no checkpoint"},
    {"--override-opt-param-scheduler", CKPT, BOOL, FIELD(override_opt_param_scheduler),
     .help = "on resume, the lr schedule of the command line (--lr, --min-lr, warm-up, decay, "
             "weight decay) where the checkpoint's differs"},
    {"--override-opt_param-scheduler", CKPT, BOOL, /* Megatron's other spelling */
     ALIAS(override_opt_param_scheduler), .help = "the same as --override-opt-param-scheduler"},
    {"--use-checkpoint-opt_param-scheduler", CKPT, BOOL, FIELD(use_checkpoint_opt_param_scheduler),
     .help = "on resume, the lr schedule saved in the checkpoint, whatever the command line says"},
    {"--use-checkpoint-opt-param-scheduler", CKPT, BOOL, /* Megatron's other spelling */
     ALIAS(use_checkpoint_opt_param_scheduler),
     .help = "the same as --use-checkpoint-opt_param-scheduler"},
    {"--use-checkpoint-args", CKPT, BOOL, IGNORED,
     .help = "always on here: model flags not given come from the --load checkpoint"},
    {"--no-save-rng", CKPT, BOOL, FIELD(no_save_rng),
     .help = "save checkpoints without the dropout streams' position"},
    {"--no-load-rng", CKPT, BOOL, FIELD(no_load_rng),
     .help = "do not load the dropout streams' position: a resumed run draws from fresh streams, "
             "as at the start"},

    /* data */
    {"--mock-data", DATA, BOOL, FIELD(mock_data),
     .help = "synthetic documents of counting tokens (Megatron's mock data)"},
    {"--data-path", DATA, .kind = MG_FLAG_STRING_LIST, .arg = "[W] PREFIX ...", FIELD(data_path),
     .def = "none",
     .help = "indexed dataset prefix, or a blend: weight prefix pairs (0.3 A 0.7 B) or prefixes"},
    {"--dataloader-type", DATA, .kind = MG_FLAG_ENUM, .arg = "TYPE", FIELD(dataloader_type),
     .choices = loader_choices, .later = loader_later,
     .help = "sample order: single (one pass in order) or cyclic (Megatron's random sampler: a "
             "torch.randperm per epoch, repeated; external not yet)"},
    {"--no-data-sharding", DATA, BOOL, FIELD(no_data_sharding),
     .help = "cyclic: one permutation of the split for all data-parallel ranks, not one bucket "
             "per rank"},
    {"--num-workers", DATA, INT, IGNORED,
     .help = "PyTorch's data loader processes; samples are read in process here"},
    {"--no-mmap-bin-files", DATA, BOOL, IGNORED, .help = "the .bin files are always mapped"},
    {"--no-create-attention-mask-in-dataloader", DATA, BOOL, IGNORED,
     .help = "no attention mask is materialised here (the causal mask is implicit)"},
    {"--tiktoken-pattern", DATA, STRING, IGNORED, .arg = "V", .choices = tiktoken_choices,
     .help = "read by TikTokenizer only (not implemented here)"},
    {"--split", DATA, STRING, .arg = "A,B,C", FIELD(split),
     .help = "train,valid,test proportions of the documents"},
    {"--eod-mask-loss", DATA, BOOL, FIELD(eod_mask_loss),
     .help = "no loss at positions whose input is the end-of-document token (the tokenizer's; "
             "--mock-data: vocab-size - 1)"},
    {"--reset-position-ids", DATA, BOOL, FIELD(reset_position_ids),
     .help = "positions restart at 0 after every end-of-document token (packed documents)"},
    {"--reset-attention-mask", DATA, BOOL, FIELD(reset_attention_mask),
     .help = "tokens after an end-of-document token attend only to their own document"},
    {"--data-cache-path", DATA, STRING, .arg = "DIR", FIELD(data_cache_path), .def = "PREFIX/cache",
     .help = "directory for the cached dataset indices (.npy)"},
    {"--tokenizer-type", DATA, STRING, .arg = "TYPE", FIELD(tokenizer_type),
     .choices = mg_tokenizer_type_choices, .later = tokenizer_later,
     .help = "GPT2BPETokenizer (with --vocab-file, --merge-file), HuggingFaceTokenizer, "
             "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer (with "
             "--tokenizer-model) or NullTokenizer (with --vocab-size)"},
    {"--vocab-file", DATA, STRING, .arg = "PATH", FIELD(vocab_file),
     .help = "GPT-2 vocab.json (GPT2BPETokenizer)"},
    {"--merge-file", DATA, STRING, .arg = "PATH", FIELD(merge_file),
     .help = "GPT-2 merges.txt (GPT2BPETokenizer)"},
    {"--tokenizer-model", DATA, STRING, .arg = "PATH", FIELD(tokenizer_model),
     .help = "tokenizer.json or its directory (HuggingFaceTokenizer), or a SentencePiece .model "
             "(SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)"},

    /* runtime */
    {"--cuda-graph-impl", GRAPHS, .kind = MG_FLAG_ENUM, .arg = "IMPL", FIELD(cuda_graph_impl),
     .choices = graph_impl_choices,
     .help = "none; full_iteration: each training step's forward, backward and optimizer captured "
             "once (after the warm-up steps) and replayed as one graph; local and "
             "transformer_engine (the same here): a graph per layer part and microbatch"},
    {"--cuda-graph-modules", GRAPHS, .kind = MG_FLAG_STRING_LIST, .arg = "SCOPE [SCOPE ...]",
     FIELD(cuda_graph_modules),
     .help = "what per-layer graphs hold: attn, mlp, moe, moe_router, moe_preprocess (none: attn, "
             "mlp and moe) or full_iteration (with local: the whole step)"},
    {"--cuda-graph-scope", GRAPHS, .kind = MG_FLAG_STRING_LIST, .arg = "SCOPE [SCOPE ...]",
     FIELD(cuda_graph_scope), .help = "the older spelling of --cuda-graph-modules"},
    {"--cuda-graph-warmup-steps", GRAPHS, INT, FIELD(cuda_graph_warmup_steps),
     .help = "eager training steps before the capture (at least 1: the first builds the GEMM "
             "and attention plans and sizes the workspace)"},
    {"--enable-cuda-graph", GRAPHS, BOOL, FIELD(enable_cuda_graph),
     .help = "deprecated: --cuda-graph-impl local"},
    {"--external-cuda-graph", GRAPHS, BOOL, FIELD(external_cuda_graph),
     .help = "deprecated: --cuda-graph-impl transformer_engine"},
    {"--optimizer-cuda-graph", GRAPHS, BOOL, FIELD(optimizer_cuda_graph),
     .help = "graph the optimizer step: full_iteration always holds it (clipping, AdamW, the "
             "parameter all-gather)"},
    {"--device", RUNTIME, STRING, FIELD(device), .arg = "DEV", .choices = device_choices,
     .help = "auto (cuda if built with it and a GPU is present, else cpu), cpu or cuda "
             "(bf16, GPU = local rank)"},
    {"--num-threads", RUNTIME, INT, FIELD(num_threads), .def = "OpenMP",
     .help = "CPU threads; default: OpenMP's (OMP_NUM_THREADS)"},
    {"--distributed-timeout-minutes", RUNTIME, .kind = MG_FLAG_DOUBLE,
     FIELD(distributed_timeout_minutes), .arg = "MIN",
     .help = "bound on every collective and the rendezvous; then all ranks exit"},
    {"--tensor-model-parallel-size", RUNTIME, INT, FIELD(tensor_model_parallel_size),
     .help = "tensor-parallel ranks: each layer's heads, MLP and vocabulary split over them "
             "(must divide the world size, the heads and the query groups)"},
    {"--pipeline-model-parallel-size", RUNTIME, INT, FIELD(pipeline_model_parallel_size),
     .help = "pipeline stages"},
    {"--virtual-pipeline-model-parallel-size", RUNTIME, INT,
     FIELD(virtual_pipeline_model_parallel_size), .def = "none",
     .help = "model chunks per pipeline stage (interleaved 1F1B)"},
    {"--num-layers-per-virtual-pipeline-stage", RUNTIME, INT,
     FIELD(num_layers_per_virtual_pipeline_stage), .def = "none",
     .help = "layers per model chunk (sets the virtual pipeline size)"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", RUNTIME, INT,
     FIELD(microbatch_group_size_per_vp_stage), .def = "PP",
     .help = "microbatches run on one chunk before moving to the next"},
    {"--decoder-first-pipeline-num-layers", RUNTIME, INT, FIELD(decoder_first_pipeline_num_layers),
     .def = "even", .help = "layers on the first pipeline stage"},
    {"--decoder-last-pipeline-num-layers", RUNTIME, INT, FIELD(decoder_last_pipeline_num_layers),
     .def = "even", .help = "layers on the last pipeline stage"},
    {"--account-for-embedding-in-pipeline-split", RUNTIME, BOOL,
     FIELD(account_for_embedding_in_pipeline_split),
     .help = "count the embedding as a layer when splitting layers over stages"},
    {"--account-for-loss-in-pipeline-split", RUNTIME, BOOL,
     FIELD(account_for_loss_in_pipeline_split),
     .help = "count the loss as a layer when splitting layers over stages"},
    {"--pipeline-model-parallel-layout", RUNTIME, STRING, .arg = "LAYOUT",
     FIELD(pipeline_model_parallel_layout),
     .help = "every virtual pipeline stage's layers, Megatron's string: stages split by |, "
             "E the embedding, t a transformer layer, L the loss, x*n and (...)*n repeat, e.g. "
             "\"Et*13|t*11|t*13|t*11L\" (the number of stages / PP gives the virtual stages)"},
    {"--no-overlap-p2p-communication", RUNTIME, BOOL, FIELD(no_overlap_p2p_communication),
     .help = "pipeline sends and receives do not overlap compute: each is a rendezvous in the "
             "schedule's order"},
    {"--overlap-p2p-communication", RUNTIME, BOOL, IGNORED,
     .help = "accepted; overlapping is already the default (Megatron has only the --no- form): "
             "receives posted an op ahead and sends as soon as made on MPI groups; on NCCL an "
             "interleaved schedule's messages on a stream of their own, 1F1B's in the "
             "schedule's order"},
    {"--context-parallel-size", RUNTIME, INT, FIELD(context_parallel_size), PARTIAL_1,
     .why = "(no context parallelism in training yet)",
     .help = "context-parallel ranks; `megatron train` runs only 1 (no context parallelism yet), "
             "`megatron plan` shows any layout"},
    {"--expert-model-parallel-size", MOE, INT, FIELD(expert_model_parallel_size),
     .help = "expert-parallel ranks"},
    {"--expert-tensor-parallel-size", MOE, INT, FIELD(expert_tensor_parallel_size), .def = "TP",
     PARTIAL_1, .why = "(experts are whole on each rank)",
     .help = "tensor-parallel ranks inside each expert; `megatron train` runs only 1 (experts are "
             "whole on each rank, and MoE models take no tensor parallelism yet), `megatron plan` "
             "shows any layout"},
    {"--use-tp-pp-dp-mapping", RUNTIME, BOOL, FIELD(use_tp_pp_dp_mapping),
     .help = "rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp"},
    {"--parallel-order", RUNTIME, STRING, FIELD(parallel_order), .arg = "ORDER",
     .def = "tp-cp-ep-dp-pp",
     .help = "rank order of the parallel dimensions, fastest first (ours)"},
    {"--sequence-parallel", RUNTIME, BOOL, FIELD(sequence_parallel),
     .help = "split norms and the residual stream along the sequence over the tensor-parallel "
             "ranks (all-gather / reduce-scatter instead of all-reduce); off when TP = 1"},
    {"--tp-comm-overlap", RUNTIME, BOOL, FIELD(tp_comm_overlap),
     .help = "more tensor-parallel collectives on a stream of their own beside GEMMs, no "
             "userbuffers needed (the input gradient's reduction beside the weight gradient, "
             "Megatron's bulk wgrad, is on without it): the attention projection's and fc2's "
             "products in 4 chunks, "
             "each reduced (reduce-scatter under SP, else all-reduce) while the next computes; "
             "under --sequence-parallel each all-gather beside the GEMM of this rank's own rows "
             "(the norms' outputs before QKV and fc1, the output gradient before the attention "
             "projection's and fc2's input gradient)"},
    {"--no-tp-comm-bulk-wgrad", RUNTIME, BOOL, FIELD(no_tp_comm_bulk_wgrad),
     .help = "QKV's and fc1's input-gradient reduction waits for their weight gradient, in the "
             "compute stream (by default under TP it runs on a stream of its own beside that "
             "GEMM, with or without --tp-comm-overlap)"},
    {"--disable-tp-comm-bulk-wgrad", RUNTIME, BOOL, ALIAS(no_tp_comm_bulk_wgrad),
     .help = "as --no-tp-comm-bulk-wgrad"},
    {"--no-tp-comm-bulk-dgrad", RUNTIME, BOOL, IGNORED,
     .help = "no effect: the column-parallel backward reads the input its forward gathered, so "
             "there is no gather to hide behind the input gradient"},
    {"--disable-tp-comm-bulk-dgrad", RUNTIME, BOOL, IGNORED,
     .help = "as --no-tp-comm-bulk-dgrad: no effect"},
    {"--no-tp-comm-split-ag", RUNTIME, BOOL, IGNORED,
     .help = "no effect: the overlap here is always the split form (chunks of rows beside a "
             "GEMM); Megatron's ring exchange needs userbuffers"},
    {"--disable-tp-comm-split-ag", RUNTIME, BOOL, IGNORED, .help = "as --no-tp-comm-split-ag"},
    {"--no-tp-comm-split-rs", RUNTIME, BOOL, IGNORED,
     .help = "no effect: the overlap here is always the split form (chunks of rows beside a "
             "GEMM); Megatron's ring exchange needs userbuffers"},
    {"--disable-tp-comm-split-rs", RUNTIME, BOOL, IGNORED, .help = "as --no-tp-comm-split-rs"},
    {"--tp-comm-overlap-rs-dgrad", RUNTIME, BOOL, IGNORED,
     .help = "accepted: the input gradient's reduction already runs beside the weight gradient "
             "(the bulk wgrad overlap, on under TP)"},
    {"--tp-comm-overlap-cfg", RUNTIME, STRING, IGNORED, .arg = "FILE",
     .help = "Transformer Engine's userbuffers configuration: no userbuffers here, the overlap "
             "needs none"},
    {"--tp-comm-bootstrap-backend", RUNTIME, STRING, IGNORED, .arg = "BACKEND",
     .help = "userbuffers' bootstrap: no userbuffers here; the tensor-parallel collectives use "
             "the run's communicator (NCCL or MPI)"},
    {"--no-tp-comm-overlap-rs", RUNTIME, BOOL, FIELD(no_tp_comm_overlap_rs),
     .help = "with --tp-comm-overlap: the attention projection's and fc2's products are reduced "
             "whole after their GEMM, not in chunks beside the next chunk's GEMM"},
    {"--no-tp-comm-overlap-ag", RUNTIME, BOOL, FIELD(no_tp_comm_overlap_ag),
     .help = "with --tp-comm-overlap: sequence parallelism's all-gathers complete before the "
             "GEMMs that read them start (no overlap with this rank's rows)"},
    {"--disable-tp-comm-overlap-rs", RUNTIME, BOOL, ALIAS(no_tp_comm_overlap_rs),
     .help = "as --no-tp-comm-overlap-rs"},
    {"--disable-tp-comm-overlap-ag", RUNTIME, BOOL, ALIAS(no_tp_comm_overlap_ag),
     .help = "as --no-tp-comm-overlap-ag"},
    {"--overlap-grad-reduce", RUNTIME, BOOL, FIELD(overlap_grad_reduce),
     .help = "reduce each gradient bucket (--ddp-bucket-size) as soon as backward completes it, "
             "on the communication stream"},
    {"--ddp-bucket-size", RUNTIME, INT64, FIELD(ddp_bucket_size), .def = "max(40M, 1M x DP)",
     .help = "elements per gradient bucket with --overlap-grad-reduce (ignored without it)"},
    {"--ddp-pad-buckets-for-high-nccl-busbw", RUNTIME, BOOL,
     FIELD(ddp_pad_buckets_for_high_nccl_busbw),
     .help = "pad distributed-optimizer buckets to a multiple of 2^16 elements as well"},
    {"--overlap-param-gather", RUNTIME, BOOL, FIELD(overlap_param_gather),
     .help = "gather each bucket's updated parameters during the next forward, just before the "
             "first layer that needs them (with --use-distributed-optimizer "
             "--overlap-grad-reduce)"},
    {"--distributed-backend", RUNTIME, STRING, IGNORED, .arg = "NAME", .choices = dist_choices,
     .help = "communication is NCCL + MPI here"},
    {"--no-async-tensor-model-parallel-allreduce", RUNTIME, BOOL, IGNORED,
     .help = "overlap is the backend's choice"},
    {"--use-contiguous-parameters-in-local-ddp", RUNTIME, BOOL, IGNORED,
     .help = "parameters and gradients always live in contiguous buffers here"},
    {"--grad-reduce-in-bf16", RUNTIME, BOOL, FIELD(grad_reduce_in_bf16),
     .help = "reduce the data-parallel gradients in bf16 (half the bytes); they still accumulate "
             "in fp32 across microbatches"},
    {"--no-gradient-accumulation-fusion", RUNTIME, BOOL, IGNORED,
     .help = "gradient accumulation is the backend's"},
};

_Static_assert(sizeof mg_flag_table / sizeof mg_flag_table[0] <= MG_FLAG_MAX, "raise MG_FLAG_MAX");
const int mg_flag_count = (int)(sizeof mg_flag_table / sizeof mg_flag_table[0]);

int mg_flag_find(const char *name) {
    for (int i = 0; i < mg_flag_count; i++)
        if (!strcmp(mg_flag_table[i].name, name)) return i;
    return -1;
}
