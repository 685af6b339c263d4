#!/usr/bin/env bash
# `megatron preprocess` against Megatron-LM's own tools/preprocess_data.py: the .bin/.idx it wrote
# for the same inputs (tests/golden/preprocess/, provenance in tests/golden/README.md) must come
# out byte for byte; the demo corpus by checksum. Then worker-count independence, invalid lines,
# and every flag error.
source "$(dirname "$0")/lib.sh"
G=tests/golden/preprocess
DATA=${DATA:-data}
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/encoder.json"
     --merge-file "$DATA/gpt2/vocab.bpe")
pre() { "$MEGATRON" preprocess "${TOK[@]}" "$@" 2>"$TMP/stderr"; }
same() { # NAME OUR_PREFIX GOLDEN_PREFIX
    local name=$1 ours=$2 gold=$3 e
    for e in bin idx; do
        if ! cmp -s "$ours.$e" "$gold.$e"; then
            fail "$name" "$ours.$e differs from Megatron's $gold.$e:" "$(cmp "$ours.$e" "$gold.$e" 2>&1)"
            return
        fi
    done
    pass "$name"
}

# 1. byte identity with Megatron's output
if pre --input $G/small.jsonl --output-prefix "$TMP/small_eod" --append-eod --workers 2; then
    same preprocess_golden_small_append_eod "$TMP/small_eod_text_document" $G/small_eod_text_document
else fail preprocess_golden_small_append_eod "$(cat "$TMP/stderr")"; fi
if pre --input $G/small.jsonl --output-prefix "$TMP/small" --workers 1; then
    same preprocess_golden_small_no_eod "$TMP/small_text_document" $G/small_text_document
else fail preprocess_golden_small_no_eod "$(cat "$TMP/stderr")"; fi
if pre --input $G/keys.jsonl --output-prefix "$TMP/keys" --json-keys text title --append-eod; then
    same preprocess_golden_two_keys_text "$TMP/keys_text_document" $G/keys_text_document
    same preprocess_golden_two_keys_title "$TMP/keys_title_document" $G/keys_title_document
else fail preprocess_golden_two_keys "$(cat "$TMP/stderr")"; fi

# The demo corpus, one document per chapter: Megatron's .idx byte for byte, its .bin by sha256.
if [ -r "$DATA/moby-dick.txt" ]; then
    tools/moby_to_jsonl.sh "$DATA/moby-dick.txt" > "$TMP/moby.jsonl"
    want_in=$(awk '$2 == "moby.jsonl" {print $1}' $G/moby.sha256)
    want_bin=$(awk '$2 == "moby_text_document.bin" {print $1}' $G/moby.sha256)
    if [ "$(sha256sum < "$TMP/moby.jsonl" | cut -d' ' -f1)" != "$want_in" ]; then
        fail preprocess_golden_moby "tools/moby_to_jsonl.sh no longer writes the input Megatron saw"
    elif pre --input "$TMP/moby.jsonl" --output-prefix "$TMP/moby1" --append-eod --workers 1 &&
        pre --input "$TMP/moby.jsonl" --output-prefix "$TMP/moby2" --append-eod --workers 2; then
        got_bin=$(sha256sum < "$TMP/moby1_text_document.bin" | cut -d' ' -f1)
        if [ "$got_bin" != "$want_bin" ]; then fail preprocess_golden_moby "bin sha256 $got_bin, Megatron's $want_bin"
        elif ! cmp -s "$TMP/moby1_text_document.idx" $G/moby_text_document.idx; then
            fail preprocess_golden_moby ".idx differs from Megatron's"
        else pass preprocess_golden_moby; fi
        same preprocess_workers_2_equals_1 "$TMP/moby2_text_document" "$TMP/moby1_text_document"
    else fail preprocess_golden_moby "$(cat "$TMP/stderr")"; fi
else fail preprocess_golden_moby "$DATA/moby-dick.txt missing"; fi

# Megatron's GPT2BPETokenizer (Hugging Face GPT2TokenizerFast) maps a literal "<|endoftext|>" in
# the text to id 50256; so does ours.
if pre --input $G/eot.jsonl --output-prefix "$TMP/eot" --append-eod &&
    cmp -s "$TMP/eot_text_document.bin" $G/eot_text_document.bin &&
    cmp -s "$TMP/eot_text_document.idx" $G/eot_text_document.idx; then
    pass preprocess_golden_literal_endoftext
