#!/usr/bin/env bash
# The runs that need several GPUs (issue "every parallel path proven on 2-4 H200s"), each part one
# call of this script on a lent multi-GPU machine, writing its logs and one summary per run to
# OUTDIR (default $OUT, else a new temporary directory):
#   bench/multigpu_runs.sh BUILD PART
# PART:
#   nccl    tests/dist/run_nccl.sh (`make test-nccl`: 2 GPUs, and 4 where there are, with the
#           exit-blocking scenario 20 times in a row there)
#   graphs  124M GPT-2 (MoE: 8 experts top-2 for EP) under DP 2 + distributed optimizer (also
#           with both overlaps), TP 2, PP 2 (micro-batch 4, 8 microbatches; 1F1B and interleaved
#           over 2 virtual stages) and EP 2, each eager and with the full-iteration
#           graph (--cuda-graph-impl full_iteration): tokens/s of the last log interval, and
#           whether the graph's lm losses equal eager's at every logged iteration (they should:
#           the same kernels in the same order)
#   ep      the 124M-shape MoE under EP 2 + distributed optimizer: worst-case buffers, a receive
#           budget of 1.25, the budget with ECHO, --moe-router-force-load-balancing, and a skewed
#           router (MG_TEST_EXPERT_BIAS sends every token to experts 0 and 1) without and with
#           ECHO: tokens/s, moe_ep_load_imbalance (after echo), moe_overflow_steps
#   epscale the 124M-shape MoE on one GPU and under EP 2 + distributed optimizer at the same
#           micro-batch per GPU (EP_MBS, default "8 16"): tokens/s, EP 2's share of two GPUs and
#           its ratio to Megatron-LM's 315.5K
#   tpov    350M GPT-2 (sequence 1024, micro-batch MBS, default 32; bf16, dropout off): one GPU,
#           then TP 2 with and without SP, each with every collective in order
#           (--no-tp-comm-bulk-wgrad), by default (the bulk wgrad overlap) and with
#           --tp-comm-overlap: tokens/s of the last interval, and the share of two GPUs
#   tpcopy  350M GPT-2 as tpov: one GPU, TP 2, and TP 2 + SP (also with --tp-comm-overlap) with
#           SP's gathers and reduce-scatters by the group's collectives
#           (MG_TP_EXCHANGE=collectives) and as copies into the peers' memory (copies), also
#           with NCCL's copy-engine gathers (MG_NCCL_COPY_ENGINE=1), and those two as a
#           full-iteration CUDA graph: tokens/s, the share of two GPUs, the first lm losses
#           (TPCOPY_RUNS: only the runs of these tags, e.g. "sp_copies ov_copies_ce"; tpov too)
#   fp8     the Llama-style 3B shape of bench/fp8_bench.sh (26 x 3072, SwiGLU 8192, GQA 24/8,
#           sequence 2048; micro-batch 2, global batch 16) under TP 2 + SP and under PP 2, each
#           in bf16 and in fp8 (hybrid, delayed, history 1024, max): tokens/s and the ratio; TP 2
#           + SP in fp8 with the norms' outputs gathered in bf16 (MG_TEST_FP8_SP_BF16=1) against
#           fp8 bytes, and with --tp-comm-overlap; and
#           the Mixtral-style MoE of bench/fp8_bench.sh under EP 2 (global batch 16) the same way
#   fp8sp   only fp8's TP 2 + SP runs: fp8 bytes against the bf16 gather, and with
#           --tp-comm-overlap
#   ce      NCCL's copy-engine collectives (MG_NCCL_COPY_ENGINE=1) against the kernels, in one
#           call: 350M TP 2 + SP (micro-batch MBS, default 32), also with --tp-comm-overlap (its
#           all-gathers beside the GEMMs no longer take their multiprocessors), 350M DP 2 with the distributed
#           optimizer and both overlaps (micro-batch 16), the 124M-shape MoE under EP 2 (the ep
#           part's run): tokens/s of each, the ratio, and whether the lm losses are equal at every
#           logged iteration (they must be: the copy engines move the same bytes)
#   dpaccum dpcopy's DP 2 by copies and one GPU at ACCUM (default 2) micro-batches a step
#   dpcopy  350M DP 2 with the distributed optimizer and both overlaps (micro-batch 16): the
#           buckets' exchanges by the group's collectives and by copies through peer-mapped
#           memory (MG_DP_EXCHANGE), against one GPU: tokens/s, the share of two GPUs, lm losses
#           (DP_EXCHANGES: only these of "collectives copies")
#   dpbf16  350M DP 2 with the distributed optimizer and both overlaps (micro-batch 16), the
#           gradients reduced in fp32 and with --grad-reduce-in-bf16, against one GPU: tokens/s of
#           the last interval, the share of two GPUs, the lm losses
#   four    (4 GPUs) 350M under TP 2 x PP 2, TP 2 x DP 2, DP 4 and PP 4 against four single
#           GPUs; the 124M-shape MoE under EP 4 (balanced, a receive budget of 1.25, a skewed
#           router without and with ECHO); the full-iteration graph under TP 2 x PP 2 and TP 2 x
#           DP 2 (and with 8 GPUs TP 2 x PP 2 x DP 2), eager against graph, lm losses equal
#   tp|dp|pp  bench/tp_bench.sh, dp_bench.sh, pp_bench.sh (against PyTorch / the bubble bound)
# BUILD/megatron and BUILD/dist_tests must be built with CUDA, NCCL and MPI. NCCL_NVLS_ENABLE=0
# always. NCCL_MAX_CTAS and NCCL_MIN_CTAS, when set, reach every rank (e.g. tpov with fewer
# blocks per collective). KPROF=1: every `megatron train` under the kernel profiler
# (BUILD/kernel_profile.so), its per-kernel table in the run's log. Summary lines:
# OUTDIR/multigpu_PART.txt.
set -u
BUILD=${1:-build}
PART=${2:-}
BIN=$BUILD/megatron
OUTDIR=${OUTDIR:-${OUT:-$(mktemp -d)}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HERE=$(cd "$(dirname "$0")" && pwd)
SUM=$OUTDIR/multigpu_$PART.txt
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }
[ -x "$BIN" ] || { echo "multigpu_runs: $BIN is not built" >&2; exit 1; }

