#!/usr/bin/env python3
"""Regenerates the golden vectors in tests/golden/ from Hugging Face transformers (PyTorch, CPU).

Run from the repository root:  python3 tools/reference/make_golden.py
Needs torch, transformers, safetensors and numpy. CI never runs this: the outputs are committed.

For each tiny model (GPT-2 and Llama) it writes
  tests/golden/<name>.safetensors  the initial weights under Hugging Face names (what the C
                                   checkpoint loader reads; GPT-2's tied lm_head.weight is omitted)
  tests/golden/<name>.json         {"args": [...]}: the Megatron flags describing the same model and
                                   the training run below
  tests/golden/<name>.golden       the vectors, in the MGGOLDEN format of tests/golden/README.md
and, for the safetensors reader's interoperability test, tests/golden/st_python.safetensors.

Everything is float32 with fixed seeds, one CPU thread (so that reductions do not depend on the
machine's core count) and deterministic algorithms: a rerun writes identical bytes on the same
torch version and CPU family.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

OUT_DIR = os.path.join("tests", "golden")
SEED = 1234
BATCH, SEQ, VOCAB = 4, 16, 128

# Training hyper-parameters, shared by both models (and spelled as Megatron flags in TRAIN_ARGS).
TRAIN_ITERS = 3
MAX_LR, MIN_LR = 1e-2, 1e-3
WARMUP, DECAY_ITERS = 1, 3
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
# Adam divides by sqrt(v) + eps: with eps = 1e-8 an element whose gradient is ~1e-9 (a
# cancellation, e.g. GPT-2's key bias, whose exact gradient is zero) turns fp32 summation-order noise
# of ~1e-11 into an update difference of ~lr/100, so two correct fp32 implementations disagree by
# ~2e-4 after 3 steps (float64 vs float32 PyTorch measured 2e-4 / 6e-4). eps = 1e-5 keeps Adam's
# normalisation for real gradients (~1e-4 here after clipping) and bounds that amplification to
# lr/eps = 1e3, so the parameters after 3 steps can be compared at 1e-5.
ADAM_EPS = 1e-5
CLIP_GRAD = 0.05  # small enough that clipping triggers on every step (checked below)

TRAIN_ARGS = [
    "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(TRAIN_ITERS),
    "--lr", "1e-2", "--min-lr", "1e-3", "--lr-decay-style", "cosine",
    "--lr-warmup-iters", str(WARMUP), "--lr-decay-iters", str(DECAY_ITERS),
    "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-5",
    "--clip-grad", "0.05", "--seed", str(SEED),
]  # fmt: skip

GPT2_ARGS = [
    "--num-layers", "2", "--hidden-size", "48", "--num-attention-heads", "4",
    "--seq-length", str(SEQ), "--max-position-embeddings", "32", "--vocab-size", str(VOCAB),
    "--make-vocab-size-divisible-by", "128", "--norm-epsilon", "1e-5",
]  # fmt: skip

LLAMA_ARGS = [
    "--num-layers", "2", "--hidden-size", "48", "--ffn-hidden-size", "96",
    "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
    "--seq-length", str(SEQ), "--max-position-embeddings", "32", "--vocab-size", str(VOCAB),
    "--make-vocab-size-divisible-by", "128", "--normalization", "RMSNorm", "--swiglu",
    "--position-embedding-type", "rope", "--rotary-base", "10000", "--disable-bias-linear",
    "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-5",
]  # fmt: skip

DTYPE_F32, DTYPE_I32 = 0, 1


def megatron_lr(n):
    """Megatron's OptimizerParamScheduler.get_lr after n scheduler steps (lr_warmup_init = 0)."""
    if WARMUP > 0 and n <= WARMUP:
        return MAX_LR * n / WARMUP
    if n > DECAY_ITERS:
        return MIN_LR
    ratio = (n - WARMUP) / (DECAY_ITERS - WARMUP)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (MAX_LR - MIN_LR)


