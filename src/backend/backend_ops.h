/* The backend op table, declared once: every entry of struct mg_backend (backend.h), in table
 * order, with its contract. Everything that names the entries is generated from this list: the
 * struct's fields, mg_backend_validate's required list and the check of the MoE subset
 * (backend.c), the CPU backend's prototypes and table (cpu/cpu_ops.h, cpu/cpu_backend.c), the
 * CUDA backend's prototypes of both compute dtypes and its table (cuda/cuda_ops.h,
 * cuda/cuda_table.c), and the CUDA-vs-CPU coverage test (tests/cuda/test_cuda_optable.c). Adding
 * an op is one entry here, its two implementations, and a CUDA test (the coverage test fails until
 * there is one).
 *
 * Not a normal header: no include guard. The includer defines
 *   MG_OP(name, need, kind, ret, params, args)
 * includes this file, and gets one expansion per entry (the file #undefs MG_OP at its end):
 *   name    the field of mg_backend; the CPU backend's function is mg_cpu_<name>, the CUDA one's
 *           mg_cuda_<name> (and mg_cuda_f16_<name>, see kind)
 *   need    REQ: every backend has it (mg_backend_validate fails without it); OPT: may be NULL,
 *           the entry's comment says why and what callers do then; CAP: as OPT (a capability
 *           a device may lack), but the CPU backend, the reference, always has it
 *   kind    RT: runtime (memory, copies, streams), independent of the compute dtype; OP: a
 *           compute op; MOE: a compute op of Mixture-of-Experts layers (model/moe.c). The CUDA
 *           backend builds OP and MOE once per compute dtype: mg_cuda_<name> is bf16,
 *           mg_cuda_f16_<name> fp16
 *   ret     return type; params: the parenthesised parameter list, buffers with their shapes;
 *           args: the parenthesised list of the parameters' names (a call forwarding them, e.g.
 *           the graph recorder's, backend/graph_record.c)
 *
 * Buffer contract (the same for every backend):
 *  - activations, activation gradients and weights are in the backend's compute dtype
 *    (`compute_dtype`: fp32 on the CPU backend, bf16 or fp16 on CUDA) and passed as void
 *    pointers;
 *  - weight gradients are fp32 "main grads" and are ACCUMULATED (+=), so gradient accumulation over
 *    microbatches and tied weights need no extra code;
 *  - norm statistics, losses and optimizer state are fp32;
 *  - token ids and targets are int32;
 *  - all pointers are in the backend's memory (host for CPU, device for CUDA).
 * Unless an op says "accumulates", outputs are overwritten. Shapes are in comments; N is the number
 * of tokens in the microbatch (B*S), rows are tokens, the last dimension is contiguous.
 *
 * Fused QKV layout (Megatron's): the QKV projection output per token is ng query groups, each
 * holding r = nq/ng query heads followed by one key and one value head, each hd wide:
 *   qkv[token] = [ g0: q0 .. q(r-1), k, v | g1: ... ]      width ng*(r+2)*hd
 * Query head h belongs to group h / r. This keeps whole groups together so that a tensor-parallel
 * split of the rows of the QKV weight gives each rank complete groups.
 *
 * Needs (from the includer): mg_backend, mg_status, mg_stream_id, mg_graph, mg_graph_info,
 * mg_dropout, mg_moe_routing, mg_step_ctl, mg_step_rules (backend.h, core/dropout.h,
 * core/step_rules.h). */
#ifndef MG_OP
#error "define MG_OP(name, need, kind, ret, params, args) before including backend/backend_ops.h"
#endif

/* Formatted by hand: clang-format reads the first parameter as a product (mg_backend * be). */
// clang-format off
/* ---- memory ---- */
MG_OP(alloc, REQ, RT, mg_status, (mg_backend *be, size_t bytes, void **out),
      (be, bytes, out)) /* zeroed */
MG_OP(free, REQ, RT, void, (mg_backend *be, void *ptr), (be, ptr))
MG_OP(copy_h2d, REQ, RT, mg_status,
      (mg_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes))
MG_OP(copy_d2h, REQ, RT, mg_status,
      (mg_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes))
MG_OP(copy_d2d, REQ, RT, mg_status,
      (mg_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes))
MG_OP(memset_zero, REQ, RT, mg_status, (mg_backend *be, void *dst, size_t bytes), (be, dst, bytes))
/* n values between fp32 and bf16, in order with stream `stream` (the CPU backend's streams are
 * the host: at once): to_bf16, dst (n) bf16 = src (n) fp32 rounded to nearest even as
 * core/tensor.h's mg_f32_to_bf16; else dst (n) fp32 = src (n) bf16, exactly. --grad-reduce-in-bf16
 * (parallel/ddp.c): a gradient bucket into bf16 on the communication stream before its
 * reduction, the reduced shard back after. */
MG_OP(convert_bf16, REQ, RT, mg_status,
      (mg_backend *be, void *dst, const void *src, size_t n, bool to_bf16, mg_stream_id stream),
      (be, dst, src, n, to_bf16, stream))
/* The end of a training step for the dropout streams (core/dropout.h): state holds n {seed,
 * offset} pairs; offset += by for each, in order with the ops on the compute stream, so the next
 * step draws new masks with no host value changed (a step can be replayed as a CUDA graph). */
MG_OP(rng_advance, REQ, RT, mg_status,
      (mg_backend *be, uint64_t *state /* (2 n) */, int n, uint64_t by), (be, state, n, by))
/* out[i] (fp32, n) = standard normal draws from the stream whose {seed, offset} is at state
 * (backend memory), at offset state[1] + use (core/normal.h: which draw element i takes), in
 * order with the compute stream: Megatron's --moe-router-force-load-balancing logits. CPU and
 * CUDA draw the same uniforms; the normals agree to a few ulp (each libm's logf, cosf, sinf). */
MG_OP(normal_f32, REQ, RT, mg_status,
      (mg_backend *be, float *out /* (n) */, size_t n, const uint64_t *state /* (2) */,
       uint64_t use),
      (be, out, n, state, use))
/* fp32 host values <-> compute dtype backend buffer (parameters in and out of checkpoints) */
MG_OP(upload_f32, REQ, RT, mg_status,
      (mg_backend *be, void *dst, const float *src, size_t n), (be, dst, src, n))
MG_OP(download_f32, REQ, RT, mg_status,
      (mg_backend *be, float *dst, const void *src, size_t n), (be, dst, src, n))
MG_OP(synchronize, REQ, RT, mg_status, (mg_backend *be), (be))
MG_OP(destroy, REQ, RT, void, (mg_backend *be), (be))
/* Optional (NULL on the CPU backend, whose host memory has no such figure; callers then skip the
 * memory check): the device's free and total memory in bytes, as the driver reports them (every
 * process's allocations and the context count as used). Does not wait for the device. */
MG_OP(memory_info, OPT, RT, mg_status,
      (mg_backend *be, size_t *free_bytes, size_t *total_bytes), (be, free_bytes, total_bytes))
/* Optional (NULL on the CPU backend: plain host memory serves): zeroed page-locked host
 * memory, which copy_d2h fills at the link's full speed (checkpoint staging), and its free. */
