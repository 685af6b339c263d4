#!/usr/bin/env bash
# Megatron's check of the lr schedule on resume (OptimizerParamScheduler.load_state_dict,
# train/lr_schedule.h): checkpoints record the schedule's values; resuming with other values
#   - fails in one line naming the value, both values and the two flags, exit status 1, and writes
#     nothing (checkpoint directory byte for byte, no TensorBoard or metrics file);
#   - with --override-opt-param-scheduler trains on the command line's schedule (the logged lr is
#     a straight run's with the new --lr);
#   - with --use-checkpoint-opt_param-scheduler trains on the checkpoint's (the logged lr is the
#     saving run's); both flags together are refused as Megatron refuses them;
# and a checkpoint without the values (written before them), or --no-load-optim (the schedule is
# not loaded), resumes with the new values unchecked.
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --vocab-size 128 --make-vocab-size-divisible-by 64
       --mock-data --seed 5 --log-interval 1 --num-threads 1 --eval-iters 0
       --micro-batch-size 2 --global-batch-size 4 --min-lr 3e-4 --lr-decay-style cosine
       --lr-warmup-iters 2 --train-iters 10)
tree_sum() { (cd "$1" && find . -type f | sort | xargs md5sum); }
# the logged learning rates of iterations 6..10
lrs() { sed -n '/iteration        6\//,$p' "$1" | grep -oE 'learning rate: [0-9.E+-]+' | awk '{ print $3 }'; }

"$MEGATRON" train "${MODEL[@]}" --lr 3e-3 >"$TMP/old.log" 2>&1 &&
    "$MEGATRON" train "${MODEL[@]}" --lr 1e-3 >"$TMP/new.log" 2>&1 &&
    "$MEGATRON" train "${MODEL[@]}" --lr 3e-3 --save "$TMP/ck" --save-interval 5 --exit-interval 5 \
        >"$TMP/save.log" 2>&1 || fail sched_resume_setup "$(tail -n 2 "$TMP/save.log")"
if grep -q '"opt_param_scheduler": {"max_lr": 0.0030000000000000001, "min_lr": 0.00029999999999999997, "lr_warmup_steps": 8, "lr_decay_steps": 40, "lr_decay_style": "cosine", "start_wd": 0.01, "end_wd": 0.01, "wd_incr_steps": 40, "wd_incr_style": "constant"}' \
    "$TMP/ck/iter_0000005/state.json"; then pass sched_saved
else fail sched_saved "state.json: $(grep -o '"opt_param_scheduler[^}]*}' "$TMP/ck/iter_0000005/state.json")"; fi

# mismatch NAME 'error regex' FLAGS...: refused in one line, exit 1, nothing written
mismatch() {
    local name=$1 want=$2; shift 2
    local before; before=$(tree_sum "$TMP/ck")
    expect_error "$name" 1 "$want" train "${MODEL[@]}" --load "$TMP/ck" --save "$TMP/ck" \
        --save-interval 1 --tensorboard-dir "$TMP/tb" --metrics-file "$TMP/m.jsonl" "$@"
    if [ "$before" != "$(tree_sum "$TMP/ck")" ] || [ -e "$TMP/tb" ] || [ -e "$TMP/m.jsonl" ]; then
        fail "${name}_writes_nothing" "the checkpoint changed or a log file appeared"
    fi
}
mismatch sched_changed_lr "^megatron: error: OptimizerParamScheduler: class input value 0\.001 and checkpoint value 0\.003 for learning rate do not match; pass --override-opt-param-scheduler to use the command line's or --use-checkpoint-opt_param-scheduler to use the checkpoint's$" \
    --lr 1e-3
mismatch sched_changed_min_lr "class input value 1e-05 and checkpoint value 0\.0003 for minimum learning rate do not match" \
    --lr 3e-3 --min-lr 1e-5
mismatch sched_changed_style "class input value linear and checkpoint value cosine for learning rate decay style do not match" \
    --lr 3e-3 --lr-decay-style linear
mismatch sched_changed_decay "class input value 48 and checkpoint value 40 for total number of iterations do not match" \
    --lr 3e-3 --lr-decay-iters 12
expect_error sched_both_flags 2 "--override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler are both set" \
    train "${MODEL[@]}" --lr 1e-3 --load "$TMP/ck" --override-opt-param-scheduler \
    --use-checkpoint-opt-param-scheduler

# resume_lrs NAME WANT_LOG FLAGS...: resumes from the checkpoint and logs WANT_LOG's lrs
resume_lrs() {
    local name=$1 want=$2; shift 2
    "$MEGATRON" train "${MODEL[@]}" --load "$TMP/ck" "$@" >"$TMP/$name.log" 2>&1; local rc=$?
    if [ "$rc" -ne 0 ]; then fail "$name" "exit $rc: $(tail -n 2 "$TMP/$name.log")"
    elif [ "$(lrs "$TMP/$name.log" | wc -l)" -ne 5 ] || ! diff <(lrs "$want") <(lrs "$TMP/$name.log") >/dev/null; then
        fail "$name" "learning rates $(lrs "$TMP/$name.log" | tr '\n' ' ')" "want $(lrs "$want" | tr '\n' ' ')"
    else pass "$name"; fi
}
resume_lrs sched_override "$TMP/new.log" --lr 1e-3 --override-opt-param-scheduler
grep -q " > overriding learning rate value to 0.001" "$TMP/sched_override.log" ||
    fail sched_override_log "no ' > overriding learning rate value to 0.001' line"
resume_lrs sched_use_checkpoint "$TMP/old.log" --lr 1e-3 --use-checkpoint-opt_param-scheduler
grep -q " > using checkpoint value 0.003 for learning rate" "$TMP/sched_use_checkpoint.log" ||
    fail sched_use_checkpoint_log "no ' > using checkpoint value 0.003 for learning rate' line"
resume_lrs sched_same_values "$TMP/old.log" --lr 3e-3
# Megatron's other spelling of the flag
resume_lrs sched_override_underscore "$TMP/new.log" --lr 1e-3 --override-opt_param-scheduler

# a checkpoint from before the values were saved: resumes with the new --lr, unchecked
cp -r "$TMP/ck" "$TMP/ck_old"
sed -i '/"opt_param_scheduler"/d' "$TMP/ck_old/iter_0000005/state.json"
"$MEGATRON" train "${MODEL[@]}" --load "$TMP/ck_old" --lr 1e-3 >"$TMP/oldck.log" 2>&1; rc=$?
if [ "$rc" -ne 0 ]; then fail sched_old_checkpoint "exit $rc: $(tail -n 2 "$TMP/oldck.log")"
elif ! diff <(lrs "$TMP/new.log") <(lrs "$TMP/oldck.log") >/dev/null; then
    fail sched_old_checkpoint "learning rates $(lrs "$TMP/oldck.log" | tr '\n' ' ')"
else pass sched_old_checkpoint; fi
# --no-load-optim: the schedule starts anew (not loaded, so not checked)
"$MEGATRON" train "${MODEL[@]}" --load "$TMP/ck" --lr 1e-3 --no-load-optim >"$TMP/noopt.log" 2>&1 &&
    pass sched_no_load_optim || fail sched_no_load_optim "$(tail -n 2 "$TMP/noopt.log")"

finish
