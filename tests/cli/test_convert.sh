#!/usr/bin/env bash
# `megatron convert`, both directions.
# --loader megatron --saver hf: a GPT-2-shaped, a Llama-shaped (RoPE, GQA, SwiGLU, untied) and a
# Mixtral-shaped (the Llama shape with 4 experts, top-2) model trained on mock data become Hugging
# Face directories; where python3 has transformers and torch, tools/reference/hf_export_check.py
# opens them as a user would: greedy generation gives the ids `megatron generate` gives on the
# checkpoint, and the logits at every position of a 24-token sequence equal `megatron generate
# --logits-file`'s (both fp32: max difference <= 1e-5 of the largest logit; the reductions are
# at most 256 long, so float32 rounding leaves ~1e-6, measured 1e-6).
# --loader hf --saver megatron: tools/reference/hf_import_models.py writes tiny random
# LlamaForCausalLM (GQA, untied; fp32, bf16 and fp16; tied with biases), GPT2LMHeadModel (with
# the GPT-2 tokenizer's files, and again under the Hub's prefix-less names) and
# MixtralForCausalLM directories with save_pretrained; imported, `megatron generate` continues a
# prompt with transformers' greedy ids, and `megatron train --load` trains them without model
# flags. Without python: an export
# imported back is the same model (bit-identical logits), a Mistral config.json reads as Llama,
# `train --load` takes the model flags from the checkpoint, and bad input (config.json or
# weights) is a one-line error that writes nothing.
source "$(dirname "$0")/lib.sh"

TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
SHAPE=(--seq-length 32 --max-position-embeddings 32)
RUN=(--micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
    --lr-warmup-iters 2 --mock-data --seed 7 --log-interval 100 --eval-iters 0 --num-threads 2)
LLAMA=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention
    --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu
    --disable-bias-linear --untie-embeddings-and-output-weights --vocab-size 256
    --make-vocab-size-divisible-by 64 "${SHAPE[@]}")
"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 "${SHAPE[@]}" "${RUN[@]}" \
    --train-iters 40 "${TOK[@]}" --save "$TMP/gpt2" >"$TMP/gpt2.log" 2>&1 ||
    fail convert_setup_gpt2 "$(tail -n 2 "$TMP/gpt2.log")"
"$MEGATRON" train "${LLAMA[@]}" "${RUN[@]}" --train-iters 40 --save "$TMP/llama" >"$TMP/llama.log" 2>&1 ||
    fail convert_setup_llama "$(tail -n 2 "$TMP/llama.log")"
"$MEGATRON" train "${LLAMA[@]}" --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 "${RUN[@]}" \
    --train-iters 20 --save "$TMP/moe" >"$TMP/moe.log" 2>&1 || fail convert_setup_moe "$(tail -n 2 "$TMP/moe.log")"

SEQ="3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4"
SKIP_HF="python3 lacks torch or transformers"

