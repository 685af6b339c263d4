#!/usr/bin/env bash
# Runs the whole CPU suite: the unit-test binary, every tests/cli/test_*.sh script and the
# multi-rank suites tests/dist/test_dist.sh and tests/dist/test_train.sh. Each part prints PASS/FAIL lines and ends with
# "N passed, N failed"; this script sums them into the final line and exits non-zero when
# anything failed.
set -u
BUILD=${1:-build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export MEGATRON="$BUILD/megatron"
total_pass=0 total_fail=0
tally() { # reads a part's output, echoes it, adds its closing counts
    local out=$1 line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $2 (did not finish: no closing count line)"
        total_fail=$((total_fail + 1))
        return
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
}
start=$(date +%s)
out=$("$BUILD/unit_tests" 2>&1); echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
tally "$out" unit_tests
for s in tests/cli/test_*.sh; do
    [ -e "$s" ] || continue
    out=$(bash "$s" 2>&1); echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    tally "$out" "$s"
done
# Multi-rank tests under mpirun (skipped, with a line saying why, in builds without MPI): the
# comm and trainer tests of dist_tests, then `megatron train` itself on several ranks.
for s in tests/dist/test_dist.sh tests/dist/test_train.sh tests/dist/test_train_recompute.sh \
    tests/dist/test_train_fp8.sh; do
    out=$(bash "$s" "$BUILD" 2>&1); echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    tally "$out" "$s"
done
echo "suite time: $(( $(date +%s) - start )) s"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
