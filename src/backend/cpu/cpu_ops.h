/* Internal declarations of the CPU reference backend: one function per entry of mg_backend, each
 * defined in the cpu_<family>.c file of its op family and installed by mg_backend_cpu_create.
 * Semantics, shapes and the buffer contract are those of src/backend/backend.h; on the CPU the
 * compute dtype is fp32, so every `void *` activation or weight is a float array.
 *
 * Determinism: every op gives bitwise identical results for any OpenMP thread count. Parallel
 * loops only split independent outputs (rows, heads, column blocks); every sum that reduces over
 * rows or tokens runs in a fixed order inside one thread, or over fixed-size chunks whose partials
 * are combined in a fixed order.
 * Exports: mg_cpu_* (to cpu_backend.c only). Needs: backend/backend.h. */
#ifndef MG_CPU_OPS_H
#define MG_CPU_OPS_H

#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>

/* Column block width for loops that reduce over rows: each block is one OpenMP work item, so the
 * summation order of a column never depends on the thread count. */
#define MG_CPU_COL_BLOCK 64

/* cpu_embedding.c */
mg_status mg_cpu_embedding_forward(mg_backend *be, void *out, const int32_t *tokens,
                                   const void *wte, const void *wpe, int N, int S, int H);
mg_status mg_cpu_embedding_backward(mg_backend *be, float *dwte, float *dwpe, const void *dout,
                                    const int32_t *tokens, int N, int S, int H);

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
                                const void *bias, int N, int IC, int OC);
mg_status mg_cpu_linear_backward(mg_backend *be, void *dinp, float *dw, float *dbias,
                                 const void *dout, const void *inp, const void *w, int N, int IC,
                                 int OC);

/* cpu_activation.c */
mg_status mg_cpu_gelu_forward(mg_backend *be, void *out, const void *inp, size_t n);
mg_status mg_cpu_gelu_backward(mg_backend *be, void *dinp, const void *inp, const void *dout,
                               size_t n);
mg_status mg_cpu_swiglu_forward(mg_backend *be, void *out, const void *inp, int N, int F);
mg_status mg_cpu_swiglu_backward(mg_backend *be, void *dinp, const void *inp, const void *dout,
                                 int N, int F);

/* cpu_rope.c */
mg_status mg_cpu_rope_forward(mg_backend *be, void *qkv, const float *cos_tab, const float *sin_tab,
                              int N, int S, int nq, int ng, int hd);
mg_status mg_cpu_rope_backward(mg_backend *be, void *dqkv, const float *cos_tab,
                               const float *sin_tab, int N, int S, int nq, int ng, int hd);

/* cpu_attention.c */
size_t mg_cpu_attention_saved_bytes(mg_backend *be, int B, int S, int nq, int hd);
mg_status mg_cpu_attention_forward(mg_backend *be, void *out, void *saved, const void *qkv, int B,
                                   int S, int nq, int ng, int hd);
mg_status mg_cpu_attention_backward(mg_backend *be, void *dqkv, const void *dout, const void *qkv,
                                    const void *out, const void *saved, int B, int S, int nq,
                                    int ng, int hd);

/* cpu_cross_entropy.c */
mg_status mg_cpu_cross_entropy_fused(mg_backend *be, void *logits, float *losses,
                                     const int32_t *targets, const float *dloss, int N, int V);

/* cpu_elementwise.c */
mg_status mg_cpu_add(mg_backend *be, void *out, const void *a, const void *b, size_t n);
mg_status mg_cpu_sum_f32(mg_backend *be, float *out, const float *x, const float *w, size_t n,
                         float scale);
mg_status mg_cpu_sumsq_f32(mg_backend *be, float *out, const float *x, size_t n);
mg_status mg_cpu_clip_coef(mg_backend *be, float *coef_out, float *norm_out, const float *sumsq,
                           float clip);

/* cpu_adamw.c */
mg_status mg_cpu_adamw(mg_backend *be, void *param, float *master, const float *grad, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps, float wd,
                       float bc1, float bc2, const float *grad_scale);

#endif
