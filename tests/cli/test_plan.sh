#!/usr/bin/env bash
# `megatron plan`: the JSON object on megatron-core's initialize_model_parallel docstring example (16 GPUs,
# TP 2, PP 4) and an interleaved schedule worked out by hand (PP 4, VPP 2, 8 microbatches), the grad
# buffer (sizes 10/20/30 over 2 ranks, and four parameters of 3, 5, 4, 4 elements over 4 ranks),
# the text view, and the one-line usage errors.
. "$(dirname "$0")/lib.sh"

# expect_json NAME 'fixed string the JSON must contain' ARGS...
expect_json() {
    local name=$1 want=$2; shift 2
    local out rc
    out=$("$MEGATRON" plan --json "$@" 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then fail "$name" "exit code $rc" "$out"
    elif [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [ "${out:0:1}" != "{" ] || [ "${out: -1}" != "}" ]; then
        fail "$name" "expected exactly one JSON object on one line" "$out"
    elif ! grep -qF -- "$want" <<<"$out"; then fail "$name" "output lacks $want" "${out:0:400}"
    else pass "$name"; fi
}

DOC16=(--world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4)
# initialize_model_parallel's docstring: "8 data_parallel groups: [g0, g2], [g1, g3], ...; 8 tensor model-parallel groups:
# [g0, g1], ...; 4 pipeline model-parallel groups: [g0, g4, g8, g12], ..." and the model-parallel
# groups printed by its script.
expect_json plan_docstring16_tp '"tp":[[0,1],[2,3],[4,5],[6,7],[8,9],[10,11],[12,13],[14,15]]' "${DOC16[@]}"
expect_json plan_docstring16_pp '"pp":[[0,4,8,12],[1,5,9,13],[2,6,10,14],[3,7,11,15]]' "${DOC16[@]}"
expect_json plan_docstring16_dp '"dp":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]]' "${DOC16[@]}"
expect_json plan_docstring16_mp '"mp":[[0,1,4,5,8,9,12,13],[2,3,6,7,10,11,14,15]]' "${DOC16[@]}"
expect_json plan_docstring16_embedding '"embedding":[[0,12],[1,13],[2,14],[3,15]]' "${DOC16[@]}"
expect_json plan_docstring16_rank5 '{"rank":5,"tp":1,"cp":0,"ep":0,"dp":0,"pp":1' "${DOC16[@]}"

# A model's weights under TP 2 (GPT-2 style with SwiGLU: H 64, 2 layers, vocabulary 512, 64
# positions, F = int(8*64/3/64)*64 = 128). By hand, per layer: norms 2*128, QKV 192*64 + 192, proj
# 64*64 + 64, fc1 256*64 + 256, fc2 64*128 + 64 = 41792; whole: 2 layers + wte 512*64 + wpe 64*64 +
# final norm 128 = 120576. One TP rank: QKV, fc1 and their biases, proj's and fc2's columns and
# the vocabulary halve, the rest is whole: 2*21088 + 16384 + 4096 + 128 = 62784.
TPM=(--world-size 4 --tensor-model-parallel-size 2 --num-layers 2 --hidden-size 64
     --num-attention-heads 4 --seq-length 64 --vocab-size 512 --swiglu --sequence-parallel)
# The peer-mapped windows a device run maps (bf16, 2 bytes a value), outside the arenas: under SP
# one slot per rank of a rank's rows of the hidden activations, T x (4 x 32 / T) x 64 x 2 = 16384;
# under EP 2 the worst-case receive slabs, 2 sources x 128 tokens x top-2 rows of 64 x 2 = 65536;
# none for TP without SP.
PW=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
    --max-position-embeddings 32 --vocab-size 128 --micro-batch-size 4 --global-batch-size 8
    --world-size 2 --bf16)
expect_json plan_peer_windows_sp '"peer_windows":16384' "${PW[@]}" --tensor-model-parallel-size 2 \
    --sequence-parallel
expect_json plan_peer_windows_ep '"peer_windows":65536' "${PW[@]}" --num-experts 4 \
    --moe-router-topk 2 --expert-model-parallel-size 2
expect_json plan_peer_windows_none '"peer_windows":0' "${PW[@]}" --tensor-model-parallel-size 2
# DP 2 with the distributed optimizer and overlapped buckets (--ddp-bucket-size 40000: buckets of
# 50048, 50048 and 10368 elements): the largest bucket's fp32 bytes, 50048 x 4 = 200192; with one
# bucket of everything (no --overlap-grad-reduce) none, the collectives take it
expect_json plan_peer_windows_dp '"peer_windows":200192' "${PW[@]}" --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 40000
expect_json plan_peer_windows_dp_one_bucket '"peer_windows":0' "${PW[@]}" \
    --use-distributed-optimizer
expect_json plan_tp_params '"params_total":120576,"params_per_tp_rank":62784' "${TPM[@]}"
expect_json plan_tp_qkv \
    '{"name":"decoder.layers.0.self_attention.linear_qkv.weight","global_shape":[192,64],"shape":[96,64],"tp_split_dim":0,"tp_split_chunks":1,"sequence_parallel":false}' \
    "${TPM[@]}"
expect_json plan_tp_fc2 \
    '{"name":"decoder.layers.1.mlp.linear_fc2.weight","global_shape":[64,128],"shape":[64,64],"tp_split_dim":1' \
    "${TPM[@]}"
expect_json plan_tp_norm_sp \
    '{"name":"decoder.final_layernorm.weight","global_shape":[64],"shape":[64],"tp_split_dim":-1,"tp_split_chunks":1,"sequence_parallel":true}' \
    "${TPM[@]}"

# Interleaved 1F1B, PP=4, VPP=2, 8 microbatches; rank 0 warms up with 10 forwards, rank 3 with 4.
INTER=(--world-size 4 --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2
       --num-microbatches 8 --num-layers 16)
expect_json plan_interleaved_table \
    '"schedule_table":[[0,0],[1,0],[2,0],[3,0],[0,1],[1,1],[2,1],[3,1],[4,0],[5,0],[6,0],[7,0],[4,1],[5,1],[6,1],[7,1]]' \
    "${INTER[@]}"
expect_json plan_interleaved_rank0 \
    '{"pp_rank":0,"num_warmup_microbatches":10,"order":[1,1,1,1,2,2,2,2,1,1,1,-2,1,-2,2,-2,2,-2,2,-1,2,-1,-1,-1,-2,-2,-2,-2,-1,-1,-1,-1],"activation_slots":11}' \
    "${INTER[@]}"
expect_json plan_interleaved_rank3 '{"pp_rank":3,"num_warmup_microbatches":4,' "${INTER[@]}"
expect_json plan_layers_interleaved \
    '"layers":[{"pp_rank":0,"vp_stage":0,"offset":0,"num_layers":2},{"pp_rank":0,"vp_stage":1,"offset":8,"num_layers":2}' \
    "${INTER[@]}"
expect_json plan_layers_no_vpp '{"pp_rank":1,"vp_stage":null,"offset":3,"num_layers":3}' \
    --world-size 8 --pipeline-model-parallel-size 4 --num-layers 12
expect_json plan_uneven_first_last '{"pp_rank":0,"vp_stage":null,"offset":0,"num_layers":1},{"pp_rank":1,"vp_stage":null,"offset":1,"num_layers":3}' \
    --world-size 4 --pipeline-model-parallel-size 4 --num-layers 8 \
    --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1
expect_json plan_microbatches_from_batch '"num_microbatches":4,' \
    --world-size 8 --pipeline-model-parallel-size 2 --global-batch-size 32 --micro-batch-size 2
expect_json plan_tp_pp_dp_mapping '"pp":[[0,1],[2,3],[4,5],[6,7]],"dp":[[0,2,4,6],[1,3,5,7]]' \
    --world-size 8 --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping

# Without a pipeline the JSON has no "pipeline" and no "layers" member.
out=$("$MEGATRON" plan --json --world-size 4 --tensor-model-parallel-size 2)
if grep -qE '"pipeline"|"layers"' <<<"$out"; then fail plan_sections_optional "$out"
else pass plan_sections_optional; fi

# Text view: groups, coordinates and a timeline whose bubble matches (p-1)/(v*m).
out=$("$MEGATRON" plan "${INTER[@]}"); rc=$?
if [ "$rc" -ne 0 ]; then fail plan_text "exit code $rc"
elif ! grep -qF "pp 0  |F0a F1a F2a F3a F0b" <<<"$out"; then fail plan_text "no timeline" "$out"
elif ! grep -qF "Megatron's (p-1)/(v*m) = 0.1875" <<<"$out"; then fail plan_text "no bubble line" "$out"
else pass plan_text; fi

# Layers as placed (GPT-2 1.5B's shape, P 2, V 2, 32 microbatches): a --pipeline-model-parallel-layout
# plans (the grad buffers' whole-model build once refused it); the even split leaves the first
# rank idle while the last one runs the output layer and loss, so its step is longer than a split
# that moves a layer off the last rank (the model's own comparison, not a fixed number).
XL=(--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --vocab-size 50257
    --micro-batch-size 1 --global-batch-size 32 --world-size 2 --pipeline-model-parallel-size 2)
placed() { "$MEGATRON" plan "${XL[@]}" "$@" 2>&1 | sed -n 's/.*the step \([0-9.]*\)x an even split.s/\1/p'; }
even=$(placed --pipeline-model-parallel-layout 'Et*12|t*12|t*12|t*12L')
moved=$(placed --pipeline-model-parallel-layout 'Et*12|t*12|t*13|t*11L')
if [ -z "$even" ] || [ -z "$moved" ]; then fail plan_layout_placed "no 'as placed' line: '$even' '$moved'"
elif ! awk -v a="$even" -v b="$moved" 'BEGIN { exit !(a > b && b >= 1.0) }'; then
    fail plan_layout_placed "even split ${even}x, moved layer ${moved}x"
else pass plan_layout_placed; fi
expect_json plan_layout_placed_json '"placed":{"output_layer_and_loss_in_layers":' "${XL[@]}" \
    --pipeline-model-parallel-layout 'Et*12|t*12|t*13|t*11L'
# Its faster split: planned as given, it takes the time the suggestion said, and is a local
# optimum (no further suggestion); under 1F1B the suggestion moves the last rank's spare layer.
out=$("$MEGATRON" plan "${XL[@]}" --virtual-pipeline-model-parallel-size 2 2>&1)
sug=$(sed -n "s/.*--pipeline-model-parallel-layout '\([^']*\)' (the step \([0-9.]*\)x.*/\1 \2/p" <<<"$out")
again=$("$MEGATRON" plan "${XL[@]}" --pipeline-model-parallel-layout "${sug% *}" 2>&1)
if [ -z "$sug" ]; then fail plan_layout_suggested "no suggestion" "$out"
elif ! grep -qF "the step ${sug#* }x an even split's" <<<"$again"; then
    fail plan_layout_suggested "'${sug% *}' planned again differs from ${sug#* }x" "$again"
elif grep -qF "a faster split" <<<"$again"; then fail plan_layout_suggested "not a local optimum" "$again"
elif ! "$MEGATRON" plan "${XL[@]}" 2>&1 | grep -qF "layout 'Et*25|t*23L'"; then
    fail plan_layout_suggested "1F1B: no 'Et*25|t*23L'"
else pass plan_layout_suggested; fi

# The messages' cost in the same model: an interleaved schedule (P 2, V 2, 32 microbatches) takes
# more than its own time when each send holds its sender, exactly its own time when sends run
# beside the compute (the plan GPUs use for it; tests/unit/test_pp_schedule.c checks the grid).
out=$("$MEGATRON" plan --world-size 2 --pipeline-model-parallel-size 2 \
    --virtual-pipeline-model-parallel-size 2 --num-layers 8 --num-microbatches 32 2>&1)
ratios=$(grep -oE 'takes [0-9.]+x|, [0-9.]+x when sends run beside' <<<"$out" | grep -oE '[0-9.]+x' | tr -d x | paste -sd' ')
if awk -v r="$ratios" 'BEGIN { split(r, a, " "); exit !(a[1] > 1.05 && a[2] == 1) }'; then
    pass "plan_messages_cost: blocking sends ${ratios% *}x, sends beside the compute ${ratios#* }x"
else
    fail plan_messages_cost "ratios '$ratios'" "$(grep messages <<<"$out")"
fi

# The grad buffer (megatron-core's _ParamAndGradBuffer and the distributed optimizer's ranges;
# tests/unit/test_grad_buffer.c checks the layouts against megatron-core itself). Sizes 10, 20, 30
# over 2 ranks: reverse order, 64-element starts, 138 used, padded to lcm(2, 128) -> 256.
GB=(--world-size 2 --param-sizes 10,20,30 --use-distributed-optimizer)
expect_json plan_grad_example \
    '"grad_buffer":{"data_parallel_size":2,"use_distributed_optimizer":true,"bucket_size":null,"numel":256,"numel_unpadded":138,"params":[{"index":2,"start":0,"end":30,"bucket":0},{"index":1,"start":64,"end":84,"bucket":0},{"index":0,"start":128,"end":138,"bucket":0}],"buckets":[{"start":0,"end":256,"numel_unpadded":138}],"shards":[{"dp_rank":0,"buckets":[{"bucket":0,"range":[0,128],"params":[{"index":2,"world":[0,30],"world_in_bucket":[0,30],"local":[0,30],"param":[0,30]},{"index":1,"world":[64,84],"world_in_bucket":[64,84],"local":[64,84],"param":[0,20]}]}]},{"dp_rank":1,"buckets":[{"bucket":0,"range":[128,256],"params":[{"index":0,"world":[128,138],"world_in_bucket":[128,138],"local":[0,10],"param":[0,10]}]}]}]}' \
    "${GB[@]}"
expect_json plan_grad_high_busbw '"numel":65536,"numel_unpadded":138' \
    --world-size 8 --param-sizes 10,20,30 --use-distributed-optimizer \
    --ddp-pad-buckets-for-high-nccl-busbw
# Buckets close at >= 60 elements (buffer order 40, 30, 20, 10: [40, 30] then [20, 10]).
expect_json plan_grad_buckets \
    '"bucket_size":60,"numel":100,"numel_unpadded":100,"params":[{"index":3,"start":0,"end":40,"bucket":0},{"index":2,"start":40,"end":70,"bucket":0},{"index":1,"start":70,"end":90,"bucket":1},{"index":0,"start":90,"end":100,"bucket":1}],"buckets":[{"start":0,"end":70,"numel_unpadded":70},{"start":70,"end":100,"numel_unpadded":30}]}' \
    --world-size 4 --param-sizes 10,20,30,40 --overlap-grad-reduce --ddp-bucket-size 60
# Megatron ignores --ddp-bucket-size without --overlap-grad-reduce: one bucket.
expect_json plan_grad_bucket_size_needs_overlap '"bucket_size":null,"numel":100' \
    --world-size 4 --param-sizes 10,20,30,40 --ddp-bucket-size 60
# The shared embedding (registered first, last in the buffer) gets its own bucket: the open one
# closes at the embedding's 64-aligned start, 128 (its 128 "unpadded" elements include the gap
# 84..128, as in megatron-core).
expect_json plan_grad_shared_embedding \
    '{"index":0,"start":128,"end":1128,"bucket":1,"shared_embedding":true}],"buckets":[{"start":0,"end":128,"numel_unpadded":128},{"start":128,"end":1152,"numel_unpadded":1000}]' \
    --world-size 2 --param-sizes 1000,20,30 --shared-embedding-param 0 --use-distributed-optimizer
# Two shared-embedding parameters in one buffer, each in a bucket of its own (megatron-core's
# layout for this case: tests/golden/grad_buffer, shared_two_d2)
expect_json plan_grad_two_shared_embeddings \
    '"buckets":[{"start":0,"end":128,"numel_unpadded":64},{"start":128,"end":896,"numel_unpadded":700},{"start":896,"end":1024,"numel_unpadded":128},{"start":1024,"end":2048,"numel_unpadded":1000}]' \
    --world-size 2 --param-sizes 1000,10,20,700,30 --shared-embedding-param 0,3 --use-distributed-optimizer
# A model: one buffer per pipeline stage; with tied embeddings the first stage's word embedding
# and the last stage's output_layer.weight are shared embeddings in buckets of their own.
MODEL=(--num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 32 --vocab-size 128)
expect_json plan_grad_model_first_stage \
    '"grad_buffers":[{"pp_rank":0,"vp_stage":null,"data_parallel_size":2,"use_distributed_optimizer":true,"bucket_size":5000,' \
    --world-size 4 --pipeline-model-parallel-size 2 "${MODEL[@]}" --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 5000
expect_json plan_grad_model_last_stage \
    '{"pp_rank":1,"vp_stage":null,"data_parallel_size":2,"use_distributed_optimizer":true,"bucket_size":null,"numel":34688,"numel_unpadded":34672,"params":[{"index":14,"start":0,"end":6144,"bucket":0,"name":"output_layer.weight","shared_embedding":true},' \
    --world-size 4 --pipeline-model-parallel-size 2 "${MODEL[@]}" --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 5000
expect_json plan_memory_per_stage \
    '"memory":[{"pp_rank":0,"dtype":"F32",' \
    --world-size 4 --pipeline-model-parallel-size 2 "${MODEL[@]}" --device cpu \
    --global-batch-size 8 --micro-batch-size 1
expect_json plan_memory_bf16 \
    '{"pp_rank":1,"dtype":"BF16",' \
    --world-size 4 --pipeline-model-parallel-size 2 "${MODEL[@]}" --global-batch-size 8 \
    --micro-batch-size 1
expect_json plan_grad_model_word_embedding \
    '{"index":0,"start":30080,"end":36224,"bucket":4,"name":"embedding.word_embeddings.weight","shared_embedding":true}' \
    --world-size 4 --pipeline-model-parallel-size 2 "${MODEL[@]}" --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 5000
# Tensor parallel: the vocabulary is padded to 128 x TP = 256 rows, 128 per rank (x 48 = 6144).
expect_json plan_grad_model_tp '{"index":0,"start":30192,"end":36336,"bucket":0,"name":"embedding.word_embeddings.weight"}' \
    --world-size 2 --tensor-model-parallel-size 2 "${MODEL[@]}"

# Without the distributed optimizer: no padding and no shards.
out=$("$MEGATRON" plan --json --world-size 3 --param-sizes 10,20,30)
if ! grep -qF '"numel":60,"numel_unpadded":60' <<<"$out" || grep -qF '"shards"' <<<"$out"; then
    fail plan_grad_plain "$out"
else pass plan_grad_plain; fi
# Text view: the header, the bucket and a shard row.
out=$("$MEGATRON" plan "${GB[@]}"); rc=$?
if [ "$rc" -ne 0 ]; then fail plan_grad_text "exit code $rc"
elif ! grep -qF "grad buffer (data-parallel size 2, distributed optimizer; one bucket: no --overlap-grad-reduce)" <<<"$out" \
    || ! grep -qF "256 elements, 138 used, 118 padding; 3 parameters in 1 bucket" <<<"$out" \
    || ! grep -qE "^ +1 +0 \[128, 256\) +0 \[128, 138\) +\[128, 138\) +\[0, 10\) +\[0, 10\)$" <<<"$out"; then
    fail plan_grad_text "$out"
else pass plan_grad_text; fi

expect_error plan_grad_sizes_garbage 2 \
    "--param-sizes expects comma-separated positive element counts \(e.g. 10,20,30\), got '10,x,30'" \
    plan --world-size 2 --param-sizes 10,x,30
expect_error plan_grad_sizes_empty_item 2 "got '10,,30'" plan --world-size 2 --param-sizes 10,,30
expect_error plan_grad_sizes_zero 2 "got '0'" plan --world-size 2 --param-sizes 0
expect_error plan_grad_sizes_negative 2 "got '5,-3'" plan --world-size 2 --param-sizes 5,-3
expect_error plan_grad_sizes_missing 2 "--param-sizes expects a value; write --param-sizes A,B,C" \
    plan --world-size 2 --param-sizes
expect_error plan_grad_sizes_empty 2 "--param-sizes expects comma-separated positive element counts \\(e.g. 10,20,30\\), got ''" \
    plan --world-size 2 --param-sizes=
expect_error plan_grad_shared_out_of_range 2 \
    "--shared-embedding-param 3 is out of range: --param-sizes lists 3 parameters \(0..2\)" \
    plan --world-size 2 --param-sizes 10,20,30 --shared-embedding-param 3
# --no-position-embedding with learned positions: no position table (64 positions x 64 = 4096
# parameters fewer), as Megatron's add_position_embedding = False
NOPOS=(--world-size 1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 512)
with=$("$MEGATRON" plan --json "${NOPOS[@]}" | grep -o '"params_total":[0-9]*' | cut -d: -f2)
without=$("$MEGATRON" plan --json "${NOPOS[@]}" --no-position-embedding | grep -o '"params_total":[0-9]*' | cut -d: -f2)
if [ -n "$with" ] && [ $((with - without)) -eq 4096 ]; then pass plan_no_position_embedding
else fail plan_no_position_embedding "params_total $with with the table, $without without"; fi
expect_error plan_grad_shared_trailing_comma 2 "--shared-embedding-param expects parameter indices" \
    plan --world-size 2 --param-sizes 10,20,30 --shared-embedding-param 0,
expect_error plan_grad_shared_garbage 2 "--shared-embedding-param expects parameter indices" \
    plan --world-size 2 --param-sizes 10,20,30 --shared-embedding-param -1
expect_error plan_grad_shared_needs_sizes 2 "--shared-embedding-param needs --param-sizes" \
    plan --world-size 2 --shared-embedding-param 0
expect_error plan_grad_bucket_size_zero 2 "--ddp-bucket-size must be positive, got 0" \
    plan --world-size 2 --param-sizes 10 --overlap-grad-reduce --ddp-bucket-size 0
expect_error plan_grad_bucket_size_garbage 2 "--ddp-bucket-size expects an integer, got 'big'" \
    plan --world-size 2 --param-sizes 10 --overlap-grad-reduce --ddp-bucket-size big
expect_error plan_grad_model_needs_vocab 2 "needs --vocab-size N" \
    plan --world-size 2 --num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 32
expect_error plan_grad_model_incomplete 2 "missing required model flag --seq-length" \
    plan --world-size 2 --num-layers 2 --hidden-size 48 --num-attention-heads 4
expect_error plan_grad_model_tp_heads 2 \
    "num_attention_heads \(6\) must be a multiple of tensor_model_parallel_size \(4\)" \
    plan --world-size 4 --tensor-model-parallel-size 4 --num-layers 2 --hidden-size 48 \
    --num-attention-heads 6 --seq-length 32 --vocab-size 128
expect_error plan_needs_world_size 2 "needs --world-size N; the smallest for these flags is 8" \
    plan --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4
expect_error plan_world_not_divisible 2 \
    "world size 6 is not divisible by tensor \(4\) x pipeline \(1\) x context \(1\) = 4; .*1, 2, 3, 6" \
    plan --world-size 6 --tensor-model-parallel-size 4
# Megatron's RankGenerator appends a dimension the order leaves out when its size is 1 (cp, ep
# here), and refuses one whose size is not
expect_json plan_order_without_cp_ep '"dp":[[0,2],[1,3],[4,6],[5,7]]' --world-size 8 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --parallel-order tp-dp-pp
expect_error plan_bad_order 2 "--parallel-order 'tp-dp-pp' lacks 'ep', whose size is 2" \
    plan --world-size 8 --expert-model-parallel-size 2 --parallel-order tp-dp-pp
expect_error plan_layers_not_divisible 2 "--num-layers 10 is not divisible by --pipeline-model-parallel-size 4" \
    plan --world-size 8 --pipeline-model-parallel-size 4 --num-layers 10
expect_error plan_interleaved_bubble 2 "valid microbatch counts: 4, 8, 12" \
    plan --world-size 4 --pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 2 \
    --num-microbatches 6
expect_error plan_bad_microbatches 2 "--num-microbatches expects a positive integer, got '0'" \
    plan --world-size 4 --num-microbatches 0
expect_error plan_gbs_not_divisible 2 "--global-batch-size 10 is not divisible by --micro-batch-size 1 x data-parallel size 4" \
    plan --world-size 4 --global-batch-size 10
expect_error plan_unknown_flag 2 "did you mean" plan --world-size 4 --tensor-model-paralel-size 2

# A Mixture-of-Experts model: every chunk has a dense buffer over the data-parallel group and an
# expert buffer over the expert-data-parallel group; EP 2 halves the experts a rank holds (the
# expert buffer) and leaves the dense buffer as it is; the split adds up to the rank's parameters.
MOE_PLAN=(plan --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
    --vocab-size 96 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48
    --micro-batch-size 1 --global-batch-size 8 --use-distributed-optimizer)
p1=$("$MEGATRON" "${MOE_PLAN[@]}" --world-size 4 2>&1)
p2=$("$MEGATRON" "${MOE_PLAN[@]}" --world-size 4 --expert-model-parallel-size 2 2>&1)
elems() { grep -A1 "^$2grad buffer of pp 0" <<<"$1" | grep -oE '^  [0-9]+ elements' | grep -oE '[0-9]+'; }
d1=$(elems "$p1" ""); d2=$(elems "$p2" ""); e1=$(elems "$p1" "expert "); e2=$(elems "$p2" "expert ")
split=$(grep -oE 'mixture of experts: [0-9]+ expert parameters on each expert-parallel rank \(of 2\), [0-9]+ dense' <<<"$p2")
total=$(grep -oE '[0-9]+ on each tensor-parallel rank' <<<"$p2" | grep -oE '^[0-9]+')
if [ -z "$d1" ] || [ "$d1" != "$d2" ] || [ -z "$e1" ] || [ "$e2" -ne $((e1 / 2)) ] || [ -z "$split" ]; then
    fail "plan moe ep 2 (dense $d1 -> $d2, experts $e1 -> $e2)" "$split" "$(grep -A1 'grad buffer' <<<"$p2")"
elif ! grep -q "expert grad buffer of pp 0 (expert-parallel rank 0's experts, expert-data-parallel size 2" <<<"$p2" ||
    ! grep -q "up to 64 rows for this rank's experts" <<<"$p2"; then
    fail "plan moe ep 2: expert buffer header or dispatch rows" "$(grep -E 'expert grad|dispatch' <<<"$p2")"
elif [ "$(awk '{print $4 + $13}' <<<"$split")" -ne "$total" ]; then
    fail "plan moe ep 2: the expert/dense split does not add up to $total" "$split"
else
    pass "plan moe: dense buffer $d2 elements on EP 1 and 2, expert buffer $e1 -> $e2 on EP 2 (expert-data-parallel 2), split adds up to $total"
fi
j=$("$MEGATRON" "${MOE_PLAN[@]}" --world-size 4 --expert-model-parallel-size 2 --json 2>&1)
if grep -q '"expert":[ ]*true' <<<"$j" && grep -q '"moe_rows_received":[ ]*64' <<<"$j"; then
    pass "plan moe --json: an expert buffer and the dispatch rows"
else
    fail "plan moe --json: no expert buffer or dispatch rows" "$(grep -oE '"(expert|moe_rows_received)":[^,]*' <<<"$j" | head -4)"
fi

# The receive budget (--moe-expert-rank-capacity-factor; `megatron plan` only): EP 8, 64 experts,
# top-8, 4096 tokens per microbatch. Worst case: each of 8 sources may send 4096 x min(8, 8 local
# experts) = 32768 rows, 262144 in all; under F = 1.5, 1.5 x 4096 x 8 = 49152 rows (slabs of
# 6144). Per received row an MoE layer saves H + fc1 + F = 1024 + 2816 + 1408 = 5248 bf16
# elements: 49152 x 5248 x 2 = 515899392 bytes per microbatch (2751463424 without the budget).
BUDGET=(--world-size 8 --expert-model-parallel-size 8 --num-layers 2 --hidden-size 1024
        --num-attention-heads 16 --seq-length 4096 --vocab-size 50304 --num-experts 64
        --moe-router-topk 8 --moe-ffn-hidden-size 1408 --swiglu --normalization RMSNorm
        --disable-bias-linear --micro-batch-size 1 --global-batch-size 8)
expect_json plan_moe_budget_rows '"moe_rows_received":49152,' "${BUDGET[@]}" --moe-expert-rank-capacity-factor 1.5
expect_json plan_moe_budget_bytes '"rows_received_worst_case":262144,"activations_per_layer_microbatch":515899392,' \
    "${BUDGET[@]}" --moe-received-token-capacity 1.5
expect_json plan_moe_no_budget '"moe_rows_received":262144,' "${BUDGET[@]}"
expect_error plan_moe_budget_zero 2 "--moe-expert-rank-capacity-factor must be positive" \
    train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 \
    --mock-data --train-iters 1 --lr 1e-3 --device cpu --num-experts 4 --moe-expert-rank-capacity-factor 0

# ECHO's plan for given token counts (core/echo_plan.h; the planner's own goldens from Megatron's
# functions are tests/unit/test_echo_plan.c). One hot expert on EP 4, one spare slot per rank, by
# hand: expert totals 3000, 340, 230, 130, one home expert per rank; average 3700 / 4 = 925;
# expert 0 spills 2075, the spare capacities 0, 585, 695, 795 take it all; every rank ends at 925.
# Slot 1's 585 tokens split over the sources as their 900 : 800 : 700 : 600 tokens of expert 0,
# floored (175, 156, 136, 117), the one left over to the first source.
ECHO_DIR=$(mktemp -d)
printf '[[900,100,50,50],[800,100,60,40],[700,90,80,30],[600,50,40,10]]\n' >"$ECHO_DIR/hot.json"
ECHO=(--world-size 4 --num-experts 4 --expert-model-parallel-size 4 --moe-enable-echo
      --moe-num-echo-experts 4 --moe-echo-token-counts "$ECHO_DIR/hot.json")
expect_json plan_echo_loads '"avg_tokens_per_ep_rank":925,"spillover_per_home_expert":[2075,0,0,0],"spare_capacity_per_ep_rank":[0,585,695,795]' "${ECHO[@]}"
expect_json plan_echo_after '"tokens_per_ep_rank_before":[3000,340,230,130],"tokens_per_ep_rank_after":[925,925,925,925]' "${ECHO[@]}"
expect_json plan_echo_home_to_spare '"tokens_from_home_expert_to_spare":[[0,585,695,795],[0,0,0,0],[0,0,0,0],[0,0,0,0]]' "${ECHO[@]}"
expect_json plan_echo_sources '"tokens_offloaded_from_ep_rank_to_spare":[[0,176,209,239],[0,156,185,212],[0,136,162,185],[0,117,139,159]]' "${ECHO[@]}"
out=$("$MEGATRON" plan "${ECHO[@]}" 2>&1)
if grep -q "average 925 tokens per rank, 2075 moved to spare slots" <<<"$out" &&
    grep -qE "ep rank 0 +before +3000 \|#{30}\| +after +925 \|#{9}\.{21}\|" <<<"$out" &&
    grep -q "spare slot 3 (ep rank 3): 795 tokens of expert 0" <<<"$out"; then pass plan_echo_text
else fail plan_echo_text "the text lacks the loads before and after" "$(tail -n 8 <<<"$out")"; fi
# auto picks Megatron's method: approximate bin packing with one spare slot per rank
expect_json plan_echo_auto '"assignment":"approx_bin_packing"' "${ECHO[@]}"
expect_json plan_echo_greedy '"assignment":"one_shot_greedy","threshold_multiplier":0.25' \
    "${ECHO[@]}" --moe-echo-assignment one_shot_greedy --moe-echo-threshold-multiplier 0.25
expect_error plan_echo_threshold_bin_packing 2 "--moe-echo-threshold-multiplier applies to one_shot_greedy" \
    plan "${ECHO[@]}" --moe-echo-threshold-multiplier 0.25
printf '[[1,2,3,4],[5,6,7,8]]\n' >"$ECHO_DIR/short.json"
expect_error plan_echo_counts_shape 2 "expected a JSON array of 4 rows" \
    plan --world-size 4 --num-experts 4 --expert-model-parallel-size 4 --moe-enable-echo \
    --moe-echo-token-counts "$ECHO_DIR/short.json"
expect_error plan_echo_slots_not_divisible 2 "--moe-num-echo-experts 6 must be a positive multiple of --expert-model-parallel-size 4" \
    plan "${ECHO[@]}" --moe-num-echo-experts 6
expect_error plan_echo_ep1 2 "--moe-enable-echo needs --expert-model-parallel-size of at least 2" \
    plan --world-size 1 --num-experts 4 --moe-enable-echo --moe-echo-token-counts "$ECHO_DIR/hot.json"
expect_error plan_echo_dropping 2 "--moe-enable-echo with --moe-expert-capacity-factor" \
    plan "${ECHO[@]}" --moe-expert-capacity-factor 1.0
expect_error plan_echo_no_counts 2 "needs --moe-echo-token-counts FILE" \
    plan --world-size 4 --num-experts 4 --expert-model-parallel-size 4 --moe-enable-echo
# every other check of the budget's and ECHO's flags: one line, exit 2
printf '[[1,2,3,4],[5,6,7,8],[1,2,3,4],[1,2,3,"x"]]\n' >"$ECHO_DIR/text.json"
expect_error plan_echo_counts_not_integer 2 "\\[3\\]\\[3\\] is not a token count" \
    plan --world-size 4 --num-experts 4 --expert-model-parallel-size 4 --moe-enable-echo \
    --moe-echo-token-counts "$ECHO_DIR/text.json"
expect_error plan_echo_counts_without_echo 2 "--moe-echo-token-counts needs --moe-enable-echo" \
    plan --world-size 4 --num-experts 4 --expert-model-parallel-size 4 \
    --moe-echo-token-counts "$ECHO_DIR/hot.json"
expect_error plan_echo_without_experts 2 "--moe-enable-echo needs --num-experts" \
    plan --world-size 2 --moe-enable-echo --moe-echo-token-counts "$ECHO_DIR/hot.json"
expect_error plan_echo_threshold_negative 2 "--moe-echo-threshold-multiplier must not be negative" \
    plan "${ECHO[@]}" --moe-echo-assignment one_shot_greedy --moe-echo-threshold-multiplier -1
expect_error plan_echo_bin_packing_slots 2 "approx_bin_packing assigns one spare slot per expert-parallel rank" \
    plan "${ECHO[@]}" --moe-num-echo-experts 8 --moe-echo-assignment approx_bin_packing
expect_error plan_budget_two_names 2 "name the same receive budget; pass one" \
    plan "${ECHO[@]}" --moe-expert-rank-capacity-factor 1.5 --moe-received-token-capacity 2
expect_error plan_budget_without_experts 2 "--moe-expert-rank-capacity-factor needs --num-experts" \
    plan --world-size 2 --moe-received-token-capacity 1.5
rm -rf "$ECHO_DIR"

# --fp8-param-gather: the fp8 linears' weights in a grad buffer of their own, as the trainer lays
# them out (its start-up lines; one rank with the distributed optimizer: the same split)
FP8PG=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 128
    --make-vocab-size-divisible-by 64 --micro-batch-size 1 --global-batch-size 2
    --use-distributed-optimizer --fp8-format hybrid --fp8-param-gather)
