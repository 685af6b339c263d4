#!/usr/bin/env bash
# `megatron preprocess` throughput against a Hugging Face `tokenizers` pipeline doing the same job
# (bench/baselines/hf_preprocess.py), same input, same machine, one command:
#   bench/preprocess_bench.sh [build dir]          (REPEAT=40 RUNS=3 by default)
# Input: the demo corpus split into chapters (tools/moby_to_jsonl.sh), concatenated REPEAT times
# (135 x REPEAT documents, 49 MB by default) so that start-up (~0.05 s) does not dominate.
# Each configuration (megatron.c --workers 1 and 2; HF with 1 and 2 Rayon threads) runs RUNS
# times, interleaved; prints one JSON line per run and a table of median MB/s by wall time and by
# process CPU time (user + sys: the per-core figure), with the ratio megatron.c / HF. All outputs
# must be byte-identical (checked). Bench scripts may use python3 (the product may not).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPEAT=${REPEAT:-40} RUNS=${RUNS:-3}
VOCAB=$ROOT/data/gpt2/encoder.json MERGES=$ROOT/data/gpt2/vocab.bpe
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
[ -x "$BUILD/megatron" ] || { echo "preprocess_bench: $BUILD/megatron missing (make)" >&2; exit 1; }
"$ROOT/tools/moby_to_jsonl.sh" "$ROOT/data/moby-dick.txt" > "$TMP/one.jsonl"
for _ in $(seq "$REPEAT"); do cat "$TMP/one.jsonl"; done > "$TMP/in.jsonl"
BYTES=$(wc -c < "$TMP/in.jsonl")

# run NAME THREADS CMD...: one JSON line with wall and child CPU seconds
run() {
    local name=$1 threads=$2; shift 2
    RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=$([ "$threads" -gt 1 ] && echo true || echo false) \
    python3 - "$name" "$threads" "$BYTES" "$@" <<'PY'
import json, os, resource, subprocess, sys, time
name, threads, nbytes, cmd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
t0 = time.perf_counter()
p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
if p.returncode:
    sys.exit(f"{name} failed: {p.stderr.decode()}")
cpu = ru.ru_utime + ru.ru_stime
print(json.dumps({"impl": name, "threads": threads, "bytes": nbytes, "wall_s": round(wall, 3),
                  "cpu_s": round(cpu, 3), "wall_mb_s": round(nbytes / wall / 1e6, 2),
                  "cpu_mb_s": round(nbytes / cpu / 1e6, 2)}))
PY
}
for r in $(seq "$RUNS"); do
    for w in 1 2; do
        run megatron.c "$w" "$BUILD/megatron" preprocess --input "$TMP/in.jsonl" \
            --output-prefix "$TMP/c$w" --tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB" \
            --merge-file "$MERGES" --append-eod --workers "$w" | tee -a "$TMP/all.jsonl"
        run hf-tokenizers "$w" python3 "$ROOT/bench/baselines/hf_preprocess.py" "$VOCAB" "$MERGES" \
            "$TMP/in.jsonl" "$TMP/h$w" "$w" | tee -a "$TMP/all.jsonl"
    done
done
same=identical
for w in 1 2; do
    for e in bin idx; do
        cmp -s "$TMP/c${w}_text_document.$e" "$TMP/c1_text_document.$e" || same=DIFFER
        cmp -s "$TMP/h$w.$e" "$TMP/c1_text_document.$e" || same=DIFFER
    done
done
python3 - "$TMP/all.jsonl" "$same" "$BYTES" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda impl, t, k: statistics.median(r[k] for r in rows if r["impl"] == impl and r["threads"] == t)
print(f"input {int(sys.argv[3]) / 1e6:.2f} MB; outputs {sys.argv[2]}")
print(f"{'threads':>7} {'impl':14} {'wall MB/s':>9} {'CPU MB/s':>9}")
for t in (1, 2):
    for impl in ("megatron.c", "hf-tokenizers"):
        print(f"{t:7} {impl:14} {med(impl, t, 'wall_mb_s'):9.2f} {med(impl, t, 'cpu_mb_s'):9.2f}")
    print(f"{t:7} ratio megatron.c/HF: wall {med('megatron.c', t, 'wall_mb_s') / med('hf-tokenizers', t, 'wall_mb_s'):.1f}x, "
          f"per core (CPU time) {med('megatron.c', t, 'cpu_mb_s') / med('hf-tokenizers', t, 'cpu_mb_s'):.1f}x")
sys.exit(sys.argv[2] != "identical")
PY
