#!/usr/bin/env bash
# Regenerates tests/golden/preprocess/ by running Megatron-LM's own tools/preprocess_data.py
# (not run by CI; needs python3 with torch, numpy, transformers).
#   tools/reference/preprocess_golden.sh MEGATRON_LM_DIR [OUT_DIR]
# MEGATRON_LM_DIR holds Megatron-LM's `megatron/` and `tools/` (e.g. `git archive HEAD tools
# megatron | tar -x -C DIR`). Two adaptations, neither touching Megatron's code:
#  - Python 3.11: Megatron HEAD imports typing.override (3.12+); a sitecustomize adds a no-op one.
#  - Offline: GPT2BPETokenizer calls AutoTokenizer.from_pretrained("gpt2", vocab_file=...,
#    merges_file=...), which needs the hub's "gpt2" config; a local directory ./gpt2 (config.json
#    with model_type gpt2, tokenizer_config.json, and copies of data/gpt2's two files) stands in,
#    and Megatron runs from its parent directory with HF_HUB_OFFLINE=1.
set -euo pipefail
MLM=$(cd "$1" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${2:-$REPO/tests/golden/preprocess}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/shim" "$WORK/gpt2" "$OUT"
cat > "$WORK/shim/sitecustomize.py" <<'PY'
import typing
if not hasattr(typing, "override"):
    typing.override = lambda f: f
PY
echo '{"model_type": "gpt2", "vocab_size": 50257}' > "$WORK/gpt2/config.json"
echo '{"model_max_length": 1024}' > "$WORK/gpt2/tokenizer_config.json"
cp "$REPO/data/gpt2/encoder.json" "$WORK/gpt2/vocab.json"
cp "$REPO/data/gpt2/vocab.bpe" "$WORK/gpt2/merges.txt"

python3 "$REPO/tools/reference/make_preprocess_inputs.py" "$OUT"
"$REPO/tools/moby_to_jsonl.sh" "$REPO/data/moby-dick.txt" > "$WORK/moby.jsonl"

megatron() { # INPUT PREFIX extra-flags...
    local in=$1 prefix=$2; shift 2
    (cd "$WORK" && PYTHONPATH="$WORK/shim:$MLM" HF_HUB_OFFLINE=1 python3 \
        "$MLM/tools/preprocess_data.py" --input "$in" --output-prefix "$prefix" \
        --tokenizer-type GPT2BPETokenizer --vocab-file "$REPO/data/gpt2/encoder.json" \
        --merge-file "$REPO/data/gpt2/vocab.bpe" --workers 1 "$@" > "$WORK/log" 2>&1) ||
        { cat "$WORK/log"; exit 1; }
}
megatron "$OUT/small.jsonl" "$OUT/small_eod" --append-eod
megatron "$OUT/small.jsonl" "$OUT/small" 
megatron "$OUT/keys.jsonl" "$OUT/keys" --json-keys text title --append-eod
megatron "$OUT/eot.jsonl" "$OUT/eot" --append-eod
megatron "$WORK/moby.jsonl" "$WORK/moby" --append-eod
# The demo corpus output is 0.6 MB: keep its .idx and the checksums of its input and .bin.
cp "$WORK/moby_text_document.idx" "$OUT/moby_text_document.idx"
(cd "$WORK" && sha256sum moby.jsonl moby_text_document.bin) > "$OUT/moby.sha256"
echo "Megatron-LM: $(git -C "$MLM" rev-parse HEAD 2>/dev/null || cat "$MLM/COMMIT" 2>/dev/null || echo unknown)"
ls -l "$OUT"
