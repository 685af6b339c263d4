#!/usr/bin/env python3
"""Writes tests/golden/rope_partial.golden: partial rotary embeddings (--rotary-percent) from
Hugging Face transformers' GPT-NeoX rotary code, the reference for the backend's rope ops.

Run from the repository root:  python3 tools/reference/make_rope_golden.py [--megatron DIR]
Needs torch, transformers (GPT-NeoX's `partial_rotary_factor`, alias `rotary_pct`) and numpy.
CI never runs it: the output is committed (tests/unit/test_rope.c reads it).

GPT-NeoX rotates the first int(head_dim * partial_rotary_factor) channels of every query and key
head in the rotate-half form, with inv_freq = 1 / base^(arange(0, dim, 2) / dim), and passes the
rest through: Megatron's RotaryEmbedding + _apply_rotary_pos_emb_bshd (`t, t_pass = t[...,
:rot_dim], t[..., rot_dim:]`). The script also checks HF's result against a direct numpy
statement of that formula, and with --megatron DIR (a directory holding megatron/core, e.g.
`git archive` of Megatron-LM) against megatron-core's own RotaryEmbedding frequencies and
_apply_rotary_pos_emb_bshd.

The input is the backend's fused QKV buffer (backend.h: per query group r = nq/ng query heads,
then the key head, then the value head, each hd wide), N = B x S rows. For each case NAME:
  NAME.dims     int32 (6)     B, S, nq, ng, hd, rd (rd = int(hd * percent))
  NAME.percent  float32 (1)   --rotary-percent
  NAME.base     float32 (1)   --rotary-base
  NAME.cos      float32 (S, rd/2)   cos(s * inv_freq[i]), HF's table (first half; HF repeats it)
  NAME.sin      float32 (S, rd/2)
  NAME.qkv      float32 (N, C)      the input, C = ng * (r + 2) * hd
  NAME.out      float32 (N, C)      rope at positions i % S (values untouched)
  NAME.pos      int32 (N)           arbitrary positions in [0, S) (e.g. --reset-position-ids)
  NAME.out_pos  float32 (N, C)      rope at positions pos
  NAME.r        float32 (N, C)      a random cotangent
  NAME.grad     float32 (N, C)      d(sum(out_pos * r)) / d(qkv), by autograd: the backward
"""

import argparse
import os
import struct
import sys

import numpy as np
import torch
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    GPTNeoXRotaryEmbedding,
    apply_rotary_pos_emb,
)

OUT = os.path.join("tests", "golden", "rope_partial.golden")

# name, B, S, nq, ng, hd, percent, base: GQA with an odd rd/2; one KV group; whole heads
CASES = [
    ("gqa_half", 2, 7, 4, 2, 12, 0.5, 10000.0),
    ("mqa_quarter", 1, 5, 2, 1, 16, 0.25, 500.0),
    ("mha_third", 2, 4, 2, 2, 18, 0.34, 10000.0),  # int(18 * 0.34) = int(6.12) = 6
    ("whole", 1, 6, 2, 2, 8, 1.0, 10000.0),
]


def hf_cos_sin(hd, nq, percent, base, positions):
    cfg = GPTNeoXConfig(hidden_size=hd * nq, num_attention_heads=nq, rotary_pct=percent,
                        rotary_emb_base=base, max_position_embeddings=64)  # fmt: skip
    assert cfg.rope_parameters["partial_rotary_factor"] == percent
    rot = GPTNeoXRotaryEmbedding(cfg)
    cos, sin = rot(torch.zeros(1, dtype=torch.float32), positions[None].long())
    return cos[0], sin[0]  # (len(positions), rd), the rd/2 angles repeated


def split_heads(qkv, nq, ng, hd):
    r = nq // ng
    g = qkv.reshape(qkv.shape[0], ng, r + 2, hd)
    q = g[:, :, :r].reshape(qkv.shape[0], nq, hd)
    k = g[:, :, r]
    return q, k, g[:, :, r + 1]


def join_heads(q, k, v, nq, ng, hd):
    r = nq // ng
    n = q.shape[0]
    return torch.cat([q.reshape(n, ng, r, hd), k[:, :, None], v[:, :, None]], 2).reshape(n, -1)


def hf_rope(qkv, nq, ng, hd, percent, base, positions):
    cos, sin = hf_cos_sin(hd, nq, percent, base, positions)
    q, k, v = split_heads(qkv, nq, ng, hd)
    qe, ke = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)
    return join_heads(qe, ke, v, nq, ng, hd)


