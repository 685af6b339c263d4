# megatron.c build. `make` builds build/megatron; `make test` runs the CPU suite; `make run` trains
# the demo model; `make asan` runs the whole suite under AddressSanitizer + UBSan.
# The build detects the toolchain and libraries and prints one line of what it found.

CC      ?= gcc
BUILD   ?= build
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
# x86-64-v3 (AVX2, FMA): the CPU backend's own loops (GELU, softmax, norms) are vectorised with
# `omp simd` and run ~2x faster with 8-wide AVX than 4-wide SSE (bench/NOTES.md, 2026-11-21);
# the dev machines and CI have AVX2. -ffp-contract=off keeps a*b+c as two roundings whatever
# the compiler's FMA choices, so results do not change with contraction. -fno-math-errno only
# stops math functions from setting errno (nothing reads it after them), which lets sqrtf in
# AdamW vectorise; every result stays bit-identical. Never -ffast-math.
OPT     ?= -O2 -march=x86-64-v3 -fno-fast-math -ffp-contract=off -fno-math-errno
INCS    := -Iinclude -Isrc
DEPFLAGS = -MMD -MP

# ---- detection (everything optional except OpenBLAS and cJSON) ----
NVCC     := $(shell command -v nvcc 2>/dev/null)
CUDA_DIR := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
# DEPS_PREFIX: an extra /usr-like tree (headers and libraries unpacked with dpkg -x) for machines
# without the -dev packages, e.g. `make DEPS_PREFIX=deps/gpu/usr` on the GPU machines.
DEPS_PREFIX ?=
comma       := ,
DEPS_INC    := $(if $(DEPS_PREFIX),$(DEPS_PREFIX)/include)
DEPS_LIB    := $(if $(DEPS_PREFIX),$(abspath $(DEPS_PREFIX))/lib/x86_64-linux-gnu)
have_hdr  = $(shell for d in $(2) $(DEPS_INC) /usr/include /usr/include/x86_64-linux-gnu; do \
              test -f $$d/$(1) && { echo yes; break; }; done)
