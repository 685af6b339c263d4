set -u
tar xJf deps/carry/deps.tar.xz -C deps && tar xJf deps/carry/cupti.tar.xz -C deps && make -j16 BUILD=build-gpu DEPS_PREFIX=$PWD/deps/gpu/usr CUTLASS_INC=$PWD/deps/cutlass/include build-gpu/megatron build-gpu/cuda_tests > $OUT/build.log 2>&1 || { grep -m5 "error" $OUT/build.log; tail -5 $OUT/build.log; exit 1; }
export NCCL_NVLS_ENABLE=0
for f in graph optable; do tests/cuda/run.sh build-gpu $f 2>&1 | grep -E "^FAIL|passed|^  " | head -12; done
make BUILD=build-gpu CUPTI_DIR=$PWD/deps/nvidia/cu13 kernel-profile > $OUT/kp.log 2>&1 || tail -3 $OUT/kp.log
CUDA_INJECTION64_PATH=$PWD/build-gpu/kernel_profile.so KPROF_MARK=clip_coef_kernel KPROF_STEPS=10 KPROF_TOP=40 KPROF_OUT=$OUT/mg124.txt build-gpu/megatron bench --model gpt2-124m --micro-batch-size 32 --iters 12 --warmup 3 > $OUT/mg124.log 2>&1
head -1 $OUT/mg124.txt; grep -E "norm|colsum" $OUT/mg124.txt
build-gpu/megatron bench --model gpt2-124m --micro-batch-size 32 --iters 20 --warmup 5 --json 2>/dev/null | tail -1 | cut -c1-300
