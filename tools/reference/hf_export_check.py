#!/usr/bin/env python3
"""Opens a `megatron convert --saver hf` directory with Hugging Face transformers, as a user would,
and greedily continues a prompt of token ids (tests/cli/test_convert.sh compares the ids with
`megatron generate` on the checkpoint it came from).
  hf_export_check.py HF_DIR "1 2 3" N [--tokenizer TEXT]
Prints one JSON line: {"class": ..., "ids": [the N new ids], "tokens": [TEXT's ids by
AutoTokenizer] (with --tokenizer)}. Exit 3 when transformers or torch is missing (the test then
skips), 1 on any other failure."""
import json
import sys

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # the test skips
    print(f"hf_export_check: {e}", file=sys.stderr)
    sys.exit(3)


def main():
    path, prompt, n = sys.argv[1], [int(x) for x in sys.argv[2].split()], int(sys.argv[3])
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():  # greedy, one token at a time over the whole sequence (no cache)
        for _ in range(n):
            logits = model(ids).logits[0, -1]
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    out = {"class": type(model).__name__, "ids": ids[0, len(prompt):].tolist()}
    if len(sys.argv) > 5 and sys.argv[4] == "--tokenizer":
        out["tokens"] = AutoTokenizer.from_pretrained(path)(sys.argv[5])["input_ids"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
