#!/usr/bin/env python3
"""Regenerates tests/golden/pp_schedule/ by calling megatron-core's own pipeline-schedule and
layer-placement functions.

Run from the repository root with megatron-core 0.16.1 importable (torch is needed by it):

    python3 -m venv /tmp/mcore-sched-venv --system-site-packages
    /tmp/mcore-sched-venv/bin/pip install megatron-core==0.16.1
    /tmp/mcore-sched-venv/bin/python tools/reference/megatron_pp_schedule.py

It takes a few seconds and writes identical bytes on every run. CI never runs it.

What is called, unchanged:
  pipeline_parallel.schedules.get_schedule_table, get_pp_rank_microbatches
  transformer.cuda_graphs.convert_schedule_table_to_order
  pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving (only up to its
      argument checks; see "mocked" below)
  transformer.transformer_config.TransformerConfig (its __post_init__ checks)
  transformer.transformer_layer.get_transformer_layer_offset
  transformer.transformer_block.get_num_layers_to_build

What is mocked (no torch.distributed, no GPU here):
  * get_pp_rank_microbatches gets a stand-in P2PCommunicator whose pp_group answers size() and
    rank() and which carries virtual_pipeline_model_parallel_size, instead of parallel_state.
  * forward_backward_pipelining_with_interleaving gets stand-in process groups (size() only), a
    torch.nn.Module carrying a SimpleNamespace config, and torch.zeros is wrapped so its
    device="cuda" scalar is made on the CPU. get_pp_rank_microbatches, the first call after the
    argument checks, is replaced by a sentinel that raises: reaching it means "accepted".
  * get_transformer_layer_offset / get_num_layers_to_build get pp_rank and vp_stage explicitly,
    so parallel_state is never asked.
  * Megatron-LM's training/arguments.py (not part of megatron-core) is restated, not imported:
    the --num-layers-per-virtual-pipeline-stage derivation and the "pipeline size > 1 with a
    virtual pipeline" rule (from core_v0.16.1's megatron/training/arguments.py).
"""

import contextlib
import json
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

import megatron.core  # noqa: E402
from megatron.core.enums import ModelType  # noqa: E402
from megatron.core.pipeline_parallel import schedules  # noqa: E402
from megatron.core.transformer.cuda_graphs import convert_schedule_table_to_order  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset  # noqa: E402

OUT = os.path.join("tests", "golden", "pp_schedule")

# ---------------------------------------------------------------------------------------------
# Encoding of an order: one character per op. Forward of chunk c is "1234"[c] (Megatron's c + 1),
# backward of chunk c is "abcd"[c] (Megatron's -(c + 1)).
FWD = "1234"
BWD = "abcd"


def encode_order(order):
    return "".join(FWD[x - 1] if x > 0 else BWD[-x - 1] for x in order)


class _Group:
    def __init__(self, size, rank=0):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def pp_rank_microbatches(P, V, M, G, rank):
    comm = types.SimpleNamespace(
        pp_group=_Group(P, rank), virtual_pipeline_model_parallel_size=(V if V > 1 else None)
    )
    return schedules.get_pp_rank_microbatches(M, V, G, False, False, p2p_communicator=comm)


# ---------------------------------------------------------------------------------------------
# Schedule cases: every rank's counts and order.


def group_sizes(P, V, M):
    """G values to record: the default P for V == 1 (the table ignores G); with interleaving every
    G Megatron accepts (P <= G <= M, last group 0 or >= P), up to P + 3, plus G = M."""
    if V == 1:
        return [P]
    out = []
    for G in range(P, M + 1):
        r = M % G
        if 0 < r < P:
            continue
        if G <= P + 3 or G == M:
            out.append(G)
    return out


MB_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def schedule_cases():
    """tables: one per (M, V, G) (G = 0 when V == 1: the table ignores it), microbatch ids as
    base-36 digits and chunk ids as digits. cases: per (P, V, M, G) every rank's counts. orders:
    convert_schedule_table_to_order for every (M, V, G, warm-up count) some rank uses -- an order
    depends on nothing else, so ranks and cases share them."""
    tables, cases, orders = {}, [], {}
    for P in range(1, 9):
        for V in range(1, 5):
            if V > 1 and P == 1:
                continue  # Megatron-LM rejects a virtual pipeline without pipelining
            for M in list(range(1, 17)) + [24, 32]:
                for G in group_sizes(P, V, M):
                    table = schedules.get_schedule_table(M, V, G)
                    key = (M, V, G if V > 1 else 0)
                    if key not in tables:
                        mbs, chunks = zip(*table)
                        tables[key] = {"M": M, "V": V, "G": key[2],
                                       "microbatch": "".join(MB_DIGITS[m] for m in mbs),
                                       "chunk": "".join(str(c) for c in chunks)}
                    case = {"P": P, "V": V, "M": M, "G": G, "warmup": [], "remaining": [],
                            "all_warmup": ""}
                    for r in range(P):
                        total, all_w, w, rem = pp_rank_microbatches(P, V, M, G, r)
                        assert total == M * V
                        case["warmup"].append(w)
                        case["remaining"].append(rem)
                        case["all_warmup"] += "1" if all_w else "0"
                        okey = key + (w,)
                        if okey not in orders:
                            order = convert_schedule_table_to_order(w, V, table)
                            orders[okey] = {"M": M, "V": V, "G": key[2], "W": w,
                                            "order": encode_order(order)}
                    cases.append(case)
    return list(tables.values()), cases, list(orders.values())


