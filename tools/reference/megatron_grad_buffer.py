#!/usr/bin/env python3
"""Writes tests/golden/grad_buffer/megatron_grad_buffer.json from megatron-core's own DDP buffer
layout and distributed-optimizer shard ranges.

Run from the repository root with megatron-core installed (torch must be importable; no GPU, no
process group and no memory for the parameters are needed: everything lives on the meta device):

    python3 -m venv /tmp/mcore-venv --system-site-packages
    /tmp/mcore-venv/bin/pip install megatron-core==0.16.1
    /tmp/mcore-venv/bin/python tools/reference/megatron_grad_buffer.py

Nothing is reimplemented. For every case a torch.nn.Module is built whose parameters, registered in
order p0000, p0001, ..., have the case's sizes (meta tensors; the shared-embedding one carries
`shared_embedding = True`, as LanguageModule.setup_embeddings_and_output_layer sets it), and is
wrapped in megatron-core's own DistributedDataParallel with a DistributedDataParallelConfig built
from the case's flags, as Megatron-LM's training.get_model does. DDP resolves the bucket size
(its default max(40M, 1M x dp), None without overlap_grad_reduce, None on pipeline ranks > 0) and
builds the _ParamAndGradBuffer; we record its param_index_map, bucket_indices and each bucket's
numel_unpadded. With the distributed optimizer, DistributedOptimizer._build_model_gbuf_range
(which calls _build_model_gbuf_param_range_map) is called for every (data-parallel rank, bucket)
and its four ranges per parameter are recorded.

Mocked: torch.distributed reports initialised; the process groups are stand-ins that know their
size and rank (the data-parallel group's rank is set before each _build_model_gbuf_range call);
torch.cuda.current_device returns "meta", so the buffers DDP allocates take no memory.

Megatron-LM's training.py (not in megatron-core) resolves the bucket size itself before building
DDP; at the Megatron-LM commit this project follows it uses the data-and-context-parallel group
size, DDP's own default uses the data-parallel group size: the same here (context parallel 1).

Output: one JSON object, one case per line:
  {"megatron_core", "cases": [{"name", "sizes", "dp", "use_distributed_optimizer",
   "overlap_grad_reduce", "ddp_bucket_size" (flag value or null), "pad_for_high_nccl_busbw",
   "shared_embedding" (registration index, -1 none, or a list of them), "pp_rank", "bucket_size" (resolved, null =
   one bucket), "numel", "numel_unpadded",
   "params": [[index, start, end, bucket], ...]   (buffer order),
   "buckets": [[start, end, numel_unpadded], ...],
   "shards": null without the distributed optimizer, else per dp rank, per bucket, the params of
             the rank's shard in buffer order: [index, world (2), world_in_bucket (2),
             local (2), param (2)]}]}
"""

import json
import os
import random
import sys
import warnings

warnings.filterwarnings("ignore")

import torch
import torch.distributed

OUT = os.path.join("tests", "golden", "grad_buffer", "megatron_grad_buffer.json")
M = 1000000


class FakeGroup:
    def __init__(self, size, rank=0):
        self._size = size
        self._rank = rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def install_mock():
    td = torch.distributed
    td.is_available = lambda: True
    td.is_initialized = lambda: True
    td.get_rank = lambda group=None: 0 if group is None else group.rank()
    td.get_world_size = lambda group=None: 1 if group is None else group.size()
    torch.cuda.current_device = lambda: "meta"


install_mock()

from megatron.core import package_info  # noqa: E402
from megatron.core.distributed import (  # noqa: E402
    DistributedDataParallel,
    DistributedDataParallelConfig,
)
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer  # noqa: E402
from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


class Params(torch.nn.Module):
    def __init__(self, sizes, shared):
        super().__init__()
        for i, n in enumerate(sizes):
            p = torch.nn.Parameter(torch.empty(n, device="meta"))
            if i == shared or (isinstance(shared, list) and i in shared):
                p.shared_embedding = True
            self.register_parameter("p%04d" % i, p)