else
    fail preprocess_golden_literal_endoftext "output differs from Megatron's eot_text_document"
fi

# 2. invalid lines: skipped and counted (output as without them), or --strict stops
{ sed -n 1,2p $G/small.jsonl; echo 'not json'; echo '{"title": "no text"}'
  sed -n 3,5p $G/small.jsonl; echo '{"text": 42}'; } > "$TMP/dirty.jsonl"
{ sed -n 1,2p $G/small.jsonl; sed -n 3,5p $G/small.jsonl; } > "$TMP/clean.jsonl"
if pre --input "$TMP/dirty.jsonl" --output-prefix "$TMP/dirty" --append-eod --workers 2 &&
    pre --input "$TMP/clean.jsonl" --output-prefix "$TMP/clean" --append-eod; then
    same preprocess_invalid_lines_skipped "$TMP/dirty_text_document" "$TMP/clean_text_document"
    pre --input "$TMP/dirty.jsonl" --output-prefix "$TMP/dirty" --append-eod
    if grep -q "skipped 3 invalid lines of 8 (first: line 3: not JSON at column 1)" "$TMP/stderr"
    then pass preprocess_invalid_lines_reported; else fail preprocess_invalid_lines_reported "$(cat "$TMP/stderr")"; fi
else fail preprocess_invalid_lines_skipped "$(cat "$TMP/stderr")"; fi
expect_error preprocess_strict_stops 1 "dirty.jsonl:3: not JSON at column 1 \(--strict" \
    preprocess "${TOK[@]}" --input "$TMP/dirty.jsonl" --output-prefix "$TMP/strict" --strict
if ls "$TMP"/strict* >/dev/null 2>&1; then fail preprocess_strict_writes_nothing "$(ls "$TMP"/strict*)"
else pass preprocess_strict_writes_nothing; fi

# 3. errors: one line, exit 2 for flags, 1 for files and unsupported features
OUT=(--output-prefix "$TMP/e")
expect_error preprocess_missing_input 1 "no/such.jsonl: cannot open: No such file" \
    preprocess "${TOK[@]}" --input no/such.jsonl "${OUT[@]}"
expect_error preprocess_input_required 2 "--input is required" preprocess "${TOK[@]}" "${OUT[@]}"
expect_error preprocess_output_required 2 "--output-prefix is required" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl
expect_error preprocess_unknown_flag_suggests 2 "unknown flag '--json-key' for \`megatron preprocess\`; did you mean '--json-keys'" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl "${OUT[@]}" --json-key text
expect_error preprocess_workers_zero 2 "--workers expects an integer in \[1, 1024\], got '0'" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl "${OUT[@]}" --workers 0
expect_error preprocess_workers_value_missing 2 "--workers expects a value" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl "${OUT[@]}" --workers
expect_error preprocess_tokenizer_unknown 2 "unknown --tokenizer-type 'GPT3'" \
    preprocess --tokenizer-type GPT3 --input $G/keys.jsonl "${OUT[@]}"
expect_error preprocess_tokenizer_unsupported 1 "--tokenizer-type TikTokenizer is not supported" \
    preprocess --tokenizer-type TikTokenizer --input $G/keys.jsonl "${OUT[@]}"
expect_error preprocess_split_sentences_unsupported 1 "--split-sentences is not supported" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl "${OUT[@]}" --split-sentences
expect_error preprocess_duplicate_key 2 "--json-keys names 'text' twice" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl "${OUT[@]}" --json-keys text text
expect_error preprocess_missing_vocab 1 "no/encoder.json" \
    preprocess --tokenizer-type GPT2BPETokenizer --vocab-file no/encoder.json \
    --merge-file "$DATA/gpt2/vocab.bpe" --input $G/keys.jsonl "${OUT[@]}"
expect_error preprocess_output_dir_missing 1 "no/such/dir/e_text_document.bin.tmp[0-9]+: cannot create" \
    preprocess "${TOK[@]}" --input $G/keys.jsonl --output-prefix "$TMP/no/such/dir/e"
if "$MEGATRON" preprocess --help | grep -q -- "--json-keys"; then pass preprocess_help
else fail preprocess_help "--help does not list --json-keys"; fi
finish