MG_OP(alloc_pinned, OPT, RT, mg_status, (mg_backend *be, size_t bytes, void **out),
      (be, bytes, out))
MG_OP(free_pinned, OPT, RT, void, (mg_backend *be, void *ptr), (be, ptr))
/* Optional (NULL on the CPU backend, whose ops complete in call order): the stream to hand
 * to mg_comm calls (a cudaStream_t as void *), and an ordering between the two streams:
 * work enqueued on `waiter` after the call starts only after everything enqueued on
 * `signaller` before it. One event recorded and waited on by the device; no host wait. */
MG_OP(stream_handle, OPT, RT, void *, (mg_backend *be, mg_stream_id s), (be, s))
MG_OP(stream_wait, OPT, RT, mg_status,
      (mg_backend *be, mg_stream_id waiter, mg_stream_id signaller), (be, waiter, signaller))
/* Optional, with the two above: MG_STREAM_MARKS numbered points. stream_mark records point
 * `slot` at the current end of stream s; stream_wait_mark makes work enqueued on `waiter`
 * afterwards start only once stream s reached the point last recorded in `slot` (a slot
 * may be recorded again as soon as its waits are enqueued). No host wait. */
MG_OP(stream_mark, OPT, RT, mg_status, (mg_backend *be, mg_stream_id s, int slot), (be, s, slot))
MG_OP(stream_wait_mark, OPT, RT, mg_status, (mg_backend *be, mg_stream_id waiter, int slot),
      (be, waiter, slot))
/* A measurement (the pipeline's bubble under MG_PP_TIMING) that does not hold the host at every
 * op: MG_TIMER_POINTS numbered points. timer_mark records point `slot` at the current end of the
 * compute stream; timer_seconds waits until point b is reached and gives the seconds from point
 * a to point b. The CPU backend's points are the host clock (its ops complete in call order). */
MG_OP(timer_mark, CAP, RT, mg_status, (mg_backend *be, int slot), (be, slot))
MG_OP(timer_seconds, CAP, RT, mg_status, (mg_backend *be, int a, int b, double *seconds),
      (be, a, b, seconds))

/* ---- graphs ----
 * graph_begin starts a capture: the ops called on this backend afterwards, on both streams, are
 * recorded and not run, until graph_end ends the capture and returns the graph (and its size);
 * graph_launch runs the recorded ops again, in order, on the compute stream, as often as asked.
 * Every argument is the one given at capture (pointers, sizes, scalars, the contents of the
 * dropout, routing and step-rule structures): what changes from one launch to the next must be
 * in backend memory (host data is copied in before the launch). Refused inside a capture
 * (MG_ERR_UNSUPPORTED naming the op; the capture is then spoilt and graph_end returns that
 * error, *out NULL): alloc, alloc_pinned, copy_h2d, copy_d2h, upload_f32, download_f32,
 * synchronize, matmul_peak_tflops, graph_begin, graph_launch, and collectives on a backend
 * without streams (mg_backend_comm_begin); free, free_pinned and destroy must not be called.
 * graph_end always ends the capture and restores eager execution, also after an error. */
MG_OP(graph_begin, REQ, RT, mg_status, (mg_backend *be), (be))
MG_OP(graph_end, REQ, RT, mg_status, (mg_backend *be, mg_graph **out, mg_graph_info *info),
      (be, out, info))
MG_OP(graph_launch, REQ, RT, mg_status, (mg_backend *be, mg_graph *g), (be, g))
MG_OP(graph_free, REQ, RT, void, (mg_backend *be, mg_graph *g), (be, g)) /* NULL: nothing */

/* ---- embedding (vocab-parallel: this rank owns rows [v0, v0 + Vl) of the vocabulary) ----
 * out[i,:] = (v0 <= tokens[i] < v0 + Vl ? wte[tokens[i] - v0,:] : 0) + (wpe ? wpe[p(i),:] : 0)
 * with the position p(i) = pos ? pos[i] : i % S. pos (backend memory, every value in
 * [0, S): the caller's guarantee) gives each token its own position (--reset-position-ids).
 * One rank: v0 = 0, Vl = V (every token is in range). */
MG_OP(embedding_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,H) */, const int32_t *tokens /* (N) */,
       const void *wte /* (Vl,H) */, const void *wpe /* (P,H) or NULL */,
       const int32_t *pos /* (N) or NULL: i % S */, int N, int S, int H, int v0, int Vl),
      (be, out, tokens, wte, wpe, pos, N, S, H, v0, Vl))
/* accumulates dwte[tokens[i] - v0,:] += dout[i,:] for the tokens in range (the others are
 * skipped); dwpe[p(i),:] += dout[i,:] for every row (deterministic) */
MG_OP(embedding_backward, REQ, OP, mg_status,
      (mg_backend *be, float *dwte /* (Vl,H) */, float *dwpe /* (P,H) or NULL */,
       const void *dout /* (N,H) */, const int32_t *tokens /* (N) */,
       const int32_t *pos /* (N) or NULL: i % S */, int N, int S, int H, int v0, int Vl),
      (be, dwte, dwpe, dout, tokens, pos, N, S, H, v0, Vl))

/* ---- normalisation ----
 * LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), biased variance. */
MG_OP(layernorm_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,H) */, float *mean /* (N) */, float *rstd /* (N) */,
       const void *x /* (N,H) */, const void *w /* (H) */, const void *b /* (H) or NULL */, int N,
       int H, float eps), (be, out, mean, rstd, x, w, b, N, H, eps))
/* dx ACCUMULATES (+=) so the residual stream gradient flows through; dw, db accumulate. */
MG_OP(layernorm_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dx /* (N,H) */, float *dw /* (H) */,
       float *db /* (H) or NULL */, const void *dout /* (N,H) */, const void *x /* (N,H) */,
       const void *w /* (H) */, const float *mean /* (N) */, const float *rstd /* (N) */, int N,
       int H), (be, dx, dw, db, dout, x, w, mean, rstd, N, H))
/* RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). */
MG_OP(rmsnorm_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,H) */, float *rstd /* (N) */,
       const void *x /* (N,H) */, const void *w /* (H) */, int N, int H, float eps),
      (be, out, rstd, x, w, N, H, eps))
/* dx ACCUMULATES (+=); dw accumulates. */
MG_OP(rmsnorm_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dx /* (N,H) */, float *dw /* (H) */,
       const void *dout /* (N,H) */, const void *x /* (N,H) */, const void *w /* (H) */,
       const float *rstd /* (N) */, int N, int H), (be, dx, dw, dout, x, w, rstd, N, H))

/* ---- linear: out = inp @ w^T + bias (+ residual); w stored (OC, IC), as torch.nn.Linear ----
 * `residual` (N,OC) or NULL is added in the same pass (the transformer's residual stream:
 * out = x + proj(att) costs no separate add); it must not alias out. */
MG_OP(linear_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,OC) */, const void *inp /* (N,IC) */,
       const void *w /* (OC,IC) */, const void *bias /* (OC) or NULL */,
       const void *residual /* (N,OC) or NULL */, int N, int IC, int OC),
      (be, out, inp, w, bias, residual, N, IC, OC))
