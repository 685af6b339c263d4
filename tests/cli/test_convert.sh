#!/usr/bin/env bash
# `megatron convert --loader megatron --saver hf`: a GPT-2-shaped and a Llama-shaped (RoPE, GQA,
# SwiGLU, untied) model trained on mock data become Hugging Face directories; where python3 has
# transformers and torch, tools/reference/hf_export_check.py opens them as a user would and greedy
# generation gives the ids `megatron generate` gives on the checkpoint (else those checks say
# SKIP). Sharding with an index, bf16, and bad input: one-line errors, nothing overwritten.
source "$(dirname "$0")/lib.sh"

TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
COMMON=(--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2 --mock-data --seed 7
    --log-interval 100 --eval-iters 0 --num-threads 2 --train-iters 40)
"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 "${COMMON[@]}" "${TOK[@]}" \
    --save "$TMP/gpt2" >"$TMP/gpt2.log" 2>&1 || fail convert_setup_gpt2 "$(tail -n 2 "$TMP/gpt2.log")"
"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention \
    --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu \
    --disable-bias-linear --untie-embeddings-and-output-weights --vocab-size 256 \
    --make-vocab-size-divisible-by 64 "${COMMON[@]}" --save "$TMP/llama" >"$TMP/llama.log" 2>&1 ||
    fail convert_setup_llama "$(tail -n 2 "$TMP/llama.log")"

have_hf=1
python3 -c 'import torch, transformers' 2>/dev/null || have_hf=0

