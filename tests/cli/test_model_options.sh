#!/usr/bin/env bash
# Megatron's --rotary-percent (partial RoPE) and --apply-layernorm-1p (zero-centred norm weights)
# end to end on the CPU:
#   - a Llama-style model trains with --rotary-percent 0.5 (its losses differ from whole-head
#     RoPE's), and with both options; a GPT-2-style one (LayerNorm) with --apply-layernorm-1p;
#   - bad --rotary-percent values (0, 1.5, one giving an odd channel count) stop with one line
#     naming the flag and a value that works, exit status 2, and write nothing;
#   - the checkpoint records both options: `train --load` without model flags takes them (the
#     same losses as with them), and a checkpoint of the other kind of norm weights is refused;
#   - under mpirun, pipeline (2 stages) and tensor parallelism (2 ranks, sequence parallel) log
#     the one-rank run's losses (tests/dist/test_train_tp.c compares every parameter too);
#   - `convert --saver hf` of a 1p model writes Hugging Face's weights 1 + w: read back by
#     `convert --loader hf` (a plain model) the logits are the 1p checkpoint's, bit for bit, and
#     with python's transformers, transformers' logits are megatron generate's; a partial-RoPE
#     Llama has no Hugging Face class and is refused with one line.
source "$(dirname "$0")/lib.sh"

BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
    --max-position-embeddings 32 --vocab-size 256 --make-vocab-size-divisible-by 64
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
    --lr-warmup-iters 2 --mock-data --seed 7 --log-interval 1 --eval-iters 0 --num-threads 2
    --device cpu)
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
    --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
# the "lm loss" values of a log, space-separated
losses() { grep -oE 'lm loss: [0-9.E+-]+' "$1" | awk '{printf "%s ", $3}'; }
# first and last loss: the last below `frac` of the first
falls() { awk -v f="$2" '{ if ($NF < f * $1) ok = 1 } END { exit !ok }' <<<"$1"; }

# 1. training runs (40 iterations of 4 sequences)
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --train-iters 40 >"$TMP/full.log" 2>&1
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --train-iters 40 --rotary-percent 0.5 >"$TMP/half.log" 2>&1
half=$(losses "$TMP/half.log") full=$(losses "$TMP/full.log")
if [ "$(wc -w <<<"$half")" -eq 40 ] && falls "$half" 0.7 && [ "$half" != "$full" ]; then
    pass train_rotary_percent_half
else fail train_rotary_percent_half "rotary 0.5: $half" "rotary 1.0: $full" "$(tail -n 2 "$TMP/half.log")"; fi

"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --train-iters 40 --rotary-percent 0.5 \
    --apply-layernorm-1p --save "$TMP/onep" --save-interval 20 >"$TMP/onep.log" 2>&1
onep=$(losses "$TMP/onep.log")
state=$(cat "$TMP"/onep/iter_0000040/state.json 2>/dev/null)
if [ "$(wc -w <<<"$onep")" -eq 40 ] && falls "$onep" 0.7 &&
    grep -q '"apply_layernorm_1p": true' <<<"$state" && grep -q '"rotary_percent": 0.5' <<<"$state"; then
    pass train_llama_layernorm_1p_saves_its_options
else fail train_llama_layernorm_1p_saves_its_options "losses: $onep" "$(tail -n 2 "$TMP/onep.log")"; fi

"$MEGATRON" train "${BASE[@]}" --train-iters 40 --apply-layernorm-1p >"$TMP/gpt2_1p.log" 2>&1
g1p=$(losses "$TMP/gpt2_1p.log")
if [ "$(wc -w <<<"$g1p")" -eq 40 ] && falls "$g1p" 0.7; then pass train_gpt2_layernorm_1p
else fail train_gpt2_layernorm_1p "losses: $g1p" "$(tail -n 2 "$TMP/gpt2_1p.log")"; fi

# 2. bad --rotary-percent: one line, exit 2, nothing saved
expect_error rotary_percent_zero 2 '^megatron: error: --rotary-percent must be in \(0, 1\] \(the fraction of each head RoPE rotates\), got 0; use 1.0 to rotate whole heads$' \
    train "${BASE[@]}" "${LLAMA[@]}" --train-iters 1 --rotary-percent 0 --save "$TMP/bad"
