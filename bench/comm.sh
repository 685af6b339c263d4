#!/usr/bin/env bash
# Collective bandwidth on the NCCL backend (`make bench-comm`, a GPU machine): BUILD/bench_comm
# (bench/comm.c) under mpirun (torchrun-style without it), one process per GPU, on 2 GPUs and on 4 when there are 4. Each run
# prints JSON lines (path "mg_comm": through our comm layer; path "nccl": the raw blocking-NCCL
# baseline in the same process, same GPUs, same stream) and a table with ours/nccl.
#   bench/comm.sh [BUILD] [bench_comm options...]     e.g. bench/comm.sh build --factor 4
# The default sweep (1 MB .. 1 GB in x2 steps, bf16 and f32, 4 operations, in and out of place,
# plus the baseline) takes about a minute per rank count on H100s.
set -euo pipefail
BUILD=${1:-build}
shift || true
BIN=$BUILD/bench_comm
[ -x "$BIN" ] || { echo "bench/comm.sh: $BIN is not built (make $BIN)" >&2; exit 1; }

# Never NVLink multicast (NVLS) on these machines.
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$NGPU" -lt 2 ]; then
    echo "bench/comm.sh: needs at least 2 GPUs (nvidia-smi -L lists $NGPU)" >&2
    exit 1
fi
nvidia-smi topo -m 2>/dev/null | head -n $((NGPU + 1)) || true
# Without mpirun, a torchrun-style launch: the ranks are started here (rank 0 prints).
launch() { # NP ARGS...
    local np=$1 r port=$((20000 + RANDOM % 12000)) pids=() rc=0; shift
    if command -v mpirun >/dev/null; then
        timeout 600 mpirun --bind-to none -x NCCL_NVLS_ENABLE -np "$np" "$BIN" "$@"
        return
    fi
    for ((r = 0; r < np; r++)); do
        RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port timeout 600 "$BIN" "$@" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    return "$rc"
}
for np in 2 4; do
    [ "$NGPU" -ge "$np" ] || continue
    start=$(date +%s)
    launch "$np" "$@"
    echo "bench/comm.sh: $np ranks took $(($(date +%s) - start)) s"
done