plan_out=$("$MEGATRON" plan --world-size 1 "${FP8PG[@]}" 2>&1)
train_out=$("$MEGATRON" train "${FP8PG[@]}" --mock-data --train-iters 1 --eval-iters 0 \
    --lr 1e-3 --device cpu --num-threads 1 2>&1)
plan_n=$(grep -A1 "^fp8 grad buffer of pp 0" <<<"$plan_out" | grep -oE "^  [0-9]+ elements" | grep -oE "[0-9]+")
train_n=$(grep -oE "\(the fp8 weights\), distributed optimizer: gradient buffer of [0-9]+" <<<"$train_out" | grep -oE "[0-9]+$")
rest_n=$(grep -A1 "^grad buffer of pp 0" <<<"$plan_out" | grep -oE "^  [0-9]+ elements" | grep -oE "[0-9]+")
train_rest=$(grep -oE "data-parallel size 1, distributed optimizer: gradient buffer of [0-9]+" <<<"$train_out" | grep -oE "[0-9]+$")
if [ -z "$plan_n" ] || [ "$plan_n" != "$train_n" ] || [ -z "$rest_n" ] || [ "$rest_n" != "$train_rest" ]; then
    fail plan_fp8_param_gather_buffers "plan: $rest_n + fp8 $plan_n, train: $train_rest + fp8 $train_n" \
        "$(grep -F "grad buffer" <<<"$plan_out")"
else pass plan_fp8_param_gather_buffers; fi
expect_json plan_fp8_param_gather_json '"fp8":true' --world-size 1 "${FP8PG[@]}"
# --fp8-recipe blockwise: the plan predicts its buffers (the block scales) whatever the device
out=$("$MEGATRON" plan --world-size 1 "${FP8PG[@]:0:16}" --fp8-format hybrid --fp8-recipe blockwise 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -qE "pipeline rank 0: .*total [0-9.]+ MiB" <<<"$out"; then pass plan_fp8_blockwise
else fail plan_fp8_blockwise "exit code $rc" "$out"; fi

finish
