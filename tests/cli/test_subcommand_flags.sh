#!/usr/bin/env bash
# Every subcommand parses its flags through the one flag table (config/flags_command.h): --help
# exits 0 with its usage and its flags (metavariable, default, help), an unknown flag is one line
# naming the closest flag of that subcommand, a bad integer is one line, --flag=value is taken.
# The runs stop at flag errors or a missing checkpoint, except plan, data and one tiny bench step.
# Usage: MEGATRON=build/megatron bash tests/cli/test_subcommand_flags.sh
source "$(dirname "$0")/lib.sh"

# expect_help SUB 'fixed string' ...: `megatron SUB --help` exits 0, prints "usage: megatron SUB"
# first and each string.
expect_help() {
    local sub=$1 out rc s; shift
    out=$("$MEGATRON" "$sub" --help 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then fail "${sub}_help" "exit code $rc" "$out"; return; fi
    if ! head -n 1 <<<"$out" | grep -q "^usage: megatron $sub "; then
        fail "${sub}_help" "the first line is not the usage" "$out"; return
    fi
    for s in "$@"; do
        grep -qF -- "$s" <<<"$out" || { fail "${sub}_help" "lacks '$s'" "$out"; return; }
    done
    pass "${sub}_help"
}

# a flag, its metavariable and its default on one line
expect_help generate '--max-new-tokens N' '--top-k K' '--temperature T' '--prompt-ids IDS' \
    '--load DIR' '--json' 'sampling:' '--help, -h'
"$MEGATRON" generate -h | grep -qE -- '^  --max-new-tokens N +32 +tokens to generate' &&
    pass generate_help_default || fail generate_help_default "$("$MEGATRON" generate -h)"
expect_help convert '--loader FORMAT' '--saver FORMAT' '--load-dir DIR' '--save-dir DIR' \
    '--saver-dtype DTYPE' '--max-shard-size BYTES' '5000000000' '--target-tensor-parallel-size T'
expect_help data '--data-path [W] PREFIX ...' '--seq-length L' '--split A,B,C' '969, 30, 1' \
    '--show SPLIT' '--first K' 'dataset:'
expect_help plan '--world-size N' '--num-microbatches M' '--param-sizes A,B,C' \
    '--shared-embedding-param I[,J..]' '`megatron train --help`'
expect_help bench '--model NAME' 'gpt2-124m' '--iters N' '--warmup N' '--peak-size N' \
    '`megatron train --help`'
expect_help preprocess '--input FILE' '--json-keys K [K...]' '--tokenizer-type T' '--workers N' \
    '--split-sentences' 'tokenizer:'

# Unknown flags: one line, exit 2, the closest flag of that subcommand (plan and bench take
# Megatron's train flags too: suggestions come from both tables).
expect_error generate_suggests 2 "unknown flag '--max-tokens' for .megatron generate.; did you mean '--max-new-tokens'\?" \
    generate --load x --prompt-ids 1 --max-tokens 4
expect_error convert_suggests 2 "unknown flag '--saver-type' for .megatron convert.; did you mean '--saver-dtype'\?" \
    convert --loader megatron --saver hf --load-dir a --save-dir b --saver-type bf16
expect_error data_suggests 2 "unknown flag '--seq-lenght' for .megatron data.; did you mean '--seq-length'\?" \
    data --data-path x --seq-lenght 8
expect_error plan_suggests_own 2 "unknown flag '--world-sise' for .megatron plan.; did you mean '--world-size'\?" \
    plan --world-sise 4
expect_error bench_suggests_own 2 "unknown flag '--iter' for .megatron bench.; did you mean '--iters'\?" \
    bench --iter 3
expect_error bench_suggests_megatron 2 "unknown flag '--num-layer' for .megatron bench.; did you mean '--num-layers'\?" \
    bench --num-layer 2
expect_error preprocess_suggests 2 "unknown flag '--worker' for .megatron preprocess.; did you mean '--workers'\?" \
    preprocess --input x --worker 2
expect_error preprocess_bad_integer 2 "--workers expects an integer, got 'two'" \
    preprocess --input x --workers=two
# generate does not take train flags
expect_error generate_no_train_flags 2 "unknown flag '--num-layers' for .megatron generate." \
    generate --load x --prompt-ids 1 --num-layers 2

# Bad integers: one line, exit 2, whether written --flag value or --flag=value.
expect_error generate_bad_integer 2 "--max-new-tokens expects an integer, got '8x'" \
    generate --load x --prompt-ids 1 --max-new-tokens 8x
expect_error generate_bad_range 2 "--top-k expects an integer in \[1, 1048576\], got 0" \
    generate --load x --prompt-ids 1 --top-k=0
expect_error convert_bad_integer 2 "--target-tensor-parallel-size expects an integer, got 'two'" \
    convert --loader hf --saver megatron --load-dir a --save-dir b --target-tensor-parallel-size=two
expect_error data_bad_integer 2 "--first expects an integer, got '1.5'" \
    data --data-path x --seq-length 8 --first 1.5
expect_error plan_bad_integer 2 "--world-size expects an integer, got 'four'" \
    plan --world-size=four
expect_error bench_bad_integer 2 "--iters expects an integer, got '10k'" bench --iters 10k
expect_error bench_bad_megatron_integer 2 "--num-layers expects an integer, got 'x'" \
    bench --num-layers=x

# --flag=value is taken: the runs get past the flags to the checkpoint (exit 1), or succeed with
# the same output as --flag value.
expect_error generate_equals_form 1 "$TMP/nothing holds no checkpoint" \
    generate --load="$TMP/nothing" --prompt-ids="1 2" --max-new-tokens=4 --top-k=2 --json
expect_error convert_equals_form 1 "$TMP/nothing holds no checkpoint" \
    convert --loader=megatron --saver=hf --load-dir="$TMP/nothing" --save-dir="$TMP/out" --saver-dtype=bf16
A=tests/golden/dataset/data/A
a=$("$MEGATRON" data --data-path="$A" --seq-length=8 --show=valid --first=2 --seed=7 --json \
    --data-cache-path="$TMP/c1" 2>&1)
b=$("$MEGATRON" data --data-path "$A" --seq-length 8 --show valid --first 2 --seed 7 --json \
    --data-cache-path "$TMP/c2" 2>&1)
if grep -q '^{"split": "valid", .*"samples": \[\[.*\], \[.*\]\]}$' <<<"$a" && [ "$a" = "$b" ]; then
    pass data_equals_form
else fail data_equals_form "with =: $a" "with spaces: $b"; fi
a=$("$MEGATRON" plan --world-size=8 --tensor-model-parallel-size=2 --num-microbatches=4 \
    --pipeline-model-parallel-size=2 --json 2>&1)
b=$("$MEGATRON" plan --world-size 8 --tensor-model-parallel-size 2 --num-microbatches 4 \
    --pipeline-model-parallel-size 2 --json 2>&1)
if grep -q '"world_size":8' <<<"$a" && [ "$a" = "$b" ]; then pass plan_equals_form
else fail plan_equals_form "with =: $a" "with spaces: $b"; fi
# bench's own flags and Megatron's, written with =, reach the run (the JSON line echoes them)
out=$("$MEGATRON" bench --json --device=cpu --num-layers=1 --hidden-size=32 --num-attention-heads=2 \
    --seq-length=16 --vocab-size=128 --micro-batch-size=2 --iters=2 --warmup=0 --peak-size=64 \
    --num-threads=2 2>/dev/null | tail -n 1)
if grep -q '"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "seq_length": 16' <<<"$out" &&
    grep -q '"iters": 2, "warmup": 0' <<<"$out" && grep -q '"peak_n": 64' <<<"$out"; then
    pass bench_equals_form
else fail bench_equals_form "$out"; fi
# --model picks the shape (24 x 1024, 16 heads); a model flag on the command line overrides it
out=$("$MEGATRON" bench --json --device cpu --model=gpt2-350m --num-layers 1 --seq-length 16 \
    --vocab-size 128 --micro-batch-size 1 --iters 1 --warmup 0 --peak-size 64 --num-threads 2 \
    2>/dev/null | tail -n 1)
if grep -q '"num_layers": 1, "hidden_size": 1024, "num_attention_heads": 16' <<<"$out"; then
    pass bench_model_shape_under_flags
else fail bench_model_shape_under_flags "$out"; fi

finish
