#!/usr/bin/env bash
# Porting a Megatron-LM script: every refused flag of `megatron train` (and of a subcommand) in one
# run, one line each then one error line naming them, exit 2; Megatron's retired spellings in its
# words; the profiling family accepted as a whole; --logging-level and
# --no-check-for-nan-in-loss-and-grad with Megatron's meaning.
# Usage: MEGATRON=build/megatron bash tests/cli/test_flags_report.sh
source "$(dirname "$0")/lib.sh"

TINY=(--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --train-iters 2
      --log-interval 1 --mock-data --vocab-size 64 --eval-iters 0 --device cpu --lr 1e-3)

# expect_lines NAME 'final line regex' 'line regex' ... -- ARGS...: exit 2, each line regex on its
# own stderr line, in order, then the final line last; nothing else.
expect_lines() {
    local name=$1 final=$2; shift 2
    local want=()
    while [ "$1" != "--" ]; do want+=("$1"); shift; done; shift
    local err rc i
    err=$("$MEGATRON" "$@" 2>&1 >/dev/null); rc=$?
    mapfile -t got <<<"$err"
    if [ "$rc" -ne 2 ]; then fail "$name" "exit code $rc, expected 2" "$err"; return; fi
    if [ "${#got[@]}" -ne $((${#want[@]} + 1)) ]; then
        fail "$name" "${#got[@]} lines, expected $((${#want[@]} + 1))" "$err"; return
    fi
    for i in "${!want[@]}"; do
        grep -qE -- "${want[$i]}" <<<"${got[$i]}" || { fail "$name" "line $((i + 1)) lacks /${want[$i]}/" "$err"; return; }
    done
    grep -qE -- "$final" <<<"${got[-1]}" || { fail "$name" "last line lacks /$final/" "$err"; return; }
    pass "$name"
}

# A line of a DeepSeek-V3 style script with flags this build refuses for different reasons.
expect_lines report_train_lists_all \
    "^megatron: error: 6 flags of the command line were refused \(--multi-latent-attention, --wandb-project, --checkpoint-activations, --moe-router-score-functon, --DDP-impl, --optimizer\)" \
    "^error: unknown flag '--multi-latent-attention'; see .megatron train --help." \
    "^error: --wandb-project proj is not supported yet by this build \(Weights & Biases" \
    "^error: --checkpoint-activations is no longer valid, use --recompute-activations" \
    "^error: unknown flag '--moe-router-score-functon'; did you mean '--moe-router-score-function'\?" \
    "^error: --DDP-impl was removed from Megatron-LM in 2023" \
    "^error: --optimizer sgd is not supported yet by this build \(AdamW only\)" \
    -- train "${TINY[@]}" --multi-latent-attention --wandb-project proj --checkpoint-activations \
    --moe-router-score-functon sigmoid --DDP-impl local --optimizer sgd
# every subcommand parses through the same table
expect_lines report_generate_lists_all \
    "^megatron: error: 2 flags of the command line were refused \(--max-tokens, --topk\).*megatron generate --help" \
    "^error: unknown flag '--max-tokens' for .megatron generate.; did you mean '--max-new-tokens'\?" \
    "^error: unknown flag '--topk' for .megatron generate.; did you mean '--top-k'\?" \
    -- generate --load "$TMP/none" --prompt-ids 1 --max-tokens 4 --topk 2
expect_lines report_plan_lists_all \
    "^megatron: error: 2 flags of the command line were refused \(--world-sise, --activations-checkpoint-method\)" \
    "^error: unknown flag '--world-sise' for .megatron plan.; did you mean '--world-size'\?" \
    "^error: --activations-checkpoint-method is Megatron-LM's old name of --recompute-method" \
    -- plan --world-sise 2 --activations-checkpoint-method uniform

# Retired spellings alone: one line in Megatron's words (or the flag that replaced them), exit 2.
expect_error report_retired_checkpoint_activations 2 \
    "^megatron: error: --checkpoint-activations is no longer valid, use --recompute-activations, or, for more control, --recompute-granularity and --recompute-method\." \
    train "${TINY[@]}" --checkpoint-activations
expect_error report_retired_batch_size 2 \
    "error: --batch-size argument is no longer valid, use --micro-batch-size instead$" \
    train "${TINY[@]}" --batch-size 4
expect_error report_retired_warmup 2 \
    "error: --warmup argument is no longer valid, use --lr-warmup-fraction instead$" \
    train "${TINY[@]}" --warmup 10
expect_error report_retired_model_parallel_size 2 \
    "error: --model-parallel-size is no longer valid, use --tensor-model-parallel-size instead$" \
    train "${TINY[@]}" --model-parallel-size 1
expect_error report_retired_activations_checkpoint_method 2 \
    "error: --activations-checkpoint-method is Megatron-LM's old name of --recompute-method" \
    train "${TINY[@]}" --activations-checkpoint-method uniform
expect_error report_retired_activations_checkpoint_num_layers 2 \
    "error: --activations-checkpoint-num-layers is Megatron-LM's old name of --recompute-num-layers" \
    train "${TINY[@]}" --activations-checkpoint-num-layers 1
expect_error report_retired_checkpoint_num_layers 2 \
    "error: --checkpoint-num-layers is Megatron-LM's oldest name of --recompute-num-layers" \
    train "${TINY[@]}" --checkpoint-num-layers 1
expect_error report_retired_distribute_checkpointed 2 \
    "error: --distribute-checkpointed-activations is Megatron-LM's old name of --distribute-saved-activations" \
    train "${TINY[@]}" --distribute-checkpointed-activations
expect_error report_retired_ddp_impl 2 "error: --DDP-impl was removed from Megatron-LM in 2023" \
    train "${TINY[@]}" --DDP-impl local
expect_error report_retired_contiguous_ddp 2 \
    "error: --use-contiguous-buffers-in-ddp was removed from Megatron-LM in 2021" \
    train "${TINY[@]}" --use-contiguous-buffers-in-ddp
expect_error report_retired_contiguous_local_ddp 2 \
    "error: --use-contiguous-buffers-in-local-ddp is not a Megatron-LM flag" \
    train "${TINY[@]}" --use-contiguous-buffers-in-local-ddp
expect_error report_retired_no_contiguous_local_ddp 2 \
    "error: --no-contiguous-buffers-in-local-ddp was removed from Megatron-LM in 2023" \
    train "${TINY[@]}" --no-contiguous-buffers-in-local-ddp

# The profiling family is accepted as a whole and listed once as having no effect.
out=$("$MEGATRON" train "${TINY[@]}" --profile --profile-step-start 1 --profile-step-end 2 \
    --profile-ranks 0 1 --use-pytorch-profiler --pytorch-profiler-collect-shapes \
    --record-memory-history --memory-snapshot-path "$TMP/snap.pickle" --nvtx-ranges 2>&1); rc=$?
if [ "$rc" -ne 0 ]; then fail report_profile_family "exit code $rc" "$out"
elif ! grep -q -- "> no effect here.*--profile, --profile-step-start, --profile-step-end, --profile-ranks, --use-pytorch-profiler" <<<"$out"; then
    fail report_profile_family "no start-up line listing them" "$out"
else pass report_profile_family; fi

# --logging-level: 40 (ERROR) prints errors only, 20 (INFO) the usual lines.
out=$("$MEGATRON" train "${TINY[@]}" --logging-level 40 2>&1); rc=$?
if [ "$rc" -eq 0 ] && [ -z "$out" ]; then pass report_logging_level_error
else fail report_logging_level_error "exit code $rc, output:" "$out"; fi
out=$("$MEGATRON" train "${TINY[@]}" --logging-level 20 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q "iteration        2/       2" <<<"$out"; then pass report_logging_level_info
else fail report_logging_level_info "exit code $rc, output:" "$out"; fi

# A learning rate of 1e30 makes the loss NaN at the second iteration: the run stops there, unless
# --no-check-for-nan-in-loss-and-grad, which trains on (Megatron's switch).
NAN=("${TINY[@]}" --train-iters 3 --lr 1e30)
expect_error report_nan_check_stops 1 "lm loss .*nan.* is not finite" train "${NAN[@]}"
out=$("$MEGATRON" train "${NAN[@]}" --no-check-for-nan-in-loss-and-grad 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q "iteration        3/       3.*grad norm: nan" <<<"$out"; then
    pass report_nan_check_off
else fail report_nan_check_off "exit code $rc, output:" "$out"; fi

finish
