#!/usr/bin/env bash
# GPT-2 tokenizer throughput of megatron.c against Hugging Face `tokenizers`, one thread each,
# same files, same text, same machine, same command:
#   bench/tokenizer_bench.sh [build dir]        (make bench-tokenizer builds and runs it)
# For each mode (the whole corpus as one text; its paragraphs as separate documents) prints one
# JSON line per implementation and a table of MB/s with the ratio megatron.c / tokenizers. The
# per-core figure is MB per second of process CPU time, which a busy shared machine disturbs less
# than wall time; wall time is printed too. The two must produce the same ids (count + checksum).
# Bench scripts may use python3 (the product may not).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VOCAB=${VOCAB:-$ROOT/data/gpt2/encoder.json}
MERGES=${MERGES:-$ROOT/data/gpt2/vocab.bpe}
TEXT=${TEXT:-$ROOT/data/moby-dick.txt}
MIN_S=${MIN_S:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$BUILD/tokenize_bench" ]; then
    echo "tokenizer_bench: $BUILD/tokenize_bench is missing (run make bench-tokenizer)" >&2
    exit 1
fi
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
for mode in whole paras; do
    "$BUILD/tokenize_bench" "$VOCAB" "$MERGES" "$TEXT" "$mode" "$MIN_S" | tee -a "$TMP/all.jsonl"
    python3 "$HERE/baselines/hf_tokenize.py" "$VOCAB" "$MERGES" "$TEXT" "$mode" "$MIN_S" |
        tee -a "$TMP/all.jsonl"
done

python3 - "$TMP/all.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
status = 0
print(f"{'mode':6} {'impl':14} {'cold':>7} {'best':>7} {'median':>7} {'wall med':>8}"
      "  MB/s (CPU time)")
for mode in ("whole", "paras"):
    c = next(r for r in rows if r["mode"] == mode and r["impl"] == "megatron.c")
    h = next(r for r in rows if r["mode"] == mode and r["impl"] == "hf-tokenizers")
    for r in (c, h):
        print(f"{mode:6} {r['impl']:14} {r['cold_cpu_mb_s']:7.2f} {r['best_cpu_mb_s']:7.2f} "
              f"{r['median_cpu_mb_s']:7.2f} {r['median_wall_mb_s']:8.2f}")
    same = c["ids"] == h["ids"] and c["fnv"] == h["fnv"]
    ratio = {k: c[k] / h[k] for k in ("median_cpu_mb_s", "cold_cpu_mb_s", "median_wall_mb_s")}
    print(f"{mode:6} ratio megatron.c/tokenizers: median CPU {ratio['median_cpu_mb_s']:.2f}x, "
          f"cold {ratio['cold_cpu_mb_s']:.2f}x, wall {ratio['median_wall_mb_s']:.2f}x; "
          f"ids {'identical' if same else 'DIFFER'} ({c['ids']} vs {h['ids']})")
    status |= not same
sys.exit(status)
PY