HAVE_CUBLAS := $(call have_hdr,cublasLt.h,$(CUDA_DIR)/include)
first_with   = $(firstword $(foreach d,$(2),$(if $(wildcard $(d)/$(1)),$(d))))
# cuDNN (fused attention, src/backend/cuda/attention_cudnn.cu): header and libcudnn.so both needed.
CUDNN_LIBDIR := $(call first_with,libcudnn.so,$(CUDA_DIR)/lib64 $(CUDA_DIR)/lib $(DEPS_LIB) /usr/lib/x86_64-linux-gnu)
HAVE_CUDNN  := $(if $(call have_hdr,cudnn.h,$(CUDA_DIR)/include),$(if $(CUDNN_LIBDIR),yes))
# The NCCL backend (src/comm/nccl.c) needs nvcc's CUDA (cudart) and NCCL's header and library:
# from NCCL_HOME if given, else CUDA_DIR, DEPS_PREFIX, /usr, else python3's pip wheel
# nvidia-nccl-cu13 (which ships only libnccl.so.2). `make NCCL=0` leaves the backend out.
NCCL        ?= 1
ifneq ($(NCCL),0)
nccl_home    = $(if $(NCCL_HOME),$(addprefix $(NCCL_HOME)/,$(1)))
nccl_pip     = $(shell python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
NCCL_INC    := $(call first_with,nccl.h,$(call nccl_home,include) $(CUDA_DIR)/include $(DEPS_INC) /usr/include)
NCCL_PIP    := $(if $(NCCL_INC),,$(nccl_pip))
NCCL_INC    := $(or $(NCCL_INC),$(if $(NCCL_PIP),$(call first_with,nccl.h,$(NCCL_PIP)/include)))
NCCL_LIBDIR := $(call first_with,libnccl.so*,$(call nccl_home,lib64 lib) $(CUDA_DIR)/lib64 $(CUDA_DIR)/lib $(DEPS_LIB) /usr/lib/x86_64-linux-gnu $(if $(NCCL_PIP),$(NCCL_PIP)/lib))
NCCL_LIB    := $(if $(wildcard $(NCCL_LIBDIR)/libnccl.so),-lnccl,-l:libnccl.so.2)
CUDART_DIR  := $(call first_with,libcudart.so,$(CUDA_DIR)/lib64 $(CUDA_DIR)/lib /usr/lib/x86_64-linux-gnu)
HAVE_NCCL   := $(if $(NVCC),$(if $(NCCL_INC),$(if $(NCCL_LIBDIR),$(if $(CUDART_DIR),yes))))
else
HAVE_NCCL   :=
endif
# The CUDA backend (src/backend/cuda: *.cu built by nvcc, *.c by $(CC)) needs nvcc, cuBLASLt's
# header and the cuBLAS(Lt) and cudart libraries; without them it is left out (backends=cpu).
# `make CUDA=0` leaves it out too. CUDA_ARCH: Hopper machine code (sm_90a, for wgmma) plus
# compute_90 PTX that newer GPUs compile at load.
CUDA        ?= 1
ifneq ($(CUDA),0)
CUDA_LIBDIR := $(call first_with,libcublasLt.so,$(CUDA_DIR)/lib64 $(CUDA_DIR)/lib $(DEPS_LIB) /usr/lib/x86_64-linux-gnu)
CUDA_RTDIR  := $(call first_with,libcudart.so,$(CUDA_DIR)/lib64 $(CUDA_DIR)/lib /usr/lib/x86_64-linux-gnu)
HAVE_CUDA   := $(if $(NVCC),$(if $(HAVE_CUBLAS),$(if $(CUDA_LIBDIR),$(if $(CUDA_RTDIR),yes))))
endif
CUDA_ARCH   ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
NVCCFLAGS   ?= -O3 -lineinfo
# CUTLASS (header-only, not vendored): the MoE grouped GEMM's Hopper kernel,
# src/backend/cuda/grouped_gemm_cutlass.cu, built when CUTLASS's include directory is at
# CUTLASS_INC and CUDA_ARCH has sm_90a; without it that file is a stub and the portable kernel of
# grouped_gemm.cu runs. Get it with `pip download nvidia-cutlass --no-deps` and copy the wheel's
# cutlass_library/source/include to deps/cutlass/include. That one file is built for sm_90a alone
# (its kernels are wgmma/TMA only) with -DNDEBUG (CUTLASS's device asserts serialise wgmma).
CUTLASS_INC ?= deps/cutlass/include
HAVE_CUTLASS := $(if $(HAVE_CUDA),$(if $(findstring sm_90a,$(CUDA_ARCH)),$(if $(wildcard $(CUTLASS_INC)/cutlass/cutlass.h),yes)))
MPICC       := $(shell command -v mpicc 2>/dev/null)
# Open MPI's flags from its compiler wrapper, else from pkg-config; `make MPI=no` builds without.
# -isystem: warnings inside mpi.h are not ours to fix under -Werror.
ifneq ($(MPI),no)
MPI_CFLAGS := $(or $(if $(MPICC),$(shell $(MPICC) --showme:compile 2>/dev/null)),$(shell pkg-config --cflags ompi 2>/dev/null))
MPI_LIBS   := $(or $(if $(MPICC),$(shell $(MPICC) --showme:link 2>/dev/null)),$(shell pkg-config --libs ompi 2>/dev/null))
HAVE_MPI   := $(if $(MPI_LIBS),yes)
endif
HAVE_OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo yes)
BLAS_INC    := $(firstword $(foreach d,/usr/include/x86_64-linux-gnu /usr/include/openblas /usr/include,$(if $(wildcard $(d)/cblas.h),$(d))))
HAVE_CJSON  := $(call have_hdr,cjson/cJSON.h,)
HAVE_PCRE2  := $(call have_hdr,pcre2.h,)
HAVE_XXHASH := $(call have_hdr,xxhash.h,)
# ISA-L (libisal-dev): CRC-32C for TensorBoard event files (src/train/tensorboard.c); without it
# --tensorboard-dir is refused.
HAVE_ISAL   := $(call have_hdr,isa-l/crc.h,)
# Tokenizer libraries: libsentencepiece (C++: SentencePieceTokenizer, Llama2Tokenizer, through
# src/data/tokenizer_spm_shim.cc built with $(CXX)) and utf8proc (NFC normalisation of
# HuggingFaceTokenizer files); without them those are refused with a line saying what to install.
# `make SENTENCEPIECE=0` / `make UTF8PROC=0` leave them out.
SENTENCEPIECE ?= 1
UTF8PROC      ?= 1
HAVE_SENTENCEPIECE := $(if $(filter-out 0,$(SENTENCEPIECE)),$(if $(call have_hdr,sentencepiece_processor.h,),$(if $(shell command -v $(CXX) 2>/dev/null),yes)))
HAVE_UTF8PROC := $(if $(filter-out 0,$(UTF8PROC)),$(call have_hdr,utf8proc.h,))

