/* mg_config_validate: Megatron's derived defaults (arguments.py validate_args and
 * core_transformer_config_from_args) and the checks that turn a bad combination into one line
 * that names the flags and the fix. Works on a copy: on error the caller's config is untouched. */
#include "config/flags.h"
#include "core/log.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

static mg_status positive(const char *flag, long long v) {
    return v > 0 ? MG_OK : USAGE("%s must be positive, got %lld", flag, v);
}

/* Flags whose -1 means "not given": absent, positive, or an error. */
static mg_status absent_or_positive(const char *flag, long long v) {
    return v == -1 || v > 0 ? MG_OK : USAGE("%s must be positive, got %lld", flag, v);
}

int mg_config_rotary_dim(int kv_channels, double rotary_percent) {
    /* Megatron's RotaryEmbedding: dim = int(kv_channels * rotary_percent) when below 1 */
    if (!(rotary_percent < 1.0)) return kv_channels;
    return (int)((double)kv_channels * rotary_percent);
}

/* --rotary-percent as a fraction, and the rotated channels it gives (even, at least 2). Megatron
 * checks neither: above 1 it rotates the whole head, at 0 nothing, and for an odd count it
 * rotates one channel more than asked with frequencies over the odd count; refused here. */
static mg_status check_rotary_percent(const mg_config *c) {
    double p = c->rotary_percent;
    if (!(p > 0 && p <= 1))
        return USAGE("--rotary-percent must be in (0, 1] (the fraction of each head RoPE "
                     "rotates), got %g; use 1.0 to rotate whole heads",
                     p);
    if (c->position_embedding != MG_POS_ROPE) return MG_OK;
    int kv = c->kv_channels, rd = mg_config_rotary_dim(kv, p);
    if (rd >= 2 && rd % 2 == 0) return MG_OK;
    /* the nearest even count below (2 at least), as the shortest decimal percent giving it */
    int even = rd >= 2 ? rd - 1 : 2;
    char sug[40] = "1.0";
    for (int digits = 1; digits <= 12 && even < kv; digits++) {
        double scale = pow(10.0, digits);
        snprintf(sug, sizeof sug, "%.*f", digits, ceil((double)even / kv * scale) / scale);
        if (mg_config_rotary_dim(kv, strtod(sug, NULL)) == even) break;
        snprintf(sug, sizeof sug, "%.17g", (double)even / kv); /* if no shorter one works */
    }
    return USAGE("--rotary-percent %g rotates int(%d * %g) = %d of the %d channels of a head "
                 "(--kv-channels); RoPE rotates channel pairs, so the count must be even and "
                 "positive: use e.g. --rotary-percent %s (%d channels)",
                 p, kv, p, rd, kv, sug, even < kv ? even : kv);
}

