#!/usr/bin/env bash
# GPU training throughput of `megatron bench` against the PyTorch baseline
# (bench/baselines/torch_gpt2.py: nanoGPT-style, bf16 autocast, fused AdamW, torch.compile) on the
# GPT-2 shapes, back to back on the same GPU in one command (`make bench-gpu`, bench/NOTES.md).
#   bench/gpu_bench.sh [BUILD]          BUILD/megatron must be built with the CUDA backend
# Environment:
#   SHAPES="124m 350m 774m 1.5b"   shapes to run (default all four), e.g. SHAPES=124m
#   MBS="32 16 8 4"                micro-batch sizes tried in order: a run that is out of memory
#                                  (either implementation) moves both to the next size, so each
#                                  pair is compared at the same micro-batch size
#   ITERS=20 WARMUP=5              timed and untimed steps of each run (torch's warm-up includes
#                                  torch.compile's compilation, about a minute per shape)
#   OUTDIR                         where the JSON lines and logs go (default $OUT, else a new
#                                  temporary directory); all results: OUTDIR/gpu_bench.jsonl
#   PYTHON=python3                 the Python that has PyTorch
#   DEVICE=cuda; ARGS, MEGATRON_ARGS, TORCH_ARGS: extra flags for both / megatron bench / the
#                                  baseline (both take --num-layers --hidden-size
#                                  --num-attention-heads --seq-length --vocab-size); a check of
#                                  this script on a CPU: DEVICE=cpu SHAPES=124m MBS=2 ARGS="--num-layers
#                                  2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
#                                  --vocab-size 256" TORCH_ARGS=--no-compile ITERS=2 WARMUP=1
# Both print the same JSON fields (tokens_per_s, ms_per_step, mfu against the bf16 matmul peak
# each measured in its own process, mem_peak_gib = device memory in use after the timed steps);
# the table at the end has one row per shape.
set -uo pipefail

BENCH=gpu_bench
SHAPES=${SHAPES:-124m 350m 774m 1.5b}
MBS=${MBS:-32 16 8 4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
compare_setup "$@" # BIN, the environment above, RESULTS, timed_run, run_outcome
echo "gpu_bench: $BIN vs $HERE/baselines/torch_gpt2.py; shapes: $SHAPES; micro-batch sizes: $MBS;" \
    "$ITERS timed steps after $WARMUP; results in $RESULTS"
print_gpu_versions

# run_one IMPL SHAPE MBS: 0 done (its JSON line appended to RESULTS), 3 out of memory, 1 failed.
run_one() {
    local impl=$1 shape=$2 mbs=$3 rc
    local base=$OUTDIR/$impl-$shape-mbs$mbs label="$impl gpt2-$shape micro-batch $mbs"
    if [ "$impl" = megatron ]; then
        timed_run "$label" "$base" 300 "$BIN" bench --device "$DEVICE" --model "gpt2-$shape" \
            --micro-batch-size "$mbs" --iters "$ITERS" --warmup "$WARMUP" "${ARGS_[@]}" "${MEGATRON_ARGS_[@]}" --json
    else
        timed_run "$label" "$base" 420 "$PYTHON" "$HERE/baselines/torch_gpt2.py" --device "$DEVICE" \
            --model "gpt2-$shape" --micro-batch-size "$mbs" --iters "$ITERS" --warmup "$WARMUP" "${ARGS_[@]}" \
            "${TORCH_ARGS_[@]}" --json
    fi
    run_outcome $? "$base"
    rc=$?
    [ "$rc" -eq 1 ] && print_log_tail "$base"
    return "$rc"
}

for shape in $SHAPES; do
    t0=$(date +%s)
    for mbs in $MBS; do
        run_one megatron "$shape" "$mbs"
        ours=$?
        [ "$ours" -eq 3 ] && continue
        run_one torch "$shape" "$mbs"
        theirs=$?
        [ "$theirs" -eq 3 ] && continue
        break
    done
    echo "gpu_bench: gpt2-$shape took $(($(date +%s) - t0)) s"
done

# The table: per shape, the largest micro-batch size at which both ran (else what ran).
"$PYTHON" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
print("| shape | mbs | ours tok/s | torch tok/s | ours/torch | ours MFU | torch MFU | ours ms/step | torch ms/step | ours mem GiB | torch mem GiB | peak TFLOP/s ours / torch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
key = lambda r: f'{r["model"]} ({r["num_layers"]}x{r["hidden_size"]})'
for shape in dict.fromkeys(key(r) for r in rows):
    by = {}
    for r in rows:
        if key(r) == shape:
            by.setdefault(r["micro_batch_size"], {})[r["impl"]] = r
    both = [m for m in by if len(by[m]) == 2]
    mbs = max(both) if both else max(by)
    o, t = by[mbs].get("megatron.c"), by[mbs].get("torch")
    f = lambda r, k, fmt: format(r[k], fmt) if r else "-"
    ratio = f"{o['tokens_per_s'] / t['tokens_per_s']:.2f}x" if o and t else "-"
    print(f"| {shape} | {mbs} | {f(o, 'tokens_per_s', '.0f')} | {f(t, 'tokens_per_s', '.0f')} | {ratio} | "
          f"{f(o, 'mfu', '.1%')} | {f(t, 'mfu', '.1%')} | {f(o, 'ms_per_step', '.1f')} | {f(t, 'ms_per_step', '.1f')} | "
          f"{f(o, 'mem_peak_gib', '.1f')} | {f(t, 'mem_peak_gib', '.1f')} | "
          f"{f(o, 'peak_tflops', '.0f')} / {f(t, 'peak_tflops', '.0f')} |")
EOF