/* The GELU MLP's first layer in one pass: pre = inp @ w^T + bias (saved for backward),
 * out = gelu(pre) (the tanh form below). */
MG_OP(linear_gelu_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,OC) */, void *pre /* (N,OC) */,
       const void *inp /* (N,IC) */, const void *w /* (OC,IC) */,
       const void *bias /* (OC) or NULL */, int N, int IC, int OC),
      (be, out, pre, inp, w, bias, N, IC, OC))
/* dinp = dout @ w (overwritten; skipped when dinp is NULL); dw += dout^T @ inp (skipped when dw
 * is NULL: a caller may take the two products apart); dbias += column sums of dout (skipped when
 * NULL). With `gelu_pre` (N,IC), the input of this
 * layer was gelu(gelu_pre) and dinp is the gradient with respect to gelu_pre instead:
 * dinp = gelu'(gelu_pre) * (dout @ w), elementwise. */
MG_OP(linear_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dinp /* (N,IC) or NULL */, float *dw /* (OC,IC) */,
       float *dbias /* (OC) or NULL */, const void *dout /* (N,OC) */, const void *inp /* (N,IC) */,
       const void *w /* (OC,IC) */, const void *gelu_pre /* (N,IC) or NULL */, int N, int IC,
       int OC), (be, dinp, dw, dbias, dout, inp, w, gelu_pre, N, IC, OC))

/* ---- activations ----
 * GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). gelu_backward:
 * dinp = gelu'(inp) * dout, and dinp may be dout (in place). */
MG_OP(gelu_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out, const void *inp, size_t n), (be, out, inp, n))
MG_OP(gelu_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dinp, const void *inp, const void *dout, size_t n),
      (be, dinp, inp, dout, n))
/* SwiGLU (Megatron): inp row = [gate (F) | up (F)], out = silu(gate) * up */
MG_OP(swiglu_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,F) */, const void *inp /* (N,2F) */, int N, int F),
      (be, out, inp, N, F))
MG_OP(swiglu_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dinp /* (N,2F) */, const void *inp /* (N,2F) */,
       const void *dout /* (N,F) */, int N, int F), (be, dinp, inp, dout, N, F))

/* ---- rotary position embedding, rotate-half form (Megatron default, Hugging Face Llama) ----
 * For every query and key head of the fused qkv buffer (values untouched), token n at
 * position s = pos ? pos[n] : n % S, the first rd channels of the head (rd even,
 * 0 < rd <= hd; Megatron's --rotary-percent, rd = hd by default), i < rd/2:
 *   x'[i] = x[i] cos - x[i+rd/2] sin;  x'[i+rd/2] = x[i+rd/2] cos + x[i] sin,
 * with cos/sin = table[s, i] precomputed by the model; channels [rd, hd) pass unchanged.
 * pos (backend memory, int32, every value in [0, S): the caller's guarantee) gives each
 * token its own position (--reset-position-ids); NULL: positions restart every S tokens.
 * In place. */
MG_OP(rope_forward, REQ, OP, mg_status,
      (mg_backend *be, void *qkv /* (N, ng*(r+2)*hd) */,
       const float *cos_tab /* (S, rd/2) */, const float *sin_tab /* (S, rd/2) */,
       const int32_t *pos /* (N) or NULL */, int N, int S, int nq, int ng, int hd, int rd),
      (be, qkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd))
/* Applies the inverse rotation to the query and key gradients of dqkv, in place. */
MG_OP(rope_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dqkv /* (N, ng*(r+2)*hd) */,
       const float *cos_tab /* (S, rd/2) */, const float *sin_tab /* (S, rd/2) */,
       const int32_t *pos /* (N) or NULL */, int N, int S, int nq, int ng, int hd, int rd),
      (be, dqkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd))

/* ---- causal self-attention over the fused qkv buffer, softmax scale 1/sqrt(hd) ----
 * out[b,s, h*hd:(h+1)*hd] = softmax(q_h k_g^T * scale, causal) v_g for query head h, group g.
 * `saved` is backend-private state for backward, attention_saved_bytes() sized.
 * drop (NULL: none) is the attention dropout: probability P[s,t] of sequence b and head h is
 * multiplied by mg_dropout_attention(drop, b, h, s, t, S) (0 or 1/(1-p)) before the product
 * with v; the softmax's normaliser is the undropped one (torch: dropout(softmax(z)) v). The
 * backward must get the forward's drop: it recomputes the mask.
 * doc_start (NULL: plain causal) is the document mask of packed sequences
 * (--reset-attention-mask): query s of sequence b sees the keys t with
 * doc_start[b*S + s] <= t <= s, from the first token of its document up to itself. Backend
 * memory, int32; each value in [0, s] and non-decreasing along a sequence (documents are
 * contiguous runs): the caller's guarantee. The backward must get the forward's doc_start. */
MG_OP(attention_saved_bytes, REQ, OP, size_t,
      (mg_backend *be, int B, int S, int nq, int hd), (be, B, S, nq, hd))
MG_OP(attention_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (B*S, nq*hd) */, void *saved,
       const void *qkv /* (B*S, ng*(r+2)*hd) */, int B, int S, int nq, int ng, int hd,
       const mg_dropout *drop, const int32_t *doc_start /* (B*S) or NULL */),
      (be, out, saved, qkv, B, S, nq, ng, hd, drop, doc_start))
/* dqkv overwritten (query, key and value parts) */
MG_OP(attention_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dqkv /* (B*S, ng*(r+2)*hd) */,
       const void *dout /* (B*S, nq*hd) */, const void *qkv, const void *out /* (B*S, nq*hd) */,
       const void *saved, int B, int S, int nq, int ng, int hd, const mg_dropout *drop,
       const int32_t *doc_start /* (B*S) or NULL */),
      (be, dqkv, dout, qkv, out, saved, B, S, nq, ng, hd, drop, doc_start))

/* ---- fused softmax cross-entropy ----
 * losses[i] = logsumexp(logits[i,:]) - logits[i, targets[i]]; then, in place,
 * logits[i,:] becomes dlogits = (softmax(logits[i,:]) - onehot(targets[i])) * dloss[i].
 * All V columns take part, padded vocabulary entries included: in Megatron they are ordinary
 * (trained) logits. */
MG_OP(cross_entropy_fused, REQ, OP, mg_status,
      (mg_backend *be, void *logits /* (N,V) in: logits, out: grads */,
       float *losses /* (N) */, const int32_t *targets /* (N) */, const float *dloss /* (N) */,
       int N, int V), (be, logits, losses, targets, dloss, N, V))

