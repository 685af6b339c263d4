#!/usr/bin/env python3
"""PyTorch baseline for `megatron bench` on a Mixtral-style Mixture-of-Experts GPT (bench/moe_bench.sh):
training steps timed and reported the way src/cli/bench.c and bench/baselines/torch_gpt2.py report.

Model: the one megatron.c builds from these Megatron flags (the defaults here):
  --num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
  --max-position-embeddings 1024 --position-embedding-type rope --normalization RMSNorm --swiglu
  --disable-bias-linear --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2
  --moe-ffn-hidden-size 2816 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2
  --vocab-size 50304
Token embedding (no position table), pre-RMSNorm blocks (eps 1e-5, weight only); attention: fused
QKV without bias, rotary embeddings on q and k (base 10000, the whole head, Megatron's
non-interleaved rotate-half form, computed in fp32), causal F.scaled_dot_product_attention, output
projection without bias; every layer's MLP is an MoE layer (Mixtral): a router (E x H, no bias,
computed in fp32 as megatron.c's), top-k on the logits and a softmax over the k chosen ones (Megatron's
default score function without --moe-router-pre-softmax = softmax over all then renormalised over the
top k), dropless (no capacity), no shared experts; each expert a SwiGLU MLP of --ffn
(fc1 H -> 2F holding gate and up, silu(gate) * up, fc2 F -> H, no biases); each token's output the
routing-probability-weighted sum of its k experts' outputs (Megatron applies the probabilities after
the experts). Final RMSNorm, an untied output layer, mean cross-entropy.
Initialisation as Megatron's: normal(0, 0.02) for every weight, normal(0, 0.02 / sqrt(2 L)) for the
attention output projection and the experts' fc2, ones for the norms.

Load balancing (Megatron's switch_load_balancing_loss_func, --moe-router-load-balancing-type
aux_loss): per MoE layer, with T tokens in the micro batch, p = softmax over all E router logits
(fp32), c_e = the number of tokens routed to expert e (the top-k selection, sum_e c_e = T k):
  aux = coeff * E / (k T^2) * sum_e c_e * sum_t p_te      (= coeff * E * sum_e f_e P_e,
                                                             f_e = c_e / (T k), P_e = mean_t p_te)
It is added to the loss that is backpropagated (Megatron attaches it with MoEAuxLossAutoScaler,
whose gradient scale is 1 for a single micro batch: the same gradients). The reported loss is the
language-model cross-entropy (what megatron bench reports); the summed aux term is reported apart.

Dispatch (compile-friendly, static shapes): the T k (token, expert) pairs are sorted by expert
(stable argsort), the tokens gathered in that order (bf16), per-expert counts by scatter_add and
their int32 cumulative sums as the group offsets; the experts run as torch._grouped_mm(x, W, offs)
(2-D x 3-D: rows of group e are offs[e-1]..offs[e], W (E, K, N) row-major; bf16 in, bf16 out with
fp32 accumulation on CUDA; the constraints: int32 offsets that end at the row count, strides and the
base pointer 16-byte aligned, i.e. H, F multiples of 8 in bf16; empty groups are allowed, no
alignment of the group sizes is needed for bf16), then the outputs are multiplied by their routing
probabilities (fp32) and scatter-added (index_add) back to their tokens. --loop-experts runs each
expert as its own matmul on its slice of the same sorted rows (the sizes read back to the host: a
synchronisation per layer; the loop is kept out of torch.compile, whose graphs it splits, since its
data-dependent sizes would recompile them at every step) -- the fallback used when
torch._grouped_mm is missing or fails a probe on the device. On an H200 (PyTorch 2.11, micro-batch
8, compiled) the grouped path ran a step in 70 ms, eager 104 ms.

Precision (CUDA): fp32 parameters (the masters) under bf16 autocast, as torch_gpt2.py; the expert
weights are cast to bf16 explicitly for torch._grouped_mm, which autocast does not cover. This was
chosen over bf16 parameters with fp32 master copies because PyTorch's fused AdamW keeps no master
weights: that would need an extra fp32 copy of the parameters and gradients per step (more memory
traffic, not less) for the same arithmetic. On the CPU (--device cpu, a check) everything is fp32.
Step: loss = cross-entropy + sum of the layers' aux losses, backward, global-norm clipping at 1.0,
AdamW lr 3e-4 constant, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the weights of 2 or more
dimensions (not on the norms), fused on CUDA; torch.compile on the model unless --no-compile (if
compiling fails, the run goes on eager and says so, "compile": false). Tokens: uniform random ids
drawn on the device each step (random routing, about balanced loads).

Timing and report: as torch_gpt2.py: --warmup untimed steps (they include compilation), then
--iters steps each timed by the host clock around the whole step, which ends with one read-back of
the losses; tokens/s = tokens of the timed steps over their total time; ms/step mean and median;
FLOPs per token 6 N_active + 12 L H T (N_active = the parameters a token uses: all but the input
embedding, with k of the E experts per layer) and Megatron's formula (megatron_tflops, as
megatron bench's "Megatron's formula"), TFLOP/s, the bf16 matmul peak measured in this process
before the model exists and MFU; memory: mem_peak_gib = the device memory in use after the timed
steps as the driver sees it, mem_alloc_gib = torch.cuda.max_memory_allocated. One JSON line on
stdout with --json (the table on stderr). Out of memory: exit status 3 and a stderr line containing
"out of memory".
"""
import argparse
import math
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import bench_common  # this folder's (Python puts a script's folder first on sys.path)


