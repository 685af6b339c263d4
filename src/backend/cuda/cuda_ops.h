/* Internal to src/backend/cuda: the CUDA implementation of every entry of the backend table
 * (backend/backend_ops.h lists them with their contracts; the CUDA versions keep them exactly,
 * with a 16-bit compute dtype, bf16 or fp16: activations, activation gradients and weights in it;
 * weight gradients, norm statistics, losses and optimizer state fp32; token ids int32; all
 * pointers device memory).
 *
 * Names. The runtime entries (kind RT: memory, copies, streams; cuda_backend.c, built once) are
 * mg_cuda_<name>. Each compute op family (kinds OP and MOE) lives in one .cu file with its
 * kernels (static __global__) and launchers templated on the 16-bit type, both instantiated in one
 * object: mg_cuda_<name> is the bf16 launcher, mg_cuda_f16_<name> the fp16 one (MG_CUDA_DTYPES,
 * cuda_common.cuh). moe_router.cu, not converted, is built twice (Makefile, -DMG_CUDA_TWICE): as
 * is, with bf16 compute, and with -DMG_CUDA_F16, fp16 compute, defining its launchers as
 * MG_CUDA_FN(<name>), mg_cuda_<name> in the bf16 object and mg_cuda_f16_<name> in the fp16 one; it
 * sees only its own dtype's names, so a per-dtype function called without MG_CUDA_FN fails to
 * compile in its fp16 object. The declarations below are generated from the op list (and, for the
 * few per-dtype functions that are not table entries, declared once with MG_CUDA_DTYPE_DECL); code
 * built once (C: the table, the backend's creation, the tests) sees both names and picks by the
 * backend's compute dtype (cuda_table.c, MG_CUDA_BY_DTYPE).
 *
 * Files: embedding.cu, norm.cu, linear.cu (linear_*), activation.cu (gelu_*, swiglu_*), rope.cu,
 * attention.cu (and attention_generic.cu, attention_cudnn.cu), cross_entropy.cu, elementwise.cu
 * (add, bias_residual_add, the fp32 sums, clip_coef, scale_f32), dropout.cu, adamw.cu, step.cu
 * (step_control), moe_router.cu (router_*),
 * moe_route.cu (moe_route*, moe_expert_bias_update), moe_permute.cu (moe_permute*,
 * moe_unpermute*, moe_regroup, grouped_activation_forward, grouped_swiglu_backward),
 * grouped_gemm.cu (grouped_linear_*), fp8.cu (fp8_*), measure.cu (matmul_peak_tflops).
 *
 * Every launcher runs on the backend's compute stream (mg_cuda_stream(be)), checks
 * cudaGetLastError() after each launch (MG_CUDA_CHECK) and never allocates or synchronises with
 * the host: scratch space comes from the workspace reserved at creation (mg_cuda_scratch). */
#ifndef MG_BACKEND_CUDA_OPS_H
#define MG_BACKEND_CUDA_OPS_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The name of per-dtype function `op` in the object being built (see above). */
#ifdef MG_CUDA_F16
#define MG_CUDA_FN(op) mg_cuda_f16_##op
#else
#define MG_CUDA_FN(op) mg_cuda_##op
#endif

/* Declares per-dtype function `op` of function type `type`: in an op file built twice the object's
 * own, elsewhere both. */
#if defined(__CUDACC__) && defined(MG_CUDA_TWICE)
#define MG_CUDA_DTYPE_DECL(type, op) type MG_CUDA_FN(op)
#else
#define MG_CUDA_DTYPE_DECL(type, op) type mg_cuda_##op, mg_cuda_f16_##op
#endif

/* The table's entries (backend_ops.h): mg_cuda_<name>, and per dtype for the compute ops. */
#define MG_OP(name, need, kind, ret, params, args) MG_CUDA_DECLARE_##kind(name)
#define MG_CUDA_DECLARE_RT(name)                   mg_backend_##name##_fn mg_cuda_##name;
#define MG_CUDA_DECLARE_OP(name)                   MG_CUDA_DTYPE_DECL(mg_backend_##name##_fn, name);
#define MG_CUDA_DECLARE_MOE(name)                  MG_CUDA_DECLARE_OP(name)
#include "backend/backend_ops.h"
#undef MG_CUDA_DECLARE_RT
#undef MG_CUDA_DECLARE_OP
#undef MG_CUDA_DECLARE_MOE

/* cuda_backend.c: makes the shared workspace at least `need` bytes, for an op whose size only its
 * plan knows (cuDNN's attention): the old one is freed once the device is done with it, and one
 * line says so. Refused (MG_ERR_NOMEM naming `who` and the size) when MG_CUDA_WORKSPACE_MB fixed
 * the size, or while the stream is being captured into a CUDA graph. */
mg_status mg_cuda_workspace_reserve(mg_backend *be, size_t need, const char *who);

/* ---- per-dtype functions that are not table entries ---- */

/* attention.cu: raises the attention kernels' shared-memory limit on the current device; once, at
 * creation. */
