#!/usr/bin/env bash
# `megatron generate`: a model trained on mock data (documents whose tokens count up) continues a
# counting prompt greedily; sampling is reproducible by seed; bad flags are one-line errors.
source "$(dirname "$0")/lib.sh"

"$MEGATRON" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --vocab-size 256 --make-vocab-size-divisible-by 64 \
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine \
    --lr-warmup-iters 2 --mock-data --seed 7 --log-interval 60 --eval-iters 0 --num-threads 2 \
    --train-iters 60 --save "$TMP/ckpt" >"$TMP/train.log" 2>&1 || fail generate_setup "$(tail -n 2 "$TMP/train.log")"

out=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt-ids "5 6 7 8" --max-new-tokens 8 --json 2>&1)
if grep -qF '"ids": [9, 10, 11, 12, 13, 14, 15, 16]' <<<"$out"; then pass generate_greedy_continues_counting
else fail generate_greedy_continues_counting "$out"; fi

# the same run written --flag=value
out=$("$MEGATRON" generate --load="$TMP/ckpt" --prompt-ids="5 6 7 8" --max-new-tokens=8 --json 2>&1)
if grep -qF '"ids": [9, 10, 11, 12, 13, 14, 15, 16]' <<<"$out"; then pass generate_equals_form
else fail generate_equals_form "$out"; fi

a=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt-ids "3 4" --top-k 20 --temperature 2 --seed 1 --json 2>&1)
b=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt-ids "3 4" --top-k 20 --temperature 2 --seed 1 --json 2>&1)
c=$("$MEGATRON" generate --load "$TMP/ckpt" --prompt-ids "3 4" --top-k 20 --temperature 2 --seed 2 --json 2>&1)
if [ "$a" = "$b" ] && [ "$a" != "$c" ]; then pass generate_sampling_reproducible_by_seed
else fail generate_sampling_reproducible_by_seed "seed 1: $a" "again: $b" "seed 2: $c"; fi

expect_error generate_needs_load 2 'needs --load DIR' generate --prompt-ids "1 2"
expect_error generate_needs_one_prompt 2 'exactly one of --prompt' generate --load "$TMP/ckpt"
expect_error generate_id_out_of_range 2 'outside the vocabulary \[0, 256\)' generate --load "$TMP/ckpt" --prompt-ids "1 999"
expect_error generate_bad_temperature 2 'temperature expects a positive number' generate --load "$TMP/ckpt" --prompt-ids "1" --temperature 0
expect_error generate_unknown_flag 2 "unknown flag '--topk'" generate --load "$TMP/ckpt" --prompt-ids "1" --topk 3
expect_error generate_no_checkpoint 1 'holds no checkpoint' generate --load "$TMP/nothing" --prompt-ids "1"
finish
