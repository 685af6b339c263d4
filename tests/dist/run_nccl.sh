#!/usr/bin/env bash
# The multi-rank suite on the NCCL backend (`make test-nccl`, a GPU machine): BUILD/dist_tests
# --backend nccl with one process per GPU (local rank -> device)
#   1. on 1 GPU without a launcher, then under mpirun on 2 GPUs and on 4 when there are 4, and
#      the tests that gather or exchange again there with NCCL's copy-engine collectives
#      (MG_NCCL_COPY_ENGINE=1);
#   2. a torchrun-style launch: this script starts the ranks itself with RANK, WORLD_SIZE,
#      LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (2 GPUs, and 4 when there are),
#      on the tests the launch touches (collectives, groups, a data-parallel training, a resume);
#   3. injected failures while the other ranks wait inside an NCCL all-reduce (a kernel spinning
#      on a peer that never comes): a failure notice, a rank that dies without a word (also rank
#      0, which hosts the rendezvous), a rank that never makes the call. Every other rank must
#      exit 1 within the bound, with one line naming the failure and the call; that proves the
#      communicators were aborted (ncclCommAbort) instead of hanging. The "-blocking" cases have
#      the other ranks block in a plain cudaStreamSynchronize behind the all-reduce before they
#      call mg_comm_sync: only the watchdog thread (src/comm/nccl_watchdog.c) can end that wait,
#      on the peer's notice (exit-blocking) or the deadline (hang-blocking).
# Prints PASS/FAIL lines and "N passed, N failed"; exits 1 when anything failed.
# EXIT_BLOCKING_REPEATS (default 1): how many times the exit-blocking scenario runs.
#   tests/dist/run_nccl.sh [BUILD]
set -u
BUILD=${1:-build}
BIN=$BUILD/dist_tests
. "$(dirname "$0")/lib.sh"
finish() { echo "$PASSED passed, $FAILED failed"; [ "$FAILED" -eq 0 ]; exit; }

# Never NVLink multicast (NVLS) on these machines; everything below inherits it.
export NCCL_NVLS_ENABLE=0
mpi_env

if [ ! -x "$BIN" ]; then fail "$BIN is not built (make $BIN)"; finish; fi
case $("$BIN" --features 2>&1) in
*device_buffers=yes*) ;;
*) fail "this build has no NCCL backend (nvcc, nccl.h and libnccl must be found; see make info)"; finish ;;
esac
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$NGPU" -lt 1 ]; then fail "no GPU (nvidia-smi -L lists none)"; finish; fi
SIZES=()
for n in 2 4; do [ "$NGPU" -ge "$n" ] && SIZES+=("$n"); done
HAVE_MPIRUN=yes
command -v mpirun >/dev/null || HAVE_MPIRUN=
echo "run_nccl: $NGPU GPUs; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; ranks ${SIZES[*]:-none};" \
    "mpirun ${HAVE_MPIRUN:-not found (SKIP its parts; the torchrun-style launch still runs)}"
MPIRUN=(mpirun --bind-to none -x NCCL_NVLS_ENABLE)

# ---- torchrun-style launch: ranks started here, one per GPU ----
PIDS=() RUN_DIR=
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    [ -n "$RUN_DIR" ] && rm -rf "$RUN_DIR"
}
trap cleanup EXIT
# Starts NP ranks of BIN ARGS...; rank r writes RUN_DIR/out.r. Sets PIDS.
spawn() { # NP ARGS...
    local np=$1 r port=$((20000 + RANDOM % 12000)); shift
    RUN_DIR=$(mktemp -d)
    PIDS=()
    for ((r = 0; r < np; r++)); do
        RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port "$BIN" "$@" >"$RUN_DIR/out.$r" 2>&1 &
        PIDS[r]=$!
    done
}
# Waits for the ranks, except SKIP (a rank that will not end by itself), at most BOUND seconds;
# then kills what is left (SKIP included). RCS[r]: exit status, 124 when it had to be killed.
RCS=()
reap() { # BOUND SKIP
    local bound=$1 skip=$2 start r left
    start=$(date +%s)
    while :; do
        left=0
        for r in "${!PIDS[@]}"; do
            [ "$r" = "$skip" ] && continue
            kill -0 "${PIDS[r]}" 2>/dev/null && left=1
        done
        [ "$left" -eq 0 ] || [ $(($(date +%s) - start)) -ge "$bound" ] && break
        sleep 0.2
    done
    RCS=()
    for r in "${!PIDS[@]}"; do
        if kill -0 "${PIDS[r]}" 2>/dev/null; then
            kill -9 "${PIDS[r]}" 2>/dev/null
            wait "${PIDS[r]}" 2>/dev/null
            RCS[r]=124
        else
            wait "${PIDS[r]}"
            RCS[r]=$?
        fi
    done
    PIDS=()
}

