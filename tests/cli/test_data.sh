#!/usr/bin/env bash
# `megatron data`: the samples of a Megatron GPT dataset as the user sees them. The --json output
# must equal what Megatron-LM's own GPTDataset/BlendedDataset code gives for the same flags
# (tests/golden/dataset, written by tools/reference/make_dataset_golden.py), the index cache must
# hold Megatron's files byte for byte, and bad flags are one line with exit code 2.
# Usage: MEGATRON=build/megatron bash tests/cli/test_data.sh
source "$(dirname "$0")/lib.sh"

G=tests/golden/dataset
A=$G/data/A B=$G/data/B
BLEND=(--data-path 0.3 "$A" 0.7 "$B" --split 90,8,2 --seq-length 8 --seed 1234
       --train-samples 100 --valid-samples 20 --test-samples 5)

# --json: exactly one object on stdout, equal to Megatron's samples; the cache equals Megatron's.
out=$("$MEGATRON" data "${BLEND[@]}" --data-cache-path "$TMP/cache" --show test --first 6 --json \
      2>"$TMP/err"); rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
if [ "$rc" -ne 0 ]; then fail data_json_matches_megatron "exit code $rc" "$(cat "$TMP/err")"
elif [ "$lines" -ne 1 ] || ! grep -qE '^\{"split": "test", "len": 6, "num_epochs": 3, "samples": \[\[.*\]\]\}$' <<<"$out"; then
    fail data_json_matches_megatron "not one JSON object line: $out"
elif [ "$out" != "$(cat $G/blend_weighted/cli_test.json)" ]; then
    fail data_json_matches_megatron "differs from Megatron's samples" "ours:     $out" \
        "Megatron: $(cat $G/blend_weighted/cli_test.json)"
else pass data_json_matches_megatron; fi

diffs=$(for f in "$G"/blend_weighted/cache/*; do
    cmp -s "$f" "$TMP/cache/$(basename "$f")" || echo "$(basename "$f")"; done)
n_ours=$(ls "$TMP/cache" | wc -l) n_theirs=$(ls "$G/blend_weighted/cache" | wc -l)
if [ -n "$diffs" ] || [ "$n_ours" -ne "$n_theirs" ]; then
    fail data_cache_matches_megatron "$n_ours files (Megatron $n_theirs); differing: $diffs"
else pass data_cache_matches_megatron; fi

# A second run is a cache hit with the same answer.
out2=$("$MEGATRON" data "${BLEND[@]}" --data-cache-path "$TMP/cache" --show test --first 6 --json)
if [ "$out2" = "$out" ]; then pass data_cache_hit_same_samples
else fail data_cache_hit_same_samples "second run differs: $out2"; fi

# Text mode decodes with the GPT-2 tokenizer: a byte-level vocabulary without merges (one token
# per byte), a corpus written by `megatron preprocess`, the default cache under the prefix.
awk 'BEGIN{n=0; printf "{"; for(b=0;b<256;b++){ if((b>=33&&b<=126)||(b>=161&&b<=172)||(b>=174&&b<=255)) cp=b; else {cp=256+n; n++}
     printf "\"\\u%04x\": %d, ", cp, b } printf "\"<|endoftext|>\": 256}" }' >"$TMP/vocab.json"
printf '#version: 0.2\n' >"$TMP/merges.txt"
for i in 1 2 3 4 5 6; do printf '{"text": "ab c\\nca b"}\n'; done >"$TMP/in.jsonl"
"$MEGATRON" preprocess --input "$TMP/in.jsonl" --output-prefix "$TMP/tiny" --tokenizer-type \
    GPT2BPETokenizer --vocab-file "$TMP/vocab.json" --merge-file "$TMP/merges.txt" --append-eod \
    >/dev/null 2>&1
out=$("$MEGATRON" data --data-path "$TMP/tiny_text_document" --split 1,0,0 --seq-length 9 \
      --vocab-file "$TMP/vocab.json" --merge-file "$TMP/merges.txt" --first 2 2>&1); rc=$?
# 6 documents "ab c\nca b" + <|endoftext|>: 10 tokens each, (60 - 1) // 9 = 6 samples
if [ "$rc" -ne 0 ]; then fail data_text_mode "exit code $rc" "$out"
elif ! grep -q '^train: 6 samples of 9 + 1 tokens, 1 epoch$' <<<"$out" ||
     ! grep -qE '^sample 1:( [0-9]+){10}$' <<<"$out" ||
     ! grep -qF 'text: "' <<<"$out" || ! grep -qF '<|endoftext|>' <<<"$out"; then
    fail data_text_mode "unexpected output" "$out"
elif [ "$(ls "$TMP/tiny_text_document/cache/GPTDataset_indices" | wc -l)" -ne 4 ]; then
    fail data_text_mode "no cache under PREFIX/cache/GPTDataset_indices"
else pass data_text_mode; fi

# Bad flags and bad data: one line on stderr, exit 2.
expect_error data_unknown_flag 2 "unknown flag '--sequence-length' for .megatron data.; see .megatron data --help." \
    data --data-path "$A" --sequence-length 8
expect_error data_missing_seq_length 2 "data: missing --seq-length L" data --data-path "$A"
expect_error data_missing_data_path 2 "data: missing --data-path PREFIX" data --seq-length 8
expect_error data_empty_data_path 2 "--data-path expects at least one value" \
    data --data-path --seq-length 8
expect_error data_bad_seq_length 2 "data: --seq-length expects an integer in \[2, " \
    data --data-path "$A" --seq-length 1
expect_error data_bad_show 2 "--show expects one of train, valid or test, got 'dev'" \
    data --data-path "$A" --seq-length 8 --show dev
expect_error data_bad_samples 2 "--train-samples expects an integer, got 'many'" \
    data --data-path "$A" --seq-length 8 --train-samples many
expect_error data_missing_prefix 2 "--data-path prefix '$TMP/nope' not found: $TMP/nope.idx does not exist" \
    data --data-path "$TMP/nope" --seq-length 8
expect_error data_bad_weight 2 "blend weight 'x' \(entry 3\) is not a number" \
    data --data-path 0.3 "$A" x "$B" --seq-length 8 --data-cache-path "$TMP/c2"
expect_error data_odd_blend 2 "--data-path has 3 entries starting with the weight '0.3'" \
    data --data-path 0.3 "$A" 0.7 --seq-length 8
expect_error data_split_sums_to_zero 2 "--split '0,0,0' gives no data to any split" \
    data --data-path "$A" --split 0,0,0 --seq-length 8
expect_error data_weighted_needs_sizes 2 "weighted --data-path blend needs a sample count" \
    data --data-path 0.3 "$A" 0.7 "$B" --seq-length 8 --train-samples 10
# a split whose --split weight is 0 gets no dataset, so it needs no count (Megatron)
out=$("$MEGATRON" data --data-path 0.3 "$A" 0.7 "$B" --split 98,2,0 --seq-length 8 \
    --train-samples 10 --valid-samples 4 --data-cache-path "$TMP/cache0" --show train --first 2 --json 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q '"split": "train", "len": 10' <<<"$out"; then pass data_blend_empty_split_needs_no_count
else fail data_blend_empty_split_needs_no_count "exit $rc" "$out"; fi
expect_error data_vocab_without_merges 2 "--vocab-file and --merge-file go together" \
    data --data-path "$A" --seq-length 8 --vocab-file "$TMP/vocab.json"

out=$("$MEGATRON" data --help); rc=$?
if [ "$rc" -eq 0 ] && grep -q -- "--data-path" <<<"$out"; then pass data_help
else fail data_help "exit code $rc"; fi

finish
