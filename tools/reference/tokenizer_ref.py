"""Reference tokenization with Megatron-LM's semantics, for make_tokenizer_models.py and
tokenizer_compare.py, and a writer of Megatron indexed datasets (.bin/.idx, version 1) as
Megatron's tools/preprocess_data.py writes them.

  HuggingFaceTokenizer   tokenizers.Tokenizer.from_file(tokenizer.json).encode(text).ids (what
                         transformers' AutoTokenizer(text).input_ids computes); eod: the id of
                         eos_token in tokenizer_config.json
  SentencePiece types    sentencepiece's encode_as_ids(text), nothing added; eod: eos_id()
"""
import json
import os
import struct


def load_hf(path):
    """(encode, vocab_size, eod) for a tokenizer.json directory."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    cfg = json.load(open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8"))
    eos = cfg.get("eos_token")
    eos = eos["content"] if isinstance(eos, dict) else eos
    eod = tok.token_to_id(eos) if eos else -1

    def encode(texts):
        return [e.ids for e in tok.encode_batch(texts)]
    return encode, tok.get_vocab_size(with_added_tokens=True), eod


def load_spm(path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=path)

    def encode(texts):
        return sp.encode(texts, out_type=int)
    return encode, sp.get_piece_size(), sp.eos_id()


def load(kind, golden_dir):
    if kind == "spm_bpe":
        return load_spm(os.path.join(golden_dir, "spm_bpe.model"))
    return load_hf(os.path.join(golden_dir, kind))


def preprocess(encode, eod, docs, append_eod):
    """Megatron's Encoder.encode on each document (one key, one sentence per document): the
    documents as (ids, sequence lengths); a document without tokens has no sequences."""
    out = []
    for ids in encode(docs):
        ids = list(ids)
        lens = [len(ids)] if ids else []
        if ids and append_eod:
            ids.append(eod)
            lens[-1] += 1
        out.append((ids, lens))
    return out


def write_indexed(prefix, documents, vocab_size):
    """Megatron's IndexedDatasetBuilder: .bin the ids in the optimal dtype, .idx the header,
    sequence lengths (int32), sequence pointers (int64 byte offsets), document indices (int64)."""
    uint16 = vocab_size < 65500
    code, size, fmt = (8, 2, "H") if uint16 else (4, 4, "i")
    lens, doc_idx = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for ids, seq_lens in documents:
            f.write(struct.pack(f"<{len(ids)}{fmt}", *ids))
            lens.extend(seq_lens)
            doc_idx.append(len(lens))
    pointers, at = [], 0
    for n in lens:
        pointers.append(at)
        at += n * size
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lens)) + struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack(f"<{len(lens)}i", *lens))
        f.write(struct.pack(f"<{len(pointers)}q", *pointers))
        f.write(struct.pack(f"<{len(doc_idx)}q", *doc_idx))


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
