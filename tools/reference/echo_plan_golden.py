#!/usr/bin/env python3
"""Regenerates tests/golden/echo_plan/cases.json by running Megatron-LM's own ECHO offloading
planner (megatron/core/transformer/moe/offloading_planner.py, pull request #2368) on the CPU.

Get the sources outside the repository and run from the repository root (about 30 s):

    git clone https://github.com/NVIDIA/Megatron-LM /tmp/mlm && cd /tmp/mlm
    git fetch origin pull/2368/head && git checkout a2b16b8733bb4ced46880d6adee6f19124732991
    python3 -m venv /tmp/echo-venv && /tmp/echo-venv/bin/pip install torch triton numpy
    cd /work/main && /tmp/echo-venv/bin/python tools/reference/echo_plan_golden.py \\
        --megatron-src /tmp/mlm

(only megatron/core/transformer/moe/offloading_planner.py is read; its MD5 is recorded). A rerun
with the same sources writes identical bytes. CI never runs this script.

Called unchanged: gen_offloading_plan (the function under its @torch.compile, run eagerly),
which calls gen_assignment / gen_assignment_for_approx_bp, gen_intermediate,
one_shot_greedy_assignment, reclaim_spare_experts, approx_bin_packing_triton,
breadth_first_allocation, depth_first_allocation and reroute_tokens_triton. The intermediate
results are recorded by wrappers that pass the calls through.

Replaced, because there is no GPU here:
  * the two Triton kernels the wrappers launch (approx_bin_packing_kernel and
    reroute_tokens_w_permute_map_kernel) by CPU programs written from their semantics (below);
    the host code around them (bucket set-up, offsets, argsort, probabilities) is Megatron's;
  * breadth_first_allocation's device argument defaults to 'cuda' and gen_offloading_plan does
    not pass one: it is called with device='cpu';
  * the module's one import from megatron.core.parallel_state (used by the random planner only)
    gets a stand-in, so the rest of megatron.core (Transformer Engine and so on) is not needed.

Stable sorts: torch's sort, argsort and topk do not define the order of equal keys (CPU:
std::sort and nth_element), and the planner's result depends on it (which of two equal experts
spills, which offload fills which slot, which tokens move). While the planner runs,
torch.sort/argsort/topk and Tensor.sort/argsort/topk are replaced by stable versions (equal keys
in index order), the order megatron.c defines (src/core/echo_plan.h). The script also runs each
case with torch's own sorts and prints how many cases come out differently.

Cases: 200, from a seeded generator: EP in {2, 4, 8}, experts per rank {1, 2, 4, 8}, spare slots
per rank {1, 2, 4} (at most E: Megatron takes a top-k over the experts), counts up to 3000 in
several shapes (uniform, one hot expert, a few hot experts, zero source rows, all equal, small
counts with many ties, all zero), thresholds 0 and positive (one-shot greedy only), approximate bin packing for
one slot per rank when the average load is at least 7 (below that its bucket width is 0 and
torch divides by zero). Every fourth case also reroutes a small top-k routing map of one rank.
Then 8 cases built so that the float32 proportional split floors differently from exact
arithmetic (shape "float32_floor"), 208 in all.
"""

import argparse
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import sys
import types

import numpy as np
import torch

PLANNER = os.path.join("megatron", "core", "transformer", "moe", "offloading_planner.py")
OUT = os.path.join("tests", "golden", "echo_plan", "cases.json")