# ---- 1. the suite under mpirun (and on one GPU without a launcher) ----
out=$(timeout 300 "$BIN" --backend nccl --timeout 60 2>&1)
tally "nccl np=1" $? "$out"
for np in "${SIZES[@]}"; do
    [ -n "$HAVE_MPIRUN" ] || { echo "SKIP nccl mpirun np=$np (no mpirun)"; continue; }
    out=$(timeout 300 "${MPIRUN[@]}" -np "$np" "$BIN" --backend nccl --timeout 60 2>&1)
    tally "nccl mpirun np=$np" $? "$out"
done

# ---- 1b. the tests that gather or exchange, again with NCCL's copy-engine collectives
# (MG_NCCL_COPY_ENGINE=1: the trainers' weights, activations and workspace in symmetric memory,
# the tensor-parallel and distributed-optimizer gathers and the expert-parallel exchanges on the
# copy engines; the copy_engine test checks the values; NCCL < 2.28 runs the kernels and
# copy_engine checks the refusal) ----
for np in "${SIZES[@]}"; do
    [ -n "$HAVE_MPIRUN" ] || continue
    out=$(MG_NCCL_COPY_ENGINE=1 timeout 300 "${MPIRUN[@]}" -x MG_NCCL_COPY_ENGINE -np "$np" "$BIN" \
        --backend nccl --timeout 60 \
        --filter copy_engine,all_gather,all_to_all,train_dp,train_distopt,train_tp,train_ep,train_graph,train_memory \
        2>&1)
    tally "nccl copy-engine mpirun np=$np" $? "$out"
done
# ---- 1c. expert parallelism with the slabs sent by the group's all-to-all (MG_MOE_EXCHANGE=
# all-to-all), the path of groups whose ranks cannot map each other's memory; by default the
# rows are stored straight into the peers' slabs (train_ep checks both give the same numbers) ----
for np in "${SIZES[@]}"; do
    [ -n "$HAVE_MPIRUN" ] || continue
    out=$(MG_MOE_EXCHANGE=all-to-all timeout 300 "${MPIRUN[@]}" -x MG_MOE_EXCHANGE -np "$np" \
        "$BIN" --backend nccl --timeout 60 --filter train_ep 2>&1)
    tally "nccl expert exchange by all-to-all mpirun np=$np" $? "$out"
done
# ---- 1d. the distributed optimizer's reduce-scatters and parameter gathers by the group's
# collectives (MG_DP_EXCHANGE=collectives; the runs above took the default, copies through
# peer-mapped memory, which train_distopt checks was the path taken; train_graph replays the
# collectives inside a full-iteration graph) ----
for np in "${SIZES[@]}"; do
    [ -n "$HAVE_MPIRUN" ] || continue
    out=$(MG_DP_EXCHANGE=collectives timeout 300 "${MPIRUN[@]}" -x MG_DP_EXCHANGE -np "$np" \
        "$BIN" --backend nccl --timeout 60 --filter train_distopt,train_graph 2>&1)
    tally "nccl data-parallel exchanges by collectives mpirun np=$np" $? "$out"
