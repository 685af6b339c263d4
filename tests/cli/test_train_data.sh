#!/usr/bin/env bash
# Training on a real indexed dataset: Moby Dick preprocessed by `megatron preprocess`, the GPT
# dataset's samples through --data-path, validation on the valid split, and a resume from a
# checkpoint that continues at the same data position with bitwise the same losses.
source "$(dirname "$0")/lib.sh"

TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
tools/moby_to_jsonl.sh data/moby-dick.txt >"$TMP/moby.jsonl"
"$MEGATRON" preprocess --input "$TMP/moby.jsonl" --output-prefix "$TMP/moby" "${TOK[@]}" \
    --append-eod --workers 2 >/dev/null 2>&1 || fail train_data_setup "preprocess failed"

RUN=(train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32
     --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --seed 5 "${TOK[@]}"
     --data-path "$TMP/moby_text_document" --split 949,50,1 --data-cache-path "$TMP/cache"
     --log-interval 1 --eval-interval 3 --eval-iters 1 --num-threads 2 --train-iters 6)
losses() { grep -o '"lm_loss": *[^,}]*' "$1" | sed 's/.*: *//'; }

if "$MEGATRON" "${RUN[@]}" --metrics-file "$TMP/full.jsonl" >"$TMP/full.log" 2>&1; then
    if grep -q 'validation loss at iteration 3 | lm loss value:' "$TMP/full.log" &&
        grep -q 'padded vocab 50304' "$TMP/full.log"; then pass train_data_runs_with_validation
    else fail train_data_runs_with_validation "$(tail -n 5 "$TMP/full.log")"; fi
else
    fail train_data_runs_with_validation "$(tail -n 3 "$TMP/full.log")"
fi

"$MEGATRON" "${RUN[@]}" --save "$TMP/ckpt" --exit-interval 3 --metrics-file "$TMP/part.jsonl" >/dev/null 2>&1 &&
"$MEGATRON" "${RUN[@]}" --load "$TMP/ckpt" --metrics-file "$TMP/part.jsonl" >/dev/null 2>&1
if [ -s "$TMP/full.jsonl" ] && diff <(losses "$TMP/full.jsonl") <(losses "$TMP/part.jsonl") >/dev/null; then
    pass train_data_resume_bitwise
else
    fail train_data_resume_bitwise "$(paste <(losses "$TMP/full.jsonl") <(losses "$TMP/part.jsonl"))"
fi

expect_error train_data_missing_prefix 2 "prefix '.*/nope' not found" "${RUN[@]}" --data-path "$TMP/nope"
# a split with no validation share: as Megatron, no validation dataset, so no evaluation
out=$("$MEGATRON" "${RUN[@]}" --split 100,0,0 --train-iters 3 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q 'leaves no validation documents; evaluation is skipped' <<<"$out" &&
    ! grep -q 'validation loss' <<<"$out"; then pass train_data_empty_valid_split_skips_eval
else fail train_data_empty_valid_split_skips_eval "exit $rc" "$(tail -n 3 <<<"$out")"; fi
# a weighted blend of two prefixes trains (Megatron's sample counts for every split: the test
# split's is one evaluation)
cp "$TMP/moby_text_document.bin" "$TMP/moby2_text_document.bin"
cp "$TMP/moby_text_document.idx" "$TMP/moby2_text_document.idx"
out=$("$MEGATRON" "${RUN[@]}" --data-path 0.3 "$TMP/moby_text_document" 0.7 "$TMP/moby2_text_document" \
    --train-iters 3 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'lm loss:' <<<"$out")" -eq 3 ]; then pass train_data_weighted_blend_trains
else fail train_data_weighted_blend_trains "exit $rc" "$(tail -n 3 <<<"$out")"; fi
# the test split after training (Megatron's do_test): evaluated where its share holds documents
# (Megatron's test count, --eval-iters x --global-batch-size samples, from its first sample); the
# 949,50,1 runs above have none among Moby Dick's 135 documents, so no test line (Megatron would
# not finish building that split)
out=$("$MEGATRON" "${RUN[@]}" --split 90,5,5 --eod-mask-loss 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qE '> datasets: .* test [1-9][0-9]* samples' <<<"$out" &&
    grep -q '^ validation loss at iteration 6 on test set | lm loss value: ' <<<"$out" &&
    ! grep -q 'on test set' "$TMP/full.log"; then pass train_data_test_split_evaluated_where_it_has_documents
else fail train_data_test_split_evaluated_where_it_has_documents "exit $rc" "$(grep -E 'datasets|validation loss' <<<"$out")" "$(grep 'test set' "$TMP/full.log")"; fi
# --eod-mask-loss masks the tokenizer's end of document (GPT-2's <|endoftext|>)
if grep -q '> --eod-mask-loss: no loss where the input is token 50256 (end of document)' <<<"$out"; then
    pass train_data_eod_mask_uses_the_tokenizers_eod
else fail train_data_eod_mask_uses_the_tokenizers_eod "$(grep -i eod <<<"$out")"; fi
finish