/* ---- vocab-parallel cross-entropy (Megatron's VocabParallelCrossEntropy) ----
 * The logits of one rank are the columns [v0, v0 + Vl) of the full (N, V) logits; the caller
 * combines the partial results over the tensor-parallel group between the three calls:
 *   cross_entropy_max     rowmax[i] = max_j logits[i,j]                 -> all-reduce max
 *   cross_entropy_sums    sums[i] = sum_j exp(logits[i,j] - rowmax[i]),
 *                         sums[N+i] = v0 <= t < v0 + Vl ? logits[i, t - v0] : 0
 *                         (t = targets[i])                              -> all-reduce sum
 *   cross_entropy_finish  losses[i] = log(sums[i]) + rowmax[i] - sums[N+i]; in place,
 *                         logits[i,j] becomes (exp(logits[i,j] - rowmax[i]) / sums[i]
 *                         - [j == t - v0]) * dloss[i]
 * With v0 = 0, Vl = V and no communication this is cross_entropy_fused (up to rounding). */
MG_OP(cross_entropy_max, REQ, OP, mg_status,
      (mg_backend *be, float *rowmax /* (N) */, const void *logits /* (N,Vl) */, int N,
       int Vl), (be, rowmax, logits, N, Vl))
MG_OP(cross_entropy_sums, REQ, OP, mg_status,
      (mg_backend *be, float *sums /* (2N) */, const void *logits /* (N,Vl) */,
       const float *rowmax /* (N) */, const int32_t *targets /* (N) */, int v0, int N, int Vl),
      (be, sums, logits, rowmax, targets, v0, N, Vl))
MG_OP(cross_entropy_finish, REQ, OP, mg_status,
      (mg_backend *be, void *logits /* (N,Vl) in/out */, float *losses /* (N) */,
       const float *rowmax /* (N) */, const float *sums /* (2N) */,
       const int32_t *targets /* (N) */, const float *dloss /* (N) */, int v0, int N, int Vl),
      (be, logits, losses, rowmax, sums, targets, dloss, v0, N, Vl))

/* ---- elementwise and reductions ---- */
MG_OP(add, REQ, OP, mg_status,
      (mg_backend *be, void *out, const void *a, const void *b, size_t n),
      (be, out, a, b, n)) /* out=a+b */
/* The end of a row-parallel linear layer, after the reduction of its partial products over
 * the tensor-parallel group: out[i,:] = x[i,:] + bias + residual[i,:] (bias, residual may be
 * NULL); out may alias x. */
MG_OP(bias_residual_add, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,H) */, const void *x /* (N,H) */,
       const void *bias /* (H) or NULL */, const void *residual /* (N,H) or NULL */, int N, int H),
      (be, out, x, bias, residual, N, H))
/* Hidden dropout closing a row-parallel layer (Megatron's bias-dropout-add), after the
 * reduction of its partial products: out[i,:] = residual[i,:] + f(i,h) * (x[i,:] + bias),
 * f(i,h) = mg_dropout_hidden(drop, i, h, S, H) (0 or 1/(1-p)): row i is row drop->first + i
 * of a microbatch of sequences of S tokens. bias may be NULL; out may alias x. */
MG_OP(dropout_add, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,H) */, const void *x /* (N,H) */,
       const void *bias /* (H) or NULL */, const void *residual /* (N,H) */, int N, int H, int S,
       const mg_dropout *drop), (be, out, x, bias, residual, N, H, S, drop))
/* Its backward through the mask: dx[i,:] = f(i,h) * dout[i,:]; dx may alias dout. */
MG_OP(dropout_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dx /* (N,H) */, const void *dout /* (N,H) */, int N, int H,
       int S, const mg_dropout *drop), (be, dx, dout, N, H, S, drop))
/* *out += scale * sum_i x[i] * (w ? w[i] : 1)  (fp32, deterministic order) */
MG_OP(sum_f32, REQ, OP, mg_status,
      (mg_backend *be, float *out /* (1) */, const float *x /* (n) */,
       const float *w /* (n) or NULL */, size_t n, float scale), (be, out, x, w, n, scale))
/* *out += u^2 * sum_i x[i]^2 with u = *unscale (fp32 input; the sum and u^2 in double, so no
 * finite input overflows it; scaled, then rounded to fp32): unscale (backend memory, NULL: 1) = 1
 * / loss scale gives the unscaled gradients' sum of squares from the scaled ones without a false
 * overflow */
MG_OP(sumsq_f32, REQ, OP, mg_status,
      (mg_backend *be, float *out /* (1) */, const float *x /* (n) */, size_t n,
       const float *unscale /* (1) or NULL */), (be, out, x, n, unscale))
/* *out += the number of i with x[i] == 0 (-0 counts; NaN does not): Megatron's
 * count_zeros_fp32 behind --log-num-zeros-in-grad, exact in int64 */
MG_OP(count_zeros_f32, REQ, OP, mg_status,
      (mg_backend *be, int64_t *out /* (1) */, const float *x /* (n) */, size_t n),
      (be, out, x, n))
/* Global-norm clipping without a host read, of gradients held multiplied by the loss scale
 * (*unscale = 1 / that scale, backend memory; NULL: 1, no loss scaling; *sumsq is the unscaled
 * gradients', see sumsq_f32): norm = sqrt(*sumsq); *norm_out = norm; *coef_out = (clip > 0 &&
 * norm > clip ? clip / (norm + 1e-6) : 1) * *unscale, or NaN when norm is not finite (an
 * overflow: the step is skipped, see adamw). */
MG_OP(clip_coef, REQ, OP, mg_status,
      (mg_backend *be, float *coef_out /* (1) */, float *norm_out /* (1) */,
       const float *sumsq /* (1) */, float clip, const float *unscale /* (1) or NULL */),
      (be, coef_out, norm_out, sumsq, clip, unscale))
/* The control of a training step (core/step_rules.h, mg_step_control_apply), on one thread of
 * the device, in order with the compute stream: from the step's gradient norm and loss (backend
 * memory) and the host's rules (read at the call, by value), the skip decision, Adam's step
 * count, the rates of the update, the schedule's position, the loss scaler, all in *ctl, and
 * the running sums of the loss and the norm of the steps that advanced (sums, accumulated); all
 * backend memory. No host read: the step goes on whatever the outcome. */
MG_OP(step_control, REQ, OP, mg_status,
      (mg_backend *be, mg_step_ctl *ctl /* (1) */, const float *norm /* (1) */,
       const float *loss /* (1) */, float *sums /* (2) */, const mg_step_rules *rules /* host */),
      (be, ctl, norm, loss, sums, rules))
/* out[i] = x[i] * *s (fp32; s backend memory): the loss weights times the device's loss scale.
 * out may alias x. */
MG_OP(scale_f32, REQ, OP, mg_status,
      (mg_backend *be, float *out /* (n) */, const float *x /* (n) */, size_t n,
       const float *s /* (1) */), (be, out, x, n, s))

/* ---- optimizer ----
 * AdamW (decoupled weight decay, bias correction) over runs of elements, the spans (mg_adamw_span:
 * host memory, read at the call; a graph holding the call keeps the caller's array, which must
 * outlive it unchanged), gradient first multiplied by *grad_scale (the clipping coefficient, a
 * backend pointer); the rates are read from backend memory too (the step-control block,
 * core/step_rules.h): for a span, lr = rates[span.lr], wd = span.wd < 0 ? 0 : rates[span.wd],
 * and bc1 = bc[0] = 1 - b1^t, bc2 = bc[1] = 1 - b2^t for all:
 *   g = grad * s; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   master = master - lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * master )
 * `param` (compute dtype) receives the updated master; when master is NULL the parameter itself
 * is the fp32 master (CPU). A span's elements are [param_off, param_off + n) of param,
 * [grad_off, grad_off + n) of grad and [state_off, state_off + n) of master, m and v; spans do
 * not overlap. A non-finite
 * *grad_scale (clip_coef's mark of an overflow) skips the update: nothing is written. One call
 * covers a whole optimizer step (CUDA: a few launches, not one per parameter). */
