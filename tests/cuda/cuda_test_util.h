/* Helpers shared by the CUDA backend tests (tests/cuda/test_cuda_*.c): every op of the table is run
 * on the CUDA backend and on the CPU reference backend and the results compared.
 *
 * Compute dtype. The CUDA backend under test computes in bf16 (default) or, with
 * MG_TEST_CUDA_DTYPE=fp16, in fp16 (ct_dtype); every input, rounding and tolerance below follows
 * it, so the whole suite runs in either (`make test-cuda` runs both).
 *
 * Method. Inputs are seeded random values (never all zeros) rounded to the compute dtype on the
 * host; the CUDA op gets them in that dtype and the CPU op gets the SAME values as fp32, so the
 * only differences left are the CUDA op's own roundings and summation order. Magnitudes stay far
 * inside fp16's range (values O(1), products of a few of them; fp16 overflows at 65520).
 * Overwritten outputs are poisoned first (all bytes 0xFF: NaN as bf16, fp16 and fp32), so an
 * element the op forgets to write fails the comparison; accumulated outputs (dw += ...) are
 * pre-filled with non-zero values on both sides.
 *
 * Comparison: the normalised error max|got - ref| / max|ref| (a NaN or Inf in `got` where `ref` is
 * finite makes it infinite). Tolerances, from the precision of each kind of output; CT_EPS is
 * the relative error of one rounding to nearest: 2^-8 ~ 3.9e-3 for bf16 (8-bit significand),
 * 2^-11 ~ 4.9e-4 for fp16 (11-bit significand). A wrong term, factor or index shows up as
 * O(0.1 .. 1) in either.
 *  - CT_TOL_ACT, outputs in the compute dtype: the output rounding plus one more (an
 *    intermediate re-read in the compute dtype, an fp32 intrinsic a few ulp off): bf16 8e-3
 *    (2 CT_EPS); measured with MG_TEST_CUDA_AS_CPU=bf16 (the output rounding alone): at most
 *    3.2e-3. fp16 2e-3: 4 CT_EPS, the same two roundings with a margin of 2, since fp16's
 *    subnormals (below 2^-14) round more coarsely relative to themselves (absolutely 2^-25,
 *    nothing against max|ref| here).
 *  - GEMM outputs (linear, the grouped linear, cross-entropy over a large V) accumulate K
 *    products in fp32 in an order the library picks, then round once: CT_TOL_GEMM, bf16 1e-2,
 *    fp16 3e-3 (~6 CT_EPS: the unfused GELU paths round twice; no need to be tighter).
 *  - Attention: forward rounds the probabilities P to the compute dtype before P V (flash-
 *    attention style), on top of the output rounding: CT_TOL_GEMM. Backward chains three rounded
 *    products (P, dP -> dS, dS K / dS^T Q / P^T dO), each up to CT_EPS relative, and the
 *    dS = P (dP - D) difference loses a few more bits: CT_TOL_ATTN_BWD, bf16 2e-2 (~5 CT_EPS),
 *    fp16 5e-3 (~10 CT_EPS).
 *  - fp32 outputs of reductions (weight gradients, norm statistics, losses, sums): the inputs are
 *    identical and exact in fp32, only the summation order differs; for the n <= ~1e5 terms here
 *    the typical error is sqrt(n) 2^-24 ~ 2e-5 of the sum of |terms| and far less of max|ref| in
 *    practice: CT_TOL_F32 = 1e-4, either dtype.
 *  - fp32 elementwise outputs (AdamW state): a few ulp (2^-24 each): CT_TOL_F32_ELEM = 1e-5.
 * Set MG_TEST_VERBOSE=1 to print every measured error (for tuning; the margin is the point).
 *
 * The two backends are created once per process and shared by the tests (ct_cpu, ct_gpu); a test
 * frees what it allocates. Exports: the ct_* helpers and CT_* macros below. Needs: the library,
 * tests/test.h. */
#ifndef MG_TEST_CUDA_UTIL_H
#define MG_TEST_CUDA_UTIL_H

#include "test.h"

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"
#include "core/status.h"
#include "core/tensor.h"
#include "megatron.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CT_SEED 20261122ull

/* The compute dtype under test: MG_F16 with MG_TEST_CUDA_DTYPE=fp16 or MG_TEST_CUDA_AS_CPU=f16,
 * else MG_BF16 (MG_TEST_CUDA_DTYPE unset or bf16; another value fails ct_gpu). */
mg_dtype ct_dtype(void);

#define CT_F16          (ct_dtype() == MG_F16)
#define CT_EPS          (CT_F16 ? 0x1p-11 : 0x1p-8)
#define CT_TOL_ACT      (CT_F16 ? 2e-3 : 8e-3)
#define CT_TOL_GEMM     (CT_F16 ? 3e-3 : 1e-2)
#define CT_TOL_ATTN_BWD (CT_F16 ? 5e-3 : 2e-2)
#define CT_TOL_F32      1e-4
#define CT_TOL_F32_ELEM 1e-5

