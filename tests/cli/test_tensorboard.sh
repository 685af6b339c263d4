#!/usr/bin/env bash
# --tensorboard-dir end to end: tiny training runs write an event file that the `tensorboard`
# Python package's own readers (tools/reference/tensorboard_events.py) read back, and every scalar
# is checked against the same run's --metrics-file and log: Megatron's tag names (the exact set),
# their steps (iterations, or consumed samples for the "vs samples" tags), their values (as the
# float32 TensorBoard stores), the text of the config, the file name and framing. Also: a 2-rank
# pipeline writes one file from the last rank, and --wandb-* is refused with one line.
# Skips (with a SKIP line) where python3 lacks tensorboard or the build lacks ISA-L.
source "$(dirname "$0")/lib.sh"

MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --vocab-size 128 --make-vocab-size-divisible-by 64
       --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
       --lr-warmup-iters 2 --mock-data --seed 5 --device cpu)
READ=tools/reference/tensorboard_events.py

# refused flags: one line naming the alternative; nothing is written
expect_error tensorboard_wandb_refused 1 '--wandb-project proj is not supported .*use --tensorboard-dir' \
    train "${MODEL[@]}" --train-iters 1 --wandb-project proj
expect_error tensorboard_interval_must_be_positive 2 'tensorboard-log-interval must be positive' \
    train "${MODEL[@]}" --train-iters 4 --tensorboard-dir "$TMP/never" --tensorboard-log-interval 0
[ -e "$TMP/never" ] && fail tensorboard_refusal_writes_nothing "$TMP/never was created" ||
    pass tensorboard_refusal_writes_nothing

# read DIR: the reader's JSON on stdout; exit 3 when tensorboard is missing
read_events() { python3 "$READ" "$1" 2>"$TMP/read.err"; }

# the PASS/FAIL lines of a checker on stdin, counted
count() {
    local line
    while IFS= read -r line; do
        case $line in
        "PASS "*) pass "${line#PASS }" ;;
        "FAIL "*) fail "${line#FAIL }" ;;
        *) echo "$line" ;;
        esac
    done
}

