#!/usr/bin/env bash
# End-to-end training runs of the real binary on mock data: the loss falls, the metrics file is
# one JSON object per logged iteration, and a run saved at iteration 5 and resumed to 10 gives
# bitwise the same losses as an uninterrupted 10-iteration run.
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --vocab-size 256 --make-vocab-size-divisible-by 64
       --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
       --lr-warmup-iters 2 --mock-data --seed 7 --log-interval 1 --eval-iters 0 --num-threads 2)
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)

losses() { grep -o '"lm_loss": *[^,}]*' "$1" | sed 's/.*: *//'; }

# 1. the loss falls and the log line has Megatron's fields
if "$MEGATRON" train "${MODEL[@]}" --train-iters 40 --metrics-file "$TMP/fall.jsonl" >"$TMP/fall.log" 2>&1; then
    first=$(losses "$TMP/fall.jsonl" | head -n 1); last=$(losses "$TMP/fall.jsonl" | tail -n 1)
    n=$(wc -l <"$TMP/fall.jsonl")
    if [ "$n" -ne 40 ]; then fail train_metrics_one_line_per_iteration "expected 40 lines, got $n"
    else pass train_metrics_one_line_per_iteration; fi
    if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.6 * a) }'; then pass train_loss_falls
    else fail train_loss_falls "first $first, last $last"; fi
    line=$(grep -m1 ' iteration        1/      40 |' "$TMP/fall.log")
    ok=1
    for field in 'consumed samples:            4' 'elapsed time per iteration (ms):' \
        'throughput per GPU (TFLOP/s/GPU):' 'learning rate:' 'global batch size:     4' \
        'lm loss:' 'loss scale: 1.0' 'grad norm:' 'number of skipped iterations:   0' \
        'number of nan iterations:   0'; do
        grep -qF -- "$field" <<<"$line" || { ok=0; fail train_log_line_fields "missing '$field' in: $line"; break; }
    done
    [ $ok = 1 ] && pass train_log_line_fields
else
    fail train_loss_falls "training failed: $(tail -n 3 "$TMP/fall.log")"
fi

