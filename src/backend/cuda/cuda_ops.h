/* Internal to src/backend/cuda: the CUDA implementation of every entry of the backend table
 * (backend/backend.h documents each op's contract; the CUDA versions keep it exactly, with a
 * 16-bit compute dtype, bf16 or fp16: activations, activation gradients and weights in it; weight
 * gradients, norm statistics, losses and optimizer state fp32; token ids int32; all pointers
 * device memory).
 *
 * Each op family lives in one .cu file with its kernels (static __global__) and exports the
 * entries below with C linkage; cuda_table.c fills the table with them. Each file is built twice:
 * the bf16 object exports the names below, the fp16 one (-DMG_CUDA_F16) mg_cuda_f16_<op>
 * (cuda_f16_names.h, included first). Every launcher runs on the backend's compute stream
 * (mg_cuda_stream(be)), checks cudaGetLastError() after each launch (MG_CUDA_CHECK) and never
 * allocates or synchronises with the host: scratch space comes from the workspace reserved at
 * creation (mg_cuda_scratch). Generated from backend.h's table; keep the two in step. */
#ifndef MG_BACKEND_CUDA_OPS_H
#define MG_BACKEND_CUDA_OPS_H

#include "backend/backend.h"
#include "backend/cuda/cuda_f16_names.h"

