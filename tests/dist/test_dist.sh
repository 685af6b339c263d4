#!/usr/bin/env bash
# The multi-rank suite (a part of tests/run.sh): BUILD/dist_tests on 1 rank (no launcher), then
# under `mpirun --oversubscribe` on 2, 4 and 8 ranks, then injected failures whose exit
# status, stderr lines and duration are checked here. Prints PASS/FAIL lines and "N passed,
# N failed"; a build without MPI (or a machine without mpirun) reports itself skipped.
#   tests/dist/test_dist.sh [BUILD]          MG_DIST_RANKS="2 4 8" picks the rank counts
set -u
BUILD=${1:-build}
BIN=$BUILD/dist_tests
SUITE=dist
. "$(dirname "$0")/lib.sh"
[ -x "$BIN" ] || skip "$BIN is not built (make $BIN)"
mpi_cpu_prologue "$BIN"

# One run of every test: its PASS/FAIL lines get the rank count as a prefix.
run_tests() { # NAME COMMAND...
    local name=$1; shift
    local out rc
    out=$(timeout 120 "$@" --timeout 60 2>&1); rc=$?
    tally "$name" "$rc" "$out"
}

run_tests "np=1" "$BIN"
run_tests "mpirun np=1" "${MPIRUN[@]}" -np 1 "$BIN"
for np in ${MG_DIST_RANKS:-2 4 8}; do run_tests "np=$np" "${MPIRUN[@]}" -np "$np" "$BIN"; done

# An injected failure: every rank but the victim must exit with one line matching PATTERN (with
# R replaced by its rank), the job must fail, and all of it within BOUND seconds. MIN_PRINTED: how
# many of those ranks must have printed (a rank the launcher kills first prints nothing).
scenario() { # NAME NP VICTIM TIMEOUT BOUND MIN_PRINTED PATTERN
    local name=$1 np=$2 victim=$3 tmo=$4 bound=$5 min=$6 pattern=$7
    local start out rc took r printed=0 bad=()
    start=$(now)
    out=$(timeout "$bound" "${MPIRUN[@]}" -np "$np" "$BIN" --scenario "${name%-server}" \
        --victim "$victim" --timeout "$tmo" 2>&1); rc=$?
    took=$(elapsed "$start")
    for ((r = 0; r < np; r++)); do
        [ "$r" -eq "$victim" ] && continue
        local re="^dist_tests: rank $r: error after [0-9.]+ s: ${pattern//R/$r}\$"
        if grep -qE -- "$re" <<<"$out"; then
            printed=$((printed + 1))
        elif grep -q "^dist_tests: rank $r: " <<<"$out"; then
            bad+=("rank $r printed: $(grep "^dist_tests: rank $r: " <<<"$out")" "expected: $re")
        fi
    done
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
        fail "scenario $name np=$np (exit status $rc; 0: nobody failed, 124: still running after $bound s)" "$out"
    elif [ ${#bad[@]} -gt 0 ]; then
        fail "scenario $name np=$np (wrong message)" "${bad[@]}"
    elif [ "$printed" -lt "$min" ]; then
        fail "scenario $name np=$np ($printed ranks reported the failure, want >= $min)" "$out"
    else
        pass "scenario $name np=$np: $printed ranks reported it, exit status $rc, ${took} s"
    fi
}

CALL="all_reduce #2 on group 'world'"
# (a) rank 1 calls mg_comm_world_fail while the others wait in the all-reduce (timeout 60 s).
scenario fail 4 1 60 20 3 \
    "rank 1 failed: injected failure on purpose \(dist test scenario 'fail'\) \(this rank, R, was in $CALL\)"
# (b) a rank dies without a word: rank 2, then rank 0 (the rendezvous server itself). mpirun
# kills the survivors as soon as it sees the exit, racing their own report: one report suffices.
scenario exit 4 2 60 20 1 "rank 2 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
scenario exit-server 2 0 60 20 1 "rank 0 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
# The NCCL watchdog's scenario (run_nccl.sh) on host buffers: the blocking wait is a no-op and
# the all-reduce itself fails, as in (b); this keeps the scenario's option working on CPU.
scenario exit-blocking 4 2 60 20 1 "rank 2 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
# (c) rank 1 never makes the call: the others time out after 2 s, ask each other where they wait
# (0.5 s) and name rank 1 as the one that did not reach it, each in its own timeout line or in
# the one a faster peer posted first.
scenario hang 4 1 2 20 3 \
    "($CALL \(ranks 0,1,2,3\) timed out after 2 s on rank R; ranks that did not reach it: 1|rank [0-9] failed: $CALL \(ranks 0,1,2,3\) timed out after 2 s on rank [0-9]; ranks that did not reach it: 1 \(this rank, R, was in $CALL\))"
finish
