#!/usr/bin/env bash
# --fp16's loss scaling (train/grad_scaler.h) as a user sees it, on the CPU backend (which computes
# in fp32 and runs the same scaler as the GPU backends):
#   - a power-of-two loss scale that never overflows changes nothing: every loss and grad norm of
#     the log equals the unscaled run's, digit for digit (scaling and unscaling are exact);
#   - overflowing gradients (MG_FAULT_OVERFLOW puts an Inf in them): those steps are skipped and
#     counted, print no grad norm, leave the learning rate where it was, and the scale backs off
#     as Megatron's DynamicGradScaler does (hysteresis 2: the first overflow keeps it, each later
#     one halves it); the checkpoint's Adam step, scheduler position and scaler state count only
#     the steps that advanced;
#   - the scaler's state is in the checkpoint: 4 + 4 resumed iterations log the same losses and
#     scales as 8 straight, through skips and growths;
#   - Megatron's refusal of --fp16 with --bf16, and the flags in `train --help`.
source "$(dirname "$0")/lib.sh"

RUN=(train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 96
     --mock-data --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --log-interval 1
     --device cpu --num-threads 1 --eval-iters 0)
field() { grep -oE "$1: [^|]+" <<<"$2" | sed -E "s/^$1: +//; s/ +$//"; }
iters() { grep -E '\] iteration +[0-9]+/' <<<"$1"; }

