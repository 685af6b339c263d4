#!/usr/bin/env bash
# Checkpoint speed (train/checkpoint.h): save and load of a GPT-2 shape with its optimizer state
# (fp32 master weights and both Adam moments: 12 bytes per parameter) on one GPU, next to the
# disk's own sequential write speed measured by dd (conv=fsync) in the same command.
#   bench/checkpoint_bench.sh [BUILD]     BUILD/megatron with the CUDA backend
# Environment: SHAPE=1.5b (bench/lib.sh shapes), CKPT_DIR (default /tmp/mg_ckpt_bench: local
# disk), OUTDIR (default $OUT, else a new temporary directory), DEVICE=cuda, MBS=4.
# Runs:
#   sync    4 iterations, saved at the end: "checkpoint save" seconds and GB/s per rank;
#   load    the same model resumed from it: "checkpoint load" (the files are still in the page
#           cache: a warm read);
#   async   6 iterations with --async-save at iteration 3 (and the end): the stall (copy to the
#           pinned staging) against the synchronous save's time, and the iteration times around it.
# Prints one JSON line per measure and a short table.
set -uo pipefail
BUILD=${1:-build}
BIN=$BUILD/megatron
SHAPE=${SHAPE:-1.5b}
DEVICE=${DEVICE:-cuda}
MBS=${MBS:-4}
CKPT_DIR=${CKPT_DIR:-/tmp/mg_ckpt_bench}
OUTDIR=${OUTDIR:-${OUT:-$(mktemp -d)}}
HERE=$(cd "$(dirname "$0")" && pwd)
shape_dims() { sed -n "/^shape_dims()/,/^}/p" "$HERE/lib.sh" | bash -c "$(cat); shape_dims $1"; }
read -r L H NH S V <<<"$(shape_dims "$SHAPE")"
[ -n "$L" ] || { echo "checkpoint_bench: unknown shape $SHAPE" >&2; exit 1; }
mkdir -p "$OUTDIR"
RESULTS=$OUTDIR/checkpoint_bench.jsonl
: >"$RESULTS"
MODEL=(--num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" --seq-length "$S"
    --max-position-embeddings "$S" --vocab-size "$V" --mock-data --micro-batch-size "$MBS"
    --global-batch-size "$((2 * MBS))" --lr 6e-4 --lr-warmup-iters 0 --lr-decay-style constant
    --weight-decay 0.1 --adam-beta2 0.95 --log-interval 1 --eval-iters 0 --device "$DEVICE")
num() { grep -oE "$1" "$2" | head -n 1 | grep -oE '[0-9]+\.[0-9]+' | sed -n "${3:-1}p"; }

echo "checkpoint_bench: shape $SHAPE ($L layers, hidden $H), checkpoints in $CKPT_DIR, results in $RESULTS"
rm -rf "$CKPT_DIR"; mkdir -p "$CKPT_DIR"
# the disk: 4 GB written and flushed
dd if=/dev/zero of="$CKPT_DIR/dd.bin" bs=64M count=64 conv=fsync 2>"$OUTDIR/dd.log"
dd_gbs=$(awk '/copied/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /GB\/s|MB\/s/) print ($(i + 1) ~ /MB/ ? $i / 1000 : $i) }' "$OUTDIR/dd.log")
rm -f "$CKPT_DIR/dd.bin"
echo "{\"measure\": \"disk_write_dd\", \"gb_per_s\": ${dd_gbs:-0}}" >>"$RESULTS"

"$BIN" train "${MODEL[@]}" --train-iters 4 --save "$CKPT_DIR/sync" >"$OUTDIR/sync.log" 2>&1 ||
    { echo "sync run failed: $(tail -n 3 "$OUTDIR/sync.log")" >&2; exit 1; }
save_gb=$(num 'wrote [0-9.]+ GB' "$OUTDIR/sync.log"); save_s=$(num 'GB in [0-9.]+ s' "$OUTDIR/sync.log")
save_gbs=$(num 'GB in [0-9.]+ s \([0-9.]+ GB/s' "$OUTDIR/sync.log" 2)
echo "{\"measure\": \"save\", \"gb\": $save_gb, \"seconds\": $save_s, \"gb_per_s\": $save_gbs}" >>"$RESULTS"

"$BIN" train "${MODEL[@]}" --train-iters 5 --load "$CKPT_DIR/sync" >"$OUTDIR/load.log" 2>&1 ||
    { echo "load run failed: $(tail -n 3 "$OUTDIR/load.log")" >&2; exit 1; }
load_gb=$(num 'read [0-9.]+ GB' "$OUTDIR/load.log"); load_s=$(num 'GB in [0-9.]+ s' "$OUTDIR/load.log")
load_gbs=$(num 'GB in [0-9.]+ s \([0-9.]+ GB/s' "$OUTDIR/load.log" 2)
echo "{\"measure\": \"load_warm\", \"gb\": $load_gb, \"seconds\": $load_s, \"gb_per_s\": $load_gbs}" >>"$RESULTS"
rm -rf "$CKPT_DIR/sync"

# async: iteration 3's checkpoint is removed as soon as it is committed (disk space: one at a time)
"$BIN" train "${MODEL[@]}" --train-iters 6 --save "$CKPT_DIR/async" --save-interval 3 --async-save \
    >"$OUTDIR/async.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
    grep -q 'saved checkpoint from iteration       3' "$OUTDIR/async.log" && { rm -rf "$CKPT_DIR/async/iter_0000003"; break; }
    sleep 0.5
done
wait "$pid" || { echo "async run failed: $(tail -n 3 "$OUTDIR/async.log")" >&2; exit 1; }
stalls=$(grep -oE 'training stalled [0-9.]+ s' "$OUTDIR/async.log" | grep -oE '[0-9]+\.[0-9]+')
stall=$(head -n 1 <<<"$stalls"); stall2=$(sed -n 2p <<<"$stalls")
bg_s=$(grep 'in the background$' "$OUTDIR/async.log" | head -n 1 | grep -oE 'in [0-9.]+ s' | grep -oE '[0-9.]+')
iter_ms() { grep -E "iteration +$1/" "$OUTDIR/async.log" | grep -oE 'per iteration \(ms\): [0-9.]+' | grep -oE '[0-9.]+$'; }
echo "{\"measure\": \"async_save\", \"stall_seconds\": $stall, \"stall_seconds_second_save\": ${stall2:-0}, \"background_seconds\": ${bg_s:-0}, \"stall_over_sync_save\": $(awk -v a="$stall" -v b="$save_s" 'BEGIN { printf "%.4f", a / b }'), \"ms_iter_2\": $(iter_ms 2), \"ms_iter_4\": $(iter_ms 4), \"ms_iter_5\": $(iter_ms 5)}" >>"$RESULTS"
rm -rf "$CKPT_DIR"

echo
printf '%-14s %s\n' measure result
while read -r line; do printf '  %s\n' "$line"; done <"$RESULTS"
