#!/usr/bin/env bash
# `megatron train` under `mpirun --oversubscribe` (a part of tests/run.sh): data-parallel runs as
# the user starts them. The numerical equivalence with one rank is tests/dist/test_train_dp.c
# (in dist_tests); this script checks what only the command line shows:
#   - a 2-rank run trains, logs from the last rank, and its losses match the one-rank run's;
#   - a bad flag (a global batch that micro batch x DP does not divide) stops every rank with one
#     line and a non-zero status, at once;
#   - a rank that dies mid-step (MG_FAULT_EXIT) stops every other rank with an error line naming
#     it, within the bound, instead of a hang;
#   - tensor parallelism as the README shows it (TP 2 with --sequence-parallel, and TP 2 x DP 2
#     with the distributed optimizer; TP 2 with and without SP, with --tp-comm-overlap and its
#     sub-flags)
#     logs the one-rank run's losses; bad tensor-parallel layouts
#     stop every rank with one line and exit status 2;
#   - pipeline parallelism as the README shows it (P 4 x V 2, and P 2 x D 2 with the distributed
#     optimizer) logs the one-rank run's losses from the last rank; a rank that dies in the middle
#     of a pipeline step stops the others with a line naming it; bad pipeline layouts exit 2;
#   - a Mixture-of-Experts model under P 2 and under D 2 with the distributed optimizer logs the
#     one-rank run's lm losses, load_balancing_loss and z_loss.
#   - dropout (0.1, --layout-invariant-dropout as in every run here) under TP 2 with SP and under
#     D 2 with the distributed optimizer logs the one-rank run's losses, which differ from the
#     dropout-free run's.
#   - packed documents (--reset-position-ids --reset-attention-mask) under TP 2 with SP, PP 2 and
#     PP 2 x V 2, learned positions and RoPE, log the one-rank run's losses (not the flag-free
#     run's).
# Prints PASS/FAIL lines and "N passed, N failed"; skipped (with a line) without MPI.
#   tests/dist/test_train.sh [BUILD]
set -u
BUILD=${1:-build}
BIN=$BUILD/megatron
SUITE="dist train"
. "$(dirname "$0")/lib.sh"
train_script_prologue "$BUILD"

# Heads of 16 channels, the fewest the CUDA attention kernels take (with dropout, Megatron's 0.1
# default, attention runs on them), so every model here would also train with --device cuda.
# The runs compare layouts: dropout masks that do not depend on the layout
# (--layout-invariant-dropout; Megatron's own streams differ from layout to layout).
MODEL=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 96
    --disable-bias-linear --mock-data --micro-batch-size 1 --global-batch-size 8 --lr 3e-3
    --lr-warmup-iters 1 --log-interval 1 --eval-iters 0 --device cpu --num-threads 1
    --layout-invariant-dropout)

# The "lm loss" values of a run's log, one per line.
losses() { grep -oE 'lm loss: [0-9.E+-]+' <<<"$1" | awk '{print $3}'; }

# (1) two replicas against one rank: same losses (the log prints 7 digits; the values agree to
# ~1e-7, so allow one unit in the last place), one log line per iteration from the last rank.
one=$(timeout 60 "$BIN" train "${MODEL[@]}" --train-iters 5 2>&1); rc1=$?
two=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" --train-iters 5 2>&1); rc2=$?
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    fail "train np=2 (exit status one rank $rc1, two ranks $rc2)" "$(tail -n 5 <<<"$two")"
elif [ "$(grep -c '^\[rank 1\]  *\[.*iteration ' <<<"$two")" -ne 5 ] || grep -q '^\[rank 0\] .*iteration  ' <<<"$two"; then
    fail "train np=2 (want 5 iteration lines, all from rank 1)" "$(grep 'iteration ' <<<"$two")"
elif ! paste <(losses "$one") <(losses "$two") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 5 }'; then
    fail "train np=2 (losses differ from one rank's)" "one rank: $(losses "$one" | tr '\n' ' ')" "two ranks: $(losses "$two" | tr '\n' ' ')"
else
    pass "train np=2: losses $(losses "$two" | tr '\n' ' ')match one rank's"
fi

# (2) a bad flag: every rank prints the same one line and the job fails, without waiting.
start=$(now)
out=$(timeout 60 "${MPIRUN[@]}" -np 4 "$BIN" train "${MODEL[@]}" --train-iters 5 \
    --micro-batch-size 2 --global-batch-size 12 2>&1); rc=$?
took=$(elapsed "$start")
want="megatron: error: global batch size \(12\) is not divisible by micro batch size \(2\) times data parallel size \(4\); make --global-batch-size a multiple of 8"
n=0
for r in 0 1 2 3; do grep -qE "^\[rank $r\] $want\$" <<<"$out" && n=$((n + 1)); done
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "train bad global batch np=4 (exit status $rc)" "$out"
elif [ "$n" -lt 1 ] || [ "$(grep -c 'megatron: error' <<<"$out")" -ne "$n" ]; then
    fail "train bad global batch np=4 ($n ranks printed the line)" "$out"
else
    pass "train bad global batch np=4: $n ranks printed it, exit status $rc, $took s"
fi

