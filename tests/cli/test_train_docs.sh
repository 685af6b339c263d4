#!/usr/bin/env bash
# Packed documents on the demo corpus (train/trainer_docs.h): Moby Dick preprocessed one chapter
# per document with --append-eod, trained with sequences long enough to hold chapter ends.
#   - --reset-position-ids --reset-attention-mask train, say which token splits the documents
#     (GPT-2's <|endoftext|>), evaluate, and log losses other than the flag-free run's;
#   - each flag alone trains too, with losses of its own;
#   - a resume from a checkpoint continues with bitwise the uninterrupted run's losses;
#   - a tokenizer without an end-of-document token is refused with one line.
source "$(dirname "$0")/lib.sh"

TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
tools/moby_to_jsonl.sh data/moby-dick.txt >"$TMP/moby.jsonl"
"$MEGATRON" preprocess --input "$TMP/moby.jsonl" --output-prefix "$TMP/moby" "${TOK[@]}" \
    --append-eod --workers 2 >/dev/null 2>&1 || fail train_docs_setup "preprocess failed"

RUN=(train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 512
     --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --seed 5 "${TOK[@]}"
     --data-path "$TMP/moby_text_document" --split 949,50,1 --data-cache-path "$TMP/cache"
     --log-interval 1 --eval-interval 3 --eval-iters 1 --num-threads 2 --train-iters 6)
DOCS=(--reset-position-ids --reset-attention-mask)
losses() { grep -oE 'lm loss: [0-9.E+-]+' <<<"$1" | awk '{print $3}'; }
jlosses() { grep -o '"lm_loss": *[^,}]*' "$1" | sed 's/.*: *//'; }

plain=$("$MEGATRON" "${RUN[@]}" 2>&1) || fail train_docs_plain "$(tail -n 3 <<<"$plain")"
out=$("$MEGATRON" "${RUN[@]}" "${DOCS[@]}" --metrics-file "$TMP/full.jsonl" 2>&1); rc=$?
if [ $rc -ne 0 ]; then
    fail train_docs_both_flags "exit $rc" "$(tail -n 3 <<<"$out")"
elif ! grep -qF '> packed documents split at token 50256 (end of document): positions restart at 0 (--reset-position-ids); attention stays within a document (--reset-attention-mask)' <<<"$out"; then
    fail train_docs_both_flags "no line naming the end-of-document token" "$(grep -i document <<<"$out")"
elif [ "$(losses "$out" | wc -l)" -ne 6 ] || ! grep -q 'validation loss at iteration 6 .*lm loss value:' <<<"$out"; then
    fail train_docs_both_flags "want 6 training losses and a validation" "$(tail -n 4 <<<"$out")"
elif [ "$(losses "$out")" = "$(losses "$plain")" ]; then
    fail train_docs_both_flags "the losses are the flag-free run's" "$(losses "$out" | tr '\n' ' ')"
else
    pass "train_docs_both_flags: $(losses "$out" | tr '\n' ' ')(without: $(losses "$plain" | tr '\n' ' '))"
fi

for flag in "${DOCS[@]}"; do
    one=$("$MEGATRON" "${RUN[@]}" "$flag" --train-iters 3 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(losses "$one" | wc -l)" -eq 3 ] &&
        [ "$(losses "$one")" != "$(losses "$plain" | head -n 3)" ] &&
        [ "$(losses "$one")" != "$(losses "$out" | head -n 3)" ]; then
        pass "train_docs_only$flag: $(losses "$one" | tr '\n' ' ')"
    else fail "train_docs_only$flag" "exit $rc" "$(losses "$one" | tr '\n' ' ')" "$(tail -n 3 <<<"$one")"; fi
done

"$MEGATRON" "${RUN[@]}" "${DOCS[@]}" --save "$TMP/ckpt" --exit-interval 3 --metrics-file "$TMP/part.jsonl" >/dev/null 2>&1 &&
"$MEGATRON" "${RUN[@]}" "${DOCS[@]}" --load "$TMP/ckpt" --metrics-file "$TMP/part.jsonl" >/dev/null 2>&1
if [ -s "$TMP/full.jsonl" ] && diff <(jlosses "$TMP/full.jsonl") <(jlosses "$TMP/part.jsonl") >/dev/null; then
    pass train_docs_resume_bitwise
else
    fail train_docs_resume_bitwise "$(paste <(jlosses "$TMP/full.jsonl") <(jlosses "$TMP/part.jsonl"))"
fi

# Llama 3's tokenizer.json without its tokenizer_config.json has no end-of-document token
mkdir -p "$TMP/noeos" && cp tests/golden/tokenizers/llama3/tokenizer.json "$TMP/noeos/"
expect_error train_docs_need_an_eod 2 "^megatron: error: --reset-attention-mask: the HuggingFaceTokenizer tokenizer has no end-of-document token" \
    "${RUN[@]/GPT2BPETokenizer/HuggingFaceTokenizer}" --tokenizer-model "$TMP/noeos" --reset-attention-mask
finish
