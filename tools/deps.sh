#!/usr/bin/env bash
# Checks the Debian build dependencies of megatron.c and installs the missing ones when run as
# root; otherwise prints the exact apt-get line and fails.
set -u
missing=()
need() { # need PACKAGE TEST...
    local pkg=$1; shift
    "$@" >/dev/null 2>&1 || missing+=("$pkg")
}
has_header() { for d in /usr/include /usr/include/x86_64-linux-gnu; do [ -f "$d/$1" ] && return 0; done; return 1; }
need gcc command -v gcc
need make command -v make
# OpenBLAS itself, not any cblas.h: netlib's libblas-dev also installs one (without
# openblas_set_num_threads), and a machine may have it alone.
has_openblas() { has_header cblas.h && ls /usr/lib/x86_64-linux-gnu/libopenblas.so >/dev/null; }
need libopenblas-dev has_openblas
need libcjson-dev has_header cjson/cJSON.h
need libpcre2-dev has_header pcre2.h
# xxHash: the checkpoints' checksums (header-only use, nothing to link)
need libxxhash-dev has_header xxhash.h
# ISA-L: CRC-32C for TensorBoard event files (--tensorboard-dir); the build works without it
need libisal-dev has_header isa-l/crc.h
# Tokenizers: libsentencepiece (SentencePieceTokenizer, Llama2Tokenizer; C++, so g++ too) and
# utf8proc (NFC of tokenizer.json files); the build works without them and refuses those.
need g++ command -v g++
need libsentencepiece-dev has_header sentencepiece_processor.h
need libutf8proc-dev has_header utf8proc.h
# Open MPI: the multi-rank CPU path and tests/dist (mpirun). The build works without it.
need libopenmpi-dev command -v mpicc
need openmpi-bin command -v mpirun
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && $line -qq; } >&2 || { echo "deps: '$line' failed" >&2; exit 1; }
    exit 0
fi
echo "deps: missing build dependencies: ${missing[*]}" >&2
echo "deps: run as root: $line" >&2
exit 1