MG_OP(adamw, REQ, OP, mg_status,
      (mg_backend *be, void *param, float *master /* or NULL */, const float *grad, float *m,
       float *v, const mg_adamw_span *spans /* (n_spans) host */, int n_spans,
       const float *rates, const float *bc /* (2) */, float beta1, float beta2, float eps,
       const float *grad_scale /* (1) */),
      (be, param, master, grad, m, v, spans, n_spans, rates, bc, beta1, beta2, eps, grad_scale))

/* ---- mixture of experts (model/moe.c) ----
 * Token counts, positions and group sizes stay in backend memory: ops read them there and no
 * op hands a size back to the host, so a step with experts needs no host synchronisation.
 * Routing is encoded per (token, slot) pair, k slots per token: idx[t*k+j] is the expert of
 * slot j (>= 0), or -1 - e for a pair the capacity dropped (expert e, weight kept for the
 * backward of the normalisation, contribution zero); pos[t*k+j] is the pair's row in the
 * permuted buffer, or -1 when dropped.
 *
 * Router logits in fp32 from compute-dtype inputs: logits = x @ w^T (no bias). */
MG_OP(router_forward, REQ, MOE, mg_status,
      (mg_backend *be, float *logits /* (T,E) */, const void *x /* (T,H) */,
       const void *w /* (E,H) */, int T, int H, int E), (be, logits, x, w, T, H, E))
/* dx ACCUMULATES dlogits @ w; dw accumulates dlogits^T @ x. */
MG_OP(router_backward, REQ, MOE, mg_status,
      (mg_backend *be, void *dx /* (T,H) */, float *dw /* (E,H) */,
       const float *dlogits /* (T,E) */, const void *x, const void *w, int T, int H, int E),
      (be, dx, dw, dlogits, x, w, T, H, E))
/* Scores, top-k selection and weights (probs, after scaling), capacity dropping, and the
 * aux-loss statistics: aux_counts receives the aux loss's token counts (per sequence with
 * seq_aux_loss: (T/S, E), else (1, E)) for the backward; stats[0] += stat_weight x aux loss /
 * aux_coeff, stats[1] += stat_weight x z-loss / z_coeff (for the enabled ones). bias (E) is
 * the expert bias (r->bias) or NULL. */
MG_OP(moe_route, REQ, MOE, mg_status,
      (mg_backend *be, const mg_moe_routing *r, int32_t *idx /* (T,k) */,
       float *probs /* (T,k) */, int32_t *aux_counts, float *stats /* (2) */,
       const float *logits /* (T,E) */, const float *bias),
      (be, r, idx, probs, aux_counts, stats, logits, bias))
/* dlogits (overwritten) = the gradient of the training objective through the weights
 * (dprobs, the gradient of the combine), the aux loss and the z-loss at r->loss_weight. */
MG_OP(moe_route_backward, REQ, MOE, mg_status,
      (mg_backend *be, const mg_moe_routing *r, float *dlogits /* (T,E) */,
       const float *dprobs /* (T,k) */, const float *logits, const int32_t *idx, const float *probs,
       const int32_t *aux_counts, const float *bias),
      (be, r, dlogits, dprobs, logits, idx, probs, aux_counts, bias))
/* Sorts the kept pairs by expert (token order within an expert): counts[e] = rows of expert
 * e (pad > 0: exactly pad rows each, the rows past its tokens zero), pos as above, and
 * xp's rows = x's rows of the pairs, expert after expert from row 0 (E x pad rows with pad,
 * else T x k rows, the rows past the kept pairs zero). load (E) or NULL: += kept pairs. */
MG_OP(moe_permute, REQ, MOE, mg_status,
      (mg_backend *be, void *xp /* (R,H) */, int32_t *pos /* (T,k) */,
       int32_t *counts /* (E) */, float *load /* (E) or NULL */, const void *x /* (T,H) */,
       const int32_t *idx /* (T,k) */, int T, int k, int E, int H, int pad),
      (be, xp, pos, counts, load, x, idx, T, k, E, H, pad))
/* dx ACCUMULATES the rows of dxp back to their tokens: dx[t] += sum_j dxp[pos[t,j]]. */
MG_OP(moe_permute_backward, REQ, MOE, mg_status,
      (mg_backend *be, void *dx /* (T,H) */, const void *dxp /* (R,H) */,
       const int32_t *pos, int T, int k, int H), (be, dx, dxp, pos, T, k, H))
/* The combine: out[t] = base[t] + sum_j probs[t,j] y[pos[t,j]] (kept pairs); base may be
 * out itself. */
MG_OP(moe_unpermute, REQ, MOE, mg_status,
      (mg_backend *be, void *out /* (T,H) */, const void *base /* (T,H) */,
       const void *y /* (R,H) */, const int32_t *pos, const float *probs, int T, int k, int H),
      (be, out, base, y, pos, probs, T, k, H))
/* Its backward: dy[pos[t,j]] = probs[t,j] dout[t] (the R rows no pair reaches are zeroed);
 * dprobs[t,j] = dout[t] . y[pos[t,j]] (0 for dropped pairs). */
MG_OP(moe_unpermute_backward, REQ, MOE, mg_status,
      (mg_backend *be, void *dy /* (R,H) */, float *dprobs /* (T,k) */,
       const void *dout /* (T,H) */, const void *y /* (R,H) */, const int32_t *pos,
       const float *probs, int T, int k, int H, int R),
      (be, dy, dprobs, dout, y, pos, probs, T, k, H, R))
/* Grouped linear over G = n_src x n_w groups of rows, one after the other from row 0: group
 * g has counts[g] rows (backend memory) and uses weight w[g % n_w] (OC, IC) and bias
 * bias[g % n_w] (OC) (bias NULL: none). w, bias: arrays of n_w pointers in backend memory.
 * Rows past the groups are not touched. (Expert parallelism: the rows of each source rank
 * for each local expert, as the all-to-all delivers them.) */
MG_OP(grouped_linear_forward, REQ, MOE, mg_status,
      (mg_backend *be, void *out /* (R,OC) */, const void *inp /* (R,IC) */, void *const *w,
       void *const *bias, const int32_t *counts, int n_src, int n_w, int IC, int OC),
      (be, out, inp, w, bias, counts, n_src, n_w, IC, OC))
/* The mirror of linear_backward per group: dinp rows (of the groups) overwritten, dw[j] and
 * dbias[j] (arrays of n_w pointers, dbias NULL: none) receive the sum over every group of
 * weight j: added to what they hold (accumulate), or written over it (!accumulate: a weight
 * with no rows gets zeros, so the caller need not zero them first); with gelu_pre the input
 * was gelu(gelu_pre) and dinp is with respect to gelu_pre. */