static mg_status check_model(mg_config *c) {
    /* Megatron's add_position_embedding = False: no learned table whatever the type */
    if (c->no_position_embedding && c->position_embedding == MG_POS_LEARNED)
        c->position_embedding = MG_POS_NONE;
    char missing[160] = "";
    int n_missing = 0;
    const struct {
        const char *flag;
        int v;
    } req[] = {{"--num-layers", c->num_layers},
               {"--hidden-size", c->hidden_size},
               {"--num-attention-heads", c->num_attention_heads},
               {"--seq-length", c->seq_length}};
    for (int i = 0; i < 4; i++)
        if (req[i].v == -1) {
            size_t used = strlen(missing);
            snprintf(missing + used, sizeof missing - used, "%s%s", n_missing++ ? ", " : "",
                     req[i].flag);
        }
    if (n_missing)
        return USAGE("missing required model flag%s %s (e.g. --num-layers 12 --hidden-size 768 "
                     "--num-attention-heads 12 --seq-length 1024)",
                     n_missing > 1 ? "s" : "", missing);
    for (int i = 0; i < 4; i++) MG_CHECK(positive(req[i].flag, req[i].v));

    if (c->ffn_hidden_size == -1) {
        /* Megatron: int((4 * hidden * 2 / 3) / 64) * 64 with --swiglu, in float arithmetic. */
        int64_t h = c->hidden_size;
        int64_t ffn = c->swiglu ? (int64_t)(((double)(4 * h * 2) / 3.0) / 64.0) * 64 : 4 * h;
        if (ffn > INT_MAX)
            return USAGE("--hidden-size %d is too large: the MLP size 4*hidden overflows",
                         c->hidden_size);
        if (ffn <= 0)
            return USAGE("--swiglu with --hidden-size %d gives an MLP size of 0 by Megatron's rule "
                         "int(8*hidden/3/64)*64; pass --ffn-hidden-size",
                         c->hidden_size);
        c->ffn_hidden_size = (int)ffn;
    }
    MG_CHECK(positive("--ffn-hidden-size", c->ffn_hidden_size));

    if (c->kv_channels == -1) {
        if (c->hidden_size % c->num_attention_heads)
            return USAGE("--hidden-size %d is not divisible by --num-attention-heads %d; choose "
                         "sizes that divide or pass --kv-channels",
                         c->hidden_size, c->num_attention_heads);
        c->kv_channels = c->hidden_size / c->num_attention_heads;
    }
    MG_CHECK(positive("--kv-channels", c->kv_channels));

    /* Megatron uses --num-query-groups (default 1) only with --group-query-attention. */
    if (!c->group_query_attention)
        c->num_query_groups = c->num_attention_heads;
    else if (c->num_query_groups == -1)
        c->num_query_groups = 1;
    MG_CHECK(positive("--num-query-groups", c->num_query_groups));
    if (c->num_attention_heads % c->num_query_groups)
        return USAGE("--num-attention-heads %d is not divisible by --num-query-groups %d; choose a "
                     "group count that divides the heads",
                     c->num_attention_heads, c->num_query_groups);

    if (c->max_position_embeddings == -1) c->max_position_embeddings = c->seq_length;
    MG_CHECK(positive("--max-position-embeddings", c->max_position_embeddings));
    if (c->position_embedding == MG_POS_LEARNED && c->seq_length > c->max_position_embeddings)
        return USAGE("--seq-length %d exceeds --max-position-embeddings %d with learned_absolute "
                     "positions; raise --max-position-embeddings or use rope",
                     c->seq_length, c->max_position_embeddings);
    if (c->position_embedding == MG_POS_ROPE) {
        if (c->kv_channels % 2)
            return USAGE("rope needs an even head size, got kv_channels %d; change --hidden-size / "
                         "--num-attention-heads or --kv-channels",
                         c->kv_channels);
        if (!(c->rotary_base > 0))
            return USAGE("--rotary-base must be positive, got %g", c->rotary_base);
    }
    MG_CHECK(check_rotary_percent(c));
    if (!(c->norm_epsilon > 0))
        return USAGE("--norm-epsilon must be positive, got %g", c->norm_epsilon);
    if (!(c->init_method_std > 0))
        return USAGE("--init-method-std must be positive, got %g", c->init_method_std);
    return MG_OK;
}

static mg_status file_flag(const char *flag, const char *path, const char *what) {
    struct stat st;
    if (!*path) return USAGE("--tokenizer-type GPT2BPETokenizer needs %s PATH (%s)", flag, what);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return USAGE("%s %s: no such file (%s)", flag, path, what);
    return MG_OK;
}

