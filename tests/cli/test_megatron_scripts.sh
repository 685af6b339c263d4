#!/usr/bin/env bash
# Megatron-LM's stock training scripts, their flag sets verbatim with only the model size, the
# paths, the iteration counts and the parallel sizes shrunk to a CPU run (one process), train a
# few iterations here:
#   - examples/gpt3/train_gpt3_175b_distributed.sh (Megatron-LM before its step-batch-size
#     schedule: --rampup-batch-size with --train-iters, which Megatron refuses — so do we, with its
#     words — and the sample-based form of the same run, which trains); also on a blend of two
#     prefixes;
#   - examples/llama/train_llama2.sh (the ROCm fork's, as mirrored: HuggingFaceTokenizer);
#   - examples/llama/train_llama3_8b_h100_fp8.sh, its MOCK data branch (NullTokenizer), with its
#     own DTYPE switch at bf16 and at fp8 (its four --fp8-* flags; the CPU emulates fp8).
# Every flag of those sets is either implemented with Megatron's meaning or accepted with "no
# effect here" (listed once at start-up); see docs/flags.md.
source "$(dirname "$0")/lib.sh"

TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
tools/moby_to_jsonl.sh data/moby-dick.txt >"$TMP/moby.jsonl"
"$MEGATRON" preprocess --input "$TMP/moby.jsonl" --output-prefix "$TMP/moby" "${TOK[@]}" \
    --append-eod --workers 2 >/dev/null 2>&1 || fail scripts_setup "preprocess failed"
cp "$TMP/moby_text_document.bin" "$TMP/moby2_text_document.bin"
cp "$TMP/moby_text_document.idx" "$TMP/moby2_text_document.idx"

# trains NAME ITERS ARGS...: exit 0 and ITERS iteration lines
trains() {
    local name=$1 iters=$2 out rc
    shift 2
    out=$("$MEGATRON" train "$@" 2>&1); rc=$?
    if [ $rc -ne 0 ]; then fail "$name" "exit $rc" "$(grep -m 3 -E 'error|rror' <<<"$out")"
    elif [ "$(grep -c ' iteration .*lm loss:' <<<"$out")" -ne "$iters" ]; then
        fail "$name" "expected $iters iteration lines" "$(tail -n 3 <<<"$out")"
    else pass "$name"; fi
}

# ---- GPT-3 175B (shrunk: 2 layers of 64, sequence 64, batches of 4 and 8) ----
CHECKPOINT_PATH=$TMP/gpt3_ckpt TENSORBOARD_LOGS_PATH=$TMP/gpt3_tb
VOCAB_FILE=data/gpt2/encoder.json MERGE_FILE=data/gpt2/vocab.bpe DATA_PATH=$TMP/moby_text_document
GPT_MODEL_ARGS=(
    --num-layers 2
    --hidden-size 64
    --num-attention-heads 4
    --seq-length 64
    --max-position-embeddings 64
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8
    --rampup-batch-size 4 4 16
    --train-iters 6
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 5
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --save-interval 3
    --eval-interval 3
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 1
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
)
GPT3=("${GPT_MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" "${DATA_ARGS[@]}"
      "${EVAL_AND_LOGGING_ARGS[@]}" --num-threads 2)
# as shipped: Megatron refuses a batch-size rampup with iteration-based training
expect_error scripts_gpt3_175b_rampup_with_train_iters 2 "expected no batch-size rampup for iteration-based training" \
    train "${GPT3[@]}"
# its sample-based form (--train-samples, --lr-decay-samples instead of the iteration counts)
SAMPLES=()
for a in "${GPT3[@]}"; do SAMPLES+=("$a"); done
SAMPLES=("${SAMPLES[@]/--train-iters/--train-samples}")
SAMPLES=("${SAMPLES[@]/--lr-decay-iters/--lr-decay-samples}")
for i in "${!SAMPLES[@]}"; do
    case ${SAMPLES[$i]} in --train-samples) SAMPLES[$((i + 1))]=48 ;; --lr-decay-samples) SAMPLES[$((i + 1))]=40 ;; esac
