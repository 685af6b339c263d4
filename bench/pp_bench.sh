#!/usr/bin/env bash
# Pipeline parallelism of `megatron train` on P GPUs against the schedule's theory and against
# data parallelism on the same GPUs, all in one command (bench/NOTES.md). For each shape, each P
# in NGPUS above 1 and each microbatch count m in MICROBATCHES, one global batch of MBS x m
# sequences (1024 tokens, vocabulary 50304) is trained
#   dp           P data-parallel ranks (distributed optimizer; m/P microbatches each)
#   1f1b         --pipeline-model-parallel-size P
#   interleaved  ... --virtual-pipeline-model-parallel-size 2 (where the layers and m allow it)
# and once on one GPU (the whole model, m microbatches: the base of the bound below). Every
# pipeline run measures its bubble per stage (MG_PP_TIMING=1 on GPUs: the executor times each
# op between synchronisations; the cpu backend always does): waiting / busy, against the
# schedule's (P-1)/(m V); on GPUs each stage's device memory after the first step against the
# peak it predicted before training (the ops timed by the backend's timer points, read once a
# step). The table gives tokens/s, the ratio to DP, and the ratio to the
# ideal bound (1 - b) x P x one-GPU tokens/s, with b = (P-1)/(m V + P-1) the idle fraction the
# schedule implies. Tokens/s: the median over the log intervals after the first (the warm-up).
#   bench/pp_bench.sh [BUILD]          BUILD/megatron built with MPI (and the CUDA backend on GPUs)
# Environment (and bench/lib.sh's):
#   SHAPES="1.5b deep"      GPT-2 1.5B (48 layers) and deep (64 layers x 1024); tiny8 for a check
#   NGPUS                   pipeline sizes P; default each of 2 4 that nvidia-smi lists (cpu: 2)
#   MICROBATCHES="8 16 32"  microbatches per step m
#   MBS=1 ITERS=12 LOG_INTERVAL=3   micro-batch size, steps, log interval (first one warm-up)
#   LAYOUTS="dp 1f1b interleaved"   which runs; also 1f1b-in-order (--no-overlap-p2p-communication)
#                           and 1f1b-balanced (the last stage one layer short,
#                           --decoder-last-pipeline-num-layers L/P - 1: it also holds the output
#                           layer and the loss, about 2.6 layers of work at GPT-2 1.5B's shape),
#                           interleaved-balanced (P 2 only: the same split over V 2, written as
#                           --pipeline-model-parallel-layout), custom (PP_LAYOUT, a layout
#                           string of Megatron's --pipeline-model-parallel-layout, e.g.
#                           PP_LAYOUT="Et*12|t*12|t*13|t*11L")
#   OUTDIR                  JSON lines (OUTDIR/pp_bench.jsonl, one per run) and logs
#   UNTIMED=1               tokens/s from a second run of each pipeline layout without the timing
# A check on a CPU (MPI, one thread a rank):
#   DEVICE=cpu SHAPES=tiny8 NGPUS=2 MICROBATCHES="4 8" ITERS=6 LOG_INTERVAL=2 bench/pp_bench.sh
set -uo pipefail

BENCH=pp_bench
SHAPES=${SHAPES:-1.5b deep}
MBS=${MBS:-1}
ITERS=${ITERS:-12}
LOG_INTERVAL=${LOG_INTERVAL:-3}
MICROBATCHES=${MICROBATCHES:-8 16 32}
LAYOUTS=${LAYOUTS:-dp 1f1b interleaved}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
parallel_setup "$@" # BIN, the environment above, MPIRUN, shape_dims, summarize
export MG_PP_TIMING=1
echo "pp_bench: $BIN; shapes: $SHAPES; P: $NGPUS; m: $MICROBATCHES; micro-batch $MBS; layouts:" \
    "$LAYOUTS; $ITERS steps, the first $LOG_INTERVAL warm-up; results in $RESULTS"
print_versions

