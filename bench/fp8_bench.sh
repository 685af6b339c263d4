#!/usr/bin/env bash
# fp8 against bf16 on one GPU (issue: fp8 training; bench/NOTES.md), one command:
#   1. throughput: `megatron bench` without and with --fp8-format hybrid (delayed scaling, amax
#      history 1024, max), back to back, for each shape of SHAPES: gpt2-124m (micro-batch 16),
#      gpt2-1.5b (4) and llama-3b, a Llama-style ~3B shape (26 x 3072, SwiGLU 8192, 24 heads in 8
#      groups, RoPE, RMSNorm, no biases, untied output, sequence 2048, vocabulary 32000;
#      micro-batch 2) and moe, a Mixtral-style MoE (8 x 2048, 8 experts of FFN 5632, top-2,
#      SwiGLU, RMSNorm, RoPE, sequence 2048, micro-batch 2; its routed experts in fp8 through
#      CUTLASS's fp8 grouped GEMM);
#      The GPT-2 shapes also run the PyTorch baseline in fp8 (bench/baselines/torch_gpt2.py --fp8:
#      the blocks' linears through torch._scaled_mm with tensorwise scales, compiled) on the same
#      GPU in the same call: "torch fp8" and "ours / torch" in the table (TORCH=0 skips it;
#      PYTHON names the Python with PyTorch; TORCH_TIMEOUT, default 900 s, bounds each run: its
#      compilation of 1.5B took over 200 s; TORCH_ARGS, e.g. "--compile-scope blocks", goes to
#      the baseline);
#   2. convergence: the GPT-2 124M shape trained for ITERS (300) steps on the demo corpus (Moby
#      Dick, real text; sequence 512, micro-batch 8, global batch 32, cosine from 6e-4), bf16 and
#      fp8 from the same seed; the last logged lm loss of both and their ratio (the issue's goal:
#      within 1.5%).
#   bench/fp8_bench.sh [BUILD]      BUILD/megatron built with the CUDA backend
# Environment: SHAPES (default "124m 1.5b llama-3b"), ITERS (300), CONVERGE=0 skips part 2,
#   RECIPE: the fp8 runs' --fp8-recipe (delayed, tensorwise or blockwise; default delayed),
#   EXTRA: flags for both of our bench runs (e.g. "--cuda-graph-impl full_iteration": fp8 adds
#   launches, ~3,100 per 1.5B step against bf16's ~1,860, which a graph replays as one),
#   OUTDIR (default $OUT, else a new temporary directory): logs and fp8_bench.jsonl.
set -uo pipefail
BUILD=${1:-build}
BIN=$BUILD/megatron
SHAPES=${SHAPES:-124m 1.5b llama-3b}
ITERS=${ITERS:-300}
OUTDIR=${OUTDIR:-${OUT:-$(mktemp -d)}}
RESULTS=$OUTDIR/fp8_bench.jsonl
mkdir -p "$OUTDIR"
FP8=(--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max
    --fp8-recipe "${RECIPE:-delayed}")
[ -x "$BIN" ] || { echo "fp8_bench: $BIN is not built" >&2; exit 1; }
: >"$RESULTS"
echo "fp8_bench: $BIN; shapes: $SHAPES; results in $RESULTS"

shape_args() { # SHAPE -> the bench flags
    case $1 in
    124m) echo --model gpt2-124m --micro-batch-size 16 ;;
    1.5b) echo --model gpt2-1.5b --micro-batch-size 4 ;;
    llama-3b)
        echo --num-layers 26 --hidden-size 3072 --ffn-hidden-size 8192 --num-attention-heads 24 \
            --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm \
            --position-embedding-type rope --disable-bias-linear \
            --untie-embeddings-and-output-weights --seq-length 2048 --max-position-embeddings 2048 \
            --vocab-size 32000 --micro-batch-size 2 ;;
    moe)
        echo --num-layers 8 --hidden-size 2048 --num-attention-heads 16 --group-query-attention \
            --num-query-groups 8 --swiglu --normalization RMSNorm --position-embedding-type rope \
            --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 2048 \
            --max-position-embeddings 2048 --vocab-size 32000 --num-experts 8 --moe-router-topk 2 \
            --ffn-hidden-size 5632 --moe-router-load-balancing-type aux_loss --micro-batch-size 2 ;;
    *) echo "fp8_bench: unknown shape $1" >&2; return 1 ;;
    esac
}