expect_error rotary_percent_above_one 2 '^megatron: error: --rotary-percent must be in \(0, 1\] .*got 1.5' \
    train "${BASE[@]}" "${LLAMA[@]}" --train-iters 1 --rotary-percent 1.5 --save "$TMP/bad"
expect_error rotary_percent_odd_channels 2 '^megatron: error: --rotary-percent 0.5625 rotates int\(16 \* 0.5625\) = 9 of the 16 channels .* use e.g. --rotary-percent 0.5 \(8 channels\)$' \
    train "${BASE[@]}" "${LLAMA[@]}" --train-iters 1 --rotary-percent 0.5625 --save "$TMP/bad"
expect_error rotary_percent_odd_channels_suggests 2 'int\(16 \* 0.2\) = 3 of the 16 channels of a head \(--kv-channels\); RoPE rotates channel pairs, so the count must be even and positive: use e.g. --rotary-percent 0.13 \(2 channels\)$' \
    train "${BASE[@]}" "${LLAMA[@]}" --train-iters 1 --rotary-percent 0.2 --save "$TMP/bad"
expect_error rotary_percent_not_a_number 2 "--rotary-percent expects a number, got 'half'" \
    train "${BASE[@]}" "${LLAMA[@]}" --train-iters 1 --rotary-percent half
if [ ! -e "$TMP/bad" ]; then pass rotary_percent_errors_write_nothing
else fail rotary_percent_errors_write_nothing "$(ls -R "$TMP/bad")"; fi

# 2b. a head size no CUDA attention takes (above 256): one line before any GPU work, exit 2 (a
#     build without the CUDA backend refuses --device cuda itself, also in one line)
expect_error kv_channels_over_cuda_limit 2 '^megatron: error: (--kv-channels 288: attention on CUDA takes head sizes 1 to 256; use more --num-attention-heads for this --hidden-size, or --device cpu|.*no CUDA backend.*)$' \
    train "${BASE[@]}" --train-iters 4 --kv-channels 288 --device cuda

# 3. the checkpoint's options: a resume without model flags takes them (a run of 24 iterations
#    stopped at 20 by --exit-interval, resumed to 24)
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --rotary-percent 0.5 --apply-layernorm-1p \
    --train-iters 24 --exit-interval 20 --save "$TMP/res" >"$TMP/res.log" 2>&1
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --rotary-percent 0.5 --apply-layernorm-1p \
    --train-iters 24 --load "$TMP/res" >"$TMP/with.log" 2>&1
"$MEGATRON" train "${BASE[@]}" --train-iters 24 --load "$TMP/res" >"$TMP/without.log" 2>&1
if [ "$(losses "$TMP/with.log" | wc -w)" -eq 4 ] && [ "$(losses "$TMP/with.log")" = "$(losses "$TMP/without.log")" ] &&
    grep -q 'model flags from .*--rotary-percent.*--apply-layernorm-1p' "$TMP/without.log"; then
    pass train_load_takes_rotary_percent_and_layernorm_1p
else fail train_load_takes_rotary_percent_and_layernorm_1p "with: $(losses "$TMP/with.log")" \
    "without: $(losses "$TMP/without.log")" "$(grep 'model flags' "$TMP/without.log")"; fi
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --train-iters 3 --save "$TMP/plain" >"$TMP/plain.log" 2>&1
expect_error train_load_refuses_other_norm_weights 2 'was saved with --apply-layernorm-1p 0 but this run has 1' \
    train "${BASE[@]}" --train-iters 3 --load "$TMP/plain" --apply-layernorm-1p

# 4. layouts under mpirun: the one-rank run's losses (the log prints 7 digits: 1e-5 relative);
#    Megatron's default dropout 0.1 with masks that do not depend on the layout
DIST=$(dirname "$MEGATRON")/dist_tests
same_losses() { paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) |
    awk 'NF != 2 || ($1 - $2) > 1e-5 * $1 || ($2 - $1) > 1e-5 * $1 { bad = 1 } END { exit bad || NR != 6 }'; }
