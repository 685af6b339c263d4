/* megatron.c public API: status codes, the run configuration (one field per Megatron flag) and
 * the entry points the command-line front end calls. Everything else is internal. */
#ifndef MEGATRON_H
#define MEGATRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every library function returns one of these; only main() turns it into an exit code. */
typedef enum {
    MG_OK = 0,
    MG_ERR_USAGE,       /* bad flag, bad value, invalid combination: exit code 2 */
    MG_ERR_IO,          /* a file could not be read or written */
    MG_ERR_FORMAT,      /* a file exists but its contents are wrong */
    MG_ERR_NOMEM,       /* an allocation failed */
    MG_ERR_UNSUPPORTED, /* valid request this build or backend cannot do */
    MG_ERR_NUMERIC,     /* NaN/Inf where a finite value is required */
    MG_ERR_INTERNAL,    /* an invariant broke: a bug */
    MG_ERR_COMM,        /* a collective failed or timed out, or a peer rank failed */
} mg_status;

typedef enum { MG_NORM_LAYERNORM = 0, MG_NORM_RMSNORM } mg_norm_kind;
typedef enum { MG_POS_LEARNED = 0, MG_POS_ROPE, MG_POS_NONE } mg_pos_kind;
typedef enum {
    MG_LR_CONSTANT = 0,
    MG_LR_LINEAR,
    MG_LR_COSINE,
    MG_LR_INVERSE_SQRT, /* inverse-square-root */
    MG_LR_WSD           /* warmup-stable-decay */
} mg_lr_style;
typedef enum {
    MG_WSD_EXPONENTIAL = 0,
    MG_WSD_LINEAR,
    MG_WSD_COSINE,
    MG_WSD_MINUS_SQRT
} mg_wsd_style;
typedef enum { MG_WD_CONSTANT = 0, MG_WD_LINEAR, MG_WD_COSINE } mg_wd_style;
typedef enum { MG_LOADER_SINGLE = 0, MG_LOADER_CYCLIC } mg_dataloader_type;
typedef enum { MG_MOE_SCORE_SOFTMAX = 0, MG_MOE_SCORE_SIGMOID } mg_moe_score;
typedef enum { MG_MOE_LB_AUX = 0, MG_MOE_LB_SEQ_AUX, MG_MOE_LB_NONE } mg_moe_balancing;
typedef enum { MG_MOE_DROP_PROBS = 0, MG_MOE_DROP_POSITION } mg_moe_drop;
typedef enum {
    MG_MOE_DISPATCH_ALLGATHER = 0,
    MG_MOE_DISPATCH_ALLTOALL,
    MG_MOE_DISPATCH_FLEX
} mg_moe_dispatcher;
/* --cuda-graph-impl: none, per-layer graphs (local and transformer_engine: the same ones here),
 * or the whole iteration in one graph */
typedef enum {
    MG_GRAPH_NONE = 0,
    MG_GRAPH_LOCAL,
    MG_GRAPH_TRANSFORMER_ENGINE,
    MG_GRAPH_FULL_ITERATION
} mg_cuda_graph_impl;

/* The whole run configuration. Field names follow Megatron's flags (dashes become underscores).
 * Integers that Megatron treats as "None when absent" use -1 (or 0 where noted). */
