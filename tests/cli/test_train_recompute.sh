#!/usr/bin/env bash
# Activation recomputation from the command line: bad flags stop `megatron train` with one line
# and exit status 2 (a layer count above a stage's, block without a count, an unknown module);
# `megatron plan --json` shows the activation memory of a 24 x 2048 GPT at sequence 4096 falling
# below half with full recomputation and the shared recomputation buffers apart; a recomputed
# run's memory line names them, and its losses are the run's without.
source "$(dirname "$0")/lib.sh"

BASE=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --mock-data --log-interval 1
    --eval-iters 0 --num-threads 2 --device cpu --train-iters 3)

expect_error recompute_num_layers_above_a_stage 2 '^megatron: error: When using recompute_granularity: full recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 2 \(got 3\)$' \
    train "${BASE[@]}" --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3
expect_error recompute_block_without_a_count 2 '^megatron: error: When using recompute_granularity: full recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 4 \(got none, 0\)$' \
    train "${BASE[@]}" --recompute-granularity full --recompute-method block
expect_error recompute_unknown_module 2 "^megatron: error: Invalid choices for recompute_modules: \{'attn'\}\. Allowed modules are: \{'core_attn', " \
    train "${BASE[@]}" --recompute-granularity selective --recompute-modules attn

PLAN=(plan --json --world-size 1 --num-layers 24 --hidden-size 2048 --num-attention-heads 16
    --seq-length 4096 --max-position-embeddings 4096 --vocab-size 50257 --micro-batch-size 1
    --global-batch-size 8 --bf16)
acts() { python3 -c 'import json,sys; m=json.load(sys.stdin)["memory"][0]; print(m["activations"], m["recompute_bytes"])'; }
if command -v python3 >/dev/null; then
    read -r none none_rc < <("$MEGATRON" "${PLAN[@]}" | acts)
    read -r full full_rc < <("$MEGATRON" "${PLAN[@]}" --recompute-granularity full \
        --recompute-method uniform --recompute-num-layers 1 | acts)
    if [ -n "$full" ] && [ "$none_rc" = 0 ] && [ "$full_rc" -gt 0 ] && [ $((2 * full)) -lt "$none" ]; then
        pass "plan_recompute_full_activations_below_half ($full of $none bytes, $full_rc shared)"
    else fail plan_recompute_full_activations_below_half "without: $none ($none_rc), full: $full ($full_rc)"; fi
fi

"$MEGATRON" train "${BASE[@]}" >"$TMP/plain.log" 2>&1
"$MEGATRON" train "${BASE[@]}" --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2 >"$TMP/rc.log" 2>&1
losses() { grep -oE 'lm loss: [0-9.E+-]+' "$1" | awk '{printf "%s ", $3}'; }
if grep -qE 'activations [0-9.]+ MiB \(1 slots x [0-9.]+ MiB \+ [0-9.]+ MiB shared\)' "$TMP/rc.log" &&
    [ -n "$(losses "$TMP/rc.log")" ] && [ "$(losses "$TMP/rc.log")" = "$(losses "$TMP/plain.log")" ]; then
    pass "train_recompute_logs_its_memory_and_the_same_losses"
else fail train_recompute_logs_its_memory_and_the_same_losses "$(grep 'memory plan' "$TMP/rc.log")" \
    "with: $(losses "$TMP/rc.log")" "without: $(losses "$TMP/plain.log")"; fi
finish