# (3) rank 1 dies in iteration 3, between backward and the gradient all-reduce: the others are
# waiting in that all-reduce.
# Rank 1 of 4 dies (MG_FAULT_EXIT=1:ITER): every other rank that prints must print one line
# naming it and the call it was in (CALL, a regex, on GROUP), within the timeout; one report
# suffices (mpirun may kill the rest first), none may hang.
expect_killed() { # NAME ITER CALL GROUP TRAIN_ARGS...
    local name=$1 iter=$2 call=$3 group=$4 start out rc took n=0 line r bad=()
    shift 4
    start=$(now)
    out=$(timeout 60 "${MPIRUN[@]}" -np 4 -x MG_FAULT_EXIT=1:$iter "$BIN" train "$@" \
        --train-iters 20 --distributed-timeout-minutes 1 2>&1); rc=$?
    took=$(elapsed "$start")
    for r in 0 2 3; do
        line=$(grep "^\[rank $r\] megatron: error" <<<"$out")
        [ -z "$line" ] && continue
        if grep -qE "^\[rank $r\] megatron: error: rank 1 disconnected without a goodbye .*\(this rank, $r, was in $call #[0-9]+ on group '$group'\)\$" <<<"$line"; then
            n=$((n + 1))
        else
            bad+=("$line")
        fi
    done
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
        fail "$name (exit status $rc; 124: still running after 60 s)" "$(tail -n 20 <<<"$out")"
    elif ! grep -q "MG_FAULT_EXIT: exiting in iteration $iter" <<<"$out"; then
        fail "$name (the fault was not injected)" "$(tail -n 20 <<<"$out")"
    elif [ ${#bad[@]} -gt 0 ] || [ "$n" -lt 1 ]; then
        fail "$name ($n ranks reported it; wrong lines follow)" "${bad[@]}" "$(tail -n 20 <<<"$out")"
    else
        pass "$name: $n ranks reported it, exit status $rc, $took s"
    fi
}
expect_killed "train killed rank np=4" 3 all_reduce dp "${MODEL[@]}"
# (4) the distributed optimizer end to end: 4 ranks save their shards at iteration 2, 2 ranks
# resume from them (each reads the pieces of its own shard from the 4 files) and finish like a
# straight 2-rank run (to the log's precision: the two halves reduce in different orders).
DIST=(--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 5000 --lr-decay-iters 4)
straight=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${DIST[@]}" --train-iters 4 2>&1); rc1=$?
first=$(timeout 60 "${MPIRUN[@]}" -np 4 "$BIN" train "${MODEL[@]}" "${DIST[@]}" --train-iters 4 \
    --exit-interval 2 --save "$TMP/ckpt" 2>&1); rc2=$?
second=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MODEL[@]}" "${DIST[@]}" --train-iters 4 \
    --load "$TMP/ckpt" 2>&1); rc3=$?
shards=$(ls "$TMP/ckpt/iter_0000002" 2>/dev/null | grep -c '^rank-0000[0-3].safetensors$')
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ] || [ "$rc3" -ne 0 ]; then
    fail "train distopt save np=4, resume np=2 (exit status $rc1 $rc2 $rc3)" "$(tail -n 3 <<<"$first")" "$(tail -n 3 <<<"$second")"
elif [ "$shards" -ne 4 ]; then
    fail "train distopt save np=4 ($shards rank files)" "$(ls "$TMP/ckpt/iter_0000002")"
elif ! paste <(losses "$straight" | tail -n 2) <(losses "$second") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 2 }'; then
    fail "train distopt save np=4, resume np=2 (losses differ from the straight run)" \
        "straight: $(losses "$straight" | tr '\n' ' ')" "resumed: $(losses "$second" | tr '\n' ' ')"
else
    pass "train distopt save np=4 (4 rank files), resume np=2: losses $(losses "$second" | tr '\n' ' ')match"
fi

# (5) tensor parallelism from the command line: the same losses as one rank (the padded vocabulary
# is the same: 128 rows for TP 1 and 2 with --make-vocab-size-divisible-by 64); by default the
# input gradient's reduction runs beside the weight gradient, --no-tp-comm-bulk-wgrad keeps it in
# order; with --tp-comm-overlap (the row-parallel products reduced in chunks; with SP also the
# all-gathers beside the GEMMs of a rank's own rows), with and without SP, with Megatron's
# spellings of the parts' switches (--disable-tp-comm-*) and with its userbuffers flags
# (--tp-comm-overlap-cfg, ...), which have no effect here.
TPM=("${MODEL[@]}" --make-vocab-size-divisible-by 64 --train-iters 4)
base=$(timeout 60 "$BIN" train "${TPM[@]}" 2>&1); rc0=$?
for layout in "2:--tensor-model-parallel-size 2 --sequence-parallel" \
    "4:--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce" \
    "2:--tensor-model-parallel-size 2" \
    "2:--tensor-model-parallel-size 2 --no-tp-comm-bulk-wgrad" \
    "2:--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap --disable-tp-comm-bulk-wgrad --disable-tp-comm-overlap-ag" \
    "2:--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap" \
    "2:--tensor-model-parallel-size 2 --tp-comm-overlap --disable-tp-comm-overlap-rs --tp-comm-overlap-cfg tp.yaml --no-tp-comm-bulk-dgrad"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${TPM[@]}" "${extra[@]}" 2>&1); rc=$?
    name="train np=$np ${layout#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$out")"
    elif ! grep -q "tensor-parallel size 2" <<<"$out"; then
        fail "$name (no tensor-parallel banner)" "$(head -n 12 <<<"$out")"
    elif ! paste <(losses "$base") <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 4 }'; then
        fail "$name (losses differ from one rank's)" "one rank: $(losses "$base" | tr '\n' ' ')" "tp: $(losses "$out" | tr '\n' ' ')"
    else
        pass "$name: losses $(losses "$out" | tr '\n' ' ')match one rank's"
    fi
done

# (6) bad tensor-parallel layouts: every rank prints the same one line (Megatron's reason) and the
# job exits with status 2, before the ranks meet.
bad_layout() { # NAME NP PATTERN FLAGS...
    local name=$1 np=$2 want=$3 out rc n=0 r
    shift 3
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MODEL[@]}" --train-iters 2 "$@" 2>&1); rc=$?
    for ((r = 0; r < np; r++)); do grep -qE "^\[rank $r\] megatron: error: $want" <<<"$out" && n=$((n + 1)); done
    if [ "$rc" -ne 2 ] || [ "$n" -lt 1 ] || [ "$(grep -c 'megatron: error' <<<"$out")" -ne "$n" ]; then
        fail "train bad layout: $name (exit status $rc, $n ranks printed the line)" "$out"
    else
        pass "train bad layout: $name: $n ranks, exit status 2"
    fi
}
bad_layout "heads" 4 "num_attention_heads \(2\) must be a multiple of tensor_model_parallel_size \(8\)" \
    --tensor-model-parallel-size 8
