#!/usr/bin/env python3
"""Trains the small tokenizers of tests/golden/tokenizers/ and writes their golden token ids.
No real Llama/Qwen tokenizer file can be downloaded here, so the files are trained with the same
libraries and the same configuration as the real ones, on seeded text (tokenizer_text.py):

  llama3/  byte-level BPE tokenizer.json as Llama 3's: Split by Llama 3's regular expression
           (Isolated) then ByteLevel without regex, ignore_merges, no normalizer, special tokens
           appended after the vocabulary, TemplateProcessing adding <|begin_of_text|>;
           merges written as [a, b] lists (tokenizers >= 0.20); indented JSON.
  qwen2/   as Qwen2's: NFC normalizer, Qwen2's expression (one digit per pre-token), no BOS, the
           special tokens after the vocabulary; merges in the older "a b" string form; compact.
  neox/    as GPT-NeoX-20B's: NFC, ByteLevel with GPT-2's expression as the only pre-tokenizer,
           <|endoftext|> at id 0 inside the vocabulary, non-special added tokens of 2..8 spaces
           with normalized=true (matched after normalisation, before pre-tokenisation).
  spm_bpe.model  SentencePiece BPE as Llama 2's: byte fallback, digits split, identity
           normalisation, dummy prefix, whitespace kept; unk 0, bos 1, eos 2, no pad; one
           user-defined symbol.

Each directory also gets tokenizer_config.json (bos_token, eos_token), which is where
transformers' AutoTokenizer (Megatron's HuggingFaceTokenizer) takes the EOD id from.

tests/golden/tokenizers/docs.jsonl holds seeded documents (empty and blank ones too), and
<tok>_text_document.bin/.idx the indexed datasets Megatron's tools/preprocess_data.py writes for
them with --append-eod (its Encoder and IndexedDatasetBuilder restated in tokenizer_ref.py).

tests/golden/tokenizers/ids.golden (MGGOLDEN v1, tests/golden/README.md) holds:
  str.NN.text                  u8   strings (UTF-8): tricky ones and a seeded varied sample
  <tok>.str.NN.ids             u16  their ids, as Megatron's tokenizer.tokenize(text) gives them:
                                    tokenizers' Tokenizer.encode(text).ids (add_special_tokens) for
                                    the tokenizer.json files, sentencepiece's encode_as_ids(text)
                                    for the .model
  <tok>.meta                   i32  [vocab_size, eod, bos, pad] as Megatron reports them (-1: none)
The ids of the tokenizer.json files are cross-checked against transformers' AutoTokenizer (what
Megatron's HuggingFaceTokenizer calls) when transformers is installed.

Run from the repository root (about 20 s):  python3 tools/reference/make_tokenizer_models.py
Needs: pip install tokenizers sentencepiece (transformers optional)."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_ref  # noqa: E402
import tokenizer_text  # noqa: E402

OUT = "tests/golden/tokenizers"
U8, U16, I32 = 2, 3, 1
VOCAB = 3000

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRICKY = [
    "", " ", "Hello, world!", "  leading and trailing  ", "a\n\n\nb", "\n\n\n", " \n ",
    "tabs\tand\t\tmixed \t\n\t whitespace\t", "   \n\n  x  \r\n y\r\n\r\n",
    "I'm sure it's what they've said: we'll see, you'd go, they're here, don't",
    "IT'S WE'LL I'D THEY'RE 'S 'T 'Ll 'rE 'ſ 'K ’s",
    "12345678901234567890 3.14 1,000,000 0x1F 2026-11-21 -7e-3 ١٢٣",
    "<|begin_of_text|>", "<|end_of_text|>", "<|begin_of_text|><|begin_of_text|>",
    "The end.<|end_of_text|>The beginning <|eot_id|> again<|eot_id|>",
    "<|begin_of<|eot_id|>text|> <<|eot_id|>> <|eot_id|>|> <|", "<|endoftext|>x<|im_start|>user\nhi<|im_end|>",
    "<s> </s> <unk> <0x41>", "I ❤️ 🐳 whales 👍🏽 !", "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 🧑🏿‍🚀",
    "日本語のテキストと中文文本，还有标点。", "한국어 텍스트입니다. 안녕하세요!",
    "e\u0301 cafe\u0301 Z\u0351\u0362a\u0335l\u0334g\u0315o \u1e0b\u0323 \u0071\u0307\u0323",
    "\u212b \u2126 \u0041\u030a \u00c5 \uac00\u11a8 \u1100\u1161\u11a8 \u0958",
    "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u000bg\u000ch", "ctl\x00\x01\x07 \x1b[0m\x7f end",
    "zero\u200bwidth\ufeffjoin\u200dx\u2060y", " " * 40 + "x", "a" * 300, "\t" * 30 + "\n" * 9,
    "    def f(x):\n        return x**2  # comment\n\tif (a && b) { c++; }\n",
    "https://example.com/path?q=1&r=2 user@example.org", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈 \U0001fae8 \U0010ffff",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３ ｶﾀｶﾅ", "ǅemal ﬁne Straße ẞ ǈ K Å",
    "        ", "  \n  \n", "x  y   z    w     v", "\r\n\r\n", " ! ? ,  !",
]


def write_golden(path, records):
    parts = [b"MGGOLDEN", struct.pack("<II", 1, len(records))]
    for name, dtype, values in records:
        nb = name.encode()
        fmt = {U8: "B", U16: "H", I32: "i"}[dtype]
        parts.append(struct.pack("<I", len(nb)) + nb)
        parts.append(struct.pack("<IIq", dtype, 1, len(values)))
        parts.append(struct.pack(f"<{len(values)}{fmt}", *values))
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def train_text(corpus):
    return corpus[:500000] + tokenizer_text.varied_text(1, 700000, corpus)


def chunks(text, n=20000):
    return [text[i:i + n] for i in range(0, len(text), n)]


def bpe_tokenizer(kind, text, vocab=VOCAB):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                          use_regex=False)
    tok = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    if kind == "neox":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        specials_first = ["<|endoftext|>", "<|padding|>"]
    else:
        pat = LLAMA3_PAT if kind == "llama3" else QWEN2_PAT
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False), byte_level])
        specials_first = []
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials_first,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(chunks(text), trainer)
    if kind == "llama3":
        tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                                "<|reserved_special_token_0|>"])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    elif kind == "qwen2":
        tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        config = {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    else:
        from tokenizers import AddedToken
        tok.add_tokens([AddedToken(" " * n, normalized=True) for n in range(8, 1, -1)])
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
        config = {"bos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False,
                                "normalized": False,
                                "rstrip": False, "single_word": False, "special": True},
                  "eos_token": "<|endoftext|>"}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    return tok, config


def save_bpe(kind, tok, config, out=OUT):
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path, pretty=kind == "llama3")
    if kind == "qwen2":  # the older merges form: "a b" strings
        j = json.load(open(path, encoding="utf-8"))
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return d


def hf_meta(d):
    """[vocab_size, eod, bos, pad] as Megatron's HuggingFaceTokenizer gives them, and its encode;
    without transformers, the same read from tokenizers and tokenizer_config.json."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))

    def tid(key):
        v = cfg.get(key)
        v = v["content"] if isinstance(v, dict) else v
        return -1 if v is None else tok.token_to_id(v)

    meta = [tok.get_vocab_size(with_added_tokens=True), tid("eos_token"), tid("bos_token"),
            tid("pad_token")]
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return meta, None
    at = AutoTokenizer.from_pretrained(d)
    got = [len(at), at.eos_token_id, at.bos_token_id, at.pad_token_id]
    got = [-1 if x is None else x for x in got]
    if got != meta:
        sys.exit(f"{d}: transformers says {got}, tokenizers {meta}")
    return meta, at


