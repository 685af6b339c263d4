#!/usr/bin/env python3
"""Tokenizers and text for bench/tokenizer_bench.sh, written into OUT_DIR (nothing committed):
  gpt2_json/     data/gpt2's vocabulary and merges as a tokenizer.json (HuggingFaceTokenizer on a
                 real 50 257-token vocabulary)
  llama3/, qwen2/  the configurations of tools/reference/make_tokenizer_models.py with a 32 000
                 vocabulary (Llama 3's expression and ignore_merges; Qwen2's with NFC)
  spm.model      SentencePiece BPE as Llama 2's (byte fallback), vocabulary 16 000
  varied.txt     1.2 MB of the seeded varied text of tools/reference/tokenizer_text.py (code, CJK,
                 emoji, combining marks, ...) next to the English demo corpus
Usage: make_bench_tokenizers.py OUT_DIR (from the repository root; about a minute)."""
import os
import sys

sys.path.insert(0, "tools/reference")
import make_tokenizer_models as mtm  # noqa: E402
import tokenizer_text  # noqa: E402


def main():
    out = sys.argv[1]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    gpt2 = Tokenizer(models.BPE.from_file("data/gpt2/encoder.json", "data/gpt2/vocab.bpe"))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<|endoftext|>"])
    os.makedirs(os.path.join(out, "gpt2_json"), exist_ok=True)
    gpt2.save(os.path.join(out, "gpt2_json", "tokenizer.json"))
    corpus = tokenizer_text.load_corpus()
    text = mtm.train_text(corpus)
    for kind in ("llama3", "qwen2"):
        tok, config = mtm.bpe_tokenizer(kind, text, vocab=32000)
        mtm.save_bpe(kind, tok, config, out)
    mtm.train_spm(text, vocab=16000, path=os.path.join(out, "spm.model"))
    with open(os.path.join(out, "varied.txt"), "w", encoding="utf-8") as f:
        f.write(tokenizer_text.varied_text(21, 1200000, corpus))


if __name__ == "__main__":
    main()
