# shellcheck shell=bash disable=SC2034  # sourced: what it sets is used by the script that sources it
# What the bench scripts share. They set BENCH (their name) and the defaults of their knobs, source
# this file (`. "$(dirname "$0")/lib.sh"`: it sets HERE, this folder, and defines functions, nothing
# more), then call their set-up with their arguments.
#
# The one-GPU comparisons of megatron bench with a PyTorch baseline (gpu_bench.sh, moe_bench.sh),
# each run's JSON line in BASE.json and its stderr in BASE.log:
#   compare_setup "$@"      the environment (bench_env below) and ARGS_ (ARGS as an array: flags
#                           for both implementations); exits (with BENCH's message) on an unbuilt
#                           BIN; RESULTS made empty
#   print_gpu_versions      the header lines: nvidia-smi's GPU, clocks and power, torch
#   timed_run LABEL BASE TIMEOUT CMD...   CMD under timeout, stdout to BASE.json, stderr to
#                           BASE.log; says "  LABEL: exit RC after N s" and returns CMD's status RC
#   run_outcome RC BASE     0: BASE.json's last JSON line appended to RESULTS; 3: out of memory (said,
#                           with BASE.log's line); 1: failed ("timed out" said for RC 124; the caller
#                           says the rest, e.g. with print_log_tail)
#   print_log_tail BASE     "failed; the end of BASE.log:" and its last 5 lines
#
# The parallel benches (dp_bench.sh, tp_bench.sh, pp_bench.sh), after setting their SHAPES default:
#   parallel_setup "$@"     sets what follows, and exits (with BENCH's message) on an unknown shape,
#                           an unbuilt BIN, or ITERS not above LOG_INTERVAL
#   MBS ITERS LOG_INTERVAL  the environment their headers document (defaults 8 30 5)
#   MEGATRON_ARGS_ TORCH_ARGS_   with --bf16 on cuda, or one thread a rank (and torch eager) on
#                           DEVICE=cpu
#   MPIRUN                  the mpirun command before -np (with --oversubscribe on DEVICE=cpu)
#   NGPUS                   default 1 and each of 2 4 that nvidia-smi lists (DEVICE=cpu: 1 2),
#                           always with 1
#   shape_dims SHAPE        "layers hidden heads sequence vocabulary" of a GPT-2 shape, deep,
#                           tiny, tiny8 or cpu8
#   print_versions          the header lines: nvidia-smi's GPUs and topology, torch, mpirun
#   summarize IMPL SHAPE FILE KEY=INT...   one JSON line for RESULTS from a run's output
#   megatron_train N SHAPE GBS BASE TIMEOUT [FLAG...]   `megatron train` of a shape on N ranks
#                           (mpirun for N > 1), the benches' common flags (no dropout: the
#                           baselines have none), BASE.jsonl metrics
#   failure_message RC BASE TIMEOUT   prints why a run failed (its log's lines), sets MSG
#
# Both set-ups set, through bench_env:
#   BUILD BIN               $1 (default build), BUILD/megatron
#   PYTHON DEVICE OUTDIR    the environment the scripts' headers document
#   MEGATRON_ARGS_ TORCH_ARGS_   MEGATRON_ARGS and TORCH_ARGS as arrays
#   RESULTS                 OUTDIR/BENCH.jsonl
# and turn NVLink multicast off.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