done
trains scripts_gpt3_175b_sample_based 8 "${SAMPLES[@]}"
rm -rf "$CHECKPOINT_PATH"
BLEND=()
for a in "${SAMPLES[@]}"; do
    if [ "$a" = "$DATA_PATH" ]; then BLEND+=(0.4 "$DATA_PATH" 0.6 "$TMP/moby2_text_document"); else BLEND+=("$a"); fi
done
trains scripts_gpt3_175b_blend 8 "${BLEND[@]}"

# ---- Llama 3 8B FP8 (the MOCK branch; shrunk: 2 layers of 64, 4 heads in 2 groups, sequence 64,
# vocabulary 256, a 16-sample run; DTYPE=bf16, then DTYPE=fp8: the script's own switch) ----
CHECKPOINT_PATH=$TMP/llama3_ckpt TENSORBOARD_LOGS_PATH=$TMP/llama3_tb DATA_CACHE_PATH=$TMP/llama3_cache
NUM_LAYERS=2 SEQ_LENGTH=64 MAX_POSITION_EMBEDDINGS=64 MICRO_BATCH_SIZE=1 GLOBAL_BATCH_SIZE=4
TP_SIZE=1 CP_SIZE=1 DTYPE=bf16
MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 64
    --ffn-hidden-size 224
    --num-attention-heads 4
    --group-query-attention
    --num-query-groups 2
    --kv-channels 16
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS
    --position-embedding-type rope
    --rotary-base 1000000
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --init-method-std 0.0134
    --attention-backend fused
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 16
    --lr-decay-samples 12
    --lr-warmup-samples 4
    --lr 0.00015
    --min-lr 0.00001
    --decoupled-lr 5.0e-4
    --decoupled-min-lr 4.5e-5
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 235
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
)
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")
DATA_ARGS_LIST=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 256
    --data-cache-path ${DATA_CACHE_PATH}
    --tiktoken-pattern v2
    --split '99,1,0'
    --no-create-attention-mask-in-dataloader
    --no-mmap-bin-files
    --num-workers 1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 1
    --eval-interval 2
    --save-interval 2
    --log-throughput
    --profile
    --profile-step-start 4
    --profile-step-end 6
    --ckpt-format torch_dist
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)
trains scripts_llama3_8b_mock 4 "${MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS_LIST[@]}" "${EVAL_AND_LOGGING_ARGS[@]}" --num-threads 2
# the script's fp8 branch (DTYPE=fp8 adds its four flags), into its own checkpoint directory
DTYPE_ARGS=(--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max
    --fp8-param-gather)
FP8_LOGGING_ARGS=()
for a in "${EVAL_AND_LOGGING_ARGS[@]}"; do FP8_LOGGING_ARGS+=("${a/llama3_ckpt/llama3_fp8_ckpt}"); done
trains scripts_llama3_8b_mock_fp8 4 "${MODEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${DTYPE_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" "${DATA_ARGS_LIST[@]}" "${FP8_LOGGING_ARGS[@]}" --num-threads 2

# ---- Llama 2 (the ROCm fork's examples/llama/train_llama2.sh; shrunk: 2 layers of 64, 4 heads in
# 2 groups, sequence 64; TOKENIZER_MODEL: a byte-level BPE tokenizer.json of tests/golden; the data:
# 13000 short documents, enough for its --split 99990,8,2 to leave the validation split one) ----
awk 'BEGIN { for (i = 0; i < 13000; i++) printf "{\"text\": \"Call me Ishmael, number %d. Some years ago, never mind how long precisely.\"}\n", i }' >"$TMP/many.jsonl"
"$MEGATRON" preprocess --input "$TMP/many.jsonl" --output-prefix "$TMP/many" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model tests/golden/tokenizers/llama3 \
    --append-eod --workers 2 >/dev/null 2>&1 || fail scripts_setup "preprocess with the tokenizer.json failed"