/* The shared backends; NULL (and a recorded failure naming the error) when creation failed.
 * ct_gpu is the backend under test: the CUDA backend in ct_dtype(), or, with
 * MG_TEST_CUDA_AS_CPU=1, a second CPU backend, which checks the tests themselves on a machine
 * without a GPU (every comparison must then pass with errors of ~0; the CUDA-specific tests,
 * which use ct_cuda, fail), and with MG_TEST_CUDA_AS_CPU=bf16 or =f16 the same with every
 * compute-dtype output rounded to bf16 or fp16 as it is read back (the output rounding alone
 * must pass every tolerance by a margin). */
int ct_verbose(void); /* MG_TEST_VERBOSE set and not "0": print every measured error */
/* MG_TEST_CUDA_AS_CPU: 0 unset (or another value), 1 "1", 2 "bf16", 3 "f16" */
int ct_as_cpu(void);
mg_backend *ct_cpu(mg_test_ctx *t);
mg_backend *ct_gpu(mg_test_ctx *t);
/* The CUDA backend itself (for tests of its memory entries and counters). */
mg_backend *ct_cuda(mg_test_ctx *t);
#define CT_BACKENDS(cpu, gpu)                                                                      \
    mg_backend *cpu = ct_cpu(t), *gpu = cpu ? ct_gpu(t) : NULL;                                    \
    if (!cpu || !gpu) return

/* A test's buffers: every host and device buffer made through a pool is freed by ct_pool_free.
 * A failed allocation or transfer records a test failure, sets `failed` and returns NULL, so a
 * test checks P.failed once after setting up and skips the rest. */
#define CT_POOL_MAX 256
typedef struct {
    mg_test_ctx *t;
    mg_backend *g;
    void *dev[CT_POOL_MAX], *host[CT_POOL_MAX];
    int ndev, nhost, failed;
} ct_pool;
static inline ct_pool ct_pool_of(mg_test_ctx *t, mg_backend *g) {
    ct_pool p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.g = g;
    return p;
}
void ct_pool_free(ct_pool *P);

/* ---- host buffers ---- */
void *ct_host(ct_pool *P, size_t bytes);
/* scale * N(0,1), seeded by (CT_SEED, id), rounded to values of the compute dtype (ct_dtype). */
float *ct_rand_act(ct_pool *P, uint32_t id, size_t n, float scale);
/* Uniform in [lo, hi), rounded to values of the compute dtype. */
float *ct_uniform_act(ct_pool *P, uint32_t id, size_t n, float lo, float hi);
/* Uniform in [lo, hi) as fp32 (fp32 inputs: optimizer state, tables, loss weights). */
float *ct_uniform_f32(ct_pool *P, uint32_t id, size_t n, float lo, float hi);
/* Token ids in [0, V): half from 5 hot ids (repeats, so scatter-adds collide), the rest anywhere;
 * the first is 0 and the last V-1 when n > 1. */
int32_t *ct_tokens(ct_pool *P, uint32_t id, size_t n, int V);
float *ct_dup(ct_pool *P, const float *x, size_t n);
/* x[i] rounded to the compute dtype (core/tensor.c's rounding), in place. */
void ct_round_act(float *x, size_t n);
/* x rounded to the compute dtype, as its bits; and back (exact). */
uint16_t ct_act_bits(float x);
float ct_act_value(uint16_t bits);

/* ---- device buffers on P->g ----
 * "act": a buffer in the backend's compute dtype (bf16 or fp16 on CUDA), filled with upload_f32
 * and read with download_f32. */
void *ct_up_act(ct_pool *P, const float *x, size_t n);
float *ct_up_f32(ct_pool *P, const float *x, size_t n);
int32_t *ct_up_i32(ct_pool *P, const int32_t *x, size_t n);
uint64_t *ct_up_u64(ct_pool *P, const uint64_t *x, size_t n); /* e.g. dropout streams */
/* n consecutive blocks of `each` values of x uploaded one buffer each (compute dtype, or fp32
 * with f32), and a device array of their n pointers (the grouped ops' tables); the buffers go
 * to `bufs`. */
void *const *ct_up_ptrs(ct_pool *P, const float *x, int n, size_t each, int f32, void **bufs);
/* `bytes` of 0xFF: NaN read as bf16, fp16 or fp32. */
void *ct_poison(ct_pool *P, size_t bytes);
/* n poisoned elements of the compute dtype. */
void *ct_poison_act(ct_pool *P, size_t n);
/* Device to host, into new pool buffers (all NaN after a failure). */
float *ct_down_act(ct_pool *P, const void *d, size_t n);
float *ct_down_f32(ct_pool *P, const float *d, size_t n);
void *ct_down_raw(ct_pool *P, const void *d, size_t bytes);
/* Host to device into an existing buffer (re-running an in-place op). */
void ct_put_act(ct_pool *P, void *d, const float *x, size_t n);
void ct_put_f32(ct_pool *P, float *d, const float *x, size_t n);