ifeq ($(HAVE_OPENMP),yes)
OMPFLAGS := -fopenmp
endif
CFLAGS  += $(CSTD) $(WARN) $(OPT) -g $(INCS) $(OMPFLAGS) $(if $(BLAS_INC),-I$(BLAS_INC)) $(if $(DEPS_INC),-I$(DEPS_INC))
ifeq ($(HAVE_MPI),yes)
CFLAGS  += $(patsubst -I%,-isystem %,$(MPI_CFLAGS)) -DMG_HAVE_MPI
LDLIBS  += $(MPI_LIBS)
endif
LDLIBS  += $(if $(DEPS_LIB),-L$(DEPS_LIB) -Wl$(comma)-rpath$(comma)$(DEPS_LIB)) $(OMPFLAGS) -lopenblas -lcjson -lpcre2-8 -lm -lpthread
ifeq ($(HAVE_ISAL),yes)
CFLAGS  += -DMG_HAVE_ISAL
LDLIBS  += -lisal
endif
CXXFLAGS += -std=c++17 -D_GNU_SOURCE $(WARN) $(OPT) -g $(INCS)
ifeq ($(HAVE_SENTENCEPIECE),yes)
CFLAGS  += -DMG_HAVE_SENTENCEPIECE
LDLIBS  += -lsentencepiece -lstdc++
endif
ifeq ($(HAVE_UTF8PROC),yes)
CFLAGS  += -DMG_HAVE_UTF8PROC
LDLIBS  += -lutf8proc
endif
ifeq ($(HAVE_NCCL),yes)
CFLAGS  += -DMG_HAVE_NCCL $(foreach d,$(sort $(CUDA_DIR)/include $(NCCL_INC)),-isystem $(d))
LDLIBS  += $(foreach d,$(sort $(NCCL_LIBDIR) $(CUDART_DIR)),-L$(d) -Wl$(comma)-rpath$(comma)$(d)) $(NCCL_LIB) -lcudart
endif
ifeq ($(HAVE_CUDA),yes)
# cudart is linked once: by the NCCL line above when NCCL is in the build, else here.
# libstdc++: nvcc's host code for templated kernels uses C++ runtime helpers (static-local
# guards), and the final link is done by $(CC).
CFLAGS  += -DMG_HAVE_CUDA $(if $(HAVE_NCCL),,-isystem $(CUDA_DIR)/include)
LDLIBS  += $(foreach d,$(filter-out $(if $(HAVE_NCCL),$(NCCL_LIBDIR) $(CUDART_DIR)),$(sort $(CUDA_LIBDIR) $(CUDA_RTDIR))),-L$(d) -Wl$(comma)-rpath$(comma)$(d)) $(if $(HAVE_CUDNN),$(if $(filter $(CUDNN_LIBDIR),$(CUDA_LIBDIR) $(CUDA_RTDIR)),,-L$(CUDNN_LIBDIR) -Wl$(comma)-rpath$(comma)$(CUDNN_LIBDIR)) -lcudnn) -lcublasLt -lcublas $(if $(HAVE_NCCL),,-lcudart) -lstdc++
NVCC_ALL := -std=c++17 $(CUDA_ARCH) $(NVCCFLAGS) --expt-relaxed-constexpr -DMG_HAVE_CUDA \
            -D_GNU_SOURCE $(if $(HAVE_CUDNN),-DMG_HAVE_CUDNN) $(INCS) $(if $(DEPS_INC),-I$(DEPS_INC)) \
            -Xcompiler -Wall,-Wextra,-Wno-unused-parameter --Werror all-warnings