# run_one SHAPE LAYOUT P M: one run, its summary line (with the bubble of every stage) or an
# error line in RESULTS.
run_one() {
    local shape=$1 layout=$2 n=$3 m=$4 rc start
    local base=$OUTDIR/$shape-$layout-p$n-m$m extra=() vpp=1
    case $layout in
    dp) extra=(--use-distributed-optimizer) ;;
    1f1b) extra=(--pipeline-model-parallel-size "$n") ;;
    1f1b-in-order) extra=(--pipeline-model-parallel-size "$n" --no-overlap-p2p-communication) ;;
    1f1b-balanced)
        local layers
        read -r layers _ <<<"$(shape_dims "$shape")"
        extra=(--pipeline-model-parallel-size "$n" --decoder-last-pipeline-num-layers $((layers / n - 1))) ;;
    interleaved) extra=(--pipeline-model-parallel-size "$n" --virtual-pipeline-model-parallel-size 2) vpp=2 ;;
    interleaved-balanced) # P 2, V 2, 1f1b-balanced's ranks (L/2 + 1 and L/2 - 1 layers) written
        # as Megatron's --pipeline-model-parallel-layout: stages r0c0 | r1c0 | r0c1 | r1c1
        local layers a b
        read -r layers _ <<<"$(shape_dims "$shape")"
        a=$((layers / 2 + 1)) b=$((layers / 2 - 1))
        extra=(--pipeline-model-parallel-size "$n" --pipeline-model-parallel-layout
            "Et*$(((a + 1) / 2))|t*$(((b + 1) / 2))|t*$((a / 2))|t*$((b / 2))L") vpp=2 ;;
    custom) # PP_LAYOUT: Megatron's layout string, its stages / P the virtual stages
        local bars=${PP_LAYOUT//[^|]/}
        extra=(--pipeline-model-parallel-size "$n" --pipeline-model-parallel-layout "$PP_LAYOUT")
        vpp=$(((${#bars} + 1) / n)) ;;
    esac
    start=$(date +%s)
    megatron_train "$n" "$shape" $((MBS * m)) "$base" 600 "${extra[@]}"
    rc=$?
    # UNTIMED=1: tokens/s from a second run without MG_PP_TIMING (whose timer points cost one
    # host synchronisation per step: parallel/pipeline/run.h), the bubble from the timed one
    local speed=$base.jsonl
    if [ "${UNTIMED:-0}" = 1 ] && [ "$rc" -eq 0 ] && [ "$n" -gt 1 ] && [ "$layout" != dp ]; then
        MG_PP_TIMING=0 megatron_train "$n" "$shape" $((MBS * m)) "$base.untimed" 600 "${extra[@]}"
        rc=$?
        speed=$base.untimed.jsonl
    fi
    echo "  $shape $layout P=$n m=$m: exit $rc after $(($(date +%s) - start)) s"
    if [ "$rc" -eq 0 ] && summarize megatron.c "$shape" "$speed" micro_batch_size="$MBS" \
        global_batch_size=$((MBS * m)) world_size="$n" microbatches="$m" vpp="$vpp" >"$base.sum"; then
        "$PYTHON" - "$base.sum" "$base.log" "$layout" >>"$RESULTS" <<'EOF'
import json, re, sys
r = json.load(open(sys.argv[1]))
r["layout"] = sys.argv[3]
log = open(sys.argv[2]).read().splitlines()
def per_stage(pattern, row):  # {stage: row(match)} over the log's lines, in stage order
    found = {}
    for line in log:
        m = re.search(pattern, line)
        if m:
            found[int(m[1] or 0)] = row(m)
    return [found[k] for k in sorted(found)]
bubble = per_stage(r"pipeline rank (\d+) of \d+: .* busy ([\d.]+) s, waiting ([\d.]+) s per step: "
                   r"bubble \(waiting / busy\) ([\d.]+)%, the schedule's \(P-1\)/\(m V\) ([\d.]+)%",
                   lambda m: {"busy_s": float(m[2]), "waiting_s": float(m[3]), "bubble": float(m[4]) / 100,
                              "theory": float(m[5]) / 100})
if bubble:
    r["bubble_theory"] = bubble[0].pop("theory")
    for b in bubble[1:]:
        b.pop("theory")
    r["bubble_per_stage"] = bubble
memory = per_stage(r"device memory(?: \(pipeline rank (\d+)\))? after the first step: ([\d.]+) MiB used "
                   r"of [\d.]+ MiB, predicted ([\d.]+) MiB",
                   lambda m: {"used_mib": float(m[2]), "predicted_mib": float(m[3])})
if memory:
    r["memory_per_stage"] = memory
print(json.dumps(r))
EOF
        tail -n 1 "$RESULTS" | "$PYTHON" -c 'import json, sys; r = json.load(sys.stdin)
b = " ".join("%.1f%%" % (100 * s["bubble"]) for s in r.get("bubble_per_stage", []))
m = " ".join("%.0f/%.0f MiB" % (s["used_mib"], s["predicted_mib"]) for s in r.get("memory_per_stage", []))
if m:
    print("    device memory after the first step, used/predicted per stage: " + m)
print("    %.0f tokens/s%s" % (r["tokens_per_s"], "; bubble per stage %s (theory %.1f%%)" % (b, 100 * r["bubble_theory"]) if b else ""))'
        return 0
    fi
    failure_message "$rc" "$base" 600
    "$PYTHON" -c 'import json, sys; print(json.dumps({"impl": "megatron.c", "shape": sys.argv[1], "layout": sys.argv[2],
"world_size": int(sys.argv[3]), "microbatches": int(sys.argv[4]), "exit": int(sys.argv[5]), "error": sys.argv[6]}))' \
        "$shape" "$layout" "$n" "$m" "$rc" "$MSG" >>"$RESULTS"
    return 1
}

for shape in $SHAPES; do
    read -r L _ <<<"$(shape_dims "$shape")"
    for m in $MICROBATCHES; do
        run_one "$shape" one 1 "$m"
        for n in $NGPUS; do
            [ "$n" -gt 1 ] || continue
            for layout in $LAYOUTS; do
                if [ "$layout" = interleaved ] && { [ $((L % (2 * n))) -ne 0 ] || [ $((m % n)) -ne 0 ]; }; then
                    echo "  $shape interleaved P=$n m=$m: skipped ($L layers over $n x 2 stages, $m microbatches)"
                    continue
                fi
                if [ "$layout" = dp ] && [ $((m % n)) -ne 0 ]; then continue; fi
                if [ "$layout" = interleaved-balanced ] && [ "$n" -ne 2 ]; then continue; fi
                run_one "$shape" "$layout" "$n" "$m"
            done
        done
    done
done

"$PYTHON" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if "tokens_per_s" in r]
tok = {(r["shape"], r["layout"], r["world_size"], r["microbatches"]): r["tokens_per_s"] for r in ok}
print()
print("| shape | P | m | layout | tokens/s | vs DP | vs (1-b) P x one GPU | bubble per stage (waiting/busy) | theory (P-1)/(mV) |")
print("|---|---|---|---|---|---|---|---|---|")
for r in ok:
    if r["layout"] == "one":
        continue
    P, m, V = r["world_size"], r["microbatches"], r.get("vpp", 1)
    t = r["tokens_per_s"]
    dp = tok.get((r["shape"], "dp", P, m))
    one = tok.get((r["shape"], "one", 1, m))
    bound = (1 - (P - 1) / (m * V + P - 1)) * P * one if one and r["layout"] != "dp" else (P * one if one else None)
    bub = " ".join(f"{100 * s['bubble']:.1f}%" for s in r.get("bubble_per_stage", [])) or "-"
    th = f"{100 * r['bubble_theory']:.1f}%" if "bubble_theory" in r else "-"
    print(f"| {r['shape']} | {P} | {m} | {r['layout']} | {t:.0f} | {t / dp:.2f}x | " if dp else
          f"| {r['shape']} | {P} | {m} | {r['layout']} | {t:.0f} | - | ", end="")
    print(f"{t / bound:.1%} | {bub} | {th} |" if bound else f"- | {bub} | {th} |")
for r in rows:
    if "error" in r:
        print(f"  {r['shape']} {r['layout']} P={r['world_size']} m={r['microbatches']}: {r['error']}")
EOF