def run_case(name, sizes, dp, distopt, overlap, bucket_flag=None, busbw=False, shared=-1,
             pp_rank=0):
    module = Params(sizes, shared)
    params = list(module.parameters())
    index = {p: i for i, p in enumerate(params)}
    pg = ProcessGroupCollection()
    pg.dp = FakeGroup(dp)
    pg.dp_cp = FakeGroup(dp)
    pg.tp = FakeGroup(1)
    pg.pp = FakeGroup(pp_rank + 1, pp_rank)
    pg.ep = FakeGroup(1)
    pg.expt_dp = FakeGroup(dp)
    cfg = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=1)
    ddp_cfg = DistributedDataParallelConfig(
        use_distributed_optimizer=distopt,
        overlap_grad_reduce=overlap,
        bucket_size=bucket_flag,
        pad_buckets_for_high_nccl_busbw=busbw,
    )
    ddp = DistributedDataParallel(cfg, ddp_cfg, module, pg_collection=pg)
    assert len(ddp.buffers) == 1 and not ddp.expert_parallel_buffers
    buf = ddp.buffers[0]
    rows = sorted(buf.param_index_map.items(), key=lambda kv: kv[1][0])
    out_params = [[index[p], s, e, b] for p, (s, e, b) in rows]
    assert [r[0] for r in out_params] == list(range(len(sizes) - 1, -1, -1))
    buckets = [[bk.offset, bk.offset + bk.grad_data.numel(), bk.numel_unpadded]
               for bk in buf.buckets]
    assert [(b[0], b[1]) for b in buckets] == [tuple(x) for x in buf.bucket_indices]
    shards = None
    if distopt:
        shards = []
        for r in range(dp):
            buf.data_parallel_group._rank = r
            per_bucket = []
            for b in range(len(buf.buckets)):
                pm = DistributedOptimizer._build_model_gbuf_range(buf, b)["param_map"]
                per_bucket.append([
                    [index[p], rg["gbuf_world"].start, rg["gbuf_world"].end,
                     rg["gbuf_world_in_bucket"].start, rg["gbuf_world_in_bucket"].end,
                     rg["gbuf_local"].start, rg["gbuf_local"].end,
                     rg["param"].start, rg["param"].end]
                    for p, rg in pm.items()])
            shards.append(per_bucket)
        buf.data_parallel_group._rank = 0
    return {
        "name": name, "sizes": sizes, "dp": dp, "use_distributed_optimizer": distopt,
        "overlap_grad_reduce": overlap, "ddp_bucket_size": bucket_flag,
        "pad_for_high_nccl_busbw": busbw, "shared_embedding": shared, "pp_rank": pp_rank,
        "bucket_size": ddp.bucket_size, "numel": buf.numel, "numel_unpadded": buf.numel_unpadded,
        "params": out_params, "buckets": buckets, "shards": shards,
    }


