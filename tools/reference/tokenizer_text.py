"""Seeded varied text for the tokenizer references (make_tokenizer_models.py, tokenizer_compare.py):
English from the demo corpus, program code, CJK, Hangul, emoji (ZWJ sequences, skin tones, flags),
combining marks, other scripts, whitespace runs (spaces, tabs, CR LF, NBSP, ideographic space),
numbers, contractions in every case, and special-token strings (whole, partial and adjacent)
written in the text. The same seed gives the same text on any machine (random.Random only)."""
import random

CORPUS = "data/moby-dick.txt"

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|endoftext|>",
            "<|im_start|>", "<|im_end|>", "<s>", "</s>"]
PARTIALS = ["<|begin_of", "<|", "|>", "<|end_of_text", "<|im_start", "<<|eot_id|>>", "<|eot_id|>|>"]

EMOJI = ["😀", "🐳", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍🚀", "❤️", "🇯🇵", "🇫🇷", "✨", "🔥", "🙏🏻", "🤖",
         "☕", "⚓", "🐋", "👩‍💻", "🫶🏾"]
SCRIPTS = ["Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم، كيف حالك؟",
           "नमस्ते दुनिया", "สวัสดีครับ", "שלום עולם", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３",
           "∀x∈ℝ: x²≥0 ⇒ √x ∈ ℝ₊", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈", "naïve façade Ångström Øresund ÆSIR",
           "Arabic-Indic ٣٤٥ ١٢, roman Ⅻ, fractions ½ ¾", "ǅemal ǈubljana ﬁne ﬂow Straße ẞ",
           "Ⓐⓑⓒ ㈱ ㎏ ℡ ™ ﹏ ︵", "ｶﾀｶﾅ ﾊﾝｶｸ", "Å Å K K Ω Ω",
           "Tiếng Việt có dấu: người, đường, Nguyễn", "\u1100\u1161\u11a8 \u1112\u1161\u11ab"
           "\u1100\u1173\u11af \uac00\u11a8", "\u1e0b\u0323 q\u0307\u0323 a\u0324\u0307 \u0958 \u2000"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "'ſ", "'K", "’s", "''s", "'x"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0",
              "\u3000", "\u2003", "\u2028", "\u0085", "\u000b", "\u000c", " " * 17, "\n" * 5,
              "\t \t \n"]
KEYWORDS = ["def", "return", "if", "else", "for", "while", "int", "float", "struct", "static",
            "const", "import", "class", "self", "None", "nullptr", "printf", "malloc", "lambda"]
OPS = [" = ", " == ", " != ", " += ", " -> ", "::", "&&", "||", "<<", ">>", "**", "//", "/*",
       "*/", "#", "{", "}", "(", ")", "[", "]", ";", ",", ".", ":", "\"", "'", "`", "\\n", "%d"]


def _english(rng, corpus):
    start = rng.randrange(0, len(corpus) - 2000)
    return corpus[start:start + rng.randrange(40, 1600)]


def _code(rng):
    lines = []
    indent = 0
    for _ in range(rng.randrange(2, 14)):
        toks = []
        for _ in range(rng.randrange(1, 9)):
            r = rng.random()
            if r < 0.35:
                toks.append(rng.choice(KEYWORDS))
            elif r < 0.6:
                toks.append(rng.choice(["x", "y_1", "camelCase", "snake_case_name", "i", "buf",
                                        "tmp2", "MAX_LEN", "__init__"]))
            elif r < 0.75:
                toks.append(str(rng.randrange(0, 10 ** rng.randrange(1, 8))))
            else:
                toks.append(rng.choice(OPS))
        pad = rng.choice(["    " * indent, "\t" * indent, "  " * indent])
        lines.append(pad + "".join(t if t in OPS else t + rng.choice(["", " "]) for t in toks))
        indent = max(0, min(4, indent + rng.choice([-1, 0, 0, 1])))
    return "\n".join(lines) + rng.choice(["\n", "\r\n", "\n\n", ""])


