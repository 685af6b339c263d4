#!/usr/bin/env bash
# Tensor-parallel strong scaling of `megatron train` against PyTorch's own tensor parallelism
# (bench/baselines/torch_gpt2.py --tp under torchrun: torch.distributed.tensor.parallel's
# parallelize_module on a 1-D DeviceMesh, Megatron-style sequence parallel, loss_parallel, the
# model compiled after the parallelization, bf16 autocast, fused AdamW) on GPT-2 shapes, both in one
# command on the same GPUs (bench/NOTES.md). With tensor parallelism all T GPUs train ONE replica:
# each step is one micro-batch of MBS sequences of 1024 (vocabulary 50304) whatever T, so the
# global batch is MBS; scaling = tokens/s at T / (T x tokens/s on 1 GPU), each framework against
# its own one-GPU run from the same call (the target: TP 2 at >= 85%).
#   bench/tp_bench.sh [BUILD]          BUILD/megatron must be built with the CUDA backend and MPI
# megatron.c: `megatron train --mock-data` with Megatron's model flags (the shapes of `megatron
# bench --model gpt2-...`), AdamW lr 6e-4 constant, weight decay 0.1, betas (0.9, 0.95), bf16; 1
# GPU plain, T GPUs `mpirun -np T ... --tensor-model-parallel-size T --sequence-parallel`; its
# tokens/s is the median over the log intervals (--metrics-file) after the first (the warm-up).
# torch: 1 GPU plain (the model of bench-gpu), T GPUs `torchrun --standalone --nproc_per_node T
# ... --tp`, every rank on the same tokens, tokens/s rank 0's own (one replica); the same first
# LOG_INTERVAL steps untimed (torch.compile's compilation is in them), tokens/s over the timed
# steps that follow. Where torch.compile fails on the parallel model, the baseline runs eager and
# its JSON line says "compile": false (the table marks it "eager"). A run that fails (or a shape
# whose heads T does not divide: 1.5b's 25) leaves a line with "error" and the bench goes on.
# Environment:
#   SHAPES="350m 774m"      GPT-2 shapes: 124m 350m 774m 1.5b (25 heads: no T > 1 divides them), or tiny (2 layers, hidden 64, 4 heads,
#                           sequence 32, vocabulary 256: a check of this script)
#   NGPUS                   tensor-parallel sizes T; default 1 and each of 2 4 that nvidia-smi lists
#                           (on DEVICE=cpu: 1 2); 1 always runs, it is the base of the scaling
#   MBS=8                   micro-batch size (of the one replica)
#   ITERS=30 LOG_INTERVAL=5 steps of each run, and the log interval (the first one is warm-up)
#   OUTDIR                  where the JSON lines and logs go (default $OUT, else a new temporary
#                           directory); one summary line per run: OUTDIR/tp_bench.jsonl
#   PYTHON=python3          the Python that has PyTorch (torchrun is its torch.distributed.run)
#   DEVICE=cuda; MEGATRON_ARGS, TORCH_ARGS: extra flags for megatron train / the baseline, e.g.
#                           TORCH_ARGS="--compile-scope blocks" (each block compiled, torchtitan's way)
# A check on a CPU (MPI and gloo, one thread a rank, torch eager):
#   DEVICE=cpu SHAPES=tiny NGPUS="1 2" ITERS=6 bench/tp_bench.sh
set -uo pipefail

BENCH=tp_bench
SHAPES=${SHAPES:-350m 774m}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
parallel_setup "$@" # BIN, the environment above, MPIRUN, shape_dims, summarize
echo "tp_bench: $BIN vs $HERE/baselines/torch_gpt2.py --tp (DTensor TP + SP); shapes: $SHAPES;" \
    "tensor-parallel sizes: $NGPUS; micro-batch $MBS (one replica); $ITERS steps, the first" \
    "$LOG_INTERVAL warm-up; results in $RESULTS"
print_versions

