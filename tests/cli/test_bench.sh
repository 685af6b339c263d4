#!/usr/bin/env bash
# `megatron bench` on a tiny CPU model: --json prints exactly one JSON line whose throughput,
# FLOP, peak and memory fields are positive, the FLOPs per token follow 6N + 12*L*H*T, the table
# is printed without --json, and bad bench flags are one-line usage errors.
source "$(dirname "$0")/lib.sh"

TINY=(--device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --vocab-size 256 --make-vocab-size-divisible-by 64 --micro-batch-size 2 --num-threads 2
      --iters 2 --warmup 1 --peak-size 128)

# field NAME JSON: the number after "NAME": (empty when absent)
field() { grep -o "\"$1\": *[-0-9.eE+]*" <<<"$2" | head -n 1 | sed 's/.*: *//'; }

out=$("$MEGATRON" bench "${TINY[@]}" --json 2>"$TMP/bench.err"); rc=$?
if [ "$rc" -ne 0 ]; then
    fail bench_json_runs "exit code $rc" "$(tail -n 3 "$TMP/bench.err")"
elif [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [ "${out:0:1}" != "{" ] || [ "${out: -1}" != "}" ]; then
    fail bench_json_one_line "expected exactly one JSON object on one line on stdout" "$out"
else
    pass bench_json_one_line
    ok=1
    for f in params params_flops flops_per_token ms_per_step ms_per_step_median tokens_per_s \
        tflops megatron_tflops peak_tflops mfu mem_peak_gib mem_alloc_gib loss_first loss_last; do
        v=$(field "$f" "$out")
        if [ -z "$v" ] || ! awk -v x="$v" 'BEGIN { exit !(x > 0) }'; then
            ok=0; fail bench_json_fields_positive "field $f is '$v'" "$out"; break
        fi
    done
    [ $ok = 1 ] && pass bench_json_fields_positive
    for f in '"impl": "megatron.c"' '"device": "cpu"' '"model": "custom"' '"micro_batch_size": 2' \
        '"seq_length": 32' '"iters": 2' '"warmup": 1' '"peak_n": 128'; do
        grep -qF -- "$f" <<<"$out" || { ok=0; fail bench_json_settings "missing $f" "$out"; break; }
    done
    [ $ok = 1 ] && pass bench_json_settings
    # 6N + 12*L*H*T with N = parameters without the position table, L = 2, H = 64, T = 32
    n=$(field params "$out") nf=$(field params_flops "$out") fpt=$(field flops_per_token "$out")
    if [ "$((n - nf))" -eq $((32 * 64)) ] && [ "$fpt" = "$((6 * nf + 12 * 2 * 64 * 32))" ]; then
        pass bench_flops_formula
    else fail bench_flops_formula "params $n, params_flops $nf, flops_per_token $fpt"; fi
    # tokens/s = B*T / mean step time; TFLOP/s = FLOPs/token * tokens/s; MFU = TFLOP/s / peak
    if awk -v tps="$(field tokens_per_s "$out")" -v ms="$(field ms_per_step "$out")" \
        -v tf="$(field tflops "$out")" -v pk="$(field peak_tflops "$out")" \
        -v mfu="$(field mfu "$out")" -v fpt="$fpt" 'function near(a, b) { d = a - b; if (d < 0) d = -d; return d <= 0.02 * b + 1e-4 }
        BEGIN { exit !(near(tps, 64 / (ms / 1000)) && near(tf, fpt * tps / 1e12) && near(mfu, tf / pk)) }'; then
        pass bench_numbers_consistent
    else fail bench_numbers_consistent "$out"; fi
fi

# --global-batch-size 6 (micro-batch 2): a step accumulates 3 micro-batches, 6 x 32 tokens
out=$("$MEGATRON" bench "${TINY[@]}" --global-batch-size 6 --json 2>"$TMP/bench.err"); rc=$?
if [ "$rc" -ne 0 ]; then fail bench_global_batch "exit code $rc" "$(tail -n 3 "$TMP/bench.err")"
elif awk -v tps="$(field tokens_per_s "$out")" -v ms="$(field ms_per_step "$out")" \
    'BEGIN { d = tps - 192 / (ms / 1000); if (d < 0) d = -d; exit !(d <= 0.02 * tps) }' &&
    grep -qF '"global_batch_size": 6' <<<"$out"; then
    pass bench_global_batch
else fail bench_global_batch "tokens/s not 192 tokens per step" "$out"; fi

out=$("$MEGATRON" bench "${TINY[@]}" 2>&1); rc=$?
if [ "$rc" -ne 0 ]; then fail bench_table "exit code $rc" "$out"
elif ! grep -q '^  MFU  ' <<<"$out" || ! grep -q '^  tokens/s  ' <<<"$out"; then
    fail bench_table "no MFU / tokens/s lines in the table" "$out"
else pass bench_table; fi

# An MoE model's FLOPs count the experts a token uses (k of E), as Megatron's MoE term does:
# params_flops = params - position embeddings - (E - k) experts' weights of each MoE layer.
out=$("$MEGATRON" bench --json --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 32 --vocab-size 256 --micro-batch-size 2 --num-experts 4 --moe-router-topk 2 \
    --moe-ffn-hidden-size 128 --iters 1 --warmup 0 --peak-size 256 2>/dev/null | tail -n 1)
n=$(field params "$out"); nf=$(field params_flops "$out")
expert=$((2 * 64 * 128 + 128 + 64)) # fc1, fc2 and their biases of one expert
if [ -n "$n" ] && [ "$nf" -eq $((n - 32 * 64 - 2 * (4 - 2) * expert)) ]; then
    pass "bench_moe_active_params: $nf of $n parameters per token"
else fail bench_moe_active_params "params $n, params_flops $nf, want $((n - 32 * 64 - 2 * (4 - 2) * expert))" "$out"; fi

expect_error bench_unknown_model 2 "--model gpt3: unknown" bench --model gpt3
expect_error bench_bad_iters 2 "--iters expects an integer >= 1" bench --iters 0
expect_error bench_missing_value 2 "--warmup expects a value; write --warmup N" bench --warmup
expect_error bench_bad_megatron_flag 2 "no-such-flag" bench --no-such-flag
expect_error bench_tensor_parallel 2 "--tensor-model-parallel-size 2 needs 2 ranks per model replica, this run has 1; train it with mpirun -np 2" \
    bench --device cpu --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 512 \
    --seq-length 64 --micro-batch-size 2 --iters 1 --warmup 0 --tensor-model-parallel-size 2

finish