# ---------------------------------------------------------------------------------------------
# The interleaved schedule's argument checks, from the real function.


class _Accepted(Exception):
    pass


def _sentinel(*args, **kwargs):
    raise _Accepted()


def interleaving_check(P, M, G):
    """'.' accepted, 'R' G outside [P, M] (ValueError), 'B' last group in (0, P) (RuntimeError)."""
    config = types.SimpleNamespace(
        overlap_p2p_comm=False, batch_p2p_comm=True, finalize_model_grads_func=None, timers=None,
        no_sync_func=None, grad_sync_func=None, param_sync_func=None,
        microbatch_group_size_per_vp_stage=G, sequence_parallel=False, hidden_size=8,
        overlap_moe_expert_parallel_comm=False,
    )
    chunks = []
    for _ in range(2):
        m = torch.nn.Module()
        m.config = config
        m.model_type = ModelType.encoder_or_decoder
        chunks.append(m)
    comm = types.SimpleNamespace(pp_group=_Group(P, 0), config=config,
                                 virtual_pipeline_model_parallel_size=2)
    g1 = _Group(1)
    pgs = types.SimpleNamespace(tp=g1, cp=g1, embd=None, pos_embd=None, pp=_Group(P, 0), dp_cp=g1)
    try:
        schedules.forward_backward_pipelining_with_interleaving(
            forward_step_func=None, data_iterator=[None, None], model=chunks, num_microbatches=M,
            seq_length=8, micro_batch_size=1, p2p_communicator=comm, pg_collection=pgs)
    except _Accepted:
        return "."
    except ValueError as e:
        assert "should range in" in str(e), e
        return "R"
    except RuntimeError as e:
        assert "remainder of M" in str(e), e
        return "B"
    raise AssertionError("the interleaved schedule returned without reaching its warm-up")


@contextlib.contextmanager
def patched_for_checks():
    real_zeros, real_counts = torch.zeros, schedules.get_pp_rank_microbatches

    def cpu_zeros(*a, **k):
        k.pop("device", None)
        return real_zeros(*a, **k)

    torch.zeros = cpu_zeros
    schedules.get_pp_rank_microbatches = _sentinel
    try:
        yield
    finally:
        torch.zeros = real_zeros
        schedules.get_pp_rank_microbatches = real_counts


def interleaving_checks():
    rows = []
    with patched_for_checks():
        for P in range(1, 9):
            for M in range(1, 25):
                rows.append({"P": P, "M": M,
                             "G": "".join(interleaving_check(P, M, G) for G in range(1, 26))})
    return rows


# ---------------------------------------------------------------------------------------------
# Layer placement.

# Megatron's messages mapped to short kinds that the C test maps to its own messages.
ERROR_KINDS = [
    ("cannot beset at the same time", "uneven_with_account"),
    ("num_layers_in_first_pipeline_stage must be larger than 0", "first_not_positive"),
    ("num_layers_in_last_pipeline_stage must be larger than 0", "last_not_positive"),
    ("number of layers at first stage", "first_not_divisible_vpp"),
    ("number of layers at last stage", "last_not_divisible_vpp"),
    ("Mismatch", "middle_mismatch"),
    ("number of layers at middle stage", "middle_not_divisible_pp"),
    ("number of layers on each middle pipeline rank", "middle_rank_not_divisible_vpp"),
    ("number of middle layers", "account_not_divisible_pp"),
    ("after enablea", "account_not_divisible_pp"),
    ("number of layers on each pipeline rank", "account_rank_not_divisible_vpp"),
    ("num_layers should be divisible by pipeline_model_parallel_size", "not_divisible_pp"),
    ("should be divisible by vp_size", "rank_not_divisible_vpp"),
    ("left over layers must be divisible", "middle_not_divisible_pp"),
    # Restated from Megatron-LM's arguments.py:
    ("ARGS: layers of the model must be divisible", "lpvs_not_divisible_pp"),
    ("ARGS: per pipeline stage must be divisible", "lpvs_not_divisible"),
    ("ARGS: uneven with lpvs", "lpvs_with_uneven"),
]


def error_kind(e):
    msg = str(e)
    for needle, kind in ERROR_KINDS:
        if needle in msg:
            return kind
    if isinstance(e, ZeroDivisionError):
        return "megatron_zero_division"
    raise AssertionError(f"unclassified Megatron error {type(e).__name__}: {msg}")


