#!/usr/bin/env python3
"""Writes tests/golden/fp8/fp8_block.json: blockwise fp8 casts (Megatron's --fp8-recipe blockwise,
Transformer Engine's Float8BlockScaling) from an independent implementation, for
tests/unit/test_fp8_block.c.

Run from the repository root:

    python3 tools/reference/fp8_block_golden.py [--out FILE]

The block scales are written here from Transformer Engine's recipe (its compute_scale_from_amax):
per block amax = the largest magnitude; the scale is fp8_max / amax in fp32, 1 when amax is 0,
infinite or NaN, the largest fp32 when the quotient is infinite, and with power-of-two scales the
mantissa bits cleared. Values are multiplied by their block's scale in fp32, clamped to the
format's range (a saturating cast; NaN stays NaN) and cast by PyTorch's float8 dtypes when torch
is importable, else ml_dtypes' (round to nearest, ties to even). Blocks: 1 x 128 along rows, the
same along columns (the transpose's rows) and 128 x 128 tiles; partial blocks at the ends.

One input of 129 x 136 fp32 values (two row-blocks of tiles, two column blocks, partial ones):
log-uniform magnitudes of both signs from 2^-24 to 2^24, one all-zero row, an infinity, a NaN, a
row of values so small their scale overflows fp32, and a column of zeros. For e4m3 with and
without power-of-two scales and for e5m2 with them, "rows", "cols" and "tiles" hold the bytes (a
hex string, row-major: cols is the (136, 129) transpose) and the scale inverses (fp32 bits).
"""
import argparse
import json
import random
import struct

import numpy as np

try:
    import torch

    REF = f"torch {torch.__version__}"
    DT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

    def cast(x, fmt):
        return torch.from_numpy(x.astype(np.float32)).to(DT[fmt]).view(torch.uint8).numpy()
except ImportError:
    import ml_dtypes

    REF = f"ml_dtypes {ml_dtypes.__version__}"
    DT = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}

    def cast(x, fmt):
        return x.astype(np.float32).astype(DT[fmt]).view(np.uint8)

MAX = {"e4m3": np.float32(448.0), "e5m2": np.float32(57344.0)}
B = 128
ROWS, COLS = 129, 136


def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(np.float32(x))))[0]


def scale_of(amax, fmt, pow2):
    amax = np.float32(amax)
    if np.isnan(amax) or np.isinf(amax) or amax == 0:
        return np.float32(1.0)
    with np.errstate(over="ignore"):
        s = np.float32(MAX[fmt] / amax)
    if np.isinf(s):
        s = np.float32(np.finfo(np.float32).max)
    if pow2:
        s = np.array([s], dtype=np.float32).view(np.uint32) & np.uint32(0xFF800000)
        s = s.view(np.float32)[0]
    return np.float32(s)


def block_amax(x):
    a = np.abs(x.astype(np.float32))
    return np.float32(np.nan) if np.isnan(a).any() else np.float32(a.max())


def quantize(x, s, fmt):
    with np.errstate(over="ignore", invalid="ignore"):
        y = (x.astype(np.float32) * s).astype(np.float32)
    y = np.where(np.isnan(y), y, np.clip(y, -MAX[fmt], MAX[fmt])).astype(np.float32)
    return cast(y, fmt)


def by_rows(x, fmt, pow2):
    rows, cols = x.shape
    out = np.zeros((rows, cols), dtype=np.uint8)
    inv = []
    for r in range(rows):
        for c0 in range(0, cols, B):
            blk = x[r, c0:c0 + B]
            s = scale_of(block_amax(blk), fmt, pow2)
            out[r, c0:c0 + B] = quantize(blk, s, fmt)
            inv.append(bits(np.float32(1.0) / s))
    return out, inv


def by_tiles(x, fmt, pow2):
    rows, cols = x.shape
    out = np.zeros((rows, cols), dtype=np.uint8)
    inv = []
    for r0 in range(0, rows, B):
        for c0 in range(0, cols, B):
            blk = x[r0:r0 + B, c0:c0 + B]
            s = scale_of(block_amax(blk), fmt, pow2)
            out[r0:r0 + B, c0:c0 + B] = quantize(blk, s, fmt)
            inv.append(bits(np.float32(1.0) / s))
    return out, inv


def make_input(rng):
    x = np.array([rng.choice([-1.0, 1.0]) * 2.0 ** rng.uniform(-24, 24)
                  for _ in range(ROWS * COLS)], dtype=np.float32).reshape(ROWS, COLS)
    x[3, :] = 0.0                  # a row of zeros: scale 1
    x[5, 10] = np.inf              # an infinite amax: scale 1, the rest saturates
    x[7, 130] = np.nan             # a NaN amax: scale 1
    x[9, :] = np.float32(1e-41)    # subnormal: the scale overflows to the largest fp32
    x[:, 20] = 0.0                 # a column of zeros (its column blocks)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/fp8/fp8_block.json")
    a = ap.parse_args()
    x = make_input(random.Random(20261130))
    out = {"reference": REF, "rows": ROWS, "cols": COLS,
           "input": [bits(v) for v in x.reshape(-1)], "cases": []}
    for fmt, pow2 in (("e4m3", True), ("e4m3", False), ("e5m2", True)):
        r, ri = by_rows(x, fmt, pow2)
        c, ci = by_rows(np.ascontiguousarray(x.T), fmt, pow2)
        t, ti = by_tiles(x, fmt, pow2)
        out["cases"].append({"format": fmt, "pow2": pow2,
                             "rows": r.tobytes().hex(), "rows_scale_inv": ri,
                             "cols": c.tobytes().hex(), "cols_scale_inv": ci,
                             "tiles": t.tobytes().hex(), "tiles_scale_inv": ti})
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
