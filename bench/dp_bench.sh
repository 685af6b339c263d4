#!/usr/bin/env bash
# Data-parallel weak scaling of `megatron train` against PyTorch DDP (bench/baselines/torch_gpt2.py
# under torchrun: DistributedDataParallel around the compiled model, bf16 autocast) on GPT-2
# shapes, both in one command on the same GPUs (bench/NOTES.md). Each rank trains micro-batch
# MBS of sequence 1024 (vocabulary 50304) per step, one micro-batch per step, so the global batch
# is MBS x N on N GPUs; scaling efficiency = tokens/s on N GPUs / (N x tokens/s on 1 GPU), every
# tokens/s the global rate.
#   bench/dp_bench.sh [BUILD]          BUILD/megatron must be built with the CUDA backend and MPI
# megatron.c: `megatron train --mock-data` with Megatron's model flags (the shapes of `megatron
# bench --model gpt2-...`), AdamW lr 6e-4 constant, weight decay 0.1, betas (0.9, 0.95), bf16; 1
# GPU plain, N GPUs under `mpirun -np N`; its tokens/s is the median over the log intervals
# (--metrics-file) after the first (the warm-up). torch: 1 GPU plain, N GPUs under `torchrun
# --standalone --nproc_per_node N`; the same first LOG_INTERVAL steps untimed (torch.compile's
# compilation is in them), tokens/s over the timed steps that follow.
# Environment:
#   SHAPES="350m 1.5b"      GPT-2 shapes: 124m 350m 774m 1.5b, or tiny (2 layers, hidden 64, 4 heads,
#                           sequence 32, vocabulary 256: a check of this script)
#   NGPUS                   GPU (rank) counts; default 1 and each of 2 4 that nvidia-smi lists (on
#                           DEVICE=cpu: 1 2); 1 always runs, it is the base of the scaling
#   MBS=8                   micro-batch size per GPU
#   ITERS=30 LOG_INTERVAL=5 steps of each run, and the log interval (the first one is warm-up)
#   OUTDIR                  where the JSON lines and logs go (default $OUT, else a new temporary
#                           directory); one summary line per run: OUTDIR/dp_bench.jsonl
#   PYTHON=python3          the Python that has PyTorch (torchrun is its torch.distributed.run)
#   DEVICE=cuda; MEGATRON_ARGS, TORCH_ARGS: extra flags for megatron train / the baseline, e.g.
#                           MEGATRON_ARGS="--overlap-grad-reduce --use-distributed-optimizer"
# A check on a CPU (MPI and gloo, one thread a rank, torch eager):
#   DEVICE=cpu SHAPES=tiny NGPUS="1 2" ITERS=6 bench/dp_bench.sh
set -uo pipefail

BENCH=dp_bench
SHAPES=${SHAPES:-350m 1.5b}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
parallel_setup "$@" # BIN, the environment above, MPIRUN, shape_dims, summarize
echo "dp_bench: $BIN vs $HERE/baselines/torch_gpt2.py (DDP); shapes: $SHAPES; GPUs: $NGPUS;" \
    "micro-batch $MBS per GPU; $ITERS steps, the first $LOG_INTERVAL warm-up; results in $RESULTS"
print_versions

# run_one IMPL SHAPE N: 0 when its summary line is in RESULTS.
run_one() {
    local impl=$1 shape=$2 n=$3 rc start L H NH S V
    local base=$OUTDIR/$impl-$shape-mbs$MBS-n$n
    read -r L H NH S V <<<"$(shape_dims "$shape")"
    start=$(date +%s)
    if [ "$impl" = megatron.c ]; then
        megatron_train "$n" "$shape" $((MBS * n)) "$base" 420
    else
        local launch=("$PYTHON")
        [ "$n" -gt 1 ] && launch=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$n")
        timeout 420 "${launch[@]}" "$HERE/baselines/torch_gpt2.py" --device "$DEVICE" --num-layers "$L" \
            --hidden-size "$H" --num-attention-heads "$NH" --seq-length "$S" --vocab-size "$V" \
            --micro-batch-size "$MBS" --warmup "$LOG_INTERVAL" --iters $((ITERS - LOG_INTERVAL)) \
            --json "${TORCH_ARGS_[@]}" >"$base.jsonl" 2>"$base.log"
    fi
    rc=$?
    echo "  $impl $shape on $n: exit $rc after $(($(date +%s) - start)) s"
    if [ "$rc" -eq 0 ] && summarize "$impl" "$shape" "$base.jsonl" micro_batch_size="$MBS" world_size="$n" >>"$RESULTS"; then
        tail -n 1 "$RESULTS" | "$PYTHON" -c 'import json, sys; print("    %.0f tokens/s" % json.load(sys.stdin)["tokens_per_s"])'
        return 0
    fi
    failure_message "$rc" "$base" 420
    return 1
}

for shape in $SHAPES; do
    for n in $NGPUS; do
        run_one megatron.c "$shape" "$n"
        run_one torch "$shape" "$n"
    done
done

"$PYTHON" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tok = {(r["impl"], r["shape"], r["micro_batch_size"], r["world_size"]): r["tokens_per_s"] for r in rows}
print()
print("| shape | mbs | N | megatron.c tok/s | scaling | torch DDP tok/s | scaling | megatron/torch |")
print("|---|---|---|---|---|---|---|---|")
for shape, mbs, n in dict.fromkeys((r["shape"], r["micro_batch_size"], r["world_size"]) for r in rows):
    cells = []
    for impl in ("megatron.c", "torch"):
        t, t1 = tok.get((impl, shape, mbs, n)), tok.get((impl, shape, mbs, 1))
        cells += [f"{t:.0f}" if t else "-", f"{t / (n * t1):.1%}" if t and t1 else "-"]
    o, t = tok.get(("megatron.c", shape, mbs, n)), tok.get(("torch", shape, mbs, n))
    print(f"| {shape} | {mbs} | {n} | {' | '.join(cells)} | {f'{o / t:.2f}x' if o and t else '-'} |")
EOF
