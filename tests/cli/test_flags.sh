#!/usr/bin/env bash
# `megatron train` flag errors as the user sees them: exit code and the one-line message.
# Usage: MEGATRON=build/megatron bash tests/cli/test_flags.sh
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32)
RUN=(--train-iters 10 --lr 1e-3 --mock-data --vocab-size 100)

expect_error flags_unknown_suggests 2 "unknown flag '--hiden-size'; did you mean '--hidden-size'\?" \
    train --num-layers 2 --hiden-size 64
expect_error flags_unknown_no_match 2 "unknown flag '--xyzzy'; see .megatron train --help." \
    train --xyzzy
expect_error flags_bad_integer 2 "--num-layers expects an integer, got 'abc'" \
    train --num-layers abc
expect_error flags_bad_float 2 "--lr expects a number, got 'fast'" train --lr=fast
expect_error flags_missing_value 2 "--seq-length expects a value" train --seq-length
expect_error flags_bad_enum 2 "--normalization expects one of LayerNorm or RMSNorm, got 'rmsnorm'" \
    train --normalization rmsnorm
expect_error flags_hidden_not_divisible 2 \
    "--hidden-size 100 is not divisible by --num-attention-heads 3.*--kv-channels" \
    train --num-layers 2 --hidden-size 100 --num-attention-heads 3 --seq-length 32 "${RUN[@]}"
expect_error flags_gbs_not_divisible 2 \
    "global batch size \(10\) is not divisible by micro batch size \(4\) times data parallel size \(1\); make --global-batch-size a multiple of 4" \
    train "${MODEL[@]}" "${RUN[@]}" --micro-batch-size 4 --global-batch-size 10
expect_error flags_missing_train_iters 2 "missing --train-iters" \
    train "${MODEL[@]}" --lr 1e-3 --mock-data --vocab-size 100
expect_error flags_missing_model_flags 2 "missing required model flags --hidden-size, --seq-length" \
    train --num-layers 2 --num-attention-heads 4 "${RUN[@]}"
expect_error flags_tp_needs_ranks 2 \
    "world size 1 is not divisible by tensor \(2\) x pipeline \(1\) x context \(1\) = 2" \
    train "${MODEL[@]}" "${RUN[@]}" --tensor-model-parallel-size 2
expect_error flags_tp_heads 2 \
    "num_attention_heads \(4\) must be a multiple of tensor_model_parallel_size \(3\)" \
    train "${MODEL[@]}" "${RUN[@]}" --tensor-model-parallel-size 3
expect_error flags_pp_world 2 \
    "world size 1 is not divisible by tensor \(1\) x pipeline \(2\) x context \(1\) = 2" \
    train "${MODEL[@]}" "${RUN[@]}" --pipeline-model-parallel-size 2
expect_error flags_overlap_param_gather_alone 2 \
    "--overlap-param-gather needs --overlap-grad-reduce as well" \
    train "${MODEL[@]}" "${RUN[@]}" --use-distributed-optimizer --overlap-param-gather
expect_error flags_bad_ddp_bucket_size 2 "--ddp-bucket-size must be positive, got 0" \
    train "${MODEL[@]}" "${RUN[@]}" --overlap-grad-reduce --ddp-bucket-size 0
REAL=$MEGATRON
MEGATRON=env expect_error flags_multi_rank_launch 1 \
    "^\\[rank 1\\] megatron: error: torchrun started 2 ranks, but data-parallel training on the cpu backend runs over MPI: start it with mpirun -np 2 \\(or srun\\)" \
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cpu
MEGATRON=env expect_error flags_bad_launch_env 2 "RANK" \
    RANK=3 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$REAL" train "${MODEL[@]}" "${RUN[@]}"
expect_error flags_bad_dropout 2 "--hidden-dropout must be in \[0, 1\) \(0 disables\), got 1" \
    train "${MODEL[@]}" "${RUN[@]}" --hidden-dropout 1
expect_error flags_negative_attention_dropout 2 \
    "--attention-dropout must be in \[0, 1\) \(0 disables\), got -0.1" \
    train "${MODEL[@]}" "${RUN[@]}" --attention-dropout -0.1
