#!/usr/bin/env bash
# What `megatron train` sets up, as its log says: the start-up line names the threads the cpu
# backend really computes with (never OpenMP's "-1" placeholder), and --mock-data builds only
# the splits --split gives documents, as the indexed data does: a split of weight 0 is never
# evaluated.
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64
       --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --mock-data --train-iters 2
       --eval-interval 1 --eval-iters 1 --log-interval 1 --device cpu)

run() { # LOG ARGS...: a training run's log; a failed run fails the test that reads it
    local log=$1; shift
    "$MEGATRON" train "$@" >"$log" 2>&1 || echo "RUN FAILED" >>"$log"
}

# 1. the thread count: OpenMP's default (OMP_NUM_THREADS here), or --num-threads
OMP_NUM_THREADS=3 run "$TMP/omp.log" "${MODEL[@]}"
if grep -q '^> megatron.c: training on the cpu backend (F32), 3 threads$' "$TMP/omp.log"; then
    pass train_startup_prints_openmp_threads
else
    fail train_startup_prints_openmp_threads "$(grep -m1 'threads\|RUN FAILED' "$TMP/omp.log")"
fi
OMP_NUM_THREADS=3 run "$TMP/flag.log" "${MODEL[@]}" --num-threads 2
if grep -q '^> megatron.c: training on the cpu backend (F32), 2 threads$' "$TMP/flag.log"; then
    pass train_startup_prints_num_threads
else
    fail train_startup_prints_num_threads "$(grep -m1 'threads\|RUN FAILED' "$TMP/flag.log")"
fi

# 2. --mock-data and --split: the default split evaluates validation and test; 100,0,0 neither;
# 98,2,0 validation only
expect_evals() { # NAME LOG VALIDATION_LINES TEST_LINES
    local v t
    v=$(grep -c 'validation loss at iteration [0-9]* |\|on validation set' "$2")
    t=$(grep -c 'on test set' "$2")
    if grep -q 'RUN FAILED' "$2"; then fail "$1" "$(tail -n 3 "$2")"
    elif [ "$v" -ne "$3" ] || [ "$t" -ne "$4" ]; then
        fail "$1" "validation lines $v (expected $3), test lines $t (expected $4)"
    else pass "$1"; fi
}
run "$TMP/split_default.log" "${MODEL[@]}"
expect_evals train_mock_data_default_split_evaluates_all "$TMP/split_default.log" 2 1
run "$TMP/split_train.log" "${MODEL[@]}" --split 100,0,0
expect_evals train_mock_data_split_100_0_0_evaluates_nothing "$TMP/split_train.log" 0 0
run "$TMP/split_valid.log" "${MODEL[@]}" --split 98,2,0
expect_evals train_mock_data_split_98_2_0_has_no_test "$TMP/split_valid.log" 2 0

finish