GPT=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
    --max-position-embeddings 1024 --vocab-size 50257 --mock-data --bf16 --lr 3e-4
    --log-interval 10 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0 --device cuda)
MOE=(--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 3072 --moe-aux-loss-coeff 1e-2)
# run NAME NP FLAG...: `megatron train` under mpirun; the log in OUTDIR/NAME.log. With KPROF=1
# every rank runs under the kernel profiler (BUILD/kernel_profile.so: `make kernel-profile`),
# its table of the last 5 steps in the log (and with KPROF_TRACE=PREFIX each rank's last step,
# record by record, in PREFIX.PID.tsv).
run() {
    local name=$1 np=$2 prof=()
    shift 2
    [ -n "${KPROF:-}" ] && prof=(-x "CUDA_INJECTION64_PATH=$(cd "$BUILD" && pwd)/kernel_profile.so"
        -x KPROF_MARK=clip_coef_kernel -x KPROF_STEPS=5)
    # NCCL's limits on the blocks a collective takes (fewer leave more to the GEMMs it overlaps)
    local v
    for v in NCCL_MAX_CTAS NCCL_MIN_CTAS KPROF_TRACE; do [ -n "${!v:-}" ] && prof+=(-x "$v"); done
    timeout 300 mpirun --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x MG_TEST_EXPERT_BIAS \
        -x MG_NCCL_COPY_ENGINE -x MG_TEST_FP8_SP_BF16 -x MG_TP_EXCHANGE -x MG_MOE_EXCHANGE -x MG_DP_EXCHANGE -x MG_PEER_COPY_STREAMS \
        "${prof[@]}" "$BIN" train "$@" >"$OUTDIR/$name.log" 2>&1
}
field() { grep -oE "$2: [0-9.E+-]+" "$OUTDIR/$1.log" | tail -1 | awk '{print $NF}'; }
# ratio A B: B / A as "1.23x" ("-" without A)
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }'; }
losses() { grep -oE 'lm loss: [0-9.E+-]+' "$OUTDIR/$1.log" | awk '{print $3}' | paste -sd' '; }
# share A B: B as a share of two GPUs running at A each ("-" without A)
share() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0) printf "%.1f%%", 100 * b / (2 * a); else print "-" }'; }
# one_gpu NAME FLAG...: `megatron train` on one GPU (no mpirun), its log OUTDIR/NAME.log; says
# and sets $one to its tokens/s
one_gpu() {
    local name=$1
    shift
    timeout 300 "$BIN" train "$@" >"$OUTDIR/$name.log" 2>&1
    one=$(field "$name" 'tokens per second')
    say "350m one GPU: $one tok/s"
}