bad_layout "query groups" 2 "num_query_groups \(1\) must be a multiple of tensor_model_parallel_size \(2\)" \
    --tensor-model-parallel-size 2 --group-query-attention --num-query-groups 1
bad_layout "world size" 3 "world size 3 is not divisible by tensor \(2\) x pipeline \(1\) x context \(1\) = 2" \
    --tensor-model-parallel-size 2 --global-batch-size 3
bad_layout "sequence" 2 "--sequence-parallel splits the sequence .* --seq-length 15 is not divisible by --tensor-model-parallel-size 2" \
    --tensor-model-parallel-size 2 --sequence-parallel --seq-length 15

# (7) pipeline parallelism from the command line: the one-rank run's losses, training and
# validation (the evaluation's forwards-only schedule: at iteration 2, and after training on the
# validation and the test split), logged by the last rank (it computes them); 8 layers, 8
# microbatches per step; messages overlapped (tagged, and as GPUs move an interleaved schedule's:
# on the executor's own order, matched in posting order, MG_TEST_PP_STREAMED=1) and in the
# schedule's order; and an uneven interleaved layout written as Megatron's
# --pipeline-model-parallel-layout (chunks of 3 and 1 layers). Layouts: ranks:environment:flags;
# the banner names how messages move.
vlosses() { grep -oE 'lm loss value: [0-9.E+-]+' <<<"$1" | awk '{print $4}'; }
PPM=("${MODEL[@]}" --num-layers 8 --train-iters 4)
base=$(timeout 60 "$BIN" train "${PPM[@]}" --eval-iters 2 --eval-interval 2 2>&1); rc0=$?
for layout in "4::--pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2" \
    "4:MG_TEST_PP_STREAMED=1:--pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2" \
    "4::--pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2 --no-overlap-p2p-communication" \
    "4::--pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce" \
    "2::--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*3|t|t*3|tL"; do
    np=${layout%%:*}; rest=${layout#*:}; envv=${rest%%:*}; read -r -a extra <<<"${rest#*:}"
    xs=(); [ -n "$envv" ] && xs=(-x "${envv%%=*}")
    banner="messages overlapped (tagged"
    [ -n "$envv" ] && banner="messages overlapped (on a stream of their own)"
    [[ " ${extra[*]} " == *" --no-overlap-p2p-communication "* ]] && banner="messages each a rendezvous"
    out=$(env $envv timeout 60 "${MPIRUN[@]}" "${xs[@]}" -np "$np" "$BIN" train "${PPM[@]}" --eval-iters 2 --eval-interval 2 "${extra[@]}" 2>&1); rc=$?
    name="train np=$np ${envv:+$envv }${rest#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$out")"
    elif ! grep "pipeline rank 0 of" <<<"$out" | grep -qF "$banner" || grep "lm loss" <<<"$out" | grep -qv "^\[rank $((np - 1))\]"; then
        fail "$name (no pipeline banner with \"$banner\", or a loss logged by another rank than the last)" "$(head -n 12 <<<"$out")"
    elif [ "$(grep -cE "pipeline rank [0-9]+ of [0-9]+: 3 steps after the first, busy [0-9.]+ s, waiting [0-9.]+ s per step: bubble" <<<"$out")" -ne "$(grep -oE 'pipeline-model-parallel-size [0-9]+' <<<"${rest#*:}" | awk '{print $2}')" ]; then
        fail "$name (not one bubble line per stage, timed by the timer points over the 3 steps after the first)" "$(grep bubble <<<"$out")"
    elif ! paste <(losses "$base") <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 4 }'; then
        fail "$name (losses differ from one rank's)" "one rank: $(losses "$base" | tr '\n' ' ')" "pp: $(losses "$out" | tr '\n' ' ')"
    elif ! paste <(vlosses "$base") <(vlosses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 3 }'; then
        fail "$name (validation losses differ from one rank's)" "one rank: $(vlosses "$base" | tr '\n' ' ')" "pp: $(vlosses "$out" | tr '\n' ' ')"
    elif [ "$(grep -c "^\[rank 0\] > pipeline split, in the schedule's model" <<<"$out")" -ne 1 ]; then
        fail "$name (not one start-up line of the split in the schedule's model, from rank 0)" "$(grep -F "pipeline split" <<<"$out")"
    else
        pass "$name: losses $(losses "$out" | tr '\n' ' ')and validation $(vlosses "$out" | tr '\n' ' ')match one rank's"
    fi
done
# A pipeline rank dies in the middle of a step (its forward of the 4th of 8 microbatches): the
# others wait on it or on a neighbour in a pipeline send/receive. Both ways of communicating:
# overlapped (a wait for a posted message) and each message a rendezvous.
expect_killed "train killed pipeline rank np=4, messages overlapped" 2 "p2p_(wait|send|recv)" pp \
    "${PPM[@]}" --pipeline-model-parallel-size 4
expect_killed "train killed pipeline rank np=4, messages in order" 2 batch_p2p pp \
    "${PPM[@]}" --pipeline-model-parallel-size 4 --no-overlap-p2p-communication
# Per-stage checkpoints: 2 pipeline stages save at iteration 2 (each its own model and optimizer
# files); resuming under P 2, under one rank and under P 4 continues like the straight P 2 run.
CK=(--lr-decay-iters 4 --train-iters 4)
straight=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${PPM[@]}" "${CK[@]}" --pipeline-model-parallel-size 2 2>&1)
first=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${PPM[@]}" "${CK[@]}" --pipeline-model-parallel-size 2 \
    --exit-interval 2 --save "$TMP/ppck" 2>&1); rc=$?
files=$(ls "$TMP/ppck/iter_0000002" 2>/dev/null | tr '\n' ' ')
if [ "$rc" -ne 0 ] || [ "$files" != "index.json rank-00000.safetensors rank-00001.safetensors state.json " ]; then
    fail "train pp2 save (exit status $rc, files: $files)" "$(tail -n 5 <<<"$first")"
else
    pass "train pp2 save: $files"
fi
for resume in "2:--pipeline-model-parallel-size 2" "1:" "4:--pipeline-model-parallel-size 4"; do
    np=${resume%%:*}; read -r -a extra <<<"${resume#*:}"
    if [ "$np" -eq 1 ]; then
        out=$(timeout 60 "$BIN" train "${PPM[@]}" "${CK[@]}" --load "$TMP/ppck" 2>&1)
    else
        out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${PPM[@]}" "${CK[@]}" "${extra[@]}" --load "$TMP/ppck" 2>&1)
    fi
    if ! paste <(losses "$straight" | tail -n 2) <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 2 }'; then
        fail "train pp2 checkpoint resumed on np=$np ${resume#*:} (losses differ from the straight run)" \
            "straight: $(losses "$straight" | tr '\n' ' ')" "resumed: $(losses "$out" | tr '\n' ' ')" "$(tail -n 3 <<<"$out")"
    else
        pass "train pp2 checkpoint resumed on np=$np ${resume#*:}: losses $(losses "$out" | tr '\n' ' ')match"
    fi
done
bad_layout "layers" 2 "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2; valid --num-layers: 2, 4, 6" \
    --pipeline-model-parallel-size 2 --num-layers 3
bad_layout "virtual stages" 2 "the 1 layers per pipeline stage \(--num-layers 2 over 2 stages\) are not divisible by the 2 virtual stages per pipeline rank" \
    --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2
bad_layout "interleaved microbatches" 2 "3 microbatches in groups of 2 .* leave a last group of 1, fewer than --pipeline-model-parallel-size 2" \
    --num-layers 4 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --global-batch-size 3
bad_layout "layout string" 2 "--pipeline-model-parallel-layout holds 3 transformer layers \(t\), --num-layers is 4" \
    --num-layers 4 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Et*2|tL"
bad_layout "layout with uneven stages" 2 "--pipeline-model-parallel-layout places every layer itself" \
    --num-layers 4 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Et*2|t*2L" \
    --decoder-last-pipeline-num-layers 2
# (9) a Mixture-of-Experts model (every layer MoE, aux loss and z-loss) under pipeline
# parallelism and under data parallelism with the distributed optimizer: the one-rank run's lm
# losses, and its logged load_balancing_loss and z_loss (Megatron's means over the MoE layers,
# summed over the stages and averaged over the replicas).
MOEM=("${MODEL[@]}" --num-layers 4 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48
    --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --train-iters 3)
moel() { grep -oE '(lm loss|load_balancing_loss|z_loss): [0-9.E+-]+' <<<"$1" | awk '{print $NF}'; }
base=$(timeout 60 "$BIN" train "${MOEM[@]}" 2>&1); rc0=$?
for layout in "2:--pipeline-model-parallel-size 2" "2:--use-distributed-optimizer"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MOEM[@]}" "${extra[@]}" 2>&1); rc=$?
    name="train moe np=$np ${layout#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$out")"
    elif ! paste <(moel "$base") <(moel "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 9 }'; then
        fail "$name (lm loss, load_balancing_loss, z_loss differ from one rank's)" \
            "one rank: $(moel "$base" | tr '\n' ' ')" "$np ranks: $(moel "$out" | tr '\n' ' ')"
    else
        pass "$name: lm loss, load_balancing_loss, z_loss $(moel "$out" | tr '\n' ' ')match one rank's"
    fi
done
# (10) expert parallelism (the issue's layouts: EP 2 on 2 ranks, EP 4 on 4, EP 2 x DP 2 with the
# distributed optimizer, and EP 2 under pipeline parallelism), dropless: 10 iterations of the
# metrics file (full precision) give the one-rank run's lm loss, grad norm (the experts' sum of
# squares over the expert-parallel ranks joins the dense one), load_balancing_loss, z_loss and
# expert load within 1e-5 relative (under pipeline parallelism the logged load is the last
# stage's layers', so it is left out there). Then a checkpoint saved at iteration 5 under EP 2 x DP 2
# resumes on one rank and under EP 4: iterations 6..10 match the uninterrupted run.
MOEP=("${MODEL[@]}" --num-layers 2 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48
    --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --train-iters 10)
# metric values of a metrics file from iteration FIRST on, one per line
# (KEYS: a regex of the keys compared)
KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
metv() { awk -v first="$2" -v keys="\"($KEYS)\"" -F'[:,}]' '{ it = 0; for (i = 1; i < NF; i++) { if ($i ~ /"iteration"/) it = $(i + 1) + 0 }
    if (it < first) next
    for (i = 1; i < NF; i++) if ($i ~ keys) print $(i + 1) + 0 }' "$1"; }
same() { paste <(metv "$1" "$3") <(metv "$2" "$3") | awk -v n="$4" 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != n }'; }
timeout 60 "$BIN" train "${MOEP[@]}" --metrics-file "$TMP/ep1.jsonl" >/dev/null 2>&1; rc0=$?
for layout in "2:--expert-model-parallel-size 2" "4:--expert-model-parallel-size 4" \
    "4:--expert-model-parallel-size 2 --use-distributed-optimizer" \
    "4:--expert-model-parallel-size 2 --pipeline-model-parallel-size 2"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    rm -f "$TMP/epn.jsonl"
    n=50 KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
    [[ $layout == *pipeline* ]] && n=40 KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss'
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MOEP[@]}" "${extra[@]}" \
        --metrics-file "$TMP/epn.jsonl" 2>&1); rc=$?
    name="train moe np=$np ${layout#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$out")"
    elif ! same "$TMP/ep1.jsonl" "$TMP/epn.jsonl" 1 "$n"; then
        fail "$name (metrics differ from one rank's)" "one rank: $(metv "$TMP/ep1.jsonl" 1 | tr '\n' ' ')" \
            "$np ranks: $(metv "$TMP/epn.jsonl" 1 | tr '\n' ' ')"
    else
        pass "$name: 10 iterations of ${KEYS//|/, } match one rank's"
    fi
