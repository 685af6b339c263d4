#!/usr/bin/env bash
# --dataloader-type cyclic end to end (the real binary, mock data, a tiny model; the sample order
# itself is tests/unit/test_cyclic_sampler.c's, against Megatron's sampler):
#   - it trains, says so, and its losses differ from the single loader's (another order);
#   - 10 iterations straight equal 5, a checkpoint and 5 more, training and validation losses
#     alike (the loaders restart mid-epoch from the checkpoint's consumed samples);
#   - data parallelism (mpirun, skipped without MPI): without data sharding the global batch holds
#     the one-rank run's samples, so 2 ranks log its losses; with sharding (Megatron's default)
#     each rank draws from its own bucket and the losses differ;
#   - bad input: --dataloader-type external is refused in one line; so is a resume whose consumed
#     samples are not whole micro batches over the ranks (Megatron's sampler asserts it).
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --vocab-size 128 --make-vocab-size-divisible-by 64
       --mock-data --seed 5 --log-interval 1 --num-threads 1 --hidden-dropout 0
       --attention-dropout 0 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
       --lr-warmup-iters 1 --train-iters 10 --eval-interval 5 --eval-iters 2)
# the training and validation losses of a log, one per line, in order
lm() { grep -oE '(lm loss: |lm loss value: )[0-9.E+-]+' "$1" | awk '{ print $NF }'; }

"$MEGATRON" train "${MODEL[@]}" >"$TMP/single.log" 2>&1 || fail cyclic_setup "$(tail -n 2 "$TMP/single.log")"
"$MEGATRON" train "${MODEL[@]}" --dataloader-type cyclic >"$TMP/cyclic.log" 2>&1; rc=$?
if [ "$rc" -ne 0 ]; then fail cyclic_trains "exit $rc: $(tail -n 2 "$TMP/cyclic.log")"
elif [ "$(grep -c '\] iteration .*lm loss:' "$TMP/cyclic.log")" -ne 10 ]; then
    fail cyclic_trains "expected 10 iteration lines"
elif ! grep -q "> --dataloader-type cyclic, train: 40 samples, epochs of 40 (data sharding on), from sample 0 (epoch 0)" "$TMP/cyclic.log"; then
    fail cyclic_trains "no loader line: $(grep -m 2 'dataloader' "$TMP/cyclic.log")"
elif [ "$(lm "$TMP/single.log" | head -n 1)" != "$(lm "$TMP/cyclic.log" | head -n 1)" ] &&
     ! diff <(lm "$TMP/single.log") <(lm "$TMP/cyclic.log") >/dev/null; then
    pass cyclic_trains
else fail cyclic_trains "the losses equal the single loader's: the order did not change"; fi

# 5 + resume 5 against 10: the resumed log's losses (iterations 6-10, validation at 10, test) are
# the straight run's from iteration 6 (its validation at 5 is the first half's)
"$MEGATRON" train "${MODEL[@]}" --dataloader-type cyclic --save "$TMP/ck" --save-interval 5 \
    --exit-interval 5 >"$TMP/first.log" 2>&1 || fail cyclic_resume "first half: $(tail -n 2 "$TMP/first.log")"
"$MEGATRON" train "${MODEL[@]}" --dataloader-type cyclic --load "$TMP/ck" >"$TMP/resumed.log" 2>&1; rc=$?
sed -n '/iteration        6\//,$p' "$TMP/cyclic.log" >"$TMP/tail.log"
if [ "$rc" -ne 0 ]; then fail cyclic_resume "exit $rc: $(tail -n 2 "$TMP/resumed.log")"
elif ! grep -q "validation: 24 samples, epochs of 24 (data sharding on), from sample 8 (epoch 0)" "$TMP/resumed.log"; then
    fail cyclic_resume "the validation loader does not resume at 8: $(grep 'cyclic, validation' "$TMP/resumed.log")"
elif [ "$(lm "$TMP/resumed.log" | wc -l)" -ne 7 ] || ! diff <(lm "$TMP/tail.log") <(lm "$TMP/resumed.log") >/dev/null; then
    fail cyclic_resume "losses differ from the uninterrupted run's" \
        "straight: $(lm "$TMP/tail.log" | tr '\n' ' ')" "resumed:  $(lm "$TMP/resumed.log" | tr '\n' ' ')"
else pass cyclic_resume; fi

expect_error cyclic_external_refused 1 "--dataloader-type external is not supported yet by this build; use single or cyclic" \
    train "${MODEL[@]}" --dataloader-type external
# Megatron's sampler asserts that the consumed samples are whole micro batches over the ranks
expect_error cyclic_resume_needs_whole_batches 2 "--dataloader-type cyclic: 20 consumed samples are not a multiple of micro batch x data-parallel size \(8\), as Megatron's sampler requires \(the train split\)" \
    train "${MODEL[@]}" --dataloader-type cyclic --load "$TMP/ck" --micro-batch-size 8 \
    --global-batch-size 8 --override-opt-param-scheduler

BIN_DIR=$(dirname "$MEGATRON")
if ! command -v mpirun >/dev/null || ! "$BIN_DIR/dist_tests" --features 2>&1 | grep -q 'mpi=yes'; then
    echo "SKIP cyclic multi-rank: no mpirun or $BIN_DIR/dist_tests without MPI"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    DP=("${MODEL[@]}" --micro-batch-size 1 --global-batch-size 8 --device cpu --dataloader-type cyclic)
    close() { # the losses of two logs agree to 2e-6 relative (the log's 7 digits, summation order)
        paste <(lm "$1") <(lm "$2") | awk '
            NF != 2 || ($1 - $2) > 2e-6 * $1 || ($2 - $1) > 2e-6 * $1 { bad = 1 }
            END { exit bad || NR != 13 }'
    }
    "$MEGATRON" train "${DP[@]}" --no-data-sharding >"$TMP/dp1.log" 2>&1; rc1=$?
    timeout 120 mpirun --oversubscribe -np 2 "$MEGATRON" train "${DP[@]}" --no-data-sharding \
        >"$TMP/dp2.log" 2>&1; rc2=$?
    timeout 120 mpirun --oversubscribe -np 2 "$MEGATRON" train "${DP[@]}" >"$TMP/dp2s.log" 2>&1; rc3=$?
    if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ] || [ "$rc3" -ne 0 ]; then
        fail cyclic_data_parallel "exit status $rc1 / $rc2 / $rc3: $(tail -n 3 "$TMP/dp2s.log")"
    elif ! close "$TMP/dp1.log" "$TMP/dp2.log"; then
        fail cyclic_data_parallel "--no-data-sharding: 2 ranks' losses differ from one rank's" \
            "$(paste <(lm "$TMP/dp1.log") <(lm "$TMP/dp2.log") | tr '\n' ';')"
    elif close "$TMP/dp1.log" "$TMP/dp2s.log"; then
        fail cyclic_data_parallel "with data sharding 2 ranks log one rank's losses: no buckets?"
    else pass cyclic_data_parallel; fi
fi

finish
