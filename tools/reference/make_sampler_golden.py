#!/usr/bin/env python3
"""Regenerates tests/golden/sampler/: torch's CPU randperm and Megatron-LM's cyclic sampler.

Run from the repository root:

    python3 tools/reference/make_sampler_golden.py [--megatron FILE]

FILE is Megatron-LM's megatron/training/datasets/data_samplers.py (default: read from the bare
mirror at /work/.mirror/NVIDIA+Megatron-LM/repo with `git show HEAD:<path>`). The module is
executed as it is, with stand-ins for the imports its MegatronPretrainingRandomSampler does not
use (mpu, get_args, Split, the signal handler), so the sample orders come from Megatron's own
class. Needs torch (CPU is enough). CI never runs this: the outputs are committed.

What it writes (tests/golden/sampler/README.md has the details):
  randperm.json  torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist() for
                 several n and seeds, and md5 sums of larger permutations (int64 little-endian)
  cyclic.json    per case (dataset length, micro batch, data-parallel size, data sharding, the
                 consumed samples the loader starts from): every data-parallel rank's first
                 micro-batches as Megatron's training loop draws them (cyclic_iter over the
                 sampler: the sampler is iterated again each time an epoch's iterator ends)
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import types

import torch

OUT = os.path.join("tests", "golden", "sampler")
MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
SAMPLERS = "megatron/training/datasets/data_samplers.py"


def load_megatron_samplers(path):
    """Executes data_samplers.py with stand-ins for its Megatron imports."""
    if path:
        src = open(path).read()
    else:
        src = subprocess.run(["git", "-C", MIRROR, "show", "HEAD:" + SAMPLERS], check=True,
                             capture_output=True, text=True).stdout
    stubs = {
        "megatron": types.ModuleType("megatron"),
        "megatron.core": types.ModuleType("megatron.core"),
        "megatron.core.datasets": types.ModuleType("megatron.core.datasets"),
        "megatron.core.datasets.utils": types.ModuleType("megatron.core.datasets.utils"),
        "megatron.training": types.ModuleType("megatron.training"),
        "megatron.training.dist_signal_handler":
            types.ModuleType("megatron.training.dist_signal_handler"),
    }
    stubs["megatron.core"].mpu = None
    stubs["megatron.core.datasets.utils"].Split = None
    stubs["megatron.training"].get_args = None
    stubs["megatron.training.dist_signal_handler"].DistributedSignalHandler = None
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        mod = types.ModuleType("data_samplers")
        exec(compile(src, SAMPLERS, "exec"), mod.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


def randperm(n, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g)


def randperm_golden():
    cases = []
    for seed in (0, 1, 2, 7, 1234, 4294967295):
        for n in (0, 1, 2, 3, 10, 17, 100, 625, 1000):
            cases.append({"seed": seed, "n": n, "perm": randperm(n, seed).tolist()})
    sums = []
    for seed in (0, 3):
        for n in (1 << 20, 1000003):
            p = randperm(n, seed).to(torch.int64).numpy().astype("<i8")
            sums.append({"seed": seed, "n": n, "md5": hashlib.md5(p.tobytes()).hexdigest()})
    # randperm_cpu's two algorithms meet at n = UINT32_MAX / 20: the last n of the swaps with
    # 32-bit draws and the first of the inside-out shuffle with 64-bit draws (1.7 GB each;
    # checked by the unit test only with MG_TEST_SLOW=1)
    large = []
    for n in ((1 << 32) // 20 - 1, (1 << 32) // 20):
        p = randperm(n, 5).numpy().astype("<i8")
        large.append({"seed": 5, "n": n, "md5": hashlib.md5(p.tobytes()).hexdigest()})
        del p
    return {"torch": torch.__version__, "cases": cases, "md5": sums, "large_md5": large}


def cyclic_batches(ds, total, consumed, mbs, dp, sharding, k):
    """Each rank's first k micro-batches, as training.py's cyclic_iter draws them."""
    out = []
    for rank in range(dp):
        sampler = ds.MegatronPretrainingRandomSampler(
            None, total_samples=total, consumed_samples=consumed, micro_batch_size=mbs,
            data_parallel_rank=rank, data_parallel_size=dp, data_sharding=sharding)
        got = []
        while len(got) < k:  # cyclic_iter: iterate the sampler again when an epoch ends
            n = len(got)
            for batch in sampler:
                got.append([int(i) for i in batch])
                if len(got) == k:
                    break
            assert len(got) > n, "an epoch yielded nothing"
        out.append(got)
    return out


def cyclic_golden(ds):
    cases = []
    for total in (9, 16, 29):
        for mbs in (1, 2, 3):
            for dp in (1, 2, 4):
                if total < mbs * dp:
                    continue  # Megatron divides by zero (no complete batch)
                active = total - total % (mbs * dp)
                for sharding in (True, False):
                    # from the start, mid-epoch, and a few epochs in (a resume)
                    for consumed in (0, mbs * dp, active + 2 * mbs * dp, 3 * active):
                        k = -(-3 * total // (mbs * dp)) + 1  # about three epochs
                        cases.append({
                            "total": total, "mbs": mbs, "dp": dp, "sharding": sharding,
                            "consumed": consumed,
                            "batches": cyclic_batches(ds, total, consumed, mbs, dp, sharding, k),
                        })
    return {"cases": cases}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron", help="Megatron-LM's " + SAMPLERS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_megatron_samplers(args.megatron)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "randperm.json"), "w") as f:
        json.dump(randperm_golden(), f, separators=(",", ":"))
        f.write("\n")
    cyc = cyclic_golden(ds)
    with open(os.path.join(OUT, "cyclic.json"), "w") as f:
        json.dump(cyc, f, separators=(",", ":"))
        f.write("\n")
    print("randperm.json, cyclic.json (%d cases) written to %s" % (len(cyc["cases"]), OUT))


if __name__ == "__main__":
    main()