done
# ECHO's moe_ep_load_imbalance (max over mean tokens per expert-parallel rank, averaged over the
# MoE layers): present with EP 2, absent with one rank, and between 1 and the expert load (a
# rank's share is at most its experts' number times the busiest expert's)
rm -f "$TMP/epi.jsonl"
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MOEP[@]}" --expert-model-parallel-size 2 \
    --metrics-file "$TMP/epi.jsonl" 2>&1); rc=$?
bounds=$(awk -F'[:,}]' '{ imb = ""; load = ""; for (i = 1; i < NF; i++) {
    if ($i ~ /"moe_ep_load_imbalance"/) imb = $(i + 1) + 0; if ($i ~ /"expert_load"/) load = $(i + 1) + 0 }
    if (imb == "" || imb < 1 || imb > load + 1e-9) bad++ } END { print NR, bad + 0 }' "$TMP/epi.jsonl" 2>/dev/null)
if [ "$rc" -ne 0 ]; then fail "train moe ep imbalance np=2 (exit status $rc)" "$(tail -n 3 <<<"$out")"
elif [ "$bounds" != "10 0" ]; then fail "train moe ep imbalance np=2: lines, out of bounds: $bounds" "$(head -n 2 "$TMP/epi.jsonl")"
elif grep -q moe_ep_load_imbalance "$TMP/ep1.jsonl"; then fail "train moe ep imbalance: logged with one rank"
elif ! grep -q "moe_ep_load_imbalance: [0-9.]* |" <<<"$out"; then fail "train moe ep imbalance: not on the log line" "$(grep iteration <<<"$out" | tail -n 1)"
else pass "train moe ep imbalance np=2: on the log line and in the metrics file, within [1, expert load]"; fi
KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
# capacity-limited and padded routing under EP 2 (each rank drops over its own tokens, as one
# rank does over the same microbatch): the one-rank run's values
CAP=(--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
timeout 60 "$BIN" train "${MOEP[@]}" "${CAP[@]}" --metrics-file "$TMP/cap1.jsonl" >/dev/null 2>&1
rm -f "$TMP/capn.jsonl"
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MOEP[@]}" "${CAP[@]}" \
    --expert-model-parallel-size 2 --metrics-file "$TMP/capn.jsonl" 2>&1); rc=$?