endif

yn = $(if $(1),yes,no)
BUILD_LINE := megatron.c build: cc=$(CC) nvcc=$(call yn,$(NVCC)) cublas=$(call yn,$(HAVE_CUBLAS)) cudnn=$(call yn,$(HAVE_CUDNN)) cutlass=$(call yn,$(HAVE_CUTLASS)) nccl=$(call yn,$(HAVE_NCCL)) mpi=$(call yn,$(HAVE_MPI)) openmp=$(call yn,$(HAVE_OPENMP)) openblas=$(call yn,$(BLAS_INC)) cjson=$(call yn,$(HAVE_CJSON)) pcre2=$(call yn,$(HAVE_PCRE2)) xxhash=$(call yn,$(HAVE_XXHASH)) isal=$(call yn,$(HAVE_ISAL)) sentencepiece=$(call yn,$(HAVE_SENTENCEPIECE)) utf8proc=$(call yn,$(HAVE_UTF8PROC)) backends=cpu$(if $(HAVE_CUDA),$(comma)cuda)

# ---- sources ----
LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' $(if $(HAVE_CUDA),,-not -path 'src/backend/cuda/*') | sort)
CU_SRC   := $(if $(HAVE_CUDA),$(shell find src/backend/cuda -name '*.cu' | sort))
CXX_SRC  := $(if $(HAVE_SENTENCEPIECE),$(shell find src -name '*.cc' | sort))
CLI_SRC  := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(shell find tests/unit -name '*.c' | sort)
DIST_SRC := $(shell find tests/dist -name '*.c' | sort)
CUDA_TEST_SRC := $(shell find tests/cuda -name '*.c' 2>/dev/null | sort)

# The CUDA backend's two compute dtypes (mg_backend_cuda_create_dtype: bf16, fp16). An op file
# templated on the 16-bit type (MG_CUDA_DTYPES, src/backend/cuda/cuda_common.cuh) is built once and
# holds both dtypes' launchers, mg_cuda_<op> and mg_cuda_f16_<op>. CU_F16_SRC lists the files built
# twice instead, with -DMG_CUDA_TWICE: as is (bf16) and again with -DMG_CUDA_F16, which makes h16
# fp16 and names the launchers mg_cuda_f16_* (MG_CUDA_FN, cuda_ops.h). moe_router.cu stays there:
# templated, its GEMM kernels' PTX changes (nvcc's inlining depends on what else the module holds).
# The table, cuda_table.c, is built once and picks by dtype. CUTLASS's grouped GEMM is bf16 only:
# fp16 takes the portable kernel.
CU_F16_SRC := $(if $(HAVE_CUDA),$(addprefix src/backend/cuda/, \
    moe_router.cu))
CU_F16_OBJ := $(CU_F16_SRC:%.cu=$(BUILD)/obj/%.cu.f16.o)
$(CU_F16_SRC:%.cu=$(BUILD)/obj/%.cu.o) $(CU_F16_OBJ): NVCC_ALL += -DMG_CUDA_TWICE
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o) $(CU_F16_OBJ) $(CXX_SRC:%.cc=$(BUILD)/obj/%.cc.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
DIST_OBJ := $(DIST_SRC:%.c=$(BUILD)/obj/%.o)
CUDA_TEST_OBJ := $(CUDA_TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test run asan clean deps info format bench
all: info $(BUILD)/megatron

info:
	@echo "$(BUILD_LINE)"
	@if [ -z "$(BLAS_INC)" ] || [ -z "$(HAVE_CJSON)" ] || [ -z "$(HAVE_PCRE2)" ] || [ -z "$(HAVE_XXHASH)" ]; then \
	    echo "megatron.c needs OpenBLAS, cJSON, PCRE2 and xxHash headers: run 'make deps' as root, or" \
	         "apt-get install -y libopenblas-dev libcjson-dev libpcre2-dev libxxhash-dev" >&2; exit 1; fi

deps:
	@tools/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# tests/test.h and the test helpers are visible to the tests alone, never to the library
$(BUILD)/obj/tests/%.o: CFLAGS += -Itests

$(BUILD)/obj/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ALL) -MMD -MP -c $< -o $@

# the fp16 objects (CU_F16_OBJ)
$(BUILD)/obj/%.cu.f16.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ALL) -DMG_CUDA_F16 -MMD -MP -c $< -o $@

CUTLASS_OBJ := $(addprefix $(BUILD)/obj/src/backend/cuda/,grouped_gemm_cutlass.cu.o \
    grouped_gemm_cutlass_fp8.cu.o)
ifeq ($(HAVE_CUTLASS),yes)
$(CUTLASS_OBJ): NVCC_ALL := $(filter-out $(CUDA_ARCH),$(NVCC_ALL)) \
    -gencode=arch=compute_90a,code=sm_90a -DNDEBUG -DMG_HAVE_CUTLASS -isystem $(CUTLASS_INC)
endif
# the file is the stub or the CUTLASS kernel: rebuilt when the headers appear or go
CUTLASS_STAMP := $(BUILD)/obj/cutlass-$(call yn,$(HAVE_CUTLASS)).stamp
$(CUTLASS_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/cutlass-*.stamp
	@touch $@
$(CUTLASS_OBJ): $(CUTLASS_STAMP)
# the same for the files that test MG_HAVE_ISAL
ISAL_STAMP := $(BUILD)/obj/isal-$(call yn,$(HAVE_ISAL)).stamp
$(ISAL_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/isal-*.stamp
	@touch $@
$(BUILD)/obj/src/train/tensorboard.o $(BUILD)/obj/src/config/config_check.o \
    $(BUILD)/obj/tests/unit/test_tensorboard.o: $(ISAL_STAMP)
# and for those that test MG_HAVE_SENTENCEPIECE or MG_HAVE_UTF8PROC
TOK_STAMP := $(BUILD)/obj/tokenizer-spm-$(call yn,$(HAVE_SENTENCEPIECE))-utf8proc-$(call yn,$(HAVE_UTF8PROC)).stamp
$(TOK_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/tokenizer-*.stamp
	@touch $@
$(BUILD)/obj/src/data/tokenizer_spm.o $(BUILD)/obj/src/data/tokenizer_split.o \
    $(BUILD)/obj/tests/unit/test_tokenizer_hf_spm.o: $(TOK_STAMP)

$(BUILD)/libmegatron.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/megatron: $(CLI_OBJ) $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(CLI_OBJ) $(BUILD)/libmegatron.a $(LDLIBS) -o $@

$(BUILD)/unit_tests: $(TEST_OBJ) $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(TEST_OBJ) $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# Multi-rank tests, run under mpirun by tests/dist/test_dist.sh (part of tests/run.sh).
$(BUILD)/dist_tests: $(DIST_OBJ) $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(DIST_OBJ) $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# The README's test command: installs missing Debian build dependencies (as root), builds, runs
# every CPU test and ends with "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory all $(BUILD)/unit_tests $(BUILD)/dist_tests
	@tests/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDLIBS="-fsanitize=address,undefined $(LDLIBS)" build-asan/unit_tests build-asan/megatron build-asan/dist_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh build-asan

DEMO_DIR ?= runs/demo
run: deps
	@$(MAKE) --no-print-directory all
	tools/demo.sh $(BUILD)/megatron $(DEMO_DIR)

bench: all
	bench/cpu_bench.sh $(BUILD)/megatron

# Tokenizer throughput (GPT-2, tokenizer.json, SentencePiece) against Hugging Face tokenizers and
# sentencepiece, one thread each (bench/tokenizer_bench.sh; TOKENIZERS=gpt2: GPT-2 alone).
.PHONY: bench-tokenizer
bench-tokenizer: info
	@$(MAKE) --no-print-directory $(BUILD)/tokenize_bench
	bench/tokenizer_bench.sh $(BUILD)

$(BUILD)/tokenize_bench: bench/tokenize_bench.c $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# GPU machine: every op of the CUDA backend against the CPU backend (tests/cuda), once per compute
# dtype of CUDA_DTYPE (bf16, then fp16; CUDA_DTYPE=fp16 runs one), closing with one
# "N passed, N failed" (tests/cuda/run.sh); the runner is the unit tests' (a filter argument:
# CUDA_TESTS=norm).
CUDA_DTYPE ?= bf16 fp16
.PHONY: test-cuda
test-cuda: info
	@if [ -z "$(HAVE_CUDA)" ]; then echo "make test-cuda needs nvcc, cuBLASLt and cudart" \
	    "(this build: backends=cpu)" >&2; exit 1; fi
	@$(MAKE) --no-print-directory $(BUILD)/cuda_tests
	CUDA_DTYPE="$(CUDA_DTYPE)" tests/cuda/run.sh $(BUILD) $(CUDA_TESTS)

$(BUILD)/cuda_tests: $(CUDA_TEST_OBJ) $(BUILD)/obj/tests/unit/main.o $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(CUDA_TEST_OBJ) $(BUILD)/obj/tests/unit/main.o $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# GPU machine (NCCL_NVLS_ENABLE=0 is set by the scripts). test-nccl: the multi-rank tests on the
# NCCL backend (mpirun on 2 and 4 GPUs, a torchrun-style launch, injected failures), closing
# with "N passed, N failed". bench-comm: collective bandwidth through mg_comm against raw NCCL
# (bench/comm.c; BENCH_ARGS="--factor 4" etc. are passed on).
.PHONY: test-nccl bench-comm
test-nccl: info
	@$(MAKE) --no-print-directory $(BUILD)/dist_tests
	@tests/dist/run_nccl.sh $(BUILD)

bench-comm: info
	@$(MAKE) --no-print-directory $(BUILD)/bench_comm
	bench/comm.sh $(BUILD) $(BENCH_ARGS)

$(BUILD)/bench_comm: bench/comm.c $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# Per-op time of one GPT-2 step on a backend (bench/op_bench.c): where a step's time goes.
$(BUILD)/op_bench: bench/op_bench.c bench/bench_backend.h $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# GPU machine: the MoE grouped GEMM (CUTLASS and portable) against one dense cuBLASLt GEMM of the
# same FLOPs, timed in CUDA graphs (bench/grouped_gemm_bench.c).
$(BUILD)/grouped_gemm_bench: bench/grouped_gemm_bench.c bench/bench_backend.h $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# GPU machine: the fp8 casts of 1.5B's operands, each form apart and together, against a copy of
# the same bytes (bench/fp8_cast_bench.c).
$(BUILD)/fp8_cast_bench: bench/fp8_cast_bench.c bench/bench_backend.h $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# Any CUDA process's per-kernel GPU time, for machines without Nsight (tools/profile/
# kernel_profile.c, a CUPTI injection library: CUDA_INJECTION64_PATH=$(BUILD)/kernel_profile.so).
# CUPTI from CUPTI_DIR, else the toolkit's extras/CUPTI, else python3's nvidia-cuda-cupti wheel.
cupti_pip   = $(shell python3 -c 'import nvidia.cu13 as m; print(list(m.__path__)[0])' 2>/dev/null)
CUPTI_DIR  ?= $(or $(if $(wildcard $(CUDA_DIR)/extras/CUPTI/include/cupti.h),$(CUDA_DIR)/extras/CUPTI),$(cupti_pip))
.PHONY: kernel-profile
kernel-profile: $(BUILD)/kernel_profile.so
$(BUILD)/kernel_profile.so: tools/profile/kernel_profile.c
	@mkdir -p $(BUILD)
	@test -f "$(CUPTI_DIR)/include/cupti.h" || { echo "make kernel-profile needs CUPTI:" \
	    "CUPTI_DIR=DIR with DIR/include/cupti.h (the CUDA toolkit's extras/CUPTI or pip's" \
	    "nvidia-cuda-cupti)" >&2; exit 1; }
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -Wall -Wextra -I$(CUDA_DIR)/include -I$(CUPTI_DIR)/include $< \
	    -L$(CUPTI_DIR)/lib64 -L$(CUPTI_DIR)/lib -Wl,-rpath,$(CUPTI_DIR)/lib64 \
	    -Wl,-rpath,$(CUPTI_DIR)/lib -l:$(notdir $(firstword $(wildcard $(CUPTI_DIR)/lib64/libcupti.so* $(CUPTI_DIR)/lib/libcupti.so*))) -o $@

# GPU machine (bench/NOTES.md): bench-gpu, `megatron bench` against the PyTorch baseline
# (bench/baselines/torch_gpt2.py) on the GPT-2 shapes, one GPU (bench/gpu_bench.sh; SHAPES=124m
# picks shapes); bench-dp, data-parallel weak scaling of `megatron train` against PyTorch DDP on
# 1, 2 and 4 GPUs (bench/dp_bench.sh; SHAPES, NGPUS, MBS, MEGATRON_ARGS; MPI for N > 1); bench-tp,
# tensor (+ sequence) parallelism of `megatron train` against PyTorch's DTensor TP on 1, 2 and 4 GPUs
# (bench/tp_bench.sh; the same knobs); bench-pp, pipeline parallelism (1F1B and interleaved) on 2
# and 4 GPUs against the schedule's bubble and data parallelism on the same GPUs
# (bench/pp_bench.sh; SHAPES, NGPUS, MICROBATCHES, LAYOUTS).
.PHONY: bench-gpu bench-dp bench-tp bench-pp
bench-gpu bench-dp bench-tp bench-pp: info
	@if [ -z "$(HAVE_CUDA)" ]; then echo "make $@ needs the CUDA backend" \
	    "(this build: backends=cpu)" >&2; exit 1; fi
	@$(MAKE) --no-print-directory $(BUILD)/megatron
	bench/$(@:bench-%=%)_bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')

clean:
	rm -rf build build-asan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(DIST_OBJ:.o=.d) $(CUDA_TEST_OBJ:.o=.d)

# libFuzzer targets (clang; build only). Run each for >= 10 minutes, e.g.
#   build-fuzz/fuzz_indexed_dataset -max_total_time=600 tests/fuzz/corpus/indexed
#   build-fuzz/fuzz_jsonl -max_total_time=600 -dict=tests/fuzz/jsonl.dict tests/fuzz/corpus/jsonl
# and keep every crasher in tests/fuzz/regressions/ (tests/fuzz/README.md).
.PHONY: fuzz
fuzz: tests/fuzz/fuzz_indexed_dataset.c tests/fuzz/fuzz_jsonl.c tests/unit/fuzz_harness.c src/data/indexed_dataset.c src/data/jsonl.c src/core/status.c
	@mkdir -p build-fuzz
	for t in fuzz_indexed_dataset fuzz_jsonl; do \
	    clang -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Iinclude -Isrc -Itests/unit \
	        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	        tests/fuzz/$$t.c tests/unit/fuzz_harness.c src/data/indexed_dataset.c src/data/jsonl.c \
	        src/core/status.c -o build-fuzz/$$t || exit 1; \
	done
