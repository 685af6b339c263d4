#!/usr/bin/env bash
# --cuda-graph-impl full_iteration as a user sees it, on the CPU backend (whose graphs replay the
# recorded backend calls; train/trainer_graph.h):
#   - the log says when the step is captured, and every iteration's loss and grad norm equals the
#     eager run's, digit for digit (dropout at Megatron's default, on);
#   - fp16 with overflows injected into replayed steps (MG_FAULT_OVERFLOW): the same skips, loss
#     scales and losses as the eager run;
#   - parallel layouts under mpirun (TP 2 x PP 2 with SP and the distributed optimizer, interleaved
#     PP 2, EP 2 MoE with the distributed optimizer, DP 2 with overlapped reductions, PP 2 with a
#     loss mask), with the
#     full-iteration graphs and with per-layer graphs (local and transformer_engine, whole layers
#     and single scopes): the MPI collectives and point-to-point messages are recorded into the
#     graphs in order with the ops, and every loss, grad norm and validation loss equals the eager
#     run's;
#   - `megatron plan` counts the staged inputs in the batch arena;
#   - overlapping MoE scopes and no warm-up step are refused in one line.
source "$(dirname "$0")/lib.sh"

RUN=(train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 96
     --mock-data --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --log-interval 1
     --device cpu --num-threads 1 --eval-iters 0 --train-iters 6)
field() { grep -oE "$1: [^|]+" <<<"$2" | sed -E "s/^$1: +//; s/ +$//"; }
iters() { grep -E '\] iteration +[0-9]+/' <<<"$1"; }

eager=$("$MEGATRON" "${RUN[@]}" 2>&1)
graph=$("$MEGATRON" "${RUN[@]}" --cuda-graph-impl full_iteration --cuda-graph-warmup-steps 2 2>&1)
rc=$?
if [ $rc -ne 0 ]; then fail graph_equals_eager "exit $rc" "$(tail -n 3 <<<"$graph")"
elif ! grep -qE '^> captured the full iteration at iteration 3: [0-9]+ nodes' <<<"$graph"; then
    fail graph_equals_eager "no capture line" "$(grep '^>' <<<"$graph" | tail -n 5)"
elif [ "$(field 'lm loss' "$(iters "$eager")")" != "$(field 'lm loss' "$(iters "$graph")")" ] ||
     [ "$(field 'grad norm' "$(iters "$eager")")" != "$(field 'grad norm' "$(iters "$graph")")" ] ||
     [ "$(field 'lm loss' "$(iters "$graph")" | wc -l)" -ne 6 ]; then
    fail graph_equals_eager "the logs differ" "$(iters "$eager")" "$(iters "$graph")"
else pass graph_equals_eager; fi

# fp16 with an overflow injected in iterations 4 and 5 (replayed steps): skipped the same way
FP16=(--fp16 --initial-loss-scale 1024 --train-iters 7)
eager=$(MG_FAULT_OVERFLOW=4:5 "$MEGATRON" "${RUN[@]}" "${FP16[@]}" 2>&1)
graph=$(MG_FAULT_OVERFLOW=4:5 "$MEGATRON" "${RUN[@]}" "${FP16[@]}" --cuda-graph-impl full_iteration \
    --cuda-graph-warmup-steps 2 2>&1); rc=$?
same=1
for f in 'lm loss' 'grad norm' 'loss scale' 'number of skipped iterations'; do
    [ "$(field "$f" "$(iters "$eager")")" == "$(field "$f" "$(iters "$graph")")" ] || same=0
done
if [ $rc -ne 0 ]; then fail graph_fp16_skips_like_eager "exit $rc" "$(tail -n 3 <<<"$graph")"
elif [ $same -ne 1 ]; then fail graph_fp16_skips_like_eager "the logs differ" "$(iters "$eager")" "$(iters "$graph")"
elif [ "$(field 'number of skipped iterations' "$(iters "$graph")" | tr '\n' ' ')" != "0 0 0 1 1 0 0 " ]; then
    fail graph_fp16_skips_like_eager "iterations 4 and 5 not skipped" "$(iters "$graph")"
else pass graph_fp16_skips_like_eager; fi

# `megatron plan` counts the staged inputs: 16 microbatches x (ids, labels) x 4096 tokens x 4 bytes
PLAN=(plan --world-size 1 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 1024
      --vocab-size 96 --micro-batch-size 4 --global-batch-size 64 --device cpu)
