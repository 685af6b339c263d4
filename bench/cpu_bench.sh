#!/usr/bin/env bash
# CPU throughput of megatron.c against the PyTorch baseline, same shape, same machine, same command.
#   bench/cpu_bench.sh build/megatron
# Trains a 4-layer, 256-hidden GPT on mock data for 12 iterations with 2 threads in each
# implementation, averages tokens/s over iterations 3..12 (the first two warm up), prints one JSON
# line per implementation and a table with the ratio megatron.c / torch (of the means, and of the
# medians, which resist the odd slow iteration on a shared machine).
# Bench scripts may use python3 (the product may not): it reads the JSONL and runs the baseline.
set -euo pipefail

MEGATRON=${1:-build/megatron}
HERE=$(cd "$(dirname "$0")" && pwd)
THREADS=${THREADS:-2}
ITERS=${ITERS:-12}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

SHAPE=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256
       --micro-batch-size 8 --vocab-size 1024 --make-vocab-size-divisible-by 128)

if [ ! -x "$MEGATRON" ]; then
    echo "cpu_bench: $MEGATRON is not an executable (run make first)" >&2
    exit 1
fi

export OMP_NUM_THREADS=$THREADS
if ! "$MEGATRON" train "${SHAPE[@]}" --max-position-embeddings 256 --global-batch-size 8 \
        --mock-data --train-iters "$ITERS" --lr 1e-3 --log-interval 1 \
        --attention-dropout 0 --hidden-dropout 0 \
        --metrics-file "$TMP/m.jsonl" --num-threads "$THREADS" >"$TMP/megatron.log" 2>&1; then
    echo "cpu_bench: megatron train failed; its output:" >&2
    tail -n 20 "$TMP/megatron.log" >&2
    exit 1
fi

python3 "$HERE/baselines/torch_cpu_gpt.py" "${SHAPE[@]}" --train-iters "$ITERS" \
    --lr 1e-3 --num-threads "$THREADS" >"$TMP/torch.json"

python3 - "$TMP/m.jsonl" "$TMP/torch.json" "$THREADS" <<'PY'
import json, statistics, sys
metrics_path, torch_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(metrics_path) if l.strip()]
timed = [r for r in rows if r["iteration"] > 2]
if not timed:
    sys.exit(f"cpu_bench: no metrics after iteration 2 in {metrics_path} ({len(rows)} lines)")
mean = lambda xs: sum(xs) / len(xs)
median = statistics.median
c = {
    "impl": "megatron.c",
    "tokens_per_s": mean([r["tokens_per_s"] for r in timed]),
    "median_tokens_per_s": median([r["tokens_per_s"] for r in timed]),
    "ms_per_iter": mean([r["ms_per_iter"] for r in timed]),
    "tflops": mean([r["tflops"] for r in timed if r.get("tflops") is not None] or [0.0]),
    "iters_timed": len(timed),
    "first_loss": rows[0]["lm_loss"],
    "last_loss": rows[-1]["lm_loss"],
    "threads": threads,
}
t = json.loads(open(torch_path).read().strip().splitlines()[-1])
print(json.dumps(c))
print(json.dumps(t))
ratio = c["tokens_per_s"] / t["tokens_per_s"]
ratio_med = c["median_tokens_per_s"] / t["median_tokens_per_s"]
print(json.dumps({"bench": "cpu_gpt_l4_h256_s256_b8", "ratio_c_over_torch": ratio,
                  "ratio_median_c_over_torch": ratio_med}))
print()
print(f"{'impl':<12} {'tokens/s':>10} {'median':>10} {'ms/iter':>10} {'TFLOP/s':>8} "
      f"{'first loss':>10} {'last loss':>10}")
for r in (c, t):
    fl, ll = r.get("first_loss"), r.get("last_loss")
    fmt = lambda v: f"{v:10.4f}" if isinstance(v, (int, float)) else f"{'n/a':>10}"
    print(f"{r['impl']:<12} {r['tokens_per_s']:10.1f} {r['median_tokens_per_s']:10.1f} "
          f"{r['ms_per_iter']:10.1f} "
          f"{r['tflops']:8.4f} {fmt(fl)} {fmt(ll)}")
print(f"ratio megatron.c / torch (tokens/s): mean {ratio:.2f}x, median {ratio_med:.2f}x, "
      f"threads: {threads}")
PY