typedef struct {
    /* model */
    int num_layers;              /* --num-layers */
    int hidden_size;             /* --hidden-size */
    int ffn_hidden_size;         /* --ffn-hidden-size, -1: 4*hidden (swiglu: Megatron's 8/3 rule) */
    int num_attention_heads;     /* --num-attention-heads */
    int kv_channels;             /* --kv-channels, -1: hidden/heads */
    bool group_query_attention;  /* --group-query-attention */
    int num_query_groups;        /* --num-query-groups, -1: = heads */
    int seq_length;              /* --seq-length */
    int max_position_embeddings; /* --max-position-embeddings, -1: = seq-length */
    mg_pos_kind position_embedding;   /* --position-embedding-type learned_absolute|rope|none */
    bool no_position_embedding;       /* --no-position-embedding: learned_absolute becomes none */
    double rotary_base;               /* --rotary-base (10000) */
    double rotary_percent;            /* --rotary-percent (1.0): RoPE rotates int(kv * this) */
    mg_norm_kind normalization;       /* --normalization LayerNorm|RMSNorm */
    double norm_epsilon;              /* --norm-epsilon (1e-5) */
    bool apply_layernorm_1p;          /* --apply-layernorm-1p: norm weights w stored, 1 + w used */
    bool swiglu;                      /* --swiglu */
    bool disable_bias_linear;         /* --disable-bias-linear */
    bool untie_embeddings;            /* --untie-embeddings-and-output-weights */
    double init_method_std;           /* --init-method-std (0.02) */
    int vocab_size;                   /* --vocab-size, -1: from the tokenizer */
    int make_vocab_size_divisible_by; /* --make-vocab-size-divisible-by (128) */

    /* mixture of experts (src/model/moe.h); Megatron's defaults */
    int num_experts;          /* --num-experts, 0: a dense model (Megatron's None) */
    char moe_layer_freq[256]; /* --moe-layer-freq: N (every N-th layer from 0) or a list
                                 expression "([1]*3+[0])*2" (1) */
    int moe_ffn_hidden_size;  /* --moe-ffn-hidden-size, -1: = ffn-hidden-size */
    int moe_router_topk;      /* --moe-router-topk (2) */
    mg_moe_score moe_router_score_function;          /* --moe-router-score-function (softmax) */
    bool moe_router_pre_softmax;                     /* --moe-router-pre-softmax */
    double moe_router_topk_scaling_factor;           /* --moe-router-topk-scaling-factor, 0: none */
    int moe_router_num_groups;                       /* --moe-router-num-groups, 0: none */
    int moe_router_group_topk;                       /* --moe-router-group-topk, 0: none */
    bool moe_router_enable_expert_bias;              /* --moe-router-enable-expert-bias */
    double moe_router_bias_update_rate;              /* --moe-router-bias-update-rate (1e-3) */
    mg_moe_balancing moe_router_load_balancing_type; /* --moe-router-load-balancing-type */
    double moe_aux_loss_coeff;                       /* --moe-aux-loss-coeff (0) */
    double moe_z_loss_coeff;                         /* --moe-z-loss-coeff, 0: none */
    double moe_expert_capacity_factor;           /* --moe-expert-capacity-factor, -1: dropless */
    mg_moe_drop moe_token_drop_policy;           /* --moe-token-drop-policy (probs) */
    bool moe_pad_expert_input_to_capacity;       /* --moe-pad-expert-input-to-capacity */
    int moe_shared_expert_intermediate_size;     /* --moe-shared-expert-intermediate-size, 0 */
    bool moe_shared_expert_overlap;              /* --moe-shared-expert-overlap */
    mg_moe_dispatcher moe_token_dispatcher_type; /* --moe-token-dispatcher-type (allgather) */
    bool moe_router_force_load_balancing;        /* --moe-router-force-load-balancing: random
                                                    router logits (benchmarks; model/moe.c) */
    /* the expert-parallel receive budget and ECHO's spare expert slots (core/echo_plan.h,
     * model/moe.c) */
    double moe_expert_rank_capacity_factor; /* --moe-expert-rank-capacity-factor, -1: none */
    double moe_received_token_capacity;     /* --moe-received-token-capacity (ECHO's name for
                                               the same budget), -1: none */
    bool moe_enable_echo;                   /* --moe-enable-echo */
    int moe_num_echo_experts;               /* --moe-num-echo-experts, -1: = --num-experts */
    int moe_echo_assignment;                /* --moe-echo-assignment (our extension): 0 auto
                                               (Megatron's rule), 1 one-shot greedy, 2
                                               approximate bin packing */
    double moe_echo_threshold_multiplier;   /* --moe-echo-threshold-multiplier (ours; 0) */

    /* fp8 training (config/config_fp8.c, model/fp8.h) */
    char fp8_format[16];            /* --fp8-format e4m3|hybrid, "": bf16 (Megatron's dest fp8) */
    char fp8_recipe[16];            /* --fp8-recipe ("delayed") */
    int fp8_margin;                 /* --fp8-margin (0) */
    int fp8_amax_history_len;       /* --fp8-amax-history-len (1) */
    char fp8_amax_compute_algo[16]; /* --fp8-amax-compute-algo ("most_recent") */
    bool fp8_param_gather;          /* --fp8-param-gather (accepted: docs/flags.md) */
    bool no_fp8_wgrad; /* --no-fp8-wgrad: weight gradients of fp8 layers in the compute dtype */
    bool first_last_layers_bf16;     /* --first-last-layers-bf16 */
    int num_layers_at_start_in_bf16; /* --num-layers-at-start-in-bf16 (1) */
    int num_layers_at_end_in_bf16;   /* --num-layers-at-end-in-bf16 (1) */

    /* activation recomputation (config/config_recompute.c, model/gpt.h) */
    bool recompute_activations;        /* --recompute-activations: = --recompute-granularity
                                          selective */
    char recompute_granularity[16];    /* --recompute-granularity full|selective, "": none */
    char recompute_method[16];         /* --recompute-method uniform|block, "": none */
    int recompute_num_layers;          /* --recompute-num-layers, -1: none */
    char recompute_modules[128];       /* --recompute-modules, space-separated, "": core_attn */
    bool distribute_saved_activations; /* --distribute-saved-activations */

    /* training */
    int micro_batch_size;          /* --micro-batch-size (1) */
    int global_batch_size;         /* --global-batch-size, -1: = micro-batch-size * data-parallel */
    int64_t train_iters;           /* --train-iters */
    double lr;                     /* --lr */
    double min_lr;                 /* --min-lr (0) */
    mg_lr_style lr_decay_style;    /* --lr-decay-style (linear) */
    int64_t lr_warmup_iters;       /* --lr-warmup-iters (0) */
    double lr_warmup_fraction;     /* --lr-warmup-fraction, -1: unset */
    double lr_warmup_init;         /* --lr-warmup-init (0) */
    int64_t lr_decay_iters;        /* --lr-decay-iters, -1: = train-iters */
    double weight_decay;           /* --weight-decay (0.01) */
    double adam_beta1;             /* --adam-beta1 (0.9) */
    double adam_beta2;             /* --adam-beta2 (0.999) */
    double adam_eps;               /* --adam-eps (1e-8) */
    double clip_grad;              /* --clip-grad (1.0; 0 disables) */
    double attention_dropout;      /* --attention-dropout (0.1): on the attention probabilities */
    double hidden_dropout;         /* --hidden-dropout (0.1): on each block's attention and MLP
                                      outputs before the residual add (core/dropout.h) */
    bool layout_invariant_dropout; /* --layout-invariant-dropout (a megatron.c extension):
                                      positional masks, the same under every parallel layout,
                                      instead of Megatron's random streams (core/dropout.h) */
    int64_t seed;                  /* --seed (1234) */
    bool calculate_per_token_loss; /* --calculate-per-token-loss: the loss is the global batch's
                                      sum over its unmasked tokens / their number
                                      (train/trainer_loss.h), not a mean of microbatch means */

    /* mixed precision and loss scaling (train/grad_scaler.h) */
    bool fp16;                 /* --fp16: fp16 compute on GPU backends, dynamic loss scaling */
    bool bf16;                 /* --bf16: bf16 compute on GPU backends (their default here) */
    double loss_scale;         /* --loss-scale, 0: none (Megatron's None: dynamic with --fp16) */
    double initial_loss_scale; /* --initial-loss-scale (2^32) */
    double min_loss_scale;     /* --min-loss-scale (1) */
    double loss_scale_window;  /* --loss-scale-window (1000): clean iterations before growing */
    int hysteresis;            /* --hysteresis (2): overflows before the scale backs off */

    /* sample-based training, the schedules (train/lr_schedule.h, train/batch_schedule.h) and the
     * run's exits (train/run_control.h) */
    int64_t train_samples;               /* --train-samples, -1: iteration-based (--train-iters) */
    char rampup_batch_size[64];          /* --rampup-batch-size START INCR SAMPLES (joined), "" */
    int64_t lr_warmup_samples;           /* --lr-warmup-samples (0) */
    int64_t lr_decay_samples;            /* --lr-decay-samples, -1: = train-samples */
    mg_wsd_style lr_wsd_decay_style;     /* --lr-wsd-decay-style (exponential) */
    int64_t lr_wsd_decay_iters;          /* --lr-wsd-decay-iters, -1: none */
    int64_t lr_wsd_decay_samples;        /* --lr-wsd-decay-samples, -1: none */
    double decoupled_lr;                 /* --decoupled-lr, -1: none (embedding, output layer) */
    double decoupled_min_lr;             /* --decoupled-min-lr, -1: = min-lr */
    double start_weight_decay;           /* --start-weight-decay, -1: = weight-decay (constant) */
    double end_weight_decay;             /* --end-weight-decay, -1: = weight-decay (constant) */
    mg_wd_style weight_decay_incr_style; /* --weight-decay-incr-style (constant) */
    double exit_duration_in_mins;        /* --exit-duration-in-mins, 0: never */
    bool exit_signal_handler;            /* --exit-signal-handler: SIGTERM saves and exits */

    /* logging and evaluation */
    int log_interval;           /* --log-interval (100) */
    int eval_interval;          /* --eval-interval (1000) */
    int eval_iters;             /* --eval-iters (100) */
    int64_t exit_interval;      /* --exit-interval, -1: never */
    char metrics_file[1024];    /* --metrics-file, "": none */
    bool log_params_norm;       /* --log-params-norm: "params norm" in the log line */
    bool log_num_zeros_in_grad; /* --log-num-zeros-in-grad: "num zeros" in the log line */
    int logging_level;          /* --logging-level (Python's: 10 DEBUG ... 50), -1: not given */
    bool
        no_check_for_nan_in_loss_and_grad; /* --no-check-for-nan-in-loss-and-grad: a
                                              non-finite loss or grad norm does not stop training */

    /* TensorBoard (train/tensorboard_log.h) */
    char tensorboard_dir[1024];             /* --tensorboard-dir, "": none */
    int tensorboard_log_interval;           /* --tensorboard-log-interval (1) */
    int tensorboard_queue_size;             /* --tensorboard-queue-size (1000) */
    bool log_timers_to_tensorboard;         /* --log-timers-to-tensorboard */
    bool no_log_loss_scale_to_tensorboard;  /* --no-log-loss-scale-to-tensorboard */
    bool log_validation_ppl_to_tensorboard; /* --log-validation-ppl-to-tensorboard */
    bool log_memory_to_tensorboard;         /* --log-memory-to-tensorboard */
    bool log_world_size_to_tensorboard;     /* --log-world-size-to-tensorboard */

    /* checkpointing */
    char save[1024];      /* --save, "": none */
    int save_interval;    /* --save-interval, -1: only at the end when --save is set */
    char load[1024];      /* --load, "": none */
    char ckpt_format[32]; /* --ckpt-format ("torch_dist": ours, train/checkpoint.h) */
    bool async_save;      /* --async-save: files written in the background */
    bool no_save_optim;   /* --no-save-optim: checkpoints without the Adam moments */
    bool no_load_optim;   /* --no-load-optim: moments, Adam's step and the LR schedule start anew */
    bool finetune;        /* --finetune: the weights alone; iteration and samples from 0 */
    bool no_save_rng;     /* --no-save-rng: checkpoints without the dropout streams' position */
    bool no_load_rng;     /* --no-load-rng: the dropout streams start fresh on resume */
    bool exit_on_missing_checkpoint;   /* --exit-on-missing-checkpoint: no checkpoint is an error */
    bool override_opt_param_scheduler; /* --override-opt-param-scheduler: on resume the
                                          command line's lr schedule (train/lr_schedule.h) */
    bool use_checkpoint_opt_param_scheduler; /* --use-checkpoint-opt_param-scheduler: the
                                                checkpoint's */

    /* data */
    bool mock_data;             /* --mock-data */
    char data_path[4096];       /* --data-path PREFIX | W1 P1 W2 P2 ... (space-joined), "": none */
    char split[64];             /* --split ("969, 30, 1", Megatron's legacy default) */
    bool eod_mask_loss;         /* --eod-mask-loss: no loss where the input is the tokenizer's
                                   end-of-document token */
    bool reset_position_ids;    /* --reset-position-ids: positions restart at 0 after every
                                   end-of-document token (train/trainer_docs.h) */
    bool reset_attention_mask;  /* --reset-attention-mask: no attention across an
                                   end-of-document token (block-diagonal causal mask) */
    char data_cache_path[1024]; /* --data-cache-path, "": <prefix>/cache/GPTDataset_indices */
    char tokenizer_type[64];    /* --tokenizer-type (src/data/tokenizer.h) or NullTokenizer, "" */
    char vocab_file[1024];      /* --vocab-file (GPT-2 vocab.json), "": none */
    char merge_file[1024];      /* --merge-file (GPT-2 merges.txt), "": none */
    char tokenizer_model[1024]; /* --tokenizer-model (tokenizer.json or its directory, or a
                                   SentencePiece .model), "": none */
    mg_dataloader_type dataloader_type; /* --dataloader-type single (Megatron's default) or
                                           cyclic (data/cyclic_sampler.h) */
    bool no_data_sharding;              /* --no-data-sharding: cyclic draws one permutation of
                                           the split for all data-parallel ranks */

    /* runtime */
    char device[16];                    /* --device auto, cpu or cuda; the trainer resolves auto */
    int num_threads;                    /* --num-threads, -1: OpenMP default */
    double distributed_timeout_minutes; /* --distributed-timeout-minutes (10) */
    int world_size; /* not a flag: the launch's ranks (mpirun, srun, torchrun variables), set by
                       the front end before validation; 1 by default */

    /* parallel layout (src/parallel/parallel_state.h, src/parallel/pipeline/schedule.h) */
    int tensor_model_parallel_size;   /* --tensor-model-parallel-size (1) */
    bool sequence_parallel;           /* --sequence-parallel (off with TP = 1) */
    bool no_tp_comm_bulk_wgrad;       /* --no-tp-comm-bulk-wgrad: with --tp-comm-overlap, the
                                         input gradient's reduction after both gradients */
    bool tp_comm_overlap;             /* --tp-comm-overlap: SP's all-gathers beside the GEMMs of
                                         this rank's own rows */
    bool no_tp_comm_overlap_ag;       /* --no-tp-comm-overlap-ag: not those all-gathers */
    bool no_tp_comm_overlap_rs;       /* --no-tp-comm-overlap-rs: each row-parallel product reduced
                                         whole, after its GEMM */
    int pipeline_model_parallel_size; /* --pipeline-model-parallel-size (1) */
    int virtual_pipeline_model_parallel_size; /* --virtual-pipeline-model-parallel-size, -1: none */
    int num_layers_per_virtual_pipeline_stage; /* --num-layers-per-virtual-pipeline-stage, -1 */
    int microbatch_group_size_per_vp_stage; /* --microbatch-group-size-per-virtual-pipeline-stage,
                                               -1: = PP */
    int decoder_first_pipeline_num_layers;  /* --decoder-first-pipeline-num-layers, -1: even */
    int decoder_last_pipeline_num_layers;   /* --decoder-last-pipeline-num-layers, -1: even */
    bool account_for_embedding_in_pipeline_split; /* --account-for-embedding-in-pipeline-split */
    bool account_for_loss_in_pipeline_split;      /* --account-for-loss-in-pipeline-split */
    char pipeline_model_parallel_layout[256];     /* --pipeline-model-parallel-layout, "": none */
    bool no_overlap_p2p_communication;            /* --no-overlap-p2p-communication */
    int context_parallel_size;                    /* --context-parallel-size (1) */
    int expert_model_parallel_size;               /* --expert-model-parallel-size (1) */
    int expert_tensor_parallel_size;              /* --expert-tensor-parallel-size, -1: = TP */
    bool use_tp_pp_dp_mapping;                    /* --use-tp-pp-dp-mapping: order tp-cp-ep-pp-dp */
    char parallel_order[64];                      /* --parallel-order (ours), "": tp-cp-ep-dp-pp */

    /* data-parallel gradient buffer (src/parallel/grad_buffer.h; `megatron plan` shows it) */
    bool use_distributed_optimizer;           /* --use-distributed-optimizer */
    bool overlap_grad_reduce;                 /* --overlap-grad-reduce */
    bool overlap_param_gather;                /* --overlap-param-gather */
    int64_t ddp_bucket_size;                  /* --ddp-bucket-size, -1: Megatron's default */
    bool ddp_pad_buckets_for_high_nccl_busbw; /* --ddp-pad-buckets-for-high-nccl-busbw */
    bool grad_reduce_in_bf16;                 /* --grad-reduce-in-bf16: the reductions in bf16 */

    /* CUDA graphs (train/trainer_graph.h); validation resolves the deprecated spellings and the
     * scope list into cuda_graph_impl */
    mg_cuda_graph_impl cuda_graph_impl; /* --cuda-graph-impl (none) */
    char cuda_graph_modules[128];       /* --cuda-graph-modules: scopes, space-separated */
    char cuda_graph_scope[128];         /* --cuda-graph-scope: its older spelling */
    int cuda_graph_warmup_steps;        /* --cuda-graph-warmup-steps (3): eager steps first */
    bool enable_cuda_graph;             /* --enable-cuda-graph (deprecated: local) */
    bool external_cuda_graph;           /* --external-cuda-graph (deprecated: transformer_engine) */
    bool optimizer_cuda_graph;          /* --optimizer-cuda-graph */
} mg_config;

#ifdef __cplusplus
}
#endif
#endif
