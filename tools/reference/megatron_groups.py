#!/usr/bin/env python3
"""Writes tests/golden/groups/megatron_groups.json from megatron-core's own parallel_state.

Run from the repository root with megatron-core installed (torch must be importable; no GPU and
no process group are needed):

    python3 -m venv /tmp/mcore-venv --system-site-packages
    /tmp/mcore-venv/bin/pip install megatron-core==0.16.1
    /tmp/mcore-venv/bin/python tools/reference/megatron_groups.py

How: torch.distributed is replaced by a mock that says it is initialised with WORLD ranks and
that this process is rank R; new_group records (group_desc, ranks) and returns a fake group that
knows its ranks. For every layout and every rank R we call
parallel_state.initialize_model_parallel exactly as Megatron-LM's training/initialize.py does
(order "tp-cp-ep-dp-pp", or "tp-cp-ep-pp-dp" for --use-tp-pp-dp-mapping, or a custom order),
then:
  * the groups of each kind are the ranks passed to new_group under that kind's group_desc, in
    call order (every rank creates every group, so all ranks must record the same list: checked);
  * the group parallel_state stores for R (_TENSOR_MODEL_PARALLEL_GROUP, ...) must be the one
    holding R (checked), and R's coordinates are what Megatron's getters return
    (get_tensor_model_parallel_rank, ..., get_expert_data_parallel_rank).
Layouts Megatron rejects are run too; their exception text is recorded under "rejected".

Output (compact JSON, about 0.2 MB): {"megatron_core", "kinds", "coords",
"layouts": [{name, world_size, tp, pp, cp, ep, etp, order, dp, edp, groups: {kind: [[...]]},
ranks: [[coords of rank 0], ...]}], "rejected": [{name, world_size, ..., order, error}]}
"""

import json
import os
import sys
import types

import torch
import torch.distributed

from megatron.core import package_info
from megatron.core import parallel_state as ps

OUT = os.path.join("tests", "golden", "groups", "megatron_groups.json")

# group_desc (as passed by initialize_model_parallel) -> our kind name; enum order of
# src/parallel/parallel_state.h. Gloo twins and the distributed-optimizer instance group are
# created too but are not kinds of ours.
KINDS = [
    ("tp", "TENSOR_MODEL_PARALLEL_GROUP", "_TENSOR_MODEL_PARALLEL_GROUP"),
    ("pp", "PIPELINE_MODEL_PARALLEL_GROUP", "_PIPELINE_MODEL_PARALLEL_GROUP"),
    ("dp", "DATA_PARALLEL_GROUP", "_DATA_PARALLEL_GROUP"),
    ("dp_cp", "DATA_PARALLEL_GROUP_WITH_CP", "_DATA_PARALLEL_GROUP_WITH_CP"),
    ("cp", "CONTEXT_PARALLEL_GROUP", "_CONTEXT_PARALLEL_GROUP"),
    ("mp", "MODEL_PARALLEL_GROUP", "_MODEL_PARALLEL_GROUP"),
    ("tp_dp", "TENSOR_AND_DATA_PARALLEL_GROUP", "_TENSOR_AND_DATA_PARALLEL_GROUP"),
    ("tp_dp_cp", "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP", "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP"),
    ("tp_cp", "TENSOR_AND_CONTEXT_PARALLEL_GROUP", "_TENSOR_AND_CONTEXT_PARALLEL_GROUP"),
    ("embedding", "EMBEDDING_GROUP", "_EMBEDDING_GROUP"),
    ("position_embedding", "POSITION_EMBEDDING_GROUP", "_POSITION_EMBEDDING_GROUP"),
    ("ep", "EXPERT_MODEL_PARALLEL_GROUP", "_EXPERT_MODEL_PARALLEL_GROUP"),
    ("expert_tp", "EXPERT_TENSOR_PARALLEL_GROUP", "_EXPERT_TENSOR_PARALLEL_GROUP"),
    ("expert_tp_ep", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
     "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP"),
    ("expert_tp_ep_pp", "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
     "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP"),
    ("expert_dp", "EXPERT_DATA_PARALLEL_GROUP", "_EXPERT_DATA_PARALLEL_GROUP"),
]
DESC_TO_KIND = {desc: kind for kind, desc, _ in KINDS}
IGNORED_DESCS = {
    "DATA_PARALLEL_GROUP_WITH_CP_GLOO",
    "DATA_PARALLEL_GROUP_GLOO",
    "EXPERT_DATA_PARALLEL_GROUP_GLOO",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
}

# Per-rank coordinates, from Megatron's getters (each is the rank's index in its group).
COORDS = [
    ("tp", lambda: ps.get_tensor_model_parallel_rank()),
    ("cp", lambda: ps.get_context_parallel_rank()),
    ("dp", lambda: ps.get_data_parallel_rank()),
    ("pp", lambda: ps.get_pipeline_model_parallel_rank()),
    ("ep", lambda: ps.get_expert_model_parallel_rank()),
    ("etp", lambda: ps.get_expert_tensor_parallel_rank()),
    ("edp", lambda: ps.get_expert_data_parallel_rank()),
]