def clip_and_step(name, k, params, opt):
    """Step k of Megatron's update: global-norm clipping (which must bite, so the tests cover it),
    then AdamW at step k's learning rate. Returns (the norm before clipping, the lr)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=CLIP_GRAD, norm_type=2.0, foreach=False)
    if not norm.item() > CLIP_GRAD:
        sys.exit(f"{name}: step {k} grad norm {norm.item()} does not exceed clip {CLIP_GRAD}")
    lr = megatron_lr(k)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    return norm.item(), lr


def make_gpt2():
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=48, n_layer=2, n_head=4,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True, initializer_range=0.02,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    return GPT2LMHeadModel(cfg)


def make_llama():
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu", attention_dropout=0.0, initializer_range=0.02,
        bos_token_id=0, eos_token_id=0, pad_token_id=None, attn_implementation="eager",
    )  # fmt: skip
    return LlamaForCausalLM(cfg)


def is_norm(name):
    return any(k in name for k in ("ln_1", "ln_2", "ln_f", "layernorm", "norm.weight"))


OUT_PROJ = ("attn.c_proj.weight", "mlp.c_proj.weight", "o_proj.weight", "down_proj.weight")


def init_tensor(name, shape, gen, num_layers, out_proj=OUT_PROJ):
    """The initial value of one parameter (see init_params); draws its noise from gen."""
    noise = torch.randn(shape, generator=gen, dtype=torch.float32)
    if is_norm(name) and name.endswith("weight"):
        return 1.0 + 0.1 * noise
    if name.endswith("bias"):
        return 0.02 * noise
    if name.endswith(out_proj):
        return 0.02 / math.sqrt(2.0 * num_layers) * noise
    return 0.02 * noise


def init_params(model, gen, num_layers):
    """Our own initialisation from one generator, in named_parameters order, so the weights do not
    depend on transformers' init code. Matrices and embeddings ~ N(0, 0.02), output projections
    scaled by 1/sqrt(2L) as Megatron does; norm weights 1 + N(0, 0.1) and every bias N(0, 0.02),
    so that none of them is trivially 1 or 0."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_tensor(name, p.shape, gen, num_layers))


def wants_decay(p):
    """Megatron: no weight decay on biases and norm weights (1-D), decay on matrices/embeddings."""
    return p.dim() >= 2


def run_model(name, model, megatron_args, num_layers):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = model.float().eval()  # eval: no dropout anywhere (all p are 0 anyway)
    init_params(model, gen, num_layers)
    params = list(model.named_parameters())  # tied weights appear once (wte, not lm_head)

    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)

    # The weight file, written before any step.
    weights = {n: p.detach().clone().contiguous() for n, p in params}
    st_path = os.path.join(OUT_DIR, f"{name}.safetensors")
    save_file(weights, st_path)

    # Coverage: every parameter is in the weight file, and nothing else is.
    sd_keys = set(model.state_dict().keys())
    param_names = {n for n, _ in params}
    tied = sorted(sd_keys - param_names)
    missing = sorted(param_names - set(weights))
    if missing:
        sys.exit(f"{name}: parameters missing from {st_path}: {missing}")

    records = [
        ("tokens", tokens.to(torch.int32)),
        ("targets", targets.to(torch.int32)),
    ]

    decay = [p for _, p in params if wants_decay(p)]
    no_decay = [p for _, p in params if not wants_decay(p)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=0.0, betas=BETAS, eps=ADAM_EPS, foreach=False, fused=False,
    )  # fmt: skip

    step_loss, step_norm, step_lr = [], [], []
    for k in range(TRAIN_ITERS):
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=tokens).logits  # (B, S, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        if k == 0:
            records.append(("logits", logits.detach().clone()))
            records.append(("loss", loss.detach().reshape(1).clone()))
            for n, p in params:
                records.append((f"grad.{n}", p.grad.detach().clone()))
        norm, lr = clip_and_step(name, k, [p for _, p in params], opt)
        step_loss.append(loss.item())
        step_norm.append(norm)
        step_lr.append(lr)

    records.append(("step_loss", torch.tensor(step_loss, dtype=torch.float32)))
    records.append(("step_grad_norm", torch.tensor(step_norm, dtype=torch.float32)))
    records.append(("step_lr", torch.tensor(step_lr, dtype=torch.float32)))
    for n, p in params:
        records.append((f"final.{n}", p.detach().clone()))

    write_golden(os.path.join(OUT_DIR, f"{name}.golden"), records)
    with open(os.path.join(OUT_DIR, f"{name}.json"), "w") as f:
        json.dump({"args": megatron_args + TRAIN_ARGS}, f)
        f.write("\n")

    nparams = sum(p.numel() for _, p in params)
    print(f"{name}: {len(params)} parameter tensors, {nparams} parameters, all in {st_path}"
          + (f" (tied, not stored: {', '.join(tied)})" if tied else ""))  # fmt: skip
    print(f"{name}: initial loss {step_loss[0]:.6f} (ln {VOCAB} = {math.log(VOCAB):.6f})")
    for k in range(TRAIN_ITERS):
        print(f"{name}: step {k}: loss {step_loss[k]:.6f}  pre-clip grad norm {step_norm[k]:.6f}"
              f" (clip {CLIP_GRAD})  lr {step_lr[k]:.6g}")  # fmt: skip
    print(f"{name}: {len(records)} golden records")


