# Shared helpers for the CLI test scripts (sourced, not run). A script calls expect_* and ends with
# `finish`, which prints "N passed, N failed".
MEGATRON=${MEGATRON:-build/megatron}
PASSED=0 FAILED=0
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1"; shift; printf '  %s\n' "$@"; FAILED=$((FAILED + 1)); }
# expect_error NAME EXIT_CODE 'regex the first stderr line must match' ARGS...
expect_error() {
    local name=$1 code=$2 pattern=$3; shift 3
    local err rc
    err=$("$MEGATRON" "$@" 2>&1 >/dev/null); rc=$?
    local lines; lines=$(printf '%s\n' "$err" | grep -c .)
    if [ "$rc" -ne "$code" ]; then fail "$name" "exit code $rc, expected $code" "stderr: $err"
    elif ! grep -qE -- "$pattern" <<<"$err"; then fail "$name" "stderr does not match /$pattern/" "stderr: $err"
    elif [ "$lines" -ne 1 ]; then fail "$name" "expected a one-line error, got $lines lines" "$err"
    else pass "$name"; fi
}
finish() { echo "$PASSED passed, $FAILED failed"; }
