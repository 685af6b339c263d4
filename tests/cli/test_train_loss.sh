#!/usr/bin/env bash
# `megatron train`'s loss and logging options of Megatron's recipes, as a user sees them:
#   - --log-num-zeros-in-grad and --log-params-norm print Megatron's ' num zeros: N.0 |' and
#     ' params norm: X |' after the grad norm; the last logged params norm (the metrics file's
#     full precision) is the L2 norm of the weights the checkpoint saved at that iteration,
#     computed here in Python from the safetensors file;
#   - after training, Megatron's two lines 'validation loss at iteration N on validation set' and
#     '... on test set' (the mock data's test split), none for the test without --eval-iters;
#   - --eod-mask-loss says which id it masks and changes the loss; --calculate-per-token-loss
#     without a mask logs the default run's losses;
#   - the flags are in `train --help`.
source "$(dirname "$0")/lib.sh"

RUN=(train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 96
     --mock-data --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --log-interval 1
     --device cpu --num-threads 1 --train-iters 3 --untie-embeddings-and-output-weights)
losses() { grep -oE 'lm loss: [0-9.E+-]+' <<<"$1" | awk '{print $3}'; }

out=$("$MEGATRON" "${RUN[@]}" --eval-iters 1 --log-num-zeros-in-grad --log-params-norm \
    --save "$TMP/ck" --metrics-file "$TMP/m.jsonl" 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail train_loss_log_stats "exit $rc" "$(tail -n 3 <<<"$out")"
elif [ "$(grep -cE '\| grad norm: [0-9.]+ \| num zeros: [0-9]+\.0 \| params norm: [0-9]+\.[0-9]{3} \| number of skipped' <<<"$out")" -ne 3 ]; then
    fail train_loss_log_stats "want 3 lines with '| grad norm: .. | num zeros: N.0 | params norm: X.XXX | number of skipped'" "$(grep 'iteration ' <<<"$out")"
else pass train_loss_log_stats; fi

# the params norm of iteration 3 against the saved weights (every tensor but the optimizer's)
want=$(python3 - "$TMP/ck/iter_0000003/rank-00000.safetensors" <<'EOF' 2>&1
import json, math, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
sq = 0.0
for name, t in header.items():
    if name == '__metadata__' or name.startswith('optimizer.'):
        continue
    assert t['dtype'] == 'F32', t['dtype']
    a, b = t['data_offsets']
    sq += sum(x * x for x in struct.unpack('<%df' % ((b - a) // 4), data[a:b]))
print('%.12g' % math.sqrt(sq))
EOF
)
got=$(tail -n 1 "$TMP/m.jsonl" | grep -oE '"params_norm": [0-9.eE+-]+' | awk '{print $2}')
if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-6 * b) }'; then
    pass "train_loss_params_norm_is_the_checkpoints_norm: $got"
else fail train_loss_params_norm_is_the_checkpoints_norm "logged '$got', from the checkpoint '$want'"; fi

if grep -q '^ validation loss at iteration 3 on validation set | lm loss value: .* | lm loss PPL: ' <<<"$out" &&
    grep -q '^ validation loss at iteration 3 on test set | lm loss value: .* | lm loss PPL: ' <<<"$out" &&
    [ "$(grep -n 'on validation set' <<<"$out" | cut -d: -f1)" -lt "$(grep -n 'on test set' <<<"$out" | cut -d: -f1)" ] &&
    [ "$(grep -n 'successfully saved checkpoint from iteration       3' <<<"$out" | cut -d: -f1)" -lt "$(grep -n 'on validation set' <<<"$out" | cut -d: -f1)" ]; then
    pass train_loss_end_of_training_validation_and_test
else fail train_loss_end_of_training_validation_and_test "$(grep -E 'validation loss|saved' <<<"$out")"; fi

plain=$("$MEGATRON" "${RUN[@]}" --eval-iters 0 2>&1)
if grep -q 'validation loss' <<<"$plain" || grep -qE 'num zeros|params norm' <<<"$plain"; then
    fail train_loss_nothing_without_the_flags "$(grep -E 'validation loss|iteration ' <<<"$plain")"
else pass train_loss_nothing_without_the_flags; fi

per_token=$("$MEGATRON" "${RUN[@]}" --eval-iters 0 --calculate-per-token-loss 2>&1)
masked=$("$MEGATRON" "${RUN[@]}" --eval-iters 0 --eod-mask-loss 2>&1)
if [ "$(losses "$per_token")" != "$(losses "$plain")" ] || [ "$(losses "$plain" | wc -l)" -ne 3 ]; then
    fail train_loss_per_token_without_mask_is_the_default "$(losses "$plain" | tr '\n' ' ')" "$(losses "$per_token" | tr '\n' ' ')"
elif ! grep -q '> --eod-mask-loss: no loss where the input is token 95 (end of document)' <<<"$masked" ||
    [ "$(losses "$masked" | head -n 1)" = "$(losses "$plain" | head -n 1)" ]; then
    fail train_loss_eod_mask_changes_the_loss "$(grep eod <<<"$masked")" "$(losses "$masked" | tr '\n' ' ')"
else pass "train_loss_eod_mask_and_per_token: masked $(losses "$masked" | head -n 1), unmasked $(losses "$plain" | head -n 1)"; fi

help=$("$MEGATRON" train --help 2>&1)
n=0
for f in --calculate-per-token-loss --eod-mask-loss --log-params-norm --log-num-zeros-in-grad; do
    grep -q -- "$f" <<<"$help" && n=$((n + 1))
done
if [ $n -eq 4 ]; then pass train_loss_flags_in_help; else fail train_loss_flags_in_help "$n of 4 flags listed"; fi
finish