bench_env() { # BUILD
    BUILD=${1:-build}
    BIN=$BUILD/megatron
    PYTHON=${PYTHON:-python3}
    DEVICE=${DEVICE:-cuda}
    read -r -a MEGATRON_ARGS_ <<<"${MEGATRON_ARGS:-}"
    read -r -a TORCH_ARGS_ <<<"${TORCH_ARGS:-}"
    OUTDIR=${OUTDIR:-${OUT:-$(mktemp -d)}}
    RESULTS=$OUTDIR/$BENCH.jsonl
    # Never NVLink multicast on these machines (KINDS.md), whatever the programs do.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}

require_bin() {
    [ -x "$BIN" ] || { echo "$BENCH: $BIN is not built (make BUILD=$BUILD $BIN)" >&2; exit 1; }
}

new_results() {
    mkdir -p "$OUTDIR"
    : >"$RESULTS"
}

print_torch_version() {
    "$PYTHON" -c 'import torch; print("  torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
}

compare_setup() { # BUILD
    bench_env "$@"
    read -r -a ARGS_ <<<"${ARGS:-}"
    require_bin
    new_results
}

print_gpu_versions() {
    [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv 2>&1 | sed 's/^/  /'
    print_torch_version
}

timed_run() { # LABEL BASE TIMEOUT CMD...
    local label=$1 base=$2 tmo=$3 rc start
    shift 3
    start=$(date +%s)
    timeout "$tmo" "$@" >"$base.json" 2>"$base.log"
    rc=$?
    echo "  $label: exit $rc after $(($(date +%s) - start)) s"
    return "$rc"
}

run_outcome() { # RC BASE
    if [ "$1" -eq 0 ] && grep -q '^{' "$2.json"; then
        grep '^{' "$2.json" | tail -n 1 >>"$RESULTS"
        return 0
    fi
    if grep -qiE 'out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|OutOfMemoryError' "$2.log"; then
        echo "    out of memory: $(grep -iE -m1 'out of memory|AllocFailed|ALLOC_FAILED' "$2.log" | cut -c1-200)"
        return 3
    fi
    [ "$1" -eq 124 ] && echo "    timed out"
    return 1
}

print_log_tail() { # BASE
    echo "    failed; the end of $1.log:"
    tail -n 5 "$1.log" | sed 's/^/      /'
}

parallel_setup() { # BUILD
    local shape have n
    MBS=${MBS:-8}
    ITERS=${ITERS:-30}
    LOG_INTERVAL=${LOG_INTERVAL:-5}
    bench_env "$@"
    MPIRUN=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS)
    if [ "$DEVICE" = cpu ]; then
        # More ranks than cores is fine for a check. Open MPI's cross-memory attach lets a receiver
        # pull a large message while its sender computes (without it, a message moves only while both
        # are inside MPI, which stalls overlapped pipeline messages); containers often forbid it, so
        # a two-rank probe decides. One thread a rank on both sides.
        MPIRUN+=(--oversubscribe)
        if [ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ]; then
            export OMPI_MCA_btl_vader_single_copy_mechanism=cma
            timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
                --seq-length 64 --vocab-size 256 --mock-data --micro-batch-size 2 --global-batch-size 4 \
                --train-iters 2 --lr 1e-3 --eval-iters 0 --device cpu --num-threads 1 \
                --pipeline-model-parallel-size 2 >/dev/null 2>&1 ||
                export OMPI_MCA_btl_vader_single_copy_mechanism=none
        fi
        echo "$BENCH: Open MPI's single-copy mechanism: $OMPI_MCA_btl_vader_single_copy_mechanism"
        MEGATRON_ARGS_=(--num-threads 1 "${MEGATRON_ARGS_[@]}")
        TORCH_ARGS_=(--no-compile --threads 1 "${TORCH_ARGS_[@]}")
    else
        MEGATRON_ARGS_=(--bf16 "${MEGATRON_ARGS_[@]}")
    fi
    if [ -z "${NGPUS:-}" ]; then
        have=2
        [ "$DEVICE" = cuda ] && have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
        NGPUS=1
        for n in 2 4; do [ "$have" -ge "$n" ] && NGPUS+=" $n"; done
    fi
    case " $NGPUS " in *" 1 "*) ;; *) NGPUS="1 $NGPUS" ;; esac
    for shape in $SHAPES; do
        shape_dims "$shape" >/dev/null || { echo "$BENCH: unknown shape $shape (124m 350m 774m 1.5b deep tiny tiny8 cpu8)" >&2; exit 1; }
    done
    require_bin
    [ "$ITERS" -gt "$LOG_INTERVAL" ] || { echo "$BENCH: ITERS ($ITERS) must exceed LOG_INTERVAL ($LOG_INTERVAL)" >&2; exit 1; }
    new_results
}

