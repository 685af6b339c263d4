#!/usr/bin/env python3
"""Hugging Face `tokenizers` baseline for bench/preprocess_bench.sh: the same job as
`megatron preprocess --append-eod` (JSONL -> Megatron .bin/.idx, uint16, one sequence per
document, EOD appended to non-empty documents, empty documents kept) with HF's Rust tokenizer:
    hf_preprocess.py VOCAB MERGES INPUT.jsonl OUTPUT_PREFIX THREADS
Lines are read and json.loads'ed in Python, encoded in chunks of 256 documents with one
`encode_batch_fast` call each (the fastest entry point; Rayon runs THREADS threads, set through
RAYON_NUM_THREADS by the caller), and written with numpy as Megatron's IndexedDatasetBuilder
does. Prints one JSON line: bytes, documents, tokens, load and total wall seconds."""
import json
import struct
import sys
import time

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers


def main():
    vocab, merges, path, prefix, threads = sys.argv[1:6]
    t0 = time.perf_counter()
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    eod = tok.token_to_id("<|endoftext|>")
    load_s = time.perf_counter() - t0
    lengths, nbytes, ndocs, ntok = [], 0, 0, 0
    doc_index = [0]
    with open(path, "r", encoding="utf-8") as fin, open(prefix + ".bin", "wb") as fbin:
        def flush(texts):
            nonlocal ntok
            for enc in tok.encode_batch_fast(texts, add_special_tokens=False):
                ids = enc.ids
                if ids:
                    ids.append(eod)
                    fbin.write(np.array(ids, dtype=np.uint16).tobytes())
                    lengths.append(len(ids))
                    ntok += len(ids)
                doc_index.append(len(lengths))
        chunk = []
        for line in fin:
            nbytes += len(line.encode("utf-8"))
            chunk.append(json.loads(line)["text"])
            ndocs += 1
            if len(chunk) == 256:
                flush(chunk)
                chunk = []
        if chunk:
            flush(chunk)
    lens = np.array(lengths, dtype=np.int32)
    ptrs = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        ptrs[1:] = np.cumsum(lens[:-1].astype(np.int64) * 2)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_index)))
        f.write(lens.tobytes() + ptrs.tobytes() + np.array(doc_index, dtype=np.int64).tobytes())
    print(json.dumps({"impl": "hf-tokenizers", "threads": int(threads), "bytes": nbytes,
                      "documents": ndocs, "tokens": ntok, "load_s": round(load_s, 3),
                      "wall_s": round(time.perf_counter() - t0, 3)}))


if __name__ == "__main__":
    main()