MG_OP(grouped_linear_backward, REQ, MOE, mg_status,
      (mg_backend *be, void *dinp /* (R,IC) */, float *const *dw, float *const *dbias,
       const void *dout /* (R,OC) */, const void *inp /* (R,IC) */, void *const *w,
       const void *gelu_pre /* (R,IC) or NULL */, const int32_t *counts, int n_src, int n_w, int IC,
       int OC, bool accumulate),
      (be, dinp, dw, dbias, dout, inp, w, gelu_pre, counts, n_src, n_w, IC, OC, accumulate))
/* The experts' activation over the rows of the G groups (sum of counts[0..G)):
 * swiglu: out (rows,F) = silu(pre[:, :F]) * pre[:, F:], pre (rows,2F); else
 * out = gelu(pre), pre (rows,F). */
MG_OP(grouped_activation_forward, REQ, MOE, mg_status,
      (mg_backend *be, void *out, const void *pre, const int32_t *counts, int G, int F,
       bool swiglu), (be, out, pre, counts, G, F, swiglu))
/* SwiGLU's backward over those rows: dpre (rows,2F) from dout (rows,F). */
MG_OP(grouped_swiglu_backward, REQ, MOE, mg_status,
      (mg_backend *be, void *dpre, const void *pre, const void *dout, const int32_t *counts,
       int G, int F), (be, dpre, pre, dout, counts, G, F))
/* Expert parallelism's fixed-size exchange (model/moe_dispatch.c): P blocks of rows, block p
 * holding the rows of counts[p*El .. (p+1)*El) (summed). to_slabs: from packed (block after
 * block from row 0) to slabs (block p at row p x slab); else back. Only a window of each block
 * moves: its rows [first, first + slab), clamped to the block (first 0 and blocks no larger than
 * a slab: all of them; a receive budget's later rounds move the next windows). Rows of a slab
 * past its window, and packed rows outside the windows, are not touched. */
MG_OP(moe_regroup, REQ, MOE, mg_status,
      (mg_backend *be, void *dst, const void *src, const int32_t *counts, int P, int El,
       int slab, int first, int H, bool to_slabs),
      (be, dst, src, counts, P, El, slab, first, H, to_slabs))
/* moe_regroup to the slabs and an all-to-all of them in one kernel, over peer-mapped memory
 * (core/peer_window.h; pw->n ranks, this one pw->rank): the window [first, first + slab) of each
 * of this rank's blocks of src (packed as moe_regroup's, counts P x El; block p for rank p) is
 * written straight into rank p's buffer from row rank x slab on (H wide), where the all-to-all
 * of the slabs would have put it; rows past a window are not touched. Between two device barriers
 * of the ranks on the stream: before, every rank has finished with what its buffer held (its
 * work before this call); after, every rank's rows are in every buffer. OPT: NULL on the CPU
 * backend; the caller then exchanges slabs through the group's all-to-all. */
MG_OP(moe_put_rows, OPT, OP, mg_status,
      (mg_backend *be, const mg_peer_window *pw, const void *src, const int32_t *counts, int El,
       int slab, int first, int H),
      (be, pw, src, counts, El, slab, first, H))
/* Exchanges over peer-mapped memory (core/peer_window.h; pw->n ranks, this one pw->rank; a window
 * serves these or moe_put_rows, not both): every rank pushes, and takes in what the others pushed
 * (peer_sum or peer_take), in the same order. peer_push, on stream s: once every other rank has
 * taken in this rank's previous push, block q of src (`bytes` long at src + q x stride: stride
 * `bytes` for a reduce-scatter's partial sums, 0 for a gather's one block) goes into rank q's
 * buffer at offset pw->rank x bytes for every q != pw->rank (by the copy engines on CUDA), and
 * then each peer is told it has arrived. Until the compute stream has waited for s
 * (stream_wait), the caller must not write src. peer_sum, on stream s: once every other
 * rank's push has arrived, dst (n values of dt: the compute dtype or fp32) = the sum over the
 * ranks in rank order, in fp32 rounded once, of own (this rank's block) and the blocks the others
 * pushed (n values each; dst may be own); then, with bias (H values) or residual (n values, may
 * be dst), the rows of H closed as bias_residual_add closes them (the sum's rounding, then
 * (sum + bias) + residual in fp32 rounded once: bit for bit the two calls, without the second
 * pass; n a multiple of H; H 0 without them). peer_take, on stream s: once every other rank's push has arrived, each one's block
 * (`bytes`) is copied to dst + q x bytes (a gather), and own (this rank's block, NULL: already
 * in place) to dst + pw->rank x bytes.
 * Both then tell the peers their slots are free. CAP: the CPU backend's wait on the host (ranks
 * sharing a node's memory: the MPI backend's shared windows) and give up after pw->timeout_s
 * with MG_ERR_COMM; where no window exists the caller goes through the group's collectives. */
MG_OP(peer_push, CAP, RT, mg_status,
      (mg_backend *be, const mg_peer_window *pw, const void *src, size_t stride, size_t bytes,
       mg_stream_id s),
      (be, pw, src, stride, bytes, s))
MG_OP(peer_sum, CAP, OP, mg_status,
      (mg_backend *be, const mg_peer_window *pw, void *dst /* (n) */, const void *own /* (n) */,
       size_t n, mg_dtype dt, const void *bias /* (H) or NULL */,
       const void *residual /* (n) or NULL */, int H, mg_stream_id s),
      (be, pw, dst, own, n, dt, bias, residual, H, s))
/* A gather straight into the peers' memory, between two meetings of the ranks on stream s
 * through pw's flags (every rank calls it in the same order, with its own dst): after the first
 * every rank has reached this call (its earlier work, its reads of what dst held, is done),
 * then src (`bytes`) is copied to dst[q] (rank q's memory as this process addresses it) for every
 * q != pw->rank, by the copy engines on CUDA, and to dst[pw->rank] where that is not src; after
 * the second every rank's copies into this rank's memory have arrived. OPT: NULL on the CPU backend (the caller gathers otherwise). */
MG_OP(peer_put, OPT, RT, mg_status,
      (mg_backend *be, const mg_peer_window *pw, void *const *dst /* (pw->n) */, const void *src,
       size_t bytes, mg_stream_id s),
      (be, pw, dst, src, bytes, s))
MG_OP(peer_take, CAP, RT, mg_status,
      (mg_backend *be, const mg_peer_window *pw, void *dst, const void *own, size_t bytes,
       mg_stream_id s),
      (be, pw, dst, own, bytes, s))
/* The receive budget's rounds (model/moe_dispatch.c): counts (P x El) split into windows of slab
 * rows per block p (the rows of counts[p*El .. (p+1)*El), expert after expert). out (P x El):
 * each expert's rows inside the window [first, first + slab) of its block. rounds (1, or NULL):
 * the windows the largest block needs, at least 1. Backend memory; a few values (one thread). */
MG_OP(moe_round_counts, REQ, RT, mg_status,
      (mg_backend *be, int32_t *out, int32_t *rounds, const int32_t *counts, int P, int El,
       int slab, int first),
      (be, out, rounds, counts, P, El, slab, first))
