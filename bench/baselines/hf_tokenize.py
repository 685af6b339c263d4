#!/usr/bin/env python3
"""Hugging Face `tokenizers` baseline for bench/tokenizer_bench.sh, on one thread:
    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false hf_tokenize.py VOCAB MERGES TEXT MODE MIN_S
The tokenizer is built from the same encoder.json and vocab.bpe (BPE model, ByteLevel
pre-tokenizer, no prefix space, no added tokens: what megatron.c and Megatron's GPT2BPETokenizer
do). MODE "whole" encodes the text as one document, "paras" splits it after every blank line into
documents; either way one `encode_batch_fast` call encodes them (the fastest entry point: a Rust
loop without per-call Python overhead that skips offset tracking; `encode` is slower).
Timed like bench/tokenize_bench.c: a cold pass, then warm passes until MIN_S seconds (at least 3);
prints one JSON line with MB/s by process CPU time and wall time, the id count and an FNV-1a
checksum of the ids."""
import json
import statistics
import sys
import time

from tokenizers import Tokenizer, models, pre_tokenizers


def main():
    vocab, merges, path, mode, min_s = sys.argv[1:6]
    min_s = float(min_s)
    t0 = time.perf_counter()
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    load_s = time.perf_counter() - t0
    raw = open(path, "rb").read()
    text = raw.decode("utf-8")
    if mode == "paras":
        parts = text.split("\n\n")
        units = [p + "\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    else:
        units = [text]

    def run():
        return [i for e in tok.encode_batch_fast(units, add_special_tokens=False) for i in e.ids]

    cpu, wall, ids = [], [], None
    start = time.perf_counter()
    while len(cpu) < 4 or time.perf_counter() - start < min_s:
        c0, w0 = time.process_time(), time.perf_counter()
        ids = run()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    mb = len(raw) / 1e6
    print(json.dumps({
        "impl": "hf-tokenizers", "mode": mode, "units": len(units), "bytes": len(raw),
        "ids": len(ids), "fnv": f"{h:016x}", "load_s": round(load_s, 3),
        "cold_cpu_mb_s": round(mb / cpu[0], 2), "best_cpu_mb_s": round(mb / min(cpu[1:]), 2),
        "median_cpu_mb_s": round(mb / statistics.median(cpu[1:]), 2),
        "best_wall_mb_s": round(mb / min(wall[1:]), 2),
        "median_wall_mb_s": round(mb / statistics.median(wall[1:]), 2), "passes": len(cpu)}))


if __name__ == "__main__":
    main()
