# Shared helpers of the multi-rank scripts (sourced by test_dist.sh, test_train*.sh and
# run_nccl.sh): PASS/FAIL counting, the closing line, timing, Open MPI's environment, the prologue
# of the CPU suites, and folding one run's PASS/FAIL lines into the script's own.
PASSED=0 FAILED=0
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1"; shift; printf '  %s\n' "$@"; FAILED=$((FAILED + 1)); }
# The closing line; the CPU suites exit 0 (the counts say what failed; run_nccl.sh replaces this
# with a finish that fails). skip: a "SKIP $SUITE: WHY" line instead of the whole suite.
finish() { echo "$PASSED passed, $FAILED failed"; exit 0; }
skip() { echo "SKIP $SUITE: $1"; finish; }
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

# Open MPI's environment for every rank the scripts start. CI runs as root; containers often
# forbid the cross-memory attach Open MPI uses for large shared-memory messages, and the tests do
# not need it. Under `make asan`: Open MPI's own allocations live until exit; keep its plugins
# loaded so the suppressions can name them, and unwind fully so they match.
mpi_env() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
    export OMP_NUM_THREADS=1
    export OMPI_MCA_mca_base_component_disable_dlclose=1
    export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/dist/lsan.supp:print_suppressions=0"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
}

# The prologue of the CPU suites (test_dist.sh, test_train.sh): skips the suite when DIST_TESTS,
# where it is built, reports a build without MPI, or when mpirun is not found; else sets mpi_env
# and MPIRUN, the launcher with as many ranks as asked for whatever the cores.
mpi_cpu_prologue() { # DIST_TESTS
    [ -x "$1" ] && case $("$1" --features 2>&1) in *mpi=yes*) ;;
        *) skip "this build has no MPI (apt-get install -y libopenmpi-dev openmpi-bin, then rebuild)" ;; esac
    command -v mpirun >/dev/null || skip "mpirun not found (apt-get install -y openmpi-bin)"
    mpi_env
    MPIRUN=(mpirun --oversubscribe)
}
# The set-up of the scripts that run `megatron train` under mpirun (test_train*.sh): skipped
# without the binary or MPI, MPIRUN set, TMP a fresh folder removed at exit.
train_script_prologue() { # BUILD
    [ -x "$1/megatron" ] || skip "$1/megatron is not built"
    mpi_cpu_prologue "$1/dist_tests"
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
}
