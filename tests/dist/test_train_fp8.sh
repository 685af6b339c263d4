#!/usr/bin/env bash
# fp8 training (--fp8-format hybrid, delayed scaling with a 4-step max history, the CPU backend's
# exact emulation) under `mpirun --oversubscribe` (a part of tests/run.sh): the amaxes are
# reduced by a maximum over the tensor- and data-parallel groups before each scale update, so
# every layout trains with one rank's scales, and
#   - DP 2 with the distributed optimizer and --fp8-param-gather, PP 2, and PP 2 x DP 2 log the
#     one-rank fp8 run's lm loss and grad norm within 2e-3 relative over 6 iterations;
#   - one rank that casts each linear's input again, transposed, in the backward
#     (MG_TEST_FP8_RECAST=1) logs exactly the lm losses and grad norms of one rank that keeps the
#     forward's transpose (model/fp8.h), with delayed, tensorwise and blockwise scaling (its
#     block scales kept too), and with full and selective recomputation (whose numbers are the
#     plain run's), and PP 2 (also interleaved, also blockwise) against its own run that casts
#     again: the kept bytes are the cast's;
#   - TP 2, with and without SP, with the backward taken apart for the reduction's overlap (the
#     default) logs exactly the in-order backward's numbers (--no-tp-comm-bulk-wgrad);
#   - --fp8-recipe blockwise (each block of 128 or tile of 128 x 128 by its own amax now) with
#     DP 2, TP 2 with SP and PP 2 logs the one-rank blockwise run's lm loss within 2e-3;
#   - TP 2, TP 2 with sequence parallelism (also with --tp-comm-overlap: the input gradient's
#     reduction beside the weight gradient), and --fp8-recipe tensorwise (each cast scaled by its
#     tensor's amax now, reduced over the tensor-parallel group) with DP 2 and TP 2 log the
#     one-rank (tensorwise) run's lm loss within 2e-3;
#   - an MoE model (4 experts, top-2; its routed experts in fp8 too) under EP 2, GELU with biases
#     and SwiGLU without, delayed and tensorwise, and with a receive budget (rounds of the
#     exchange, some with no rows), logs one rank's numbers within 2e-3; a
#     checkpoint saved with its experts in the compute dtype (ECHO) loads with a warning.
# Not exactly: every layout sums something in another order than one rank (the gradients of
# microbatches or of data-parallel ranks, the tied embedding's two parts under PP, TP's partial
# products), a 1e-7 relative difference in bf16/fp32 training. A cast to fp8 turns a value that
# lands on the other side of a rounding boundary into a difference of one fp8 step (up to 25% of
# the element in e5m2), which the next steps carry on; the gradient norm, which such a flip moves
# most, is left out for TP, tensorwise and EP (it stays within 1%).
# Prints PASS/FAIL lines and "N passed, N failed"; skipped (with a line) without MPI.
#   tests/dist/test_train_fp8.sh [BUILD]
set -u
BUILD=${1:-build}
BIN=$BUILD/megatron
SUITE="dist train fp8"
. "$(dirname "$0")/lib.sh"
train_script_prologue "$BUILD"

MOE=(--num-experts 4 --moe-router-topk 2)
MODEL=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 128
    --make-vocab-size-divisible-by 64 --mock-data --micro-batch-size 1 --global-batch-size 4
    --lr 3e-3 --log-interval 1 --eval-iters 0 --device cpu --num-threads 1 --train-iters 6
    --attention-dropout 0 --hidden-dropout 0 --fp8-format hybrid --fp8-amax-history-len 4
    --fp8-amax-compute-algo max)
vals() { grep -oE "\"($KEYS)\": [^,}]+" "$1" 2>/dev/null | awk '{print $2}'; }
timeout 120 "$BIN" train "${MODEL[@]}" --metrics-file "$TMP/one.jsonl" >"$TMP/one.log" 2>&1 ||
    fail "fp8 one rank" "$(tail -n 3 "$TMP/one.log")"
timeout 120 "$BIN" train "${MODEL[@]}" --fp8-recipe tensorwise --metrics-file "$TMP/one_tw.jsonl" \
    >"$TMP/one_tw.log" 2>&1 || fail "fp8 tensorwise one rank" "$(tail -n 3 "$TMP/one_tw.log")"
timeout 120 "$BIN" train "${MODEL[@]}" --fp8-recipe blockwise --metrics-file "$TMP/one_bw.jsonl" \
    >"$TMP/one_bw.log" 2>&1 || fail "fp8 blockwise one rank" "$(tail -n 3 "$TMP/one_bw.log")"