TP=1 PP=1 CP=1 NUM_LAYERS=2 HIDDEN_SIZE=64 FFN_HIDDEN_SIZE=172 NUM_HEADS=4 NUM_GROUPS=2
SEQ_LENGTH=64 MAX_POSITION_EMBEDDINGS=64 MBS=1 BS=4 TOTAL_ITERS=3 LOG_INTERVAL=1 EVAL_ITERS=1
TOKENIZER_TYPE=HuggingFaceTokenizer TOKENIZER_MODEL=tests/golden/tokenizers/llama3
LOG_DIR=$TMP/llama2_log ds_works=2
GPT_ARGS="
    --tensor-model-parallel-size ${TP} \
    --pipeline-model-parallel-size ${PP} \
    --context-parallel-size ${CP} \
    --num-layers $NUM_LAYERS \
    --hidden-size $HIDDEN_SIZE \
    --ffn-hidden-size $FFN_HIDDEN_SIZE \
    --num-attention-heads $NUM_HEADS \
    --seq-length $SEQ_LENGTH \
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS \
    --untie-embeddings-and-output-weights \
    --position-embedding-type rope \
    --no-position-embedding \
    --swiglu \
    --disable-bias-linear \
    --init-method-std 0.02 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --normalization RMSNorm \
    --micro-batch-size $MBS \
    --global-batch-size $BS \
    --train-iters $TOTAL_ITERS \
    --no-async-tensor-model-parallel-allreduce \
    --bf16 \
    --no-masked-softmax-fusion \
"
DATA_ARGS="
    --tokenizer-type ${TOKENIZER_TYPE} \
    --tokenizer-model ${TOKENIZER_MODEL} \
    --split 99990,8,2 \
    --dataloader-type cyclic \
    --save-interval 200000 \
    --tensorboard-dir $LOG_DIR \
    --log-interval 1 \
    --eval-interval 320000 \
    --eval-iters 10 \
    --num-workers $ds_works \
"
OUTPUT_ARGS="
    --log-interval $LOG_INTERVAL \
    --log-throughput \
    --no-save-optim \
    --no-save-rng \
    --eval-iters $EVAL_ITERS
"
EXTRA_ARGS="
    --group-query-attention \
    --num-query-groups $NUM_GROUPS \
    --no-gradient-accumulation-fusion \
    --distributed-backend nccl \
    --distributed-timeout-minutes 120 \
    --overlap-grad-reduce \
"
TRAIN_ARGS="--lr 1e-4 \
        --min-lr 1e-5 \
        --lr-decay-iters 320000 \
        --lr-decay-style cosine \
        --weight-decay 1.0e-1 \
        --clip-grad 1.0 \
"
OPTIMIZER=adam
TRAIN_ARGS="$TRAIN_ARGS --optimizer adam \
        --adam-beta1 0.9 \
        --adam-beta2 0.95 \
        "
# the script's DATA_PATH branch
EXTRA_ARGS="$EXTRA_ARGS --use-flash-attn"
EXTRA_ARGS="$EXTRA_ARGS --sequence-parallel"
EXTRA_ARGS="$EXTRA_ARGS --use-contiguous-parameters-in-local-ddp"
EXTRA_ARGS="$EXTRA_ARGS --use-mcore-models"
# (the script passes these strings unquoted: word splitting makes the flags)
# shellcheck disable=SC2086
LLAMA2=($GPT_ARGS $TRAIN_ARGS $DATA_ARGS $OUTPUT_ARGS $EXTRA_ARGS --data-path "$TMP/many_text_document"
        --save "$TMP/llama2_ckpt" --num-threads 2)
# verbatim, --dataloader-type cyclic included (Megatron's random sampler: data/cyclic_sampler.h)
trains scripts_llama2 3 "${LLAMA2[@]}"

finish
