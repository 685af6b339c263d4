"""Writes the small JSONL inputs of the preprocess golden test (tests/golden/preprocess/).

Each line is a case Megatron's tools/preprocess_data.py handles without crashing: empty text,
unicode (raw and escaped, astral characters through surrogate pairs, U+0000), JSON escapes,
whitespace-only text, extra and duplicate keys (json.loads keeps the last), NaN/Infinity in
another field, pre-split sentences (an array value: one sequence per non-empty sentence), a CRLF
line ending, a lone CR (Python's universal newlines end a line there), and one long document. Deterministic: no randomness beyond a fixed-seed generator.
Usage: python3 tools/reference/make_preprocess_inputs.py OUT_DIR
"""
import json
import random
import sys


def long_text(n_chars):
    rng = random.Random(1234)
    words = ["whale", "Ishmael", "sea", "the", "of", "and", "harpoon", "Queequeg", "1851",
             "3.14159", "naïve", "café", "Ahab's", "don't", "—", "…", "鯨", "🐋", "  ", "\t",
             "\n", "\n\n", "!!!", "(sic)", "x" * 40, "e\u0301", "ünïcödé", "1234567890"]
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(words)
        sep = rng.choice([" ", " ", " ", "", "\n", ", ", ". "])
        out.append(w + sep)
        size += len(w) + len(sep)
    return "".join(out)


def main(out_dir):
    lines = [
        json.dumps({"text": "Hello world"}),
        json.dumps({"text": ""}),
        json.dumps({"text": "Call me Ishmael. Some years ago—never mind how long precisely—"},
                   ensure_ascii=False),
        json.dumps({"text": "Unicode: naïve café, 鯨 (whale), 🐋, e\u0301, \u0000 nul"}),
        json.dumps({"text": "   \n\n\t  "}),
        json.dumps({"id": 7, "meta": {"a": [1, 2.5e3, None, True]}, "text": "extra keys"}),
        '{"text": "first of duplicate keys", "text": "the last duplicate wins"}',
        '{"score": NaN, "inf": -Infinity, "text": "Python json accepts NaN"}',
        json.dumps({"text": "escapes: \" \\ / \b \f \n \r \t end"}),
        '{"text": "escaped \\u00e9\\u00E9 and pair \\ud83d\\ude00 and slash \\/"}',
        json.dumps({"text": ["First sentence.", "", " Second sentence.", "Third."]}),
        json.dumps({"text": []}),
        json.dumps({"text": [""]}),
        '  {"text": "leading and trailing whitespace"}  ',
        json.dumps({"text": "a line ending in CRLF"}) + "\r",
        json.dumps({"text": "a lone CR ends a line too"}) + "\r" + json.dumps({"text": "after CR"}),
        json.dumps({"text": long_text(60000)}, ensure_ascii=False),
        json.dumps({"text": "the last line"}),
    ]
    with open(f"{out_dir}/small.jsonl", "w", encoding="utf-8", newline="") as f:
        for line in lines:
            f.write(line + "\n")
    # Two keys, one output per key.
    keys = [
        {"title": "Loomings", "text": "Call me Ishmael."},
        {"title": "", "text": "no title"},
        {"text": "title after text", "title": "The Carpet-Bag"},
    ]
    with open(f"{out_dir}/keys.jsonl", "w", encoding="utf-8", newline="") as f:
        for obj in keys:
            f.write(json.dumps(obj) + "\n")
    # The literal "<|endoftext|>" in text: Megatron's HF-based GPT2BPETokenizer maps it to 50256.
    with open(f"{out_dir}/eot.jsonl", "w", encoding="utf-8", newline="") as f:
        f.write(json.dumps({"text": "before<|endoftext|>after <|endoftext|>"}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