# gen_ids CKPT PROMPT_IDS N: the N greedy ids `megatron generate` continues the prompt with
gen_ids() {
    "$MEGATRON" generate --load "$1" --prompt-ids "$2" --max-new-tokens "$3" --json 2>&1 |
        sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p'
}
json_field() { sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" <<<"$2"; }
json_list() { sed -n "s/.*\"$1\": \[\([0-9, ]*\)\].*/\1/p" <<<"$2"; }

if "$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/gpt2" --save-dir "$TMP/hf_gpt2" 2>"$TMP/conv.err" &&
    [ -f "$TMP/hf_gpt2/config.json" ] && [ -f "$TMP/hf_gpt2/model.safetensors" ] && [ -f "$TMP/hf_gpt2/vocab.json" ] &&
    [ -f "$TMP/hf_gpt2/merges.txt" ] && [ -f "$TMP/hf_gpt2/tokenizer_config.json" ] &&
    [ -f "$TMP/hf_gpt2/generation_config.json" ] && grep -q '"model_type":[[:space:]]*"gpt2"' "$TMP/hf_gpt2/config.json" &&
    ! ls -d "$TMP"/hf_gpt2.tmp-* >/dev/null 2>&1; then pass convert_gpt2_writes_an_hf_directory
else fail convert_gpt2_writes_an_hf_directory "$(cat "$TMP/conv.err")" "$(ls "$TMP/hf_gpt2" 2>&1)"; fi

"$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/llama" --save-dir "$TMP/hf_llama" \
    --max-shard-size 60000 2>"$TMP/conv.err"
n_shards=$(ls "$TMP/hf_llama"/model-*-of-*.safetensors 2>/dev/null | wc -l)
if [ "$n_shards" -gt 1 ] && [ -f "$TMP/hf_llama/model.safetensors.index.json" ] &&
    grep -q '"num_key_value_heads":[[:space:]]*2' "$TMP/hf_llama/config.json" &&
    grep -q '"tie_word_embeddings":[[:space:]]*false' "$TMP/hf_llama/config.json" &&
    [ ! -f "$TMP/hf_llama/vocab.json" ]; then pass convert_llama_shards_with_an_index
else fail convert_llama_shards_with_an_index "$n_shards shards" "$(cat "$TMP/conv.err")" "$(ls "$TMP/hf_llama" 2>&1)"; fi

if "$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/moe" --save-dir "$TMP/hf_moe" 2>"$TMP/conv.err" &&
    grep -q '"num_local_experts":[[:space:]]*4' "$TMP/hf_moe/config.json"; then pass convert_moe_writes_mixtral
else fail convert_moe_writes_mixtral "$(cat "$TMP/conv.err")"; fi

# transformers on the three exports (one python process): the same greedy ids, the same logits.
# "Hello world" is [15496, 995] in the GPT-2 vocabulary.
EXPORTS=(gpt2:GPT2LMHeadModel llama:LlamaForCausalLM moe:MixtralForCausalLM)
models=()
for e in "${EXPORTS[@]}"; do
    m=${e%%:*}
    "$MEGATRON" generate --load "$TMP/$m" --prompt-ids "$SEQ" --max-new-tokens 0 \
        --logits-file "$TMP/$m.npy" >/dev/null 2>"$TMP/gen_$m.err"
    models+=(--model "$m" "$TMP/hf_$m" "$TMP/$m.npy" "$([ "$m" = gpt2 ] && echo "Hello world")")
done
checked=$(python3 tools/reference/hf_export_check.py "5 6 7 8" 12 "$SEQ" "${models[@]}" 2>"$TMP/py.err")
py_rc=$?
for e in "${EXPORTS[@]}"; do
    m=${e%%:*} class=${e#*:} name=convert_${e%%:*}_transformers_generates_the_same_ids
    if [ "$py_rc" -eq 3 ]; then echo "SKIP $name ($SKIP_HF)"; echo "SKIP ${name}_logits ($SKIP_HF)"; continue; fi
    line=$(grep "\"name\": \"$m\"" <<<"$checked")
    ours=$(gen_ids "$TMP/$m" "5 6 7 8" 12)
    got_class=$(json_field class "$line" | tr -d '"') got_ids=$(json_list ids "$line") err=$(json_field logits_err "$line")
    if [ "$got_class" != "$class" ]; then fail "$name" "transformers opened it as '$got_class', expected $class" "$(tail -n 3 "$TMP/py.err")"
    elif [ -z "$ours" ] || [ "$got_ids" != "$ours" ]; then fail "$name" "greedy ids: transformers [$got_ids], megatron [$ours]"
    elif [ "$m" = gpt2 ] && [ "$(json_list tokens "$line")" != "15496, 995" ]; then fail "$name" "AutoTokenizer('Hello world') = [$(json_list tokens "$line")], expected [15496, 995]"
    else pass "$name"; fi
    if [ -n "$err" ] && awk -v e="$err" 'BEGIN { exit !(e <= 1e-5) }'; then pass "${name}_logits"
    else fail "${name}_logits" "max |megatron - transformers| / max |logit| = '$err', expected <= 1e-5" "$(cat "$TMP/gen_$m.err")" "$(tail -n 3 "$TMP/py.err")"; fi
done

"$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/llama" --save-dir "$TMP/hf_bf16" --saver-dtype bf16 2>/dev/null
if grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$TMP/hf_bf16/config.json" 2>/dev/null &&
    [ "$(stat -c %s "$TMP/hf_bf16/model.safetensors")" -lt "$(($(cat "$TMP"/hf_llama/model-*.safetensors | wc -c) * 6 / 10))" ]; then
    pass convert_bf16_halves_the_weights
else fail convert_bf16_halves_the_weights "$(ls -l "$TMP/hf_bf16" 2>&1)"; fi

mkdir -p "$TMP/full" && echo keep >"$TMP/full/x"
expect_error convert_refuses_a_nonempty_save_dir 1 'already holds files' convert --loader megatron --saver hf --load-dir "$TMP/gpt2" --save-dir "$TMP/full"
expect_error convert_hf_refuses_a_nonempty_save_dir 1 'already holds files' convert --loader hf --saver megatron --load-dir "$TMP/hf_llama" --save-dir "$TMP/full"
if [ "$(cat "$TMP/full/x")" = keep ] && [ "$(ls "$TMP/full")" = x ]; then pass convert_leaves_the_nonempty_dir_alone
else fail convert_leaves_the_nonempty_dir_alone "$(ls "$TMP/full")"; fi
help=$("$MEGATRON" convert --help 2>&1) && grep -q -- '--loader hf --saver megatron --load-dir HF_DIR' <<<"$help" &&
    grep -q -- '--target-pipeline-parallel-size P' <<<"$help" && pass convert_help || fail convert_help "$help"
expect_error convert_needs_its_flags 2 'needs --loader, --saver, --load-dir and --save-dir' convert --loader megatron --saver hf
expect_error convert_unknown_loader 2 "--loader expects one of megatron or hf, got 'torch'" convert --loader torch --saver hf --load-dir a --save-dir b
expect_error convert_same_format 2 '--loader hf --saver hf converts nothing' convert --loader hf --saver hf --load-dir a --save-dir b
expect_error convert_bad_dtype 2 "--saver-dtype expects one of fp32 or bf16, got 'fp8'" convert --loader megatron --saver hf --load-dir a --save-dir b --saver-dtype fp8
expect_error convert_bad_shard_size 2 "--max-shard-size expects an integer, got '5GB'" convert --loader megatron --saver hf --load-dir a --save-dir b --max-shard-size 5GB
expect_error convert_zero_shard_size 2 '--max-shard-size expects a positive number of bytes, got 0' convert --loader megatron --saver hf --load-dir a --save-dir b --max-shard-size 0
expect_error convert_vocab_without_merges 2 'give --vocab-file and --merge-file together' convert --loader megatron --saver hf --load-dir a --save-dir b --vocab-file v.json
expect_error convert_unknown_flag 2 "unknown flag '--target-dir' for .megatron convert." convert --loader megatron --saver hf --load-dir a --target-dir b
expect_error convert_target_sizes_are_for_megatron 2 '--target-tensor-parallel-size and --target-pipeline-parallel-size are for --saver megatron' \
    convert --loader megatron --saver hf --load-dir a --save-dir b --target-tensor-parallel-size 2
expect_error convert_dtype_is_for_hf 2 '--saver-dtype and --max-shard-size are for --saver hf' convert --loader hf --saver megatron --load-dir a --save-dir b --saver-dtype bf16
expect_error convert_bad_target_size 2 '--target-pipeline-parallel-size expects a positive integer' \
    convert --loader hf --saver megatron --load-dir a --save-dir b --target-pipeline-parallel-size 0
expect_error convert_no_checkpoint 1 'holds no checkpoint' convert --loader megatron --saver hf --load-dir "$TMP/nothing" --save-dir "$TMP/x2"
"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --position-embedding-type rope \
    --vocab-size 256 --make-vocab-size-divisible-by 64 --seq-length 32 --max-position-embeddings 32 \
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --mock-data --num-threads 2 --train-iters 1 \
    --save "$TMP/neox" >/dev/null 2>&1
expect_error convert_refuses_a_model_without_hf_class 1 'no Hugging Face equivalent \(LlamaForCausalLM\): Llama uses RMSNorm' convert --loader megatron --saver hf --load-dir "$TMP/neox" --save-dir "$TMP/x3"
if ! ls -d "$TMP"/x3* >/dev/null 2>&1; then pass convert_failure_leaves_no_directory
else fail convert_failure_leaves_no_directory "$(ls -d "$TMP"/x3*)"; fi

# ---- --loader hf --saver megatron, without python ----

# An export read back is the same model: the fp32 weights go through exactly, so the logits are
# bit-identical (the sharded export: the index's files); the layout asked for is recorded.
if "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/hf_llama" --save-dir "$TMP/back" \
    --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>"$TMP/conv.err" &&
    "$MEGATRON" generate --load "$TMP/back" --prompt-ids "$SEQ" --max-new-tokens 0 --logits-file "$TMP/back.npy" >/dev/null 2>&1 &&
    "$MEGATRON" generate --load "$TMP/llama" --prompt-ids "$SEQ" --max-new-tokens 0 --logits-file "$TMP/orig.npy" >/dev/null 2>&1 &&
    cmp -s "$TMP/back.npy" "$TMP/orig.npy" && [ "$(stat -c %s "$TMP/orig.npy")" -eq $((128 + 24 * 256 * 4)) ] &&
    grep -q '"tensor_model_parallel_size": 2' "$TMP"/back/iter_0000000/state.json &&
    grep -q '"pipeline_model_parallel_size": 2' "$TMP"/back/iter_0000000/state.json &&
    [ "$(cat "$TMP/back/latest_checkpointed_iteration.txt")" = 0 ] && ! ls -d "$TMP"/back.tmp-* >/dev/null 2>&1; then
    pass convert_hf_import_of_an_export_is_the_same_model
else fail convert_hf_import_of_an_export_is_the_same_model "$(cat "$TMP/conv.err")" "$(ls -l "$TMP"/*.npy 2>&1)"; fi

long=$(seq -s ' ' 1 33)
expect_error generate_logits_need_a_prompt_within_the_sequence 2 'the prompt has 33 tokens; logits take 1 to 32' \
    generate --load "$TMP/llama" --prompt-ids "$long" --max-new-tokens 0 --logits-file "$TMP/long.npy"
if [ ! -e "$TMP/long.npy" ]; then pass generate_logits_failure_writes_nothing
else fail generate_logits_failure_writes_nothing "$(ls -l "$TMP/long.npy")"; fi

# `train --load` without model flags takes them from the checkpoint: the same losses as with them
# (42 iterations where the checkpoint's run had 40: a longer schedule, which Megatron takes only
# with --override-opt-param-scheduler)
losses() { grep -oE 'lm loss: [0-9.E+-]+' "$1" | tr '\n' ' '; }
"$MEGATRON" train "${LLAMA[@]}" "${RUN[@]}" --log-interval 1 --train-iters 42 --load "$TMP/llama" \
    --override-opt-param-scheduler >"$TMP/with.log" 2>&1
"$MEGATRON" train "${RUN[@]}" --log-interval 1 --train-iters 42 --load "$TMP/llama" \
    --override-opt-param-scheduler >"$TMP/without.log" 2>&1
if [ "$(losses "$TMP/with.log" | wc -w)" -eq 6 ] && [ "$(losses "$TMP/with.log")" = "$(losses "$TMP/without.log")" ]; then
    pass train_load_takes_the_model_flags_from_the_checkpoint
else fail train_load_takes_the_model_flags_from_the_checkpoint "with: $(losses "$TMP/with.log")" \
    "without: $(losses "$TMP/without.log")" "$(tail -n 1 "$TMP/without.log")"; fi
expect_error train_load_refuses_a_different_model_flag 2 'hidden-size' \
    train "${RUN[@]}" --train-iters 42 --load "$TMP/llama" --hidden-size 128 --num-attention-heads 8

# hand-written config.json files next to the Llama export's weights (bf16, one file); members
# given first win (cJSON returns a duplicate key's first occurrence)
hf_dir() { # hf_dir NAME 'MEMBERS, ' [MODEL_TYPE]
    mkdir -p "$TMP/$1" && cp "$TMP/hf_bf16/model.safetensors" "$TMP/$1/"
    cat >"$TMP/$1/config.json" <<EOF
{$2 "model_type": "${3:-llama}", "architectures": ["${4:-LlamaForCausalLM}"], "vocab_size": 256,
 "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-05,
 "rope_theta": 10000.0, "rope_scaling": null, "hidden_act": "silu", "tie_word_embeddings": false,
 "attention_bias": false, "mlp_bias": false, "sliding_window": null, "torch_dtype": "bfloat16"}
EOF
}
hf_dir mistral '' mistral MistralForCausalLM
if "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/mistral" --save-dir "$TMP/ck_mistral" 2>"$TMP/conv.err" &&
    "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/hf_bf16" --save-dir "$TMP/ck_bf16" 2>>"$TMP/conv.err" &&
    [ -n "$(gen_ids "$TMP/ck_bf16" "5 6 7 8" 12)" ] &&
    [ "$(gen_ids "$TMP/ck_mistral" "5 6 7 8" 12)" = "$(gen_ids "$TMP/ck_bf16" "5 6 7 8" 12)" ]; then
    pass convert_hf_import_reads_mistral_as_llama
else fail convert_hf_import_reads_mistral_as_llama "$(cat "$TMP/conv.err")"; fi

# bad input: one line, nothing written (every save dir below is $TMP/bad_*)
mkdir -p "$TMP/no_config" && cp "$TMP/hf_bf16/model.safetensors" "$TMP/no_config/"
expect_error convert_hf_missing_config 1 'no_config has no config.json; --loader hf reads a Hugging Face model directory' \
    convert --loader hf --saver megatron --load-dir "$TMP/no_config" --save-dir "$TMP/bad_1"
hf_dir qwen '' qwen2 Qwen2ForCausalLM
expect_error convert_hf_unknown_model_type 1 "model_type 'qwen2' is not supported; convert reads gpt2, llama, mistral and mixtral" \
    convert --loader hf --saver megatron --load-dir "$TMP/qwen" --save-dir "$TMP/bad_2"
hf_dir rope_scaling '"rope_scaling": {"rope_type": "linear", "factor": 2.0},'
expect_error convert_hf_rope_scaling 1 "rope_scaling of type 'linear' is not implemented" \
    convert --loader hf --saver megatron --load-dir "$TMP/rope_scaling" --save-dir "$TMP/bad_3"
hf_dir rope_parameters '"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0},'
expect_error convert_hf_rope_parameters 1 "rope_parameters of type 'llama3' is not implemented" \
    convert --loader hf --saver megatron --load-dir "$TMP/rope_parameters" --save-dir "$TMP/bad_4"
hf_dir three_layers '"num_hidden_layers": 3,'
expect_error convert_hf_missing_tensor 1 "tensor 'model.layers.2.input_layernorm.weight' is missing" \
    convert --loader hf --saver megatron --load-dir "$TMP/three_layers" --save-dir "$TMP/bad_5"
hf_dir narrow '"intermediate_size": 96,'
expect_error convert_hf_wrong_shape 1 "tensor 'model.layers.0.mlp.gate_proj.weight' has shape \[128, 64\], the model expects \[96, 64\]" \
    convert --loader hf --saver megatron --load-dir "$TMP/narrow" --save-dir "$TMP/bad_6"
hf_dir gelu '"hidden_act": "gelu",'
expect_error convert_hf_activation 1 "hidden_act 'gelu' is not supported" \
    convert --loader hf --saver megatron --load-dir "$TMP/gelu" --save-dir "$TMP/bad_7"
hf_dir window '"sliding_window": 16,' mistral MistralForCausalLM
expect_error convert_hf_sliding_window 1 'sliding_window 16 is not implemented' \
    convert --loader hf --saver megatron --load-dir "$TMP/window" --save-dir "$TMP/bad_8"
hf_dir base '' llama LlamaModel
expect_error convert_hf_base_model 1 'architectures names LlamaModel, not LlamaForCausalLM' \
    convert --loader hf --saver megatron --load-dir "$TMP/base" --save-dir "$TMP/bad_9"
hf_dir half_bias '"attention_bias": true,'
expect_error convert_hf_attention_bias_only 1 'attention_bias true with mlp_bias false is not supported' \
    convert --loader hf --saver megatron --load-dir "$TMP/half_bias" --save-dir "$TMP/bad_10"
hf_dir gpt2_gelu '"activation_function": "gelu", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32,' gpt2 GPT2LMHeadModel
expect_error convert_hf_gpt2_activation 1 "activation_function 'gelu' is not supported" \
    convert --loader hf --saver megatron --load-dir "$TMP/gpt2_gelu" --save-dir "$TMP/bad_11"
hf_dir llama_ok ''
expect_error convert_hf_heads_over_tp 2 '--target-tensor-parallel-size 3 --target-pipeline-parallel-size 1 do not fit .*num_attention_heads \(4\) must be a multiple of tensor_model_parallel_size \(3\)' \
    convert --loader hf --saver megatron --load-dir "$TMP/llama_ok" --save-dir "$TMP/bad_12" --target-tensor-parallel-size 3
expect_error convert_hf_layers_over_pp 2 '--target-pipeline-parallel-size 4 do not fit .*--num-layers 2 is not divisible' \
    convert --loader hf --saver megatron --load-dir "$TMP/llama_ok" --save-dir "$TMP/bad_13" --target-pipeline-parallel-size 4
mkdir -p "$TMP/no_weights" && cp "$TMP/llama_ok/config.json" "$TMP/no_weights/"
expect_error convert_hf_no_weights 1 'has neither model.safetensors nor model.safetensors.index.json' \
    convert --loader hf --saver megatron --load-dir "$TMP/no_weights" --save-dir "$TMP/bad_14"
if ! ls -d "$TMP"/bad_* >/dev/null 2>&1; then pass convert_hf_failures_write_nothing
else fail convert_hf_failures_write_nothing "$(ls -d "$TMP"/bad_*)"; fi

# ---- --loader hf --saver megatron: models made by transformers ----
mkdir -p "$TMP/made"
made=$(python3 tools/reference/hf_import_models.py "$TMP/made" "5 6 7 8" 16 \
    --gpt2-tokenizer data/gpt2/encoder.json data/gpt2/vocab.bpe 2>"$TMP/py.err")
case $? in
0) ;;
3) echo "SKIP convert_hf_import_* ($SKIP_HF)"; finish; exit 0 ;;
*) fail convert_hf_import_setup "$(tail -n 3 "$TMP/py.err")" ;;
esac
for m in llama llama_bf16 llama_fp16 llama_bias gpt2 gpt2_base mixtral; do
    want=$(sed -n "s/.*\"$m\": {\"ids\": \[\([0-9, ]*\)\].*/\1/p" <<<"$made")
    if "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/made/$m" --save-dir "$TMP/ck_$m" 2>"$TMP/conv.err" &&
        got=$(gen_ids "$TMP/ck_$m" "5 6 7 8" 16) && [ -n "$want" ] && [ "$got" = "$want" ]; then
        pass "convert_hf_import_${m}_generates_transformers_ids"
    else fail "convert_hf_import_${m}_generates_transformers_ids" "megatron [${got:-}], transformers [$want]" "$(cat "$TMP/conv.err")"; fi
