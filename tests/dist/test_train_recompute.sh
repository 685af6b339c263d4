#!/usr/bin/env bash
# Activation recomputation under `mpirun --oversubscribe` (a part of tests/run.sh): a run with
# --recompute-granularity full or selective logs, to the last bit of its metrics file (lm loss
# and grad norm of every iteration), what the same layout logs without it, with dropout on
# (Megatron's streams: the recomputed forward draws the forward's masks), under
#   - TP 2 x PP 2 with sequence parallelism (full: uniform and block; selective modules);
#   - TP 2 x PP 2 x V 2 (interleaved), with --distribute-saved-activations (the kept inputs
#     split over the tensor-parallel ranks and gathered for the recomputation);
#   - TP 2 x DP 2 with the distributed optimizer;
#   - EP 2 MoE (the routing reused), also under a receive budget that overflows and with ECHO.
# Prints PASS/FAIL lines and "N passed, N failed"; skipped (with a line) without MPI.
#   tests/dist/test_train_recompute.sh [BUILD]
set -u
BUILD=${1:-build}
BIN=$BUILD/megatron
SUITE="dist train recompute"
. "$(dirname "$0")/lib.sh"
train_script_prologue "$BUILD"

MODEL=(--num-layers 8 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 96
    --mock-data --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --train-iters 4
    --log-interval 1 --eval-iters 0 --device cpu --num-threads 1 --attention-dropout 0.1
    --hidden-dropout 0.1)
MOE=(--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear
    --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 0.01
    --moe-z-loss-coeff 0.001 --moe-shared-expert-intermediate-size 32
    --moe-layer-freq "([0,1,1,0]*2)")
# every iteration's lm loss and grad norm, as the metrics file writes them (17 digits)
vals() { grep -oE '"(lm_loss|grad_norm)": [^,}]+' "$1" 2>/dev/null; }
train() { # NP FILE FLAG...
    local np=$1 file=$2
    shift 2
    rm -f "$file"
    timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MODEL[@]}" "$@" --metrics-file "$file" \
        >"$file.log" 2>&1
}
FULL_U1=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
FULL_U2=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
FULL_B1=(--recompute-granularity full --recompute-method block --recompute-num-layers 1)
SEL=(--recompute-granularity selective --recompute-modules core_attn layernorm mlp mlp_act)
SEL_MOE=(--recompute-granularity selective --recompute-modules moe layernorm mlp_act)
SEL_ACT=(--recompute-granularity selective --recompute-modules moe_act shared_experts core_attn)
check() { # NAME NP "LAYOUT" RECOMPUTE...
    local name=$1 np=$2 rc
    read -r -a lay <<<"$3"
    shift 3
    if ! train "$np" "$TMP/base.jsonl" "${lay[@]}"; then
        fail "$name (the run without recomputation failed)" "$(tail -n 3 "$TMP/base.jsonl.log")"
        return
    fi
    train "$np" "$TMP/rc.jsonl" "${lay[@]}" "$@"; rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$name (exit status $rc)" "$(tail -n 3 "$TMP/rc.jsonl.log")"
    elif [ "$(vals "$TMP/base.jsonl" | wc -l)" -ne 8 ] ||
        [ "$(vals "$TMP/base.jsonl")" != "$(vals "$TMP/rc.jsonl")" ]; then
        fail "$name (metrics differ from the run without recomputation)" \
            "without: $(vals "$TMP/base.jsonl" | tr '\n' ' ')" "with: $(vals "$TMP/rc.jsonl" | tr '\n' ' ')"
    else
        pass "$name: 4 iterations' lm loss and grad norm equal the run without, bit for bit"
    fi
}
TPPPSP="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"
check "recompute full uniform 1, TP 2 x PP 2 x SP" 4 "$TPPPSP" "${FULL_U1[@]}"
check "recompute full block 1, TP 2 x PP 2 x SP" 4 "$TPPPSP" "${FULL_B1[@]}"
check "recompute selective, TP 2 x PP 2 x SP" 4 "$TPPPSP" "${SEL[@]}"
VPP="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2"
check "recompute full uniform 2 distributed, TP 2 x PP 2 x V 2" 4 "$VPP" "${FULL_U2[@]}" \
    --distribute-saved-activations
check "recompute full uniform 1, TP 2 x DP 2, distributed optimizer" 4 \
    "--tensor-model-parallel-size 2 --use-distributed-optimizer" "${FULL_U1[@]}"
EP="--expert-model-parallel-size 2 ${MOE[*]}"
check "recompute full uniform 2, EP 2 MoE" 2 "$EP" "${FULL_U2[@]}"
check "recompute selective moe, EP 2 MoE" 2 "$EP" "${SEL_MOE[@]}"
check "recompute selective moe_act shared_experts, EP 2 MoE over a receive budget" 2 \
    "$EP --moe-expert-rank-capacity-factor 0.25" "${SEL_ACT[@]}"
check "recompute full uniform 1, EP 2 MoE with ECHO" 2 "$EP --moe-enable-echo" "${FULL_U1[@]}"
finish
