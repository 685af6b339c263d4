#!/usr/bin/env bash
# `megatron preprocess`, `train` and `generate` with HuggingFaceTokenizer (tokenizer.json) and the
# SentencePiece types. The .bin/.idx must equal, byte for byte, what Megatron's
# tools/preprocess_data.py writes with Hugging Face `tokenizers` / `sentencepiece`: for the
# committed documents against the committed files (tests/golden/tokenizers/, from
# tools/reference/make_tokenizer_models.py), and, where python3 has those libraries, for a few MB
# of fresh seeded text (tools/reference/tokenizer_compare.py). Then train and generate take the
# vocabulary and the prompt's ids from the tokenizer, and the errors are one line.
source "$(dirname "$0")/lib.sh"
G=tests/golden/tokenizers
MB=${TOKENIZER_COMPARE_MB:-2}
# builds without the optional libraries refuse those tokenizers (the refusal is tested below)
probe() { "$MEGATRON" preprocess --input $G/docs.jsonl --output-prefix "$TMP/probe" $1 2>&1 |
          grep -q "$2" && echo 0 || echo 1; }
have_spm=$(probe "--tokenizer-type Llama2Tokenizer --tokenizer-model $G/spm_bpe.model" libsentencepiece-dev)
have_nfc=$(probe "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $G/qwen2" libutf8proc-dev)

tok_args() { # KIND: the tokenizer flags of one tokenizer of tests/golden/tokenizers
    case $1 in
    spm_bpe) echo "--tokenizer-type Llama2Tokenizer --tokenizer-model $G/spm_bpe.model" ;;
    *) echo "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $G/$1" ;;
    esac
}
same() { # NAME OURS_PREFIX WANT_PREFIX
    local e
    for e in bin idx; do
        if ! cmp -s "$2.$e" "$3.$e"; then
            fail "$1" "$2.$e differs from the reference $3.$e:" "$(cmp "$2.$e" "$3.$e" 2>&1)"
            return
        fi
    done
    pass "$1"
}
# compare NAME_PREFIX INPUT REFERENCE_DIR WORKERS: every tokenizer against the reference files
compare() {
    local k
    for k in llama3 qwen2 neox spm_bpe; do
        if [ $k = spm_bpe ] && [ $have_spm = 0 ]; then
            echo "SKIP ${1}_$k (this build has no libsentencepiece)"; continue
        fi
        if [ $k != spm_bpe ] && [ $k != llama3 ] && [ $have_nfc = 0 ]; then
            echo "SKIP ${1}_$k (this build has no utf8proc for NFC)"; continue
        fi
        # shellcheck disable=SC2046
        if "$MEGATRON" preprocess --input "$2" --output-prefix "$TMP/$1_$k" $(tok_args $k) \
            --append-eod --workers "$4" 2>"$TMP/stderr"; then
            same "${1}_$k" "$TMP/$1_${k}_text_document" "$3/${k}_text_document"
        else fail "${1}_$k" "$(cat "$TMP/stderr")"; fi
    done
}

# 1. the committed documents, one and two workers
compare tokenizers_golden $G/docs.jsonl $G 2
"$MEGATRON" preprocess --input $G/docs.jsonl --output-prefix "$TMP/one" $(tok_args llama3) \
    --append-eod --workers 1 2>/dev/null
same tokenizers_golden_llama3_one_worker "$TMP/one_text_document" $G/llama3_text_document

# 2. a few MB of fresh text against the libraries themselves
mkdir -p "$TMP/ref"
if ! command -v python3 >/dev/null; then
    echo "SKIP tokenizers_fresh_${MB}mb_* (no python3)"
elif python3 tools/reference/tokenizer_compare.py "$TMP/ref" "$MB" >"$TMP/py.out" 2>"$TMP/py.err"; then
    compare tokenizers_fresh_${MB}mb "$TMP/ref/docs.jsonl" "$TMP/ref" 2