def rope_tables(seq, hd, base=10000.0):
    """cos and sin (seq, hd), fp32: Megatron's RotaryEmbedding (freqs repeated for both halves)."""
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(t, cos, sin):
    """t (B, nh, T, hd): t cos + rotate_half(t) sin in fp32, back to t's dtype."""
    x = t.float()
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat([-x2, x1], dim=-1) * sin).to(t.dtype)


class Attention(nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh, self.hd = nh, h // nh
        self.qkv = nn.Linear(h, 3 * h, bias=False)
        self.proj = nn.Linear(h, h, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)
        k = k.view(B, T, self.nh, self.hd).transpose(1, 2)
        v = v.view(B, T, self.nh, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def grouped_experts(xs, fc1, fc2, offs):
    """The SwiGLU experts on rows grouped by expert (group e = rows offs[e-1]..offs[e]): two
    torch._grouped_mm calls (2-D rows x 3-D (E, K, N) weights), no host synchronisation."""
    gate, up = torch._grouped_mm(xs, fc1, offs=offs).chunk(2, dim=-1)
    return torch._grouped_mm(F.silu(gate) * up, fc2, offs=offs)


@torch.compiler.disable
def loop_experts(xs, fc1, fc2, counts):
    """The same as grouped_experts, one matmul per expert on its slice; the slice sizes are read back
    to the host (a synchronisation per layer). Kept out of torch.compile: its data-dependent sizes
    would recompile the graph at almost every step."""
    outs = []
    for e, xe in enumerate(xs.split(counts.tolist())):
        gate, up = (xe @ fc1[e]).chunk(2, dim=-1)
        outs.append((F.silu(gate) * up) @ fc2[e])
    return torch.cat(outs)


class MoE(nn.Module):
    def __init__(self, h, experts, topk, ffn, aux_coeff, loop):
        super().__init__()
        self.E, self.k, self.ffn, self.aux_coeff, self.loop = experts, topk, ffn, aux_coeff, loop
        self.router = nn.Parameter(torch.empty(experts, h))
        self.fc1 = nn.Parameter(torch.empty(experts, h, 2 * ffn))  # [gate | up], (K, N) per expert
        self.fc2 = nn.Parameter(torch.empty(experts, ffn, h))
        self.compute_dtype = torch.float32  # bf16 on CUDA (set by the caller)

    def forward(self, x):
        """x (N, H) -> (the weighted sum of each token's k experts (N, H) in x's dtype, the aux loss)."""
        N, H = x.shape
        E, k = self.E, self.k
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(x.float(), self.router.float())  # (N, E) fp32
        top_logits, top_idx = torch.topk(logits, k, dim=-1)
        probs = torch.softmax(top_logits, dim=-1)  # (N, k) fp32, renormalised over the k
        flat = top_idx.reshape(-1)  # (N k): pair i is token i // k
        counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        aux = None
        if self.training and self.aux_coeff > 0:
            scores = torch.softmax(logits, dim=-1)  # over all E (Megatron's scores for the aux loss)
            aux = (scores.sum(0) * counts.to(scores.dtype)).sum() * (self.aux_coeff * E / (k * N * N))
        order = torch.argsort(flat, stable=True)  # pairs sorted by expert
        token = order // k
        offs = torch.cumsum(counts, 0).to(torch.int32)
        cd = self.compute_dtype
        xs = x.to(cd)[token]  # (N k, H)
        if self.loop:
            y = loop_experts(xs, self.fc1.to(cd), self.fc2.to(cd), counts)  # (N k, H)
        else:
            y = grouped_experts(xs, self.fc1.to(cd), self.fc2.to(cd), offs)
        y = y.float() * probs.reshape(-1)[order].unsqueeze(-1)
        out = torch.zeros(N, H, dtype=torch.float32, device=x.device).index_add(0, token, y)
        return out.to(x.dtype), aux


class Block(nn.Module):
    def __init__(self, h, nh, experts, topk, ffn, aux_coeff, loop):
        super().__init__()
        self.ln_1 = nn.RMSNorm(h, eps=1e-5)
        self.attn = Attention(h, nh)
        self.ln_2 = nn.RMSNorm(h, eps=1e-5)
        self.moe = MoE(h, experts, topk, ffn, aux_coeff, loop)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.ln_1(x), cos, sin)
        B, T, C = x.shape
        m, aux = self.moe(self.ln_2(x).reshape(B * T, C))
        return x + m.view(B, T, C), aux


class MoEGPT(nn.Module):
    def __init__(self, layers, h, nh, seq, vocab, experts, topk, ffn, aux_coeff, loop):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.h = nn.ModuleList([Block(h, nh, experts, topk, ffn, aux_coeff, loop) for _ in range(layers)])
        self.ln_f = nn.RMSNorm(h, eps=1e-5)
        self.lm_head = nn.Linear(h, vocab, bias=False)  # untied
        cos, sin = rope_tables(seq, h // nh)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("attn.proj.weight", "moe.fc2")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        """(mean cross-entropy, sum over the layers of the aux losses (0 when none))."""
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.wte(idx)
        aux = torch.zeros((), device=idx.device)
        for block in self.h:
            x, a = block(x, cos, sin)
            if a is not None:
                aux = aux + a
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1)), aux