#ifdef __cplusplus
extern "C" {
#endif

mg_status mg_cuda_alloc(mg_backend *be, size_t bytes, void **out);
void mg_cuda_free(mg_backend *be, void *ptr);
/* Makes the shared workspace at least `need` bytes, for an op whose size only its plan knows
 * (cuDNN's attention): the old one is freed once the device is done with it, and one line says
 * so. Refused (MG_ERR_NOMEM naming `who` and the size) when MG_CUDA_WORKSPACE_MB fixed the size,
 * or while the stream is being captured into a CUDA graph. */
mg_status mg_cuda_workspace_reserve(mg_backend *be, size_t need, const char *who);
mg_status mg_cuda_copy_h2d(mg_backend *be, void *dst, const void *src, size_t bytes);
mg_status mg_cuda_copy_d2h(mg_backend *be, void *dst, const void *src, size_t bytes);
mg_status mg_cuda_copy_d2d(mg_backend *be, void *dst, const void *src, size_t bytes);
mg_status mg_cuda_memset_zero(mg_backend *be, void *dst, size_t bytes);
mg_status mg_cuda_upload_f32(mg_backend *be, void *dst, const float *src, size_t n);
mg_status mg_cuda_download_f32(mg_backend *be, float *dst, const void *src, size_t n);
mg_status mg_cuda_synchronize(mg_backend *be);
void mg_cuda_destroy(mg_backend *be);
mg_status mg_cuda_memory_info(mg_backend *be, size_t *free_bytes, size_t *total_bytes);
void *mg_cuda_stream_handle(mg_backend *be, mg_stream_id s);
mg_status mg_cuda_stream_wait(mg_backend *be, mg_stream_id waiter, mg_stream_id signaller);
mg_status mg_cuda_stream_mark(mg_backend *be, mg_stream_id s, int slot);
mg_status mg_cuda_stream_wait_mark(mg_backend *be, mg_stream_id waiter, int slot);
mg_status mg_cuda_embedding_forward(mg_backend *be, void *out /* (N,H) */,
                                    const int32_t *tokens /* (N) */, const void *wte /* (Vl,H) */,
                                    const void *wpe /* (P,H) or NULL */,
                                    const int32_t *pos /* (N) or NULL */, int N, int S, int H,
                                    int v0, int Vl);
mg_status mg_cuda_embedding_backward(mg_backend *be, float *dwte /* (Vl,H) */,
                                     float *dwpe /* (P,H) or NULL */, const void *dout /* (N,H) */,
                                     const int32_t *tokens /* (N) */,
                                     const int32_t *pos /* (N) or NULL */, int N, int S, int H,
                                     int v0, int Vl);
mg_status mg_cuda_layernorm_forward(mg_backend *be, void *out /* (N,H) */, float *mean /* (N) */,
                                    float *rstd /* (N) */, const void *x /* (N,H) */,
                                    const void *w /* (H) */, const void *b /* (H) or NULL */, int N,
                                    int H, float eps);
mg_status mg_cuda_layernorm_backward(mg_backend *be, void *dx /* (N,H) */, float *dw /* (H) */,
                                     float *db /* (H) or NULL */, const void *dout /* (N,H) */,
                                     const void *x /* (N,H) */, const void *w /* (H) */,
                                     const float *mean /* (N) */, const float *rstd /* (N) */,
                                     int N, int H);
mg_status mg_cuda_rmsnorm_forward(mg_backend *be, void *out /* (N,H) */, float *rstd /* (N) */,
                                  const void *x /* (N,H) */, const void *w /* (H) */, int N, int H,
                                  float eps);
mg_status mg_cuda_rmsnorm_backward(mg_backend *be, void *dx /* (N,H) */, float *dw /* (H) */,
                                   const void *dout /* (N,H) */, const void *x /* (N,H) */,
                                   const void *w /* (H) */, const float *rstd /* (N) */, int N,
                                   int H);
mg_status mg_cuda_linear_forward(mg_backend *be, void *out /* (N,OC) */,
                                 const void *inp /* (N,IC) */, const void *w /* (OC,IC) */,
                                 const void *bias /* (OC) or NULL */,
                                 const void *residual /* (N,OC) or NULL */, int N, int IC, int OC);
mg_status mg_cuda_linear_gelu_forward(mg_backend *be, void *out /* (N,OC) */,
                                      void *pre /* (N,OC) */, const void *inp /* (N,IC) */,
                                      const void *w /* (OC,IC) */,
                                      const void *bias /* (OC) or NULL */, int N, int IC, int OC);
mg_status mg_cuda_linear_backward(mg_backend *be, void *dinp /* (N,IC) or NULL */,
                                  float *dw /* (OC,IC) */, float *dbias /* (OC) or NULL */,
                                  const void *dout /* (N,OC) */, const void *inp /* (N,IC) */,
                                  const void *w /* (OC,IC) */,
                                  const void *gelu_pre /* (N,IC) or NULL */, int N, int IC, int OC);
mg_status mg_cuda_gelu_forward(mg_backend *be, void *out, const void *inp, size_t n);
mg_status mg_cuda_gelu_backward(mg_backend *be, void *dinp, const void *inp, const void *dout,
                                size_t n);
mg_status mg_cuda_swiglu_forward(mg_backend *be, void *out /* (N,F) */,
                                 const void *inp /* (N,2F) */, int N, int F);
mg_status mg_cuda_swiglu_backward(mg_backend *be, void *dinp /* (N,2F) */,
                                  const void *inp /* (N,2F) */, const void *dout /* (N,F) */, int N,
                                  int F);
mg_status mg_cuda_rope_forward(mg_backend *be, void *qkv /* (N, ng*(r+2)*hd) */,
                               const float *cos_tab /* (S, rd/2) */,
                               const float *sin_tab /* (S, rd/2) */,
                               const int32_t *pos /* (N) or NULL */, int N, int S, int nq, int ng,
                               int hd, int rd);
mg_status mg_cuda_rope_backward(mg_backend *be, void *dqkv /* (N, ng*(r+2)*hd) */,
                                const float *cos_tab, const float *sin_tab, const int32_t *pos,
                                int N, int S, int nq, int ng, int hd, int rd);
/* Raises the attention kernels' shared-memory limit on the current device; once, at creation. */
mg_status mg_cuda_attention_init(void);
size_t mg_cuda_attention_saved_bytes(mg_backend *be, int B, int S, int nq, int hd);
mg_status mg_cuda_attention_forward(mg_backend *be, void *out /* (B*S, nq*hd) */, void *saved,
                                    const void *qkv /* (B*S, ng*(r+2)*hd) */, int B, int S, int nq,
                                    int ng, int hd, const mg_dropout *drop,
                                    const int32_t *doc_start /* (B*S) or NULL */);
mg_status mg_cuda_attention_backward(mg_backend *be, void *dqkv /* (B*S, ng*(r+2)*hd) */,
                                     const void *dout /* (B*S, nq*hd) */, const void *qkv,
                                     const void *out /* (B*S, nq*hd) */, const void *saved, int B,
                                     int S, int nq, int ng, int hd, const mg_dropout *drop,
                                     const int32_t *doc_start /* (B*S) or NULL */);
/* The same three entries through cuDNN's fused attention (attention_cudnn.cu), selected with
 * MG_ATTENTION=cudnn; a shape cuDNN cannot run, attention dropout (drop != NULL: the
 * counter-based mask of core/dropout.h, which cuDNN's own RNG cannot reproduce) and the document
 * mask (doc_start != NULL, --reset-attention-mask) go to the entries above. Without cuDNN in the
 * build, available() is 0 and forward/backward return MG_ERR_UNSUPPORTED. */
int mg_cuda_attention_cudnn_available(void);
mg_status mg_cuda_attention_cudnn_init(mg_backend *be, int deterministic);
void mg_cuda_attention_cudnn_destroy(mg_backend *be);
/* *supported = 1 when cuDNN has plans for this shape (builds them on first call) */
mg_status mg_cuda_attention_cudnn_supported(mg_backend *be, int B, int S, int nq, int ng, int hd,
                                            int *supported);
size_t mg_cuda_attention_cudnn_saved_bytes(mg_backend *be, int B, int S, int nq, int hd);
mg_status mg_cuda_attention_cudnn_forward(mg_backend *be, void *out /* (B*S, nq*hd) */, void *saved,
                                          const void *qkv /* (B*S, ng*(r+2)*hd) */, int B, int S,
                                          int nq, int ng, int hd, const mg_dropout *drop,
                                          const int32_t *doc_start /* (B*S) or NULL */);
mg_status mg_cuda_attention_cudnn_backward(mg_backend *be, void *dqkv /* (B*S, ng*(r+2)*hd) */,
                                           const void *dout /* (B*S, nq*hd) */, const void *qkv,
                                           const void *out /* (B*S, nq*hd) */, const void *saved,
                                           int B, int S, int nq, int ng, int hd,
                                           const mg_dropout *drop,
                                           const int32_t *doc_start /* (B*S) or NULL */);
mg_status mg_cuda_cross_entropy_fused(mg_backend *be,
                                      void *logits /* (N,V) in: logits, out: grads */,
                                      float *losses /* (N) */, const int32_t *targets /* (N) */,
                                      const float *dloss /* (N) */, int N, int V);
mg_status mg_cuda_cross_entropy_max(mg_backend *be, float *rowmax /* (N) */,
                                    const void *logits /* (N,Vl) */, int N, int Vl);
mg_status mg_cuda_cross_entropy_sums(mg_backend *be, float *sums /* (2N) */,
                                     const void *logits /* (N,Vl) */, const float *rowmax /* (N) */,
                                     const int32_t *targets /* (N) */, int v0, int N, int Vl);
mg_status mg_cuda_cross_entropy_finish(mg_backend *be, void *logits /* (N,Vl) in/out */,
                                       float *losses /* (N) */, const float *rowmax /* (N) */,
                                       const float *sums /* (2N) */,
                                       const int32_t *targets /* (N) */,
                                       const float *dloss /* (N) */, int v0, int N, int Vl);
mg_status mg_cuda_add(mg_backend *be, void *out, const void *a, const void *b, size_t n);
mg_status mg_cuda_bias_residual_add(mg_backend *be, void *out /* (N,H) */,
                                    const void *x /* (N,H) */, const void *bias /* (H) or NULL */,
                                    const void *residual /* (N,H) or NULL */, int N, int H);
/* dropout.cu: hidden dropout, core/dropout.h's mask */
mg_status mg_cuda_dropout_add(mg_backend *be, void *out /* (N,H) */, const void *x /* (N,H) */,
                              const void *bias /* (H) or NULL */, const void *residual /* (N,H) */,
                              int N, int H, int S, const mg_dropout *drop);
mg_status mg_cuda_dropout_backward(mg_backend *be, void *dx /* (N,H) */,
                                   const void *dout /* (N,H) */, int N, int H, int S,
                                   const mg_dropout *drop);
mg_status mg_cuda_sum_f32(mg_backend *be, float *out /* (1) */, const float *x /* (n) */,
                          const float *w /* (n) or NULL */, size_t n, float scale);
mg_status mg_cuda_sumsq_f32(mg_backend *be, float *out /* (1) */, const float *x /* (n) */,
                            size_t n, double scale);
mg_status mg_cuda_count_zeros_f32(mg_backend *be, int64_t *out /* (1) */, const float *x /* (n) */,
                                  size_t n);
mg_status mg_cuda_clip_coef(mg_backend *be, float *coef_out /* (1) */, float *norm_out /* (1) */,
                            const float *sumsq /* (1) */, float clip, float unscale);
mg_status mg_cuda_adamw(mg_backend *be, void *param /* (n) */, float *master /* (n) or NULL */,
                        const float *grad /* (n) */, float *m /* (n) */, float *v /* (n) */,
                        size_t n, float lr, float beta1, float beta2, float eps, float wd,
                        float bc1, float bc2, const float *grad_scale /* (1) */);
/* mixture of experts: the router (moe_route.cu) */
mg_status mg_cuda_router_forward(mg_backend *be, float *logits /* (T,E) */,
                                 const void *x /* (T,H) */, const void *w /* (E,H) */, int T, int H,
                                 int E);
mg_status mg_cuda_router_backward(mg_backend *be, void *dx /* (T,H) */, float *dw /* (E,H) */,
                                  const float *dlogits /* (T,E) */, const void *x, const void *w,
                                  int T, int H, int E);
mg_status mg_cuda_moe_route(mg_backend *be, const mg_moe_routing *r, int32_t *idx /* (T,k) */,
                            float *probs /* (T,k) */, int32_t *aux_counts, float *stats /* (2) */,
                            const float *logits /* (T,E) */, const float *bias /* (E) or NULL */);
mg_status mg_cuda_moe_route_backward(mg_backend *be, const mg_moe_routing *r,
                                     float *dlogits /* (T,E) */, const float *dprobs /* (T,k) */,
                                     const float *logits, const int32_t *idx, const float *probs,
                                     const int32_t *aux_counts, const float *bias);
mg_status mg_cuda_moe_expert_bias_update(mg_backend *be, float *bias /* (E) */,
                                         const float *load /* (E) */, int E, float rate);
/* mixture of experts: token movement and the experts' activations (moe_permute.cu) */
mg_status mg_cuda_moe_permute(mg_backend *be, void *xp /* (R,H) */, int32_t *pos /* (T,k) */,
                              int32_t *counts /* (E) */, float *load /* (E) or NULL */,
                              const void *x /* (T,H) */, const int32_t *idx /* (T,k) */, int T,
                              int k, int E, int H, int pad);
mg_status mg_cuda_moe_permute_backward(mg_backend *be, void *dx /* (T,H) */,
                                       const void *dxp /* (R,H) */, const int32_t *pos, int T,
                                       int k, int H);
mg_status mg_cuda_moe_regroup(mg_backend *be, void *dst, const void *src, const int32_t *counts,
                              int P, int El, int slab, int H, bool to_slabs);
mg_status mg_cuda_moe_unpermute(mg_backend *be, void *out /* (T,H) */, const void *base /* (T,H) */,
                                const void *y /* (R,H) */, const int32_t *pos, const float *probs,
                                int T, int k, int H);
mg_status mg_cuda_moe_unpermute_backward(mg_backend *be, void *dy /* (R,H) */,
                                         float *dprobs /* (T,k) */, const void *dout /* (T,H) */,
                                         const void *y /* (R,H) */, const int32_t *pos,
                                         const float *probs, int T, int k, int H, int R);
mg_status mg_cuda_grouped_activation_forward(mg_backend *be, void *out, const void *pre,
                                             const int32_t *counts, int G, int F, bool swiglu);
mg_status mg_cuda_grouped_swiglu_backward(mg_backend *be, void *dpre, const void *pre,
                                          const void *dout, const int32_t *counts, int G, int F);
/* mixture of experts: the experts' grouped linear (grouped_gemm.cu). The plain entries take
 * CUTLASS's Hopper grouped GEMM where it applies (grouped_gemm_cutlass.cu) and the portable
 * kernel for the rest; the _portable entries always take the portable kernel. init (once, at
 * creation) fills the table's two entries from MG_GROUPED_GEMM=cutlass|fallback. */
mg_status mg_cuda_grouped_gemm_init(mg_backend *be);
mg_status mg_cuda_grouped_linear_forward(mg_backend *be, void *out /* (R,OC) */,
                                         const void *inp /* (R,IC) */, void *const *w,
                                         void *const *bias, const int32_t *counts, int n_src,
                                         int n_w, int IC, int OC);
mg_status mg_cuda_grouped_linear_backward(mg_backend *be, void *dinp /* (R,IC) */, float *const *dw,
                                          float *const *dbias, const void *dout /* (R,OC) */,
                                          const void *inp /* (R,IC) */, void *const *w,
                                          const void *gelu_pre /* (R,IC) or NULL */,
                                          const int32_t *counts, int n_src, int n_w, int IC, int OC,
                                          bool accumulate);
mg_status mg_cuda_grouped_linear_forward_portable(mg_backend *be, void *out /* (R,OC) */,
                                                  const void *inp /* (R,IC) */, void *const *w,
                                                  void *const *bias, const int32_t *counts,
                                                  int n_src, int n_w, int IC, int OC);
mg_status mg_cuda_grouped_linear_backward_portable(mg_backend *be, void *dinp /* (R,IC) */,
                                                   float *const *dw, float *const *dbias,
                                                   const void *dout /* (R,OC) */,
                                                   const void *inp /* (R,IC) */, void *const *w,
                                                   const void *gelu_pre /* (R,IC) or NULL */,
                                                   const int32_t *counts, int n_src, int n_w,
                                                   int IC, int OC, bool accumulate);
/* grouped_gemm_cutlass.cu, built once with bf16 operands (no fp16 twin: cuda_f16_names.h):
 * available() is 1 once init() succeeded on `device` (a build with CUTLASS on an sm 9.0
 * device); init() is idempotent and fails (MG_ERR_UNSUPPORTED) otherwise.
 * run() enqueues one product (op 0 forward, 1 dinp, 2 dw; its header has the table) over the
 * groups, writing their row offsets to row_off (G+1) and its arrays to scratch; dw with
 * !accumulate writes the first source's products over dW (the caller zeroes the dW_j whose
 * first-source group is empty: those get no tiles). */
int mg_cuda_grouped_cutlass_available(int device);
mg_status mg_cuda_grouped_cutlass_init(int device);
mg_status mg_cuda_grouped_cutlass_run(mg_backend *be, int op, void *y, const void *x,
                                      const void *xb, void *const *wp, int32_t *row_off,
                                      const int32_t *counts, int n_src, int n_w, int IC, int OC,
                                      bool accumulate, void *scratch, size_t scratch_bytes);
/* optional measurement entry (measure.cu) */
mg_status mg_cuda_matmul_peak_tflops(mg_backend *be, int n, double *tflops);

#ifdef __cplusplus
}
#endif
#endif