# 350M GPT-2 (sequence 1024, bf16, dropout off, 30 steps) for the tpov, ce and dpbf16 parts
M=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
    --max-position-embeddings 1024 --vocab-size 50304 --mock-data --bf16 --lr 6e-4
    --lr-warmup-iters 0 --lr-decay-style constant --weight-decay 0.1 --adam-beta2 0.95
    --log-interval 5 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0 --device cuda
    --train-iters 30)
# the DP runs' distributed optimizer with both overlaps (dpcopy, dpaccum, dpbf16)
DPO=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather)

# the Llama-style 3B shape of bench/fp8_bench.sh for the fp8 and fp8sp parts, and the fp8 recipe
L=(--num-layers 26 --hidden-size 3072 --ffn-hidden-size 8192 --num-attention-heads 24
    --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm
    --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 --mock-data --bf16
    --lr 3e-4 --log-interval 5 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0
    --device cuda --train-iters 20 --micro-batch-size 2 --global-batch-size 16)
F8=(--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max)
# fp8_sp: TP 2 + SP in fp8 with SP's gather of the norms' outputs as fp8 bytes (the run fp8_tp_fp8,
# made by the caller) against bf16, and beside the product of the rank's own rows
# (--tp-comm-overlap)
fp8_sp() {
    MG_TEST_FP8_SP_BF16=1 run fp8_tp_gather_bf16 2 "${L[@]}" --tensor-model-parallel-size 2 \
        --sequence-parallel "${F8[@]}"
    run fp8_tp_overlap 2 "${L[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
        --tp-comm-overlap "${F8[@]}"
    local a b c same=no
    a=$(field fp8_tp_gather_bf16 'tokens per second') b=$(field fp8_tp_fp8 'tokens per second')
    c=$(field fp8_tp_overlap 'tokens per second')
    [ -n "$(losses fp8_tp_fp8)" ] && [ "$(losses fp8_tp_fp8)" = "$(losses fp8_tp_gather_bf16)" ] && same=yes
    say "llama-3b tp fp8: inputs gathered in bf16 $a tok/s, as fp8 bytes $b ($(ratio "$a" "$b")," \
        "lm losses equal: $same), bytes beside the own rows' product $c ($(ratio "$a" "$c"))"
}

# tp_runs PREFIX TAG:EXCHANGE:CE:FLAGS...: 350M (micro-batch MBS, default 32) on one GPU (the run
# PREFIX_one), then under TP 2 with MG_TP_EXCHANGE=EXCHANGE, MG_NCCL_COPY_ENGINE=CE and FLAGS per
# entry (TPCOPY_RUNS: only the entries of these tags): tokens/s, the share of two GPUs, the ratio
# to Megatron-LM's 213.5K, the first lm losses
tp_runs() {
    local prefix=$1 v tag how ce flags name tps rc extra
    shift
    M+=(--micro-batch-size "${MBS:-32}" --global-batch-size "${MBS:-32}")
    one_gpu "${prefix}_one" "${M[@]}"
    for v in "$@"; do
        IFS=: read -r tag how ce flags <<<"$v"
        [ -z "${TPCOPY_RUNS:-}" ] || [[ " $TPCOPY_RUNS " == *" $tag "* ]] || continue
        name=${prefix}_$tag
        read -r -a extra <<<"$flags"
        MG_TP_EXCHANGE=$how MG_NCCL_COPY_ENGINE=$ce run "$name" 2 "${M[@]}" \
            --tensor-model-parallel-size 2 "${extra[@]}"; rc=$?
        tps=$(field "$name" 'tokens per second')
        say "350m TP 2 $flags, MG_TP_EXCHANGE=$how, MG_NCCL_COPY_ENGINE=$ce: rc $rc $tps tok/s," \
            "$(share "$one" "$tps") of two GPUs, $(ratio 213500 "$tps") Megatron-LM's 213.5K;" \
            "lm losses $(losses "$name" | cut -d' ' -f1-6)"
    done
}