if [ "$rc" -ne 0 ] || ! same "$TMP/cap1.jsonl" "$TMP/capn.jsonl" 1 50; then
    fail "train moe capacity np=2 --expert-model-parallel-size 2 (exit status $rc)" "$(tail -n 3 <<<"$out")" \
        "one rank: $(metv "$TMP/cap1.jsonl" 1 | tr '\n' ' ')" "2 ranks: $(metv "$TMP/capn.jsonl" 1 | tr '\n' ' ')"
else
    pass "train moe capacity 1.0, padded, np=2 --expert-model-parallel-size 2: 10 iterations match one rank's"
fi
# moe_layout NP BASE FILE N NAME ARGS...: `megatron train MOEP ARGS` on NP ranks (MPIX: more
# mpirun options), metrics into FILE, its output in $out; true when it ran and its N values of
# KEYS equal BASE's within 1e-5, else one FAIL line
moe_layout() {
    local np=$1 base=$2 file=$3 n=$4 name=$5 rc
    shift 5
    rm -f "$file"
    # shellcheck disable=SC2086
    out=$(timeout 60 "${MPIRUN[@]}" ${MPIX:-} -np "$np" "$BIN" train "${MOEP[@]}" "$@" \
        --metrics-file "$file" 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$name (exit status $rc)" "$(tail -n 5 <<<"$out")"
    elif ! same "$base" "$file" 1 "$n"; then
        fail "$name (metrics differ from one rank's)" \
            "one rank: $(metv "$base" 1 | tr '\n' ' ')" "$np ranks: $(metv "$file" 1 | tr '\n' ' ')"
    else
        return 0
    fi
    return 1
}
# The receive budget (--moe-expert-rank-capacity-factor, or ECHO's --moe-received-token-capacity)
# small enough that every step goes over it: the exchange takes extra rounds through the same
# slabs and the backward recomputes them, so the metrics equal the one-rank run's (no budget)
# within 1e-5, and every line counts its step (moe_overflow_steps 1, log line and metrics file)
for layout in "2:--expert-model-parallel-size 2 --moe-expert-rank-capacity-factor 0.25" \
    "4:--expert-model-parallel-size 4 --moe-received-token-capacity 0.5" \
    "4:--expert-model-parallel-size 2 --use-distributed-optimizer --moe-expert-rank-capacity-factor 0.25" \
    "4:--expert-model-parallel-size 2 --pipeline-model-parallel-size 2 --moe-expert-rank-capacity-factor 0.25"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    n=50 KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
    [[ $layout == *pipeline* ]] && n=40 KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss'
    name="train moe budget np=$np ${layout#*:}"
    moe_layout "$np" "$TMP/ep1.jsonl" "$TMP/epb.jsonl" "$n" "$name" "${extra[@]}" || continue
    overs=$(grep -o '"moe_overflow_steps": [0-9]*' "$TMP/epb.jsonl" 2>/dev/null | awk '$2 == 1 { n++ } END { print n + 0 }')
    lines=$(grep -c "moe_overflow_steps: *1 |" <<<"$out")
    if [ "$overs" != 10 ] || [ "$lines" -lt 10 ]; then
        fail "$name: steps over the budget: $overs in the metrics file, $lines log lines (10 each)" \
            "$(head -n 1 "$TMP/epb.jsonl")"
    else
        pass "$name: 10 iterations over the budget (moe_overflow_steps 1 each) match one rank's"
    fi
done
KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
# ECHO (--moe-enable-echo): each layer and microbatch plans on the device from the gathered
# counts, reroutes the pairs into spare slots, copies the home experts' weights there and brings
# the slots' gradients home: the function is the model's, so the metrics equal one rank's without
# echo within 1e-5 (EP 2 with one spare slot per rank: bin packing; EP 4 with 8 slots: greedy;
# EP 2 x DP 2 with the distributed optimizer; with a receive budget as well)
for layout in "2:--expert-model-parallel-size 2 --moe-enable-echo --moe-num-echo-experts 2" \
    "4:--expert-model-parallel-size 4 --moe-enable-echo --moe-num-echo-experts 8" \
    "4:--expert-model-parallel-size 2 --use-distributed-optimizer --moe-enable-echo" \
    "2:--expert-model-parallel-size 2 --moe-enable-echo --moe-expert-rank-capacity-factor 0.5"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    name="train moe echo np=$np ${layout#*:}"
    moe_layout "$np" "$TMP/ep1.jsonl" "$TMP/epe.jsonl" 50 "$name" "${extra[@]}" &&
        pass "$name: 10 iterations match one rank's without echo"
done
# ECHO on a skewed router (the test hook MG_TEST_EXPERT_BIAS fixes the expert bias so experts 0
# and 1 take nearly every token: EP 2's rank 0 gets everything): echo moves many tokens, the
# metrics still equal one rank's without echo, and moe_ep_load_imbalance_after_echo is below
# moe_ep_load_imbalance on every line
SKEW=(--moe-router-enable-expert-bias --moe-router-bias-update-rate 0 --moe-router-score-function sigmoid)
MG_TEST_EXPERT_BIAS=1,1,0,0 timeout 60 "$BIN" train "${MOEP[@]}" "${SKEW[@]}" --metrics-file "$TMP/sk1.jsonl" >/dev/null 2>&1
for layout in "2:--expert-model-parallel-size 2 --moe-num-echo-experts 2" "4:--expert-model-parallel-size 4 --moe-num-echo-experts 8"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    name="train moe echo skewed router np=$np ${layout#*:}"
    MG_TEST_EXPERT_BIAS=1,1,0,0 MPIX="-x MG_TEST_EXPERT_BIAS" moe_layout "$np" "$TMP/sk1.jsonl" \
        "$TMP/ske.jsonl" 50 "$name" "${SKEW[@]}" "${extra[@]}" --moe-enable-echo || continue
    imb=$(awk -F'[:,}]' '{ b = ""; a = ""; for (i = 1; i < NF; i++) {
        if ($i ~ /"moe_ep_load_imbalance"/) b = $(i + 1) + 0; if ($i ~ /"moe_ep_load_imbalance_after_echo"/) a = $(i + 1) + 0 }
        if (b == "" || a == "" || !(a < b) || b < 1.5) bad++; last = b " -> " a } END { print NR, bad + 0, last }' "$TMP/ske.jsonl" 2>/dev/null)
    if [ "$(cut -d' ' -f1-2 <<<"$imb")" != "10 0" ]; then
        fail "$name: imbalance before -> after echo not lower on every line (lines, bad, last: $imb)" "$(head -n 1 "$TMP/ske.jsonl")"
    else
        pass "$name: 10 iterations match one rank's; imbalance $(cut -d' ' -f3- <<<"$imb")"
    fi