def resolve_lpvs(L, P, first, last, emb, loss, lpvs):
    """Megatron-LM arguments.py (core_v0.16.1), --num-layers-per-virtual-pipeline-stage."""
    if first is not None or last is not None:
        raise AssertionError("ARGS: uneven with lpvs")
    n = L + int(emb) + int(loss)
    if n % P:
        raise AssertionError("ARGS: layers of the model must be divisible")
    per_stage = n // P
    if per_stage % lpvs:
        raise AssertionError("ARGS: per pipeline stage must be divisible")
    v = per_stage // lpvs
    return v if v > 1 else None


def placement(L, P, V, first, last, emb, loss, lpvs=None):
    """[[offset, count] per (rank, chunk), rank-major] or an error kind."""
    try:
        if lpvs is not None:
            vp = resolve_lpvs(L, P, first, last, emb, loss, lpvs)
        else:
            vp = V if V > 1 else None
        cfg = TransformerConfig(
            num_layers=L, hidden_size=8, num_attention_heads=1, pipeline_model_parallel_size=P,
            virtual_pipeline_model_parallel_size=vp, pipeline_dtype=torch.float32,
            num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
            account_for_embedding_in_pipeline_split=emb, account_for_loss_in_pipeline_split=loss)
        out = []
        for r in range(P):
            for v in range(vp or 1):
                stage = v if vp else None
                n = get_num_layers_to_build(cfg, vp_stage=stage, pp_rank=r)
                o = get_transformer_layer_offset(cfg, vp_stage=stage, pp_rank=r)
                out.append([o, n])
        return vp or 1, out
    except (ValueError, AssertionError, ZeroDivisionError) as e:
        return None, error_kind(e)


def layer_cases():
    """Rows [L, P, V, first, last, emb, loss, lpvs, result]: first/last -1 = unset, lpvs 0 =
    unset; result is an error kind, or the resolved V followed by [offset, count, ...] per (rank,
    chunk), rank-major."""
    cases = []
    Ls = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16, 18, 24]
    unevens = [None, 1, 2, 3, 4, 6]

    def add(L, P, V, first, last, emb, loss, lpvs=None):
        vp, res = placement(L, P, V, first, last, emb, loss, lpvs)
        row = [L, P, V, -1 if first is None else first, -1 if last is None else last, int(emb),
               int(loss), lpvs or 0]
        cases.append(row + ([res] if vp is None else [vp, [x for pair in res for x in pair]]))

    for L in Ls:
        for P in range(1, 9):
            for V in range(1, 5):
                if V > 1 and P == 1:
                    continue  # rejected by arguments.py (and degenerate in megatron-core)
                for emb in (False, True):
                    for loss in (False, True):
                        add(L, P, V, None, None, emb, loss)
                if P == 1:
                    continue  # first/last with one stage: megatron.c rejects it (README)
                for first in unevens:
                    for last in unevens:
                        if first is None and last is None:
                            continue
                        if (first or 0) + (last or 0) > L:
                            continue  # Megatron computes negative middle layers; megatron.c rejects
                        add(L, P, V, first, last, False, False)
                # Zero layers and uneven+account: the rejections.
                add(L, P, V, 0, None, False, False)
                add(L, P, V, None, 0, False, False)
                add(L, P, V, 1, None, True, False)
            if P > 1:
                for lpvs in (1, 2, 3):
                    for emb in (False, True):
                        add(L, P, 1, None, None, emb, False, lpvs)
                add(L, P, 1, 1, None, False, False, 1)
    # Keep every accepted case, and about 40 of each rejection (evenly spread over the grid).
    by_kind = {}
    for row in cases:
        if isinstance(row[8], str):
            by_kind.setdefault(row[8], []).append(row)
    keep = set()
    for rows in by_kind.values():
        step = -(-len(rows) // 40)
        keep.update(id(r) for r in rows[::step])
    return [r for r in cases if not isinstance(r[8], str) or id(r) in keep]


# ---------------------------------------------------------------------------------------------


def dump(path, header, sections):
    """JSON with one record per line, so a diff shows which case changed."""
    with open(path, "w") as f:
        f.write("{\n")
        for k, v in header.items():
            f.write(f"{json.dumps(k)}: {json.dumps(v)},\n")
        for si, (name, rows) in enumerate(sections):
            f.write(f"{json.dumps(name)}: [\n")
            for i, row in enumerate(rows):
                sep = "," if i + 1 < len(rows) else ""
                f.write(json.dumps(row, separators=(",", ":")) + sep + "\n")
            f.write("]" + ("," if si + 1 < len(sections) else "") + "\n")
        f.write("}\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    version = megatron.core.__version__
    if version != "0.16.1":
        print(f"warning: megatron-core {version}, the goldens were made with 0.16.1",
              file=sys.stderr)
    header = {"megatron_core": version}
    tables, cases, orders = schedule_cases()
    dump(os.path.join(OUT, "schedule.json"), header,
         [("tables", tables), ("cases", cases), ("orders", orders),
          ("interleaving_checks", interleaving_checks())])
    dump(os.path.join(OUT, "layers.json"), header, [("cases", layer_cases())])
    for name in ("schedule.json", "layers.json"):
        p = os.path.join(OUT, name)
        print(f"{p}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
