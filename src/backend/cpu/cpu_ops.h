/* Internal declarations of the CPU reference backend: one function per entry of mg_backend, each
 * defined in the cpu_<family>.c file of its op family and installed by mg_backend_cpu_create.
 * Semantics, shapes and the buffer contract are those of src/backend/backend.h; on the CPU the
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
} mg_cpu_ctx;

/* cpu_backend.c: at least `bytes` of 256-byte aligned scratch (contents undefined), or an error. */
mg_status mg_cpu_scratch(mg_backend *be, size_t bytes, void **out);

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

/* cpu_embedding.c */
mg_status mg_cpu_embedding_forward(mg_backend *be, void *out, const int32_t *tokens,
                                   const void *wte, const void *wpe, const int32_t *pos, int N,
                                   int S, int H, int v0, int Vl);
mg_status mg_cpu_embedding_backward(mg_backend *be, float *dwte, float *dwpe, const void *dout,
                                    const int32_t *tokens, const int32_t *pos, int N, int S, int H,
                                    int v0, int Vl);

/* cpu_norm.c */
mg_status mg_cpu_layernorm_forward(mg_backend *be, void *out, float *mean, float *rstd,
                                   const void *x, const void *w, const void *b, int N, int H,
                                   float eps);
mg_status mg_cpu_layernorm_backward(mg_backend *be, void *dx, float *dw, float *db,
                                    const void *dout, const void *x, const void *w,
                                    const float *mean, const float *rstd, int N, int H);
mg_status mg_cpu_rmsnorm_forward(mg_backend *be, void *out, float *rstd, const void *x,
                                 const void *w, int N, int H, float eps);
mg_status mg_cpu_rmsnorm_backward(mg_backend *be, void *dx, float *dw, const void *dout,
                                  const void *x, const void *w, const float *rstd, int N, int H);

/* cpu_linear.c */
mg_status mg_cpu_linear_forward(mg_backend *be, void *out, const void *inp, const void *w,
                                const void *bias, const void *residual, int N, int IC, int OC);
mg_status mg_cpu_linear_gelu_forward(mg_backend *be, void *out, void *pre, const void *inp,
                                     const void *w, const void *bias, int N, int IC, int OC);
mg_status mg_cpu_linear_backward(mg_backend *be, void *dinp, float *dw, float *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 const void *gelu_pre, int N, int IC, int OC);

/* cpu_activation.c */
mg_status mg_cpu_gelu_forward(mg_backend *be, void *out, const void *inp, size_t n);
mg_status mg_cpu_gelu_backward(mg_backend *be, void *dinp, const void *inp, const void *dout,
                               size_t n);
mg_status mg_cpu_swiglu_forward(mg_backend *be, void *out, const void *inp, int N, int F);
mg_status mg_cpu_swiglu_backward(mg_backend *be, void *dinp, const void *inp, const void *dout,
                                 int N, int F);

/* cpu_rope.c */
mg_status mg_cpu_rope_forward(mg_backend *be, void *qkv, const float *cos_tab, const float *sin_tab,
                              const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd);
mg_status mg_cpu_rope_backward(mg_backend *be, void *dqkv, const float *cos_tab,
                               const float *sin_tab, const int32_t *pos, int N, int S, int nq,
                               int ng, int hd, int rd);

/* cpu_attention.c */
size_t mg_cpu_attention_saved_bytes(mg_backend *be, int B, int S, int nq, int hd);
mg_status mg_cpu_attention_forward(mg_backend *be, void *out, void *saved, const void *qkv, int B,
                                   int S, int nq, int ng, int hd, const mg_dropout *drop,
                                   const int32_t *doc_start);
mg_status mg_cpu_attention_backward(mg_backend *be, void *dqkv, const void *dout, const void *qkv,
                                    const void *out, const void *saved, int B, int S, int nq,
                                    int ng, int hd, const mg_dropout *drop,
                                    const int32_t *doc_start);

/* cpu_cross_entropy.c */
mg_status mg_cpu_cross_entropy_fused(mg_backend *be, void *logits, float *losses,
                                     const int32_t *targets, const float *dloss, int N, int V);
mg_status mg_cpu_cross_entropy_max(mg_backend *be, float *rowmax, const void *logits, int N,
                                   int Vl);
mg_status mg_cpu_cross_entropy_sums(mg_backend *be, float *sums, const void *logits,
                                    const float *rowmax, const int32_t *targets, int v0, int N,
                                    int Vl);