# Megatron's stream masks number an op's elements in 34 bits: 4 x 65536 tokens x 65536 is one
# too many (refused at validation, before anything is allocated)
expect_error flags_dropout_tensor_too_large 1 \
    "micro-batch-size x seq-length x hidden-size .* < 2\^34, here 17179869184; pass --attention-dropout 0 --hidden-dropout 0" \
    train --num-layers 2 --hidden-size 65536 --num-attention-heads 512 --seq-length 65536 \
    --micro-batch-size 4 "${RUN[@]}"
expect_error flags_no_data 2 "no training data: pass --mock-data" \
    train "${MODEL[@]}" --train-iters 10 --lr 1e-3 --vocab-size 100
expect_error flags_bad_distributed_timeout 2 "--distributed-timeout-minutes must be positive, got 0" \
    train "${MODEL[@]}" "${RUN[@]}" --distributed-timeout-minutes 0
# --device cuda where it cannot run: a build without the CUDA backend (CI: no nvcc) refuses it at
# validation, a build with it on a machine without a GPU fails creating the backend; either way
# one line and exit 1. Where a GPU is usable the run simply trains.
if "$MEGATRON" train "${MODEL[@]}" "${RUN[@]}" --device cuda >/dev/null 2>&1; then
    pass flags_cuda_not_built
else
    expect_error flags_cuda_not_built 1 \
        "this build has no CUDA backend \(nvcc/cuBLAS were not found when it was built\); use --device cpu|no CUDA device" \
        train "${MODEL[@]}" "${RUN[@]}" --device cuda
    GPU=no
fi
# The pipeline's measurement switch: 0 or 1, anything else stops the run before training.
MEGATRON=env expect_error flags_bad_pp_timing_env 2 "MG_PP_TIMING=yes: expected 0 or 1" \
    MG_PP_TIMING=yes "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cpu
# The expert-parallel exchange's switch: stores or all-to-all, checked for every MoE run.
MEGATRON=env expect_error flags_bad_moe_exchange_env 2 \
    "MG_MOE_EXCHANGE=bogus: expected stores \(the default\) or all-to-all" \
    MG_MOE_EXCHANGE=bogus "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cpu --num-experts 4 \
    --moe-router-topk 2
# The switch of sequence parallelism's exchanges: copies or collectives, checked for every run.
MEGATRON=env expect_error flags_bad_tp_reduce_env 2 \
    "MG_TP_EXCHANGE=bogus: expected copies \(the default\) or collectives" \
    MG_TP_EXCHANGE=bogus "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cpu
# The switch of the data-parallel exchanges: collectives or copies, checked for every run.
MEGATRON=env expect_error flags_bad_dp_exchange_env 2 \
    "MG_DP_EXCHANGE=bogus: expected copies \(the default\) or collectives" \
    MG_DP_EXCHANGE=bogus "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cpu
# The CUDA backend's environment variables, where a GPU is usable (they are read when the backend
# is created, and cached for the process, so they are checked through the command line).
if [ "${GPU:-yes}" = yes ]; then
    MEGATRON=env expect_error flags_bad_attention_env 2 \
        "MG_ATTENTION=bogus: expected ours, cudnn or cudnn-nondet" \
        MG_ATTENTION=bogus "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cuda
    MEGATRON=env expect_error flags_bad_peer_copy_streams_env 2 \
        "MG_PEER_COPY_STREAMS=9: expected 1 to 4" \
        MG_PEER_COPY_STREAMS=9 "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cuda
    MEGATRON=env expect_error flags_bad_workspace_env 2 "MG_CUDA_WORKSPACE_MB=0" \
        MG_CUDA_WORKSPACE_MB=0 "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cuda
    MEGATRON=env expect_error flags_bad_tune_env 2 "MG_CUBLASLT_TUNE=yes: expected 0 or 1" \
        MG_CUBLASLT_TUNE=yes "$REAL" train "${MODEL[@]}" "${RUN[@]}" --device cuda
fi