def train_spm(text, vocab=VOCAB, path=os.path.join(OUT, "spm_bpe.model")):
    import io

    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([l for l in text.split("\n") if l.strip()]), model_writer=model,
        model_type="bpe", vocab_size=vocab, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, character_coverage=0.98, unk_id=0, bos_id=1,
        eos_id=2, pad_id=-1, user_defined_symbols=["<|im_start|>"], max_sentence_length=1 << 16,
        num_threads=2, minloglevel=2, seed_sentencepiece_size=200000)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=path)
    # Megatron's SentencePieceTokenizer / Llama2Tokenizer: vocab_size = get_piece_size(),
    # eod = eos_id, bos = bos_id, pad = pad_id; tokenize(text) = encode_as_ids(text)
    return sp, [sp.get_piece_size(), sp.eos_id(), sp.bos_id(), sp.pad_id()]


def main():
    if not os.path.exists(tokenizer_text.CORPUS):
        sys.exit("run from the repository root")
    corpus = tokenizer_text.load_corpus()
    text = train_text(corpus)
    os.makedirs(OUT, exist_ok=True)
    strings = TRICKY + [tokenizer_text.varied_text(100 + i, 4000, corpus) for i in range(16)]
    records = [(f"str.{i:02d}.text", U8, list(s.encode("utf-8"))) for i, s in enumerate(strings)]
    for kind in ("llama3", "qwen2", "neox"):
        tok, config = bpe_tokenizer(kind, text)
        d = save_bpe(kind, tok, config)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what was written
        meta, at = hf_meta(d)
        records.append((f"{kind}.meta", I32, meta))
        for i, s in enumerate(strings):
            ids = tok.encode(s).ids
            if at is not None and at(s).input_ids != ids:
                sys.exit(f"{kind} string {i}: transformers and tokenizers disagree")
            bos = "<|begin_of_text|>" if kind == "llama3" else ""
            if tok.decode(ids, skip_special_tokens=False) != bos + s and kind == "llama3":
                sys.exit(f"{kind} string {i} does not round-trip")  # (NFC changes the others)
            records.append((f"{kind}.str.{i:02d}.ids", U16, ids))
        print(f"{d}: vocab {meta[0]}, eod {meta[1]}, bos {meta[2]}, pad {meta[3]}, "
              f"{os.path.getsize(os.path.join(d, 'tokenizer.json'))} bytes")
    sp, meta = train_spm(text)
    records.append(("spm_bpe.meta", I32, meta))
    for i, s in enumerate(strings):
        records.append((f"spm_bpe.str.{i:02d}.ids", U16, sp.encode_as_ids(s)))
    print(f"{OUT}/spm_bpe.model: vocab {meta[0]}, eod {meta[1]}, bos {meta[2]}, pad {meta[3]}, "
          f"{os.path.getsize(os.path.join(OUT, 'spm_bpe.model'))} bytes")
    docs = tokenizer_text.documents(7, 30000, corpus, max_pieces=6) + ["", " \n "]
    tokenizer_ref.write_jsonl(os.path.join(OUT, "docs.jsonl"), docs)
    for kind in ("llama3", "qwen2", "neox", "spm_bpe"):
        encode, vocab_size, eod = tokenizer_ref.load(kind, OUT)
        tokenizer_ref.write_indexed(os.path.join(OUT, f"{kind}_text_document"),
                                    tokenizer_ref.preprocess(encode, eod, docs, True), vocab_size)
    path = os.path.join(OUT, "ids.golden")
    write_golden(path, records)
    print(f"{path}: {len(records)} records, {len(strings)} strings, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