KEYS='lm_loss|grad_norm'
# same NAME LABEL_A A LABEL_B B LOG: runs A and B (metrics files) both logged the 6 iterations'
# lm loss and grad norm, and the same numbers (LOG: A's log, shown when they did not)
same() {
    local name=$1 la=$2 a=$3 lb=$4 b=$5 log=$6
    if [ "$(vals "$a" | wc -l)" -ne 12 ] || [ "$(vals "$a")" != "$(vals "$b")" ]; then
        fail "$name (metrics differ, or a run failed)" "$la: $(vals "$a" | paste -sd' ')" \
            "$lb: $(vals "$b" | paste -sd' ')" "$(tail -n 2 "$log")"
    else
        pass "$name: 6 iterations' lm_loss and grad_norm equal exactly"
    fi
}
# same_losses NAME LABEL_A A LABEL_B B LOG: as same, but the grad norms within 1e-6 relative (a
# few fp32 roundings): the norm adds each rank's shards' sums of squares shard by shard in fp32,
# so gradient buffers cut another way (--fp8-param-gather's own buffers) round it another way
# even where every gradient is the same
same_losses() {
    local name=$1 la=$2 a=$3 lb=$4 b=$5 log=$6
    if [ "$(KEYS=lm_loss vals "$a" | wc -l)" -ne 6 ] ||
        [ "$(KEYS=lm_loss vals "$a")" != "$(KEYS=lm_loss vals "$b")" ] ||
        ! paste <(KEYS=grad_norm vals "$a") <(KEYS=grad_norm vals "$b") | awk '
            NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad = 1 }
            END { exit bad || NR != 6 }'; then
        fail "$name (metrics differ, or a run failed)" "$la: $(vals "$a" | paste -sd' ')" \
            "$lb: $(vals "$b" | paste -sd' ')" "$(tail -n 2 "$log")"
    else
        pass "$name: 6 iterations' lm_loss equal exactly, grad_norm within 1e-6"
    fi
}
# on2 FILE FLAG...: `megatron train` of MODEL with FLAGs on 2 ranks (MG_TEST_FP8_RECAST and
# MG_TEST_FP8_SP_BF16 passed on), metrics in FILE.jsonl, log in FILE.log
on2() {
    local f=$1
    shift
    rm -f "$f.jsonl"
    timeout 120 "${MPIRUN[@]}" -np 2 -x MG_TEST_FP8_RECAST -x MG_TEST_FP8_SP_BF16 "$BIN" train \
        "${MODEL[@]}" "$@" \
        --metrics-file "$f.jsonl" >"$f.log" 2>&1
}
for v in "delayed:" "tensorwise:" "blockwise:" \
    "delayed:--recompute-granularity full --recompute-method uniform --recompute-num-layers 2" \
    "delayed:--recompute-granularity selective --recompute-modules mlp layernorm" \
    "blockwise:--recompute-granularity selective --recompute-modules mlp layernorm"; do
    recipe=${v%%:*}
    read -r -a rc <<<"${v#*:}"
    base=$TMP/one.jsonl
    [ $recipe = tensorwise ] && base=$TMP/one_tw.jsonl
    [ $recipe = blockwise ] && base=$TMP/one_bw.jsonl
    rm -f "$TMP/recast.jsonl"
    MG_TEST_FP8_RECAST=1 timeout 120 "$BIN" train "${MODEL[@]}" --fp8-recipe $recipe "${rc[@]}" \
        --metrics-file "$TMP/recast.jsonl" >"$TMP/recast.log" 2>&1
    same "train fp8 one rank, --fp8-recipe $recipe${rc[*]:+ ${rc[*]}}, inputs cast again in the backward" \
        kept "$base" "cast again" "$TMP/recast.jsonl" "$TMP/recast.log"
done
# the routed experts keep their inputs' grouped transposes too (model/fp8.h): the same numbers as
# casting them again in the backward, both recipes, and with the MoE layer recomputed
for v in "delayed:" "tensorwise:" "delayed:--recompute-granularity selective --recompute-modules moe"; do
    recipe=${v%%:*}
    read -r -a rc <<<"${v#*:}"
    for mode in kept recast; do
        flag=0
        [ $mode = recast ] && flag=1
        rm -f "$TMP/moe_$mode.jsonl"
        MG_TEST_FP8_RECAST=$flag timeout 120 "$BIN" train "${MODEL[@]}" "${MOE[@]}" \
            --fp8-recipe $recipe "${rc[@]}" --metrics-file "$TMP/moe_$mode.jsonl" \
            >"$TMP/moe_$mode.log" 2>&1
    done
    same "train fp8 MoE one rank, --fp8-recipe $recipe${rc[*]:+ ${rc[*]}}, the experts' inputs cast again in the backward" \
        kept "$TMP/moe_kept.jsonl" "cast again" "$TMP/moe_recast.jsonl" "$TMP/moe_kept.log"
