#!/usr/bin/env bash
# `make test-cuda` (GPU machine): the CUDA backend tests, BUILD/cuda_tests, once per compute dtype
# in CUDA_DTYPE ("bf16 fp16" unless set; the binary reads it as MG_TEST_CUDA_DTYPE), each PASS/FAIL
# line tagged with its dtype, each run's time after it (MG_TEST_TIME=1: each test's too), then one
# closing line "N passed, N failed" over all the runs. Exits non-zero when anything failed or a
# run ended without its count line. Usage:
#   tests/cuda/run.sh BUILD [FILTER]      (FILTER: only tests whose name contains it)
set -u -o pipefail
BUILD=${1:-build}
FILTER=${2:-}
total_pass=0 total_fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for dt in ${CUDA_DTYPE:-bf16 fp16}; do
    case $dt in
    bf16 | fp16) ;;
    *) echo "CUDA_DTYPE: '$dt' is not a compute dtype of the CUDA backend (bf16, fp16)" >&2; exit 2 ;;
    esac
    echo "== cuda_tests, compute dtype $dt"
    start=$SECONDS
    MG_TEST_CUDA_DTYPE=$dt "$BUILD/cuda_tests" $FILTER 2>&1 |
        sed -u -E "s/^(PASS|FAIL) /\1 [$dt] /" | tee "$log" | grep --line-buffered -v -E '^[0-9]+ passed, [0-9]+ failed$'
    echo "== cuda_tests, compute dtype $dt: $((SECONDS - start)) s"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL [$dt] cuda_tests (did not finish: no closing count line)"
        total_fail=$((total_fail + 1))
        continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
