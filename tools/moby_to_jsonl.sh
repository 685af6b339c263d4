#!/usr/bin/env bash
# Splits the demo corpus into one JSON line per chapter: {"text": "<chapter>"}. A chapter starts
# at a line "CHAPTER N. ..." and runs to the next one; text before the first chapter, if any, is a
# document of its own. Every line keeps its "\n", so the documents concatenate back to the file.
# Usage: tools/moby_to_jsonl.sh [data/moby-dick.txt] > moby.jsonl
# Deterministic (LC_ALL=C, byte-wise): the golden test compares its output's checksum.
set -eu
in=${1:-data/moby-dick.txt}
[ -r "$in" ] || { echo "moby_to_jsonl.sh: cannot read $in" >&2; exit 1; }
LC_ALL=C awk '
BEGIN {
    for (i = 1; i < 32; i++) esc[sprintf("%c", i)] = sprintf("\\u%04x", i)
    esc["\t"] = "\\t"; esc["\r"] = "\\r"; esc["\b"] = "\\b"; esc["\f"] = "\\f"
    doc = ""; have = 0
}
function flush() { if (have) printf "{\"text\": \"%s\"}\n", doc; doc = ""; have = 0 }
function quote(s,    out, i, c) {
    if (s !~ /[\\"\001-\037]/) return s
    out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\") out = out "\\\\"
        else if (c == "\"") out = out "\\\""
        else if (c in esc) out = out esc[c]
        else out = out c
    }
    return out
}
/^CHAPTER [0-9]+\./ { flush() }
{ doc = doc quote($0) "\\n"; have = 1 }
END { flush() }
' "$in"