/* The expert bias update (Megatron's get_updated_expert_bias) from the step's load, already
 * summed over the data-parallel group: bias[e] += rate * sign(mean(load) - load[e]). */
MG_OP(moe_expert_bias_update, REQ, MOE, mg_status,
      (mg_backend *be, float *bias /* (E) */, const float *load /* (E) */, int E,
       float rate), (be, bias, load, E, rate))
/* ECHO's plan (core/echo_plan.h) from counts (EP, E): the tokens each expert-parallel rank
 * routes to each expert, backend memory, the same on every rank, so every rank computes the same
 * plan without a host read. plan (mg_echo_plan_ints(p) int32, backend memory) receives the
 * layout of mg_echo_plan_carve: the average load (int32: the counts must sum below 2^31), the
 * spillovers, spare capacities, offloads and loads after, then the planner's scratch. p: host,
 * read at the call, checked beforehand (mg_echo_params_check). after (NULL: none) accumulates
 * the plan's loads after (+= rank_load). CUDA: one thread (E, EP small). */
MG_OP(moe_echo_plan, REQ, RT, mg_status,
      (mg_backend *be, int32_t *plan, float *after /* (EP) or NULL */,
       const int32_t *counts /* (EP, E) */, const mg_echo_params *p /* host */),
      (be, plan, after, counts, p))
/* ECHO's reroute of this expert-parallel rank's n routed pairs (mg_echo_reroute_pair, one pair
 * per thread): out[i] = pair i's expert among the E + S of the plan's numbering (its home expert
 * or the spare slot its share falls in), -1 for a dropped pair (idx -1). idx (n): the pairs'
 * home experts; pos (n) and counts (E): moe_permute's rows and per-expert pairs over the E home
 * experts, unpadded (a pair's rank among its expert's pairs, in token order, is pos minus the
 * rows of the experts before); plan: moe_echo_plan's buffer from counts that include these. */
MG_OP(moe_echo_reroute, REQ, RT, mg_status,
      (mg_backend *be, int32_t *out /* (n) */, const int32_t *idx /* (n) */,
       const int32_t *pos /* (n) */, const int32_t *counts /* (E) */, const int32_t *plan,
       const mg_echo_params *p /* host */, int rank, int n),
      (be, out, idx, pos, counts, plan, p, rank, n))

/* ECHO's expert copies (core/echo_plan.h's MG_ECHO_SEND_WEIGHTS .. MG_ECHO_ADD_GRADS, mode) by
 * the plan (moe_echo_plan's buffer): between the slab (EP x S/EP rows, one expert per row: its
 * fc1 weight, fc1 bias, fc2 weight, fc2 bias, n1w + n1b + n2w + n2b elements; the compute dtype
 * for weights, fp32 for gradients) and the experts of table (backend memory: 8 arrays of
 * E/EP + S/EP pointers, the home experts then the spare slots: weights W1 B1 W2 B2, then their
 * fp32 gradients; a bias array unused when n1b, n2b are 0). Rows and experts a mode does not
 * name are not touched. */
MG_OP(moe_echo_move, REQ, MOE, mg_status,
      (mg_backend *be, void *slab, void *const *table, const int32_t *plan,
       const mg_echo_params *p /* host */, int rank, size_t n1w, size_t n1b, size_t n2w,
       size_t n2b, int mode),
      (be, slab, table, plan, p, rank, n1w, n1b, n2w, n2b, mode))

/* ---- fp8 (model/fp8.h; core/fp8.h's casts, core/fp8_scaling.h's recipe) ----
 * The bytes of in (rows, cols, compute dtype) x scale, cast saturating to `format`
 * (mg_fp8_format), in fp32: row-major into out, transposed ((cols, rows)) into out_t; either or
 * both may be NULL (both: only the amax). scale_inv (1) not NULL: = 1 / scale. amax (1) not
 * NULL: *amax = max(*amax, max |in|) (NaN wins). scale, scale_inv and amax: fp32, backend
 * memory. For a linear's output gradient, read once for all of these:
 *  - gelu_pre (rows, cols) not NULL: in is the gradient of gelu(gelu_pre), and everything above
 *    is of gelu_backward's result instead (gelu'(gelu_pre) x in, rounded to the compute dtype as
 *    gelu_backward writes it; nothing is written back);
 *  - dbias (cols) not NULL: accumulates the column sums of those values, as linear_backward's
 *    bias gradient. */
MG_OP(fp8_cast, REQ, OP, mg_status,
      (mg_backend *be, uint8_t *out /* (rows,cols) or NULL */,
       uint8_t *out_t /* (cols,rows) or NULL */, const void *in /* (rows,cols) */, int rows,
       int cols, const float *scale /* (1) */, float *scale_inv /* (1) or NULL */,
       float *amax /* (1) or NULL */, int format, const void *gelu_pre /* (rows,cols) or NULL */,
       float *dbias /* (cols) or NULL */),
      (be, out, out_t, in, rows, cols, scale, scale_inv, amax, format, gelu_pre, dbias))
/* Blockwise fp8 (--fp8-recipe blockwise; core/fp8_block.h's casts, power-of-two scales when
 * pow2) of in (rows, cols, compute dtype), each block's scale from its own amax:
 *   tiles false: 1 x 128 blocks along rows into out (rows, cols) and scale_inv (rows x
 *     ceil(cols/128)); along columns, transposed, into out_t (cols, rows) and scale_inv_t (cols x
 *     ceil(rows/128)) (either pair may be NULL);
 *   tiles true: 128 x 128 tiles into out and scale_inv (mg_fp8_tile_floats(rows, cols)), and the
 *     same bytes transposed into out_t (or NULL) with their grid in scale_inv_t
 *     (mg_fp8_tile_floats(cols, rows)).
 * The scales' layouts are core/fp8_block.h's (cuBLASLt's block scaling).
 * Optional: NULL where the backend has no block-scaled fp8 (model/fp8.c refuses the recipe). */
MG_OP(fp8_cast_blocks, CAP, OP, mg_status,
      (mg_backend *be, uint8_t *out /* (rows,cols) or NULL */, float *scale_inv,
       uint8_t *out_t /* (cols,rows) or NULL */, float *scale_inv_t, const void *in, int rows,
       int cols, bool tiles, int format, bool pow2),
      (be, out, scale_inv, out_t, scale_inv_t, in, rows, cols, tiles, format, pow2))
/* fp8 bytes that are already cast (--fp8-param-gather's gathered weights, model/fp8.h): in
 * (rows, cols) copied row-major into out and transposed ((cols, rows)) into out_t; either may be
 * NULL. scale_inv (1) not NULL: = 1 / scale, as fp8_cast writes it (scale and scale_inv fp32,
 * backend memory). */
MG_OP(fp8_transpose, REQ, OP, mg_status,
      (mg_backend *be, uint8_t *out /* (rows,cols) or NULL */,
       uint8_t *out_t /* (cols,rows) or NULL */, const uint8_t *in /* (rows,cols) */, int rows,
       int cols, const float *scale /* (1) */, float *scale_inv /* (1) or NULL */),
      (be, out, out_t, in, rows, cols, scale, scale_inv))
