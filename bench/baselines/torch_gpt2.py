#!/usr/bin/env python3
"""PyTorch baseline for `megatron bench` (bench/gpu_bench.sh): nanoGPT-style GPT-2 training steps,
timed and reported the way src/cli/bench.c reports megatron.c's.

Model (nanoGPT's GPT with bias=True, dropout 0): learned token and position embeddings, pre-LayerNorm
blocks (eps 1e-5; fused QKV; causal attention through F.scaled_dot_product_attention(is_causal=True);
GELU-tanh MLP 4H), final LayerNorm, logits tied to the token embedding; vocabulary 50304. fp32
parameters (the masters) under bf16 autocast on CUDA; fp32 on the CPU. Step: cross-entropy,
backward, global-norm clipping at 1.0, AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1
on the 2-D weights only (not on biases and norms, as Megatron), fused on CUDA; torch.compile on the
model unless --no-compile. Tokens: uniform random ids drawn on the device each step (their values
do not change the work).

Timing: --warmup untimed steps (they include torch.compile's compilation, reported as warmup_s),
then --iters steps each timed by the host clock around the whole step, which ends with
loss.item() (one synchronisation per step, as megatron.c's mg_trainer_step).

Reported (one JSON line with --json, else a short table), with the names megatron bench uses:
ms/step (mean, median), tokens/s (tokens of the timed steps over their total time), FLOPs per token
6N + 12*L*H*T (N = parameters without the position embeddings, the tied embedding once), TFLOP/s,
the bf16 matmul peak measured in this process before the model exists (torch.matmul of two random
(n, n) bf16 matrices, n = 8192, fp32 accumulation with reduced-precision reductions disallowed, 10
warm-up products then 20 each between CUDA events, the median) and MFU = TFLOP/s / peak; memory:
mem_alloc_gib = torch.cuda.max_memory_allocated (the tensors), mem_peak_gib = the device memory in
use after the timed steps as the driver sees it (total - free from torch.cuda.mem_get_info, so the
CUDA context and the caching allocator's reserve count, as they do for megatron.c's number).
On the CPU (--device cpu, e.g. --tiny --no-compile for a syntax check) the peak is a float32
matmul of --peak-size (default 1024) and mem_peak_gib the peak resident set.

Out of memory: exits with status 3 and a stderr line containing "out of memory".

Data parallel (bench/dp_bench.sh): started by torchrun with WORLD_SIZE > 1, every rank joins one
process group (NCCL on CUDA, gloo on the CPU) on the GPU of its LOCAL_RANK and trains its own
replica under DistributedDataParallel (default buckets of 25 MB, gradient_as_bucket_view=True) on
its own random tokens (seeded 1234 + rank), so the global batch is world size x micro-batch.
torch.compile goes on the inner model before the DDP wrapper, as PyTorch 2.x's "Where to apply
torch.compile?" recommends (Dynamo does not trace DDP's wrapper well; compiling the inner module
still splits its graphs at DDP's bucket boundaries, Dynamo's DDPOptimizer, so the bucket
all-reduces overlap the backward). The step and its timing are the ones above, on every rank;
rank 0 alone prints, with tokens_per_s = world size x its own tokens/s (the ranks move in lock
step through the all-reduces), world_size and dist_backend added; tflops and mfu stay per GPU.
A single process (no WORLD_SIZE, or 1) runs and reports exactly as without this paragraph.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # name: (layers, hidden, heads); head dim 64
    "gpt2-124m": (12, 768, 12),
    "gpt2-350m": (24, 1024, 16),
    "gpt2-774m": (36, 1280, 20),
    "gpt2-1.5b": (48, 1600, 25),
}


class Block(nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(h, eps=1e-5)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h, eps=1e-5)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, layers, h, nh, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.h = nn.ModuleList([Block(h, nh) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def median(xs):
    return statistics.median(xs)


def measure_peak(device, n):
    """TFLOP/s of an (n, n) x (n, n) product on random inputs: bf16 on CUDA, fp32 on the CPU."""
    g = torch.Generator(device=device).manual_seed(1234)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.rand(n, n, device=device, generator=g).mul_(2).sub_(1).to(dtype)
    b = torch.rand(n, n, device=device, generator=g).mul_(2).sub_(1).to(dtype)
    times = []
    if device == "cuda":
        for _ in range(10):
            c = torch.matmul(a, b)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
        for s, e in ev:
            s.record()
            c = torch.matmul(a, b)
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in ev]
    else:
        for i in range(7):
            t0 = time.perf_counter()
            c = torch.matmul(a, b)
            if i >= 2:
                times.append(time.perf_counter() - t0)
    del a, b, c
    return 2.0 * n**3 / median(times) / 1e12


def init_distributed(dev):
    """(rank, world size): (0, 1) for a single process; under torchrun joins the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if dev == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # before any CUDA work
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    return dist.get_rank(), world


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gpt2-124m", help="gpt2-124m|gpt2-350m|gpt2-774m|gpt2-1.5b (or 124m, ...)")
    p.add_argument("--num-layers", type=int)
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--num-attention-heads", type=int)
    p.add_argument("--seq-length", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=50304)
    p.add_argument("--micro-batch-size", type=int, default=32)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--peak-size", type=int, help="side of the peak matmul (8192 on cuda, 1024 on cpu)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--no-compile", action="store_true", help="eager mode (no torch.compile)")
    p.add_argument("--tiny", action="store_true",
                   help="2 layers, hidden 64, 4 heads, seq 32, vocab 256, micro-batch 2, 2+1 steps: a quick check")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    p.add_argument("--json", action="store_true", help="one JSON line on stdout; the table goes to stderr")
    a = p.parse_args()
    name = a.model if a.model in SHAPES else "gpt2-" + a.model
    if name not in SHAPES:
        p.error(f"--model {a.model}: unknown; choose one of {', '.join(SHAPES)}")
    L, H, NH = SHAPES[name]
    a.model = name
    if a.tiny:
        L, H, NH = 2, 64, 4
        a.seq_length, a.vocab_size, a.micro_batch_size, a.iters, a.warmup = 32, 256, 2, 2, 1
        a.peak_size = a.peak_size or 128
        a.model = "custom"
    if a.num_layers or a.hidden_size or a.num_attention_heads:
        a.model = "custom"
    a.num_layers = a.num_layers or L
    a.hidden_size = a.hidden_size or H
    a.num_attention_heads = a.num_attention_heads or NH
    if (a.seq_length, a.vocab_size) != (1024, 50304):
        a.model = "custom"
    if a.hidden_size % a.num_attention_heads:
        p.error("--hidden-size must be divisible by --num-attention-heads")
    a.peak_size = a.peak_size or (8192 if a.device == "cuda" else 1024)
    return a