done
KEYS='lm_loss|grad_norm|load_balancing_loss|z_loss|expert_load'
# a budget with graphs of whole MoE layers: the extra rounds are the host's, refused in one line
out=$(timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" train "${MOEP[@]}" --expert-model-parallel-size 2 \
    --moe-expert-rank-capacity-factor 1.5 --cuda-graph-impl local --cuda-graph-scope full_iteration 2>&1); rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "moe-expert-rank-capacity-factor with CUDA graphs of whole MoE layers" <<<"$out"; then
    fail "train moe budget with a full-iteration graph: exit $rc (want 2 and one line)" "$(tail -n 3 <<<"$out")"
else
    pass "train moe budget with a full-iteration graph: refused, exit 2"
fi
# ECHO inside the graphs (its plan, reroute and expert copies are device work on fixed sizes):
# the skewed router's run under EP 2 with ECHO, replayed from a full-iteration graph and from
# per-layer graphs of whole MoE layers, logs the one-rank run's metrics
for g in "--cuda-graph-impl full_iteration --cuda-graph-warmup-steps 2" \
    "--cuda-graph-impl local --cuda-graph-scope moe --cuda-graph-warmup-steps 2"; do
    read -r -a gf <<<"$g"
    name="train moe echo skewed router np=2 in graphs ($g)"
    MG_TEST_EXPERT_BIAS=1,1,0,0 MPIX="-x MG_TEST_EXPERT_BIAS" moe_layout 2 "$TMP/sk1.jsonl" \
        "$TMP/skg.jsonl" 50 "$name" "${SKEW[@]}" --expert-model-parallel-size 2 \
        --moe-num-echo-experts 2 --moe-enable-echo "${gf[@]}" || continue
    if ! grep -qE "captured the full iteration|per-layer graphs: [1-9][0-9]* captured" <<<"$out"; then
        fail "$name: nothing was captured" "$(grep '^\[rank 0\] >' <<<"$out" | tail -n 5)"
    else
        pass "$name: 10 iterations match one rank's"
    fi
done
# megatron on NP ranks (one: without mpirun), 60 s at most
on_ranks() { # NP ARGS...
    local np=$1; shift
    if [ "$np" -eq 1 ]; then timeout 60 "$BIN" "$@"; else timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" "$@"; fi
}
# SAVE_LAYOUT / RESUME_LAYOUT: "NP:FLAGS"
ep_resume() {
    local save=$1 resume=$2 np ck out out2 rc rc2 extra name
    ck="$TMP/ep_ckpt_${save%%:*}_$RANDOM"
    np=${save%%:*}; read -r -a extra <<<"${save#*:}"
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${MOEP[@]}" "${extra[@]}" \
        --exit-interval 5 --save "$ck" --save-interval 5 2>&1); rc=$?
    np=${resume%%:*}; read -r -a extra <<<"${resume#*:}"
    rm -f "$TMP/epr.jsonl"
    out2=$(on_ranks "$np" train "${MOEP[@]}" "${extra[@]}" --load "$ck" --metrics-file "$TMP/epr.jsonl" 2>&1); rc2=$?
    name="train moe checkpoint of np=${save%%:*} ${save#*:} resumed on np=$np ${resume#*:}"
    if [ "$rc" -ne 0 ] || [ "$rc2" -ne 0 ]; then
        fail "$name (exit status save $rc, resume $rc2)" "$(tail -n 3 <<<"$out")" "$(tail -n 3 <<<"$out2")"
    elif ! same "$TMP/ep1.jsonl" "$TMP/epr.jsonl" 6 25; then
        fail "$name (iterations 6..10 differ from the uninterrupted run)" \
            "uninterrupted: $(metv "$TMP/ep1.jsonl" 6 | tr '\n' ' ')" "resumed: $(metv "$TMP/epr.jsonl" 6 | tr '\n' ' ')"
    else
        pass "$name: iterations 6..10 match the uninterrupted run"
    fi
}
ep_resume "4:--expert-model-parallel-size 2 --use-distributed-optimizer" "1:"
ep_resume "4:--expert-model-parallel-size 2 --use-distributed-optimizer" "4:--expert-model-parallel-size 4"
ep_resume "4:--expert-model-parallel-size 2" "2:--expert-model-parallel-size 2 --use-distributed-optimizer"
# (11) checkpoints across tensor and pipeline layouts: saved at iteration 5 under TP 2 x PP 2
# (4 ranks, SwiGLU and GQA so that the split tensors have stacked chunks and query groups; in the
# background, --async-save),
# resumed on one rank, under DP 2, under PP 4 and under TP 2 x DP 2 with the distributed
# optimizer: iterations 6..10 give the uninterrupted one-rank run's lm loss and grad norm within
# 1e-5 relative (fp32)
KEYS='lm_loss|grad_norm'
TPPP=("${MODEL[@]}" --num-layers 4 --hidden-size 64 --num-attention-heads 4 --swiglu
    --normalization RMSNorm --position-embedding-type rope
    --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
    --train-iters 10 --lr-decay-iters 10 --make-vocab-size-divisible-by 64)
timeout 60 "$BIN" train "${TPPP[@]}" --metrics-file "$TMP/tp1.jsonl" >/dev/null 2>&1
ck="$TMP/tppp_ckpt"
out=$(timeout 60 "${MPIRUN[@]}" -np 4 "$BIN" train "${TPPP[@]}" --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --exit-interval 5 --save "$ck" --save-interval 5 --async-save 2>&1); rc=$?
files=$(ls "$ck/iter_0000005" 2>/dev/null | tr '\n' ' ')
if [ "$rc" -ne 0 ] || [ "$files" != "index.json rank-00000.safetensors rank-00001.safetensors rank-00002.safetensors rank-00003.safetensors state.json " ]; then
    fail "train tp2 x pp2 save (exit status $rc, files: $files)" "$(tail -n 5 <<<"$out")"
else
    pass "train tp2 x pp2 save: $files"
fi
for layout in "1:" "2:" "4:--pipeline-model-parallel-size 4" \
    "4:--tensor-model-parallel-size 2 --use-distributed-optimizer"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    rm -f "$TMP/tpr.jsonl"
    out=$(on_ranks "$np" train "${TPPP[@]}" "${extra[@]}" --load "$ck" --metrics-file "$TMP/tpr.jsonl" 2>&1); rc=$?
    name="train tp2 x pp2 checkpoint resumed on np=$np ${layout#*:}"
    if [ "$rc" -ne 0 ]; then
        fail "$name (exit status $rc)" "$(tail -n 3 <<<"$out")"
    elif ! same "$TMP/tp1.jsonl" "$TMP/tpr.jsonl" 6 10; then
        fail "$name (iterations 6..10 differ from the uninterrupted run)" \
            "uninterrupted: $(metv "$TMP/tp1.jsonl" 6 | tr '\n' ' ')" "resumed: $(metv "$TMP/tpr.jsonl" 6 | tr '\n' ' ')"
    else
        pass "$name: iterations 6..10 match the uninterrupted run"
    fi
done
# another tensor-parallel size pads the vocabulary to another multiple (96 rows: 128 under TP 1,
# 256 under TP 2 with the default --make-vocab-size-divisible-by 128): a TP 2 checkpoint resumes
# on one rank (the extra padding rows dropped) and a one-rank checkpoint under TP 2 (the new
# rows initialised), each saying so and training on
VOC=("${MODEL[@]}" --train-iters 8 --lr-decay-iters 8)
for dir in "2:1" "1:2"; do
    from=${dir%%:*} to=${dir#*:} ck="$TMP/voc_$from"
    on_ranks "$from" train "${VOC[@]}" --tensor-model-parallel-size "$from" --save "$ck" \
        --save-interval 4 --exit-interval 4 >/dev/null 2>&1
    out=$(on_ranks "$to" train "${VOC[@]}" --tensor-model-parallel-size "$to" --load "$ck" 2>&1); rc=$?
    want="has $((from * 128)) rows \(the padded vocabulary\), this layout $((to * 128)): the $([ "$from" -gt "$to" ] && echo 'extra padding rows are dropped' || echo 'new padding rows start from initialisation')"
    name="train checkpoint of TP $from resumed under TP $to (padded vocabulary $((from * 128)) -> $((to * 128)) rows)"
    if [ "$rc" -ne 0 ] || ! grep -qE "$want" <<<"$out" || [ "$(losses "$out" | wc -l)" -ne 4 ]; then
        fail "$name (exit status $rc)" "$(grep -E 'rows|error' <<<"$out" | head -n 3)"
    else
        pass "$name: says so and trains iterations 5..8"
    fi
done
# dropout (0.1, explicit; with --layout-invariant-dropout core/dropout.h keys its masks by global
# head, row and the sequence's place in the global batch): TP 2 with SP and DP 2 log the one-rank
# run's losses, which are not the dropout-free run's (so masks were drawn, the same ones on every
# layout)
DRM=("${MODEL[@]}" --make-vocab-size-divisible-by 64 --train-iters 4 --attention-dropout 0.1
    --hidden-dropout 0.1)
base=$(timeout 60 "$BIN" train "${DRM[@]}" 2>&1); rc0=$?
plain=$(timeout 60 "$BIN" train "${DRM[@]}" --attention-dropout 0 --hidden-dropout 0 2>&1)
for layout in "2:--tensor-model-parallel-size 2 --sequence-parallel" "2:--use-distributed-optimizer"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${DRM[@]}" "${extra[@]}" 2>&1); rc=$?
    name="train dropout 0.1 np=$np ${layout#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$out")"
    elif ! paste <(losses "$base") <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 4 }'; then
        fail "$name (losses differ from one rank's)" "one rank: $(losses "$base" | tr '\n' ' ')" "$np ranks: $(losses "$out" | tr '\n' ' ')"
    elif paste <(losses "$plain") <(losses "$out") | awk '($1 - $2) > 1e-3 * $1 || ($2 - $1) > 1e-3 * $1 { differ = 1 } END { exit differ }'; then
        fail "$name (the losses are the dropout-free run's: no dropout applied)" "$(losses "$out" | tr '\n' ' ')"
    else
        pass "$name: losses $(losses "$out" | tr '\n' ' ')match one rank's (without dropout: $(losses "$plain" | tr '\n' ' '))"
    fi