case $PART in
nccl) # on 4 GPUs the exit-blocking scenario 20 times in a row (the issue's bar)
    reps=1
    [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 4 ] && reps=20
    EXIT_BLOCKING_REPEATS=$reps "$HERE/../tests/dist/run_nccl.sh" "$BUILD" 2>&1 |
        tee "$OUTDIR/nccl.log" | tail -n 3 | tee -a "$SUM"
    say "exit-blocking: $(grep -c '^PASS nccl scenario exit-blocking' "$OUTDIR/nccl.log") of $reps passed" ;;
graphs)
    for layout in "dp:--use-distributed-optimizer --micro-batch-size 8 --global-batch-size 16" \
        "dp_overlap:--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --micro-batch-size 8 --global-batch-size 16" \
        "tp:--tensor-model-parallel-size 2 --micro-batch-size 8 --global-batch-size 8" \
        "pp:--pipeline-model-parallel-size 2 --micro-batch-size 4 --global-batch-size 32" \
        "pp_interleaved:--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --micro-batch-size 4 --global-batch-size 32" \
        "ep:--expert-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 8 --global-batch-size 16 ${MOE[*]}"; do
        name=${layout%%:*}
        read -r -a extra <<<"${layout#*:}"
        run "${name}_eager" 2 "${GPT[@]}" --train-iters 30 "${extra[@]}"; rc1=$?
        run "${name}_graph" 2 "${GPT[@]}" --train-iters 30 "${extra[@]}" --cuda-graph-impl full_iteration; rc2=$?
        same=no
        [ -n "$(losses "${name}_eager")" ] && [ "$(losses "${name}_eager")" = "$(losses "${name}_graph")" ] && same=yes
        say "$name: eager rc $rc1 $(field "${name}_eager" 'tokens per second') tok/s; graph rc $rc2" \
            "$(field "${name}_graph" 'tokens per second') tok/s; lm losses equal: $same"
        for r in eager graph; do # a failed run's first error, on the summary line's heels
            grep -m1 'error:' "$OUTDIR/${name}_$r.log" | sed "s/^/  ${name}_$r: /" | tee -a "$SUM"
        done
    done ;;
ep)
    EP=("${GPT[@]}" "${MOE[@]}" --expert-model-parallel-size 2 --use-distributed-optimizer
        --micro-batch-size 8 --global-batch-size 16 --train-iters 40)
    SKEW=(--moe-router-enable-expert-bias --moe-router-bias-update-rate 0 --moe-router-score-function sigmoid)
    for r in "none:" "budget:--moe-expert-rank-capacity-factor 1.25" \
        "budget_echo:--moe-expert-rank-capacity-factor 1.25 --moe-enable-echo" \
        "force:--moe-router-force-load-balancing --moe-expert-rank-capacity-factor 1.25" \
        "skew:${SKEW[*]}" "skew_echo:${SKEW[*]} --moe-enable-echo"; do
        name=${r%%:*}
        read -r -a extra <<<"${r#*:}"
        export MG_TEST_EXPERT_BIAS=
        [[ $name == skew* ]] && export MG_TEST_EXPERT_BIAS=1,1,0,0,0,0,0,0
        run "ep_$name" 2 "${EP[@]}" "${extra[@]}"; rc=$?
        say "ep $name: rc $rc $(field "ep_$name" 'tokens per second') tok/s, imbalance" \
            "$(field "ep_$name" moe_ep_load_imbalance) after echo" \
            "$(field "ep_$name" moe_ep_load_imbalance_after_echo) overflow steps" \
            "$(field "ep_$name" moe_overflow_steps)"
    done ;;