/* ---- models ---- */
/* The tiny GPT of the CUDA model tests, parsed and validated into c: hidden 64, 4 heads of 16,
 * sequence 32, vocabulary 256 (padded to a multiple of 64), micro-batch 2, mock data, no
 * evaluation, on `device`; with llama its Llama twin (RMSNorm, SwiGLU, RoPE, 2 query groups, no
 * biases, untied output); then the flags of `extra` (NULL-terminated: layers, batch, lr, ...). */
mg_status ct_tiny_config(mg_config *c, const char *device, bool llama, const char *const *extra);

/* ---- comparison ---- */
/* Fails unless max|got-ref| / max|ref| <= tol, over entries where ref is finite (infinite when
 * got is not finite there). */
void ct_expect_close(mg_test_ctx *t, const char *file, int line, const float *got, const float *ref,
                     size_t n, double tol, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
/* Part `part` (0 q, 1 k, 2 v) of a fused (N, ng*(r+2)*hd) qkv buffer, packed to (N, heads*hd)
 * in host memory of P; its length in *n_out. */
float *ct_qkv_part(ct_pool *P, const float *x, int N, int nq, int ng, int hd, int part,
                   size_t *n_out);
/* ct_expect_close on the query, key and value parts of a fused qkv gradient, each on its own
 * (they differ in size, and an error confined to one must not hide behind another); the
 * message names the part after the formatted label. */
void ct_expect_qkv_close(mg_test_ctx *t, const char *file, int line, ct_pool *P, const float *got,
                         const float *ref, int N, int nq, int ng, int hd, double tol,
                         const char *fmt, ...) __attribute__((format(printf, 12, 13)));
/* NaN where ref is NaN, the same infinity where ref is infinite, finite elsewhere. */
void ct_expect_nonfinite_parity(mg_test_ctx *t, const char *file, int line, const float *got,
                                const float *ref, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void ct_expect_same_bits(mg_test_ctx *t, const char *file, int line, const void *a, const void *b,
                         size_t bytes, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

#define CT_EXPECT_CLOSE(got, ref, n, tol, ...)                                                     \
    ct_expect_close(t, __FILE__, __LINE__, (got), (ref), (n), (tol), __VA_ARGS__)
#define CT_EXPECT_QKV_CLOSE(P, got, ref, N, nq, ng, hd, tol, ...)                                  \
    ct_expect_qkv_close(t, __FILE__, __LINE__, (P), (got), (ref), (N), (nq), (ng), (hd), (tol),    \
                        __VA_ARGS__)
#define CT_EXPECT_PARITY(got, ref, n, ...)                                                         \
    ct_expect_nonfinite_parity(t, __FILE__, __LINE__, (got), (ref), (n), __VA_ARGS__)
#define CT_EXPECT_SAME_BITS(a, b, bytes, ...)                                                      \
    ct_expect_same_bits(t, __FILE__, __LINE__, (a), (b), (bytes), __VA_ARGS__)

/* The CUDA launchers the tests call by name (the alternatives to the table's entries), in the
 * backend's dtype: CT_CUDA_OP(g, attention_forward) is mg_cuda_attention_forward on a bf16
 * backend and mg_cuda_f16_attention_forward on an fp16 one (cuda_f16_names.h). */
MG_CUDA_F16_DECLARE(attention_saved_bytes);
MG_CUDA_F16_DECLARE(attention_forward);
MG_CUDA_F16_DECLARE(attention_backward);
MG_CUDA_F16_DECLARE(attention_cudnn_available);
MG_CUDA_F16_DECLARE(attention_cudnn_supported);
MG_CUDA_F16_DECLARE(attention_cudnn_saved_bytes);
MG_CUDA_F16_DECLARE(attention_cudnn_forward);
MG_CUDA_F16_DECLARE(attention_cudnn_backward);
MG_CUDA_F16_DECLARE(grouped_linear_forward);
MG_CUDA_F16_DECLARE(grouped_linear_backward);
MG_CUDA_F16_DECLARE(grouped_linear_forward_portable);
MG_CUDA_F16_DECLARE(grouped_linear_backward_portable);
#define CT_CUDA_OP(g, op) MG_CUDA_BY_DTYPE(g, op)

/* The device allocations and host syncs made through `g` so far (mg_cuda_ctx counters). */
static inline uint64_t ct_allocs(mg_backend *g) {
    return mg_cuda_ctx_of(g)->n_device_allocs;
}
static inline uint64_t ct_syncs(mg_backend *g) {
    return mg_cuda_ctx_of(g)->n_host_syncs;
}

#endif
