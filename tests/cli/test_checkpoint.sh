#!/usr/bin/env bash
# Checkpoints that are damaged, interrupted or old (train/checkpoint.h, format version 2):
#   - a truncated file, a flipped byte, a missing shard file, an index.json that is not JSON or
#     lacks a piece: one-line error naming the file (and the tensor), exit status 1, and the
#     checkpoint directory byte for byte as it was (the run had --save on it);
#   - kill -9 at each point of a save (after the rank's file, after the index, after the rename):
#     the previous checkpoint stays the latest, and resuming from it gives the uninterrupted run's
#     losses; so does a save killed at random moments;
#   - a version 1 checkpoint (tests/golden/ckpt_v1, written by the previous format) resumes and
#     continues like the uninterrupted run; a newer version is refused in one line.
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --vocab-size 256 --make-vocab-size-divisible-by 64
       --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
       --lr-warmup-iters 2 --mock-data --seed 7 --log-interval 1 --eval-iters 0 --num-threads 2
       --train-iters 10)
losses() { grep -o '"lm_loss": *[^,}]*' "$1" | sed 's/.*: *//'; }
tree_sum() { (cd "$1" && find . -type f | sort | xargs md5sum); }

"$MEGATRON" train "${MODEL[@]}" --metrics-file "$TMP/full.jsonl" >"$TMP/full.log" 2>&1 ||
    fail checkpoint_setup "$(tail -n 2 "$TMP/full.log")"
"$MEGATRON" train "${MODEL[@]}" --save "$TMP/ck" --save-interval 5 --exit-interval 5 \
    >"$TMP/save.log" 2>&1 || fail checkpoint_setup "$(tail -n 2 "$TMP/save.log")"
files=$(ls "$TMP/ck/iter_0000005" 2>/dev/null | tr '\n' ' ')
if [ "$files" = "index.json rank-00000.safetensors state.json " ]; then pass checkpoint_files
else fail checkpoint_files "iter_0000005 holds: $files"; fi

# damage NAME 'error regex' 'COMMAND': COMMAND (evaluated) damages a copy, $c; loading it fails
# with one line matching the regex, exit status 1, and the copy is left exactly as it was
damage() {
    local name=$1 want=$2
    c="$TMP/$name"; rm -rf "$c"; cp -r "$TMP/ck" "$c"
    eval "$3"
    local before; before=$(tree_sum "$c")
    expect_error "$name" 1 "$want" train "${MODEL[@]}" --load "$c" --save "$c" --save-interval 1
    [ "$before" = "$(tree_sum "$c")" ] || fail "${name}_leaves_the_checkpoint" "the checkpoint changed"
}
R=iter_0000005/rank-00000.safetensors
size=$(stat -c %s "$TMP/ck/$R")
damage checkpoint_truncated_file "rank-00000.safetensors is 1000 bytes but its index records $size: truncated or replaced \(tensor '" \
    'truncate -s 1000 "$c/$R"'
# a byte in the data section (the last tensors are the moments of the last parameters)
flip() { printf '\x5a' | dd of="$c/$R" bs=1 seek=$((size - 100)) conv=notrunc status=none; }
damage checkpoint_flipped_byte "rank-00000.safetensors: tensor '[^']+' .* fails its checksum: the file is corrupted" flip
damage checkpoint_missing_shard "rank-00000.safetensors is missing .*tensor '[^']+' needs it" 'rm "$c/$R"'
damage checkpoint_index_not_json "iter_0000005/index.json: not valid JSON" \
    'sed -i "s/\"tensors\"/\"tensors\" ]/" "$c/iter_0000005/index.json"'
drop_piece() { python3 - "$c/iter_0000005/index.json" <<'EOF' 2>/dev/null || sed -i '0,/"pieces": \[{/s//"pieces": [], "x": [{/' "$c/iter_0000005/index.json"
import json, sys
ix = json.load(open(sys.argv[1]))
ix["tensors"]["decoder.final_layernorm.weight"]["pieces"] = []
json.dump(ix, open(sys.argv[1], "w"))
EOF
}
damage checkpoint_index_lacks_a_piece "the pieces of tensor '[^']+' hold 0 of the [0-9]+ elements" drop_piece
damage checkpoint_newer_version "state.json: checkpoint format version 3 is newer than this megatron.c reads" \
    'sed -i "s/\"version\": 2/\"version\": 3/" "$c/iter_0000005/state.json"'
