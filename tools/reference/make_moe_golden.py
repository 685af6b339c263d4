#!/usr/bin/env python3
"""Golden vectors for three tiny Mixture-of-Experts models (PyTorch, CPU, float32).

Run from the repository root:

    python3 tools/reference/make_moe_golden.py                      # writes the files, ~5 s
    python3 tools/reference/make_moe_golden.py --megatron DIR       # + checks against Megatron
    python3 tools/reference/make_moe_golden.py --float64-check      # + float64 vs float32

Needs torch, transformers, safetensors and numpy. CI never runs this: the outputs are committed.
--megatron DIR (a directory holding megatron/core, e.g. a Megatron-LM checkout) compares every
routing decision, routing probability, aux loss and z-loss of the run, values and gradients with
respect to the router logits, with megatron-core's own moe_utils functions on the same logits.
--float64-check reruns every model in float64 and prints the measured differences (the
tolerances in tests/golden/README.md); neither option changes what is written.

Same conventions as make_golden.py (imported, not copied: the batch, TRAIN_ARGS, the
initialisation rule, the clipped AdamW loop with Megatron's LR schedule and the MGGOLDEN writer).
For each model NAME in mixtral, moe_sigmoid, moe_capacity it writes
  tests/golden/NAME.safetensors  initial weights, float32, Mixtral Hub names for the MoE tensors
                                 and Llama names for the rest (+ the expert bias, if any)
  tests/golden/NAME.json         {"args": [...]}: the Megatron flags of the model and the run
  tests/golden/NAME.golden       the vectors (tests/golden/README.md, "MoE models")

- mixtral: Hugging Face MixtralForCausalLM itself (its forward gives the logits and, with
  output_router_logits, the router logits); Megatron's aux loss and z-loss are added from them.
- moe_sigmoid, moe_capacity: an HF Llama skeleton whose MLPs are replaced by MoEBlock below, a
  restatement of megatron-core's TopKRouter and MoE layer (router.py, moe_utils.py at Megatron-LM
  d98e8a64): sigmoid scores, expert bias, group-limited top-k, top-k scaling, shared expert,
  seq_aux_loss, z-loss; pre-softmax, token dropping by capacity, GELU experts, a dense layer.
  MoEBlock is checked against HF's Mixtral block (same weights and micro-batch: logits, objective
  and every gradient) before anything is written.

A step's objective is Megatron's: (1/n_mb) sum over micro-batches of [mean CE of the micro-batch
+ sum over MoE layers of (aux coeff * L_aux + z coeff * L_z)]; the reported loss is the LM loss.
Routing is a discrete decision: the script checks that every top-k, group and capacity choice
(and the aux loss's own top-k) wins by at least MIN_MARGIN, far above float32 rounding, so that a
correct float32 reimplementation makes the same choices.
"""

import argparse
import json
import math
import os
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import MixtralConfig, MixtralForCausalLM
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402

SEQ, VOCAB, BATCH = mg.SEQ, mg.VOCAB, mg.BATCH
HIDDEN, NUM_LAYERS = 48, 2
MICRO_BATCH = 2  # TRAIN_ARGS: --micro-batch-size 2 --global-batch-size 4
NUM_MICRO = BATCH // MICRO_BATCH
MOE_OUT_PROJ = mg.OUT_PROJ + ("w2.weight",)  # expert fc2 is an output projection (1/sqrt(2L))
# Router weights N(0, 0.1) rather than 0.02: with 0.02 the sigmoid scores of 8 experts are all
# 0.5 +- 0.035 and some top-k choices win by < 1e-5, too close for two float32 implementations.
ROUTER_STD = 0.1
EXPERT_BIAS_STD = 0.02  # initial expert bias N(0, 0.02): moves some choices, idles no expert
# Smallest gap allowed between the last chosen and the best rejected score of any routing decision
# (router logits agree to ~1e-7 between float32 implementations; see --float64-check).
MIN_MARGIN = 5e-5


def llama_args(ffn, swiglu=True):
    """make_golden's Llama flags with another --ffn-hidden-size (and without --swiglu)."""
    args = list(mg.LLAMA_ARGS)
    args[args.index("--ffn-hidden-size") + 1] = str(ffn)
    if not swiglu:
        args.remove("--swiglu")
    return args


# fmt: off
MIXTRAL = SimpleNamespace(
    E=4, k=2, F=64, swiglu=True, score="softmax", pre_softmax=False, num_groups=None,
    group_topk=None, scaling=None, capacity=None, shared=None, expert_bias=False, bias_rate=None,
    lb_type="aux_loss", aux_coeff=0.01, z_coeff=0.001, moe_layers=[0, 1], dense_ffn=None,
    args=llama_args(64) + [
        "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "64",
        "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "0.01",
        "--moe-z-loss-coeff", "0.001", "--moe-token-dispatcher-type", "alltoall",
    ])
