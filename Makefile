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
INCS    := -Iinclude -Isrc -Itests
DEPFLAGS = -MMD -MP

# ---- detection (everything optional except OpenBLAS and cJSON) ----
NVCC     := $(shell command -v nvcc 2>/dev/null)
CUDA_DIR := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
have_hdr  = $(shell for d in $(2) /usr/include /usr/include/x86_64-linux-gnu; do \
              test -f $$d/$(1) && { echo yes; break; }; done)
HAVE_CUBLAS := $(call have_hdr,cublasLt.h,$(CUDA_DIR)/include)
HAVE_CUDNN  := $(call have_hdr,cudnn.h,$(CUDA_DIR)/include)
HAVE_NCCL   := $(call have_hdr,nccl.h,$(CUDA_DIR)/include)
MPICC       := $(shell command -v mpicc 2>/dev/null)
HAVE_OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo yes)
BLAS_INC    := $(firstword $(foreach d,/usr/include/x86_64-linux-gnu /usr/include/openblas /usr/include,$(if $(wildcard $(d)/cblas.h),$(d))))
HAVE_CJSON  := $(call have_hdr,cjson/cJSON.h,)
HAVE_PCRE2  := $(call have_hdr,pcre2.h,)

ifeq ($(HAVE_OPENMP),yes)
OMPFLAGS := -fopenmp
endif
CFLAGS  += $(CSTD) $(WARN) $(OPT) -g $(INCS) $(OMPFLAGS) $(if $(BLAS_INC),-I$(BLAS_INC))
LDLIBS  += $(OMPFLAGS) -lopenblas -lcjson -lpcre2-8 -lm -lpthread

yn = $(if $(1),yes,no)
BUILD_LINE := megatron.c build: cc=$(CC) nvcc=$(call yn,$(NVCC)) cublas=$(call yn,$(HAVE_CUBLAS)) cudnn=$(call yn,$(HAVE_CUDNN)) nccl=$(call yn,$(HAVE_NCCL)) mpi=$(call yn,$(MPICC)) openmp=$(call yn,$(HAVE_OPENMP)) openblas=$(call yn,$(BLAS_INC)) cjson=$(call yn,$(HAVE_CJSON)) pcre2=$(call yn,$(HAVE_PCRE2)) backends=cpu

# ---- sources ----
LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_SRC  := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(shell find tests/unit -name '*.c' | sort)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test run asan clean deps info format bench
all: info $(BUILD)/megatron

info:
	@echo "$(BUILD_LINE)"
	@if [ -z "$(BLAS_INC)" ] || [ -z "$(HAVE_CJSON)" ] || [ -z "$(HAVE_PCRE2)" ]; then \
	    echo "megatron.c needs OpenBLAS, cJSON and PCRE2 headers: run 'make deps' as root, or" \
	         "apt-get install -y libopenblas-dev libcjson-dev libpcre2-dev" >&2; exit 1; fi

deps:
	@tools/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/libmegatron.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/megatron: $(CLI_OBJ) $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(CLI_OBJ) $(BUILD)/libmegatron.a $(LDLIBS) -o $@

$(BUILD)/unit_tests: $(TEST_OBJ) $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $(TEST_OBJ) $(BUILD)/libmegatron.a $(LDLIBS) -o $@

# The README's test command: installs missing Debian build dependencies (as root), builds, runs
# every CPU test and ends with "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory all $(BUILD)/unit_tests
	@tests/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDLIBS="-fsanitize=address,undefined $(LDLIBS)" build-asan/unit_tests build-asan/megatron
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh build-asan

DEMO_DIR ?= runs/demo
run: deps
	@$(MAKE) --no-print-directory all
	tools/demo.sh $(BUILD)/megatron $(DEMO_DIR)

bench: all
	bench/cpu_bench.sh $(BUILD)/megatron

# GPT-2 tokenizer throughput against Hugging Face tokenizers, one thread each (bench/NOTES.md).
.PHONY: bench-tokenizer
bench-tokenizer: info
	@$(MAKE) --no-print-directory $(BUILD)/tokenize_bench
	bench/tokenizer_bench.sh $(BUILD)

$(BUILD)/tokenize_bench: bench/tokenize_bench.c $(BUILD)/libmegatron.a
	$(CC) $(CFLAGS) $< $(BUILD)/libmegatron.a $(LDLIBS) -o $@

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

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