done
# packed documents (--reset-position-ids --reset-attention-mask, train/trainer_docs.h; the mock
# documents end with vocab-size - 1): TP 2 with SP, PP 2 (the second stage reads the ids for its
# masks) and PP 2 x V 2 log the one-rank run's losses, for learned positions and for RoPE, and
# those are not the flag-free run's
for pe in learned_absolute rope; do
    DOC=("${MODEL[@]}" --num-layers 4 --make-vocab-size-divisible-by 64 --train-iters 4
        --position-embedding-type "$pe" --reset-position-ids --reset-attention-mask)
    base=$(timeout 60 "$BIN" train "${DOC[@]}" 2>&1); rc0=$?
    plain=$(timeout 60 "$BIN" train "${DOC[@]/--reset-*/--seed=1234}" 2>&1)
    for layout in "2:--tensor-model-parallel-size 2 --sequence-parallel" \
        "2:--pipeline-model-parallel-size 2" \
        "2:--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"; do
        np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
        out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$BIN" train "${DOC[@]}" "${extra[@]}" 2>&1); rc=$?
        name="train packed documents $pe np=$np ${layout#*:}"
        if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
            fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$base")" "$(tail -n 5 <<<"$out")"
        elif ! paste <(losses "$base") <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 4 }'; then
            fail "$name (losses differ from one rank's)" "one rank: $(losses "$base" | tr '\n' ' ')" "$np ranks: $(losses "$out" | tr '\n' ' ')"
        elif paste <(losses "$plain") <(losses "$out") | awk '($1 - $2) > 1e-4 * $1 || ($2 - $1) > 1e-4 * $1 { differ = 1 } END { exit differ }'; then
            fail "$name (the losses are the flag-free run's: no documents)" "$(losses "$out" | tr '\n' ' ')"
        else
            pass "$name: losses $(losses "$out" | tr '\n' ' ')match one rank's (without the flags: $(losses "$plain" | tr '\n' ' '))"
        fi
    done