# --help exits 0, prints to stdout and lists every group.
out=$("$MEGATRON" train --help 2>/dev/null); rc=$?
missing=""
for g in model: "regularisation and optimizer:" "learning rate:" training: logging: \
    checkpointing: data: runtime: --num-layers --tensor-model-parallel-size; do
    grep -qF -- "$g" <<<"$out" || missing="$missing '$g'"
done
if [ "$rc" -ne 0 ]; then fail flags_help "exit code $rc, expected 0"
elif [ -n "$missing" ]; then fail flags_help "help lacks:$missing"
else pass flags_help; fi
# the MoE flags have a group of their own, the expert-parallel sizes in it
moe_help=$(sed -n '/^mixture of experts:$/,/^$/p' <<<"$out")
missing=""
for f in --num-experts --moe-router-topk --moe-aux-loss-coeff --moe-token-dispatcher-type \
    --expert-model-parallel-size --expert-tensor-parallel-size; do
    grep -qE -- "^  $f( |$)" <<<"$moe_help" || missing="$missing $f"
done
if [ -n "$missing" ]; then fail flags_help_moe_group "the 'mixture of experts:' group lacks:$missing"
else pass flags_help_moe_group; fi

# Mixture of experts: the flags' checks (Megatron's TransformerConfig rules and ours)
MOE=(--num-experts 4 --device cpu)
expect_error moe_topk_over_experts 2 "--moe-router-topk 5 must be between 1 and --num-experts 4" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-topk 5
expect_error moe_unknown_score_function 2 "--moe-router-score-function expects one of softmax or sigmoid, got 'tanh'" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-score-function tanh
expect_error moe_experts_over_ep 2 "--num-experts 4 is not divisible by --expert-model-parallel-size 3" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --expert-model-parallel-size 3
expect_error moe_ep_without_experts 2 "--expert-model-parallel-size 2 needs --num-experts" \
    train "${MODEL[@]}" "${RUN[@]}" --expert-model-parallel-size 2
expect_error moe_force_balance_without_experts 2 "--moe-router-force-load-balancing needs --num-experts" \
    train "${MODEL[@]}" "${RUN[@]}" --moe-router-force-load-balancing
expect_error moe_ep_over_world 2 "--expert-model-parallel-size 2 does not divide the data-parallel size 1" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --expert-model-parallel-size 2
expect_error moe_top1_softmax 2 "--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-topk 1
expect_error moe_layer_freq_length 2 "--moe-layer-freq '\[1,0,1\]' describes 3 layers, but --num-layers is 2" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-layer-freq "[1,0,1]"
expect_error moe_layer_freq_syntax 2 "--moe-layer-freq '\(\[1\]\*2' is not an integer or a 0/1 list expression" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-layer-freq "([1]*2"
expect_error moe_groups 2 "--num-experts 4 is not divisible by --moe-router-num-groups 3" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-num-groups 3 --moe-router-group-topk 1
expect_error moe_group_topk_without_groups 2 "--moe-router-group-topk needs --moe-router-num-groups" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-group-topk 1
expect_error moe_topk_over_groups 2 "--moe-router-topk 2 cannot be chosen from 1 group\\(s\\) of 1 experts" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-num-groups 4 --moe-router-group-topk 1
expect_error moe_capacity_zero 2 "--moe-expert-capacity-factor 0 drops every token" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-expert-capacity-factor 0
expect_error moe_shared_negative 2 "--moe-shared-expert-intermediate-size must be positive, got -8" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-shared-expert-intermediate-size -8
expect_error moe_negative_aux 2 "--moe-aux-loss-coeff must not be negative, got -0.1" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-aux-loss-coeff -0.1
expect_error moe_bias_softmax 2 "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-router-enable-expert-bias
expect_error moe_pad_without_capacity 2 "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-pad-expert-input-to-capacity
expect_error moe_etp 1 "--expert-tensor-parallel-size 2 is not supported yet" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --expert-tensor-parallel-size 2
expect_error moe_shared_overlap_allgather 2 "--moe-shared-expert-overlap only works with --moe-token-dispatcher-type alltoall" \
    train "${MODEL[@]}" "${RUN[@]}" "${MOE[@]}" --moe-shared-expert-intermediate-size 32 --moe-shared-expert-overlap

finish
