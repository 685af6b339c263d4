#!/usr/bin/env bash
# GPU training throughput of `megatron bench` on a Mixtral-style MoE GPT against the PyTorch
# baseline (bench/baselines/torch_moe.py: bf16 autocast, torch._grouped_mm experts, fused AdamW,
# torch.compile), back to back on the same GPU in one command (bench/NOTES.md).
#   bench/moe_bench.sh [BUILD]          BUILD/megatron, built with the CUDA backend
# The model (Megatron's flags, given to megatron bench as they are; the baseline takes the shape
# ones under the same names):
#   --num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
#   --max-position-embeddings 1024 --position-embedding-type rope --normalization RMSNorm --swiglu
#   --disable-bias-linear --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2
#   --moe-ffn-hidden-size 2816 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2
#   --vocab-size 50304
# and for megatron bench --device DEVICE --micro-batch-size MBS --bf16 --lr 3e-4 --min-lr 3e-4
# (the baseline's constant learning rate; bench's other defaults match it: wd 0.1, betas 0.9/0.95,
# clipping 1.0, mock data).
# Environment:
#   MBS="8 4 2"        micro-batch sizes tried in order: a run that is out of memory (either
#                      implementation) moves both to the next size, so the pair runs at one size
#   ITERS=20 WARMUP=5  timed and untimed steps of each run (torch's warm-up includes compilation)
#   OUTDIR             where the JSON lines and logs go (default $OUT, else a new temporary
#                      directory); both results: OUTDIR/moe_bench.jsonl
#   PYTHON=python3     the Python that has PyTorch
#   DEVICE=cuda; ARGS, MEGATRON_ARGS, TORCH_ARGS: extra flags for both / megatron bench / the
#                      baseline (both take --num-layers --hidden-size --num-attention-heads
#                      --seq-length --vocab-size --num-experts --moe-router-topk
#                      --moe-ffn-hidden-size --moe-aux-loss-coeff); a check of this script on a CPU:
#                      DEVICE=cpu MBS=2 ITERS=2 WARMUP=1 TORCH_ARGS=--no-compile ARGS="--num-layers 2
#                      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256
#                      --moe-ffn-hidden-size 96"
# When megatron bench fails for another reason than memory (e.g. a backend without MoE ops), its
# one-line error is printed and the baseline still runs (with its own out-of-memory fallback).
# The last line: `moe-mixtral-LxH: megatron X tok/s, pytorch Y tok/s, ratio Z` (X/Y; "-" for what
# did not run).
set -uo pipefail

BENCH=moe_bench
MBS=${MBS:-8 4 2}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
compare_setup "$@" # BIN, the environment above, RESULTS, timed_run, run_outcome

# The shape, in flags both implementations take, then what only megatron bench needs to build the
# same model (the baseline has these fixed).
SHAPE=(--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --vocab-size 50304
    --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 2816 --moe-aux-loss-coeff 1e-2)
MEGATRON_MODEL=(--max-position-embeddings 1024 --position-embedding-type rope --normalization RMSNorm
    --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
    --moe-router-load-balancing-type aux_loss)

echo "moe_bench: $BIN vs $HERE/baselines/torch_moe.py; micro-batch sizes: $MBS; $ITERS timed steps" \
    "after $WARMUP; results in $RESULTS"
print_gpu_versions

MEGATRON_ERROR=
# run_one IMPL MBS: 0 done (its JSON line appended to RESULTS), 3 out of memory, 1 failed
# (megatron's one-line error in MEGATRON_ERROR).
run_one() {
    local impl=$1 mbs=$2 rc
    local base=$OUTDIR/$impl-moe-mbs$mbs
    if [ "$impl" = megatron ]; then
        timed_run "$impl micro-batch $mbs" "$base" 300 "$BIN" bench "${SHAPE[@]}" "${MEGATRON_MODEL[@]}" \
            --device "$DEVICE" --micro-batch-size "$mbs" --bf16 --lr 3e-4 --min-lr 3e-4 --iters "$ITERS" \
            --warmup "$WARMUP" "${ARGS_[@]}" "${MEGATRON_ARGS_[@]}" --json
    else
        timed_run "$impl micro-batch $mbs" "$base" 600 "$PYTHON" "$HERE/baselines/torch_moe.py" "${SHAPE[@]}" \
            --device "$DEVICE" --micro-batch-size "$mbs" --iters "$ITERS" --warmup "$WARMUP" "${ARGS_[@]}" \
            "${TORCH_ARGS_[@]}" --json
    fi
    rc=$?
    run_outcome "$rc" "$base"
    case $? in
    0)
        grep -E 'torch\._grouped_mm|a loop of matmuls|compile failed' "$base.log" | sed 's/^ */    /'
        return 0
        ;;
    3) return 3 ;;
    esac
    if [ "$impl" = megatron ]; then
        MEGATRON_ERROR=$(grep -E 'megatron: error:' "$base.log" | tail -n 1)
        [ -n "$MEGATRON_ERROR" ] || MEGATRON_ERROR="exit $rc: $(grep -v '^\s*$' "$base.log" | tail -n 1)"
        [ "$rc" -eq 124 ] && MEGATRON_ERROR="timed out after 300 s"
        echo "    $MEGATRON_ERROR"
    else
        print_log_tail "$base"
    fi
    return 1
}

t0=$(date +%s)
megatron_ok=1
for mbs in $MBS; do
    if [ "$megatron_ok" -eq 1 ]; then
        run_one megatron "$mbs"
        ours=$?
        [ "$ours" -eq 3 ] && continue
        [ "$ours" -ne 0 ] && megatron_ok=0 # not memory: the baseline alone, from this size down
    fi
    run_one torch "$mbs"
    theirs=$?
    [ "$theirs" -eq 3 ] && continue
    break
done
echo "moe_bench: took $(($(date +%s) - t0)) s"

# The summary: the largest micro-batch size at which both ran (else what ran).
MEGATRON_ERROR=$MEGATRON_ERROR "$PYTHON" - "$RESULTS" <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["micro_batch_size"], {})[r["impl"]] = r
both = [m for m in by if len(by[m]) == 2]
mbs = max(both) if both else max(by) if by else None
o, t = (by[mbs].get("megatron.c"), by[mbs].get("torch")) if by else (None, None)
some = o or t
name = f"moe-mixtral-{some['num_layers']}x{some['hidden_size']}" if some else "moe-mixtral"
err = os.environ.get("MEGATRON_ERROR", "")
if o is None and err:
    print(f"megatron did not run: {err}")
if t:
    print(f"pytorch: micro-batch {mbs}, {t['ms_per_step']:.1f} ms/step, experts {t['experts']}, "
          f"{'compiled' if t['compile'] else 'eager'}, {t['param_dtype']}, {t['mem_peak_gib']:.1f} GiB, "
          f"{t['tflops']:.0f} TFLOP/s (MFU {100 * t['mfu']:.1f}%), loss {t['loss_first']:.3f} -> {t['loss_last']:.3f}")
if o:
    print(f"megatron: micro-batch {mbs}, {o['ms_per_step']:.1f} ms/step, {o['mem_peak_gib']:.1f} GiB, "
          f"loss {o['loss_first']:.3f} -> {o['loss_last']:.3f}")
f = lambda r: f"{r['tokens_per_s']:.0f}" if r else "-"
ratio = f"{o['tokens_per_s'] / t['tokens_per_s']:.2f}" if o and t else "-"
print(f"{name}: megatron {f(o)} tok/s, pytorch {f(t)} tok/s, ratio {ratio}")
EOF