printf '\n| shape | bf16 tokens/s | fp8 tokens/s | fp8 / bf16 | bf16 MFU | fp8 loss, last step | torch fp8 tokens/s | fp8 / torch fp8 |\n|---|---|---|---|---|---|---|---|\n' >"$OUTDIR/table.md"
for shape in $SHAPES; do
    read -r -a args <<<"$(shape_args "$shape")" || continue
    declare -A tps=() mfu=() loss=()
    for mode in bf16 fp8; do
        extra=()
        [ "$mode" = fp8 ] && extra=("${FP8[@]}")
        log=$OUTDIR/bench-$shape-$mode.log
        # shellcheck disable=SC2086
        if "$BIN" bench --device cuda "${args[@]}" --iters 20 --warmup 5 "${extra[@]}" ${EXTRA:-} --json \
            >"$OUTDIR/bench-$shape-$mode.json" 2>"$log"; then
            line=$(tail -n 1 "$OUTDIR/bench-$shape-$mode.json")
            echo "{\"shape\": \"$shape\", \"mode\": \"$mode\", \"bench\": $line}" >>"$RESULTS"
            tps[$mode]=$(echo "$line" | grep -oE '"tokens_per_s": [0-9.]+' | awk '{print $2}')
            mfu[$mode]=$(echo "$line" | grep -oE '"mfu": [0-9.]+' | awk '{print $2}')
            loss[$mode]=$(echo "$line" | grep -oE '"loss_last": [0-9.]+' | awk '{print $2}')
        else
            echo "fp8_bench: $shape $mode failed:" >&2
            tail -n 3 "$log" >&2
        fi
    done
    # the PyTorch fp8 baseline of the GPT-2 shapes (torch_gpt2.py knows no Llama shape)
    if [ "${TORCH:-1}" != 0 ] && [[ $shape != llama-* ]]; then
        log=$OUTDIR/torch-$shape-fp8.log
        if timeout "${TORCH_TIMEOUT:-900}" "${PYTHON:-python3}" bench/baselines/torch_gpt2.py \
            --device cuda --model "gpt2-$shape" \
            --micro-batch-size "${args[3]}" --iters 20 --warmup 5 --fp8 ${TORCH_ARGS:-} --json \
            >"$OUTDIR/torch-$shape-fp8.json" 2>"$log"; then
            line=$(tail -n 1 "$OUTDIR/torch-$shape-fp8.json")
            echo "{\"shape\": \"$shape\", \"mode\": \"torch-fp8\", \"bench\": $line}" >>"$RESULTS"
            tps[torch]=$(echo "$line" | grep -oE '"tokens_per_s": [0-9.]+' | awk '{print $2}')
        else
            echo "fp8_bench: torch $shape fp8 failed:" >&2
            tail -n 3 "$log" >&2
        fi
    fi
    ratio=$(awk -v a="${tps[fp8]:-0}" -v b="${tps[bf16]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    vs=$(awk -v a="${tps[fp8]:-0}" -v b="${tps[torch]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    printf '| %s | %.0f | %.0f | %s | %s | %s | %.0f | %s |\n' "$shape" "${tps[bf16]:-0}" "${tps[fp8]:-0}" \
        "$ratio" "${mfu[bf16]:--}" "${loss[fp8]:--}" "${tps[torch]:-0}" "$vs" >>"$OUTDIR/table.md"
    unset tps mfu loss
done
cat "$OUTDIR/table.md"

[ "${CONVERGE:-1}" = 0 ] && exit 0
DATA=$OUTDIR/data
mkdir -p "$DATA"
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe)
tools/moby_to_jsonl.sh data/moby-dick.txt >"$DATA/moby.jsonl"
"$BIN" preprocess --input "$DATA/moby.jsonl" --output-prefix "$DATA/moby" --json-keys text \
    "${TOK[@]}" --append-eod --workers 8 >"$OUTDIR/preprocess.log" 2>&1 ||
    { echo "fp8_bench: preprocess failed" >&2; tail -n 3 "$OUTDIR/preprocess.log" >&2; exit 1; }
for mode in bf16 fp8; do
    extra=()
    [ "$mode" = fp8 ] && extra=("${FP8[@]}")
    "$BIN" train --device cuda --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
        --seq-length 512 --max-position-embeddings 1024 "${TOK[@]}" --micro-batch-size 8 \
        --global-batch-size 32 --train-iters "$ITERS" --lr 6e-4 --min-lr 6e-5 \
        --lr-decay-style cosine --lr-warmup-iters 30 --weight-decay 0.1 --clip-grad 1.0 \
        --seed 1234 --bf16 --attention-dropout 0 --hidden-dropout 0 \
        --data-path "$DATA/moby_text_document" --split 949,50,1 --log-interval 10 \
        --eval-interval "$ITERS" --eval-iters 10 --metrics-file "$OUTDIR/converge-$mode.jsonl" \
        "${extra[@]}" >"$OUTDIR/converge-$mode.log" 2>&1 ||
        { echo "fp8_bench: $mode training failed" >&2; tail -n 3 "$OUTDIR/converge-$mode.log" >&2; }
done
last() { grep -oE '"lm_loss": [0-9.eE+-]+' "$1" 2>/dev/null | tail -n 1 | awk '{print $2}'; }
b=$(last "$OUTDIR/converge-bf16.jsonl") f=$(last "$OUTDIR/converge-fp8.jsonl")
echo "convergence, $ITERS steps on the demo corpus: lm loss bf16 ${b:--}, fp8 ${f:--}" \
    "($(awk -v a="${f:-0}" -v b="${b:-0}" 'BEGIN { if (b > 0) printf "%+.2f%%", 100 * (a - b) / b; else print "-" }'))"
grep -h "validation" "$OUTDIR/converge-bf16.log" "$OUTDIR/converge-fp8.log" | tail -n 4