class FakeGroup:
    def __init__(self, ranks, desc):
        self.ranks = list(ranks)
        self.desc = desc

    def size(self):
        return len(self.ranks)

    def rank(self):
        return self.ranks.index(MOCK.rank) if MOCK.rank in self.ranks else -1


MOCK = types.SimpleNamespace(world=1, rank=0, created=[])


def _new_group(ranks=None, timeout=None, backend=None, pg_options=None,
               use_local_synchronization=False, group_desc=None):
    g = FakeGroup(ranks, group_desc)
    MOCK.created.append(g)
    return g


def _get_rank(group=None):
    return MOCK.rank if group is None else group.rank()


def _get_world_size(group=None):
    return MOCK.world if group is None else group.size()


def install_mock():
    td = torch.distributed
    td.is_available = lambda: True
    td.is_initialized = lambda: True
    td.get_rank = _get_rank
    td.get_world_size = _get_world_size
    td.new_group = _new_group
    td.barrier = lambda *a, **k: None


def init_one(world, rank, lay):
    """initialize_model_parallel as rank `rank`; returns the recorded groups by kind."""
    ps.destroy_model_parallel()
    MOCK.world, MOCK.rank, MOCK.created = world, rank, []
    ps.initialize_model_parallel(
        tensor_model_parallel_size=lay["tp"],
        pipeline_model_parallel_size=lay["pp"],
        context_parallel_size=lay["cp"],
        expert_model_parallel_size=lay["ep"],
        expert_tensor_parallel_size=None if lay["etp"] == -1 else lay["etp"],
        order=lay["order"],
    )
    groups = {kind: [] for kind, _, _ in KINDS}
    for g in MOCK.created:
        if g.desc in DESC_TO_KIND:
            groups[DESC_TO_KIND[g.desc]].append(g.ranks)
        elif g.desc not in IGNORED_DESCS:
            sys.exit(f"unexpected group_desc {g.desc}: update KINDS")
    return groups


def run_layout(lay):
    world = lay["world_size"]
    ref = None
    ranks = []
    for r in range(world):
        groups = init_one(world, r, lay)
        if ref is None:
            ref = groups
        elif groups != ref:
            sys.exit(f"{lay['name']}: rank {r} created different groups than rank 0")
        for kind, _, var in KINDS:
            held = getattr(ps, var)
            mine = [g for g in groups[kind] if r in g]
            if kind in ("embedding", "position_embedding") and not mine:
                if held is not None:
                    sys.exit(f"{lay['name']}: rank {r} holds a {kind} group it is not in")
                continue
            if len(mine) != 1 or held is None or held.ranks != mine[0]:
                sys.exit(f"{lay['name']}: rank {r}: {var} is not the one {kind} group holding it")
        ranks.append([fn() for _, fn in COORDS])
    out = dict(lay)
    out["dp"] = world // (lay["tp"] * lay["pp"] * lay["cp"])
    etp = lay["tp"] if lay["etp"] == -1 else lay["etp"]
    out["edp"] = world // (etp * lay["ep"] * lay["pp"])
    out["groups"] = ref
    out["ranks"] = ranks
    return out


def run_rejected(lay):
    try:
        init_one(lay["world_size"], 0, lay)
    except (RuntimeError, AssertionError) as e:
        out = dict(lay)
        out["error"] = f"{type(e).__name__}: {' '.join(str(e).split())}"
        return out
    sys.exit(f"{lay['name']}: Megatron accepted a layout listed as rejected")


DEFAULT = "tp-cp-ep-dp-pp"
TP_PP_DP = "tp-cp-ep-pp-dp"  # --use-tp-pp-dp-mapping


def L(name, world, tp=1, pp=1, cp=1, ep=1, etp=-1, order=DEFAULT):
    return dict(name=name, world_size=world, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, order=order)