done
# the GPT-2 directory's tokenizer files are recorded: a text prompt needs no tokenizer flags
prompt=$("$MEGATRON" generate --load "$TMP/ck_gpt2" --prompt "Hello world" --max-new-tokens 2 --json 2>&1)
if grep -q '"prompt_ids": \[15496, 995\]' <<<"$prompt" && [ -f "$TMP/ck_gpt2/vocab.json" ] &&
    grep -q '"tokenizer_type": "GPT2BPETokenizer"' "$TMP"/ck_gpt2/iter_0000000/state.json; then
    pass convert_hf_import_records_the_tokenizer
else fail convert_hf_import_records_the_tokenizer "$prompt"; fi
# GPT-2's 50257 rows do not split over TP 2: recorded as they are, Megatron's padding said
if "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/made/gpt2" --save-dir "$TMP/ck_gpt2_tp2" \
    --target-tensor-parallel-size 2 2>"$TMP/conv.err" && grep -q 'vocab_size 50257 pads to 50258 rows under tensor parallelism 2' "$TMP/conv.err" &&
    [ "$(gen_ids "$TMP/ck_gpt2_tp2" "5 6 7 8" 16)" = "$(sed -n 's/.*"gpt2": {"ids": \[\([0-9, ]*\)\].*/\1/p' <<<"$made")" ]; then
    pass convert_hf_import_pads_the_vocabulary_for_tp
else fail convert_hf_import_pads_the_vocabulary_for_tp "$(cat "$TMP/conv.err")"; fi
for m in llama mixtral; do
    "$MEGATRON" train --micro-batch-size 2 --global-batch-size 2 --lr 1e-4 --mock-data --eval-iters 0 \
        --num-threads 2 --log-interval 1 --train-iters 2 --load "$TMP/ck_$m" >"$TMP/imported.log" 2>&1
    if [ "$(losses "$TMP/imported.log" | wc -w)" -eq 6 ] && grep -q 'loaded checkpoint' "$TMP/imported.log"; then
        pass "convert_hf_import_${m}_trains_without_model_flags"
    else fail "convert_hf_import_${m}_trains_without_model_flags" "$(tail -n 2 "$TMP/imported.log")"; fi
done
finish
