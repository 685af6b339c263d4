#!/usr/bin/env bash
# Tokenizer throughput of megatron.c against the reference libraries, one thread each, same
# files, same text, same machine, same command:
#   bench/tokenizer_bench.sh [build dir]        (make bench-tokenizer builds and runs it)
# Tokenizers: GPT2BPETokenizer (data/gpt2) against Hugging Face `tokenizers`; HuggingFaceTokenizer
# on the same GPT-2 vocabulary as a tokenizer.json and on Llama-3-style and Qwen2-style (NFC)
# tokenizer.json files of 32 000 tokens, against `tokenizers`; Llama2Tokenizer (SentencePiece BPE
# with byte fallback, 16 000 tokens; megatron.c calls libsentencepiece) against Python's
# `sentencepiece`. The tokenizer.json/.model files are trained in a temporary directory by
# bench/baselines/make_bench_tokenizers.py (about a minute; TOKENIZERS=gpt2 runs GPT-2 alone).
# Texts: the English demo corpus and as much seeded varied text (code, CJK, emoji, combining
# marks, numbers, whitespace runs). GPT-2 runs both modes (the corpus as one text; its paragraphs
# as separate documents), the others the paragraphs. For each run: one JSON line per
# implementation, then a table of MB/s with the ratio megatron.c / reference. The per-core figure
# is MB per second of process CPU time, which a busy shared machine disturbs less than wall time;
# wall time is printed too. The two must produce the same ids (count + checksum).
# Bench scripts may use python3 (the product may not).
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VOCAB=${VOCAB:-$ROOT/data/gpt2/encoder.json}
MERGES=${MERGES:-$ROOT/data/gpt2/vocab.bpe}
TEXT=${TEXT:-$ROOT/data/moby-dick.txt}
MIN_S=${MIN_S:-3}
TOKENIZERS=${TOKENIZERS:-all}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$BUILD/tokenize_bench" ]; then
    echo "tokenizer_bench: $BUILD/tokenize_bench is missing (run make bench-tokenizer)" >&2
    exit 1
fi
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
# run LABEL TYPE FILE1 FILE2 REFKIND TEXT MODE: one line per implementation
run() {
    "$BUILD/tokenize_bench" "$2" "$3" "$4" "$6" "$7" "$MIN_S" "$1" | tee -a "$TMP/all.jsonl"
    python3 "$HERE/baselines/hf_tokenize.py" "$5" "$3" "$4" "$6" "$7" "$MIN_S" "$1" |
        tee -a "$TMP/all.jsonl"
}
for mode in whole paras; do
    run gpt2 GPT2BPETokenizer "$VOCAB" "$MERGES" gpt2 "$TEXT" $mode
done
if [ "$TOKENIZERS" = all ]; then
    (cd "$ROOT" && python3 bench/baselines/make_bench_tokenizers.py "$TMP") >&2
    for text in "$TEXT" "$TMP/varied.txt"; do
        run gpt2-json HuggingFaceTokenizer "$TMP/gpt2_json" - json "$text" paras
        run llama3-32k HuggingFaceTokenizer "$TMP/llama3" - json "$text" paras
        run qwen2-32k HuggingFaceTokenizer "$TMP/qwen2" - json "$text" paras
        run spm-16k Llama2Tokenizer "$TMP/spm.model" - spm "$text" paras
    done
fi

python3 - "$TMP/all.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
status = 0
print(f"{'tokenizer':11} {'text':14} {'mode':6} {'impl':11} {'cold':>7} {'best':>7} {'median':>7}"
      f" {'wall med':>8}  MB/s (CPU time)")
for c, h in zip(rows[0::2], rows[1::2]):
    key = f"{c['tokenizer']:11} {c['text'][:14]:14} {c['mode']:6}"
    for r in (c, h):
        print(f"{key} {r['impl']:11} {r['cold_cpu_mb_s']:7.2f} {r['best_cpu_mb_s']:7.2f} "
              f"{r['median_cpu_mb_s']:7.2f} {r['median_wall_mb_s']:8.2f}")
    same = c["ids"] == h["ids"] and c["fnv"] == h["fnv"]
    ratio = {k: c[k] / h[k] for k in ("median_cpu_mb_s", "cold_cpu_mb_s", "median_wall_mb_s")}
    print(f"{key} ratio megatron.c/reference: median CPU {ratio['median_cpu_mb_s']:.2f}x, "
          f"cold {ratio['cold_cpu_mb_s']:.2f}x, wall {ratio['median_wall_mb_s']:.2f}x; "
          f"ids {'identical' if same else 'DIFFER'} ({c['ids']} vs {h['ids']})")
    status |= not same
sys.exit(status)
PY