batch_mib() { grep -oE 'pipeline rank 0: [^t]*' <<<"$1" | awk -F', ' '{print $(NF-1)}'; }
with=$("$MEGATRON" "${PLAN[@]}" --cuda-graph-impl full_iteration 2>&1)
without=$("$MEGATRON" "${PLAN[@]}" 2>&1)
if ! grep -q "CUDA graphs (full iteration): batch holds every microbatch's inputs, 0.50 MiB" <<<"$with" ||
   grep -q 'CUDA graphs' <<<"$without" ||
   [ "$(batch_mib "$with")" != 0.6 ] || [ "$(batch_mib "$without")" != 0.1 ]; then
    fail graph_plan_counts_inputs "batch $(batch_mib "$with") / $(batch_mib "$without") MiB" \
        "$(grep -A2 'memory per rank' <<<"$with")"
else pass graph_plan_counts_inputs; fi

expect_error graph_moe_scopes_overlap 2 "--cuda-graph-modules: moe captures the whole MoE sublayer" \
    "${RUN[@]}" --cuda-graph-impl local --cuda-graph-modules moe moe_router
expect_error graph_needs_a_warmup_step 2 "--cuda-graph-warmup-steps must be at least 1 here, got 0" \
    "${RUN[@]}" --cuda-graph-impl full_iteration --cuda-graph-warmup-steps 0

BIN_DIR=$(dirname "$MEGATRON")
if ! command -v mpirun >/dev/null || ! "$BIN_DIR/dist_tests" --features 2>&1 | grep -q 'mpi=yes'; then
    echo "SKIP graph_layouts: no mpirun or $BIN_DIR/dist_tests without MPI"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    PAR=(train --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
         --vocab-size 96 --mock-data --micro-batch-size 1 --global-batch-size 8 --lr 3e-3
         --log-interval 1 --device cpu --num-threads 1 --eval-iters 2 --eval-interval 3
         --train-iters 7)
    values() { grep -oE 'lm loss: [^|]+|grad norm: [^|]+|lm loss value: [^|]+' <<<"$1"; }
    # name, ranks, graphs (IMPL or IMPL:SCOPE,SCOPE), layout: the collectives (MPI) are recorded into
    # the graphs with the ops; 7 losses and norms, validation at 3, 6 and 7 and the test split at
    # 7: 18 values
    while read -r name n graphs layout; do
        scope=()
        graphs=${graphs//,/ }
        # shellcheck disable=SC2206
        [ "$graphs" != "${graphs#*:}" ] && scope=(--cuda-graph-modules ${graphs#*:})
        # shellcheck disable=SC2086
        eager=$(timeout 200 mpirun --oversubscribe -np "$n" "$MEGATRON" "${PAR[@]}" $layout 2>&1 </dev/null)
        # shellcheck disable=SC2086
        graph=$(timeout 200 mpirun --oversubscribe -np "$n" "$MEGATRON" "${PAR[@]}" $layout \
            --cuda-graph-impl "${graphs%%:*}" "${scope[@]}" --cuda-graph-warmup-steps 2 \
            2>&1 </dev/null); rc=$?
        if [ $rc -ne 0 ]; then fail "graph_$name" "exit $rc" "$(tail -n 3 <<<"$graph")"
        elif ! grep -qE 'captured the full iteration|per-layer graphs: [0-9]+ captured' <<<"$graph"; then
            fail "graph_$name" "no graph captured" "$(grep '> ' <<<"$graph" | tail -n 4)"
        elif [ "$(values "$eager")" != "$(values "$graph")" ] || [ "$(values "$graph" | wc -l)" -ne 18 ]; then
            fail "graph_$name" "the logs differ" "$(values "$eager" | tr '\n' ' ')" "$(values "$graph" | tr '\n' ' ')"
        else pass "graph_$name"; fi
    done <<'EOF2'
tp2_pp2_sp_distopt 4 full_iteration --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
pp2_interleaved 2 full_iteration --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
ep2_moe_distopt 2 full_iteration --expert-model-parallel-size 2 --num-experts 4 --moe-router-topk 2 --use-distributed-optimizer
dp2_overlapped 2 full_iteration --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
pp2_eod_mask 2 full_iteration --pipeline-model-parallel-size 2 --eod-mask-loss --calculate-per-token-loss
layer_tp2_pp2_sp_distopt 4 local --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
layer_attn_pp2_interleaved 2 local:attn --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
layer_moe_ep2_distopt 2 transformer_engine:moe --expert-model-parallel-size 2 --num-experts 4 --moe-router-topk 2 --use-distributed-optimizer
layer_router_ep2 2 transformer_engine:attn,moe_router,moe_preprocess --expert-model-parallel-size 2 --num-experts 4 --moe-router-topk 2
layer_dp2_overlapped_eod 2 local --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --eod-mask-loss
EOF2
fi

finish
