#!/usr/bin/env python3
"""Writes tests/golden/tokenizer_gpt2.golden: GPT-2 token ids from Hugging Face `tokenizers` for
the demo corpus and a set of tricky strings, read from the project's own data/gpt2/encoder.json and
data/gpt2/vocab.bpe. Run from the repository root:

    python3 tools/reference/make_tokenizer_golden.py

The reference is a `tokenizers.Tokenizer` (BPE model from the two files, ByteLevel pre-tokenizer
without a prefix space) with "<|endoftext|>" registered as a special token, which is what
transformers' GPT2TokenizerFast does and therefore what current Megatron-LM's GPT2BPETokenizer
(built on GPT2TokenizerFast) does: a literal "<|endoftext|>" in a text encodes to 50256.

A second, independent check restates the GPT-2 BPE algorithm (Python `regex` pattern, merge
ranks, lowest-rank-first pair merging; the special token split out first) and stops if it
disagrees with `tokenizers` on any string, so the golden ids are what Megatron's
preprocess_data.py writes.

Records (MGGOLDEN v1, tests/golden/README.md):
  corpus.ids            u16 (N)   ids of data/moby-dick.txt encoded as one text
  str.NN.text, .ids     u8, u16   tricky strings (UTF-8 bytes) and their ids
  bad.NN.bytes          u8        byte strings that are not valid UTF-8 (no reference encoding)
  bad.NN.replaced       u8        bytes.decode('utf-8', errors='replace'), re-encoded as UTF-8
"""
import os
import random
import struct
import sys

import regex
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCAB, MERGES = "data/gpt2/encoder.json", "data/gpt2/vocab.bpe"
CORPUS = "data/moby-dick.txt"
OUT = "tests/golden/tokenizer_gpt2.golden"
U8, U16 = 2, 3

TRICKY = [
    "",
    " ",
    "Hello, world!",
    "  leading and trailing  ",
    "trailing spaces   ",
    "a\n\n\nb",
    " \n ",
    "\n\n\n",
    "tabs\tand\t\tmixed \t\n\t whitespace\t",
    "   \n\n  x  \r\n y\r\n\r\n",
    "I'm sure it's what they've said: we'll see, you'd go, they're here, don't",
    "IT'S WE'LL I'D THEY'RE 'S 'T 'Ll 'rE",
    "'s't're've'm'll'd ''s '' 'x",
    "12345678901234567890 3.14 1,000,000 0x1F 2026-11-21 -7e-3",
    "Arabic-Indic ٣٤٥ ١٢, roman Ⅻ, fractions ½ ¾, superscript x²",
    "!!!??? ... --- ((([[[{{{}}}]]]))) @#$%^&* ~~~",
    "<|endoftext|>",
    "The end.<|endoftext|>The beginning <|endoftext|> again",
    "I ❤️ 🐳 whales 👍🏽 !",
    "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 🧑🏿‍🚀",
    "日本語のテキストと中文文本，还有标点。",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم، كيف حالك؟",
    "e\u0301 cafe\u0301 Z\u0351\u0362a\u0335l\u0334g\u0315o",
    "नमस्ते दुनिया สวัสดีครับ שלום עולם",
    "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u000bg\u000ch",
    "ctl\x00\x01\x07 \x1b[0m\x7f end",
    "separators a\x1cb\x1d c\x1e  d\x1f \x1c\x1d e \u180e f\u2029g",
    "zero\u200bwidth\ufeffjoin\u200dx\u2060y",
    " " * 300 + "x",
    "a" * 500,
    "ab" * 300 + " " + "1" * 200,
    "=" * 100 + "\n" + "-" * 80 + "\n" + "\t" * 70,
    "naïve façade Ångström Øresund ÆSIR",
    "∀x∈ℝ: x²≥0 ⇒ √x ∈ ℝ₊",
    "def f(x):\n    return x**2  # comment\n\tif (a && b) { c++; }\n",
    "https://example.com/path?q=1&r=2 user@example.org",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈",
    "\r\n\r\n",
    " ! ? ,  !",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３",
]

BAD = [
    b"\xff",
    b"abc\x80def",
    b"\xe2\x82 truncated",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
    b"\xf4\x90\x80\x80 too big",
    b"caf\xe9 latin-1",
    b"end of a partial emoji \xf0\x9f\x90",
    b"  \xff  \xfe\n\n",
    b"\x80\x80\x80abc \xe6\x97\xa5\xe6\x9c",
    b"x \xf0\x80\x80\x80 \xf8\x88\x80\x80\x80 y",
]