done
# pipelines keep the transposes per slot (delayed scaling; blockwise with each slot's block
# scales; tensorwise casts again): the same numbers as their own run that casts again
for layout in "--pipeline-model-parallel-size 2" \
    "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1" \
    "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --fp8-recipe blockwise" \
    "--pipeline-model-parallel-size 2 --fp8-recipe tensorwise"; do
    read -r -a extra <<<"$layout"
    on2 "$TMP/pp_kept" "${extra[@]}"
    MG_TEST_FP8_RECAST=1 on2 "$TMP/pp_recast" "${extra[@]}"
    same "train fp8 np=2 $layout, inputs cast again in the backward" \
        kept "$TMP/pp_kept.jsonl" "cast again" "$TMP/pp_recast.jsonl" "$TMP/pp_kept.log"
done
# TP 2: the backward taken apart (the input gradient's rows cast and reduced first, the weight
# gradient after) gives exactly the in-order backward's numbers
for sp in "" "--sequence-parallel"; do
    # shellcheck disable=SC2086
    on2 "$TMP/tp_apart" --tensor-model-parallel-size 2 $sp
    # shellcheck disable=SC2086
    on2 "$TMP/tp_inorder" --tensor-model-parallel-size 2 $sp --no-tp-comm-bulk-wgrad
    same "train fp8 np=2 --tensor-model-parallel-size 2${sp:+ $sp}, bulk wgrad overlap against in order" \
        apart "$TMP/tp_apart.jsonl" "in order" "$TMP/tp_inorder.jsonl" "$TMP/tp_apart.log"
done
# SP with delayed scaling: each rank casts its own rows of a norm's output and the group gathers
# the fp8 bytes; exactly the numbers of gathering the rows in bf16 and casting the whole
# (MG_TEST_FP8_SP_BF16=1), also with the layers recomputed and with the gather beside the product
# of this rank's rows (--tp-comm-overlap)
for rc in "" "--tp-comm-overlap" \
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2" \
    "--recompute-granularity selective --recompute-modules layernorm mlp"; do
    # shellcheck disable=SC2086
    MG_TEST_FP8_SP_BF16=0 on2 "$TMP/sp_bytes" --tensor-model-parallel-size 2 --sequence-parallel $rc
    # shellcheck disable=SC2086
    MG_TEST_FP8_SP_BF16=1 on2 "$TMP/sp_bf16" --tensor-model-parallel-size 2 --sequence-parallel $rc
    same "train fp8 np=2 --tensor-model-parallel-size 2 --sequence-parallel${rc:+ $rc}, fp8 bytes gathered against bf16" \
        "fp8 bytes" "$TMP/sp_bytes.jsonl" bf16 "$TMP/sp_bf16.jsonl" "$TMP/sp_bytes.log"