if ! command -v mpirun >/dev/null || ! [ -x "$DIST" ] || ! "$DIST" --features 2>&1 | grep -q mpi=yes; then
    echo "SKIP layouts_match_one_rank (no MPI build or mpirun)"
else
    OPTS=(--rotary-percent 0.5 --apply-layernorm-1p --num-threads 1 --train-iters 6
        --layout-invariant-dropout)
    "$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" "${OPTS[@]}" >"$TMP/one.log" 2>&1
    for layout in "--pipeline-model-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel"; do
        name=${layout#--}; name=layout_${name%%-*}
        # shellcheck disable=SC2086
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
            OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 mpirun --oversubscribe -np 2 \
            "$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" "${OPTS[@]}" $layout >"$TMP/two.log" 2>&1
        if same_losses "$(losses "$TMP/one.log")" "$(losses "$TMP/two.log")"; then pass "${name}_matches_one_rank"
        else fail "${name}_matches_one_rank" "one rank: $(losses "$TMP/one.log")" "2 ranks: $(losses "$TMP/two.log")" "$(tail -n 2 "$TMP/two.log")"; fi
    done
fi

# 5. Hugging Face export of zero-centred norms, and a partial RoPE that has no HF class
SEQ="3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4"
"$MEGATRON" train "${BASE[@]}" "${LLAMA[@]}" --apply-layernorm-1p --train-iters 20 --save "$TMP/l1p" >"$TMP/l1p.log" 2>&1
if "$MEGATRON" convert --loader megatron --saver hf --load-dir "$TMP/l1p" --save-dir "$TMP/hf_l1p" 2>"$TMP/conv.err" &&
    "$MEGATRON" convert --loader hf --saver megatron --load-dir "$TMP/hf_l1p" --save-dir "$TMP/back" 2>>"$TMP/conv.err" &&
    "$MEGATRON" generate --load "$TMP/l1p" --prompt-ids "$SEQ" --max-new-tokens 0 --logits-file "$TMP/l1p.npy" >/dev/null 2>&1 &&
    "$MEGATRON" generate --load "$TMP/back" --prompt-ids "$SEQ" --max-new-tokens 0 --logits-file "$TMP/back.npy" >/dev/null 2>&1 &&
    cmp -s "$TMP/l1p.npy" "$TMP/back.npy" && grep -q '"apply_layernorm_1p": false' "$TMP"/back/iter_0000000/state.json; then
    pass convert_layernorm_1p_exports_one_plus_w
else fail convert_layernorm_1p_exports_one_plus_w "$(cat "$TMP/conv.err")" "$(ls -l "$TMP"/*.npy 2>&1)"; fi
checked=$(python3 tools/reference/hf_export_check.py "5 6 7 8" 4 "$SEQ" --model l1p "$TMP/hf_l1p" "$TMP/l1p.npy" "" 2>"$TMP/py.err")
py_rc=$?
err=$(sed -n 's/.*"logits_err": \([^,}]*\).*/\1/p' <<<"$checked")
if [ "$py_rc" -eq 3 ]; then echo "SKIP convert_layernorm_1p_transformers_logits (python3 lacks torch or transformers)"
elif [ -n "$err" ] && awk -v e="$err" 'BEGIN { exit !(e <= 1e-5) }'; then pass convert_layernorm_1p_transformers_logits
else fail convert_layernorm_1p_transformers_logits "max |megatron - transformers| / max |logit| = '$err'" "$(tail -n 3 "$TMP/py.err")"; fi
expect_error convert_refuses_partial_rotary_llama 1 "no Hugging Face equivalent \(LlamaForCausalLM\): Llama's RoPE rotates whole heads; this model was trained with --rotary-percent below 1" \
    convert --loader megatron --saver hf --load-dir "$TMP/onep" --save-dir "$TMP/hf_half"
if ! ls -d "$TMP"/hf_half* >/dev/null 2>&1; then pass convert_partial_rotary_writes_nothing
else fail convert_partial_rotary_writes_nothing "$(ls -d "$TMP"/hf_half*)"; fi
finish
