#!/usr/bin/env python3
"""PyTorch baseline for `megatron bench` (bench/gpu_bench.sh): nanoGPT-style GPT-2 training steps,
timed and reported the way src/cli/bench.c reports megatron.c's.

Model (nanoGPT's GPT with bias=True; dropout 0 unless asked): learned token and position embeddings, pre-LayerNorm
blocks (eps 1e-5; fused QKV; causal attention through F.scaled_dot_product_attention(is_causal=True);
GELU-tanh MLP 4H), final LayerNorm, logits tied to the token embedding; vocabulary 50304. fp32
parameters (the masters) under bf16 autocast on CUDA; fp32 on the CPU. Step: cross-entropy,
backward, global-norm clipping at 1.0, AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1
on the 2-D weights only (not on biases and norms, as Megatron), fused on CUDA; torch.compile on the
model unless --no-compile. Dropout as megatron.c places it (--attention-dropout on the attention
probabilities through SDPA's dropout_p, --hidden-dropout after the attention projection and after the
MLP, before each residual add; --dropout P sets both), in training steps only. Tokens: uniform random ids drawn on the device each step (their values
do not change the work). --fp8: the blocks' four linears multiply fp8 operands (torch_fp8.py).

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

Tensor parallel (--tp, bench/tp_bench.sh): under torchrun every rank joins the process group (also
a world of 1) and a 1-D DeviceMesh over the WORLD_SIZE ranks, and all of them train ONE replica on
the same tokens (seed 1234 for all, the tokens those of a single process), the global batch the
micro-batch. The model is parallelized with torch.distributed.tensor.parallel.parallelize_module as
PyTorch's tutorial "Large Scale Transformer model training with Tensor Parallel (TP)" does for Llama,
adapted to GPT-2 (parallelize() below): the fused c_attn is split into separate q, k, v Linear
layers (the same values) so that each one's column split keeps whole heads on a rank, the attention
runs on this rank's n_head / world heads; q, k, v and c_fc ColwiseParallel, c_proj and mlp_proj
RowwiseParallel, Megatron-style sequence parallel (the LayerNorms SequenceParallel on the sequence
shards, PrepareModuleInput all-gathering the attention's and the MLP's input), the token and position
embeddings RowwiseParallel, the tied lm head ColwiseParallel with its logits left sharded on the
vocabulary for loss_parallel's cross-entropy. torch.compile goes on after the parallelization (the
tutorial's order): the whole model by default (--compile-scope blocks: each block, torchtitan's way;
on an H100 with PyTorch 2.11, 350M at micro-batch 8 on a one-rank mesh, the whole model took ~82 ms
for forward, loss and backward, the blocks ~120 ms, the model without --tp 49 ms: DTensor's host
work). If compiling fails, the first step says so on stderr and the run goes on eager ("compile":
false and "compile_error" in the JSON). AdamW (fused on CUDA) and the clipping run on the local
shards (LocalShards). Rank 0 alone prints, tokens_per_s its own (the replica's) tokens/s, tflops
and mfu per GPU, with world_size, tensor_parallel, parallel "tp", sequence_parallel, loss_parallel
and compile_scope added. With --tp outside torchrun the run is the single process's.
"""
import argparse
import math
import os
import statistics

import torch
import torch.distributed as dist
import torch.utils.checkpoint
import torch.nn as nn
import torch.nn.functional as F

import bench_common  # this folder's (Python puts a script's folder first on sys.path)
import torch_fp8  # this folder's

SHAPES = {  # name: (layers, hidden, heads); head dim 64
    "gpt2-124m": (12, 768, 12),
    "gpt2-350m": (24, 1024, 16),
    "gpt2-774m": (36, 1280, 20),
    "gpt2-1.5b": (48, 1600, 25),
}