# Groups: 2 groups of 4 experts, 1 chosen per token (group score = sum of its top-2 scores). The
# 4-groups/2-chosen layout would be a no-op with top-2: each group's score is then its best expert,
# and the two best experts always lie in the two best groups.
MOE_SIGMOID = SimpleNamespace(
    E=8, k=2, F=32, swiglu=True, score="sigmoid", pre_softmax=False, num_groups=2, group_topk=1,
    scaling=2.5, capacity=None, shared=32, expert_bias=True, bias_rate=0.01,
    lb_type="seq_aux_loss", aux_coeff=0.01, z_coeff=0.001, moe_layers=[0, 1], dense_ffn=None,
    args=llama_args(32) + [
        "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
        "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
        "--moe-router-bias-update-rate", "0.01", "--moe-router-num-groups", "2",
        "--moe-router-group-topk", "1", "--moe-router-topk-scaling-factor", "2.5",
        "--moe-shared-expert-intermediate-size", "32",
        "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01",
        "--moe-z-loss-coeff", "0.001", "--moe-token-dispatcher-type", "alltoall",
    ])
MOE_CAPACITY = SimpleNamespace(
    E=4, k=2, F=64, swiglu=False, score="softmax", pre_softmax=True, num_groups=None,
    group_topk=None, scaling=None, capacity=1.0, shared=None, expert_bias=False, bias_rate=None,
    lb_type="aux_loss", aux_coeff=0.01, z_coeff=None, moe_layers=[0], dense_ffn=96,
    args=llama_args(96, swiglu=False) + [
        "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "64",
        "--moe-router-pre-softmax", "--moe-expert-capacity-factor", "1.0",
        "--moe-token-drop-policy", "probs", "--moe-layer-freq", "[1,0]",
        "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "0.01",
        "--moe-token-dispatcher-type", "alltoall",
    ])
# fmt: on

MEGATRON = None  # megatron.core.transformer.moe.moe_utils, with --megatron


class Stats:
    """Routing margins (smallest winning gap per kind of decision) and event counts."""

    def __init__(self):
        self.margin = {}
        self.count = {}
        self.hf_probs_diff = 0.0
        self.megatron_checks = 0
        self.megatron_diff = 0.0

    def gap(self, kind, values, k):
        """values (rows, n): the k largest are chosen; record min over rows of v[k-1] - v[k]."""
        if kind is None or values.shape[-1] <= k:
            return
        top = torch.topk(values.detach(), k + 1, dim=-1)[0]
        chosen, rejected = top[..., k - 1], top[..., k]
        ok = torch.isfinite(rejected)  # -inf: fewer than k + 1 candidates, nothing rejected
        if ok.any():
            g = (chosen - rejected)[ok].min().item()
            self.margin[kind] = min(self.margin.get(kind, math.inf), g)

    def add(self, kind, n):
        self.count[kind] = self.count.get(kind, 0) + int(n)


STATS = Stats()


def selection_sets(idx, E):
    return torch.zeros(idx.shape[0], E, dtype=torch.bool).scatter(1, idx, True)


