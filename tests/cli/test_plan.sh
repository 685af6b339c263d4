#!/usr/bin/env bash
# `megatron plan`: the JSON object on seed 004's 16-GPU example and seed 003's interleaved
# schedule (values written out in the seeds), the text view, and the one-line usage errors.
. "$(dirname "$0")/lib.sh"

# expect_json NAME 'fixed string the JSON must contain' ARGS...
expect_json() {
    local name=$1 want=$2; shift 2
    local out rc
    out=$("$MEGATRON" plan --json "$@" 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then fail "$name" "exit code $rc" "$out"
    elif [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [ "${out:0:1}" != "{" ] || [ "${out: -1}" != "}" ]; then
        fail "$name" "expected exactly one JSON object on one line" "$out"
    elif ! grep -qF -- "$want" <<<"$out"; then fail "$name" "output lacks $want" "${out:0:400}"
    else pass "$name"; fi
}

SEED=(--world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4)
# Seed 004: "8 data_parallel groups: [g0, g2], [g1, g3], ...; 8 tensor model-parallel groups:
# [g0, g1], ...; 4 pipeline model-parallel groups: [g0, g4, g8, g12], ..." and the model-parallel
# groups printed by its script.
expect_json plan_seed004_tp '"tp":[[0,1],[2,3],[4,5],[6,7],[8,9],[10,11],[12,13],[14,15]]' "${SEED[@]}"
expect_json plan_seed004_pp '"pp":[[0,4,8,12],[1,5,9,13],[2,6,10,14],[3,7,11,15]]' "${SEED[@]}"
expect_json plan_seed004_dp '"dp":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]]' "${SEED[@]}"
expect_json plan_seed004_mp '"mp":[[0,1,4,5,8,9,12,13],[2,3,6,7,10,11,14,15]]' "${SEED[@]}"
expect_json plan_seed004_embedding '"embedding":[[0,12],[1,13],[2,14],[3,15]]' "${SEED[@]}"
expect_json plan_seed004_rank5 '{"rank":5,"tp":1,"cp":0,"ep":0,"dp":0,"pp":1' "${SEED[@]}"

# Seed 003: PP=4, VPP=2, 8 microbatches; rank 0 warms up with 10 forwards, rank 3 with 4.
INTER=(--world-size 4 --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2
       --num-microbatches 8 --num-layers 16)
expect_json plan_seed003_table \
    '"schedule_table":[[0,0],[1,0],[2,0],[3,0],[0,1],[1,1],[2,1],[3,1],[4,0],[5,0],[6,0],[7,0],[4,1],[5,1],[6,1],[7,1]]' \
    "${INTER[@]}"
expect_json plan_seed003_rank0 \
    '{"pp_rank":0,"num_warmup_microbatches":10,"order":[1,1,1,1,2,2,2,2,1,1,1,-2,1,-2,2,-2,2,-2,2,-1,2,-1,-1,-1,-2,-2,-2,-2,-1,-1,-1,-1],"activation_slots":11}' \
    "${INTER[@]}"
expect_json plan_seed003_rank3 '{"pp_rank":3,"num_warmup_microbatches":4,' "${INTER[@]}"
expect_json plan_layers_interleaved \
    '"layers":[{"pp_rank":0,"vp_stage":0,"offset":0,"num_layers":2},{"pp_rank":0,"vp_stage":1,"offset":8,"num_layers":2}' \
    "${INTER[@]}"
expect_json plan_layers_no_vpp '{"pp_rank":1,"vp_stage":null,"offset":3,"num_layers":3}' \
    --world-size 8 --pipeline-model-parallel-size 4 --num-layers 12
expect_json plan_uneven_first_last '{"pp_rank":0,"vp_stage":null,"offset":0,"num_layers":1},{"pp_rank":1,"vp_stage":null,"offset":1,"num_layers":3}' \
    --world-size 4 --pipeline-model-parallel-size 4 --num-layers 8 \
    --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1
expect_json plan_microbatches_from_batch '"num_microbatches":4,' \
    --world-size 8 --pipeline-model-parallel-size 2 --global-batch-size 32 --micro-batch-size 2
expect_json plan_tp_pp_dp_mapping '"pp":[[0,1],[2,3],[4,5],[6,7]],"dp":[[0,2,4,6],[1,3,5,7]]' \
    --world-size 8 --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping

# Without a pipeline the JSON has no "pipeline" and no "layers" member.
out=$("$MEGATRON" plan --json --world-size 4 --tensor-model-parallel-size 2)
if grep -qE '"pipeline"|"layers"' <<<"$out"; then fail plan_sections_optional "$out"
else pass plan_sections_optional; fi

# Text view: groups, coordinates and a timeline whose bubble matches (p-1)/(v*m).
out=$("$MEGATRON" plan "${INTER[@]}"); rc=$?
if [ "$rc" -ne 0 ]; then fail plan_text "exit code $rc"
elif ! grep -qF "pp 0  |F0a F1a F2a F3a F0b" <<<"$out"; then fail plan_text "no timeline" "$out"
elif ! grep -qF "Megatron's (p-1)/(v*m) = 0.1875" <<<"$out"; then fail plan_text "no bubble line" "$out"
else pass plan_text; fi

expect_error plan_needs_world_size 2 "needs --world-size N; the smallest for these flags is 8" \
    plan --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4
expect_error plan_world_not_divisible 2 \
    "world size 6 is not divisible by tensor \(4\) x pipeline \(1\) x context \(1\) = 4; .*1, 2, 3, 6" \
    plan --world-size 6 --tensor-model-parallel-size 4
expect_error plan_bad_order 2 "parallel-order" plan --world-size 8 --parallel-order tp-dp-pp
expect_error plan_layers_not_divisible 2 "--num-layers 10 is not divisible by --pipeline-model-parallel-size 4" \
    plan --world-size 8 --pipeline-model-parallel-size 4 --num-layers 10
expect_error plan_interleaved_bubble 2 "valid microbatch counts: 4, 8, 12" \
    plan --world-size 4 --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2 \
    --num-microbatches 6
expect_error plan_bad_microbatches 2 "--num-microbatches expects a positive integer, got '0'" \
    plan --world-size 4 --num-microbatches 0
expect_error plan_gbs_not_divisible 2 "--global-batch-size 10 is not divisible by --micro-batch-size 1 x data-parallel size 4" \
    plan --world-size 4 --global-batch-size 10
expect_error plan_unknown_flag 2 "did you mean" plan --world-size 4 --tensor-model-paralel-size 2

finish
