/* The one place tunables are read from the environment. Each variable is read once and cached.
 * Documented variables (also in docs/environment.md):
 *   MG_LOG_LEVEL   0 quiet (errors only), 1 info (default), 2 debug
 *   MG_LOG_ALL     1: every rank prints info lines, not just the logging rank
 *   MG_CUDA_WORKSPACE_MB  CUDA backend: device scratch reserved at start-up, MiB (default 2048)
 *   MG_ATTENTION   CUDA backend: attention kernels, "cudnn" (cuDNN fused attention, deterministic
 *                  backward; the default when the build has cuDNN), "ours" or "cudnn-nondet"
 *   MG_CUBLASLT_TUNE  CUDA backend: 1 times cuBLASLt's candidates on each GEMM shape's first
 *                  use and keeps the fastest (results may then differ in the last bits between
 *                  runs); 0 (default) takes the heuristic's first, which repeats bitwise
 *   MG_GROUPED_GEMM  the CUDA MoE grouped GEMM: cutlass (default where built) or fallback
 *   MG_DBIAS       CUDA backend: a linear layer's bias gradient from our deterministic column
 *                  sums ("ours", the default) or cuBLASLt's BGRADB epilogue ("epilogue")
 *   MG_MOE_EXCHANGE  expert parallelism on the NCCL backend: "stores" (default) puts the rows
 *                  straight into the peers' peer-mapped receive slabs where the group can map
 *                  each other's memory, "all-to-all" sends the slabs by the group's all-to-all
 *   MG_TP_EXCHANGE  sequence parallelism (NCCL, or MPI ranks of one node): "copies" (default)
 *                  moves the tensor-parallel gathers and a bf16 layer's reduce-scatters by copies
 *                  into the peers' peer-mapped memory where the group can map each other's
 *                  memory, "collectives" by the group's all-gather and reduce-scatter
 *   MG_DP_EXCHANGE  the distributed optimizer (NCCL, or MPI ranks of one node): "copies"
 *                  (default: the buckets' reduce-scatters and parameter gathers through the
 *                  peers' peer-mapped memory by the copy engines, parallel/ddp.h, where the
 *                  group can map each other's memory) or "collectives"
 *   MG_PEER_COPY_STREAMS  CUDA backend: a copy of 1 MiB or more into a peer's memory cut over this
 *                  many streams (1..4, default 1), so that as many copy engines move it
 *   MG_PP_TIMING   pipeline runs on a device: 1 times every op (the backend's timer points, read
 *                  once per step) to measure the bubble; the cpu backend always does
 *   MG_FAULT_CHECKPOINT  tests only: "after-model" makes a checkpoint save fail after writing the
 *                  weights, to prove a failed save never replaces the latest checkpoint
 *   MG_FAULT_EXIT  tests only: "R:I" makes rank R of `megatron train` die (_exit(3), telling
 *                  nobody) in iteration I between backward and the gradient reduction, to prove
 *                  its peers stop with an error instead of waiting
 *   MG_FAULT_OVERFLOW  tests only: "A:B" puts an Inf into every rank's gradients (the first
 *                  element of its first shard) in iterations A..B, the overflow a too-large loss
 *                  scale causes, to prove the loss scaler's skipped steps on any backend
 *   MG_TEST_FP8_RECAST  tests only: 1 makes the fp8 linears cast their inputs again,
 *                  transposed, in the backward instead of keeping the forward's transpose, to
 *                  prove the kept bytes are the same
 *   MG_TEST_FP8_SP_BF16  tests only: 1 makes fp8 layers under SP (delayed scaling) gather their
 *                  inputs in the compute dtype and cast the whole, instead of casting their own
 *                  rows and gathering the bytes, to prove the bytes are the same
 *   MG_TEST_PP_STREAMED  tests only: 1 runs every overlapped pipeline with the streamed
 *                  executor (parallel/pipeline/run.h), also on MPI ranks and the cpu backend
 * Exports: mg_env_int, mg_env_str, mg_env_forget. Needs: nothing. */
#ifndef MG_ENV_H
#define MG_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* Value of an integer variable, or fallback when unset or not an integer. */
int mg_env_int(const char *name, int fallback);
/* Value of a string variable, or fallback when unset. The pointer stays valid. */
const char *mg_env_str(const char *name, const char *fallback);

/* Drops the cached values: the next read of each variable sees the environment as it is then
 * (tests that set a variable in a running process). */
void mg_env_forget(void);

#ifdef __cplusplus
}
#endif

#endif
