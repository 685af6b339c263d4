#!/usr/bin/env python3
"""The same matrix products in bf16 and in fp16 through PyTorch (cuBLAS), to tell a dtype's cost
that belongs to the GPU from one that belongs to megatron.c: if PyTorch's fp16 products are slower
than its bf16 ones by what `megatron bench --fp16` loses, the gap is the hardware's (e.g. the power
limit: fp16's longer mantissa switches more bits per multiply at the same clock budget).

Shapes: GPT-2's linear layers at a given hidden size and tokens per step (forward x W^T, the input
gradient dY W and the weight gradient dY^T x of QKV, the attention projection, fc1 and fc2, and the
LM head over a 50304 vocabulary), with normally distributed inputs (not zeros: zero data draws less
power and runs faster). Each dtype runs every shape `--reps` times between CUDA events after
`--warmup` products; the dtypes alternate `--rounds` times so that the GPU's temperature and clock
drift affect both. Reported: milliseconds per pass over all shapes, per dtype and round, and the
ratio fp16 / bf16 of the medians (one JSON line with --json).
"""
import argparse
import json
import statistics

import torch


def shapes(hidden, tokens, vocab):
    """(M, K, N) of out (M, N) = a (M, K) @ b (K, N): the forward, input-gradient and weight-gradient
    products of each linear layer (in features, out features)."""
    h = hidden
    out = []
    for ic, oc in ((h, 3 * h), (h, h), (h, 4 * h), (4 * h, h), (h, vocab)):
        out += [(tokens, ic, oc), (tokens, oc, ic), (oc, tokens, ic)]
    return out


def run(dtype, mats, reps, warmup):
    for a, b in mats[dtype]:
        for _ in range(warmup):
            torch.matmul(a, b)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        for a, b in mats[dtype]:
            torch.matmul(a, b)
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    gen = torch.Generator(device="cuda").manual_seed(1234)
    mats = {}
    for dtype in (torch.bfloat16, torch.float16):
        mats[dtype] = [
            (torch.randn(m, k, device="cuda", generator=gen).to(dtype),
             torch.randn(k, n, device="cuda", generator=gen).to(dtype))
            for m, k, n in shapes(args.hidden, args.tokens, args.vocab)
        ]
    ms = {"bf16": [], "fp16": []}
    for _ in range(args.rounds):
        ms["bf16"].append(run(torch.bfloat16, mats, args.reps, args.warmup))
        ms["fp16"].append(run(torch.float16, mats, args.reps, args.warmup))
    res = {
        "hidden": args.hidden,
        "tokens": args.tokens,
        "ms_bf16": [round(x, 3) for x in ms["bf16"]],
        "ms_fp16": [round(x, 3) for x in ms["fp16"]],
        "fp16_over_bf16_time": round(statistics.median(ms["fp16"]) / statistics.median(ms["bf16"]), 4),
    }
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