# check DUMP METRICS LOG MODE: the reader's dump against the run's metrics file (one line per
# iteration) and log; MODE dense (every iteration) or moe (every second iteration)
check() {
    local out
    out=$(python3 - "$@" 2>&1 <<'EOF'
import json, math, re, struct, sys
dump, metrics, log, mode = json.load(open(sys.argv[1])), sys.argv[2], open(sys.argv[3]).read(), sys.argv[4]
every = 1 if mode == "dense" else 2  # --tensorboard-log-interval
rows = [r for r in map(json.loads, open(metrics)) if r["iteration"] % every == 0]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # what simple_value holds
sc = dump["scalars"]
def ok(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + f"tensorboard_{mode}_{name}" + ("" if cond else f"\n  {detail}"))
def series(tag): return sc.get(tag, [])
def same(tag, want):  # want: [[step, value]] compared exactly as float32
    got = series(tag)
    bad = [(g, w) for g, w in zip(got, want) if g[0] != w[0] or g[1] != f32(w[1])]
    return len(got) == len(want) and not bad, f"{tag}: got {got[:4]}..., want {want[:4]}... mismatches {bad[:2]}"

name = re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^.]+(\.[^.]+)*\.\d+\.0", dump["files"][0] if dump["files"] else "")
ok("one_file_named_like_torch", len(dump["files"]) == 1 and name, f"files {dump['files']}")
ok("framing_and_crcs", dump["frames_ok"] and dump["file_version"] == "brain.Event:2",
   f"frames_ok {dump['frames_ok']}, first event file_version '{dump['file_version']}'")
ok("config_as_text", dump["texts"].get("num_layers/text_summary") == [[0, "2"]]
   and dump["texts"].get("lr/text_summary") == [[0, "0.003"]],
   f"num_layers {dump['texts'].get('num_layers/text_summary')}, lr {dump['texts'].get('lr/text_summary')}")

it = [r["iteration"] for r in rows]
by_it = {r["iteration"]: r for r in rows}
pairs = ["learning-rate", "batch-size", "lm loss", "grad-norm"]
if mode == "dense":
    pairs += ["loss-scale", "world-size"]
    other = {"iteration-time", "throughput", "mem-reserved-bytes", "mem-allocated-bytes",
             "mem-max-allocated-bytes", "mem-allocated-count", "lm loss validation",
             "lm loss validation vs samples", "lm loss validation ppl", "lm loss validation ppl vs samples"}
else:  # moe: --no-log-loss-scale-to-tensorboard, no timers/memory/validation
    other = {"load_balancing_loss", "z_loss"}
want_tags = {p for p in pairs} | {p + " vs samples" for p in pairs} | other
ok("tag_set_is_megatrons", set(sc) == want_tags,
   f"extra {sorted(set(sc) - want_tags)}, missing {sorted(want_tags - set(sc))}")

field = {"learning-rate": "lr", "lm loss": "lm_loss", "grad-norm": "grad_norm"}
good, why = True, ""
for tag, key in field.items():
    for t, steps in ((tag, "iteration"), (tag + " vs samples", "consumed_samples")):
        g, w = same(t, [[r[steps], r[key]] for r in rows])
        if not g: good, why = False, w
for tag, v in (("batch-size", 4), ("loss-scale", 1.0), ("world-size", 1)):
    if tag in pairs:
        g, w = same(tag, [[i, v] for i in it])
        if not g: good, why = False, w
ok("scalars_match_metrics_file", good, why)

if mode == "dense":
    g1, w1 = same("throughput", [[r["iteration"], r["tflops"]] for r in rows])
    got = series("iteration-time")
    g2 = len(got) == len(rows) and all(s == r["iteration"] and abs(v - r["ms_per_iter"] / 1e3) <= 1e-6 * v
                                       for (s, v), r in zip(got, rows))
    ok("timers_match_metrics_file", g1 and g2, f"{w1}; iteration-time {got[:3]} vs {[r['ms_per_iter'] for r in rows[:3]]}")
    mem = [series(t) for t in ("mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes")]
    cnt = series("mem-allocated-count")
    ok("memory", all(m == mem[0] and len(m) == len(it) for m in mem) and mem[0][0][1] > 1e5
       and all(c[1] in (6, 7) for c in cnt), f"{mem[0][:2]}, counts {cnt[:2]}")
    # the log's evaluation lines (%.6E), in order: iteration 3 (--eval-interval), then the end's
    # (the test split's too, which Megatron writes under the validation tags)
    at = lambda w: int(re.match(r"iteration (\d+)", w).group(1)) if w.startswith("iteration") else 6
    logged = [(at(w), float(v)) for w, v in
              re.findall(r"validation loss at ([^|]*)\| lm loss value: ([0-9.E+-]+)", log)]
    steps, vals = [i for i, _ in logged], [v for _, v in logged]
    got = series("lm loss validation"); gvs = series("lm loss validation vs samples")
    ppl = series("lm loss validation ppl")
    good = (len(vals) >= 2 and steps[0] == 3 and steps[-1] == 6 and [s for s, _ in got] == steps
            and [s for s, _ in gvs] == [by_it[i]["consumed_samples"] for i in steps]
            and all(abs(v - w) <= 1e-6 * w for (_, v), w in zip(got, vals))
            and [s for s, _ in ppl] == steps
            and all(abs(p - math.exp(min(20, w))) <= 1e-5 * p for (_, p), w in zip(ppl, vals)))
    ok("validation", good, f"log {logged}; tb {got} {gvs} ppl {ppl}")
else:
    good, why = True, ""
    for tag in ("load_balancing_loss", "z_loss"):
        g, w = same(tag, [[r["iteration"], r[tag]] for r in rows])
        if not g: good, why = False, w
    ok("moe_losses_match_metrics_file", good and [s for s, _ in series("lm loss")] == [2, 4, 6],
       f"{why}; lm loss steps {[s for s, _ in series('lm loss')]}")
EOF
    )
    count <<<"$out"
}