def probe_grouped_mm(dev, dtype):
    """None when torch._grouped_mm runs forward and backward here, else why not."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        x = torch.randn(24, 16, device=dev, dtype=dtype, requires_grad=True)
        w = torch.randn(3, 16, 8, device=dev, dtype=dtype, requires_grad=True)
        offs = torch.tensor([5, 5, 24], device=dev, dtype=torch.int32)
        y = torch._grouped_mm(x, w, offs=offs)
        ref = torch.cat([x[:5] @ w[0], x[5:] @ w[2]])
        (y.float() * torch.arange(8, device=dev)).sum().backward()
        err = (y.float() - ref.float()).abs().max().item()
        if not err <= 1e-2 * (1 + ref.float().abs().max().item()):
            return f"torch._grouped_mm differs from the per-expert matmuls by {err}"
    except Exception as e:  # noqa: BLE001 - any failure means: use the loop
        return f"torch._grouped_mm failed on {dev}/{dtype}: {type(e).__name__}: {str(e).strip()[:200]}"
    return None


def megatron_flops_per_token(L, H, T, V, k, ffn):
    """Megatron's num_floating_point_operations for this model (every layer MoE, SwiGLU, no GQA, no
    shared experts), per token: 6 H (3 k F) L + 6 (4 H^2) L + 6 H V, plus core attention 6 T H L
    (QK^T and PV, halved by the causal mask); the router is not counted."""
    return 6 * H * 3 * k * ffn * L + 6 * 4 * H * H * L + 6 * H * V + 6 * T * H * L


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", "--num-layers", dest="layers", type=int, default=16)
    p.add_argument("--hidden", "--hidden-size", dest="hidden", type=int, default=1024)
    p.add_argument("--heads", "--num-attention-heads", dest="heads", type=int, default=16)
    p.add_argument("--seq", "--seq-length", dest="seq", type=int, default=1024)
    p.add_argument("--vocab", "--vocab-size", dest="vocab", type=int, default=50304)
    p.add_argument("--experts", "--num-experts", dest="experts", type=int, default=8)
    p.add_argument("--topk", "--moe-router-topk", dest="topk", type=int, default=2)
    p.add_argument("--ffn", "--moe-ffn-hidden-size", dest="ffn", type=int, default=2816)
    p.add_argument("--aux-loss-coeff", "--moe-aux-loss-coeff", dest="aux_coeff", type=float, default=1e-2)
    bench_common.add_step_args(p, 8)
    p.add_argument("--seed", type=int, default=1234)
    bench_common.add_device_args(p)
    p.add_argument("--loop-experts", action="store_true",
                   help="one matmul per expert instead of torch._grouped_mm")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    p.add_argument("--log-steps", action="store_true", help="a line per step on stderr")
    p.add_argument("--json", action="store_true", help="one JSON line on stdout; the table goes to stderr")
    a = p.parse_args()
    if a.hidden % a.heads or (a.hidden // a.heads) % 2:
        p.error("--hidden must be divisible by --heads into an even head dimension")
    if not 1 <= a.topk <= a.experts:
        p.error("--topk must be between 1 and --experts")
    if a.topk == 1:
        p.error("--topk 1: a softmax over one chosen logit is always 1 (Megatron needs --moe-router-pre-softmax)")
    a.peak_size = a.peak_size or (8192 if a.device == "cuda" else 1024)
    return a


def run(a):
    dev = a.device
    bench_common.setup_device(dev, a.threads)
    cd = torch.bfloat16 if dev == "cuda" else torch.float32
    loop, why_loop = a.loop_experts, "--loop-experts" if a.loop_experts else None
    if not loop:
        why_loop = probe_grouped_mm(dev, cd)
        if why_loop:
            loop = True
            print(f"torch_moe.py: {why_loop}; the experts run as a loop of matmuls", file=sys.stderr)
    peak = bench_common.measure_peak(dev, a.peak_size)

    torch.manual_seed(a.seed)
    L, H, NH, T, V, B = a.layers, a.hidden, a.heads, a.seq, a.vocab, a.micro_batch_size
    E, K, FF = a.experts, a.topk, a.ffn
    model = MoEGPT(L, H, NH, T, V, E, K, FF, a.aux_coeff, loop).to(dev)
    for m in model.modules():
        if isinstance(m, MoE):
            m.compute_dtype = cd
    params = sum(p.numel() for p in model.parameters())
    expert_params = sum(m.fc1.numel() + m.fc2.numel() for m in model.modules() if isinstance(m, MoE))
    params_active = params - model.wte.weight.numel() - expert_params * (E - K) // E
    flops_per_token = 6 * params_active + 12 * L * H * T
    meg_flops_per_token = megatron_flops_per_token(L, H, T, V, K, FF)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = bench_common.adamw(decay, no_decay, 3e-4, dev)
    fwd = model if a.no_compile else torch.compile(model)
    ctx = bench_common.autocast(dev)

    def step():
        data = torch.randint(0, V, (B, T + 1), device=dev)
        x, y = data[:, :-1], data[:, 1:]
        with ctx:
            lm, aux = fwd(x, y)
        (lm + aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return torch.stack([lm.detach().float(), aux.detach().float()]).tolist()

    def to_eager():
        """After torch.compile failed in the first step: the eager model, its gradients zeroed."""
        nonlocal fwd
        fwd = model
        opt.zero_grad(set_to_none=True)

    def log_step(i, losses, dt):
        print(f"  step {i + 1}/{a.warmup + a.iters}: loss {losses[0]:.6f}, aux {losses[1]:.6f}, {1e3 * dt:.2f} ms"
              f"{' (warm-up)' if i < a.warmup else ''}", file=sys.stderr, flush=True)

    times, values, warmup_s, compile_error = bench_common.timed_steps(
        step, a.warmup, a.iters, "torch_moe.py", None if a.no_compile else to_eager,
        describe=lambda v: f"{v[0]} (aux {v[1]})", after=log_step if a.log_steps else None)
    compiled = not a.no_compile and compile_error is None
    losses, auxes = [v[0] for v in values], [v[1] for v in values]
    mem_peak, mem_alloc, mem_reserved = bench_common.memory_gib(dev, model)
    total = sum(times)
    tok_s = B * T * a.iters / total
    tflops = flops_per_token * tok_s / 1e12
    experts_path = "loop" if loop else "grouped_mm"
    r = {
        "impl": "torch", "model": f"moe-mixtral-{L}x{H}", "device": dev,
        "dtype": "bf16" if dev == "cuda" else "fp32",
        "param_dtype": "fp32 (bf16 autocast)" if dev == "cuda" else "fp32",
        "num_layers": L, "hidden_size": H, "num_attention_heads": NH, "seq_length": T, "micro_batch_size": B,
        "vocab_size": V, "num_experts": E, "moe_router_topk": K, "moe_ffn_hidden_size": FF,
        "moe_aux_loss_coeff": a.aux_coeff, "experts": experts_path,
        "params": params, "params_active": params_active, "flops_per_token": flops_per_token,
        "megatron_flops_per_token": meg_flops_per_token,
        "iters": a.iters, "warmup": a.warmup, "ms_per_step": 1e3 * total / a.iters,
        "ms_per_step_median": 1e3 * statistics.median(times), "tokens_per_s": tok_s, "tflops": tflops,
        "megatron_tflops": meg_flops_per_token * tok_s / 1e12,
        "peak_tflops": peak, "peak_n": a.peak_size, "mfu": tflops / peak, "mem_peak_gib": mem_peak,
        "mem_alloc_gib": mem_alloc, "mem_reserved_gib": mem_reserved, "loss_first": losses[0],
        "loss_last": losses[-1], "aux_first": auxes[0], "aux_last": auxes[-1], "warmup_s": warmup_s,
        "compile": compiled, "torch": torch.__version__,
    }
    if why_loop:
        r["loop_reason"] = why_loop
    if compile_error:
        r["compile_error"] = compile_error
    if dev == "cuda":
        r["gpu"] = torch.cuda.get_device_name()
    bench_common.report(
        r, a.json,
        [f"  experts            {E} x SwiGLU {FF}, top-{K}, dropless, aux coeff {a.aux_coeff:g}; "
         f"{'torch._grouped_mm' if not loop else 'a loop of matmuls (' + why_loop + ')'}",
         f"  parameters         {params} ({params_active} active per token, without the input embedding)"],
        [f"  tokens/s           {tok_s:.0f}",
         f"  FLOPs/token        {flops_per_token:.4g} (6N_active + 12*L*H*T)",
         f"  achieved           {tflops:.4g} TFLOP/s (Megatron's formula: {r['megatron_tflops']:.4g})"],
        loss_tail=f"; aux (sum over layers) {auxes[0]:.5f} -> {auxes[-1]:.5f}")


def main():
    a = parse_args()
    with bench_common.exit_on_oom("torch_moe.py", a.micro_batch_size):
        run(a)


if __name__ == "__main__":
    main()