static mg_status check_data(mg_config *c) {
    const bool data = c->data_path[0] != '\0';
    /* Megatron's own GPT-3 scripts give --vocab-file and --merge-file without --tokenizer-type
     * (which Megatron's build_tokenizer then refuses): the files say which tokenizer is meant */
    if (data && !c->tokenizer_type[0] && c->vocab_file[0] && c->merge_file[0]) {
        snprintf(c->tokenizer_type, sizeof c->tokenizer_type, "GPT2BPETokenizer");
        mg_log_info("> --tokenizer-type GPT2BPETokenizer, from --vocab-file and --merge-file "
                    "(Megatron-LM itself needs the flag)");
    }
    if (c->mock_data && data)
        return USAGE("--mock-data and --data-path are both given; pass only one");
    if (!c->mock_data && !data)
        return USAGE("no training data: pass --mock-data or --data-path PREFIX");
    const bool gpt2 = !strcmp(c->tokenizer_type, "GPT2BPETokenizer");
    /* the flag's other choices but NullTokenizer read --tokenizer-model (data/tokenizer.h) */
    const bool model = c->tokenizer_type[0] && !gpt2 && strcmp(c->tokenizer_type, "NullTokenizer");
    if (data && !c->tokenizer_type[0])
        return USAGE("--data-path needs --tokenizer-type: GPT2BPETokenizer (with --vocab-file and "
                     "--merge-file), NullTokenizer (with --vocab-size), or HuggingFaceTokenizer, "
                     "SentencePieceTokenizer, Llama2Tokenizer (with --tokenizer-model)");
    if (gpt2) {
        MG_CHECK(file_flag("--vocab-file", c->vocab_file, "GPT-2's vocab.json"));
        MG_CHECK(file_flag("--merge-file", c->merge_file, "GPT-2's merges.txt"));
    }
    if (model) {
        const bool hf = !strcmp(c->tokenizer_type, "HuggingFaceTokenizer");
        const char *what = hf ? "a tokenizer.json or its directory" : "a SentencePiece .model";
        struct stat st;
        if (!c->tokenizer_model[0])
            return USAGE("--tokenizer-type %s needs --tokenizer-model PATH (%s)", c->tokenizer_type,
                         what);
        if (stat(c->tokenizer_model, &st) != 0 ||
            !(S_ISREG(st.st_mode) || (hf && S_ISDIR(st.st_mode))))
            return USAGE("--tokenizer-model %s: no such %s (%s)", c->tokenizer_model,
                         hf ? "file or directory" : "file", what);
    }
    if (c->vocab_size == -1 && !gpt2 && !model) {
        if (c->tokenizer_type[0])
            return USAGE("--tokenizer-type %s needs --vocab-size N", c->tokenizer_type);
        return USAGE("--mock-data needs --vocab-size N (no tokenizer files given)");
    }
    if (c->vocab_size != -1) MG_CHECK(positive("--vocab-size", c->vocab_size));
    if (c->make_vocab_size_divisible_by < 1)
        return USAGE("--make-vocab-size-divisible-by must be >= 1, got %d",
                     c->make_vocab_size_divisible_by);
    return MG_OK;
}

static mg_status check_training(mg_config *c) {
    if (c->train_iters == -1 && c->train_samples == -1)
        return USAGE("missing --train-iters N (optimizer steps) or --train-samples N (samples): "
                     "either train-iters or train-samples should be provided");
    if (c->train_iters != -1) MG_CHECK(positive("--train-iters", c->train_iters));
    MG_CHECK(positive("--micro-batch-size", c->micro_batch_size));
    const int dp = mg_config_data_parallel_size(c);
    if (c->global_batch_size == -1) c->global_batch_size = c->micro_batch_size * dp;
    MG_CHECK(positive("--global-batch-size", c->global_batch_size));
    /* Megatron's check and words (num_microbatches_calculator.py) */
    if (c->global_batch_size % ((int64_t)c->micro_batch_size * dp))
        return USAGE("global batch size (%d) is not divisible by micro batch size (%d) times data "
                     "parallel size (%d); make --global-batch-size a multiple of %lld",
                     c->global_batch_size, c->micro_batch_size, dp,
                     (long long)c->micro_batch_size * dp);
    /* Megatron seeds numpy, which takes [0, 2^32). */
    if (c->seed < 0 || c->seed > UINT32_MAX)
        return USAGE("--seed must be in [0, 4294967295], got %" PRId64, c->seed);
    return MG_OK;
}

