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

BUILD=${1:-build}
BIN=$BUILD/megatron
HERE=$(cd "$(dirname "$0")" && pwd)
SHAPES=${SHAPES:-124m 350m 774m 1.5b}
MBS=${MBS:-32 16 8 4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
read -r -a ARGS_ <<<"${ARGS:-}"
read -r -a MEGATRON_ARGS_ <<<"${MEGATRON_ARGS:-}"
read -r -a TORCH_ARGS_ <<<"${TORCH_ARGS:-}"
OUTDIR=${OUTDIR:-${OUT:-$(mktemp -d)}}
RESULTS=$OUTDIR/gpu_bench.jsonl
# Never NVLink multicast on these machines (KINDS.md), whatever the programs do.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

[ -x "$BIN" ] || { echo "gpu_bench: $BIN is not built (make BUILD=$BUILD $BIN)" >&2; exit 1; }
mkdir -p "$OUTDIR"
: >"$RESULTS"
echo "gpu_bench: $BIN vs $HERE/baselines/torch_gpt2.py; shapes: $SHAPES; micro-batch sizes: $MBS;" \
    "$ITERS timed steps after $WARMUP; results in $RESULTS"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv 2>&1 | sed 's/^/  /'
"$PYTHON" -c 'import torch; print("  torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1

is_oom() { grep -qiE 'out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|OutOfMemoryError' "$1"; }

# run_one IMPL SHAPE MBS: 0 done (its JSON line appended to RESULTS), 3 out of memory, 1 failed.
run_one() {
    local impl=$1 shape=$2 mbs=$3 rc start
    local base=$OUTDIR/$impl-$shape-mbs$mbs
    start=$(date +%s)
    if [ "$impl" = megatron ]; then
        timeout 300 "$BIN" bench --device "$DEVICE" --model "gpt2-$shape" --micro-batch-size "$mbs" \
            --iters "$ITERS" --warmup "$WARMUP" "${ARGS_[@]}" "${MEGATRON_ARGS_[@]}" --json \
            >"$base.json" 2>"$base.log"
    else
        timeout 420 "$PYTHON" "$HERE/baselines/torch_gpt2.py" --device "$DEVICE" --model "gpt2-$shape" \
            --micro-batch-size "$mbs" --iters "$ITERS" --warmup "$WARMUP" "${ARGS_[@]}" \
            "${TORCH_ARGS_[@]}" --json >"$base.json" 2>"$base.log"
    fi
    rc=$?
    echo "  $impl gpt2-$shape micro-batch $mbs: exit $rc after $(($(date +%s) - start)) s"
    if [ "$rc" -eq 0 ] && grep -q '^{' "$base.json"; then
        grep '^{' "$base.json" | tail -n 1 >>"$RESULTS"
        return 0
    fi
    if is_oom "$base.log"; then
        echo "    out of memory: $(grep -iE -m1 'out of memory|AllocFailed|ALLOC_FAILED' "$base.log" | cut -c1-200)"
        return 3
    fi
    [ "$rc" -eq 124 ] && echo "    timed out"
    echo "    failed; the end of $base.log:"
    tail -n 5 "$base.log" | sed 's/^/      /'
    return 1
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