def select_topk(sel, spec, stats_kind="select"):
    """Megatron's _compute_topk: plain top-k, or group_limited_topk when group_topk is set."""
    T, E = sel.shape
    if not spec.group_topk:
        STATS.gap(stats_kind, sel, spec.k)
        return torch.topk(sel, spec.k, dim=-1)[1]
    G, g = spec.num_groups, spec.group_topk
    group_scores = sel.view(T, G, -1).topk(spec.k // g, dim=-1)[0].sum(dim=-1)
    STATS.gap(None if stats_kind is None else "group", group_scores, g)
    group_idx = torch.topk(group_scores, k=g, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(T, G, E // G).reshape(T, -1)
    masked = sel.masked_fill(~score_mask.bool(), float("-inf"))
    STATS.gap(stats_kind, masked, spec.k)
    return torch.topk(masked, spec.k, dim=-1)[1]


def route(logits, spec, bias, count_events):
    """topk_routing_with_score_function + apply_router_token_dropping on (T, E) logits.
    Returns the sparse routing probabilities (T, E) and the routing map (T, E) bool."""
    T, E = logits.shape
    k, dt = spec.k, logits.dtype
    if spec.score == "softmax":
        if spec.pre_softmax:
            scores = torch.softmax(logits, dim=-1, dtype=dt)
            idx = select_topk(scores, spec)
            probs = torch.gather(scores, 1, idx)
        else:
            idx = select_topk(logits, spec)
            probs = torch.softmax(torch.gather(logits, 1, idx), dim=-1, dtype=dt)
    else:  # sigmoid
        scores = torch.sigmoid(logits)
        if bias is not None:
            idx = select_topk(scores + bias, spec)
            if count_events:  # tokens whose expert set the bias changes
                plain = select_topk(scores.detach(), spec, stats_kind=None)
                diff = selection_sets(plain, E) != selection_sets(idx, E)
                STATS.add("bias_changes_selection", diff.any(dim=-1).sum())
        else:
            idx = select_topk(scores, spec)
        if count_events and spec.group_topk:  # tokens whose expert set the group limit changes
            sel = scores if bias is None else scores + bias
            ungrouped = torch.topk(sel.detach(), k, dim=-1)[1]
            diff = selection_sets(ungrouped, E) != selection_sets(idx, E)
            STATS.add("groups_change_selection", diff.any(dim=-1).sum())
        probs = torch.gather(scores, 1, idx)
        if k > 1:
            probs = probs / (probs.sum(dim=-1, keepdim=True) + 1e-20)
    if spec.scaling:
        probs = probs * spec.scaling
    routing_probs = torch.zeros_like(logits).scatter(1, idx, probs)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter(1, idx, True)

    if spec.capacity is not None:
        capacity = math.ceil((T * k / E) * spec.capacity)  # get_capacity(T * topk, E, factor)
        if capacity <= T:  # Megatron drops nothing when capacity > num_tokens
            p = routing_probs.detach()
            # drop policy "probs": per expert keep the `capacity` largest probabilities
            STATS.gap("capacity", p.masked_fill(~routing_map, float("-inf")).t(), capacity)
            cap_idx = torch.topk(p, k=capacity, dim=0, sorted=False)[1]
            cap_mask = torch.zeros_like(p).scatter(0, cap_idx, 1).bool()
            kept = routing_map & cap_mask
            if count_events:
                STATS.add("dropped_pairs", (routing_map & ~kept).sum())
            routing_map = kept
            routing_probs = routing_probs * kept
    return routing_probs, routing_map


def aux_terms(logits, spec, B, S):
    """Megatron's aux loss (aux_loss or seq_aux_loss) and z-loss of one micro-batch, without their
    coefficients. logits (B*S, E), rows batch-major (row b*S + s)."""
    T, E = logits.shape
    k = spec.k
    # compute_routing_scores_for_aux_loss: its own top-k, no bias, no groups
    if spec.score == "softmax":
        scores = torch.softmax(logits, dim=-1, dtype=logits.dtype)
    else:
        scores = torch.sigmoid(logits)
        scores = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
    STATS.gap("aux_topk", scores, k)
    aux_map = selection_sets(torch.topk(scores.detach(), k, dim=1)[1], E).to(logits.dtype)
    if spec.lb_type == "aux_loss":
        n = aux_map.sum(dim=0)
        aux = torch.sum(scores.sum(dim=0) * n) * (E / (k * T * T))
    elif spec.lb_type == "seq_aux_loss":
        n = aux_map.view(B, S, E).sum(dim=1)  # (B, E): counts within each sequence
        aux = torch.sum(scores.view(B, S, E).sum(dim=1) * n) * (E / (k * S * S)) / B
    else:
        aux = None
    z = None
    if spec.z_coeff is not None:
        z = torch.mean(torch.square(torch.logsumexp(logits, dim=-1)))
    return aux, z


def check_megatron(spec, logits, bias, B, S):
    """Our route/aux_terms against megatron-core's functions on the same router logits: routing
    map, probabilities, aux loss, z-loss and the gradient of a mix of them w.r.t. the logits.
    Megatron orders a micro-batch's tokens sequence-major (s, b); ours are batch-major."""
    mu = MEGATRON
    T, E = logits.shape
    k = spec.k
    w = torch.linspace(-1.0, 1.0, T * E, dtype=logits.dtype).reshape(T, E)  # probe weights
    saved = STATS.margin
    STATS.margin = {}  # (the gaps were recorded by the real forward)
    ours_lg = logits.detach().clone().requires_grad_(True)
    p1, m1 = route(ours_lg, spec, bias, False)
    a1, z1 = aux_terms(ours_lg, spec, B, S)
    STATS.margin = saved

    meg_lg = logits.detach().clone().requires_grad_(True)
    lg_s = meg_lg.view(B, S, E).transpose(0, 1).reshape(S * B, E)
    p2, m2 = mu.topk_routing_with_score_function(
        lg_s, k, use_pre_softmax=spec.pre_softmax, num_groups=spec.num_groups,
        group_topk=spec.group_topk, scaling_factor=spec.scaling, score_function=spec.score,
        expert_bias=bias,
    )  # fmt: skip
    if spec.capacity is not None:
        p2, m2 = mu.apply_router_token_dropping(
            p2, m2, router_topk=k, capacity_factor=spec.capacity, drop_policy="probs"
        )
    to_b = lambda t: t.view(S, B, E).transpose(0, 1).reshape(T, E)  # noqa: E731
    p2, m2 = to_b(p2), to_b(m2)
    map_aux, scores_aux = mu.compute_routing_scores_for_aux_loss(lg_s, k, spec.score)
    if spec.lb_type == "aux_loss":
        a2 = mu.switch_load_balancing_loss_func(scores_aux, map_aux.sum(dim=0), S * B, k, E, 1.0)
    else:  # TopKRouter._apply_seq_aux_loss: the batch folded into the expert dimension
        sc, mp = scores_aux.reshape(S, -1), map_aux.reshape(S, -1)
        a2 = mu.switch_load_balancing_loss_func(sc, mp.sum(dim=0), S, k, E, 1.0) / B
    z2 = mu.z_loss_func(lg_s, 1.0) if spec.z_coeff is not None else None

    if not torch.equal(m1, m2):
        sys.exit("megatron check: routing maps differ")
    diffs = [(p1 - p2).abs().max().item(), abs(a1.item() - a2.item())]
    f1, f2 = (p1 * w).sum() + a1, (p2 * w).sum() + a2
    if z1 is not None:
        diffs.append(abs(z1.item() - z2.item()))
        f1, f2 = f1 + z1, f2 + z2
    f1.backward()
    f2.backward()
    g1, g2 = ours_lg.grad, meg_lg.grad
    diffs.append(((g1 - g2).abs().max() / g2.abs().max()).item())
    worst = max(diffs)
    if not worst < 1e-5:
        sys.exit(f"megatron check: our routing differs from Megatron's by {diffs}")
    STATS.megatron_checks += 1
    STATS.megatron_diff = max(STATS.megatron_diff, worst)


# ---- our own MoE block (moe_sigmoid, moe_capacity; checked against HF Mixtral) -------------------


class Router(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(spec.E, HIDDEN))
        if spec.expert_bias:  # a buffer, not a parameter: no gradient, no weight decay
            self.register_buffer("e_score_correction_bias", torch.zeros(spec.E))
        else:
            self.e_score_correction_bias = None


class SwiGLUExpert(nn.Module):
    def __init__(self, F_):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, F_, bias=False)  # gate
        self.w2 = nn.Linear(F_, HIDDEN, bias=False)  # down
        self.w3 = nn.Linear(HIDDEN, F_, bias=False)  # up

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GeluExpert(nn.Module):
    def __init__(self, F_):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, F_, bias=False)
        self.w2 = nn.Linear(F_, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class SwiGLUMLP(nn.Module):
    def __init__(self, F_):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, F_, bias=False)
        self.up_proj = nn.Linear(HIDDEN, F_, bias=False)
        self.down_proj = nn.Linear(F_, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GeluMLP(nn.Module):
    def __init__(self, F_):
        super().__init__()
        self.up_proj = nn.Linear(HIDDEN, F_, bias=False)
        self.down_proj = nn.Linear(F_, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


class MoEBlock(nn.Module):
    """Megatron's MoE layer (TopKRouter, routed experts, optional shared expert) on (B, S, H)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.gate = Router(spec)
        expert = SwiGLUExpert if spec.swiglu else GeluExpert
        self.experts = nn.ModuleList([expert(spec.F) for _ in range(spec.E)])
        self.shared_expert = SwiGLUMLP(spec.shared) if spec.shared else None
        self.training_step = False  # set by the driver: aux losses, token counts, statistics
        self.record = None

    def forward(self, x):
        B, S, H = x.shape
        xt = x.reshape(-1, H)
        logits = F.linear(xt, self.gate.weight)  # no bias
        bias = self.gate.e_score_correction_bias
        probs, rmap = route(logits, self.spec, bias, self.training_step)
        y = torch.zeros_like(xt)
        for e in range(self.spec.E):  # output = sum over kept experts of prob * expert(x)
            tok = rmap[:, e].nonzero(as_tuple=True)[0]
            if tok.numel():
                y.index_add_(0, tok, probs[tok, e, None] * self.experts[e](xt[tok]))
        if self.shared_expert is not None:
            y = y + self.shared_expert(xt)
        rec = {"tokens_per_expert": rmap.sum(dim=0).to(x.dtype), "aux": None, "z": None}
        if self.training_step:
            rec["aux"], rec["z"] = aux_terms(logits, self.spec, B, S)
            if MEGATRON is not None:
                check_megatron(self.spec, logits, bias, B, S)
        self.record = rec
        return y.view(B, S, H)


# ---- model adapters: golden names <-> the tensors of one torch model ---------------------------


class Adapter:
    """entries: [(golden name, parameter, index or None)] in golden order; the golden tensor is
    parameter[index]. params: the optimizer's parameters. biases(): [(golden name, buffer,
    layer)], read afresh (a dtype conversion replaces buffers)."""

    def get(self, i):
        _, p, ix = self.entries[i]
        return p.data if ix is None else p.data[ix]

    def grad(self, i):
        """The gradient (zeros where backward never reached the parameter: an idle expert)."""
        _, p, ix = self.entries[i]
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        return g if ix is None else g[ix]

    def biases(self):
        return []


class CustomAdapter(Adapter):
    """HF Llama skeleton; MoE layers' mlp replaced by MoEBlock, dense layers by our MLPs."""

    def __init__(self, spec):
        self.spec = spec
        self.model = mg.make_llama()
        self.blocks = {}
        for i, layer in enumerate(self.model.model.layers):
            if i in spec.moe_layers:
                layer.mlp = self.blocks[i] = MoEBlock(spec)
            elif spec.swiglu:
                layer.mlp = SwiGLUMLP(spec.dense_ffn)
            else:
                layer.mlp = GeluMLP(spec.dense_ffn)
        self.entries = [(self.golden_name(n), p, None) for n, p in self.model.named_parameters()]
        self.params = [p for _, p, _ in self.entries]

    def golden_name(self, n):
        for i in self.blocks:
            pre = f"model.layers.{i}.mlp."
            if n.startswith(pre):
                return f"model.layers.{i}.block_sparse_moe." + n[len(pre):]
        return n

    def biases(self):
        return [
            (f"model.layers.{i}.block_sparse_moe.gate.e_score_correction_bias",
             b.gate.e_score_correction_bias, i)
            for i, b in self.blocks.items() if b.gate.e_score_correction_bias is not None
        ]  # fmt: skip

    def forward(self, tokens, training_step):
        for b in self.blocks.values():
            b.training_step = training_step
        logits = self.model(input_ids=tokens, use_cache=False).logits
        return logits, {i: b.record for i, b in self.blocks.items()}


class MixtralAdapter(Adapter):
    """HF MixtralForCausalLM. Experts are stored fused (gate_up_proj (E, 2F, H) = [w1; w3] per
    expert, down_proj (E, H, F) = w2); the golden names address slices of them."""

    def __init__(self, spec):
        self.spec = spec
        cfg = MixtralConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=spec.F,
            num_hidden_layers=NUM_LAYERS, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=32, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False, attention_dropout=0.0, hidden_act="silu",
            num_local_experts=spec.E, num_experts_per_tok=spec.k, router_jitter_noise=0.0,
            sliding_window=None, initializer_range=0.02, bos_token_id=0, eos_token_id=0,
            pad_token_id=None, attn_implementation="eager", experts_implementation="eager",
        )  # fmt: skip
        assert cfg.rope_parameters["rope_theta"] == 10000.0, cfg.rope_parameters
        self.model = MixtralForCausalLM(cfg)
        assert self.model.config._experts_implementation == "eager"
        F_ = spec.F
        self.entries = []
        for n, p in self.model.named_parameters():
            if n.endswith("mlp.experts.down_proj"):
                continue  # emitted with gate_up_proj
            if n.endswith("mlp.experts.gate_up_proj"):
                pre = n[: -len("mlp.experts.gate_up_proj")] + "block_sparse_moe.experts."
                down = self.model.get_parameter(n[: -len("gate_up_proj")] + "down_proj")
                for e in range(spec.E):
                    self.entries.append((f"{pre}{e}.w1.weight", p, (e, slice(0, F_))))
                    self.entries.append((f"{pre}{e}.w2.weight", down, (e,)))
                    self.entries.append((f"{pre}{e}.w3.weight", p, (e, slice(F_, 2 * F_))))
                continue
            self.entries.append((n.replace(".mlp.gate.", ".block_sparse_moe.gate."), p, None))
        self.params = list(self.model.parameters())
        # HF's own routing decisions, to compare with Megatron's
        self.captured = {}
        for i, layer in enumerate(self.model.model.layers):
            layer.mlp.gate.register_forward_hook(self._hook(i))

    def _hook(self, i):
        def hook(module, inputs, outputs):
            self.captured[i] = outputs  # (router_logits, top-k weights, top-k indices)

        return hook

    def forward(self, tokens, training_step):
        out = self.model(input_ids=tokens, use_cache=False, output_router_logits=True)
        B, S = tokens.shape
        records = {}
        for i, logits in enumerate(out.router_logits):
            hf_logits, hf_weights, hf_idx = self.captured[i]
            assert torch.equal(logits, hf_logits)
            # Megatron (softmax, not pre-softmax): top-k of the logits, softmax over the k chosen;
            # HF: softmax over all, top-k, renormalised. Same experts, same weights.
            probs, rmap = route(logits.detach(), self.spec, None, training_step)
            if not torch.equal(rmap, selection_sets(hf_idx, self.spec.E)):
                sys.exit("mixtral: HF routes to other experts than Megatron's top-k")
            hf_probs = torch.zeros_like(probs).scatter(1, hf_idx, hf_weights.detach())
            d = (probs - hf_probs).abs().max().item()
            if not d < 1e-6:
                sys.exit(f"mixtral: HF routing weights differ from Megatron's by {d}")
            STATS.hf_probs_diff = max(STATS.hf_probs_diff, d)
            rec = {"tokens_per_expert": rmap.sum(dim=0).float(), "aux": None, "z": None}
            if training_step:
                rec["aux"], rec["z"] = aux_terms(logits, self.spec, B, S)
                if MEGATRON is not None:
                    check_megatron(self.spec, logits, None, B, S)
            records[i] = rec
        return out.logits, records


