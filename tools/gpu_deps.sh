#!/usr/bin/env bash
# For GPU machines that cannot install packages: fetches, on a machine that can, what the build
# needs beyond the CUDA toolkit, unpacked into a git-ignored folder to copy over.
#   tools/gpu_deps.sh [DIR]            (default deps)
# DIR/gpu/usr        the -dev packages tools/deps.sh names (OpenBLAS, cJSON, PCRE2, xxHash,
#                    ISA-L, SentencePiece, utf8proc) and their libraries, from Debian's
#                    archive with `apt-get download` and `dpkg -x`:  make DEPS_PREFIX=DIR/gpu/usr
# DIR/cutlass/include CUTLASS's headers from PyPI's nvidia-cutlass wheel (the MoE grouped GEMMs
#                    and fp8 experts):                             make CUTLASS_INC=DIR/cutlass/include
# DIR/nvidia/cu13    CUPTI 13.0 from PyPI (make kernel-profile):  make kernel-profile CUPTI_DIR=DIR/nvidia/cu13
# DIR/carry/*.tar.xz the three packed (about 14 MiB) for a tool that copies a working tree:
#                    tar xJf DIR/carry/deps.tar.xz -C DIR && tar xJf DIR/carry/cupti.tar.xz -C DIR
# Open MPI is not included: the GPU machines carry their own (mpicc on PATH).
set -euo pipefail
DIR=$(realpath -m "${1:-deps}")
PKGS=(libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libcjson-dev
    libcjson1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libxxhash-dev
    libisal-dev libisal2 libsentencepiece-dev libsentencepiece0 libutf8proc-dev libutf8proc2
    libprotobuf-lite32)
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
mkdir -p "$DIR/carry"
(cd "$dl" && apt-get download "${PKGS[@]}" >/dev/null)
rm -rf "$DIR/gpu" "$DIR/cutlass" "$DIR/nvidia"
for f in "$dl"/*.deb; do dpkg -x "$f" "$DIR/gpu"; done
lib=$DIR/gpu/usr/lib/x86_64-linux-gnu
# OpenBLAS's plain names are alternatives links that dpkg -x does not make
ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so"
ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
ln -sf x86_64-linux-gnu/openblas-pthread/cblas.h "$DIR/gpu/usr/include/cblas.h"
ln -sf x86_64-linux-gnu/openblas-pthread/openblas_config.h "$DIR/gpu/usr/include/openblas_config.h"
find "$DIR/gpu" -name '*.a' -delete
rm -rf "$DIR/gpu/usr/share"
(cd "$dl" && pip download -q --no-deps nvidia-cutlass "nvidia-cuda-cupti==13.0.*")
mkdir -p "$DIR/cutlass" "$dl/x"
unzip -q "$dl"/nvidia_cutlass-*.whl 'cutlass_library/source/include/*' -d "$dl/x"
mv "$dl/x/cutlass_library/source/include" "$DIR/cutlass/include"
unzip -q "$dl"/nvidia_cuda_cupti-*.whl 'nvidia/*' -d "$DIR"
tar cJf "$DIR/carry/deps.tar.xz" -C "$DIR" gpu cutlass
tar cJf "$DIR/carry/cupti.tar.xz" -C "$DIR" nvidia
echo "gpu_deps: $DIR/gpu/usr, $DIR/cutlass/include, $DIR/nvidia/cu13; packed in $DIR/carry"
