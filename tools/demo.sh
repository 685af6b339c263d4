#!/usr/bin/env bash
# `make run`: the demo. Preprocesses Moby Dick (data/moby-dick.txt, one document per chapter) into
# a Megatron indexed dataset once, trains a small GPT-2-style model on it on this machine's CPU
# with validation loss reported, then continues a prompt with the trained checkpoint.
set -euo pipefail
BIN=${1:-build/megatron}
DIR=${2:-runs/demo}
DATA=runs/data
THREADS=$(nproc 2>/dev/null || echo 2)
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)

mkdir -p "$DATA"
if [ ! -f "$DATA/moby_text_document.idx" ]; then
    tools/moby_to_jsonl.sh data/moby-dick.txt >"$DATA/moby.jsonl"
    "$BIN" preprocess --input "$DATA/moby.jsonl" --output-prefix "$DATA/moby" --json-keys text \
        "${TOK[@]}" --append-eod --workers "$THREADS"
fi

rm -rf "$DIR"   # a fresh run every time (runs/ is scratch space)
mkdir -p "$DIR"
"$BIN" train \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
    --max-position-embeddings 128 "${TOK[@]}" \
    --micro-batch-size 8 --global-batch-size 16 --train-iters 200 \
    --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 20 \
    --weight-decay 0.1 --clip-grad 1.0 --seed 1234 \
    --data-path "$DATA/moby_text_document" --split 949,50,1 \
    --log-interval 10 --eval-interval 50 --eval-iters 5 \
    --save "$DIR/checkpoints" --save-interval 100 --metrics-file "$DIR/metrics.jsonl" \
    --num-threads "$THREADS"

echo
echo "> sample from the trained model (megatron generate, top-k 5):"
"$BIN" generate --load "$DIR/checkpoints" --prompt "Call me Ishmael. Some years ago" \
    --max-new-tokens 40 --top-k 5 --temperature 0.8 --seed 1 --num-threads "$THREADS"
