#!/usr/bin/env python3
"""Reference tokenizer throughput for bench/tokenizer_bench.sh, on one thread:
    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false hf_tokenize.py KIND FILE1 FILE2 TEXT MODE MIN_S [LABEL]
KIND gpt2: Hugging Face `tokenizers` built from encoder.json (FILE1) and vocab.bpe (FILE2) (BPE
model, ByteLevel pre-tokenizer, no prefix space, no added tokens: what megatron.c and Megatron's
GPT2BPETokenizer do). KIND json: `tokenizers` from the tokenizer.json FILE1 (or FILE1/tokenizer.json),
with its post-processor's special tokens, as Megatron's HuggingFaceTokenizer. KIND spm:
`sentencepiece` on the .model FILE1, encode_as_ids with one thread (SentencePieceTokenizer,
Llama2Tokenizer). MODE "whole" encodes the text as one document, "paras" splits it after every
blank line into documents; either way one batch call encodes them (tokenizers' encode_batch_fast,
a Rust loop without per-call Python overhead that skips offset tracking; sentencepiece's encode
on the list). Timed like bench/tokenize_bench.c: a cold pass, then warm passes until MIN_S seconds
(at least 3); prints one JSON line with MB/s by process CPU time and wall time, the id count and
an FNV-1a checksum of the ids."""
import json
import os
import statistics
import sys
import time


def load(kind, f1, f2):
    if kind == "spm":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=f1)
        return lambda units: sp.encode(units, out_type=int, num_threads=1)
    from tokenizers import Tokenizer, models, pre_tokenizers
    if kind == "gpt2":
        tok = Tokenizer(models.BPE.from_file(f1, f2))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        special = False
    else:
        tok = Tokenizer.from_file(os.path.join(f1, "tokenizer.json") if os.path.isdir(f1) else f1)
        special = True
    return lambda units: [e.ids for e in tok.encode_batch_fast(units, add_special_tokens=special)]


def main():
    kind, f1, f2, path, mode, min_s = sys.argv[1:7]
    label = sys.argv[7] if len(sys.argv) > 7 else kind
    min_s = float(min_s)
    t0 = time.perf_counter()
    encode = load(kind, f1, f2)
    load_s = time.perf_counter() - t0
    raw = open(path, "rb").read()
    text = raw.decode("utf-8")
    if mode == "paras":
        parts = text.split("\n\n")
        units = [p + "\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    else:
        units = [text]

    def run():
        return [i for ids in encode(units) for i in ids]

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
        "impl": "reference", "tokenizer": label, "text": os.path.basename(path), "mode": mode,
        "units": len(units), "bytes": len(raw), "ids": len(ids), "fnv": f"{h:016x}",
        "load_s": round(load_s, 3), "cold_cpu_mb_s": round(mb / cpu[0], 2),
        "best_cpu_mb_s": round(mb / min(cpu[1:]), 2),
        "median_cpu_mb_s": round(mb / statistics.median(cpu[1:]), 2),
        "best_wall_mb_s": round(mb / min(wall[1:]), 2),
        "median_wall_mb_s": round(mb / statistics.median(wall[1:]), 2), "passes": len(cpu)}))


if __name__ == "__main__":
    main()