# A line for RESULTS that says why a run has no result.
record_error() { # IMPL SHAPE T RC MESSAGE
    "$PYTHON" - "$@" "$MBS" >>"$RESULTS" <<'EOF'
import json, sys
impl, shape, n, rc, msg, mbs = sys.argv[1:]
print(json.dumps({"impl": impl, "shape": shape, "micro_batch_size": int(mbs), "global_batch_size": int(mbs),
                  "world_size": int(n), "tensor_parallel": int(n), "exit": int(rc), "error": msg}))
EOF
}

# run_one IMPL SHAPE T: 0 when its summary line is in RESULTS; otherwise an error line is.
run_one() {
    local impl=$1 shape=$2 n=$3 rc start L H NH S V msg
    local base=$OUTDIR/$impl-$shape-mbs$MBS-tp$n
    read -r L H NH S V <<<"$(shape_dims "$shape")"
    if [ $((NH % n)) -ne 0 ]; then
        msg="$NH attention heads are not divisible by the tensor-parallel size $n"
        echo "  $impl $shape on $n: skipped, $msg"
        record_error "$impl" "$shape" "$n" 0 "$msg"
        return 1
    fi
    start=$(date +%s)
    if [ "$impl" = megatron.c ]; then
        local tp=()
        [ "$n" -gt 1 ] && tp=(--tensor-model-parallel-size "$n" --sequence-parallel)
        megatron_train "$n" "$shape" "$MBS" "$base" 420 "${tp[@]}"
    else
        local launch=("$PYTHON") tp=()
        [ "$n" -gt 1 ] && launch=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$n") &&
            tp=(--tp)
        timeout 420 "${launch[@]}" "$HERE/baselines/torch_gpt2.py" --device "$DEVICE" --num-layers "$L" \
            --hidden-size "$H" --num-attention-heads "$NH" --seq-length "$S" --vocab-size "$V" \
            --micro-batch-size "$MBS" --warmup "$LOG_INTERVAL" --iters $((ITERS - LOG_INTERVAL)) \
            --json "${tp[@]}" "${TORCH_ARGS_[@]}" >"$base.jsonl" 2>"$base.log"
    fi
    rc=$?
    echo "  $impl $shape on $n: exit $rc after $(($(date +%s) - start)) s"
    if [ "$rc" -eq 0 ] && summarize "$impl" "$shape" "$base.jsonl" micro_batch_size="$MBS" global_batch_size="$MBS" \
        world_size="$n" tensor_parallel="$n" >>"$RESULTS"; then
        tail -n 1 "$RESULTS" | "$PYTHON" -c 'import json, sys; r = json.load(sys.stdin)
eager = r.get("compile") is False and r.get("device") == "cuda"
print("    %.0f tokens/s%s" % (r["tokens_per_s"], " (torch eager)" if eager else ""))'
        return 0
    fi
    failure_message "$rc" "$base" 420
    record_error "$impl" "$shape" "$n" "$rc" "$MSG"
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
key = lambda r: (r["impl"], r["shape"], r["micro_batch_size"], r["world_size"])
tok = {key(r): r["tokens_per_s"] for r in rows if "tokens_per_s" in r}
eager = {key(r) for r in rows if r.get("compile") is False and r.get("device") == "cuda"}
err = {key(r) for r in rows if "error" in r}
print()
print("| shape | mbs | T | megatron.c tok/s | scaling | torch TP tok/s | scaling | megatron/torch |")
print("|---|---|---|---|---|---|---|---|")
for shape, mbs, n in dict.fromkeys((r["shape"], r["micro_batch_size"], r["world_size"]) for r in rows):
    cells = []
    for impl in ("megatron.c", "torch"):
        k = (impl, shape, mbs, n)
        t, t1 = tok.get(k), tok.get((impl, shape, mbs, 1))
        cells += [(f"{t:.0f}" + (" eager" if k in eager else "")) if t else ("error" if k in err else "-"),
                  f"{t / (n * t1):.1%}" if t and t1 else "-"]
    o, t = tok.get(("megatron.c", shape, mbs, n)), tok.get(("torch", shape, mbs, n))
    print(f"| {shape} | {mbs} | {n} | {' | '.join(cells)} | {f'{o / t:.2f}x' if o and t else '-'} |")
for r in rows:
    if "error" in r:
        print(f"  {r['impl']} {r['shape']} T={r['world_size']}: {r['error']}")
EOF