typedef mg_status mg_cuda_attention_init_fn(void);
MG_CUDA_DTYPE_DECL(mg_cuda_attention_init_fn, attention_init);
/* attention_cudnn.cu: the three attention entries through cuDNN's fused attention, selected with
 * MG_ATTENTION=cudnn (cuda_table.c). Attention dropout with stream masks (core/dropout.h) runs
 * inside cuDNN's graph, drawn by cuDNN's Philox generator from the stream's seed and offset; a
 * shape cuDNN cannot run, positional masks (--layout-invariant-dropout, which cuDNN's generator
 * cannot reproduce) and the document mask (doc_start != NULL, --reset-attention-mask) go to
 * attention.cu's entries. Without cuDNN in the build, available() is 0 and forward/backward
 * return MG_ERR_UNSUPPORTED. supported() sets *supported = 1 when cuDNN has plans for this shape
 * with a dropout of threshold `drop` (0: none; core/dropout.h) and builds them on first call. */
typedef int mg_cuda_attention_cudnn_available_fn(void);
typedef mg_status mg_cuda_attention_cudnn_init_fn(mg_backend *be, int deterministic);
typedef void mg_cuda_attention_cudnn_destroy_fn(mg_backend *be);
typedef mg_status mg_cuda_attention_cudnn_supported_fn(mg_backend *be, int B, int S, int nq, int ng,
                                                       int hd, uint32_t drop, int *supported);
MG_CUDA_DTYPE_DECL(mg_cuda_attention_cudnn_available_fn, attention_cudnn_available);
MG_CUDA_DTYPE_DECL(mg_cuda_attention_cudnn_init_fn, attention_cudnn_init);
MG_CUDA_DTYPE_DECL(mg_cuda_attention_cudnn_destroy_fn, attention_cudnn_destroy);
MG_CUDA_DTYPE_DECL(mg_cuda_attention_cudnn_supported_fn, attention_cudnn_supported);
MG_CUDA_DTYPE_DECL(mg_backend_attention_saved_bytes_fn, attention_cudnn_saved_bytes);
MG_CUDA_DTYPE_DECL(mg_backend_attention_forward_fn, attention_cudnn_forward);
MG_CUDA_DTYPE_DECL(mg_backend_attention_backward_fn, attention_cudnn_backward);
/* grouped_gemm.cu, the experts' grouped linear: the table's entries take CUTLASS's Hopper grouped
 * GEMM where it applies (grouped_gemm_cutlass.cu) and the portable kernel for the rest; the
 * _portable ones always take the portable kernel. init (once, at creation) fills the table's two
 * entries from MG_GROUPED_GEMM=cutlass|fallback. */
typedef mg_status mg_cuda_grouped_gemm_init_fn(mg_backend *be);
MG_CUDA_DTYPE_DECL(mg_cuda_grouped_gemm_init_fn, grouped_gemm_init);
MG_CUDA_DTYPE_DECL(mg_backend_grouped_linear_forward_fn, grouped_linear_forward_portable);
MG_CUDA_DTYPE_DECL(mg_backend_grouped_linear_backward_fn, grouped_linear_backward_portable);

/* grouped_gemm_cutlass.cu, built once with bf16 operands (no fp16 twin: the fp16 grouped linear
 * always takes the portable kernel): available() is 1 once init() succeeded on `device` (a build
 * with CUTLASS on an sm 9.0 device); init() is idempotent and fails (MG_ERR_UNSUPPORTED)
 * otherwise. run() enqueues one product (op 0 forward, 1 dinp, 2 dw; its header has the table)
 * over the groups, writing their row offsets to row_off (G+1) and its arrays to scratch; dw with
 * !accumulate writes the first source's products over dW (the caller zeroes the dW_j whose
 * first-source group is empty: those get no tiles). */
int mg_cuda_grouped_cutlass_available(int device);
mg_status mg_cuda_grouped_cutlass_init(int device);
mg_status mg_cuda_grouped_cutlass_run(mg_backend *be, int op, void *y, const void *x,
                                      const void *xb, void *const *wp, int32_t *row_off,
                                      const int32_t *counts, int n_src, int n_w, int IC, int OC,
                                      bool accumulate, void *scratch, size_t scratch_bytes);

/* grouped_gemm_cutlass_fp8.cu: one product of the experts on fp8 operands (grouped_gemm.cu's
 * fp8_grouped_linear ops; that file's header has the table). Set up by
 * mg_cuda_grouped_cutlass_init with the bf16 kernels; MG_ERR_UNSUPPORTED without CUTLASS. */
typedef struct {
    int op;              /* 0 forward, 1 dinp, 2 dw */
    int format_a;        /* A's mg_fp8_format (inp8: e4m3; dout8: the gradients'); B is e4m3 */
    void *y;             /* forward: out (R,OC); dinp: dinp (R,IC); compute dtype (bf16) */
    const uint8_t *a;    /* forward: inp8 (R,IC); dinp: dout8 (R,OC); dw: dout8^T (OC,ld) */
    const uint8_t *b;    /* forward: weight bytes; dinp: their transposes; dw: inp8^T (IC,ld) */
    size_t wstride;      /* forward, dinp: bytes between two experts' weights in b */
    float *const *dw;    /* dw: the n_w weight gradients (fp32, backend memory) */
    const float *sinv_a; /* the operands' scale inverses (device, (1)) */
    const float *sinv_b;
    int64_t ld; /* dw: the grouped transposes' rows (core/fp8.h's mg_fp8_group_ld) */
    int n_src, n_w, IC, OC;
    bool accumulate; /* dw: as grouped_linear_backward's */
} mg_gg8_args;
mg_status mg_cuda_grouped_cutlass_fp8_run(mg_backend *be, const mg_gg8_args *a, int32_t *row_off,
                                          const int32_t *counts, void *scratch,
                                          size_t scratch_bytes);

#ifdef __cplusplus
}
#endif
#endif
