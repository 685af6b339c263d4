#!/usr/bin/env python3
"""Writes tests/golden/grad_scaler/megatron_grad_scaler.json: the loss scale and trackers of
Megatron-LM's DynamicGradScaler after each update, for a few settings and overflow sequences.

Run from the repository root (torch must be importable):

    python3 tools/reference/megatron_grad_scaler.py [--megatron-git DIR]

DIR is a Megatron-LM git repository (bare is fine; default /work/.mirror/NVIDIA+Megatron-LM/repo).
megatron/core/optimizer/grad_scaler.py is read with `git show` and imported with its tensors
placed on the CPU (its only change: device='cuda' -> 'cpu', .cuda(...) dropped). CI never runs
it; tests/unit/test_grad_scaler.c replays every case through train/grad_scaler.c.

Output: {"megatron_commit", "cases": [{"name", "initial", "min", "window", "hysteresis",
"found_inf": [0/1 per step], "scale": [fp32 scale after each update; 1e999: inf], "growth":
[growth tracker], "hysteresis_left": [hysteresis tracker]}]}.
"""
import argparse
import json
import random
import subprocess
import types

import torch


def load_scaler_module(git_dir):
    commit = subprocess.check_output(["git", "-C", git_dir, "rev-parse", "HEAD"], text=True).strip()
    src = subprocess.check_output(
        ["git", "-C", git_dir, "show", f"{commit}:megatron/core/optimizer/grad_scaler.py"], text=True)
    src = src.replace("device='cuda'", "device='cpu'").replace(
        ".cuda(torch.cuda.current_device())", "")
    mod = types.ModuleType("grad_scaler")
    exec(compile(src, "grad_scaler.py", "exec"), mod.__dict__)
    return commit, mod


def run_case(mod, name, initial, min_scale, window, hysteresis, flags):
    s = mod.DynamicGradScaler(initial_scale=initial, min_scale=min_scale, growth_factor=2.0,
                              backoff_factor=0.5, growth_interval=window, hysteresis=hysteresis)
    scale, growth, hyst = [], [], []
    for f in flags:
        s.update(bool(f))
        scale.append(float(s.scale.item()))
        growth.append(int(s._growth_tracker))
        hyst.append(int(s._hysteresis_tracker))
    return {"name": name, "initial": initial, "min": min_scale, "window": window,
            "hysteresis": hysteresis, "found_inf": flags, "scale": scale, "growth": growth,
            "hysteresis_left": hyst}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megatron-git", default="/work/.mirror/NVIDIA+Megatron-LM/repo")
    ap.add_argument("--out", default="tests/golden/grad_scaler/megatron_grad_scaler.json")
    a = ap.parse_args()
    commit, mod = load_scaler_module(a.megatron_git)
    rng = random.Random(20261126)
    cases = [
        # Megatron's defaults, the fp16 start: overflows until the scale fits, then clean steps
        run_case(mod, "defaults_start", 2.0**32, 1.0, 1000, 2, [1] * 20 + [0] * 30),
        # growth after a short window, hysteresis restored by it
        run_case(mod, "window3_h2", 65536.0, 1.0, 3, 2,
                 [0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0]),
        # the floor
        run_case(mod, "floor", 8.0, 2.0, 1000, 1, [1] * 6 + [0, 1]),
        # hysteresis 1: every overflow halves
        run_case(mod, "h1_random", 1024.0, 1.0, 4, 1, [int(rng.random() < 0.3) for _ in range(60)]),
        # a window that is not an integer never grows (Megatron compares an int with it)
        run_case(mod, "window_2_5", 512.0, 1.0, 2.5, 3, [0] * 8 + [1, 1, 1, 1, 0, 0, 0]),
        # growth past the fp32 range: the scale becomes inf, as Megatron's fp32 tensor does
        run_case(mod, "overflow_growth", 2.0**125, 1.0, 1, 2, [0] * 5),
        run_case(mod, "h3_random", 2.0**20, 0.5, 5, 3, [int(rng.random() < 0.4) for _ in range(80)]),
    ]
    text = json.dumps({"megatron_commit": commit, "cases": cases}, separators=(",", ":"))
    with open(a.out, "w") as f:  # an infinite scale as 1e999 (strtod's inf; JSON has no Infinity)
        f.write(text.replace("Infinity", "1e999") + "\n")


if __name__ == "__main__":
    main()