class Attention(nn.Module):
    def __init__(self, h, nh, attn_p=0.0, hidden_p=0.0):
        super().__init__()
        self.hd = h // nh
        self.attn_p, self.hidden_p = attn_p, hidden_p
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)

    def split_qkv(self):
        """Tensor parallel: the fused c_attn as three Linear layers q, k, v (the same values), so that
        each one's column split keeps the q, k and v of the same heads on a rank."""
        h = self.c_proj.in_features
        for i, name in enumerate("qkv"):
            lin = nn.Linear(h, h, device=self.c_attn.weight.device)
            with torch.no_grad():
                lin.weight.copy_(self.c_attn.weight[i * h:(i + 1) * h])
                lin.bias.copy_(self.c_attn.bias[i * h:(i + 1) * h])
            setattr(self, name, lin)
        del self.c_attn

    def forward(self, x):
        B, T, C = x.shape  # the global shape (a DTensor under tensor parallelism)
        if hasattr(self, "c_attn"):
            q, k, v = self.c_attn(x).split(C, dim=2)
        else:  # each a local (B, T, C / tp) tensor: this rank's heads
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, -1, self.hd).transpose(1, 2)
        k = k.view(B, T, -1, self.hd).transpose(1, 2)
        v = v.view(B, T, -1, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.attn_p if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, -1)
        return F.dropout(self.c_proj(y), self.hidden_p, self.training)


class MLP(nn.Module):
    def __init__(self, h, hidden_p=0.0):
        super().__init__()
        self.hidden_p = hidden_p
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        return F.dropout(self.mlp_proj(F.gelu(self.c_fc(x), approximate="tanh")), self.hidden_p, self.training)