def random_strings():
    """Seeded random mixtures of the characters the pattern treats differently."""
    pieces = ["a", "Z", "é", "ß", "日", "한", "ش", "0", "9", "٣", " ", "  ", "\n", "\t", "\r\n",
              "'", "'s", "'ll", "!", ".", "-", "😀", "👍🏽", "\u0301", "\u00a0", "\u3000", "_",
              "\u200b", "<|endoftext|>", "Hello", " world", "123", "..."]
    out = []
    for seed in range(4):
        rng = random.Random(1234 + seed)
        out.append("".join(rng.choice(pieces) for _ in range(600)))
    return out


EOT = "<|endoftext|>"


def hf_tokenizer():
    tok = Tokenizer(models.BPE.from_file(VOCAB, MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


class MegatronStyle:
    """The algorithm of Megatron-LM's gpt2_tokenization.py, restated (not copied)."""

    def __init__(self):
        import json
        self.encoder = json.load(open(VOCAB, encoding="utf-8"))
        lines = open(MERGES, encoding="utf-8").read().split("\n")[1:-1]
        self.ranks = {tuple(l.split()): i for i, l in enumerate(lines)}
        printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                     + list(range(ord("®"), ord("ÿ") + 1)))
        extra = [b for b in range(256) if b not in printable]
        self.byte_char = {b: chr(b) for b in printable}
        self.byte_char.update({b: chr(256 + i) for i, b in enumerate(extra)})
        self.pat = regex.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            first, second = min(zip(parts, parts[1:]), key=lambda p: self.ranks.get(p, 1 << 30))
            if (first, second) not in self.ranks:
                break
            merged, i = [], 0
            while i < len(parts):  # every occurrence, left to right, as GPT-2's encoder.py
                if i + 1 < len(parts) and parts[i] == first and parts[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        self.cache[word] = parts
        return parts

    def encode(self, text):
        ids = []
        chunks = text.split(EOT)
        for k, chunk in enumerate(chunks):
            if k:
                ids.append(self.encoder[EOT])
            ids.extend(self.encode_plain(chunk))
        return ids

    def encode_plain(self, text):
        ids = []
        for piece in self.pat.findall(text):
            word = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[p] for p in self.bpe(word))
        return ids


def write_golden(path, records):
    """MGGOLDEN v1 with the dtypes used here: 2 = uint8, 3 = uint16."""
    parts = [b"MGGOLDEN", struct.pack("<II", 1, len(records))]
    for name, dtype, values in records:
        nb = name.encode()
        fmt = {U8: "B", U16: "H"}[dtype]
        parts.append(struct.pack("<I", len(nb)) + nb)
        parts.append(struct.pack("<IIq", dtype, 1, len(values)))
        parts.append(struct.pack(f"<{len(values)}{fmt}", *values))
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def main():
    if not os.path.exists(CORPUS):
        sys.exit("run from the repository root")
    hf, meg = hf_tokenizer(), MegatronStyle()
    texts = TRICKY + random_strings()
    records = []
    corpus = open(CORPUS, encoding="utf-8").read()
    ids = hf.encode(corpus).ids
    if meg.encode(corpus) != ids:
        sys.exit("tokenizers and the Megatron-style encoder disagree on the corpus")
    if hf.decode(ids) != corpus:
        sys.exit("the corpus does not round-trip through tokenizers")
    records.append(("corpus.ids", U16, ids))
    for i, text in enumerate(texts):
        ids = hf.encode(text).ids
        if meg.encode(text) != ids:
            sys.exit(f"string {i} {text!r}: tokenizers {ids} != Megatron-style {meg.encode(text)}")
        records.append((f"str.{i:02d}.text", U8, list(text.encode("utf-8"))))
        records.append((f"str.{i:02d}.ids", U16, ids))
    for i, raw in enumerate(BAD):
        records.append((f"bad.{i:02d}.bytes", U8, list(raw)))
        records.append((f"bad.{i:02d}.replaced", U8,
                        list(raw.decode("utf-8", errors="replace").encode("utf-8"))))
    write_golden(OUT, records)
    print(f"{OUT}: {len(records)} records, corpus {len(corpus.encode())} bytes -> "
          f"{len(records[0][2])} ids, {len(texts)} strings, {len(BAD)} invalid byte strings, "
          f"{os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