def _cjk(rng):
    out = []
    for _ in range(rng.randrange(3, 60)):
        r = rng.random()
        if r < 0.5:
            out.append(chr(rng.randrange(0x4E00, 0x9FFF)))
        elif r < 0.65:
            out.append(chr(rng.randrange(0x3041, 0x3097)))
        elif r < 0.75:
            out.append(chr(rng.randrange(0x30A1, 0x30FB)))
        elif r < 0.9:
            out.append(chr(rng.randrange(0xAC00, 0xD7A4)))
        else:
            out.append(rng.choice(["。", "，", "、", "「", "」", "！", "？", " ", "：", "《", "》"]))
    # frequent words so that the tokenizers learn some multi-byte merges
    out.append(rng.choice(["日本語", "中文文本", "한국어", "テキスト", "标点符号", "東京"]))
    return "".join(out)


def _combining(rng):
    out = []
    for _ in range(rng.randrange(2, 20)):
        out.append(rng.choice("aeiouAEIOUnczs"))
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            out.append(chr(rng.randrange(0x300, 0x370)))
        if rng.random() < 0.2:
            out.append(" ")
    return "".join(out)


def _numbers(rng):
    forms = [lambda: str(rng.randrange(10 ** rng.randrange(1, 25))),
             lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 9)}f}",
             lambda: f"{rng.randrange(1, 10 ** 9):,}", lambda: f"0x{rng.randrange(1 << 32):X}",
             lambda: f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
             lambda: f"{rng.uniform(0, 10):.3e}", lambda: "٣٤٥٦", lambda: "１２３"]
    return rng.choice([" ", "", "\n", "$", "#"]).join(rng.choice(forms)() for _ in range(rng.randrange(1, 8)))


def _special(rng):
    s = rng.choice(SPECIALS + PARTIALS)
    return rng.choice(["", " ", "\n", "x", "Hello"]) + s + rng.choice(["", " ", "\n", "a", s])


def _mixed(rng):
    pieces = ["a", "Z", "é", "ß", "日", "한", "ش", "0", "9", " ", "  ", "\n", "\t", "\r\n", "'",
              "'s", "!", ".", "-", "😀", "👍🏽", "\u0301", "\u00a0", "_", "\u200b", "\u200d",
              "\ufeff", "Hello", " world", "123", "...", "<|", "|>", "<|eot_id|>"]
    return "".join(rng.choice(pieces) for _ in range(rng.randrange(5, 200)))


def piece(rng, corpus):
    """One random piece of text of one of the kinds above."""
    kind = rng.random()
    if kind < 0.30:
        return _english(rng, corpus)
    if kind < 0.42:
        return _code(rng)
    if kind < 0.52:
        return _cjk(rng)
    if kind < 0.57:
        return rng.choice(EMOJI) * rng.randrange(1, 4) + rng.choice(["", " ", "!"])
    if kind < 0.62:
        return _combining(rng)
    if kind < 0.67:
        return rng.choice(SCRIPTS)
    if kind < 0.73:
        return _numbers(rng)
    if kind < 0.78:
        return rng.choice(WHITESPACE) * rng.randrange(1, 4)
    if kind < 0.83:
        w = rng.choice(["it", "we", "THEY", "you", "She", "o"])
        return w + rng.choice(CONTRACTIONS) + rng.choice([" ", "", "\n"])
    if kind < 0.90:
        return _special(rng)
    return _mixed(rng)


def load_corpus():
    return open(CORPUS, encoding="utf-8").read()


def varied_text(seed, nbytes, corpus=None):
    """About nbytes of UTF-8 (at least that many), the same for the same seed."""
    corpus = corpus or load_corpus()
    rng = random.Random(seed)
    parts, size = [], 0
    while size < nbytes:
        p = piece(rng, corpus) + rng.choice(["", " ", "\n", "\n\n", " ", ""])
        parts.append(p)
        size += len(p.encode("utf-8"))
    return "".join(parts)


def documents(seed, nbytes, corpus=None, max_pieces=40):
    """Documents (strings) of about nbytes in all: each 1 to max_pieces pieces, some empty or
    blank."""
    corpus = corpus or load_corpus()
    rng = random.Random(seed)
    docs, size = [], 0
    while size < nbytes:
        r = rng.random()
        if r < 0.02:
            d = ""
        elif r < 0.04:
            d = rng.choice(WHITESPACE)
        else:
            d = "".join(piece(rng, corpus) + rng.choice(["", " ", "\n"])
                        for _ in range(rng.randrange(1, max_pieces)))
        docs.append(d)
        size += len(d.encode("utf-8")) + 1
    return docs
