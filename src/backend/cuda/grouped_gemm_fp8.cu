/* The experts' grouped linear on fp8 operands (backend_ops.h's fp8_grouped_linear_forward and
 * fp8_grouped_linear_backward; CPU reference: cpu/cpu_fp8.c): CUTLASS's Hopper fp8 grouped GEMM
 * (grouped_gemm_cutlass_fp8.cu) with the bias, GELU-derivative and bias-gradient kernels of the
 * bf16 ops around it (grouped_gemm_common.cuh). No portable kernel: grouped_gemm.cu's init leaves
 * both entries NULL where CUTLASS's bf16 kernels are not there (fp16 compute, a build without
 * CUTLASS, another GPU), and model/fp8.c keeps the experts in the compute dtype then.
 * Exports: mg_cuda_fp8_grouped_linear_forward/_backward. */
#include "backend/cuda/grouped_gemm_common.cuh"

#include "core/fp8.h"

/* An op's start: the shapes Hopper's fp8 GEMMs take checked (the entries exist only where
 * CUTLASS's kernels do: grouped_gemm.cu's init), the workspace, and the arguments every product
 * of the op shares. */
static mg_status fp8_begin(mg_backend *be, const char *op, int n_src, int n_w, int IC, int OC,
                           size_t wstride, gg_ws *ws, mg_gg8_args *g) {
    MG_CHECK(check_shape(op, n_src, n_w, IC, OC));
    if (IC % 16 || OC % 16 || wstride % 16)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: %d inputs and %d outputs per expert: Hopper's fp8 GEMMs need "
                       "multiples of 16",
                       op, IC, OC);
    *g = mg_gg8_args{};
    g->wstride = wstride, g->n_src = n_src, g->n_w = n_w, g->IC = IC, g->OC = OC;
    return workspace(be, n_src * n_w, op, ws);
}

/* One product (grouped_gemm_cutlass_fp8.cu's table): A's bytes a with fa's scale and format, B's
 * bytes b with fb's scale; its other operands and sizes in g. */
static mg_status product(mg_backend *be, const char *op, const gg_ws &ws, const int32_t *counts,
                         mg_gg8_args g, const uint8_t *a, const mg_fp8_tensor *fa, const uint8_t *b,
                         const mg_fp8_tensor *fb, void *y) {
    if (!aligned16(a) || !aligned16(b) || !aligned16(y))
        return MG_FAIL(MG_ERR_INTERNAL, "%s: an operand is not 16-byte aligned", op);
    g.a = a, g.b = b, g.y = y;
    g.format_a = fa->format;
    g.sinv_a = fa->scale_inv, g.sinv_b = fb->scale_inv;
    return mg_cuda_grouped_cutlass_fp8_run(be, &g, ws.row_off, counts, ws.rest, ws.rest_bytes);
}

MG_CUDA_DTYPES(mg_status, fp8_grouped_linear_forward,
               (mg_backend * be, void *out /* (R,OC) */, const mg_fp8_tensor *inp,
                const mg_fp8_tensor *w, size_t wstride, void *const *bias, const int32_t *counts,
                int n_src, int n_w, int IC, int OC),
               (be, out, inp, w, wstride, bias, counts, n_src, n_w, IC, OC)) {
    const char *op = "fp8_grouped_linear_forward";
    const int G = n_src * n_w;
    gg_ws ws = {};
    mg_gg8_args g;
    MG_CHECK(fp8_begin(be, op, n_src, n_w, IC, OC, wstride, &ws, &g));
    MG_CHECK(product(be, op, ws, counts, g, inp->data, inp, w->data, w, out));
    return add_grouped_bias<h16>(be, out, bias, ws, G, n_w, OC);
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
    const int G = n_src * n_w;
    gg_ws ws = {};
    mg_gg8_args g;
    MG_CHECK(fp8_begin(be, op, n_src, n_w, IC, OC, wstride, &ws, &g));
    if (dw) {
        if (!accumulate) { /* the weights the first source's product gives no tiles */
            dim3 grid(64, n_w);
            grouped_zero_empty_kernel<<<grid, 256, 0, mg_cuda_stream(be)>>>(dw, counts,
                                                                            (size_t)OC * IC);
            MG_CUDA_CHECK_LAUNCH();
        }
        mg_gg8_args gw = g;
        gw.op = 2, gw.wstride = 0, gw.dw = dw, gw.ld = mg_fp8_group_ld(R, G);
        gw.accumulate = accumulate;
        MG_CHECK(product(be, op, ws, counts, gw, dout8->data_t, dout8, inp->data_t, inp, NULL));
    }
    if (dinp) {
        mg_gg8_args gi = g;
        gi.op = 1;
        MG_CHECK(product(be, op, ws, counts, gi, dout8->data, dout8, w->data_t, w, dinp));
        if (gelu_pre) {
            if (!aligned16(gelu_pre))
                return MG_FAIL(MG_ERR_INTERNAL, "%s: gelu_pre is not 16-byte aligned", op);
            grouped_gelu_grad_kernel<h16><<<persistent_blocks(be, 8), 256, 0, mg_cuda_stream(be)>>>(
                (h16 *)dinp, (const h16 *)gelu_pre, ws.row_off, G, IC);
            MG_CUDA_CHECK_LAUNCH();
        }
    }
    if (!dbias) return MG_OK;
    if (!dw && !dinp) MG_CHECK(launch_offsets(be, &ws, counts, G)); /* the products wrote them */
    return launch_dbias<h16>(be, dbias, dout, ws, n_src, n_w, OC, accumulate);
}