# 1. dense: every scalar every iteration (log interval 1: the metrics file has each iteration's
#    own loss), timers, memory, world size, validation with perplexity
d="$TMP/dense"; mkdir -p "$d"
if "$MEGATRON" train "${MODEL[@]}" --num-threads 2 --train-iters 6 --log-interval 1 --eval-interval 3 --eval-iters 1 \
    --tensorboard-dir "$d/tb/run" --tensorboard-queue-size 5 --log-timers-to-tensorboard \
    --log-memory-to-tensorboard --log-world-size-to-tensorboard --log-validation-ppl-to-tensorboard \
    --metrics-file "$d/m.jsonl" >"$d/log" 2>&1; then
    read_events "$d/tb/run" >"$d/dump.json"
    case $? in
    0) check "$d/dump.json" "$d/m.jsonl" "$d/log" dense ;;
    3) echo "SKIP tensorboard_* (python3 lacks the tensorboard package: pip install tensorboard)"
       finish; exit 0 ;;
    *) fail tensorboard_read "$(tail -n 3 "$TMP/read.err")" ;;
    esac
elif grep -q "ISA-L" "$d/log"; then
    echo "SKIP tensorboard_* (this build has no ISA-L: apt-get install libisal-dev, rebuild)"
    finish; exit 0
else
    fail tensorboard_dense_run "$(tail -n 3 "$d/log")"
fi

# 2. MoE, every second iteration (this iteration's values, not the log line's averages), no loss
#    scale: the tracked MoE losses under Megatron's names
d="$TMP/moe"; mkdir -p "$d"
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 0.01
     --moe-z-loss-coeff 0.001)
if "$MEGATRON" train "${MODEL[@]}" "${MOE[@]}" --num-threads 2 --train-iters 6 --log-interval 1 --eval-iters 0 \
    --tensorboard-dir "$d/tb" --tensorboard-log-interval 2 --no-log-loss-scale-to-tensorboard \
    --metrics-file "$d/m.jsonl" >"$d/log" 2>&1 && read_events "$d/tb" >"$d/dump.json" 2>/dev/null; then
    check "$d/dump.json" "$d/m.jsonl" "$d/log" moe
else
    fail tensorboard_moe_run "$(tail -n 3 "$d/log")" "$(tail -n 3 "$TMP/read.err")"
fi

# 3. two pipeline stages under mpirun: one event file, from the last rank, whose losses are the
#    metrics file's (also written by the last rank)
DIST=$(dirname "$MEGATRON")/dist_tests
if ! command -v mpirun >/dev/null || ! [ -x "$DIST" ] || ! "$DIST" --features 2>&1 | grep -q mpi=yes; then
    echo "SKIP tensorboard_pipeline_last_rank (no MPI build or mpirun)"
else
    d="$TMP/pp"; mkdir -p "$d"
    if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 60 mpirun --oversubscribe -np 2 \
        "$MEGATRON" train "${MODEL[@]}" --num-threads 1 --train-iters 3 --log-interval 1 \
        --eval-iters 0 --pipeline-model-parallel-size 2 --tensorboard-dir "$d/tb" \
        --metrics-file "$d/m.jsonl" >"$d/log" 2>&1 && read_events "$d/tb" >"$d/dump.json" 2>/dev/null; then
        out=$(python3 - "$d/dump.json" "$d/m.jsonl" 2>&1 <<'EOF'
import json, struct, sys
dump = json.load(open(sys.argv[1])); rows = [json.loads(l) for l in open(sys.argv[2])]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
got = dump["scalars"].get("lm loss", [])
want = [[r["iteration"], f32(r["lm_loss"])] for r in rows]
if len(dump["files"]) == 1 and got == want and dump["frames_ok"]:
    print("PASS tensorboard_pipeline_last_rank")
else:
    print(f"FAIL tensorboard_pipeline_last_rank\n  files {dump['files']}, lm loss {got}, metrics {want}")
EOF
        )
        count <<<"$out"
    else
        fail tensorboard_pipeline_last_rank "$(tail -n 3 "$d/log")"
    fi
fi
finish
