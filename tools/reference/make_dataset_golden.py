#!/usr/bin/env python3
"""Regenerates tests/golden/dataset/ with Megatron-LM's own dataset code and numpy.

Run from the repository root:

    python3 tools/reference/make_dataset_golden.py --megatron /tmp/mlm

--megatron is a directory holding Megatron-LM's `megatron/core` (e.g. `git archive` of
NVIDIA/Megatron-LM extracted there; never committed here) with its C++ helpers built
(`make -C /tmp/mlm/megatron/core/datasets`, which needs `pip install pybind11`). Needs numpy and
torch. CI never runs this: the outputs are committed.

What it writes (tests/golden/dataset/README.md has the details):
  data/A.{bin,idx}, data/B.{bin,idx}  two small indexed datasets written by Megatron's
                                      IndexedDatasetBuilder (uint16 and int32 tokens)
  <case>/case.json                    the configuration and, per split, len and num_epochs
  <case>/cache/*                      every file Megatron's GPTDataset / BlendedDataset wrote to
                                      path_to_cache (description.txt and the .npy indices): the C
                                      code must write the same names and bytes
  <case>/tokens_<split>.npy           the token ids of the first samples of each split
                                      ((K, seq_length + 1) int32), from GPTDataset's own query
  blend_weighted/cli_test.json        the same as `megatron data --json` prints it
  numpy_random/*.npy                  numpy RandomState outputs for the MT19937 / shuffle tests
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

OUT = os.path.join("tests", "golden", "dataset")
DATA = os.path.join(OUT, "data")
MAX_TOKENS_SAMPLES = 48  # samples of token ids kept per split


class NullIdTokenizer:
    """The tokenizer Megatron's config requires. unique_identifiers = None serialises as null, which
    is what the C description writes (the indices do not depend on the tokenizer)."""

    vocab_size = 1000
    eod = 0
    unique_identifiers = None


def write_datasets(torch, IndexedDatasetBuilder):
    os.makedirs(DATA, exist_ok=True)
    rs = np.random.RandomState(20240601)
    specs = {"A": (np.uint16, 600, 1, 24, 60000), "B": (np.int32, 40, 5, 60, 1 << 20)}
    for name, (dtype, ndocs, lo, hi, vocab) in specs.items():
        prefix = os.path.join(DATA, name)
        b = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for _ in range(ndocs):
            n = int(rs.randint(lo, hi + 1))
            doc = rs.randint(1, vocab, size=n).astype(np.int64)
            b.add_item(torch.from_numpy(doc))
            b.end_document()
        b.finalize(prefix + ".idx")


def split_tokens(ds, L, begin, end):
    from megatron.core.datasets.indexed_dataset import IndexedDataset  # noqa: F401

    return int(np.sum(ds.sequence_lengths[begin:end]))


def cases():
    a, b = os.path.join(DATA, "A"), os.path.join(DATA, "B")
    return [
        # Megatron's default split, one epoch everywhere (None sizes).
        {"name": "single_default", "data_path": [a], "split": "969, 30, 1", "seq_length": 16,
         "seed": 1234, "sizes": [None, None, None]},
        # Sizes that need several epochs: train separates its final epoch (< 80% of an epoch),
        # valid needs two epochs without separating; test is one epoch.
        {"name": "single_epochs", "data_path": [a], "split": "80,15,5", "seq_length": 8,
         "seed": 7, "sizes": ["train_separate", "valid_two_epochs", None]},
        # A weighted blend: per-dataset sizes with the 0.5% surplus, blending indices.
        {"name": "blend_weighted", "data_path": ["0.3", a, "0.7", b], "split": "90,8,2",
         "seq_length": 8, "seed": 1234, "sizes": [100, 20, 5], "cli_split": "test"},
        # Prefixes without weights: blended by size (exhaustively without a size).
        {"name": "blend_unweighted", "data_path": [a, b], "split": "70,20,10", "seq_length": 12,
         "seed": 42, "sizes": [None, 30, None]},
        # One weighted prefix is still a BlendedDataset; a zero-weight split is absent.
        {"name": "single_weighted", "data_path": ["1", b], "split": "3,0,1", "seq_length": 10,
         "seed": 99, "sizes": [50, 0, 10]},
    ]


def resolve_sizes(case, IndexedDataset):
    """Turns the symbolic sizes of single_epochs into numbers and checks the intended regime."""
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix, parse_and_normalize_split)

    sizes = list(case["sizes"])
    if not any(isinstance(s, str) for s in sizes):
        return sizes
    ds = IndexedDataset(case["data_path"][0])
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(case["split"]))
    L = case["seq_length"]
    n = ds.sequence_lengths.shape[0]
    for i, s in enumerate(sizes):
        if not isinstance(s, str):
            continue
        beg, end = (int(round(x * float(n))) for x in matrix[i])
        T = int(np.sum(ds.sequence_lengths[beg:end]))
        per_epoch = (T - 1) // L
        if s == "train_separate":  # three epochs, the last one small
            N = 2 * per_epoch + 3
            E, sans = 3, (2 * T - 1) // L
            assert N - sans < int(0.8 * per_epoch), "train case must separate the final epoch"
        else:  # two epochs, the second nearly full
            N = 2 * per_epoch - 1
            E, sans = 2, (T - 1) // L
            assert N - sans >= int(0.8 * per_epoch), "valid case must not separate"
        assert (E - 1) * T < N * L + 1 <= E * T, (s, E, T, N)
        sizes[i] = N
    return sizes


def run_case(case, mods):
    BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig, BlendedDataset, get_blend = mods
    out = os.path.join(OUT, case["name"])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cache = tempfile.mkdtemp(prefix="mg_dataset_golden_")
    config = GPTDatasetConfig(
        random_seed=case["seed"], sequence_length=case["seq_length"],
        blend=get_blend(case["data_path"]), split=case["split"], path_to_cache=cache,
        tokenizer=NullIdTokenizer(), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=False)
    datasets = BlendedMegatronDatasetBuilder(GPTDataset, case["sizes"], lambda: True,
                                             config).build()
    splits = {}
    for i, name in enumerate(["train", "valid", "test"]):
        ds = datasets[i]
        if ds is None:
            splits[name] = None
            continue
        if isinstance(ds, BlendedDataset):
            parts = ds.datasets
            def query(k, ds=ds):
                d = ds.datasets[ds.dataset_index[k]]
                return d._query_document_sample_shuffle_indices(ds.dataset_sample_index[k])[0]
        else:
            parts = [ds]
            def query(k, ds=ds):
                return ds._query_document_sample_shuffle_indices(k)[0]
        epochs = max(p._get_num_epochs(p._get_num_tokens_per_epoch()) for p in parts)
        K = min(len(ds), MAX_TOKENS_SAMPLES)
        L = case["seq_length"]
        toks = np.zeros((K, L + 1), dtype=np.int32)
        for k in range(K):
            t = query(k)
            assert t.shape == (L + 1,) and t.min() >= 0
            toks[k] = t
        np.save(os.path.join(out, f"tokens_{name}.npy"), toks)
        if case.get("cli_split") == name:  # what `megatron data --json --first K` prints
            with open(os.path.join(out, f"cli_{name}.json"), "w") as f:
                f.write(json.dumps({"split": name, "len": len(ds), "num_epochs": int(epochs),
                                    "samples": toks.tolist()}) + "\n")
        splits[name] = {"len": len(ds), "num_epochs": int(epochs),
                        "blended": isinstance(ds, BlendedDataset), "tokens_samples": K}
    files = sorted(os.listdir(cache))
    shutil.copytree(cache, os.path.join(out, "cache"))
    shutil.rmtree(cache)
    meta = {"data_path": case["data_path"], "split": case["split"],
            "seq_length": case["seq_length"], "seed": case["seed"],
            "num_samples": [-1 if s is None else s for s in case["sizes"]],
            "splits": splits, "cache_files": files}
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(case["name"], {k: (v and (v["len"], v["num_epochs"])) for k, v in splits.items()},
          len(files), "cache files")


def numpy_random():
    out = os.path.join(OUT, "numpy_random")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    seeds = [0, 1, 1234, 4294967295]
    meta = {"seeds": seeds, "raw_count": 1300, "shuffle_sizes": [1, 2, 3, 17, 1000],
            "big_shuffle": 1 << 20, "interval_max": [], "interval_draws": 16}
    for s in seeds:
        # randint over [0, 2^32) with uint64 output is numpy's raw next_uint32 stream
        raw = np.random.RandomState(s).randint(0, 1 << 32, size=meta["raw_count"], dtype=np.uint64)
        np.save(os.path.join(out, f"raw_{s}.npy"), raw.astype(np.uint32))
        rs = np.random.RandomState(s)
        for n in meta["shuffle_sizes"]:  # consecutive shuffles from one RandomState
            a = np.arange(n, dtype=np.int32)
            rs.shuffle(a)
            np.save(os.path.join(out, f"shuffle_{s}_{n}.npy"), a)
    import hashlib
    md5 = {}
    for s in seeds:
        a = np.arange(meta["big_shuffle"], dtype=np.int64)
        np.random.RandomState(s).shuffle(a)
        md5[str(s)] = hashlib.md5(a.astype("<i8").tobytes()).hexdigest()
    meta["big_shuffle_md5"] = md5
    # numpy's bounded draws by masked rejection: legacy randint(0, max + 1, dtype=uint64) draws
    # exactly as random_interval(max) (32-bit draws up to 2^32 - 1, 64-bit draws above).
    maxes = [1, 2, 5, 100, (1 << 31), (1 << 32) - 2, (1 << 32) - 1, 1 << 32, (1 << 32) + 1,
             (1 << 40) + 12345, (1 << 62) + 7, (1 << 63) - 1, (1 << 64) - 1]
    draws = np.zeros((len(maxes), meta["interval_draws"]), dtype=np.uint64)
    for i, m in enumerate(maxes):
        rs = np.random.RandomState(1234)
        draws[i] = rs.randint(0, m + 1, size=meta["interval_draws"], dtype=np.uint64)
    meta["interval_max"] = [str(m) for m in maxes]
    np.save(os.path.join(out, "interval.npy"), draws.view(np.int64))
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megatron", required=True, help="directory containing megatron/core")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.megatron))
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import \
        BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    from megatron.core.datasets.utils import get_blend_from_list

    write_datasets(torch, IndexedDatasetBuilder)
    mods = (BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig, BlendedDataset,
            get_blend_from_list)
    for case in cases():
        case["sizes"] = resolve_sizes(case, IndexedDataset)
        run_case(case, mods)
    numpy_random()


if __name__ == "__main__":
    main()