# layers hidden heads sequence vocabulary
shape_dims() { # SHAPE
    case $1 in
    124m) echo 12 768 12 1024 50304 ;;
    350m) echo 24 1024 16 1024 50304 ;;
    774m) echo 36 1280 20 1024 50304 ;;
    1.5b) echo 48 1600 25 1024 50304 ;;
    deep) echo 64 1024 16 1024 50304 ;; # 0.86B: four times 350m's depth at its width
    tiny) echo 2 64 4 32 256 ;;
    tiny8) echo 8 64 4 32 256 ;; # tiny, deep enough for 4 stages of 2 virtual stages
    cpu8) echo 8 256 8 256 512 ;; # a CPU measurement: compute well above the messages' cost, a light head
    *) return 1 ;;
    esac
}

print_versions() {
    [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm,power.limit \
        --format=csv 2>&1 | sed 's/^/  /'
    [ "$DEVICE" = cuda ] && nvidia-smi topo -m 2>&1 | sed 's/^/  /' # NVLink or PCIe: what scaling rests on
    print_torch_version
    echo "  $(mpirun --version 2>&1 | head -n 1)"
}

# One summary line for RESULTS from a run's output FILE: megatron.c's metrics lines give the
# median over the intervals after the first; torch's line is taken as it is. Then impl, shape and
# the integer fields KEY=INT, in that order.
summarize() { # IMPL SHAPE FILE KEY=INT...
    "$PYTHON" - "$1" "$2" "$3" "${MEGATRON_ARGS:-}" "${@:4}" <<'EOF'
import json, statistics, sys
impl, shape, path, margs, *fields = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
if impl == "megatron.c":
    timed = lines[1:]
    med = lambda k: statistics.median(l[k] for l in timed)
    r = {"tokens_per_s": med("tokens_per_s"), "ms_per_iter": med("ms_per_iter"),
         "tflops_per_gpu": med("tflops"), "intervals": len(timed), "lm_loss_last": lines[-1]["lm_loss"],
         "megatron_args": margs}
else:
    r = lines[-1]
r.update(impl=impl, shape=shape)
r.update((k, int(v)) for k, v in (f.split("=", 1) for f in fields))
print(json.dumps(r))
EOF
}

# megatron.c's run of a GPT-2 shape: mock data, AdamW lr 6e-4 constant, weight decay 0.1, betas
# (0.9, 0.95), --log-interval LOG_INTERVAL, metrics in BASE.jsonl, the log in BASE.log.
megatron_train() { # N SHAPE GBS BASE TIMEOUT [FLAG...]
    local n=$1 shape=$2 gbs=$3 base=$4 tmo=$5 L H NH S V launch=("$BIN")
    shift 5
    read -r L H NH S V <<<"$(shape_dims "$shape")"
    [ "$n" -gt 1 ] && launch=("${MPIRUN[@]}" -np "$n" "$BIN")
    rm -f "$base.jsonl"
    timeout "$tmo" "${launch[@]}" train --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" \
        --seq-length "$S" --max-position-embeddings "$S" --vocab-size "$V" --mock-data \
        --micro-batch-size "$MBS" --global-batch-size "$gbs" --train-iters "$ITERS" \
        --lr 6e-4 --lr-warmup-iters 0 --lr-decay-style constant --weight-decay 0.1 \
        --adam-beta2 0.95 --log-interval "$LOG_INTERVAL" --eval-iters 0 --device "$DEVICE" \
        --attention-dropout 0 --hidden-dropout 0 \
        --metrics-file "$base.jsonl" "$@" "${MEGATRON_ARGS_[@]}" >"$base.log" 2>&1
}

# Why a run failed: MSG (one line for RESULTS), and the log's error lines on the terminal.
failure_message() { # RC BASE TIMEOUT
    if [ "$1" -eq 124 ]; then
        MSG="timed out after $3 s"
    else
        MSG=$({ grep -iE -m 1 'error|out of memory' "$2.log" || tail -n 1 "$2.log"; } | cut -c1-300)
        [ -n "$MSG" ] || MSG="exit $1, no output"
    fi
    echo "    failed: $MSG; log: $2.log"
    { grep -iE -m 3 'error|out of memory' "$2.log" || tail -n 5 "$2.log"; } | cut -c1-300 | sed 's/^/      /'
}