LAYOUTS = [
    # initialize_model_parallel's docstring example: 16 GPUs, TP 2, PP 4 (the name is kept: the
    # committed golden file carries it)
    L("docstring_w16_tp2_pp4", 16, tp=2, pp=4),
    L("w1", 1),
    L("w8_dp8", 8),
    L("w8_tp4_cp2", 8, tp=4, cp=2),  # the docstring's context-parallel example
    L("w8_tp2_pp2_cp2", 8, tp=2, pp=2, cp=2),
    L("w12_tp3_pp2_cp2", 12, tp=3, pp=2, cp=2),
    L("w16_tp2_pp2_cp2_ep2", 16, tp=2, pp=2, cp=2, ep=2),
    L("w16_tp4_ep4_etp1", 16, tp=4, ep=4, etp=1),
    L("w16_tp1_ep2_etp4", 16, tp=1, pp=2, ep=2, etp=4),
    L("w24_tp2_pp3_ep2", 24, tp=2, pp=3, ep=2),
    L("w32_tp4_pp2_ep8_etp1", 32, tp=4, pp=2, ep=8, etp=1),
    L("w48_tp2_pp2_cp3_ep3_etp2", 48, tp=2, pp=2, cp=3, ep=3, etp=2),
    L("w64_tp2_pp2_cp2_ep4_etp1", 64, tp=2, pp=2, cp=2, ep=4, etp=1),
    L("w64_tp8_pp8", 64, tp=8, pp=8),
    L("w64_tp2_pp4_cp2_ep2_etp4", 64, tp=2, pp=4, cp=2, ep=2, etp=4),
    # --use-tp-pp-dp-mapping (with PP > 1 Megatron needs the expert DP size = the DP size)
    L("tppdp_w16_tp2_pp4", 16, tp=2, pp=4, order=TP_PP_DP),
    L("tppdp_w8_tp2_cp2_ep4_etp1", 8, tp=2, cp=2, ep=4, etp=1, order=TP_PP_DP),
    L("tppdp_w32_tp2_pp2_cp2_ep2", 32, tp=2, pp=2, cp=2, ep=2, order=TP_PP_DP),
    L("tppdp_w64_tp4_pp4_ep4_etp1", 64, tp=4, pp=4, ep=4, etp=1, order=TP_PP_DP),
    L("tppdp_w48_tp2_pp2_cp3_ep3_etp2", 48, tp=2, pp=2, cp=3, ep=3, etp=2, order=TP_PP_DP),
    L("tppdp_w16_tp2_ep4_etp1", 16, tp=2, ep=4, etp=1, order=TP_PP_DP),  # PP 1: no DP rule
    # custom orders: RankGenerator takes any permutation of the five tokens
    L("order_pp_dp_ep_cp_tp_w16", 16, tp=2, pp=2, cp=2, ep=2, etp=2, order="pp-dp-ep-cp-tp"),
    L("order_dp_tp_cp_ep_pp_w24", 24, tp=3, pp=2, ep=2, order="dp-tp-cp-ep-pp"),
    L("order_cp_tp_ep_dp_pp_w32", 32, tp=2, pp=2, cp=2, ep=4, etp=1, order="cp-tp-ep-dp-pp"),
    L("order_ep_tp_dp_pp_cp_w16", 16, tp=2, pp=2, ep=2, etp=1, order="ep-tp-dp-pp-cp"),
    L("order_pp_tp_cp_ep_dp_w36", 36, tp=3, pp=3, cp=2, ep=2, etp=3, order="pp-tp-cp-ep-dp"),
    L("order_tp_dp_cp_pp_ep_w16", 16, tp=2, pp=2, cp=2, etp=4, order="tp-dp-cp-pp-ep"),
]

REJECTED = [
    L("rej_w6_tp4", 6, tp=4),
    L("rej_w16_tp2_pp3", 16, tp=2, pp=3),
    L("rej_w8_tp2_cp3", 8, tp=2, cp=3),
    L("rej_w8_tp2_ep3", 8, tp=2, ep=3),
    L("rej_w8_tp2_pp2_etp4_ep2", 8, tp=2, pp=2, ep=2, etp=4),
    L("rej_tppdp_w16_tp2_pp2_ep4_etp1", 16, tp=2, pp=2, ep=4, etp=1, order=TP_PP_DP),
    L("rej_order_tp_dp_pp_cp_ep_w8", 8, tp=2, pp=2, ep=2, etp=1, order="tp-dp-pp-cp-ep"),
]


def main():
    install_mock()
    layouts = [run_layout(lay) for lay in LAYOUTS]
    rejected = [run_rejected(lay) for lay in REJECTED]
    ps.destroy_model_parallel()
    doc = {
        "megatron_core": package_info.__version__,
        "kinds": [k for k, _, _ in KINDS],
        "coords": [c for c, _ in COORDS],
        "layouts": layouts,
        "rejected": rejected,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        # one layout per line: small, and diffs stay readable
        f.write('{"megatron_core":%s,"kinds":%s,"coords":%s,\n"layouts":[\n' % (
            json.dumps(doc["megatron_core"]), json.dumps(doc["kinds"], separators=(",", ":")),
            json.dumps(doc["coords"], separators=(",", ":"))))
        f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in layouts))
        f.write('],\n"rejected":[\n')
        f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in rejected))
        f.write("]}\n")
    print(f"{OUT}: {len(layouts)} layouts, {len(rejected)} rejected, "
          f"{os.path.getsize(OUT)} bytes (megatron-core {doc['megatron_core']})")


if __name__ == "__main__":
    main()