mg_status mg_cpu_cross_entropy_finish(mg_backend *be, void *logits, float *losses,
                                      const float *rowmax, const float *sums,
                                      const int32_t *targets, const float *dloss, int v0, int N,
                                      int Vl);

/* cpu_elementwise.c */
mg_status mg_cpu_add(mg_backend *be, void *out, const void *a, const void *b, size_t n);
mg_status mg_cpu_bias_residual_add(mg_backend *be, void *out, const void *x, const void *bias,
                                   const void *residual, int N, int H);
mg_status mg_cpu_sum_f32(mg_backend *be, float *out, const float *x, const float *w, size_t n,
                         float scale);
mg_status mg_cpu_sumsq_f32(mg_backend *be, float *out, const float *x, size_t n, double scale);
mg_status mg_cpu_count_zeros_f32(mg_backend *be, int64_t *out, const float *x, size_t n);
mg_status mg_cpu_clip_coef(mg_backend *be, float *coef_out, float *norm_out, const float *sumsq,
                           float clip, float unscale);

/* cpu_dropout.c */
mg_status mg_cpu_dropout_add(mg_backend *be, void *out, const void *x, const void *bias,
                             const void *residual, int N, int H, int S, const mg_dropout *drop);
mg_status mg_cpu_dropout_backward(mg_backend *be, void *dx, const void *dout, int N, int H, int S,
                                  const mg_dropout *drop);

/* cpu_router.c */
mg_status mg_cpu_router_forward(mg_backend *be, float *logits, const void *x, const void *w, int T,
                                int H, int E);
mg_status mg_cpu_router_backward(mg_backend *be, void *dx, float *dw, const float *dlogits,
                                 const void *x, const void *w, int T, int H, int E);
mg_status mg_cpu_moe_route(mg_backend *be, const mg_moe_routing *r, int32_t *idx, float *probs,
                           int32_t *aux_counts, float *stats, const float *logits,
                           const float *bias);
mg_status mg_cpu_moe_route_backward(mg_backend *be, const mg_moe_routing *r, float *dlogits,
                                    const float *dprobs, const float *logits, const int32_t *idx,
                                    const float *probs, const int32_t *aux_counts,
                                    const float *bias);
mg_status mg_cpu_moe_expert_bias_update(mg_backend *be, float *bias, const float *load, int E,
                                        float rate);

/* cpu_moe.c */
mg_status mg_cpu_moe_permute(mg_backend *be, void *xp, int32_t *pos, int32_t *counts, float *load,
                             const void *x, const int32_t *idx, int T, int k, int E, int H,
                             int pad);
mg_status mg_cpu_moe_permute_backward(mg_backend *be, void *dx, const void *dxp, const int32_t *pos,
                                      int T, int k, int H);
mg_status mg_cpu_moe_regroup(mg_backend *be, void *dst, const void *src, const int32_t *counts,
                             int P, int El, int slab, int H, bool to_slabs);
mg_status mg_cpu_moe_unpermute(mg_backend *be, void *out, const void *base, const void *y,
                               const int32_t *pos, const float *probs, int T, int k, int H);
mg_status mg_cpu_moe_unpermute_backward(mg_backend *be, void *dy, float *dprobs, const void *dout,
                                        const void *y, const int32_t *pos, const float *probs,
                                        int T, int k, int H, int R);
mg_status mg_cpu_grouped_linear_forward(mg_backend *be, void *out, const void *inp, void *const *w,
                                        void *const *bias, const int32_t *counts, int n_src,
                                        int n_w, int IC, int OC);
mg_status mg_cpu_grouped_linear_backward(mg_backend *be, void *dinp, float *const *dw,
                                         float *const *dbias, const void *dout, const void *inp,
                                         void *const *w, const void *gelu_pre,
                                         const int32_t *counts, int n_src, int n_w, int IC, int OC,
                                         bool accumulate);
mg_status mg_cpu_grouped_activation_forward(mg_backend *be, void *out, const void *pre,
                                            const int32_t *counts, int G, int F, bool swiglu);
mg_status mg_cpu_grouped_swiglu_backward(mg_backend *be, void *dpre, const void *pre,
                                         const void *dout, const int32_t *counts, int G, int F);

/* cpu_adamw.c */
mg_status mg_cpu_adamw(mg_backend *be, void *param, float *master, const float *grad, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps, float wd,
                       float bc1, float bc2, const float *grad_scale);

#endif