def cases():
    c = []
    # Sizes 10, 20, 30 over 2 ranks, and a hand-worked example of four parameters (16 elements
    # over 4 ranks; the case names are kept: the committed golden file carries them).
    c.append(("example_10_20_30", [10, 20, 30], 2, True, False))
    c.append(("worked4_plain", [4, 4, 5, 3], 4, False, False))
    c.append(("worked4_distopt", [4, 4, 5, 3], 4, True, False))
    # Sizes not divisible by D, for D = 1, 2, 4, 8 (and 3, 6: lcm with 128 is not a power of two).
    odd = [7, 13, 100, 1, 65, 129, 64, 63]
    for d in (1, 2, 3, 4, 6, 8):
        for distopt in (False, True):
            c.append(("odd_d%d_%s" % (d, "distopt" if distopt else "plain"), odd, d, distopt,
                      False))
    # One parameter spanning every shard; two spanning shard boundaries.
    for d in (2, 4, 8):
        c.append(("span_one_d%d" % d, [1000], d, True, False))
        c.append(("span_two_d%d" % d, [300, 500], d, True, False))
    # Buckets by size: one huge parameter closes its own bucket; an exact fill (>=) closes it.
    for d in (1, 2, 4, 8):
        for distopt in (False, True):
            tag = "distopt" if distopt else "plain"
            c.append(("huge_param_d%d_%s" % (d, tag), [10, 20, 5000, 30, 40], d, distopt, True,
                      {"bucket_flag": 100}))
            c.append(("exact_fill_d%d_%s" % (d, tag), [64, 64, 64, 64, 1], d, distopt, True,
                      {"bucket_flag": 128}))
            c.append(("many_buckets_d%d_%s" % (d, tag), [50, 70, 30, 90, 10, 200, 5, 5, 300],
                      d, distopt, True, {"bucket_flag": 100}))
    # --ddp-bucket-size without --overlap-grad-reduce: Megatron ignores it (one bucket).
    c.append(("bucket_flag_without_overlap", [50, 70, 30, 90], 2, True, False,
              {"bucket_flag": 60}))
    # Pipeline rank > 0: no bucketing even with overlap.
    c.append(("pp_rank1_no_bucketing", [50, 70, 30, 90], 2, True, True,
              {"bucket_flag": 60, "pp_rank": 1}))
    # Megatron's default bucket size: max(40M, 1M x dp) elements.
    c.append(("default_bucket_d2", [30 * M, 30 * M, 30 * M, 10], 2, True, True))
    c.append(("default_bucket_d64", [30 * M, 30 * M, 30 * M, 10], 64, True, True))
    c.append(("default_bucket_d64_plain", [30 * M, 30 * M, 30 * M, 10], 64, False, True))
    # The shared embedding: last registered (first in the buffer), first registered (last in the
    # buffer: the bucket before it closes), in the middle; with and without the distributed
    # optimizer (without, Megatron does not split) and with bucketing.
    emb = [1000, 10, 20, 30, 40, 50]
    for d in (1, 2, 4, 8):
        for distopt in (False, True):
            tag = "distopt" if distopt else "plain"
            c.append(("shared_first_d%d_%s" % (d, tag), emb, d, distopt, False, {"shared": 0}))
            c.append(("shared_last_d%d_%s" % (d, tag), list(reversed(emb)), d, distopt, False,
                      {"shared": 5}))
            c.append(("shared_middle_d%d_%s" % (d, tag), [10, 20, 1000, 30, 40], d, distopt,
                      False, {"shared": 2}))
            c.append(("shared_bucketed_d%d_%s" % (d, tag), emb, d, distopt, True,
                      {"shared": 0, "bucket_flag": 60}))
    # Two shared-embedding parameters in one buffer (each its own bucket with the distributed
    # optimizer): "shared_embedding" is then the list of their registration indices.
    for d in (1, 2, 4):
        c.append(("shared_two_d%d" % d, [1000, 10, 20, 700, 30], d, True, False, {"shared": [0, 3]}))
        c.append(("shared_two_bucketed_d%d" % d, [1000, 10, 20, 700, 30], d, True, True,
                  {"shared": [0, 3], "bucket_flag": 25}))
    # Bucket padding for high NCCL bus bandwidth: lcm(D, 128, 65536).
    for d in (1, 2, 3, 4, 8):
        c.append(("busbw_d%d" % d, odd, d, True, False, {"busbw": True}))
        c.append(("busbw_bucketed_d%d" % d, [50, 70, 30, 90, 10, 200], d, True, True,
                  {"busbw": True, "bucket_flag": 100}))
    c.append(("busbw_plain_ignored", odd, 4, False, True, {"busbw": True, "bucket_flag": 100}))
    # Seeded random sizes and flags.
    rng = random.Random(1234)
    for k in range(24):
        n = rng.randint(1, 12)
        sizes = [rng.choice([1, 2, 3, 63, 64, 65, 127, 128, 129, rng.randint(1, 3000)])
                 for _ in range(n)]
        d = rng.choice([1, 2, 3, 4, 5, 8, 16])
        distopt = rng.random() < 0.75
        overlap = rng.random() < 0.6
        extra = {}
        if overlap and rng.random() < 0.8:
            extra["bucket_flag"] = rng.choice([1, 64, 100, 500, 2000])
        if rng.random() < 0.3:
            extra["shared"] = rng.randrange(n)
        if rng.random() < 0.2:
            extra["busbw"] = True
        c.append(("random_%02d" % k, sizes, d, distopt, overlap, extra))
    return c


def main():
    out = []
    for case in cases():
        name, sizes, d, distopt, overlap = case[:5]
        extra = case[5] if len(case) > 5 else {}
        out.append(run_case(name, sizes, d, distopt, overlap, **extra))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write('{"megatron_core":%s,\n"cases":[\n' % json.dumps(package_info.__version__))
        f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in out))
        f.write("]}\n")
    nb = sum(len(x["buckets"]) for x in out)
    print("%s: %d cases, %d buckets, megatron-core %s" % (OUT, len(out), nb,
                                                         package_info.__version__))


if __name__ == "__main__":
    sys.exit(main())
