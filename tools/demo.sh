#!/usr/bin/env bash
# `make run`: trains a small GPT-2-style model on this machine's CPU so the loss can be watched
# falling. Mock data (Megatron's --mock-data): documents whose tokens count up, so the model can
# learn them. Real text (Moby Dick) replaces it when the data pipeline lands.
set -euo pipefail
BIN=${1:-build/megatron}
DIR=${2:-runs/demo}
rm -rf "$DIR"   # a fresh demo every time (runs/ is scratch space)
mkdir -p "$DIR"
THREADS=$(nproc 2>/dev/null || echo 2)
exec "$BIN" train \
    --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
    --max-position-embeddings 128 --vocab-size 1024 --make-vocab-size-divisible-by 128 \
    --micro-batch-size 8 --global-batch-size 16 --train-iters 150 \
    --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 10 \
    --weight-decay 0.1 --clip-grad 1.0 --seed 1234 \
    --mock-data --log-interval 10 --eval-interval 50 --eval-iters 4 \
    --save "$DIR/checkpoints" --save-interval 50 --metrics-file "$DIR/metrics.jsonl" \
    --num-threads "$THREADS"