static mg_status check_lr(mg_config *c) {
    if (c->lr == -1) return USAGE("missing --lr X: the peak learning rate (e.g. --lr 3e-4)");
    if (c->lr < 0) return USAGE("--lr must be >= 0, got %g", c->lr);
    if (c->min_lr < 0) return USAGE("--min-lr must be >= 0, got %g", c->min_lr);
    if (c->min_lr > c->lr)
        return USAGE("--min-lr %g is larger than --lr %g; lower --min-lr", c->min_lr, c->lr);
    if (c->lr_warmup_init < 0 || c->lr_warmup_init > c->lr)
        return USAGE("--lr-warmup-init %g must be in [0, --lr %g]", c->lr_warmup_init, c->lr);
    if (c->train_iters == -1) return MG_OK; /* sample-based: config/config_lr.c */
    if (c->lr_decay_iters == -1) c->lr_decay_iters = c->train_iters;
    MG_CHECK(positive("--lr-decay-iters", c->lr_decay_iters));
    if (c->lr_warmup_iters < 0)
        return USAGE("--lr-warmup-iters must be >= 0, got %" PRId64, c->lr_warmup_iters);
    if (c->lr_warmup_fraction != -1) {
        /* Megatron: warm-up = fraction × decay (kept unrounded by the scheduler); lr_warmup_iters
         * receives its integer part, which keeps this check idempotent. */
        if (!(c->lr_warmup_fraction >= 0 && c->lr_warmup_fraction < 1))
            return USAGE("--lr-warmup-fraction must be in [0, 1), got %g", c->lr_warmup_fraction);
        int64_t iters = (int64_t)(c->lr_warmup_fraction * (double)c->lr_decay_iters);
        if (c->lr_warmup_iters != 0 && c->lr_warmup_iters != iters)
            return USAGE(
                "--lr-warmup-iters and --lr-warmup-fraction are both given; pass only one");
        c->lr_warmup_iters = iters;
    } else if (c->lr_warmup_iters >= c->lr_decay_iters) {
        /* Megatron's scheduler asserts warmup < decay. */
        return USAGE("--lr-warmup-iters %" PRId64 " must be less than the %" PRId64
                     " decay iterations; lower it or raise --lr-decay-iters (default "
                     "--train-iters)",
                     c->lr_warmup_iters, c->lr_decay_iters);
    }
    return MG_OK;
}

/* Dropout probabilities in [0, 1) (Megatron's, applied as torch's dropout), and the sizes the
 * masks' counters keep apart (core/dropout.h) while dropout is on: a stream mask numbers the
 * elements of an op's local tensor, a positional one those of a sequence of the whole model. */
static mg_status check_dropout(const mg_config *c) {
    const struct {
        const char *flag;
        double p;
    } d[] = {{"--attention-dropout", c->attention_dropout},
             {"--hidden-dropout", c->hidden_dropout}};
    for (int i = 0; i < 2; i++)
        if (!(d[i].p >= 0 && d[i].p < 1))
            return USAGE("%s must be in [0, 1) (0 disables), got %g", d[i].flag, d[i].p);
    if (c->attention_dropout == 0 && c->hidden_dropout == 0) return MG_OK;
    const int64_t big = (int64_t)1 << 34;
    if (c->layout_invariant_dropout) {
        if (c->num_layers >= 4096 || c->seq_length > 65536 || c->num_attention_heads >= 65536 ||
            (int64_t)c->seq_length * c->hidden_size >= big)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "--layout-invariant-dropout masks support fewer than 4096 layers and "
                           "65536 heads, sequences of at most 65536 tokens and seq-length x "
                           "hidden-size < 2^34; pass --attention-dropout 0 --hidden-dropout 0 for "
                           "this model");
        return MG_OK;
    }
    /* the rows of one rank's hidden-dropout op: the microbatch's tokens, 1/T of them with SP */
    int64_t rows = (int64_t)c->micro_batch_size * c->seq_length;
    if (c->sequence_parallel && c->tensor_model_parallel_size > 1)
        rows /= c->tensor_model_parallel_size;
    if (c->seq_length > 65536 || c->micro_batch_size >= 65536 || c->num_attention_heads >= 65536 ||
        rows * c->hidden_size >= big)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "dropout masks support sequences of at most 65536 tokens, fewer than 65536 "
                       "heads and sequences per micro-batch, and micro-batch-size x seq-length x "
                       "hidden-size (per tensor-parallel rank with --sequence-parallel) < 2^34, "
                       "here %lld; pass --attention-dropout 0 --hidden-dropout 0 for this model",
                       (long long)(rows * c->hidden_size));
    return MG_OK;
}

/* Megatron's asserts on the precision flags and its grad scaler's arguments, in words. */
static mg_status check_precision(const mg_config *c) {
    if (c->fp16 && c->bf16)
        return USAGE("--fp16 and --bf16 exclude each other (Megatron: assert not args.bf16); "
                     "pass one");
    if (c->loss_scale < 0 || !isfinite(c->loss_scale))
        return USAGE("--loss-scale must be a positive number, got %g", c->loss_scale);
    if (!c->fp16 || c->loss_scale > 0) return MG_OK; /* the dynamic scaler's own values */
    if (!(c->initial_loss_scale > 0) || !isfinite(c->initial_loss_scale))
        return USAGE("--initial-loss-scale must be positive, got %g", c->initial_loss_scale);
    if (!(c->min_loss_scale > 0))
        return USAGE("--min-loss-scale must be positive, got %g", c->min_loss_scale);
    if (c->min_loss_scale > c->initial_loss_scale)
        return USAGE("--min-loss-scale %g is above --initial-loss-scale %g; lower it",
                     c->min_loss_scale, c->initial_loss_scale);
    if (!(c->loss_scale_window > 0))
        return USAGE("--loss-scale-window must be positive, got %g", c->loss_scale_window);
    if (c->hysteresis <= 0) return USAGE("--hysteresis must be positive, got %d", c->hysteresis);
    return MG_OK;
}