# 2. resume is bitwise exact (GPT-2 style and Llama style)
check_resume() { # NAME EXTRA_FLAGS...
    local name=$1; shift
    local d="$TMP/$name"; mkdir -p "$d"
    "$MEGATRON" train "${MODEL[@]}" "$@" --train-iters 10 --metrics-file "$d/full.jsonl" >"$d/full.log" 2>&1 || {
        fail "$name" "uninterrupted run failed: $(tail -n 2 "$d/full.log")"; return; }
    "$MEGATRON" train "${MODEL[@]}" "$@" --train-iters 10 --save "$d/ckpt" --save-interval 5 \
        --exit-interval 5 --metrics-file "$d/part.jsonl" >"$d/part1.log" 2>&1 || {
        fail "$name" "first half failed: $(tail -n 2 "$d/part1.log")"; return; }
    local tracker; tracker=$(cat "$d/ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
    [ "$tracker" = 5 ] || { fail "$name" "tracker says '$tracker', expected 5"; return; }
    ls -d "$d"/ckpt/*tmp* >/dev/null 2>&1 && { fail "$name" "temporary checkpoint left behind"; return; }
    "$MEGATRON" train "${MODEL[@]}" "$@" --train-iters 10 --load "$d/ckpt" --save "$d/ckpt" \
        --save-interval 5 --metrics-file "$d/part.jsonl" >"$d/part2.log" 2>&1 || {
        fail "$name" "resumed run failed: $(tail -n 2 "$d/part2.log")"; return; }
    if ! diff <(losses "$d/full.jsonl") <(losses "$d/part.jsonl") >/dev/null; then
        fail "$name" "losses differ:" "$(paste <(losses "$d/full.jsonl") <(losses "$d/part.jsonl"))"
    elif [ "$(wc -l <"$d/part.jsonl")" -ne 10 ]; then
        fail "$name" "expected 10 metrics lines across both halves"
    else pass "$name"; fi
}
check_resume train_resume_bitwise_gpt2
check_resume train_resume_bitwise_llama "${LLAMA[@]}"
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-layer-freq "[0,1]"
     --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --moe-shared-expert-intermediate-size 32)
check_resume train_resume_bitwise_moe "${LLAMA[@]}" "${MOE[@]}"
# aux-loss-free routing: the expert bias moves every step and is part of the checkpoint
check_resume train_resume_bitwise_moe_expert_bias "${LLAMA[@]}" "${MOE[@]}" \
    --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
    --moe-router-bias-update-rate 0.01
# forced balance draws its logits from the checkpointed stream: a resume draws the same; Megatron's
# sync-free flags are accepted (flex runs our all-to-all, no paged stash here)
check_resume train_resume_bitwise_moe_force_balance "${LLAMA[@]}" "${MOE[@]}" \
    --moe-router-force-load-balancing --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend hybridep --moe-paged-stash --moe-paged-stash-page-size 64 \
    --moe-paged-stash-buffer-size-factor-cuda 1.2 --moe-paged-stash-buffer-size-factor-cpu 0

# dropout (Megatron's defaults, 0.1, apply to every run above that omits the flags); explicitly,
# at 0.2: the resumed half draws the masks the uninterrupted run drew (keyed by the iteration)
check_resume train_resume_bitwise_dropout --attention-dropout 0.2 --hidden-dropout 0.2

# 2a. one start-up note when the dropout flags are omitted, none when they are given
note='> --attention-dropout and --hidden-dropout default to 0.1 as in Megatron; pass 0 to disable'
out=$("$MEGATRON" train "${MODEL[@]}" --train-iters 3 2>&1)
out0=$("$MEGATRON" train "${MODEL[@]}" --train-iters 3 --attention-dropout 0 --hidden-dropout 0 2>&1)
out1=$("$MEGATRON" train "${MODEL[@]}" --train-iters 3 --attention-dropout 0 2>&1)
if [ "$(grep -cF -- "$note" <<<"$out")" -ne 1 ]; then
    fail train_dropout_default_note "want the note once:" "$(grep -i dropout <<<"$out")" "$(tail -n 2 <<<"$out")"
elif grep -qF 'as in Megatron; pass 0' <<<"$out0"; then
    fail train_dropout_default_note "a note although both flags were given"
elif ! grep -qxF -- '> --hidden-dropout defaults to 0.1 as in Megatron; pass 0 to disable' <<<"$out1"; then
    fail train_dropout_default_note "no note for the omitted --hidden-dropout:" "$(grep -i dropout <<<"$out1")"
else pass train_dropout_default_note; fi

# 2b. an MoE model logs Megatron's tracked losses and the expert load, in the metrics file too
d="$TMP/moe_log"; mkdir -p "$d"
if "$MEGATRON" train "${MODEL[@]}" "${MOE[@]}" --train-iters 3 --metrics-file "$d/m.jsonl" >"$d/log" 2>&1; then
    line=$(grep -m1 ' iteration        3/       3 |' "$d/log")
    if ! grep -qE 'load_balancing_loss: [0-9.]+ \| z_loss: [0-9.]+ \| expert load \(max/mean\): [0-9.]+ \|$' <<<"$line"; then
        fail train_moe_log_line "no MoE fields at the end of: $line"
    elif ! grep -q '"load_balancing_loss": .*"z_loss": .*"expert_load": ' "$d/m.jsonl"; then
        fail train_moe_log_line "metrics file lacks the MoE keys: $(tail -n 1 "$d/m.jsonl")"
    else pass train_moe_log_line; fi
else
    fail train_moe_log_line "training failed: $(tail -n 3 "$d/log")"
fi

# 3. a save that fails half-way leaves the previous checkpoint as the latest, and nothing behind
d="$TMP/train_resume_bitwise_gpt2"
if [ -d "$d/ckpt" ]; then
    cp -r "$d/ckpt" "$TMP/crash"   # holds iterations 5 and 10: roll it back to 5
    rm -rf "$TMP/crash/iter_0000010"; echo 5 >"$TMP/crash/latest_checkpointed_iteration.txt"
    MG_FAULT_CHECKPOINT=after-model "$MEGATRON" train "${MODEL[@]}" --train-iters 10 --load "$TMP/crash" \
        --save "$TMP/crash" --save-interval 5 >"$TMP/crash.log" 2>&1; rc=$?
    if [ $rc -ne 1 ]; then fail train_failed_save_keeps_latest "exit code $rc, expected 1"
    elif [ "$(cat "$TMP/crash/latest_checkpointed_iteration.txt")" != 5 ]; then
        fail train_failed_save_keeps_latest "tracker moved to $(cat "$TMP/crash/latest_checkpointed_iteration.txt")"
    elif ls -d "$TMP"/crash/iter_0000010* >/dev/null 2>&1; then
        fail train_failed_save_keeps_latest "a partial iteration-10 checkpoint was left: $(ls "$TMP/crash")"
    elif ! grep -q 'injected fault' "$TMP/crash.log"; then
        fail train_failed_save_keeps_latest "no error reported: $(tail -n 2 "$TMP/crash.log")"
    else
        "$MEGATRON" train "${MODEL[@]}" --train-iters 10 --load "$TMP/crash" \
            --metrics-file "$TMP/crash.jsonl" >/dev/null 2>&1 &&
            diff <(losses "$TMP/crash.jsonl") <(losses "$d/full.jsonl" | tail -n 5) >/dev/null &&
            pass train_failed_save_keeps_latest ||
            fail train_failed_save_keeps_latest "resuming from the surviving checkpoint differs"
    fi
fi

# 4. a checkpoint of a different model is refused with a one-line error
if [ -d "$TMP/train_resume_bitwise_gpt2/ckpt" ]; then
    expect_error train_load_shape_mismatch 2 'saved with --hidden-size 64 but this run has 96' \
        train "${MODEL[@]}" --hidden-size 96 --train-iters 12 --load "$TMP/train_resume_bitwise_gpt2/ckpt"
fi
# 5. a corrupt tracker file is a one-line error, not a crash
mkdir -p "$TMP/badckpt"; echo "five" >"$TMP/badckpt/latest_checkpointed_iteration.txt"
expect_error train_load_bad_tracker 1 'latest_checkpointed_iteration.txt: expected an iteration number' \
    train "${MODEL[@]}" --train-iters 3 --load "$TMP/badckpt"
finish
