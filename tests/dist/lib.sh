# Shared helpers of the multi-rank scripts (sourced by test_dist.sh and run_nccl.sh): PASS/FAIL
# counting, timing, and folding one run's PASS/FAIL lines into the script's own.
PASSED=0 FAILED=0
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1"; shift; printf '  %s\n' "$@"; FAILED=$((FAILED + 1)); }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The PASS/FAIL lines of one run of every test, prefixed with NAME; a run that did not finish or
# failed without a FAIL line is one failure. OUT: the run's output, RC: its exit status.
tally() { # NAME RC OUT
    local name=$1 rc=$2 out=$3 line
    while IFS= read -r line; do
        case $line in
        "PASS "*) pass "$name ${line#PASS }" ;;
        "FAIL "*) fail "$name ${line#FAIL }" ;;
        esac
    done <<<"$out"
    if ! grep -qE '^[0-9]+ passed, [0-9]+ failed$' <<<"$out"; then
        fail "$name (did not finish, exit status $rc)" "$(tail -n 20 <<<"$out")"
    elif [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
        fail "$name (exit status $rc)" "$(tail -n 20 <<<"$out")"
    elif grep -q '^FAIL ' <<<"$out"; then
        grep -E '^  rank|FATAL' <<<"$out" | head -n 20 | sed 's/^/  /'
    fi
}