done
# --fp16's loss scaler (train/grad_scaler.h) with overflows in iterations 2..3 (MG_FAULT_OVERFLOW):
# TP 2 x DP 2 with the distributed optimizer and PP 2 skip the same steps as one rank and log its
# losses and loss scales (every rank decides from the same all-reduced gradient norm)
FP16=("${MODEL[@]}" --make-vocab-size-divisible-by 64 --train-iters 6 --fp16 --initial-loss-scale 65536 --loss-scale-window 2)
scal() { grep -oE '(loss scale|skipped iterations): +[0-9.E+-]+' <<<"$1" | awk '{print $NF}'; }
base=$(MG_FAULT_OVERFLOW=2:3 timeout 60 "$BIN" train "${FP16[@]}" 2>&1); rc0=$?
for layout in "4:--tensor-model-parallel-size 2 --use-distributed-optimizer" \
    "2:--pipeline-model-parallel-size 2"; do
    np=${layout%%:*}; read -r -a extra <<<"${layout#*:}"
    out=$(MG_FAULT_OVERFLOW=2:3 timeout 60 "${MPIRUN[@]}" -x MG_FAULT_OVERFLOW -np "$np" "$BIN" train "${FP16[@]}" "${extra[@]}" 2>&1); rc=$?
    name="train fp16 loss scaler np=$np ${layout#*:}"
    if [ "$rc0" -ne 0 ] || [ "$rc" -ne 0 ]; then
        fail "$name (exit status one rank $rc0, $np ranks $rc)" "$(tail -n 5 <<<"$base")" "$(tail -n 5 <<<"$out")"
    elif [ "$(scal "$base" | paste -sd' ')" != "$(scal "$out" | paste -sd' ')" ] ||
        [ "$(grep -oE 'skipped iterations: +[0-9]+' <<<"$out" | awk '{s += $NF} END {print s}')" != 2 ]; then
        fail "$name (scales or skips differ from one rank's)" "one rank: $(scal "$base" | paste -sd' ')" "$np ranks: $(scal "$out" | paste -sd' ')"
    elif ! paste <(losses "$base") <(losses "$out") | awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 6 }'; then
        fail "$name (losses differ from one rank's)" "one rank: $(losses "$base" | tr '\n' ' ')" "$np ranks: $(losses "$out" | tr '\n' ' ')"
    else
        pass "$name: 2 skipped steps, losses and scales match one rank's"
    fi
done
finish
