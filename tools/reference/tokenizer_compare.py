#!/usr/bin/env python3
"""Writes a few MB of seeded varied documents (tokenizer_text.py) as OUT_DIR/docs.jsonl and, for
each tokenizer of tests/golden/tokenizers/, the indexed dataset Megatron's
tools/preprocess_data.py writes for it with --append-eod (OUT_DIR/<kind>_text_document.bin/.idx,
reference encoders and writer in tokenizer_ref.py). tests/cli/test_tokenizers.sh runs
`megatron preprocess` on the same documents and compares the files byte for byte.
Usage: tokenizer_compare.py OUT_DIR MEGABYTES [SEED]
Exit 3 (and one line on stderr) when python3 lacks tokenizers or sentencepiece."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GOLDEN = "tests/golden/tokenizers"
KINDS = ("llama3", "qwen2", "neox", "spm_bpe")


def main():
    out, mb = sys.argv[1], float(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    try:
        import sentencepiece  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as e:
        print(f"python3 lacks {e.name} (pip install tokenizers sentencepiece)", file=sys.stderr)
        sys.exit(3)
    import tokenizer_ref
    import tokenizer_text
    docs = tokenizer_text.documents(seed, int(mb * 1e6))
    tokenizer_ref.write_jsonl(os.path.join(out, "docs.jsonl"), docs)
    for kind in KINDS:
        encode, vocab_size, eod = tokenizer_ref.load(kind, GOLDEN)
        tokenizer_ref.write_indexed(os.path.join(out, f"{kind}_text_document"),
                                    tokenizer_ref.preprocess(encode, eod, docs, True), vocab_size)
    print(f"{len(docs)} documents, {os.path.getsize(os.path.join(out, 'docs.jsonl'))} bytes")


if __name__ == "__main__":
    main()
