/* The experts' grouped linear on fp8 operands (backend_ops.h's fp8_grouped_linear_forward and
 * fp8_grouped_linear_backward; CPU reference: cpu/cpu_fp8.c): CUTLASS's Hopper fp8 grouped GEMM
 * (grouped_gemm_cutlass_fp8.cu) with the bias, GELU-derivative and bias-gradient kernels of the
 * bf16 ops around it (grouped_gemm_common.cuh). No portable kernel: grouped_gemm.cu's init leaves
 * both entries NULL where CUTLASS's bf16 kernels are not there (fp16 compute, a build without
 * CUTLASS, another GPU), and model/fp8.c keeps the experts in the compute dtype then.
 * Exports: mg_cuda_fp8_grouped_linear_forward/_backward. */
#include "backend/cuda/grouped_gemm_common.cuh"

#include "core/fp8.h"

#include <type_traits>

template <typename h16>
static mg_status fp8_check(mg_backend *be, const char *op, int n_src, int n_w, int IC, int OC,
                           size_t wstride, const void *a, const void *b, const void *c) {
    MG_CHECK(check_shape(op, n_src, n_w, IC, OC));
    if (std::is_same<h16, __half>::value)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: the experts' fp8 products compute in bf16 only (use --bf16)", op);
    if (!mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(be)->device))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: the experts' fp8 products need CUTLASS's grouped GEMM on an sm 9.0 GPU "
                       "(build with CUTLASS_INC)",
                       op);
    if (IC % 16 || OC % 16 || wstride % 16)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: %d inputs and %d outputs per expert: Hopper's fp8 GEMMs need "
                       "multiples of 16",
                       op, IC, OC);
    if (!aligned16(a) || !aligned16(b) || !aligned16(c))
        return MG_FAIL(MG_ERR_INTERNAL, "%s: an operand is not 16-byte aligned", op);
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, fp8_grouped_linear_forward,
               (mg_backend * be, void *out /* (R,OC) */, const mg_fp8_tensor *inp,
                const mg_fp8_tensor *w, size_t wstride, void *const *bias, const int32_t *counts,
                int n_src, int n_w, int IC, int OC),
               (be, out, inp, w, wstride, bias, counts, n_src, n_w, IC, OC)) {
    MG_CHECK(fp8_check<h16>(be, "fp8_grouped_linear_forward", n_src, n_w, IC, OC, wstride, out,
                            inp->data, w->data));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, "fp8_grouped_linear_forward", &ws));
    mg_gg8_args a = {
        0, MG_FP8_E4M3, out, inp->data, w->data, wstride, NULL, inp->scale_inv, w->scale_inv,
        0, n_src,       n_w, IC,        OC,      false};
    MG_CHECK(mg_cuda_grouped_cutlass_fp8_run(be, &a, ws.row_off, counts, ws.rest, ws.rest_bytes));
    if (bias) {
        grouped_bias_kernel<h16><<<persistent_blocks(be, 8), 256, 0, mg_cuda_stream(be)>>>(
            (h16 *)out, bias, ws.row_off, G, n_w, OC);
        MG_CUDA_CHECK_LAUNCH();
    }
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, fp8_grouped_linear_backward,
               (mg_backend * be, void *dinp /* (R,IC) or NULL */, float *const *dw,
                float *const *dbias, const void *dout /* (R,OC) */, const mg_fp8_tensor *dout8,
                const mg_fp8_tensor *inp, const mg_fp8_tensor *w, size_t wstride,
                const void *gelu_pre /* (R,IC) or NULL */, const int32_t *counts, int n_src,
                int n_w, int R, int IC, int OC, bool accumulate),
               (be, dinp, dw, dbias, dout, dout8, inp, w, wstride, gelu_pre, counts, n_src, n_w, R,
                IC, OC, accumulate)) {
    const char *op = "fp8_grouped_linear_backward";
    MG_CHECK(fp8_check<h16>(be, op, n_src, n_w, IC, OC, wstride, dinp, gelu_pre, dout));
    const int G = n_src * n_w;
    gg_ws ws;
    MG_CHECK(workspace(be, G, op, &ws));
    if (dw) {
        if (!accumulate) { /* the weights the first source's product gives no tiles */
            dim3 grid(64, n_w);
            grouped_zero_empty_kernel<<<grid, 256, 0, mg_cuda_stream(be)>>>(dw, counts,
                                                                            (size_t)OC * IC);
            MG_CUDA_CHECK_LAUNCH();
        }
        if (!aligned16(dout8->data_t) || !aligned16(inp->data_t))
            return MG_FAIL(MG_ERR_INTERNAL, "%s: a grouped transpose is not 16-byte aligned", op);
        mg_gg8_args a = {2,
                         dout8->format,
                         NULL,
                         dout8->data_t,
                         inp->data_t,
                         0,
                         dw,
                         dout8->scale_inv,
                         inp->scale_inv,
                         mg_fp8_group_ld(R, G),
                         n_src,
                         n_w,
                         IC,
                         OC,
                         accumulate};
        MG_CHECK(
            mg_cuda_grouped_cutlass_fp8_run(be, &a, ws.row_off, counts, ws.rest, ws.rest_bytes));
    }
    if (dinp) {
        if (!aligned16(dout8->data) || !aligned16(w->data_t))
            return MG_FAIL(MG_ERR_INTERNAL, "%s: an operand is not 16-byte aligned", op);
        mg_gg8_args a = {1,
                         dout8->format,
                         dinp,
                         dout8->data,
                         w->data_t,
                         wstride,
                         NULL,
                         dout8->scale_inv,
                         w->scale_inv,
                         0,
                         n_src,
                         n_w,
                         IC,
                         OC,
                         false};
        MG_CHECK(
            mg_cuda_grouped_cutlass_fp8_run(be, &a, ws.row_off, counts, ws.rest, ws.rest_bytes));
        if (gelu_pre) {
            grouped_gelu_grad_kernel<h16><<<persistent_blocks(be, 8), 256, 0, mg_cuda_stream(be)>>>(
                (h16 *)dinp, (const h16 *)gelu_pre, ws.row_off, G, IC);
            MG_CUDA_CHECK_LAUNCH();
        }
    }
    if (!dbias) return MG_OK;
    if (!dw && !dinp) MG_CHECK(launch_offsets(be, &ws, counts, G)); /* the products wrote them */
    return launch_dbias<h16>(be, dbias, dout, ws.row_off, n_src, n_w, OC, accumulate);
}