plain=$("$MEGATRON" "${RUN[@]}" --train-iters 5 2>&1)
scaled=$("$MEGATRON" "${RUN[@]}" --train-iters 5 --fp16 --initial-loss-scale 1024 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail fp16_exact_scale_changes_nothing "exit $rc" "$(tail -n 3 <<<"$scaled")"
elif [ "$(field 'lm loss' "$(iters "$plain")")" != "$(field 'lm loss' "$(iters "$scaled")")" ] ||
     [ "$(field 'grad norm' "$(iters "$plain")")" != "$(field 'grad norm' "$(iters "$scaled")")" ] ||
     [ "$(field 'grad norm' "$(iters "$plain")" | wc -l)" -ne 5 ]; then
    fail fp16_exact_scale_changes_nothing "plain and x1024 logs differ" "$(iters "$plain")" "$(iters "$scaled")"
elif [ "$(field 'loss scale' "$(iters "$scaled")" | sort -u)" != "1024.0" ] ||
     ! grep -q 'dynamic loss scaling: initial scale 1024' <<<"$scaled" ||
     ! grep -q 'the CPU backend computes in fp32' <<<"$scaled"; then
    fail fp16_exact_scale_changes_nothing "the log does not show the scaler" "$(grep -E 'loss scal|fp32' <<<"$scaled")"
else pass fp16_exact_scale_changes_nothing; fi

# overflowing gradients (injected: an fp32 backward does not overflow at any fp32 scale on this
# tiny model; the GPU suite overflows fp16 for real) in iterations 1..5
over=$(MG_FAULT_OVERFLOW=1:5 "$MEGATRON" "${RUN[@]}" --train-iters 10 --fp16 --initial-loss-scale 1024 \
    --lr-warmup-iters 100 --lr-decay-iters 200 --save "$TMP/over" --save-interval 10 2>&1); rc=$?
lines=$(iters "$over")
skips=$(field 'number of skipped iterations' "$lines")
if [ $rc -ne 0 ]; then fail fp16_overflow_skips "exit $rc" "$(tail -n 3 <<<"$over")"
elif [ "$(tr '\n' ' ' <<<"$skips")" != "1 1 1 1 1 0 0 0 0 0 " ]; then
    fail fp16_overflow_skips "want 5 skipped steps, then none" "$lines"
else
    # skipped lines: no grad norm, lr still the warmup's start; scale (hysteresis 2): S, S/2, S/4..
    bad=""
    scales=$(field 'loss scale' "$lines")
    [ "$(tr '\n' ' ' <<<"$scales")" = "1024.0 512.0 256.0 128.0 64.0 64.0 64.0 64.0 64.0 64.0 " ] ||
        bad="$bad; scales $(tr '\n' ' ' <<<"$scales")"
    [ "$(grep -c 'grad norm' <<<"$lines")" -eq 5 ] || bad="$bad; skipped steps print a grad norm"
    [ "$(field 'learning rate' "$lines" | head -n 5 | sort -u)" = "0.000000E+00" ] ||
        bad="$bad; a skipped step moved the lr"
    # the first step that advances uses the first warmup lr: what the plain run logs after step 1
    lr1=$(field 'learning rate' "$(iters "$("$MEGATRON" "${RUN[@]}" --train-iters 10 --lr-warmup-iters 100 \
        --lr-decay-iters 200 --exit-interval 1 2>&1)")")
    [ "$(field 'learning rate' "$(sed -n 6p <<<"$lines")")" = "$lr1" ] ||
        bad="$bad; the first advancing step logs lr $(field 'learning rate' "$(sed -n 6p <<<"$lines")"), the plain first step $lr1"
    python3 - "$TMP/over/iter_0000010/state.json" <<'PY' || bad="$bad; checkpoint bookkeeping"
import json, sys
s = json.load(open(sys.argv[1]))
g = s.get("grad_scaler", {})
ok = (s["iteration"], s["optimizer_step"], s["lr_num_steps"], s["consumed_train_samples"]) == (10, 5, 20, 40)
ok = ok and (g.get("scale"), g.get("growth_tracker"), g.get("hysteresis_tracker")) == (64, 5, -3)
if not ok:
    print("state:", {k: s.get(k) for k in ("iteration", "optimizer_step", "lr_num_steps", "consumed_train_samples", "grad_scaler")})
sys.exit(0 if ok else 1)
PY
    if [ -n "$bad" ]; then fail fp16_overflow_skips "${bad#; }" "$lines"
    else pass fp16_overflow_skips; fi
fi

# resume through the scaler's state: a window of 2 grows the scale until it overflows again
LIVE=(--fp16 --initial-loss-scale 4096 --loss-scale-window 2 --hysteresis 2)
export MG_FAULT_OVERFLOW=7:9 # overflows straddling the save at 8
straight=$("$MEGATRON" "${RUN[@]}" --train-iters 16 "${LIVE[@]}" 2>&1)
"$MEGATRON" "${RUN[@]}" --train-iters 16 "${LIVE[@]}" --save "$TMP/res" --exit-interval 8 >/dev/null 2>&1
resumed=$("$MEGATRON" "${RUN[@]}" --train-iters 16 "${LIVE[@]}" --load "$TMP/res" 2>&1); rc=$?
unset MG_FAULT_OVERFLOW
want=$(iters "$straight" | sed -n '9,16p' | sed -E 's/^ *\[[^]]*\]//; s/elapsed time per iteration \(ms\): [0-9.]+ \|//; s/throughput per GPU \(TFLOP\/s\/GPU\): [0-9.]+ \|//; s/tokens per second: [0-9.]+ \|//')
got=$(iters "$resumed" | sed -E 's/^ *\[[^]]*\]//; s/elapsed time per iteration \(ms\): [0-9.]+ \|//; s/throughput per GPU \(TFLOP\/s\/GPU\): [0-9.]+ \|//; s/tokens per second: [0-9.]+ \|//')
nscales=$(field 'loss scale' "$(iters "$straight")" | sort -u | wc -l)
if [ $rc -ne 0 ]; then fail fp16_resume_keeps_the_scaler "exit $rc" "$(tail -n 3 <<<"$resumed")"
elif [ "$want" != "$got" ] || [ -z "$got" ]; then fail fp16_resume_keeps_the_scaler "straight:" "$want" "resumed:" "$got"
elif [ "$nscales" -lt 3 ]; then fail fp16_resume_keeps_the_scaler "the scale did not move ($nscales values)" "$(iters "$straight")"
else pass "fp16_resume_keeps_the_scaler: $nscales scales"; fi

expect_error fp16_with_bf16_refused 2 '--fp16 and --bf16 exclude each other' "${RUN[@]}" --train-iters 1 --fp16 --bf16
help=$("$MEGATRON" train --help 2>&1)
missing=""
for f in --fp16 --loss-scale --initial-loss-scale --min-loss-scale --loss-scale-window --hysteresis; do
    grep -qE -- "^ *$f( |$)" <<<"$help" || missing="$missing $f"
done
if [ -z "$missing" ]; then pass fp16_flags_in_help; else fail fp16_flags_in_help "missing:$missing"; fi
finish