damage checkpoint_negative_loss_scale "state.json: grad_scaler.scale is missing or negative" \
    'sed -i "s/\"scale\": [0-9.e+-]*/\"scale\": -1/" "$c/iter_0000005/state.json"'
damage checkpoint_scaler_lacks_a_tracker "state.json: missing integer 'hysteresis_tracker'" \
    'sed -i "s/\"hysteresis_tracker\"/\"hysteresis\"/" "$c/iter_0000005/state.json"'

# kill -9 at each point of the save at iteration 10: 5 stays the latest and resumes exactly
for point in after-model before-rename before-tracker; do
    c="$TMP/kill_$point"; rm -rf "$c"; cp -r "$TMP/ck" "$c"
    # (in the background, so that the shell does not report the kill)
    MG_FAULT_CHECKPOINT=kill-$point "$MEGATRON" train "${MODEL[@]}" --load "$c" --save "$c" \
        --save-interval 5 >"$TMP/kill.log" 2>&1 &
    wait $!; rc=$?
    rm -f "$TMP/resumed.jsonl"
    if [ "$rc" -ne 137 ]; then fail "checkpoint_kill9_$point" "exit status $rc, expected 137 (SIGKILL)"
    elif [ "$(cat "$c/latest_checkpointed_iteration.txt")" != 5 ]; then
        fail "checkpoint_kill9_$point" "the tracker moved to $(cat "$c/latest_checkpointed_iteration.txt")"
    elif ! "$MEGATRON" train "${MODEL[@]}" --load "$c" --metrics-file "$TMP/resumed.jsonl" >"$TMP/resumed.log" 2>&1; then
        fail "checkpoint_kill9_$point" "resume failed: $(tail -n 2 "$TMP/resumed.log")"
    elif ! diff <(losses "$TMP/full.jsonl" | tail -n 5) <(losses "$TMP/resumed.jsonl") >/dev/null; then
        fail "checkpoint_kill9_$point" "resumed losses differ from the uninterrupted run's"
    else pass "checkpoint_kill9_$point"; fi
done
# and at random moments of a save of a larger model (kill -9 from outside)
BIG=("${MODEL[@]}" --num-layers 4 --hidden-size 256 --num-attention-heads 4 --vocab-size 8192 --lr-decay-iters 10)
"$MEGATRON" train "${BIG[@]}" --train-iters 2 --save "$TMP/big" --save-interval 1 >/dev/null 2>&1
ok=1
for delay in 0.05 0.1 0.2 0.3 0.5; do
    "$MEGATRON" train "${BIG[@]}" --train-iters 4 --load "$TMP/big" --save "$TMP/big" --save-interval 1 \
        >/dev/null 2>&1 &
    pid=$!; sleep "$delay"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    it=$(cat "$TMP/big/latest_checkpointed_iteration.txt")
    if ! "$MEGATRON" generate --load "$TMP/big" --prompt-ids "1 2 3" --max-new-tokens 1 >/dev/null 2>"$TMP/gen.err"; then
        ok=0; fail checkpoint_kill9_random "after kill -9 at $delay s the latest ($it) does not load: $(cat "$TMP/gen.err")"; break
    fi
done
[ $ok = 1 ] && pass checkpoint_kill9_random