done
# a bad value of the switch: one line naming it, a non-zero exit
out=$(MG_NCCL_COPY_ENGINE=2 timeout 60 "$BIN" --backend nccl --timeout 60 --filter copy_engine 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "MG_NCCL_COPY_ENGINE=2: expected 0 or 1" <<<"$out"; then
    pass "nccl copy-engine switch refuses 2 (exit status $rc)"
else
    fail "nccl copy-engine switch refuses 2 (exit status $rc)" "$out"
fi

# ---- 2. a torchrun-style launch: what the launch touches (the rendezvous, the groups, every
# collective and point-to-point call, a data-parallel training and a checkpoint resumed); the
# other training tests ran under mpirun above ----
for np in "${SIZES[@]}"; do
    spawn "$np" --backend nccl --timeout 60 --filter \
        barrier,all_reduce,reduce_scatter,all_gather,all_to_all,broadcast,count_limits,p2p,groups,train_dp,train_resume
    reap 300 -1
    out=$(cat "$RUN_DIR/out.0")
    rc=0
    for r in "${!RCS[@]}"; do [ "${RCS[r]}" -ne 0 ] && rc=${RCS[r]}; done
    [ "$rc" -ne 0 ] && out+=$'\n'"$(tail -n 5 "$RUN_DIR"/out.* 2>/dev/null)"
    tally "nccl torchrun-style np=$np" "$rc" "$out"
    rm -rf "$RUN_DIR"; RUN_DIR=
done

# ---- 3. injected failures (torchrun-style: no launcher kills the survivors first) ----
CALL="all_reduce #2 on group 'world'"
# Every rank but VICTIM must exit 1 within BOUND seconds with the line PATTERN (R = its rank).
scenario() { # NAME NP VICTIM TIMEOUT BOUND PATTERN
    local name=$1 np=$2 victim=$3 tmo=$4 bound=$5 pattern=$6
    local start took r line re bad=()
    start=$(now)
    spawn "$np" --backend nccl --scenario "${name%-server}" --victim "$victim" --timeout "$tmo"
    reap "$bound" "$victim"
    took=$(elapsed "$start")
    for ((r = 0; r < np; r++)); do
        [ "$r" -eq "$victim" ] && continue
        re="^dist_tests: rank $r: error after [0-9.]+ s: ${pattern//R/$r}\$"
        line=$(grep "^dist_tests: rank $r: " "$RUN_DIR/out.$r" | head -n 1)
        if [ "${RCS[r]}" -ne 1 ]; then
            bad+=("rank $r: exit status ${RCS[r]} (124: still running after $bound s), want 1"
                  "$(tail -n 5 "$RUN_DIR/out.$r")")
        elif ! grep -qE -- "$re" <<<"$line"; then
            bad+=("rank $r printed: ${line:-nothing}" "expected: $re")
        fi
    done
    if [ ${#bad[@]} -gt 0 ]; then
        fail "nccl scenario $name np=$np victim=$victim (${took} s)" "${bad[@]}"
    else
        pass "nccl scenario $name np=$np victim=$victim: $((np - 1)) ranks reported it, ${took} s"
    fi
    rm -rf "$RUN_DIR"; RUN_DIR=
}

NP=
[ ${#SIZES[@]} -gt 0 ] && NP=${SIZES[${#SIZES[@]} - 1]}
if [ -z "$NP" ]; then
    fail "nccl scenarios (need 2 GPUs, found $NGPU)"
    finish
fi
ranks=$(seq -s, 0 $((NP - 1)))
scenario fail "$NP" 1 60 30 \
    "rank 1 failed: injected failure on purpose \(dist test scenario 'fail'\) \(this rank, R, was in $CALL\)"
scenario exit "$NP" 1 60 30 \
    "rank 1 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
scenario exit-server 2 0 60 30 \
    "rank 0 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
# Timeout 10 s, not 2: NCCL's communicator set-up on 4 GPUs takes seconds and is bounded by
# the same timeout. A survivor reports its own timeout or the one a faster peer posted first.
HANG="($CALL \(ranks $ranks\) timed out after 10 s on rank R; ranks that did not reach it: (1|unknown)|rank [0-9] failed: $CALL \(ranks $ranks\) timed out after 10 s on rank [0-9]; .* \(this rank, R, was in $CALL\))"
scenario hang "$NP" 1 10 60 "$HANG"
# The same failures seen by the watchdog while the survivors block outside mg_comm
# (EXIT_BLOCKING_REPEATS times in a row: a race between the notice and the block shows as a
# rare failure, so a lease with 4 GPUs runs it 20 times: bench/multigpu_runs.sh nccl).
for ((i = 0; i < ${EXIT_BLOCKING_REPEATS:-1}; i++)); do
    scenario exit-blocking "$NP" 1 60 30 \
        "rank 1 disconnected without a goodbye .*\(this rank, R, was in $CALL\)"
done
scenario hang-blocking "$NP" 1 10 60 "$HANG"
# The victim dies while the others wait on the device for its copy into a peer window (a
# one-block kernel spinning on its flag, tests/dist/scenario_peer.c) and block in a plain
# cudaStreamSynchronize behind it: only the world's abort word, set by the watchdog, ends it.
scenario peer "$NP" 1 60 30 "rank 1 disconnected without a goodbye .*"

# The failure notice under mpirun as well (mpirun may kill a survivor once the victim exits,
# racing its report: rank 0 must have reported).
[ -n "$HAVE_MPIRUN" ] || { echo "SKIP nccl scenario fail mpirun np=2 (no mpirun)"; finish; }
start=$(now)
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" --backend nccl --scenario fail --victim 1 \
    --timeout 60 2>&1)
rc=$?
re="^dist_tests: rank 0: error after [0-9.]+ s: rank 1 failed: injected failure on purpose \(dist test scenario 'fail'\) \(this rank, 0, was in $CALL\)\$"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qE -- "$re" <<<"$out"; then
    pass "nccl scenario fail mpirun np=2: exit status $rc, $(elapsed "$start") s"
else
    fail "nccl scenario fail mpirun np=2 (exit status $rc)" "$out" "expected: $re"
fi
finish