epscale) # the same MoE on one GPU and under EP 2, per GPU the same micro-batch and microbatches
    for mbs in ${EP_MBS:-8 16}; do
        run "epscale_one_$mbs" 1 "${GPT[@]}" "${MOE[@]}" --micro-batch-size "$mbs" \
            --global-batch-size "$mbs" --train-iters 30
        run "epscale_ep2_$mbs" 2 "${GPT[@]}" "${MOE[@]}" --expert-model-parallel-size 2 \
            --use-distributed-optimizer --micro-batch-size "$mbs" \
            --global-batch-size $((2 * mbs)) --train-iters 30
        a=$(field "epscale_one_$mbs" 'tokens per second') b=$(field "epscale_ep2_$mbs" 'tokens per second')
        say "moe micro-batch $mbs: one GPU $a tok/s, EP 2 $b tok/s," \
            "$(share "$a" "$b") of two GPUs," \
            "$(ratio 315500 "$b") Megatron-LM's 315.5K"
    done ;;
tpov)
    tp_runs tpov "sp_inorder:copies:0:--sequence-parallel --no-tp-comm-bulk-wgrad" \
        "sp:copies:0:--sequence-parallel" "sp_overlap:copies:0:--sequence-parallel --tp-comm-overlap" \
        "nosp_inorder:copies:0:--no-tp-comm-bulk-wgrad" "nosp:copies:0:" \
        "nosp_overlap:copies:0:--tp-comm-overlap" ;;
tpcopy)
    tp_runs tpcopy "nosp:collectives:0:" "sp_coll:collectives:0:--sequence-parallel" \
        "sp_copies:copies:0:--sequence-parallel" \
        "ov_coll:collectives:0:--sequence-parallel --tp-comm-overlap" \
        "ov_copies:copies:0:--sequence-parallel --tp-comm-overlap" \
        "ov_copies_ce:copies:1:--sequence-parallel --tp-comm-overlap" \
        "ov_copies_ce_drop:copies:1:--sequence-parallel --tp-comm-overlap --attention-dropout 0.1 --hidden-dropout 0.1" \
        "ov_copies_graph:copies:0:--sequence-parallel --tp-comm-overlap --cuda-graph-impl full_iteration" \
        "ov_copies_ce_graph:copies:1:--sequence-parallel --tp-comm-overlap --cuda-graph-impl full_iteration" ;;
fp8)
    for lay in "tp:--tensor-model-parallel-size 2 --sequence-parallel" \
        "pp:--pipeline-model-parallel-size 2"; do
        name=${lay%%:*}
        read -r -a extra <<<"${lay#*:}"
        run "fp8_${name}_bf16" 2 "${L[@]}" "${extra[@]}"; rc1=$?
        run "fp8_${name}_fp8" 2 "${L[@]}" "${extra[@]}" "${F8[@]}"; rc2=$?
        a=$(field "fp8_${name}_bf16" 'tokens per second') b=$(field "fp8_${name}_fp8" 'tokens per second')
        say "llama-3b $name: bf16 rc $rc1 $a tok/s, fp8 rc $rc2 $b tok/s," \
            "$(ratio "$a" "$b")"
    done
    fp8_sp
    # the Mixtral-style MoE of bench/fp8_bench.sh under EP 2 (its routed experts in fp8 too)
    M=(--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --group-query-attention
        --num-query-groups 8 --swiglu --normalization RMSNorm --position-embedding-type rope
        --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 2048
        --max-position-embeddings 2048 --vocab-size 32000 --num-experts 8 --moe-router-topk 2
        --ffn-hidden-size 5632 --moe-router-load-balancing-type aux_loss --mock-data --bf16
        --lr 3e-4 --log-interval 5 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0
        --device cuda --train-iters 20 --micro-batch-size 2 --global-batch-size 16
        --expert-model-parallel-size 2 --use-distributed-optimizer)
    run fp8_ep_bf16 2 "${M[@]}"; rc1=$?
    run fp8_ep_fp8 2 "${M[@]}" "${F8[@]}"; rc2=$?
    a=$(field fp8_ep_bf16 'tokens per second') b=$(field fp8_ep_fp8 'tokens per second')
    say "moe ep 2: bf16 rc $rc1 $a tok/s, fp8 rc $rc2 $b tok/s," \
        "$(ratio "$a" "$b")" ;;
fp8sp)
    run fp8_tp_fp8 2 "${L[@]}" --tensor-model-parallel-size 2 --sequence-parallel "${F8[@]}"
    fp8_sp ;;
