#!/usr/bin/env python3
"""Writes tests/golden/fp8/fp8.json: fp8 casts from an independent implementation, and the
scale sequences of Transformer Engine's delayed scaling, for tests/unit/test_fp8.c.

Run from the repository root:

    python3 tools/reference/fp8_golden.py [--out FILE]

Casts come from PyTorch's torch.float8_e4m3fn / torch.float8_e5m2 when torch is importable, else
from ml_dtypes' float8_e4m3fn / float8_e5m2 (the same OCP formats and the same rounding: to
nearest, ties to even; beyond the largest finite value NaN in e4m3fn, infinity in e5m2). The
file says which. For each format:
  "decode": the fp32 bit pattern of each of the 256 bytes (every NaN as 0x7fc00000, its sign
            kept);
  "inputs": fp32 bit patterns: the specials, every value of the format, every midpoint between
            neighbours and one fp32 step to either side of it, the edges of the subnormal range
            and of overflow, and log-uniform random values of both signs;
  "plain":  the byte of each input cast as is (non-saturating);
  "saturated": the byte of each input clamped to [-max, max] first (NaN stays NaN), which is
            what a saturating cast gives.

Delayed scaling is written here from Transformer Engine's recipe (transformer_engine/pytorch:
_default_get_amax_and_update_history, _update_amax_history and _default_sf_compute), in fp32:
after each step, amax = max of the history ("max") or its first entry ("most_recent"); the
history rolls one place toward the front, its first entry set to zero; the scale becomes
(fp8_max / amax) / 2^margin, kept as it was when amax is not positive or not finite, and the
largest fp32 when that quotient is infinite. Each case: "format", "len", "algo", "margin",
"amax" (the amax recorded at each step, fp32 bits), "scale" (fp32 bits after each update) and
"history" (the history after the last update, fp32 bits).
"""
import argparse
import json
import os
import random
import struct

import numpy as np

try:
    import torch

    REF = f"torch {torch.__version__}"
    FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

    def cast(x, fmt):
        t = torch.from_numpy(np.asarray(x, dtype=np.float32)).to(FORMATS[fmt])
        return t.view(torch.uint8).numpy().astype(int).tolist()

    def decode(fmt):
        b = torch.arange(256, dtype=torch.uint8).view(FORMATS[fmt])
        return b.to(torch.float32).numpy()
except ImportError:
    import ml_dtypes

    REF = f"ml_dtypes {ml_dtypes.__version__}"
    FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}

    def cast(x, fmt):
        return np.asarray(x, dtype=np.float32).astype(FORMATS[fmt]).view(np.uint8).astype(int).tolist()

    def decode(fmt):
        return np.arange(256, dtype=np.uint8).view(FORMATS[fmt]).astype(np.float32)

MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(np.float32(x))))[0]


def nan_bits(v):
    b = bits(v)
    return (b & 0x80000000) | 0x7FC00000 if np.isnan(v) else b


def inputs(fmt, rng):
    vals = decode(fmt)
    finite = np.sort(np.unique(np.abs(vals[np.isfinite(vals)])))
    xs = [0.0, -0.0, np.inf, -np.inf, np.nan, MAX[fmt], -MAX[fmt], 1e30, -1e30, 1e-30, 1e-45]
    xs += list(finite) + list(-finite)
    for a, b in zip(finite[:-1], finite[1:]):
        m = np.float32((np.float64(a) + np.float64(b)) / 2)
        xs += [m, np.nextafter(m, np.float32(0)), np.nextafter(m, np.float32(np.inf)), -m]
    top = np.float32(MAX[fmt])
    step = top - finite[-2]
    for k in (0.25, 0.5, 0.75, 1.0, 2.0):
        m = np.float32(top + k * step)
        xs += [m, np.nextafter(m, np.float32(0)), np.nextafter(m, np.float32(np.inf)), -m]
    for _ in range(4000):
        e = rng.uniform(-24 if fmt == "e4m3" else -20, 18)
        xs.append(rng.choice([-1.0, 1.0]) * 2.0 ** e)
    return np.array(xs, dtype=np.float32)


def cast_case(fmt, rng):
    xs = inputs(fmt, rng)
    sat = np.where(np.isnan(xs), xs, np.clip(xs, -MAX[fmt], MAX[fmt])).astype(np.float32)
    return {"decode": [nan_bits(v) for v in decode(fmt)], "inputs": [bits(v) for v in xs],
            "plain": cast(xs, fmt), "saturated": cast(sat, fmt)}


def delayed(fmt, length, algo, margin, amaxes):
    f32 = np.float32
    history = np.zeros(length, dtype=f32)
    scale = f32(1.0)
    scales = []
    for a in amaxes:
        history[0] = f32(a)  # the step's quantizations record their amax here
        amax = history.max() if algo == "max" else history[0]
        if np.isnan(history).any() and algo == "max":
            amax = f32(np.nan)  # torch.max propagates NaN
        if length > 1:
            history = np.roll(history, -1)
        history[0] = 0.0
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            sf = f32(f32(MAX[fmt]) / amax) / f32(2.0 ** margin)
        if not amax > 0:
            sf = scale
        if not np.isfinite(amax):
            sf = scale
        if np.isinf(sf):
            sf = f32(np.finfo(np.float32).max)
        scale = f32(sf)
        scales.append(bits(scale))
    return {"format": fmt, "len": length, "algo": algo, "margin": margin,
            "amax": [bits(a) for a in amaxes], "scale": scales,
            "history": [bits(v) for v in history]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/fp8/fp8.json")
    a = ap.parse_args()
    rng = random.Random(20261129)
    out = {"reference": REF, "casts": {f: cast_case(f, rng) for f in ("e4m3", "e5m2")},
           "delayed": []}
    for fmt in ("e4m3", "e5m2"):
        for length, algo, margin in ((1, "max", 0), (4, "max", 0), (16, "max", 1),
                                     (4, "most_recent", 0), (1024, "max", 0)):
            amaxes = [np.float32(rng.lognormvariate(0, 3)) for _ in range(24)]
            amaxes[3] = np.float32(0.0)  # nothing recorded: the scale stays
            amaxes[7] = np.float32(np.inf)  # an overflow: the scale stays while it is in the history
            amaxes[12] = np.float32(1e-40)  # a subnormal amax: the quotient is infinite
            amaxes[20] = np.float32(np.nan)
            out["delayed"].append(delayed(fmt, length, algo, margin, amaxes))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out} ({REF})")


if __name__ == "__main__":
    main()
