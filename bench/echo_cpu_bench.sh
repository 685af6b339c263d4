#!/usr/bin/env bash
# ECHO on CPU ranks: tokens/s and expert-parallel load imbalance of an MoE model under EP 2, with a
# skewed router without and with --moe-enable-echo, and the unskewed router for reference.
#   bench/echo_cpu_bench.sh [build]
# The skew is the test hook MG_TEST_EXPERT_BIAS: a fixed expert bias (no bias updates) that sends
# every token's top-2 to experts 0 and 1, both homed on EP rank 0, so rank 0 computes all the
# experts' rows while rank 1 waits (imbalance 2.00). Echo clones the hot experts into rank 1's spare
# slot. Each rank runs one thread; tokens/s is the mean over iterations 3..ITERS (the first two warm
# up). Prints one JSON line per run and a table.
# Bench scripts may use python3 (the product may not): it reads the metrics files.
set -euo pipefail

BUILD=${1:-build}
BIN=$BUILD/megatron
ITERS=${ITERS:-12}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

if [ ! -x "$BIN" ]; then
    echo "echo_cpu_bench: $BIN is not an executable (run make first)" >&2
    exit 1
fi

ARGS=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256
    --max-position-embeddings 256 --vocab-size 1024 --make-vocab-size-divisible-by 128
    --micro-batch-size 4 --global-batch-size 8 --mock-data --train-iters "$ITERS" --lr 1e-3
    --log-interval 1 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0 --device cpu
    --num-threads 1 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024
    --expert-model-parallel-size 2 --moe-router-enable-expert-bias --moe-router-bias-update-rate 0
    --moe-router-score-function sigmoid)
SKEW=1,1,0,0,0,0,0,0
ECHO=(--moe-enable-echo --moe-num-echo-experts 2)

run() { # NAME BIAS FLAG...
    local name=$1 bias=$2
    shift 2
    if ! MG_TEST_EXPERT_BIAS=$bias mpirun --oversubscribe -np 2 -x MG_TEST_EXPERT_BIAS "$BIN" train \
            "${ARGS[@]}" "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1; then
        echo "echo_cpu_bench: the $name run failed; its output:" >&2
        tail -n 5 "$TMP/$name.log" >&2
        exit 1
    fi
}
run skewed "$SKEW"
run skewed_echo "$SKEW" "${ECHO[@]}"
run balanced ""

python3 - "$TMP" <<'PY'
import json, statistics, sys
d = sys.argv[1]
out = []
for name in ("skewed", "skewed_echo", "balanced"):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    timed = [r for r in rows if r["iteration"] > 2]
    if not timed:
        sys.exit(f"echo_cpu_bench: no metrics after iteration 2 for {name}")
    r = {"run": name,
         "tokens_per_s": statistics.mean(x["tokens_per_s"] for x in timed),
         "median_tokens_per_s": statistics.median(x["tokens_per_s"] for x in timed),
         "ms_per_iter": statistics.mean(x["ms_per_iter"] for x in timed),
         "moe_ep_load_imbalance": statistics.mean(x["moe_ep_load_imbalance"] for x in timed),
         "last_loss": rows[-1]["lm_loss"]}
    if "moe_ep_load_imbalance_after_echo" in timed[0]:
        r["moe_ep_load_imbalance_after_echo"] = statistics.mean(
            x["moe_ep_load_imbalance_after_echo"] for x in timed)
    out.append(r)
    print(json.dumps(r))
base = out[0]["tokens_per_s"]
print(f"{'run':<12} {'tok/s':>8} {'median':>8} {'ms/iter':>8} {'imbalance':>10} {'after echo':>10} {'vs skewed':>9}")
for r in out:
    after = r.get("moe_ep_load_imbalance_after_echo")
    print(f"{r['run']:<12} {r['tokens_per_s']:8.0f} {r['median_tokens_per_s']:8.0f} {r['ms_per_iter']:8.1f} "
          f"{r['moe_ep_load_imbalance']:10.2f} {'-' if after is None else f'{after:.2f}':>10} "
          f"{r['tokens_per_s'] / base:8.2f}x")
PY
