#!/usr/bin/env python3
"""PyTorch CPU baseline for bench/cpu_bench.sh: the same GPT-2-style model and training step that
`megatron train --mock-data` runs, in plain eager PyTorch, timed the same way.

Model: learned token and position embeddings, pre-LayerNorm blocks (fused QKV, causal attention
through F.scaled_dot_product_attention, GELU-tanh MLP 4H), final LayerNorm, logits tied to the
token embedding; fp32. Step: cross-entropy, backward, global-norm clipping at 1.0, AdamW
(Megatron's defaults: betas 0.9/0.999, eps 1e-8, weight decay 0.01 except on biases and norms).

Data: mock documents shaped like megatron.c's --mock-data (src/data/mock.c): document lengths
uniform in [2, min(2*S, V-1)], tokens 1, 2, 3, ... within a document, end-of-document V-1, cut into
contiguous samples of S+1 tokens. The lengths come from NumPy's generator rather than the Philox
stream, so the token values differ; the shapes and the work per step do not.

Prints one JSON line: {"impl": "torch", "tokens_per_s": ..., "ms_per_iter": ..., ...}, averaged
over iterations 3..N (the first two warm up allocators and caches), the same iterations
cpu_bench.sh averages for megatron.c.
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):  # x: (B, S, H)
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.nh, h // self.nh).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, NH, S, D)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, nh, seq, vocab, std=0.02):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, nh) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        # Megatron's GPT init: normal(0, std) everywhere, output projections scaled by
        # 1/sqrt(2*layers), zero biases, LayerNorm weight 1.
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            else:
                scaled = name.endswith("proj.weight") or name.endswith("fc2.weight")
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * layers) if scaled else std)

    def forward(self, tokens):  # tokens: (B, S) → logits (B, S, V)
        pos = torch.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def mock_stream(seq, vocab, n_tokens, seed):
    """Concatenated mock documents, at least n_tokens long."""
    rng = np.random.default_rng(seed)
    hi = max(2, min(2 * seq, vocab - 1))
    out, total = [], 0
    while total < n_tokens:
        n = int(rng.integers(2, hi + 1))
        doc = np.arange(1, n + 1, dtype=np.int64)
        doc[-1] = vocab - 1
        out.append(doc)
        total += n
    return np.concatenate(out)


def megatron_flops(layers, h, nh, seq, vocab_padded, batch):
    """Megatron's num_floating_point_operations, dense GPT, no GQA or SwiGLU (see metrics.h)."""
    q = h  # kv_channels * heads
    per_token = 6 * h * 4 * h * 2 * layers + 6 * (h * 3 * q + q * h) * layers + 6 * h * vocab_padded
    return batch * seq * per_token + batch * seq * seq * 6 * q * layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-layers", type=int, default=4)
    ap.add_argument("--hidden-size", type=int, default=256)
    ap.add_argument("--num-attention-heads", type=int, default=4)
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--train-iters", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--num-threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.num_threads)
    torch.manual_seed(a.seed)
    m = a.make_vocab_size_divisible_by
    vocab_padded = (a.vocab_size + m - 1) // m * m
    b, s = a.micro_batch_size, a.seq_length
    model = GPT(a.num_layers, a.hidden_size, a.num_attention_heads, s, vocab_padded)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() == 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.999), eps=1e-8, foreach=True)

    stream = torch.from_numpy(mock_stream(s, a.vocab_size, a.train_iters * b * s + 1, a.seed))
    ms, losses = [], []
    for it in range(a.train_iters):
        start = it * b * s
        idx = start + torch.arange(b)[:, None] * s + torch.arange(s + 1)[None, :]
        sample = stream[idx]  # (B, S+1)
        tokens, labels = sample[:, :-1], sample[:, 1:]
        t0 = time.perf_counter()
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, vocab_padded), labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # forces completion before the clock stops
        ms.append((time.perf_counter() - t0) * 1000.0)

    timed = ms[2:] if len(ms) > 2 else ms
    tps = [b * s / (t / 1000.0) for t in timed]
    ms_mean = sum(timed) / len(timed)
    flops = megatron_flops(a.num_layers, a.hidden_size, a.num_attention_heads, s, vocab_padded, b)
    print(json.dumps({
        "impl": "torch",
        "tokens_per_s": sum(tps) / len(tps),
        "median_tokens_per_s": float(np.median(tps)),
        "ms_per_iter": ms_mean,
        "tflops": flops / (ms_mean / 1000.0) / 1e12,
        "iters_timed": len(timed),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