static mg_status check_optimizer(const mg_config *c) {
    if (!(c->adam_beta1 >= 0 && c->adam_beta1 < 1))
        return USAGE("--adam-beta1 must be in [0, 1), got %g", c->adam_beta1);
    if (!(c->adam_beta2 >= 0 && c->adam_beta2 < 1))
        return USAGE("--adam-beta2 must be in [0, 1), got %g", c->adam_beta2);
    if (!(c->adam_eps > 0)) return USAGE("--adam-eps must be positive, got %g", c->adam_eps);
    if (c->clip_grad < 0)
        return USAGE("--clip-grad must be >= 0 (0 disables), got %g", c->clip_grad);
    if (c->weight_decay < 0) return USAGE("--weight-decay must be >= 0, got %g", c->weight_decay);
    MG_CHECK(check_precision(c));
    return check_dropout(c);
}

int mg_config_log_level(const mg_config *c) {
    if (c->logging_level < 0) return -1;
    return c->logging_level <= 10 ? 2 : c->logging_level >= 40 ? 0 : 1;
}

static mg_status check_logging(const mg_config *c) {
    if (c->logging_level < -1)
        return USAGE("--logging-level must be a Python logging level (10 DEBUG, 20 INFO, 30 "
                     "WARNING, 40 ERROR, 50 CRITICAL), got %d",
                     c->logging_level);
    MG_CHECK(positive("--log-interval", c->log_interval));
    MG_CHECK(positive("--eval-interval", c->eval_interval));
    if (c->eval_iters < 0) return USAGE("--eval-iters must be >= 0, got %d", c->eval_iters);
    MG_CHECK(absent_or_positive("--exit-interval", c->exit_interval));
    MG_CHECK(absent_or_positive("--save-interval", c->save_interval));
    MG_CHECK(positive("--tensorboard-log-interval", c->tensorboard_log_interval));
    MG_CHECK(positive("--tensorboard-queue-size", c->tensorboard_queue_size));
#ifndef MG_HAVE_ISAL
    if (c->tensorboard_dir[0])
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "this build cannot write TensorBoard event files (ISA-L's CRC-32C was not "
                       "found when it was built): apt-get install libisal-dev and rebuild, or "
                       "drop --tensorboard-dir");
#endif
    return MG_OK;
}