# check NAME CKPT HF_DIR CLASS [TOKENIZER_TEXT EXPECTED_IDS]
check_export() {
    local name=$1 ckpt=$2 hf=$3 class=$4 text=${5:-} want_tokens=${6:-}
    local ours theirs
    ours=$("$MEGATRON" generate --load "$ckpt" --prompt-ids "5 6 7 8" --max-new-tokens 12 --json 2>&1 |
        sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p')
    if [ "$have_hf" -eq 0 ]; then echo "SKIP $name (python3 lacks torch or transformers)"; return; fi
    if [ -n "$text" ]; then
        theirs=$(python3 tools/reference/hf_export_check.py "$hf" "5 6 7 8" 12 --tokenizer "$text" 2>"$TMP/py.err")
    else
        theirs=$(python3 tools/reference/hf_export_check.py "$hf" "5 6 7 8" 12 2>"$TMP/py.err")
    fi
    local got_class got_ids got_tok
    got_class=$(sed -n 's/.*"class": "\([A-Za-z0-9]*\)".*/\1/p' <<<"$theirs")
    got_ids=$(sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p' <<<"$theirs")
    got_tok=$(sed -n 's/.*"tokens": \[\([0-9, ]*\)\].*/\1/p' <<<"$theirs")
    if [ "$got_class" != "$class" ]; then fail "$name" "transformers opened it as '$got_class', expected $class" "$(tail -n 3 "$TMP/py.err")"
    elif [ -z "$ours" ] || [ "$got_ids" != "$ours" ]; then fail "$name" "greedy ids: transformers [$got_ids], megatron [$ours]"
    elif [ -n "$text" ] && [ "$got_tok" != "$want_tokens" ]; then fail "$name" "AutoTokenizer('$text') = [$got_tok], expected [$want_tokens]"
    else pass "$name"; fi
}

if "$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/gpt2" --save-dir "$TMP/hf_gpt2" 2>"$TMP/conv.err" &&
    [ -f "$TMP/hf_gpt2/config.json" ] && [ -f "$TMP/hf_gpt2/model.safetensors" ] && [ -f "$TMP/hf_gpt2/vocab.json" ] &&
    [ -f "$TMP/hf_gpt2/merges.txt" ] && [ -f "$TMP/hf_gpt2/tokenizer_config.json" ] &&
    [ -f "$TMP/hf_gpt2/generation_config.json" ] && grep -q '"model_type":[[:space:]]*"gpt2"' "$TMP/hf_gpt2/config.json" &&
    ! ls -d "$TMP"/hf_gpt2.tmp-* >/dev/null 2>&1; then pass convert_gpt2_writes_an_hf_directory
else fail convert_gpt2_writes_an_hf_directory "$(cat "$TMP/conv.err")" "$(ls "$TMP/hf_gpt2" 2>&1)"; fi
# "Hello world" is [15496, 995] in the GPT-2 vocabulary
check_export convert_gpt2_transformers_generates_the_same_ids "$TMP/gpt2" "$TMP/hf_gpt2" GPT2LMHeadModel "Hello world" "15496, 995"

"$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/llama" --save-dir "$TMP/hf_llama" \
    --max-shard-size 60000 2>"$TMP/conv.err"
n_shards=$(ls "$TMP/hf_llama"/model-*-of-*.safetensors 2>/dev/null | wc -l)
if [ "$n_shards" -gt 1 ] && [ -f "$TMP/hf_llama/model.safetensors.index.json" ] &&
    grep -q '"num_key_value_heads":[[:space:]]*2' "$TMP/hf_llama/config.json" &&
    grep -q '"tie_word_embeddings":[[:space:]]*false' "$TMP/hf_llama/config.json" &&
    [ ! -f "$TMP/hf_llama/vocab.json" ]; then pass convert_llama_shards_with_an_index
else fail convert_llama_shards_with_an_index "$n_shards shards" "$(cat "$TMP/conv.err")" "$(ls "$TMP/hf_llama" 2>&1)"; fi
check_export convert_llama_transformers_generates_the_same_ids "$TMP/llama" "$TMP/hf_llama" LlamaForCausalLM

"$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/llama" --save-dir "$TMP/hf_bf16" --saver-dtype bf16 2>/dev/null
if grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$TMP/hf_bf16/config.json" 2>/dev/null &&
    [ "$(stat -c %s "$TMP/hf_bf16/model.safetensors")" -lt "$(($(cat "$TMP"/hf_llama/model-*.safetensors | wc -c) * 6 / 10))" ]; then
    pass convert_bf16_halves_the_weights
else fail convert_bf16_halves_the_weights "$(ls -l "$TMP/hf_bf16" 2>&1)"; fi

mkdir -p "$TMP/full" && echo keep >"$TMP/full/x"
expect_error convert_refuses_a_nonempty_save_dir 1 'already holds files' convert --loader megatron --saver hf --load-dir "$TMP/gpt2" --save-dir "$TMP/full"
if [ "$(cat "$TMP/full/x")" = keep ] && [ "$(ls "$TMP/full")" = x ]; then pass convert_leaves_the_nonempty_dir_alone
else fail convert_leaves_the_nonempty_dir_alone "$(ls "$TMP/full")"; fi
expect_error convert_needs_its_flags 2 'needs --loader, --saver, --load-dir and --save-dir' convert --loader megatron --saver hf
expect_error convert_unknown_loader 2 '--loader torch: expected megatron or hf' convert --loader torch --saver hf --load-dir a --save-dir b
expect_error convert_hf_import_not_yet 1 'not implemented yet' convert --loader hf --saver megatron --load-dir a --save-dir "$TMP/x1"
expect_error convert_bad_dtype 2 '--saver-dtype fp8: expected fp32 or bf16' convert --loader megatron --saver hf --load-dir a --save-dir b --saver-dtype fp8
expect_error convert_bad_shard_size 2 '--max-shard-size expects a positive number of bytes' convert --loader megatron --saver hf --load-dir a --save-dir b --max-shard-size 5GB
expect_error convert_vocab_without_merges 2 'give --vocab-file and --merge-file together' convert --loader megatron --saver hf --load-dir a --save-dir b --vocab-file v.json
expect_error convert_unknown_flag 2 "unknown flag '--target-dir'" convert --loader megatron --saver hf --load-dir a --target-dir b
expect_error convert_no_checkpoint 1 'holds no checkpoint' convert --loader megatron --saver hf --load-dir "$TMP/nothing" --save-dir "$TMP/x2"
"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --position-embedding-type rope \
    --vocab-size 256 --make-vocab-size-divisible-by 64 --seq-length 32 --max-position-embeddings 32 \
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --mock-data --num-threads 2 --train-iters 1 \
    --save "$TMP/neox" >/dev/null 2>&1
expect_error convert_refuses_a_model_without_hf_class 1 'no Hugging Face equivalent \(LlamaForCausalLM\): Llama uses RMSNorm' convert --loader megatron --saver hf --load-dir "$TMP/neox" --save-dir "$TMP/x3"
if ! ls -d "$TMP"/x3* >/dev/null 2>&1; then pass convert_failure_leaves_no_directory
else fail convert_failure_leaves_no_directory "$(ls -d "$TMP"/x3*)"; fi
finish