/* linear_forward (gelu_pre NULL) or linear_gelu_forward (gelu_pre (N,OC) the pre-activation;
 * residual NULL) on fp8 operands: the product of inp->data (N,IC) and w->data (OC,IC) in fp32,
 * times inp->scale_inv x w->scale_inv, then bias and residual (compute dtype) and the GELU, the
 * result rounded to the compute dtype. Both fp8 linear ops on CUDA: N, IC and OC multiples of 16
 * (cuBLASLt's fp8 kernels), else MG_ERR_UNSUPPORTED naming the sizes. */
MG_OP(fp8_linear_forward, REQ, OP, mg_status,
      (mg_backend *be, void *out /* (N,OC) */, void *gelu_pre /* (N,OC) or NULL */,
       const mg_fp8_tensor *inp, const mg_fp8_tensor *w, const void *bias /* (OC) or NULL */,
       const void *residual /* (N,OC) or NULL */, int N, int IC, int OC),
      (be, out, gelu_pre, inp, w, bias, residual, N, IC, OC))
/* linear_backward on fp8 operands: dinp (overwritten, skipped when NULL) from dout8->data (N,OC)
 * and w->data_t (IC,OC); dw (accumulates; skipped when NULL, and then dout8->data_t and inp are
 * not read) from dout8->data_t (OC,N) and inp->data_t (IC,N); each
 * product in fp32 times its operands' scale_inv; gelu_pre as linear_backward's. dbias (accumulates,
 * skipped when NULL) = column sums of dout (N,OC), the compute-dtype gradient the bytes came
 * from. */
MG_OP(fp8_linear_backward, REQ, OP, mg_status,
      (mg_backend *be, void *dinp /* (N,IC) or NULL */, float *dw /* (OC,IC) */,
       float *dbias /* (OC) or NULL */, const void *dout /* (N,OC) */, const mg_fp8_tensor *dout8,
       const mg_fp8_tensor *inp, const mg_fp8_tensor *w, const void *gelu_pre /* (N,IC) or NULL */,
       int N, int IC, int OC),
      (be, dinp, dw, dbias, dout, dout8, inp, w, gelu_pre, N, IC, OC))
/* The experts' fp8 operands (model/fp8_experts.c). fp8_cast over the rows of the G groups of in
 * (R, cols): counts (G, backend memory) rows each from row 0, R' = their sum <= R; rows past R'
 * are neither read nor written, nor in the amax. out (R, cols) or NULL: the rows' bytes as
 * fp8_cast writes them; out_t (cols, ld) or NULL: transposed, the groups at core/fp8.h's aligned
 * columns (ld = mg_fp8_group_ld(R, G); the columns between groups are not written). */
MG_OP(fp8_cast_grouped, REQ, MOE, mg_status,
      (mg_backend *be, uint8_t *out /* (R,cols) or NULL */, uint8_t *out_t /* (cols,ld) or NULL */,
       const void *in /* (R,cols) */, const int32_t *counts, int G, int R, int cols,
       const float *scale, float *scale_inv, float *amax, int format),
      (be, out, out_t, in, counts, G, R, cols, scale, scale_inv, amax, format))
/* grouped_linear_forward on fp8 operands: group g's rows of inp->data (R,IC) times weight
 * j = g % n_w, the bytes (OC,IC) at w->data + j x wstride, in fp32, times inp->scale_inv x
 * w->scale_inv, plus bias[j], rounded to the compute dtype. On CUDA IC and OC multiples of 16
 * and wstride of 16 bytes (Hopper's fp8 GEMMs), else MG_ERR_UNSUPPORTED naming them.
 * Optional, with its backward: NULL where the backend has no fp8 grouped GEMM (CUDA: a build
 * without CUTLASS, fp16 compute, a GPU other than sm 9.0); model/fp8.c then keeps the routed
 * experts in the compute dtype. */
MG_OP(fp8_grouped_linear_forward, CAP, OP, mg_status,
      (mg_backend *be, void *out /* (R,OC) */, const mg_fp8_tensor *inp, const mg_fp8_tensor *w,
       size_t wstride, void *const *bias, const int32_t *counts, int n_src, int n_w, int IC,
       int OC),
      (be, out, inp, w, wstride, bias, counts, n_src, n_w, IC, OC))
/* grouped_linear_backward on fp8 operands (R rows in all, ld = mg_fp8_group_ld(R, G)): dinp
 * (skipped when NULL) from dout8->data (R,OC) and weight j's transpose (IC,OC) at
 * w->data_t + j x wstride; dw (skipped when NULL; accumulate as grouped_linear_backward's) from
 * the grouped transposes dout8->data_t (OC,ld) and inp->data_t (IC,ld) (fp8_cast_grouped's); each
 * product times its operands' scale_inv; gelu_pre as grouped_linear_backward's. dbias (NULL:
 * none) from dout (R,OC), the compute-dtype gradient the bytes came from. */
MG_OP(fp8_grouped_linear_backward, CAP, OP, mg_status,
      (mg_backend *be, void *dinp /* (R,IC) or NULL */, float *const *dw, float *const *dbias,
       const void *dout /* (R,OC) */, const mg_fp8_tensor *dout8, const mg_fp8_tensor *inp,
       const mg_fp8_tensor *w, size_t wstride, const void *gelu_pre /* (R,IC) or NULL */,
       const int32_t *counts, int n_src, int n_w, int R, int IC, int OC, bool accumulate),
      (be, dinp, dw, dbias, dout, dout8, inp, w, wstride, gelu_pre, counts, n_src, n_w, R, IC, OC,
       accumulate))
/* The delayed-scaling update of n fp8 tensors at a step's end (mg_fp8_delayed_update), state
 * (fp32, backend memory) = [amax (n) | scale (n) | history (n, len)]: tensor t's amax of the
 * step goes into its history's first entry and is zeroed, and its scale is updated from the
 * history with `margin` and `algo` (mg_fp8_amax_algo). Tensors come in threes (a linear layer's
 * input, weight and output gradient): the first two with the largest value max_fwd, the third
 * max_bwd (e4m3 448, e5m2 57344). In order with the compute stream; capturable. */
MG_OP(fp8_update, REQ, OP, mg_status,
      (mg_backend *be, float *state, int n, int len, int margin, int algo, float max_fwd,
       float max_bwd),
      (be, state, n, len, margin, algo, max_fwd, max_bwd))

/* ---- optional: measurement (NULL where the backend has none; `megatron bench`) ----
 * The sustained dense matrix-multiply rate of the compute dtype in TFLOP/s, measured now:
 * an (n, n) x (n, n) product (n <= 0: 8192) with fp32 accumulation on random inputs, timed
 * on the device after warm-up, median of several. Synchronises; allocates and frees its own
 * buffers, so it belongs outside the training step. */
MG_OP(matmul_peak_tflops, OPT, OP, mg_status, (mg_backend *be, int n, double *tflops),
      (be, n, tflops))

// clang-format on

#undef MG_OP