def load_planner(src):
    """Imports the planner module from its file, with a stand-in for parallel_state."""
    for name in ("megatron", "megatron.core"):
        sys.modules.setdefault(name, types.ModuleType(name))
    state = types.ModuleType("megatron.core.parallel_state")
    state.get_expert_data_parallel_group = lambda *a, **k: None
    sys.modules["megatron.core.parallel_state"] = state
    path = os.path.join(src, PLANNER)
    spec = importlib.util.spec_from_file_location("offloading_planner", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(path, "rb") as f:
        return mod, hashlib.md5(f.read()).hexdigest()


class CpuLaunch:
    """Stands in for a Triton kernel: kernel[grid](*args) runs fn(program_id, *args) in turn."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *a, **k: [self.fn(pid, *a, **k) for pid in range(grid[0])]


def bin_packing_program(pid, remaining, room_sorted, rank_ids, out, items, heads, tails, m_t,
                        width_t, num_experts, num_ep_ranks, num_buckets, max_items_per_bucket):
    """approx_bin_packing_kernel (one program): ranks in the given order take the head of the
    first non-empty size class from the current one on; a remainder is queued again by size."""
    m, width = int(m_t[0]), int(width_t[0])
    cur = 0
    for k in range(num_ep_ranks):
        room = int(room_sorted[k])
        if room <= 0:
            break
        expert = -1
        for b in range(cur, num_buckets):
            if int(heads[b]) < int(tails[b]):
                cand = int(items[b * max_items_per_bucket + int(heads[b])])
                heads[b] += 1
                if int(remaining[cand]) > 0:
                    expert, cur = cand, b
                    break
            else:
                cur = b + 1
        if expert < 0:
            break
        left = int(remaining[expert])
        put = min(left, room)
        out[expert, int(rank_ids[k])] = put
        remaining[expert] = left - put
        if left - put > 0:
            b = 0 if left - put >= m else max(min((m - (left - put)) // width + 1,
                                                  num_buckets - 1), 0)
            items[b * max_items_per_bucket + int(tails[b])] = expert
            tails[b] += 1


def reroute_program(pid, sorted_tokens, home_of_slot, moves, offsets, out_map, permute,
                    num_tokens, num_experts, num_spare, block):
    """reroute_tokens_w_permute_map_kernel (program = spare slot): the tokens at positions
    [offset, offset + moves) of the home expert's sorted column leave it for the slot."""
    home = int(home_of_slot[pid])
    if home < 0:
        return
    flat = sorted_tokens.reshape(-1)
    base = home * num_tokens + int(offsets[pid])
    for p in range(min(int(moves[pid]), block)):
        t = int(flat[base + p])
        out_map[t, home] = False
        permute[t, pid] = home
        out_map[t, num_experts + pid] = True


@contextlib.contextmanager
def stable_sorts():
    saved = [(torch, n, getattr(torch, n)) for n in ("sort", "argsort", "topk")]
    saved += [(torch.Tensor, n, getattr(torch.Tensor, n)) for n in ("sort", "argsort", "topk")]
    base_sort = torch.sort

    def sort(x, dim=-1, descending=False, **_):
        return base_sort(x, dim=dim, descending=descending, stable=True)

    def argsort(x, dim=-1, descending=False, **_):
        return base_sort(x, dim=dim, descending=descending, stable=True)[1]

    def topk(x, k, dim=-1, largest=True, sorted=True):
        v, i = base_sort(x, dim=dim, descending=largest, stable=True)
        return v.narrow(dim, 0, k), i.narrow(dim, 0, k)

    for owner, name, _ in saved:
        setattr(owner, name, {"sort": sort, "argsort": argsort, "topk": topk}[name])
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def recording(mod, name, log):
    fn = getattr(mod, name)

    @functools.wraps(fn)
    def wrapper(*a, **k):
        if name == "breadth_first_allocation":
            k["device"] = "cpu"
        out = fn(*a, **k)
        log[name] = out
        return out

    return wrapper


def run_planner(mod, counts, routing, probs, rank, per_rank, threshold, method):
    log = {}
    names = ("gen_intermediate", "gen_assignment", "gen_assignment_for_approx_bp",
             "breadth_first_allocation", "depth_first_allocation")
    saved = {n: getattr(mod, n) for n in names}
    for n in names:
        setattr(mod, n, recording(mod, n, log))
    try:
        plan = mod.gen_offloading_plan._torchdynamo_orig_callable
        rerouted, _, _ = plan(torch.from_numpy(routing), torch.from_numpy(probs),
                              torch.from_numpy(counts), rank, counts.shape[0], per_rank,
                              threshold, torch.int32, method)
    finally:
        for n, fn in saved.items():
            setattr(mod, n, fn)
    spill, cap, avg = log["gen_intermediate"]
    assign = log.get("gen_assignment", log.get("gen_assignment_for_approx_bp"))[0]
    floors, _, _ = log["breadth_first_allocation"]
    second, after = log["depth_first_allocation"]
    to_spare = (floors + second).int()
    from_home = (torch.from_numpy(counts) - after).int()
    ep, ne = counts.shape
    load = after.int().view(ep, ep, -1).sum(dim=(0, 2)) + to_spare.view(ep, ep, -1).sum((0, 2))
    return {"avg": int(avg), "spillover": spill.tolist(), "spare_capacity": cap.tolist(),
            "home_to_spare": assign.int().tolist(), "rank_to_spare": to_spare.tolist(),
            "rank_from_home": from_home.tolist(), "rank_load": load.tolist(),
            "rerouted": rerouted}


def draw_counts(rng, ep, ne, shape):
    big = int(rng.choice([10, 100, 1000, 3000]))
    if shape == "uniform":
        return rng.integers(0, big + 1, (ep, ne))
    if shape == "hot":
        c = rng.integers(0, big // 10 + 2, (ep, ne))
        c[:, rng.integers(ne)] += rng.integers(big // 2, big + 1, ep)
        return c
    if shape == "zero_rows":
        c = rng.integers(0, big + 1, (ep, ne))
        c[rng.random(ep) < 0.5] = 0
        return c
    if shape == "multi_hot":
        c = rng.integers(0, big // 20 + 2, (ep, ne))
        for e in rng.choice(ne, min(ne, int(rng.integers(2, 5))), replace=False):
            c[:, e] += rng.integers(0, big + 1, ep)
        return c
    if shape == "equal":
        return np.full((ep, ne), int(rng.integers(1, big + 1)))
    if shape == "ties":
        return rng.integers(0, 4, (ep, ne)) * int(rng.choice([1, 5]))
    if shape == "skewed":
        w = rng.gamma(0.3, 1.0, ne) + 1e-3
        return np.stack([rng.multinomial(int(rng.integers(0, big * ne // 4 + 2)), w / w.sum())
                         for _ in range(ep)])
    return np.zeros((ep, ne), dtype=np.int64)


def topk_routing(rng, tokens, k, ne):
    w = rng.gamma(0.5, 1.0, ne) + 1e-3
    return np.stack([rng.choice(ne, k, replace=False, p=w / w.sum()) for _ in range(tokens)])


def consistent_map(rng, column_counts):
    """A routing map whose columns hold the given counts (rows of any length): not stored."""
    tokens = max(int(column_counts.max()), 1)
    m = np.zeros((tokens, len(column_counts)), dtype=bool)
    for e, c in enumerate(column_counts):
        m[rng.choice(tokens, int(c), replace=False), e] = True
    return m


SHAPES = ("uniform", "hot", "multi_hot", "zero_rows", "equal", "ties", "skewed", "multi_hot")


def make_case(rng, idx):
    ep = int(rng.choice([2, 4, 8]))
    ne = ep * int(rng.choice([1, 2, 4, 8]))
    per_rank = int(rng.choice([p for p in (1, 1, 2, 4) if p <= ne]))
    shape = "zero" if idx == 7 else SHAPES[idx % len(SHAPES)]
    counts = draw_counts(rng, ep, ne, shape).astype(np.int32)
    rank = int(rng.integers(ep))
    case = {"ep": ep, "experts": ne, "spares": ep * per_rank, "shape": shape}
    if idx % 4 == 0:
        k = int(rng.choice([k for k in (1, 2, 4) if k <= ne]))
        ids = topk_routing(rng, int(rng.integers(8, 97)), k, ne)
        routing = np.zeros((len(ids), ne), dtype=bool)
        np.put_along_axis(routing, ids, True, axis=1)
        counts[rank] = routing.sum(axis=0)
        for r in range(ep):
            if r != rank and shape != "zero":
                counts[r] = np.bincount(topk_routing(rng, len(ids), k, ne).ravel(),
                                        minlength=ne)
        case.update(rank=rank, topk=k, ids=ids.tolist())
    else:
        routing = consistent_map(rng, counts[rank])
    avg = int(counts.sum()) // ep
    bin_pack = per_rank == 1 and avg >= 7 and rng.random() < 0.7
    case["method"] = "approx_bin_packing" if bin_pack else "one_shot_greedy"
    case["threshold"] = 0.0 if bin_pack else float(rng.choice([0.0, 0.0, 0.05, 0.1, 0.25, 0.5,
                                                               1.0, 1.0 / 3.0]))
    case["counts"] = counts.tolist()
    probs = rng.random(routing.shape).astype(np.float32) * routing
    return case, counts, routing, probs, rank, per_rank


# (x, d, c) with floor(f32(f32(x / d) * c)) != x * c // d and c <= d / 2, found by a seeded
# random search: seven floors one too low (the exact product is an integer), one too high.
FLOAT32_HITS = ((2, 164, 82), (52, 284, 71), (160, 940, 47), (12, 495, 165), (24, 123, 41),
                (1863, 2438, 318), (315, 435, 174), (5904, 5939, 2715))


def float32_cases():
    """Counts where Megatron's float32 split floors differently from exact arithmetic: EP 2, one
    expert per rank, expert 0 holds d tokens (x of them from rank 1) and spills c into rank 1's
    slot, the avg being d - c."""
    out = []
    for x, d, c in FLOAT32_HITS:
        f32 = np.floor(np.float32(np.float32(x) / np.float32(d)) * np.float32(c))
        assert int(f32) != x * c // d, (x, d, c)
        rest = d - 2 * c  # rank 1's own tokens
        out.append([[d - x, rest // 2], [x, rest - rest // 2]])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron-src", required=True, help="a Megatron-LM checkout (PR 2368)")
    ap.add_argument("--cases", type=int, default=200, help="random cases (then 8 float32 ones)")
    args = ap.parse_args()
    mod, md5 = load_planner(args.megatron_src)
    mod.approx_bin_packing_kernel = CpuLaunch(bin_packing_program)
    mod.reroute_tokens_w_permute_map_kernel = CpuLaunch(reroute_program)
    rng = np.random.default_rng(20260705)
    cases, unstable, unstable_map = [], 0, 0
    for idx in range(args.cases):
        case, counts, routing, probs, rank, per_rank = make_case(rng, idx)
        call = (mod, counts, routing, probs, rank, per_rank, case["threshold"], case["method"])
        with stable_sorts():
            got = run_planner(*call)
        plain = run_planner(*call)
        rerouted, plain_map = got.pop("rerouted"), plain.pop("rerouted")
        unstable_map += not torch.equal(plain_map, rerouted)
        unstable += plain != got
        assert sum(got["rank_load"]) == int(counts.sum()), idx
        case["plan"] = got
        if "ids" in case:
            case["rerouted"] = [np.flatnonzero(row).tolist() for row in rerouted.numpy()]
        cases.append(case)
    for idx, counts in enumerate(float32_cases()):
        counts = np.array(counts, dtype=np.int32)
        method = ("one_shot_greedy", "approx_bin_packing")[idx % 2]
        case = {"ep": 2, "experts": 2, "spares": 2, "shape": "float32_floor", "method": method,
                "threshold": 0.0, "counts": counts.tolist()}
        routing, probs = consistent_map(rng, counts[0]), None
        probs = np.zeros(routing.shape, dtype=np.float32)
        with stable_sorts():
            got = run_planner(mod, counts, routing, probs, 0, 1, 0.0, method)
        got.pop("rerouted")
        case["plan"] = got
        cases.append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    meta = {"source": PLANNER, "source_md5": md5, "megatron_commit":
            "a2b16b8733bb4ced46880d6adee6f19124732991 (refs/pull/2368/head)",
            "generator": "tools/reference/echo_plan_golden.py", "torch": torch.__version__}
    with open(OUT, "w") as f:
        f.write('{"meta": ' + json.dumps(meta) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} cases to {OUT}; with torch's own sorts {unstable} plans and "
          f"{unstable_map} rerouted maps differ")


if __name__ == "__main__":
    main()