elif [ $? -eq 3 ]; then
    echo "SKIP tokenizers_fresh_${MB}mb_* ($(cat "$TMP/py.err"))"
else
    fail tokenizers_fresh_reference "$(tail -n 3 "$TMP/py.err")"
fi

# 3. --tokenizer-hf-no-include-special-tokens: Llama 3's <|begin_of_text|> (3000) is gone: one
#    token less per document, two for an empty one (no EOD after no tokens)
"$MEGATRON" preprocess --input $G/docs.jsonl --output-prefix "$TMP/nobos" $(tok_args llama3) \
    --tokenizer-hf-no-include-special-tokens --append-eod 2>/dev/null
bos() { od -An -v -tu2 -w2 "$1" | grep -cx ' *3000'; }
docs=$(wc -l <$G/docs.jsonl) empty=$(grep -cx '{"text": ""}' $G/docs.jsonl)
lost=$((($(stat -c %s $G/llama3_text_document.bin) - $(stat -c %s "$TMP/nobos_text_document.bin")) / 2))
if [ "$(bos "$TMP/nobos_text_document.bin")" = 0 ] && [ "$(bos $G/llama3_text_document.bin)" = "$docs" ] &&
    [ "$lost" = $((docs + empty)) ]; then
    pass tokenizers_no_special_tokens_drops_bos
else fail tokenizers_no_special_tokens_drops_bos "$lost tokens fewer, $docs documents ($empty empty)"; fi

# 4. train takes the vocabulary from the tokenizer (3004 -> padded 3072); generate reads the
#    tokenizer from the checkpoint and its prompt starts with <|begin_of_text|>
RUN=(train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32
     --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --seed 5 $(tok_args llama3)
     --data-path $G/llama3_text_document --split 100,0,0 --data-cache-path "$TMP/cache"
     --log-interval 1 --eval-iters 0 --num-threads 2 --train-iters 2 --save "$TMP/ckpt")
if "$MEGATRON" "${RUN[@]}" >"$TMP/train.log" 2>&1 && grep -q 'padded vocab 3072' "$TMP/train.log"
then pass tokenizers_train_vocab_from_tokenizer_json
else fail tokenizers_train_vocab_from_tokenizer_json "$(tail -n 3 "$TMP/train.log")"; fi
out=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt "Call me Ishmael" --max-new-tokens 2 --json 2>&1)
if grep -qF '"prompt_ids": [3000, 34, 376, 404, 2671]' <<<"$out"; then pass tokenizers_generate_uses_run_tokenizer
else fail tokenizers_generate_uses_run_tokenizer "$out"; fi
if [ $have_spm = 1 ]; then
    out=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt "Call me Ishmael" --max-new-tokens 1 \
        --tokenizer-type SentencePieceTokenizer --tokenizer-model $G/spm_bpe.model --json 2>&1)
    if grep -qF '"prompt_ids": [410, 385, 389, 2298]' <<<"$out"; then pass tokenizers_generate_flag_tokenizer
    else fail tokenizers_generate_flag_tokenizer "$out"; fi
fi

# 5. convert --loader hf records a directory's tokenizer.json (or tokenizer.model): a Llama-style
#    run exported, given its tokenizer files and imported back generates the same ids from a text
#    prompt without tokenizer flags
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear
       --untie-embeddings-and-output-weights --max-position-embeddings 32)