done
for layout in "2:2e-3:--use-distributed-optimizer --fp8-param-gather" \
    "2:2e-3:--pipeline-model-parallel-size 2" \
    "4:2e-3:--pipeline-model-parallel-size 2 --use-distributed-optimizer" \
    "2:2e-3:--tensor-model-parallel-size 2" \
    "2:2e-3:--tensor-model-parallel-size 2 --sequence-parallel" \
    "2:2e-3:--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap" \
    "2:2e-3:--fp8-recipe tensorwise --use-distributed-optimizer" \
    "2:2e-3:--fp8-recipe tensorwise --tensor-model-parallel-size 2" \
    "2:2e-3:--fp8-recipe blockwise --use-distributed-optimizer" \
    "2:2e-3:--fp8-recipe blockwise --tensor-model-parallel-size 2 --sequence-parallel" \
    "2:2e-3:--fp8-recipe blockwise --pipeline-model-parallel-size 2" \
    "2:2e-3:--expert-model-parallel-size 2 MOE" \
    "2:2e-3:--expert-model-parallel-size 2 --swiglu --disable-bias-linear MOE" \
    "2:2e-3:--expert-model-parallel-size 2 --fp8-recipe tensorwise MOE" \
    "2:2e-3:--expert-model-parallel-size 2 --moe-expert-rank-capacity-factor 0.6 MOE"; do
    np=${layout%%:*} rest=${layout#*:} tol=${rest%%:*}
    read -r -a extra <<<"${rest#*:}"
    KEYS='lm_loss|grad_norm' n=12
    [[ $rest == *tensor-model* || $rest == *tensorwise* || $rest == *blockwise* || $rest == *MOE ]] &&
        KEYS=lm_loss n=6
    # tensorwise: against the one-rank tensorwise run; MOE: against one rank of the MoE model
    # with the same flags (its routed experts in fp8: model/fp8.h)
    base=$TMP/one.jsonl
    [[ $rest == *tensorwise* ]] && base=$TMP/one_tw.jsonl
    [[ $rest == *blockwise* ]] && base=$TMP/one_bw.jsonl
    if [[ $rest == *MOE ]]; then
        unset 'extra[${#extra[@]}-1]'
        base=$TMP/moe_one.jsonl
        moe1=("${MOE[@]}" "${extra[@]:2}")
        rm -f "$base"
        timeout 120 "$BIN" train "${MODEL[@]}" "${moe1[@]}" --metrics-file "$base" \
            >"$TMP/moe_one.log" 2>&1 || fail "fp8 MoE one rank ${moe1[*]}" "$(tail -n 3 "$TMP/moe_one.log")"
        extra+=("${MOE[@]}")
    fi
    name="train fp8 np=$np ${rest#*:}"
    rm -f "$TMP/got.jsonl"
    if ! timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MODEL[@]}" "${extra[@]}" \
        --metrics-file "$TMP/got.jsonl" >"$TMP/got.log" 2>&1; then
        fail "$name (exit status)" "$(tail -n 3 "$TMP/got.log")"
    elif ! paste <(vals "$base") <(vals "$TMP/got.jsonl") | awk -v tol="$tol" \
        'NF != 2 || ($1 - $2) > tol * $1 || ($2 - $1) > tol * $1 { bad = 1 } END { exit bad || NR != n }' n="$n"; then
        fail "$name (metrics differ from one rank's beyond $tol)" \
            "one rank: $(vals "$base" | tr '\n' ' ')" "$np ranks: $(vals "$TMP/got.jsonl" | tr '\n' ' ')"
    else
        pass "$name: 6 iterations' ${KEYS//|/ and } within $tol of one rank's"
    fi
done
# --fp8-param-gather: the distributed optimizer gathers the fp8 linears' weights as fp8 bytes,
# cast where they are updated (model/fp8.h); the forward reads those bytes instead of casting the
# weights, which other ranks updated and nobody gathered in the compute dtype. The bytes are the
# cast the forward would make: the same losses as without the flag, exactly (the grad norm within
# fp32 rounding: same_losses), for both recipes,
# with the gathers inside forward, under TP 2 x DP 2, PP 2 x DP 2, and for an MoE model's experts
# (EP 2, and EP 2 x DP 2 with the experts' fp8 buffer sharded too)
KEYS='lm_loss|grad_norm'
for v in "2:--use-distributed-optimizer" "2:--use-distributed-optimizer --fp8-recipe tensorwise" \
    "2:--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" \
    "4:--use-distributed-optimizer --tensor-model-parallel-size 2 --sequence-parallel" \
    "4:--use-distributed-optimizer --pipeline-model-parallel-size 2" \
    "2:--use-distributed-optimizer --expert-model-parallel-size 2 MOE" \
    "4:--use-distributed-optimizer --expert-model-parallel-size 2 --fp8-recipe tensorwise MOE"; do
    np=${v%%:*}
    read -r -a extra <<<"${v#*:}"
    if [ "${extra[${#extra[@]}-1]}" = MOE ]; then
        unset 'extra[${#extra[@]}-1]'
        extra+=("${MOE[@]}")
    fi
    for g in plain fp8; do
        flag=()
        [ $g = fp8 ] && flag=(--fp8-param-gather)
        rm -f "$TMP/pg_$g.jsonl"
        timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MODEL[@]}" "${extra[@]}" "${flag[@]}" \
            --metrics-file "$TMP/pg_$g.jsonl" >"$TMP/pg_$g.log" 2>&1
    done
    name="train fp8 np=$np ${v#*:} --fp8-param-gather"
    if ! grep -q "all-gather of the parameters' fp8 bytes" "$TMP/pg_fp8.log"; then
        fail "$name (no buffer gathers fp8 bytes)" "$(grep 'gradient buffer' "$TMP/pg_fp8.log")"
    else
        same_losses "$name against without" "without" "$TMP/pg_plain.jsonl" "with" \
            "$TMP/pg_fp8.jsonl" "$TMP/pg_fp8.log"
    fi