def run(a):
    dev = a.device
    rank, world = init_distributed(dev)
    if a.threads:
        torch.set_num_threads(a.threads)
    if dev == "cuda":
        # fp32 accumulation everywhere, as megatron.c's cuBLASLt calls (CUBLAS_COMPUTE_32F)
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    peak = measure_peak(dev, a.peak_size)
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    torch.manual_seed(1234)
    L, H, NH, T, V, B = a.num_layers, a.hidden_size, a.num_attention_heads, a.seq_length, a.vocab_size, a.micro_batch_size
    model = GPT(L, H, NH, T, V).to(dev)
    params = sum(p.numel() for p in model.parameters())  # the tied weight once
    params_flops = params - model.wpe.weight.numel()
    flops_per_token = 6 * params_flops + 12 * L * H * T
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=(dev == "cuda"))
    if world == 1:
        fwd = model if a.no_compile else torch.compile(model)
    else:
        torch.manual_seed(1234 + rank)  # each rank its own tokens
        if not a.no_compile:
            model.compile()
        fwd = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if dev == "cuda" else torch.autocast("cpu", enabled=False)

    def step():
        data = torch.randint(0, V, (B, T + 1), device=dev)
        x, y = data[:, :-1], data[:, 1:]
        with ctx:
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    times, losses = [], []
    t_warm = time.perf_counter()
    for i in range(a.warmup + a.iters):
        if i == a.warmup:
            warmup_s = time.perf_counter() - t_warm
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        if not math.isfinite(loss):
            raise RuntimeError(f"the loss of step {i + 1} is {loss}")
        losses.append(loss)
        if i >= a.warmup:
            times.append(dt)
    if a.warmup == 0:
        warmup_s = 0.0

    gib = 1024.0**3
    if dev == "cuda":
        free_b, total_b = torch.cuda.mem_get_info()
        mem_peak = (total_b - free_b) / gib
        mem_alloc = torch.cuda.max_memory_allocated() / gib
        mem_reserved = torch.cuda.max_memory_reserved() / gib
    else:
        mem_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib
        mem_alloc = mem_reserved = sum(p.numel() * p.element_size() for p in model.parameters()) * 4 / gib
    total = sum(times)
    tok_s = B * T * a.iters / total
    tflops = flops_per_token * tok_s / 1e12
    r = {
        "impl": "torch", "model": a.model, "device": dev, "dtype": "bf16" if dev == "cuda" else "fp32",
        "num_layers": L, "hidden_size": H, "num_attention_heads": NH, "seq_length": T, "micro_batch_size": B,
        "vocab_size": V, "params": params, "params_flops": params_flops, "flops_per_token": flops_per_token,
        "iters": a.iters, "warmup": a.warmup, "ms_per_step": 1e3 * total / a.iters,
        "ms_per_step_median": 1e3 * median(times), "tokens_per_s": tok_s, "tflops": tflops,
        "peak_tflops": peak, "peak_n": a.peak_size, "mfu": tflops / peak, "mem_peak_gib": mem_peak,
        "mem_alloc_gib": mem_alloc, "mem_reserved_gib": mem_reserved, "loss_first": losses[0],
        "loss_last": losses[-1], "warmup_s": warmup_s, "compile": not a.no_compile,
        "torch": torch.__version__,
    }
    if dev == "cuda":
        r["gpu"] = torch.cuda.get_device_name()
    if world > 1:
        if rank != 0:
            return
        r.update(tokens_per_s=world * tok_s, world_size=world, dist_backend=dist.get_backend())
    out = sys.stderr if a.json else sys.stdout
    print(f"torch baseline: {a.model} on {dev} ({r['dtype']}{', compiled' if r['compile'] else ', eager'}), "
          f"{L} layers, hidden {H}, {NH} heads, seq {T}, micro-batch {B}, vocab {V}", file=out)
    print(f"  parameters         {params} ({params_flops} without position embeddings)", file=out)
    print(f"  step time          {r['ms_per_step']:.2f} ms mean, {r['ms_per_step_median']:.2f} ms median "
          f"({a.iters} steps after {a.warmup} warm-up, {warmup_s:.1f} s)", file=out)
    print(f"  tokens/s           {r['tokens_per_s']:.0f}"
          + (f" ({world} ranks x {tok_s:.0f}, DDP over {r['dist_backend']})" if world > 1 else ""), file=out)
    print(f"  FLOPs/token        {flops_per_token:.4g} (6N + 12*L*H*T)", file=out)
    print(f"  achieved           {tflops:.2f} TFLOP/s", file=out)
    print(f"  {r['dtype']} matmul peak  {peak:.2f} TFLOP/s ({a.peak_size}^3, torch.matmul, measured now)", file=out)
    print(f"  MFU                {100 * r['mfu']:.1f}%", file=out)
    print(f"  memory             {mem_peak:.2f} GiB peak, allocated {mem_alloc:.2f} GiB, "
          f"reserved {mem_reserved:.2f} GiB", file=out)
    print(f"  loss               {losses[0]:.4f} (first step) -> {losses[-1]:.4f} (last)", file=out)
    out.flush()
    if a.json:
        print(json.dumps(r), flush=True)


def main():
    a = parse_args()
    try:
        run(a)
        if dist.is_initialized():
            dist.destroy_process_group()
    except torch.cuda.OutOfMemoryError as e:
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"torch_gpt2.py: error: out of memory at micro-batch {a.micro_batch_size}: {first}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
