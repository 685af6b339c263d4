#!/usr/bin/env python3
"""Opens `megatron convert --saver hf` directories with Hugging Face transformers, as a user would,
greedily continues a prompt of token ids and computes the logits of a token sequence
(tests/cli/test_convert.sh compares both with `megatron generate` on the checkpoint they came
from).
  hf_export_check.py "1 2 3" N "4 5 6 ..." --model NAME HF_DIR NPY TEXT [--model ...]
For each model prints one JSON line: {"name": NAME, "class": ..., "ids": [the N new ids],
"logits_err": max |ours - theirs| / max |theirs| over every position and vocabulary column of the
sequence's logits, ours from NPY (`megatron generate --logits-file`: (tokens, vocab_size)
float32), theirs model(ids).logits[0] (its columns past vocab_size, the padding's, left out),
"logits_max": max |theirs|, "tokens": [TEXT's ids by AutoTokenizer] (when TEXT is not empty)}.
Exit 3 when transformers or torch is missing (the test then skips), 1 on any other failure."""
import argparse
import json
import sys

try:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # the test skips
    print(f"hf_export_check: {e}", file=sys.stderr)
    sys.exit(3)


def check(name, path, npy, text, prompt, n, seq):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():  # greedy, one token at a time over the whole sequence (no cache)
        for _ in range(n):
            logits = model(ids).logits[0, -1]
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
        theirs = model(torch.tensor([seq])).logits[0].double().numpy()
    out = {"name": name, "class": type(model).__name__, "ids": ids[0, len(prompt):].tolist()}
    ours = np.load(npy)
    if ours.dtype != np.float32 or ours.shape[0] != len(seq) or ours.shape[1] > theirs.shape[1]:
        sys.exit(f"hf_export_check: {npy} is {ours.dtype} {ours.shape}, expected float32 "
                 f"({len(seq)}, <= {theirs.shape[1]})")
    theirs = theirs[:, :ours.shape[1]]
    out["logits_max"] = float(np.abs(theirs).max())
    out["logits_err"] = float(np.abs(ours - theirs).max() / out["logits_max"])
    if text:
        out["tokens"] = AutoTokenizer.from_pretrained(path)(text)["input_ids"]
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prompt")
    ap.add_argument("n", type=int)
    ap.add_argument("seq")
    ap.add_argument("--model", nargs=4, action="append", required=True,
                    metavar=("NAME", "HF_DIR", "NPY", "TEXT"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    prompt, seq = [int(x) for x in a.prompt.split()], [int(x) for x in a.seq.split()]
    for name, path, npy, text in a.model:
        check(name, path, npy, text, prompt, a.n, seq)


if __name__ == "__main__":
    main()
