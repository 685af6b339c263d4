/* Internal declarations of the CPU reference backend: one function per entry of mg_backend, each
 * defined in the cpu_<family>.c file of its op family and installed by mg_backend_cpu_create.
 * Semantics, shapes and the buffer contract are those of src/backend/backend_ops.h; on the CPU the
 * compute dtype is fp32, so every `void *` activation or weight is a float array.
 *
 * Determinism: every op gives bitwise identical results for any OpenMP thread count. Parallel
 * loops only split independent outputs (rows, heads, column blocks); every sum that reduces over
 * rows or tokens runs in a fixed order inside one thread, or over fixed-size chunks whose partials
 * are combined in a fixed order. A sum inside one row vectorised with `omp simd` becomes a fixed
 * set of interleaved partial sums: the order depends on the build's vector width (x86-64-v3:
 * 256-bit), never on the thread count.
 * Exports: mg_cpu_* (to cpu_backend.c only), mg_cpu_expf and the bit-cast helpers (inline).
 * Needs: backend/backend.h. */
#ifndef MG_CPU_OPS_H
#define MG_CPU_OPS_H

#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Column block width for loops that reduce over rows: each block is one OpenMP work item, so the
 * summation order of a column never depends on the thread count. */
#define MG_CPU_COL_BLOCK 64

/* Backend-private state (be->ctx): one scratch buffer shared by the ops that need temporary
 * memory (attention backward). It is sized on first use and only grows, so a training run
 * allocates it once (at its first backward step) and never again; cpu_destroy frees it. The
 * backend is driven by one host thread, and an op uses the buffer only for its own duration. */
typedef struct {
    void *scratch;
    size_t scratch_bytes;
    double timer[MG_TIMER_POINTS]; /* timer_mark's points: the host clock, seconds */
} mg_cpu_ctx;

/* cpu_backend.c: at least `bytes` of 256-byte aligned scratch (contents undefined), or an error. */
mg_status mg_cpu_scratch(mg_backend *be, size_t bytes, void **out);

/* A linear's bias gradient, block blk of MG_CPU_COL_BLOCK columns: dbias[j] += the column sum of
 * dout (N, OC) in double, rows in order (cpu_linear.c; the fp8 cast's dbias takes the same). */
void mg_cpu_dbias_block(float *dbias, const float *dout, int N, int OC, int blk);

/* OpenMP's thread count and this thread's number (1 and 0 without OpenMP): per-thread slices of
 * the scratch buffer. */
static inline int mg_cpu_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
static inline int mg_cpu_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline float mg_cpu_bits_f32(int32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline int32_t mg_cpu_f32_bits(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* expf for the hot loops, written so that gcc vectorises a loop calling it (no calls, no branches:
 * `#pragma omp simd` loops become SSE/AVX code). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * with ln2 split in two so n*C1 is exact, then Cephes' expf polynomial 1 + r + r^2 P(r), P of
 * degree 5. 2^n is applied as two exact powers of two 2^(n>>1) * 2^(n - (n>>1)) (gcc's >> on a
 * negative int is arithmetic), so results between e^-87.3 and e^-103.9 underflow gradually with
 * one rounding and anything below rounds to 0. Inputs are clamped to [-104, 88] (callers pass
 * x <= 88). Error against double exp, 2^24 points over [-110, 88]: at most 0.98 ulp (0.75 ulp of
 * the subnormal spacing below e^-87.3). NaN in, NaN out. Only plain IEEE single-precision
 * operations (no contraction: -ffp-contract=off), so scalar and vector code give the same bits on
 * every x86-64 level. The clamp blends bit patterns instead of using `?:` on floats: gcc threads
 * float selects into per-path copies of the polynomial and, as it may not speculate float
 * operations under the default -ftrapping-math, then leaves the loop scalar. */
static inline float mg_cpu_expf(float x) {
    /* clamp to [-104, 88] by blending bit patterns under an all-ones/all-zeros mask */
    int32_t xb = mg_cpu_f32_bits(x);
    int32_t mhi = -(int32_t)(x > 88.0f), mlo = -(int32_t)(x < -104.0f);
    xb = (xb & ~mhi) | (mg_cpu_f32_bits(88.0f) & mhi);
    xb = (xb & ~mlo) | (mg_cpu_f32_bits(-104.0f) & mlo);
    float xc = mg_cpu_bits_f32(xb);
    /* n = round(x log2 e): adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits */
    const float shifter = 12582912.0f;
    float k = xc * 1.44269504088896341f + shifter;
    float n = k - shifter;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* the low bits of k hold n, n in [-150, 127] (the shifter's bits are 0x4B400000) */
    int32_t ni = mg_cpu_f32_bits(k) - 0x4B400000, n1 = ni >> 1, n2 = ni - n1;
    float s1 = mg_cpu_bits_f32((n1 + 127) * (1 << 23)),
          s2 = mg_cpu_bits_f32((n2 + 127) * (1 << 23));
    return p * s1 * s2;
}

/* Vocab-parallel ops (embedding, cross-entropy): id - v0 when vocabulary id `id` is one of this
 * rank's rows [v0, v0 + Vl), else -1 (unsigned arithmetic: no overflow, and a negative id is
 * outside every range). */
static inline int mg_cpu_vocab_row(int32_t id, int v0, int Vl) {
    uint32_t r = (uint32_t)id - (uint32_t)v0;
    return Vl > 0 && r < (uint32_t)Vl ? (int)r : -1;
}

/* mg_cpu_<name> for every required entry of the table and every CAP one (backend_ops.h; the CPU
 * backend has none of the optional ones), defined in the file of its family: the runtime entries
 * (memory, copies) in cpu_backend.c, then cpu_embedding.c, cpu_norm.c, cpu_linear.c,
 * cpu_activation.c, cpu_rope.c, cpu_attention.c, cpu_cross_entropy.c, cpu_elementwise.c (add, sums,
 * clipping), cpu_dropout.c, cpu_adamw.c, cpu_fp8.c (the fp8 casts and scaling), and the MoE ops in
 * cpu_router.c (router, routing, expert bias) and cpu_moe.c (token movement, grouped linear and
 * activations). */
#define MG_OP(name, need, kind, ret, params, args) MG_CPU_DECLARE_##need(name, ret, params)
#define MG_CPU_DECLARE_REQ(name, ret, params)      mg_backend_##name##_fn mg_cpu_##name;
#define MG_CPU_DECLARE_OPT(name, ret, params)
#define MG_CPU_DECLARE_CAP(name, ret, params) mg_backend_##name##_fn mg_cpu_##name;
#include "backend/backend_ops.h"
#undef MG_CPU_DECLARE_REQ
#undef MG_CPU_DECLARE_OPT
#undef MG_CPU_DECLARE_CAP

#endif