def write_golden(path, records):
    """MGGOLDEN v1: magic, u32 version, u32 count, then per record u32 name length, name, u32 dtype
    (0 f32, 1 i32), u32 ndim, i64 shape[ndim], data; little-endian, C order."""
    parts = [b"MGGOLDEN", struct.pack("<II", 1, len(records))]
    for name, t in records:
        if t.dtype == torch.float32:
            dtype, arr = DTYPE_F32, t.contiguous().numpy().astype("<f4")
        elif t.dtype == torch.int32:
            dtype, arr = DTYPE_I32, t.contiguous().numpy().astype("<i4")
        else:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        nb = name.encode()
        parts.append(struct.pack("<I", len(nb)) + nb)
        parts.append(struct.pack("<II", dtype, t.dim()) + struct.pack(f"<{t.dim()}q", *t.shape))
        parts.append(arr.tobytes())
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def make_st_python():
    """A small file in every dtype the C reader knows, values exactly representable and given by
    simple formulas that tests/unit/test_safetensors.c recomputes."""
    tensors = {
        "a.f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1.0,
        "b.bf16": ((torch.arange(4, dtype=torch.float32) - 2.0) * 0.25).to(torch.bfloat16),
        "c.f16": (torch.arange(8, dtype=torch.float32).reshape(2, 2, 2) / 8.0 - 0.5).half(),
        "d.i32": torch.tensor([-2, -1, 0, 1, 2**31 - 1], dtype=torch.int32),
        "e.i64": torch.tensor([-(2**40), 0, 2**62], dtype=torch.int64),
        "f.scalar": torch.tensor(3.25, dtype=torch.float32),
        "g.empty": torch.zeros(0, 4, dtype=torch.float32),
        "h.4d": torch.arange(24, dtype=torch.float32).reshape(1, 2, 3, 4),
    }
    path = os.path.join(OUT_DIR, "st_python.safetensors")
    # One metadata key only: the library keeps metadata in a Rust HashMap, so the order of several
    # keys in the header changes from run to run and the file would not be reproducible.
    save_file(tensors, path, metadata={"format": "pt"})
    print(f"st_python: {len(tensors)} tensors in {path}")


def main():
    if not os.path.isdir(OUT_DIR):
        sys.exit(f"run from the repository root ({OUT_DIR}/ not found)")
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    make_st_python()
    run_model("gpt2", make_gpt2(), GPT2_ARGS, num_layers=2)
    run_model("llama", make_llama(), LLAMA_ARGS, num_layers=2)


if __name__ == "__main__":
    main()