ce)
    for r in "tp_sp:${M[*]} --micro-batch-size ${MBS:-32} --global-batch-size ${MBS:-32} --tensor-model-parallel-size 2 --sequence-parallel" \
        "tp_sp_overlap:${M[*]} --micro-batch-size ${MBS:-32} --global-batch-size ${MBS:-32} --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap" \
        "dp:${M[*]} --micro-batch-size 16 --global-batch-size 32 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" \
        "ep:${GPT[*]} ${MOE[*]} --expert-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 8 --global-batch-size 16 --train-iters 40"; do
        name=ce_${r%%:*}
        read -r -a flags <<<"${r#*:}"
        export MG_NCCL_COPY_ENGINE=0
        run "${name}_kernels" 2 "${flags[@]}"; rc1=$?
        export MG_NCCL_COPY_ENGINE=1
        run "${name}_ce" 2 "${flags[@]}"; rc2=$?
        export MG_NCCL_COPY_ENGINE=0
        a=$(field "${name}_kernels" 'tokens per second') b=$(field "${name}_ce" 'tokens per second')
        same=no
        [ -n "$(losses "${name}_kernels")" ] && [ "$(losses "${name}_kernels")" = "$(losses "${name}_ce")" ] && same=yes
        say "$name: kernels rc $rc1 $a tok/s, copy engines rc $rc2 $b tok/s, $(ratio "$a" "$b");" \
            "lm losses equal: $same; $(grep -c 'copy-engine collectives' "$OUTDIR/${name}_ce.log") start-up line(s)"
    done ;;
dpcopy)
    D=(--micro-batch-size 16 --global-batch-size 32 "${DPO[@]}")
    run dp_one 1 "${M[@]}" --micro-batch-size 16 --global-batch-size 16
    for r in ${DP_EXCHANGES:-collectives copies}; do
        MG_DP_EXCHANGE=$r run "dp2_$r" 2 "${M[@]}" "${D[@]}"
    done
    a=$(field dp_one 'tokens per second')
    for r in ${DP_EXCHANGES:-collectives copies}; do
        b=$(field "dp2_$r" 'tokens per second')
        say "DP 2, MG_DP_EXCHANGE=$r: $b tok/s, $(share "$a" "$b") of two GPUs ($a alone);" \
            "lm losses $(losses "dp2_$r" | cut -d' ' -f1-6);" \
            "$(grep -c 'data-parallel exchanges (buffer 0): reduce-scatters and gathers by copies' "$OUTDIR/dp2_$r.log") copies line(s)"
    done ;;
dpaccum) # as dpcopy (by copies), at ACCUM micro-batches (default 2) of 16 a rank per step
    A=${ACCUM:-2}
    run dpa_one 1 "${M[@]}" --micro-batch-size 16 --global-batch-size $((16 * A))
    run dpa_two 2 "${M[@]}" --micro-batch-size 16 --global-batch-size $((32 * A)) "${DPO[@]}"
    a=$(field dpa_one 'tokens per second') b=$(field dpa_two 'tokens per second')
    say "DP 2 at $A micro-batches a step: $b tok/s, $(share "$a" "$b") of two GPUs ($a alone);" \
        "lm losses $(losses dpa_two | cut -d' ' -f1-6)" ;;
dpbf16)
    D=(--micro-batch-size 16 --global-batch-size 32 "${DPO[@]}")
    run dp_one 1 "${M[@]}" --micro-batch-size 16 --global-batch-size 16
    run dp2_fp32 2 "${M[@]}" "${D[@]}"
    run dp2_bf16 2 "${M[@]}" "${D[@]}" --grad-reduce-in-bf16
    a=$(field dp_one 'tokens per second')
    for r in fp32 bf16; do
        b=$(field "dp2_$r" 'tokens per second')
        say "DP 2, gradients reduced in $r: $b tok/s, $(share "$a" "$b") of two GPUs ($a alone); lm losses $(losses "dp2_$r")"
    done ;;