def numpy_rope(qkv, nq, ng, hd, rd, base, positions):
    """Megatron's formula, directly: x[:rd] -> x cos + rotate_half(x) sin, in float64."""
    x = qkv.astype(np.float64).reshape(qkv.shape[0], ng, nq // ng + 2, hd).copy()
    inv = 1.0 / base ** (np.arange(0, rd, 2) / rd)
    ang = positions[:, None].astype(np.float64) * inv[None]  # (N, rd/2)
    c, s = np.cos(ang)[:, None, None], np.sin(ang)[:, None, None]
    h = rd // 2
    t = x[:, :, : nq // ng + 1]  # queries and the key
    x1, x2 = t[..., :h].copy(), t[..., h:rd].copy()
    t[..., :h] = x1 * c - x2 * s
    t[..., h:rd] = x2 * c + x1 * s
    return x.reshape(qkv.shape[0], -1)


def megatron_rope(mdir, qkv, nq, ng, hd, percent, base, positions):
    sys.path.insert(0, mdir)
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    rot = RotaryEmbedding(hd, percent, rotary_base=base, use_cpu_initialization=True)
    table = rot.get_freqs_non_repeated(int(positions.max()) + 1)  # (S, dim/2) angles
    freqs = torch.cat([table, table], -1)[positions.long()]  # (N, rot_dim)
    q, k, v = split_heads(qkv, nq, ng, hd)
    qe = _apply_rotary_pos_emb_bshd(q, freqs[:, None])
    ke = _apply_rotary_pos_emb_bshd(k, freqs[:, None])
    return join_heads(qe, ke, v, nq, ng, hd)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def write_golden(path, records):
    """MGGOLDEN v1 (tests/golden/README.md)."""
    parts = [b"MGGOLDEN", struct.pack("<II", 1, len(records))]
    for name, arr in records:
        arr = np.ascontiguousarray(arr)
        dtype = {np.dtype(np.float32): 0, np.dtype(np.int32): 1}[arr.dtype]
        nb = name.encode()
        parts.append(struct.pack("<I", len(nb)) + nb)
        parts.append(struct.pack("<II", dtype, arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape))
        parts.append(arr.astype("<f4" if dtype == 0 else "<i4").tobytes())
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", metavar="DIR", help="also compare with megatron-core in DIR")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    records = []
    for name, B, S, nq, ng, hd, percent, base in CASES:
        rd = int(hd * percent) if percent < 1.0 else hd  # Megatron's RotaryEmbedding
        assert rd % 2 == 0 and 0 < rd <= hd, name
        N, C = B * S, ng * (nq // ng + 2) * hd
        qkv = torch.randn(N, C, generator=gen)
        pos = torch.randint(0, S, (N,), generator=gen, dtype=torch.int32)
        r = torch.randn(N, C, generator=gen)
        default_pos = torch.arange(N, dtype=torch.int32) % S
        cos, sin = hf_cos_sin(hd, nq, percent, base, torch.arange(S))
        assert torch.equal(cos[:, : rd // 2], cos[:, rd // 2 :]), "HF repeats the angles"
        out = hf_rope(qkv, nq, ng, hd, percent, base, default_pos)
        x = qkv.clone().requires_grad_(True)
        out_pos = hf_rope(x, nq, ng, hd, percent, base, pos)
        (out_pos * r).sum().backward()
        for p, o in ((default_pos, out), (pos, out_pos.detach())):
            e = rel(o.numpy(), numpy_rope(qkv.numpy(), nq, ng, hd, rd, base, p.numpy()))
            assert e < 2e-6, f"{name}: HF differs from the numpy formula by {e:g}"
            if args.megatron:
                m = megatron_rope(args.megatron, qkv, nq, ng, hd, percent, base, p)
                e = rel(o.numpy(), m.numpy())
                assert e < 2e-6, f"{name}: HF differs from megatron-core by {e:g}"
        untouched = qkv[:, :].reshape(N, ng, nq // ng + 2, hd)
        assert torch.equal(out.reshape(N, ng, nq // ng + 2, hd)[..., rd:], untouched[..., rd:])
        assert torch.equal(out.reshape(N, ng, -1, hd)[:, :, -1], untouched[:, :, -1])
        records += [
            (f"{name}.dims", np.array([B, S, nq, ng, hd, rd], np.int32)),
            (f"{name}.percent", np.array([percent], np.float32)),
            (f"{name}.base", np.array([base], np.float32)),
            (f"{name}.cos", cos[:, : rd // 2].numpy()),
            (f"{name}.sin", sin[:, : rd // 2].numpy()),
            (f"{name}.qkv", qkv.numpy()),
            (f"{name}.out", out.numpy()),
            (f"{name}.pos", pos.numpy()),
            (f"{name}.out_pos", out_pos.detach().numpy()),
            (f"{name}.r", r.numpy()),
            (f"{name}.grad", x.grad.numpy()),
        ]
        print(f"{name}: B {B} S {S} nq {nq} ng {ng} hd {hd} percent {percent} -> rd {rd}"
              + (" (megatron-core agrees)" if args.megatron else ""))  # fmt: skip
    write_golden(OUT, records)
    print(f"wrote {OUT}: {len(records)} records")


if __name__ == "__main__":
    main()