static mg_status check_runtime(const mg_config *c) {
    /* "auto" (the default) is resolved when the backend is created (train/trainer.c): cuda when
     * this build has the CUDA backend and a GPU is present, else cpu. Whether a GPU is there is
     * not checked here: validation stays free of device calls. */
    if (!strcmp(c->device, "cuda")) {
#ifndef MG_HAVE_CUDA
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "this build has no CUDA backend (nvcc/cuBLAS were not found when it was "
                       "built); use --device cpu");
#endif
    } else if (strcmp(c->device, "cpu") && strcmp(c->device, "auto")) {
        return USAGE("--device expects auto, cpu or cuda, got '%s'", c->device);
    }
    if (c->world_size < 1)
        return MG_FAIL(MG_ERR_INTERNAL, "world size %d: the front end sets it from the launcher",
                       c->world_size);
    /* Megatron's rules (arguments.py) */
    if (c->overlap_param_gather && !c->use_distributed_optimizer)
        return USAGE("--overlap-param-gather needs --use-distributed-optimizer (the parameters "
                     "are gathered only when the optimizer is sharded)");
    if (c->overlap_param_gather && !c->overlap_grad_reduce)
        return USAGE("--overlap-param-gather needs --overlap-grad-reduce as well");
    MG_CHECK(absent_or_positive("--num-threads", c->num_threads));
    if (!(c->distributed_timeout_minutes > 0))
        return USAGE("--distributed-timeout-minutes must be positive, got %g",
                     c->distributed_timeout_minutes);
    /* The layout flags are parsed and checked by `megatron plan` (src/parallel); training splits
     * the model by tensor and pipeline parallelism (the pipeline's placement and schedule are
     * checked by the front end: parallel/pipeline) and its experts by expert parallelism
     * (config_moe.c), not yet by context parallelism. */
    MG_CHECK(positive("--pipeline-model-parallel-size", c->pipeline_model_parallel_size));
    const struct {
        const char *flag;
        int v, trivial;
    } layout[] = {
        {"--context-parallel-size", c->context_parallel_size, 1},
    };
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
        if (layout[i].v == layout[i].trivial || (layout[i].trivial == -1 && layout[i].v == 1))
            continue;
        if (layout[i].v < 1)
            return USAGE("%s must be positive, got %d", layout[i].flag, layout[i].v);
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s %d is not supported yet by `megatron train` (one model replica per "
                       "rank); `megatron plan --world-size N %s %d` shows the layout",
                       layout[i].flag, layout[i].v, layout[i].flag, layout[i].v);
    }
    MG_CHECK(absent_or_positive("--ddp-bucket-size", c->ddp_bucket_size));
    MG_CHECK(positive("--expert-model-parallel-size", c->expert_model_parallel_size));
    MG_CHECK(absent_or_positive("--expert-tensor-parallel-size", c->expert_tensor_parallel_size));
    return MG_OK;
}

/* Megatron (arguments.py): sequence parallelism needs tensor parallelism; with one rank it warns
 * and turns it off. */
/* Megatron's --ckpt-format choices: ours is torch_dist's counterpart (sharded, any layout). */
static mg_status check_checkpoint(const mg_config *c) {
    if (!strcmp(c->ckpt_format, "torch_dist")) return MG_OK;
    const char *known[] = {"torch", "zarr", "fsdp_dtensor", "torch_dcp"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(c->ckpt_format, known[i]))
            return USAGE("--ckpt-format %s writes PyTorch-specific files, which megatron.c does "
                         "not read or write; use --ckpt-format torch_dist (its layout-independent "
                         "safetensors checkpoints; docs/checkpoints.md)",
                         c->ckpt_format);
    return USAGE("--ckpt-format expects torch_dist (or Megatron's torch, zarr, fsdp_dtensor, which "
                 "are refused), got '%s'",
                 c->ckpt_format);
}

static mg_status check_tp(mg_config *c) {
    MG_CHECK(mg_config_check_tp(c));
    if (c->sequence_parallel && c->tensor_model_parallel_size == 1) {
        mg_log_warn("disabling sequence parallelism because tensor model parallelism is disabled");
        c->sequence_parallel = false;
    }
    return MG_OK;
}

mg_status mg_config_validate(mg_config *out) {
    mg_config c = *out;
    MG_CHECK(check_model(&c));
    MG_CHECK(check_training(&c));
    MG_CHECK(check_lr(&c));
    MG_CHECK(mg_config_check_schedule(&c));
    MG_CHECK(check_data(&c));
    MG_CHECK(check_optimizer(&c));
    MG_CHECK(check_logging(&c));
    MG_CHECK(check_runtime(&c));
    MG_CHECK(check_tp(&c));
    MG_CHECK(check_checkpoint(&c));
    MG_CHECK(mg_config_check_moe(&c));
    MG_CHECK(mg_config_check_graphs(&c));
    MG_CHECK(mg_config_check_recompute(&c));
    MG_CHECK(mg_config_check_fp8(&c));
    *out = c;
    return MG_OK;
}

mg_status mg_config_resolve_model(mg_config *out) {
    mg_config c = *out;
    MG_CHECK(check_model(&c));
    MG_CHECK(mg_config_check_recompute(&c)); /* what the activation plan recomputes */
    *out = c;
    return MG_OK;
}

int mg_config_padded_vocab(const mg_config *c) {
    const int64_t tp = c->tensor_model_parallel_size > 1 ? c->tensor_model_parallel_size : 1;
    int64_t m = (int64_t)c->make_vocab_size_divisible_by * tp;
    return (int)((c->vocab_size + m - 1) / m * m);
}