if "$MEGATRON" "${RUN[@]/$TMP\/ckpt/$TMP/ck_llama}" "${LLAMA[@]}" >"$TMP/train2.log" 2>&1 &&
    "$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/ck_llama" \
        --save-dir "$TMP/hf" 2>"$TMP/conv.err"; then
    mkdir -p "$TMP/hf_spm" && cp "$TMP"/hf/* "$TMP/hf_spm/" && cp $G/spm_bpe.model "$TMP/hf_spm/tokenizer.model"
    cp $G/llama3/tokenizer.json $G/llama3/tokenizer_config.json "$TMP/hf/"
    want=$("$MEGATRON" generate --load "$TMP/ck_llama" --prompt "Call me" --max-new-tokens 4 --json 2>&1)
    got=$("$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/hf" --save-dir "$TMP/ck_back" 2>&1 &&
          "$MEGATRON" generate --load "$TMP/ck_back" --prompt "Call me" --max-new-tokens 4 --json 2>&1)
    if grep -q '"tokenizer_type": "HuggingFaceTokenizer"' "$TMP"/ck_back/iter_0000000/state.json &&
        [ "${got#*\"prompt_ids\"}" = "${want#*\"prompt_ids\"}" ] && grep -qF '[3000, 34, 376, 404]' <<<"$want"; then
        pass tokenizers_convert_import_records_tokenizer_json
    else fail tokenizers_convert_import_records_tokenizer_json "before: $want" "after: $got"; fi
    if [ $have_spm = 1 ]; then
        got=$("$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/hf_spm" --save-dir "$TMP/ck_spm" 2>&1 &&
              "$MEGATRON" generate --load "$TMP/ck_spm" --prompt "Call me" --max-new-tokens 1 --json 2>&1)
        if grep -q '"tokenizer_type": "Llama2Tokenizer"' "$TMP"/ck_spm/iter_0000000/state.json &&
            grep -qF '"prompt_ids": [410, 385, 389]' <<<"$got"; then
            pass tokenizers_convert_import_records_tokenizer_model
        else fail tokenizers_convert_import_records_tokenizer_model "$got"; fi
    fi
else fail tokenizers_convert_setup "$(tail -n 2 "$TMP/train2.log" "$TMP/conv.err")"; fi

# 6. errors: one line; exit 2 for flags, 1 for files and what is not supported
OUT=(--input $G/docs.jsonl --output-prefix "$TMP/e")
mkdir -p "$TMP/empty" "$TMP/noeos"
cp $G/llama3/tokenizer.json "$TMP/noeos/"
expect_error tokenizers_hf_needs_model 2 "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model" \
    preprocess --tokenizer-type HuggingFaceTokenizer "${OUT[@]}"
expect_error tokenizers_hf_dir_without_json 1 "empty/tokenizer.json: cannot open" \
    preprocess --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/empty" "${OUT[@]}"
expect_error tokenizers_append_eod_needs_eos 2 "--append-eod: HuggingFaceTokenizer .*noeos/tokenizer.json has no end-of-document token" \
    preprocess --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TMP/noeos" "${OUT[@]}" --append-eod
expect_error tokenizers_special_tokens_flag 1 "--tokenizer-special-tokens .*is not supported" \
    preprocess $(tok_args llama3) "${OUT[@]}" --tokenizer-special-tokens "<x>"
expect_error tokenizers_tiktoken_unsupported 1 "--tokenizer-type TikTokenizer is not supported yet" \
    preprocess --tokenizer-type TikTokenizer --tokenizer-model x "${OUT[@]}"
expect_error tokenizers_train_needs_model 2 "--tokenizer-type Llama2Tokenizer needs --tokenizer-model PATH" \
    train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 --lr 1e-3 \
    --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --tokenizer-type Llama2Tokenizer \
    --data-path $G/spm_bpe_text_document
if [ $have_spm = 0 ]; then
    expect_error tokenizers_spm_needs_library 1 "install libsentencepiece-dev" \
        preprocess $(tok_args spm_bpe) "${OUT[@]}"
fi
if [ $have_nfc = 0 ]; then
    expect_error tokenizers_nfc_needs_library 1 "normalizer NFC needs utf8proc.*install libutf8proc-dev" \
        preprocess $(tok_args qwen2) "${OUT[@]}"
fi
if ls "$TMP"/e_* >/dev/null 2>&1; then fail tokenizers_errors_write_nothing "$(ls "$TMP"/e_*)"
else pass tokenizers_errors_write_nothing; fi
finish