class Block(nn.Module):
    def __init__(self, h, nh, attn_p=0.0, hidden_p=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(h, eps=1e-5)
        self.attn = Attention(h, nh, attn_p, hidden_p)
        self.ln_2 = nn.LayerNorm(h, eps=1e-5)
        self.mlp = MLP(h, hidden_p)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, layers, h, nh, seq, vocab, attn_p=0.0, hidden_p=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.h = nn.ModuleList([Block(h, nh, attn_p, hidden_p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.recompute = False
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        """The mean cross-entropy against targets; without targets the logits."""
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            if self.recompute and self.training:
                # --recompute: each block keeps its input and runs again in the backward
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def init_distributed(dev, tp=False):
    """(rank, world size): (0, 1) for a single process; under torchrun joins the process group (with
    --tp also for a world of 1: a one-rank mesh)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not (tp and "LOCAL_RANK" in os.environ):
        return 0, 1
    if dev == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # before any CUDA work
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    return dist.get_rank(), world


def parallelize(model, mesh):
    """Megatron-style tensor + sequence parallelism with torch.distributed.tensor.parallel, the recipe
    of PyTorch's tutorial "Large Scale Transformer model training with Tensor Parallel (TP)" (Llama)
    adapted to GPT-2's blocks. Between the blocks the activations are sharded on the sequence
    dimension (Shard(1), local tensors); the LayerNorms run on the sequence shards
    (SequenceParallel); each attention and MLP all-gathers its input (PrepareModuleInput), runs
    column-parallel q, k, v / c_fc (this rank's heads / columns, local tensors) and a row-parallel
    c_proj / mlp_proj whose partial sums are reduce-scattered back onto the sequence shards. Token
    and position embeddings are row-parallel (vocabulary / positions split, reduce-scattered onto the
    sequence shards); the lm head is column-parallel over the vocabulary, its logits stay sharded
    (Shard(-1)) for loss_parallel's cross-entropy; it and the token embedding are both split on the
    vocabulary, so they stay one tied parameter."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    for block in model.h:
        block.attn.split_qkv()
        parallelize_module(block, mesh, {
            "ln_1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln_2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.c_fc": ColwiseParallel(),
            "mlp.mlp_proj": RowwiseParallel(output_layouts=Shard(1)),
        })
    parallelize_module(model, mesh, {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "wpe": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "ln_f": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    model.lm_head.weight = model.wte.weight  # tied again (parallelize_module made two parameters)
    return model


class LocalShards:
    """The optimizer's view of a tensor-parallel model: each DTensor parameter's local shard, its
    gradient brought to the parameter's placements first (the gradients of the replicated LayerNorm
    parameters come back Partial: summed over the ranks in one all-reduce; the row-parallel position
    embedding's comes back Replicate: this rank's rows). AdamW and the global-norm clipping then run
    on plain tensors, as they do without tensor parallelism: a fused AdamW and torch's clipping over
    the ~390 DTensors of GPT-2 350M cost ~60 ms of host time a step on an H100 in DTensor's
    dispatch, more than the step's GPU work."""

    def __init__(self, model, mesh):
        from torch.distributed.tensor import DTensor
        self.pairs = []
        with torch.no_grad():
            for p in model.parameters():
                assert isinstance(p, DTensor), "every parameter of the tensor-parallel model is a DTensor"
                self.pairs.append((p, p.to_local()))
        self.group = mesh.get_group()
        self.sharded = [any(pl.is_shard() for pl in p.placements) for p, _ in self.pairs]

    def params(self, dims):
        return [local for p, local in self.pairs if (p.dim() >= 2) == (dims >= 2)]

    @torch.no_grad()
    def grads_to_local(self):
        partial = []
        for p, local in self.pairs:
            g = p.grad
            if any(pl.is_partial() for pl in g.placements):
                partial.append(g)
                continue
            if g.placements != p.placements:
                g = g.redistribute(p.device_mesh, p.placements)
            local.grad = g.to_local()
        if partial:
            flat = torch.cat([g.to_local().reshape(-1) for g in partial])
            dist.all_reduce(flat, group=self.group)
            it = iter(flat.split([g.to_local().numel() for g in partial]))
            by_id = {id(g): next(it) for g in partial}
            for p, local in self.pairs:
                if id(p.grad) in by_id:
                    local.grad = by_id[id(p.grad)].view_as(local)
        for p, _ in self.pairs:
            p.grad = None

    @torch.no_grad()
    def clip_grad_norm(self, max_norm):
        """Global-norm clipping: a sharded gradient's squares summed over the ranks, a replicated
        one's counted once."""
        grads = [local.grad for _, local in self.pairs]
        norms = torch._foreach_norm(grads, 2)
        sq = [torch.stack([n.float() for n, s in zip(norms, self.sharded) if s == want]).square().sum()
              if any(s == want for s in self.sharded) else torch.zeros((), device=grads[0].device)
              for want in (True, False)]
        dist.all_reduce(sq[0], group=self.group)
        total = (sq[0] + sq[1]).sqrt()
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gpt2-124m", help="gpt2-124m|gpt2-350m|gpt2-774m|gpt2-1.5b (or 124m, ...)")
    p.add_argument("--num-layers", type=int)
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--num-attention-heads", type=int)
    p.add_argument("--seq-length", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=50304)
    bench_common.add_step_args(p, 32)
    bench_common.add_device_args(p)
    p.add_argument("--tp", action="store_true",
                   help="tensor parallel over the WORLD_SIZE ranks of torchrun (one replica), instead of DDP")
    p.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"], default="default",
                   help="one process: torch.compile's mode (reduce-overhead replays the compiled forward and "
                        "backward as CUDA graphs)")
    p.add_argument("--compile-scope", choices=["model", "blocks"], default="model",
                   help="torch.compile the whole model (the default; under --tp the loss stays outside) or "
                        "each transformer block (torchtitan's way; one process too: the blocks share one "
                        "compiled code, so 48 layers compile as fast as one)")
    p.add_argument("--tiny", action="store_true",
                   help="2 layers, hidden 64, 4 heads, seq 32, vocab 256, micro-batch 2, 2+1 steps: a quick check")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    p.add_argument("--attention-dropout", type=float, default=0.0,
                   help="dropout on the attention probabilities (SDPA dropout_p), as megatron bench's flag")
    p.add_argument("--hidden-dropout", type=float, default=0.0,
                   help="dropout after the attention projection and the MLP, as megatron bench's flag")
    p.add_argument("--dropout", type=float, help="sets --attention-dropout and --hidden-dropout")
    p.add_argument("--recompute", action="store_true",
                   help="torch.utils.checkpoint per block: each keeps its input, its forward runs again in the backward")
    p.add_argument("--fp8", action="store_true",
                   help="the blocks' linears in fp8 through torch._scaled_mm (torch_fp8.py: tensorwise scales, "
                        "e4m3 forward, e5m2 gradients); the output layer stays bf16")
    p.add_argument("--json", action="store_true", help="one JSON line on stdout; the table goes to stderr")
    a = p.parse_args()
    if a.dropout is not None:
        a.attention_dropout = a.hidden_dropout = a.dropout
    for what, v in (("--attention-dropout", a.attention_dropout), ("--hidden-dropout", a.hidden_dropout)):
        if not 0.0 <= v < 1.0:
            p.error(f"{what} must be in [0, 1) (0 disables), got {v}")
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
    tp = int(os.environ.get("WORLD_SIZE", "1")) if a.tp else 1
    for what, n in (("--num-attention-heads", a.num_attention_heads), ("--vocab-size", a.vocab_size),
                    ("--seq-length", a.seq_length)):
        if n % tp:
            p.error(f"--tp: {what} {n} is not divisible by the tensor-parallel size {tp}")
    a.peak_size = a.peak_size or (8192 if a.device == "cuda" else 1024)
    return a


def run(a):
    dev = a.device
    rank, world = init_distributed(dev, a.tp)
    tp = a.tp and dist.is_initialized()  # tensor parallel over the world
    bench_common.setup_device(dev, a.threads)
    peak = bench_common.measure_peak(dev, a.peak_size)

    torch.manual_seed(1234)
    L, H, NH, T, V, B = a.num_layers, a.hidden_size, a.num_attention_heads, a.seq_length, a.vocab_size, a.micro_batch_size
    model = GPT(L, H, NH, T, V, a.attention_dropout, a.hidden_dropout).to(dev)
    model.recompute = a.recompute
    if a.fp8:
        torch_fp8.swap_linears(model.h)
    params = sum(p.numel() for p in model.parameters())  # the tied weight once
    params_flops = params - model.wpe.weight.numel()
    flops_per_token = 6 * params_flops + 12 * L * H * T
    if tp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.parallel import loss_parallel
        # Every rank built the same model from seed 1234 and draws the same tokens: the generator's
        # state is kept across the parallelization, so the tokens are those of a single process.
        rng = torch.get_rng_state(), torch.cuda.get_rng_state() if dev == "cuda" else None
        mesh = init_device_mesh(dev, (world,))
        parallelize(model, mesh)
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1])
        shards = LocalShards(model, mesh)
        decay, no_decay = shards.params(2), shards.params(1)
    else:
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = bench_common.adamw(decay, no_decay, 6e-4, dev)
    compiled = not a.no_compile
    if tp:
        # After parallelize_module, as PyTorch's TP tutorial says: the whole model (logits out, the
        # loss_parallel cross-entropy eager), or each block on its own (local tensors in and out,
        # the DTensors inside) as torchtitan does, slower here (see the module's docstring).
        if compiled:
            for m in (model.h if a.compile_scope == "blocks" else [model]):
                m.compile()
        fwd = model
    elif world == 1 and compiled and a.compile_scope == "blocks":
        for m in model.h:
            m.compile(mode=a.compile_mode)
        fwd = model
    elif world == 1:
        fwd = model if a.no_compile else torch.compile(model, mode=a.compile_mode)
    else:
        torch.manual_seed(1234 + rank)  # each rank its own tokens
        if not a.no_compile:
            model.compile()
        fwd = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    ctx = bench_common.autocast(dev)

    def step():
        data = torch.randint(0, V, (B, T + 1), device=dev)
        x, y = data[:, :-1], data[:, 1:]
        if tp:
            with ctx:
                logits = fwd(x)  # a DTensor sharded on the vocabulary
            with loss_parallel():
                with ctx:
                    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(0, 1))
                loss.backward()
            if isinstance(loss, DTensor):
                loss = loss.full_tensor()
            shards.grads_to_local()
            shards.clip_grad_norm(1.0)
        else:
            with ctx:
                loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    def to_eager():
        """After torch.compile failed in the first step (TP + compile in some PyTorch versions; the
        run goes on eager, said on stderr and in the JSON: "compile": false, "compile_error"): the
        model eager again, its gradients zeroed."""
        nonlocal fwd
        for m in model.modules():
            if getattr(m, "_compiled_call_impl", None) is not None:
                m._compiled_call_impl = None
        if fwd is not model and not isinstance(fwd, torch.nn.parallel.DistributedDataParallel):
            fwd = model
        opt.zero_grad(set_to_none=True)

    times, losses, warmup_s, compile_error = bench_common.timed_steps(
        step, a.warmup, a.iters, "torch_gpt2.py", to_eager if compiled else None)
    compiled = compiled and compile_error is None
    mem_peak, mem_alloc, mem_reserved = bench_common.memory_gib(dev, model)
    total = sum(times)
    tok_s = B * T * a.iters / total
    tflops = flops_per_token * tok_s / 1e12 / (world if tp else 1)  # per GPU
    r = {
        "impl": "torch", "model": a.model, "device": dev, "dtype": "bf16" if dev == "cuda" else "fp32",
        "num_layers": L, "hidden_size": H, "num_attention_heads": NH, "seq_length": T, "micro_batch_size": B,
        "vocab_size": V, "params": params, "params_flops": params_flops, "flops_per_token": flops_per_token,
        "attention_dropout": a.attention_dropout, "hidden_dropout": a.hidden_dropout, "recompute": a.recompute,
        "iters": a.iters, "warmup": a.warmup, "ms_per_step": 1e3 * total / a.iters,
        "ms_per_step_median": 1e3 * statistics.median(times), "tokens_per_s": tok_s, "tflops": tflops,
        "peak_tflops": peak, "peak_n": a.peak_size, "mfu": tflops / peak, "mem_peak_gib": mem_peak,
        "mem_alloc_gib": mem_alloc, "mem_reserved_gib": mem_reserved, "loss_first": losses[0],
        "loss_last": losses[-1], "warmup_s": warmup_s, "compile": compiled,
        "compile_mode": a.compile_mode, "compile_scope": a.compile_scope, "fp8": a.fp8,
        "torch": torch.__version__,
    }
    if compile_error:
        r["compile_error"] = compile_error
    if dev == "cuda":
        r["gpu"] = torch.cuda.get_device_name()
    if tp:
        if rank != 0:
            return
        # One replica on all the ranks: tokens_per_s is rank 0's own; tflops and mfu per GPU.
        r.update(world_size=world, tensor_parallel=world, parallel="tp", sequence_parallel=True,
                 loss_parallel=True, dist_backend=dist.get_backend())
        if compiled:
            r["compile_scope"] = a.compile_scope
    elif world > 1:
        if rank != 0:
            return
        r.update(tokens_per_s=world * tok_s, world_size=world, dist_backend=dist.get_backend())
    if tp:
        tokens = (f"  tokens/s           {r['tokens_per_s']:.0f} (one replica, tensor + sequence parallel over "
                  f"{world} ranks, {r['dist_backend']})")
    else:
        tokens = (f"  tokens/s           {r['tokens_per_s']:.0f}"
                  + (f" ({world} ranks x {tok_s:.0f}, DDP over {r['dist_backend']})" if world > 1 else ""))
    bench_common.report(
        r, a.json, [f"  parameters         {params} ({params_flops} without position embeddings)",
                    f"  dropout            attention {a.attention_dropout:g}, hidden {a.hidden_dropout:g}"],
        [tokens, f"  FLOPs/token        {flops_per_token:.4g} (6N + 12*L*H*T)",
         f"  achieved           {tflops:.2f} TFLOP/s" + (" per GPU" if tp else "")],
        setting=f", tensor parallel {world}" if tp else "")


def main():
    a = parse_args()
    with bench_common.exit_on_oom("torch_gpt2.py", a.micro_batch_size):
        run(a)
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