four)
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ "$n" -ge 4 ] || { say "four: needs 4 GPUs, nvidia-smi lists $n"; exit 1; }
    # 350M: the 4-GPU layouts of two dimensions against 4 single GPUs
    run four_one 1 "${M[@]}" --micro-batch-size 16 --global-batch-size 16
    one=$(field four_one 'tokens per second')
    say "350m one GPU: $one tok/s"
    for v in "tp2pp2:--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2 --micro-batch-size 8 --global-batch-size 64"         "tp2dp2:--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --micro-batch-size 16 --global-batch-size 32"         "dp4:--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --micro-batch-size 16 --global-batch-size 64"         "pp4:--pipeline-model-parallel-size 4 --micro-batch-size 4 --global-batch-size 128"; do
        name=four_${v%%:*}
        read -r -a extra <<<"${v#*:}"
        run "$name" 4 "${M[@]}" "${extra[@]}"; rc=$?
        tps=$(field "$name" 'tokens per second')
        say "350m ${v%%:*}: rc $rc $tps tok/s, $(awk -v a="${tps:-0}" -v b="${one:-0}" \
            'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / (4 * b); else print "-" }') of four GPUs"
    done
    # the 124M-shape MoE under EP 4: balanced, a receive budget, and a skewed router with and
    # without ECHO (imbalance and tokens/s)
    EP=("${GPT[@]}" "${MOE[@]}" --expert-model-parallel-size 4 --use-distributed-optimizer
        --micro-batch-size 8 --global-batch-size 32 --train-iters 40)
    SKEW=(--moe-router-enable-expert-bias --moe-router-bias-update-rate 0 --moe-router-score-function sigmoid)
    for r in "none:" "budget:--moe-expert-rank-capacity-factor 1.25" \
        "skew:${SKEW[*]}" "skew_echo:${SKEW[*]} --moe-enable-echo"; do
        name=ep4_${r%%:*}
        read -r -a extra <<<"${r#*:}"
        export MG_TEST_EXPERT_BIAS=
        [[ $name == *skew* ]] && export MG_TEST_EXPERT_BIAS=1,1,0,0,0,0,0,0
        run "$name" 4 "${EP[@]}" "${extra[@]}"; rc=$?
        say "ep 4 ${r%%:*}: rc $rc $(field "$name" 'tokens per second') tok/s, imbalance" \
            "$(field "$name" moe_ep_load_imbalance) after echo" \
            "$(field "$name" moe_ep_load_imbalance_after_echo)"
    done
    export MG_TEST_EXPERT_BIAS=
    # the full-iteration graph with NCCL inside on 4 (and, with 8 GPUs, a 3-D layout): eager and
    # graph, the lm losses equal at every logged iteration
    layouts=("tp2pp2:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 4 --global-batch-size 32"
        "tp2dp2:--tensor-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 8 --global-batch-size 16")
    [ "$n" -ge 8 ] && layouts+=("tp2pp2dp2:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 4 --global-batch-size 64")
    for layout in "${layouts[@]}"; do
        name=graph_${layout%%:*}
        read -r -a extra <<<"${layout#*:}"
        np=4
        [[ $name == *dp2 && $name == *pp2* ]] && np=8
        run "${name}_eager" "$np" "${GPT[@]}" --train-iters 30 "${extra[@]}"; rc1=$?
        run "${name}_graph" "$np" "${GPT[@]}" --train-iters 30 "${extra[@]}" --cuda-graph-impl full_iteration; rc2=$?
        same=no
        [ -n "$(losses "${name}_eager")" ] && [ "$(losses "${name}_eager")" = "$(losses "${name}_graph")" ] && same=yes
        say "${layout%%:*} on $np: eager rc $rc1 $(field "${name}_eager" 'tokens per second') tok/s;" \
            "graph rc $rc2 $(field "${name}_graph" 'tokens per second') tok/s; lm losses equal: $same"
    done ;;
tp | dp | pp) OUTDIR=$OUTDIR "$HERE/${PART}_bench.sh" "$BUILD" 2>&1 | tee "$OUTDIR/$PART.log" | tail -n 12 | tee -a "$SUM" ;;
*)
    echo "usage: bench/multigpu_runs.sh BUILD nccl|graphs|ep|epscale|tpov|fp8|fp8sp|ce|dpbf16|four|tp|dp|pp" >&2
    exit 2 ;;
esac