# --async-save: the same losses as the plain run, every checkpoint committed (the last at the end
# of training), and the one at iteration 4 resumes like the uninterrupted run
c="$TMP/async"
if "$MEGATRON" train "${MODEL[@]}" --save "$c" --save-interval 4 --async-save \
    --metrics-file "$TMP/async.jsonl" >"$TMP/async.log" 2>&1 &&
    diff <(losses "$TMP/full.jsonl") <(losses "$TMP/async.jsonl") >/dev/null &&
    [ "$(cat "$c/latest_checkpointed_iteration.txt")" = 10 ] && [ -f "$c/iter_0000004/index.json" ] &&
    [ -f "$c/iter_0000008/index.json" ] && grep -q 'in the background; training stalled' "$TMP/async.log" &&
    ! ls -d "$c"/*tmp* >/dev/null 2>&1; then
    echo 4 >"$c/latest_checkpointed_iteration.txt"
    rm -f "$TMP/resumed.jsonl"
    "$MEGATRON" train "${MODEL[@]}" --load "$c" --metrics-file "$TMP/resumed.jsonl" >/dev/null 2>&1
    if diff <(losses "$TMP/full.jsonl" | tail -n 6) <(losses "$TMP/resumed.jsonl") >/dev/null; then pass checkpoint_async_save
    else fail checkpoint_async_save "resuming the background save of iteration 4 differs"; fi
else
    fail checkpoint_async_save "$(grep -E 'error|checkpoint' "$TMP/async.log" | tail -n 4)" "$(ls "$c")"
fi
expect_error checkpoint_format_unknown 2 "--ckpt-format expects torch_dist .*got 'safetensors'" \
    train "${MODEL[@]}" --ckpt-format safetensors
expect_error checkpoint_format_torch 2 "--ckpt-format torch writes PyTorch-specific files, which megatron.c does not read or write" \
    train "${MODEL[@]}" --ckpt-format torch

# Megatron's checkpoint flags: --no-save-optim writes no moments (and a resume says so);
# --no-load-optim continues the iteration and samples with fresh moments and LR schedule;
# --finetune starts at iteration 0 from the weights; --exit-on-missing-checkpoint fails
c="$TMP/noopt"
"$MEGATRON" train "${MODEL[@]}" --save "$c" --save-interval 5 --exit-interval 5 --no-save-optim >/dev/null 2>&1
out=$("$MEGATRON" train "${MODEL[@]}" --load "$c" 2>&1)
if grep -q '"optimizer": false' "$c/iter_0000005/state.json" && ! grep -q 'optimizer.exp_avg' "$c/iter_0000005/index.json" &&
    grep -q 'the checkpoint holds no optimizer state: Adam starts from zero moments' <<<"$out" &&
    grep -qE ' iteration +6/ +10 ' <<<"$out"; then pass checkpoint_no_save_optim
else fail checkpoint_no_save_optim "$(grep -E 'optimizer|iteration +6|error' <<<"$out" | head -n 3)"; fi
out=$("$MEGATRON" train "${MODEL[@]}" --load "$TMP/ck" --no-load-optim 2>&1)
if grep -q -- '--no-load-optim: Adam starts from zero moments and the LR schedule from its start' <<<"$out" &&
    grep -qE ' iteration +6/ +10 \| consumed samples: +24 ' <<<"$out"; then pass checkpoint_no_load_optim
else fail checkpoint_no_load_optim "$(grep -E 'optim|iteration +6|error' <<<"$out" | head -n 3)"; fi
out=$("$MEGATRON" train "${MODEL[@]}" --load "$TMP/ck" --finetune --train-iters 2 --lr-decay-iters 10 2>&1)
if grep -q -- '--finetune: Adam starts from zero moments and the LR schedule from its start, at iteration 0' <<<"$out" &&
    grep -qE ' iteration +1/ +2 \| consumed samples: +4 ' <<<"$out"; then pass checkpoint_finetune
else fail checkpoint_finetune "$(grep -E 'finetune|iteration +1|error' <<<"$out" | head -n 3)"; fi
mkdir -p "$TMP/empty"
expect_error checkpoint_exit_on_missing 1 "--exit-on-missing-checkpoint: .*/empty holds no checkpoint" \
    train "${MODEL[@]}" --load "$TMP/empty" --exit-on-missing-checkpoint

# a version 1 checkpoint (saved at iteration 2 with the flags below, without dropout) resumes like
# a straight run
V1=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 96
    --disable-bias-linear --mock-data --micro-batch-size 1 --global-batch-size 8 --lr 3e-3
    --lr-warmup-iters 1 --log-interval 1 --eval-iters 0 --num-threads 1 --lr-decay-iters 4
    --train-iters 4 --use-distributed-optimizer --attention-dropout 0 --hidden-dropout 0)
cp -r tests/golden/ckpt_v1 "$TMP/v1"
"$MEGATRON" train "${V1[@]}" --metrics-file "$TMP/v1full.jsonl" >/dev/null 2>&1
if "$MEGATRON" train "${V1[@]}" --load "$TMP/v1" --metrics-file "$TMP/v1res.jsonl" >"$TMP/v1.log" 2>&1 &&
    diff <(losses "$TMP/v1full.jsonl" | tail -n 2) <(losses "$TMP/v1res.jsonl") >/dev/null; then
    pass checkpoint_version1_resumes
else fail checkpoint_version1_resumes "$(tail -n 2 "$TMP/v1.log")" "$(losses "$TMP/v1res.jsonl" | tr '\n' ' ')"; fi
sed -i 's/"model_files": [0-9]*/"model_files": 0/; s/"pipeline_stages": 1,/"pipeline_stages": 1, "model_files": 0,/' "$TMP/v1"/iter_*/state.json
expect_error checkpoint_version1_bad_model_files 1 'state.json: model_files 0 is out of range' \
    train "${V1[@]}" --load "$TMP/v1"
finish