# ---- the run ---------------------------------------------------------------------------------


def micro_batch_objective(adapter, tokens, targets, training_step=True):
    """Forward one micro-batch: (logits, mean CE, CE + weighted aux and z terms, records)."""
    spec = adapter.spec
    logits, records = adapter.forward(tokens, training_step)
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    obj = ce
    for rec in records.values():
        if rec["aux"] is not None:
            obj = obj + spec.aux_coeff * rec["aux"]
        if rec["z"] is not None:
            obj = obj + spec.z_coeff * rec["z"]
    return logits, ce, obj, records


def initialise(adapter, gen):
    """make_golden's rule (init_tensor) in golden-name order, expert fc2 (w2) counted as an output
    projection; router weights N(0, ROUTER_STD)."""
    with torch.no_grad():
        for i, (name, _, _) in enumerate(adapter.entries):
            t = adapter.get(i)
            if name.endswith("block_sparse_moe.gate.weight"):
                t.copy_(ROUTER_STD * torch.randn(t.shape, generator=gen, dtype=torch.float32))
            else:
                t.copy_(mg.init_tensor(name, t.shape, gen, NUM_LAYERS, out_proj=MOE_OUT_PROJ))


def run_moe_model(name, adapter, dtype=torch.float32, write=True):
    """Initialise (always in float32), optionally convert to dtype, train 3 steps; returns the
    records and writes the files when write."""
    global STATS
    STATS = Stats()
    spec = adapter.spec
    torch.manual_seed(mg.SEED)
    gen = torch.Generator().manual_seed(mg.SEED)
    adapter.model.float().eval()  # eval: no dropout (all p are 0 anyway), no router jitter
    initialise(adapter, gen)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    with torch.no_grad():
        for _, b, _ in adapter.biases():
            b.copy_(EXPERT_BIAS_STD * torch.randn(b.shape, generator=gen, dtype=torch.float32))

    names = [n for n, _, _ in adapter.entries]
    assert len(set(names)) == len(names)
    weights = {n: adapter.get(i).clone().contiguous() for i, n in enumerate(names)}
    weights.update({n: b.clone().contiguous() for n, b, _ in adapter.biases()})
    st_path = os.path.join(mg.OUT_DIR, f"{name}.safetensors")
    if write:
        save_file(weights, st_path)
    covered = sum(adapter.get(i).numel() for i in range(len(names)))
    if covered != sum(p.numel() for p in adapter.params):
        sys.exit(f"{name}: the golden names do not cover every parameter element")
    adapter.model.to(dtype)
    bias0 = [b.clone() for _, b, _ in adapter.biases()]

    records = [("tokens", tokens.to(torch.int32)), ("targets", targets.to(torch.int32))]
    params = adapter.params
    decay = [p for p in params if mg.wants_decay(p)]
    no_decay = [p for p in params if not mg.wants_decay(p)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": mg.WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=0.0, betas=mg.BETAS, eps=mg.ADAM_EPS, foreach=False, fused=False,
    )  # fmt: skip
    f32 = lambda t: t.detach().to(torch.float32).clone().contiguous()  # noqa: E731

    step_loss, step_norm, step_lr, step_margin = [], [], [], []
    first = {}
    for k in range(mg.TRAIN_ITERS):
        STATS.margin = {}
        opt.zero_grad(set_to_none=True)
        tpe = {i: torch.zeros(spec.E, dtype=dtype) for i in spec.moe_layers}
        logits_mb, ce_mb, aux_log, z_log = [], [], [], []
        for m in range(NUM_MICRO):
            sl = slice(m * MICRO_BATCH, (m + 1) * MICRO_BATCH)
            logits, ce, obj, recs = micro_batch_objective(adapter, tokens[sl], targets[sl])
            (obj / NUM_MICRO).backward()
            logits_mb.append(logits.detach())
            ce_mb.append(ce.detach())
            for i, rec in recs.items():
                tpe[i] += rec["tokens_per_expert"]
                if rec["aux"] is not None:
                    aux_log.append(rec["aux"].detach())
                if rec["z"] is not None:
                    z_log.append(rec["z"].detach())
        loss = torch.stack(ce_mb).mean()  # Megatron's lm loss: mean of the micro-batch means
        for p in params:  # Megatron's grad buffer: an idle expert has a zero gradient, and Adam
            if p.grad is None:  # and weight decay still update it
                p.grad = torch.zeros_like(p)
        if k == 0:
            first["counts"] = dict(STATS.count)
            records.append(("logits", f32(torch.cat(logits_mb, dim=0))))
            records.append(("loss", f32(loss.reshape(1))))
            if aux_log:  # Megatron's logged value: mean over MoE layers and micro-batches
                first["aux"] = torch.stack(aux_log).mean()
                records.append(("aux_loss", f32(first["aux"].reshape(1))))
            if z_log:
                first["z"] = torch.stack(z_log).mean()
                records.append(("z_loss", f32(first["z"].reshape(1))))
            for i in spec.moe_layers:
                records.append((f"tokens_per_expert.{i}", f32(tpe[i])))
            first["tpe"] = {i: tpe[i].clone() for i in spec.moe_layers}
            for i, n in enumerate(names):
                records.append((f"grad.{n}", f32(adapter.grad(i))))
        # Expert bias: after the step's last backward, before the optimizer (finalize_model_grads'
        # _update_router_expert_bias), from the real routing's token counts of the whole step.
        with torch.no_grad():
            for _, b, i in adapter.biases():
                t = tpe[i]
                b.add_(torch.sign(t.sum() / t.numel() - t) * spec.bias_rate)
        norm, lr = mg.clip_and_step(name, k, params, opt)
        step_loss.append(loss.item())
        step_norm.append(norm)
        step_lr.append(lr)
        step_margin.append(dict(STATS.margin))

    records.append(("step_loss", torch.tensor(step_loss, dtype=torch.float32)))
    records.append(("step_grad_norm", torch.tensor(step_norm, dtype=torch.float32)))
    records.append(("step_lr", torch.tensor(step_lr, dtype=torch.float32)))
    for i, n in enumerate(names):
        records.append((f"final.{n}", f32(adapter.get(i))))
    for n, b, _ in adapter.biases():
        records.append((f"final.{n}", f32(b)))

    # Sanity: what each golden is meant to exercise actually happens, decided by clear margins.
    for k, mk in enumerate(step_margin):
        for kind, g in mk.items():
            if not g > MIN_MARGIN:
                sys.exit(f"{name}: step {k}: {kind} decided by {g:.3g} <= {MIN_MARGIN}")
    counts = first["counts"]
    if spec.capacity is not None and not counts.get("dropped_pairs", 0) > 0:
        sys.exit(f"{name}: capacity factor {spec.capacity} drops nothing in the first step")
    if spec.expert_bias:
        if not counts.get("bias_changes_selection", 0) > 0:
            sys.exit(f"{name}: the expert bias changes no token's experts in the first step")
        for (n, b, _), b0 in zip(adapter.biases(), bias0):
            if torch.equal(b, b0):
                sys.exit(f"{name}: {n} did not change in {mg.TRAIN_ITERS} steps")
    if spec.group_topk and not counts.get("groups_change_selection", 0) > 0:
        sys.exit(f"{name}: group-limited routing changes no token's experts in the first step")
    for i, t in first["tpe"].items():
        if not (t > 0).all():
            sys.exit(f"{name}: layer {i} has an idle expert in the first step: {t.tolist()}")
    if not write:
        return records

    mg.write_golden(os.path.join(mg.OUT_DIR, f"{name}.golden"), records)
    with open(os.path.join(mg.OUT_DIR, f"{name}.json"), "w") as f:
        json.dump({"args": spec.args + mg.TRAIN_ARGS}, f)
        f.write("\n")

    nparams = sum(p.numel() for p in params)
    print(f"{name}: {len(names)} parameter tensors, {nparams} parameters"
          + (f" + expert bias {', '.join(n for n, _, _ in adapter.biases())}"
             if adapter.biases() else "")
          + f", all in {st_path}")  # fmt: skip
    print(f"{name}: initial loss {step_loss[0]:.6f} (ln {VOCAB} = {math.log(VOCAB):.6f})"
          + (f"  {'seq_' if spec.lb_type == 'seq_aux_loss' else ''}load_balancing_loss "
             f"{first['aux'].item():.6f}" if "aux" in first else "")
          + (f"  z_loss {first['z'].item():.6f}" if "z" in first else ""))  # fmt: skip
    for i, t in first["tpe"].items():
        print(f"{name}: first step tokens per expert, layer {i}: {[int(x) for x in t.tolist()]}")
    for kind, n in sorted(counts.items()):
        print(f"{name}: first step {kind.replace('_', ' ')}: {n}")
    for k in range(mg.TRAIN_ITERS):
        print(f"{name}: step {k}: loss {step_loss[k]:.6f}  pre-clip grad norm {step_norm[k]:.6f}"
              f" (clip {mg.CLIP_GRAD})  lr {step_lr[k]:.6g}  smallest routing margins: "
              + ", ".join(f"{kk} {v:.1e}" for kk, v in sorted(step_margin[k].items())))  # fmt: skip
    if STATS.hf_probs_diff:
        print(f"{name}: HF top-2 renormalised softmax = Megatron softmax over the top-2 logits: "
              f"same experts, weights within {STATS.hf_probs_diff:.1e}")
    for (n, b, _), b0 in zip(adapter.biases(), bias0):
        print(f"{name}: {n.split('.block')[0]} expert bias change in {mg.TRAIN_ITERS} steps: "
              f"{[round(x, 4) for x in (b - b0).tolist()]}")  # fmt: skip
    if MEGATRON is not None:
        print(f"{name}: megatron-core check: {STATS.megatron_checks} router calls, routing maps "
              f"equal, values and logit gradients within {STATS.megatron_diff:.1e}")
    print(f"{name}: {len(records)} golden records")
    return records