done
# ... and a run saved at iteration 3 and resumed goes on as the straight run
rm -rf "$TMP/pg_ck" "$TMP/pg_resumed.jsonl"
PG=(--use-distributed-optimizer --fp8-param-gather --fp8-recipe tensorwise)
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${PG[@]}" --save "$TMP/pg_ck" \
    --save-interval 3 --exit-interval 3 >"$TMP/pg_save.log" 2>&1
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${PG[@]}" --load "$TMP/pg_ck" \
    --metrics-file "$TMP/pg_resumed.jsonl" >"$TMP/pg_load.log" 2>&1
rm -f "$TMP/pg_fp8.jsonl"
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${PG[@]}" \
    --metrics-file "$TMP/pg_fp8.jsonl" >"$TMP/pg_fp8.log" 2>&1
want=$(vals "$TMP/pg_fp8.jsonl" | tail -n 6)
got=$(vals "$TMP/pg_resumed.jsonl")
if [ -n "$want" ] && [ "$want" = "$got" ]; then
    pass "train fp8 np=2 --fp8-param-gather: resumed at iteration 3, iterations 4-6 as the straight run"
else
    fail "train fp8 np=2 --fp8-param-gather resume" "straight: $(echo $want)" "resumed: $(echo $got)" \
        "$(tail -n 2 "$TMP/pg_load.log")"
fi
# ... and keeps the compute-dtype values of those weights for this rank's shard alone (the forward
# reads the gathered bytes): on DP 2 with fp32 parameters (the cpu backend) a model of 98% fp8
# weights holds 4 x 1/2 + 1 = 3 bytes per weight, not 4 (`memory per parameter`, from the arenas)
WIDE=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 32 --vocab-size 128
    --make-vocab-size-divisible-by 64 --mock-data --micro-batch-size 1 --global-batch-size 2
    --lr 1e-3 --train-iters 1 --eval-iters 0 --device cpu --num-threads 1
    --use-distributed-optimizer --fp8-format hybrid)
bytes_per_weight() { grep -m1 -oE "from the arenas\): weights [0-9.]+" "$1" | grep -oE "[0-9.]+$"; }
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${WIDE[@]}" >"$TMP/mem_plain.log" 2>&1
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${WIDE[@]}" --fp8-param-gather >"$TMP/mem_pg.log" 2>&1
plain=$(bytes_per_weight "$TMP/mem_plain.log") pg=$(bytes_per_weight "$TMP/mem_pg.log")
if [ "$plain" = 4.00 ] && awk -v b="${pg:-9}" 'BEGIN { exit !(b >= 3.0 && b <= 3.05) }'; then
    pass "train fp8 np=2 --fp8-param-gather: $pg bytes per weight (without: $plain)"
else
    fail "train fp8 np=2 --fp8-param-gather memory" "without: ${plain:-none} B, with: ${pg:-none} B" \
        "$(tail -n 2 "$TMP/mem_pg.log")"
fi
# a checkpoint whose layers hold another number of fp8 linears (ECHO keeps the routed experts in
# the compute dtype: 4 per layer; without it they are fp8: 6) loads with one warning per rank,
# the scales from 1, and trains on
rm -rf "$TMP/echo_ck"
EP=(--expert-model-parallel-size 2 "${MOE[@]}" --train-iters 8)
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${EP[@]}" --moe-enable-echo \
    --save "$TMP/echo_ck" --save-interval 4 --exit-interval 4 >"$TMP/echo_save.log" 2>&1
timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${EP[@]}" --load "$TMP/echo_ck" \
    >"$TMP/echo_load.log" 2>&1
if [ "$(grep -c 'has another number of fp8 linears per layer' "$TMP/echo_load.log")" -eq 2 ] &&
    grep -q 'iteration        8/       8' "$TMP/echo_load.log"; then
    pass "train fp8 np=2 EP 2: a checkpoint with another number of fp8 linears per layer loads with a warning"
else
    fail "train fp8 np=2 EP 2: checkpoint with another number of fp8 linears per layer" \
        "$(tail -n 3 "$TMP/echo_save.log")" "$(tail -n 3 "$TMP/echo_load.log")"
fi
finish