def check_block_against_mixtral():
    """MoEBlock in the Llama skeleton must reproduce HF Mixtral (softmax top-2, SwiGLU experts):
    same weights and micro-batch, compare logits, the objective and every gradient."""
    global STATS
    STATS = Stats()
    gen = torch.Generator().manual_seed(mg.SEED + 1)
    hf, ours = MixtralAdapter(MIXTRAL), CustomAdapter(MIXTRAL)
    for a in (hf, ours):
        a.model.float().eval()
    initialise(hf, gen)
    index = {n: i for i, (n, _, _) in enumerate(ours.entries)}
    assert sorted(index) == sorted(n for n, _, _ in hf.entries)
    with torch.no_grad():
        for i, (n, _, _) in enumerate(hf.entries):
            ours.get(index[n]).copy_(hf.get(i))
    tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ), generator=gen)
    out = []
    for a in (hf, ours):
        logits, _, obj, _ = micro_batch_objective(a, tokens, targets)
        obj.backward()
        out.append((logits.detach(), obj.detach()))
    worst = max((out[0][0] - out[1][0]).abs().max().item(), (out[0][1] - out[1][1]).abs().item())
    for i, (n, _, _) in enumerate(hf.entries):
        g0, g1 = hf.grad(i), ours.grad(index[n])
        worst = max(worst, ((g0 - g1).abs().max() / g0.abs().max()).item())
    if not worst < 1e-5:
        sys.exit(f"MoEBlock differs from HF Mixtral by {worst}")
    print(f"check: MoEBlock vs HF MixtralSparseMoeBlock (logits, objective, relative gradients): "
          f"max difference {worst:.1e}")


def float64_check(name, spec, ref):
    """Rerun in float64 (our MoEBlock for mixtral too: HF's router casts to float32) and print
    max |a - b| / max |b| per kind of record against the float32 records ref."""
    rec64 = dict(run_moe_model(name, CustomAdapter(spec), dtype=torch.float64, write=False))
    worst = {}
    for n, t in ref:
        kind = n.split(".")[0]
        a, b = t.double(), rec64[n].double()
        if t.dtype == torch.int32 or kind == "tokens_per_expert":
            if not torch.equal(a, b):
                sys.exit(f"{name}: float64 run differs in {n}")
            continue
        d = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
        worst[kind] = max(worst.get(kind, 0.0), d)
    print(f"{name}: float32 vs float64 (max |a-b| / max |b|, worst tensor): "
          + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", metavar="DIR",
                    help="directory holding megatron/core: check the routing against its functions")
    ap.add_argument("--float64-check", action="store_true",
                    help="also rerun in float64 and print the differences (writes nothing more)")
    args = ap.parse_args()  # fmt: skip
    if not os.path.isdir(mg.OUT_DIR):
        sys.exit(f"run from the repository root ({mg.OUT_DIR}/ not found)")
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    if args.megatron:
        import warnings

        global MEGATRON
        sys.path.insert(0, os.path.abspath(args.megatron))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.transformer.moe import moe_utils
        MEGATRON = moe_utils
    check_block_against_mixtral()
    models = [("mixtral", MIXTRAL, MixtralAdapter), ("moe_sigmoid", MOE_SIGMOID, CustomAdapter),
              ("moe_capacity", MOE_CAPACITY, CustomAdapter)]  # fmt: skip
    refs = {name: run_moe_model(name, cls(spec)) for name, spec, cls in models}
    if args.float64_check:
        for name, spec, _ in models:
            float64_check(name, spec, refs[name])


if __name__ == "__main__":
    main()
