/* The fp8 ops (backend_ops.h: fp8_cast, fp8_transpose, fp8_linear_forward, fp8_linear_backward,
 * fp8_update)
 * against the CPU backend's:
 *   - fp8_cast of the same compute-dtype inputs gives the CPU's bytes, row-major and transposed,
 *     bit for bit, the same amax and the same scale inverse, also with only the amax asked (spread
 *     magnitudes over the whole e4m3 and e5m2 ranges, saturating ones included, a NaN and the
 *     infinities; shapes that are not multiples of the transposing tile or of its vectors);
 *   - fp8_transpose of the same bytes gives the CPU's copy and transpose bit for bit;
 *   - fp8_cast_blocks (the blockwise recipe) gives the CPU's bytes and block scales bit for bit,
 *     and fp8_linear_forward/_backward on block-scaled operands (cuBLASLt's block scaling) the
 *     CPU's products of the decoded values;
 *   - fp8_linear_forward and fp8_linear_backward on the same bytes and scales (cuBLASLt's fp8
 *     GEMMs against the CPU's fp32 GEMM on the decoded values) within the GEMM tolerance: the
 *     plain forward with bias and residual, the GELU-fused one, the backward with the bias
 *     gradient and with the GELU's gradient, e4m3 and e5m2 gradients (hybrid); weight and bias
 *     gradients accumulate into pre-filled fp32 and are compared at the fp32 tolerance of their
 *     growth; and the backward without a weight gradient (--no-fp8-wgrad), the input's bytes
 *     absent;
 *   - fp8_update of the same state (amaxes with a zero, an infinity and a NaN among them) gives
 *     the CPU's scales and histories bit for bit, for both formats' largest values. */
#include "cuda_test_util.h"

#include "core/fp8.h"
#include "core/fp8_block.h"

#include <math.h>
#include <string.h>

/* A product cuBLASLt's fp8 kernels cannot take (a dimension not a multiple of 16): a clear
 * refusal, before anything runs. */
MG_TEST(cuda_fp8_linear_refuses_unaligned_sizes) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    mg_fp8_tensor none = {NULL, NULL, NULL, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    MG_EXPECT(gpu->fp8_linear_forward(gpu, NULL, NULL, &none, &none, NULL, NULL, 24, 64, 64) ==
                  MG_ERR_UNSUPPORTED,
              "fp8_linear_forward with 24 tokens: expected MG_ERR_UNSUPPORTED");
    MG_EXPECT(strstr(mg_error_message(), "multiple of 16") != NULL, "the message: %s",
              mg_error_message());
    mg_error_clear();
    MG_EXPECT(gpu->fp8_linear_backward(gpu, NULL, NULL, NULL, NULL, &none, &none, &none, NULL, 64,
                                       64, 40) == MG_ERR_UNSUPPORTED,
              "fp8_linear_backward with 40 outputs: expected MG_ERR_UNSUPPORTED");
    mg_error_clear();
}

/* The same amax bit for bit, or both NaN (the upload's NaN payload is the conversion's). */
static void same_amax(mg_test_ctx *t, const float *got, float want, int rows, int cols,
                      const char *what) {
    if (isnan(want))
        MG_EXPECT(isnan(*got), "fp8_cast %dx%d%s: amax %.9g, cpu NaN", rows, cols, what,
                  (double)*got);
    else
        CT_EXPECT_SAME_BITS(got, &want, 4, "fp8_cast %dx%d%s: amax", rows, cols, what);
}

/* fp8_cast through a GELU (gelu_pre, the fc1 gradient's cast): its bytes, transpose, amax and
 * column sums are bit for bit those of the same cast of gelu_backward's output (the path it
 * replaces; the GELU's own arithmetic is tested against the CPU's elsewhere). db: the column
 * sums' starting values (cols). */
static void through_gelu(mg_test_ctx *t, ct_pool *P, mg_backend *gpu, const void *d_in,
                         const float *d_scale, const float *db, int rows, int cols, int f,
                         uint32_t seed) {
    const size_t n = (size_t)rows * cols;
    const float zero = 0.0f;
    float *pre = ct_uniform_act(P, seed, n, -4.0f, 4.0f);
    void *d_pre = ct_up_act(P, pre, n), *d_g = ct_poison_act(P, n);
    uint8_t *d_b[2] = {ct_poison(P, n), ct_poison(P, n)},
            *d_bt[2] = {ct_poison(P, n), ct_poison(P, n)};
    float *d_amax[2] = {ct_up_f32(P, &zero, 1), ct_up_f32(P, &zero, 1)};
    float *d_db[2] = {ct_up_f32(P, db, (size_t)cols), ct_up_f32(P, db, (size_t)cols)};
    if (P->failed) return;
    uint8_t *bt[2] = {rows > 1 ? d_bt[0] : NULL, rows > 1 ? d_bt[1] : NULL};
    MG_EXPECT_OK(gpu->gelu_backward(gpu, d_g, d_pre, d_in, n));
    MG_EXPECT_OK(gpu->fp8_cast(gpu, d_b[0], bt[0], d_g, rows, cols, d_scale, NULL, d_amax[0], f,
                               NULL, d_db[0]));
    MG_EXPECT_OK(gpu->fp8_cast(gpu, d_b[1], bt[1], d_in, rows, cols, d_scale, NULL, d_amax[1], f,
                               d_pre, d_db[1]));
    uint8_t *b[2], *b_t[2];
    float *amax[2], *sums[2];
    for (int k = 0; k < 2; k++) {
        b[k] = ct_down_raw(P, d_b[k], n), b_t[k] = ct_down_raw(P, d_bt[k], n);
        amax[k] = ct_down_f32(P, d_amax[k], 1), sums[k] = ct_down_f32(P, d_db[k], (size_t)cols);
    }
    if (P->failed) return;
    CT_EXPECT_SAME_BITS(b[1], b[0], n, "fp8_cast %dx%d through a GELU", rows, cols);
    if (rows > 1)
        CT_EXPECT_SAME_BITS(b_t[1], b_t[0], n, "fp8_cast %dx%d through a GELU, transposed", rows,
                            cols);
    CT_EXPECT_SAME_BITS(amax[1], amax[0], 4, "fp8_cast %dx%d through a GELU: amax", rows, cols);
    CT_EXPECT_SAME_BITS(sums[1], sums[0], (size_t)cols * 4, "fp8_cast %dx%d through a GELU: dbias",
                        rows, cols);
}

MG_TEST(cuda_fp8_cast_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    /* partial tiles and chunks (97 x 131), half a tile (64 x 256), the flat cast (1 x 70001),
     * whole vectors with a partial last row group (203 x 136), whole tiles (256 x 192); the
     * aligned shapes' tiles (rows % 4, cols % 8: 64 x 256, 256 x 192) with partial tiles both
     * ways (100 x 136), and at GPT-2 1.5B's micro-batch 4 (4096 x 1600) */
    static const int shapes[][2] = {{97, 131},  {64, 256},  {1, 70001},  {203, 136},
                                    {256, 192}, {100, 136}, {4096, 1600}};
    for (int sh = 0; sh < 7; sh++) {
        ct_pool P = ct_pool_of(t, gpu); /* one per shape: the pool holds CT_POOL_MAX buffers */
        const int rows = shapes[sh][0], cols = shapes[sh][1];
        const size_t n = (size_t)rows * cols;
        float *x = ct_uniform_act(&P, 31 + sh, n, -1.0f, 1.0f);
        uint8_t *want = ct_host(&P, n), *want_t = ct_host(&P, n);
        uint8_t *d_out = ct_poison(&P, n), *d_out_t = ct_poison(&P, n),
                *d_only_t = ct_poison(&P, n);
        for (int f = 0; f < 2 && !P.failed; f++) {
            /* magnitudes from 2^-20 to 2^20 times the scale's inverse: subnormals to saturation */
            for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(i % 41) - 20);
            ct_round_act(x, n);
            /* the non-finite: a NaN (the amax too) and both infinities, in the tile kernel's
             * shapes (a chunk with a NaN converts apart) and the others' */
            if (f == 1 && (sh == 0 || sh == 1 || sh == 2 || sh == 5))
                x[5] = NAN, x[7] = INFINITY, x[9] = -INFINITY, x[n - 3] = NAN;
            void *d_in = ct_up_act(&P, x, n);
            const float scale = f == 0 ? 3.5f : 0.75f;
            float amax_c = 0.0f, zero = 0.0f, sinv_c = 0.0f;
            float *d_scale = ct_up_f32(&P, &scale, 1), *d_amax = ct_up_f32(&P, &zero, 1);
            float *d_sinv = ct_up_f32(&P, &zero, 1);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->fp8_cast(gpu, d_out, rows > 1 ? d_out_t : NULL, d_in, rows, cols,
                                       d_scale, d_sinv, d_amax, f, NULL, NULL));
            MG_EXPECT_OK(cpu->fp8_cast(cpu, want, want_t, x, rows, cols, &scale, &sinv_c, &amax_c,
                                       f, NULL, NULL));
            uint8_t *got = ct_down_raw(&P, d_out, n), *got_t = ct_down_raw(&P, d_out_t, n);
            float *amax_g = ct_down_f32(&P, d_amax, 1), *sinv_g = ct_down_f32(&P, d_sinv, 1);
            if (!got || !got_t || !amax_g || !sinv_g) break;
            CT_EXPECT_SAME_BITS(got, want, n, "fp8_cast %dx%d %s", rows, cols, f ? "e5m2" : "e4m3");
            if (rows > 1)
                CT_EXPECT_SAME_BITS(got_t, want_t, n, "fp8_cast %dx%d %s, transposed", rows, cols,
                                    f ? "e5m2" : "e4m3");
            same_amax(t, amax_g, amax_c, rows, cols, "");
            CT_EXPECT_SAME_BITS(sinv_g, &sinv_c, 4, "fp8_cast %dx%d scale_inv", rows, cols);
            if (rows > 1) { /* the transpose alone (the backward's input), the same bytes */
                MG_EXPECT_OK(gpu->fp8_cast(gpu, NULL, d_only_t, d_in, rows, cols, d_scale, NULL,
                                           NULL, f, NULL, NULL));
                uint8_t *only_t = ct_down_raw(&P, d_only_t, n);
                if (only_t)
                    CT_EXPECT_SAME_BITS(only_t, want_t, n, "fp8_cast %dx%d %s, transpose alone",
                                        rows, cols, f ? "e5m2" : "e4m3");
            }
            /* no output: the amax alone, the same */
            MG_EXPECT_OK(gpu->copy_h2d(gpu, d_amax, &zero, sizeof zero));
            MG_EXPECT_OK(gpu->fp8_cast(gpu, NULL, NULL, d_in, rows, cols, d_scale, NULL, d_amax, f,
                                       NULL, NULL));
            float *amax_only = ct_down_f32(&P, d_amax, 1);
            if (amax_only) same_amax(t, amax_only, amax_c, rows, cols, ", amax only");
            if (f == 1) continue; /* (the non-finite inputs' sums are NaN) */
            /* with the bias gradient: the same bytes, and the column sums added to what dbias
             * held, as the CPU's (fp32 sums in another order: a tolerance) */
            float *db = ct_uniform_act(&P, 77 + sh, (size_t)cols, -1.0f, 1.0f);
            float *d_db = ct_up_f32(&P, db, (size_t)cols);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->fp8_cast(gpu, d_out, rows > 1 ? d_out_t : NULL, d_in, rows, cols,
                                       d_scale, NULL, NULL, f, NULL, d_db));
            MG_EXPECT_OK(
                cpu->fp8_cast(cpu, NULL, NULL, x, rows, cols, &scale, NULL, NULL, f, NULL, db));
            float *db_g = ct_down_f32(&P, d_db, (size_t)cols);
            got = ct_down_raw(&P, d_out, n), got_t = ct_down_raw(&P, d_out_t, n);
            if (!db_g || !got || !got_t) break;
            CT_EXPECT_CLOSE(db_g, db, (size_t)cols, 1e-4, "fp8_cast %dx%d dbias", rows, cols);
            CT_EXPECT_SAME_BITS(got, want, n, "fp8_cast %dx%d with dbias", rows, cols);
            if (rows > 1)
                CT_EXPECT_SAME_BITS(got_t, want_t, n, "fp8_cast %dx%d with dbias, transposed", rows,
                                    cols);
            through_gelu(t, &P, gpu, d_in, d_scale, db, rows, cols, f, 91 + sh);
        }
        ct_pool_free(&P);
    }
}

/* fp8_transpose (--fp8-param-gather's weights): the copy and the transpose of the same bytes
 * are the CPU's, bit for bit, with both forms, the transpose alone and the copy alone, on shapes
 * of partial and whole tiles; the scale's inverse alone is the CPU's. */
MG_TEST(cuda_fp8_transpose_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const int shapes[][2] = {{97, 131}, {64, 256}, {1, 4099}, {256, 192}};
    for (int sh = 0; sh < 4; sh++) {
        ct_pool P = ct_pool_of(t, gpu);
        const int rows = shapes[sh][0], cols = shapes[sh][1];
        const size_t n = (size_t)rows * cols;
        uint8_t *in = ct_host(&P, n), *want = ct_host(&P, n), *want_t = ct_host(&P, n);
        for (size_t i = 0; in && i < n; i++) in[i] = (uint8_t)(i * 2654435761u >> 13);
        uint8_t *d_in = ct_poison(&P, n), *d_out = ct_poison(&P, n), *d_out_t = ct_poison(&P, n);
        if (P.failed) break;
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d_in, in, n));
        const float scale = 3.0f, zero = 0.0f;
        float sinv_c = 0.0f, *d_scale = ct_up_f32(&P, &scale, 1), *d_sinv = ct_up_f32(&P, &zero, 1);
        MG_EXPECT_OK(cpu->fp8_transpose(cpu, want, want_t, in, rows, cols, &scale, &sinv_c));
        for (int forms = 0; forms <= 3; forms++) { /* 1: the copy, 2: the transpose, 3: both */
            MG_EXPECT_OK(gpu->fp8_transpose(gpu, forms & 1 ? d_out : NULL,
                                            forms & 2 ? d_out_t : NULL, d_in, rows, cols, d_scale,
                                            forms == 0 ? d_sinv : NULL));
            uint8_t *got = ct_down_raw(&P, d_out, n), *got_t = ct_down_raw(&P, d_out_t, n);
            float *sinv_g = ct_down_f32(&P, d_sinv, 1);
            if (!got || !got_t || !sinv_g) break;
            if (forms == 0) { /* the scale's inverse alone: nothing else written */
                CT_EXPECT_SAME_BITS(sinv_g, &sinv_c, 4, "fp8_transpose %dx%d scale_inv", rows,
                                    cols);
                size_t touched = 0;
                for (size_t i = 0; i < n; i++) touched += got[i] != 0xFF || got_t[i] != 0xFF;
                MG_EXPECT(touched == 0, "fp8_transpose %dx%d without outputs wrote %zu bytes", rows,
                          cols, touched);
            }
            if (forms & 1)
                CT_EXPECT_SAME_BITS(got, want, n, "fp8_transpose %dx%d copy", rows, cols);
            if (forms & 2)
                CT_EXPECT_SAME_BITS(got_t, want_t, n, "fp8_transpose %dx%d transposed", rows, cols);
            MG_EXPECT_OK(gpu->memset_zero(gpu, d_out, n));
            MG_EXPECT_OK(gpu->memset_zero(gpu, d_out_t, n));
        }
        ct_pool_free(&P);
    }
}

/* fp8_cast_blocks (the blockwise recipe): the bytes and each block's scale inverse are the CPU's
 * bit for bit (NaN bytes as NaN), 1 x 128 blocks along rows and along columns and 128 x 128
 * tiles with their transpose, e4m3 with and without power-of-two scales and e5m2, on shapes of
 * whole and partial blocks, magnitudes from 2^-20 to 2^20 with an infinity and a NaN; the scales
 * in core/fp8_block.h's layouts (the tiles' grid and the transpose's). */
MG_TEST(cuda_fp8_cast_blocks_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    /* the last: a Llama-style 3B layer's input at micro-batch 2 (4096 tokens of 3072) */
    static const int shapes[][2] = {{129, 136}, {256, 384}, {1, 260}, {130, 1}, {4096, 3072}};
    for (int sh = 0; sh < 5; sh++) {
        ct_pool P = ct_pool_of(t, gpu);
        const int rows = shapes[sh][0], cols = shapes[sh][1];
        const size_t n = (size_t)rows * cols;
        const size_t nr = (size_t)rows * mg_fp8_block_count(cols),
                     nc = (size_t)cols * mg_fp8_block_count(rows),
                     nt = mg_fp8_tile_floats(rows, cols), ntt = mg_fp8_tile_floats(cols, rows);
        const size_t ns = nr > nt ? nr : nt, nst = nc > ntt ? nc : ntt; /* either mode's */
        float *x = ct_uniform_act(&P, 71 + sh, n, -1.0f, 1.0f);
        for (size_t i = 0; x && i < n; i++) x[i] = ldexpf(x[i], (int)(i % 41) - 20);
        if (x && n > 300) x[7] = INFINITY, x[200] = NAN;
        if (x) ct_round_act(x, n);
        uint8_t *w = ct_host(&P, n), *wt = ct_host(&P, n);
        float *ws = ct_host(&P, ns * 4), *wst = ct_host(&P, nst * 4);
        uint8_t *d = ct_poison(&P, n), *dt = ct_poison(&P, n);
        float *ds = ct_poison(&P, ns * 4), *dst = ct_poison(&P, nst * 4);
        void *din = x ? ct_up_act(&P, x, n) : NULL;
        if (P.failed) break;
        for (int v = 0; v < 3; v++) { /* e4m3 pow2, e4m3 fp32 scales, e5m2 pow2 */
            const int f = v == 2 ? MG_FP8_E5M2 : MG_FP8_E4M3;
            const bool pow2 = v != 1;
            for (int tiles = 0; tiles < 2; tiles++) {
                /* (a tile grid's padding is not written: both start from zeros) */
                memset(ws, 0, ns * 4), memset(wst, 0, nst * 4);
                MG_EXPECT_OK(gpu->memset_zero(gpu, ds, ns * 4));
                MG_EXPECT_OK(gpu->memset_zero(gpu, dst, nst * 4));
                MG_EXPECT_OK(
                    cpu->fp8_cast_blocks(cpu, w, ws, wt, wst, x, rows, cols, tiles, f, pow2));
                MG_EXPECT_OK(
                    gpu->fp8_cast_blocks(gpu, d, ds, dt, dst, din, rows, cols, tiles, f, pow2));
                uint8_t *g = ct_down_raw(&P, d, n), *gt = ct_down_raw(&P, dt, n);
                float *gs = ct_down_f32(&P, ds, tiles ? nt : nr);
                float *gst = ct_down_f32(&P, dst, tiles ? ntt : nc);
                if (!g || !gt || !gs || !gst) break;
                int bad = 0;
                for (size_t i = 0; i < n && bad < 3; i++) {
                    const bool a = isnan(mg_fp8_to_f32(g[i], (mg_fp8_format)f)),
                               b = isnan(mg_fp8_to_f32(w[i], (mg_fp8_format)f));
                    const bool at = isnan(mg_fp8_to_f32(gt[i], (mg_fp8_format)f)),
                               bt = isnan(mg_fp8_to_f32(wt[i], (mg_fp8_format)f));
                    if ((a || b ? a != b : g[i] != w[i]) ||
                        (at || bt ? at != bt : gt[i] != wt[i])) {
                        MG_EXPECT(0,
                                  "fp8_cast_blocks %dx%d v%d %s: byte %zu 0x%02x/0x%02x, cpu "
                                  "0x%02x/0x%02x",
                                  rows, cols, v, tiles ? "tiles" : "rows+cols", i, g[i], gt[i],
                                  w[i], wt[i]);
                        bad++;
                    }
                }
                CT_EXPECT_SAME_BITS(gs, ws, (tiles ? nt : nr) * 4,
                                    "fp8_cast_blocks %dx%d v%d %s "
                                    "scale_inv",
                                    rows, cols, v, tiles ? "tiles" : "rows");
                CT_EXPECT_SAME_BITS(gst, wst, (tiles ? ntt : nc) * 4,
                                    "fp8_cast_blocks %dx%d v%d %s scale_inv_t", rows, cols, v,
                                    tiles ? "tiles, transposed" : "cols");
            }
        }
        ct_pool_free(&P);
    }
}

/* An operand's bytes (rows, cols) from x with scale s, both forms, on both backends. */
typedef struct {
    mg_fp8_tensor cpu, gpu;
} fp8_pair;

static fp8_pair fp8_operand(ct_pool *P, mg_backend *cpu, const float *x, int rows, int cols,
                            float s, int format) {
    fp8_pair o;
    memset(&o, 0, sizeof o);
    size_t n = (size_t)rows * cols;
    uint8_t *b = ct_host(P, n), *bt = ct_host(P, n);
    float *sinv = ct_host(P, sizeof(float));
    if (P->failed) return o;
    (void)cpu->fp8_cast(cpu, b, bt, x, rows, cols, &s, sinv, NULL, format, NULL, NULL);
    uint8_t *db = ct_poison(P, n), *dbt = ct_poison(P, n);
    float *dsinv = ct_up_f32(P, sinv, 1);
    if (P->failed) return o;
    (void)P->g->copy_h2d(P->g, db, b, n);
    (void)P->g->copy_h2d(P->g, dbt, bt, n);
    o.cpu = (mg_fp8_tensor){b, bt, sinv, format, MG_FP8_SCALE_TENSOR, NULL};
    o.gpu = (mg_fp8_tensor){db, dbt, dsinv, format, MG_FP8_SCALE_TENSOR, NULL};
    return o;
}

/* The forward runs with Hopper's fast fp8 accumulation (as Transformer Engine's): a little more
 * than the GEMM tolerance at fp16's. */
#define FP8_TOL (CT_TOL_GEMM > 5e-3 ? CT_TOL_GEMM : 5e-3)

/* fp8_linear_forward on both backends within tol: with bias and residual, then GELU-fused (its
 * input too). `kind` names the operands' scaling in the messages. */
static void expect_forwards(mg_test_ctx *t, ct_pool *P, mg_backend *cpu, mg_backend *gpu,
                            const fp8_pair *fx, const fp8_pair *fw, const float *bias,
                            const float *res, int N, int IC, int OC, double tol, const char *kind) {
    const size_t no = (size_t)N * OC;
    void *d_bias = ct_up_act(P, bias, OC), *d_res = ct_up_act(P, res, no);
    void *d_out = ct_poison_act(P, no), *d_pre = ct_poison_act(P, no);
    float *want = ct_host(P, no * sizeof(float)), *want_pre = ct_host(P, no * sizeof(float));
    if (P->failed) return;
    MG_EXPECT_OK(
        gpu->fp8_linear_forward(gpu, d_out, NULL, &fx->gpu, &fw->gpu, d_bias, d_res, N, IC, OC));
    MG_EXPECT_OK(
        cpu->fp8_linear_forward(cpu, want, NULL, &fx->cpu, &fw->cpu, bias, res, N, IC, OC));
    CT_EXPECT_CLOSE(ct_down_act(P, d_out, no), want, no, tol, "%s forward %dx%dx%d", kind, N, IC,
                    OC);
    MG_EXPECT_OK(
        gpu->fp8_linear_forward(gpu, d_out, d_pre, &fx->gpu, &fw->gpu, d_bias, NULL, N, IC, OC));
    MG_EXPECT_OK(
        cpu->fp8_linear_forward(cpu, want, want_pre, &fx->cpu, &fw->cpu, bias, NULL, N, IC, OC));
    CT_EXPECT_CLOSE(ct_down_act(P, d_pre, no), want_pre, no, tol,
                    "%s forward, GELU's input %dx%dx%d", kind, N, IC, OC);
    CT_EXPECT_CLOSE(ct_down_act(P, d_out, no), want, no, tol, "%s forward, GELU %dx%dx%d", kind, N,
                    IC, OC);
}

/* A linear test's seeded inputs, N tokens of IC to OC: the input, the weight, the bias, a
 * residual, the output gradient, a GELU's input (IC wide, for the input gradient) and the
 * weight gradient's starting values (it accumulates). */
typedef struct {
    float *x, *w, *bias, *res, *dy, *pre, *dw0;
} lin_inputs;

static lin_inputs lin_inputs_of(ct_pool *P, uint32_t id, int N, int IC, int OC) {
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    return (lin_inputs){ct_rand_act(P, id, ni, 1.0f),
                        ct_rand_act(P, id + 1, nw, 0.05f),
                        ct_rand_act(P, id + 2, OC, 0.5f),
                        ct_rand_act(P, id + 3, no, 1.0f),
                        ct_rand_act(P, id + 4, no, 1e-3f),
                        ct_rand_act(P, id + 5, ni, 1.0f),
                        ct_uniform_f32(P, id + 6, nw, -1.0f, 1.0f)};
}

MG_TEST(cuda_fp8_linear_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    static const int cases[][3] = {{64, 96, 160}, {256, 768, 3072}, {128, 3072, 768}};
    for (int k = 0; k < 3; k++) {
        ct_pool P = ct_pool_of(t, gpu); /* one per shape: the pool holds CT_POOL_MAX buffers */
        const int N = cases[k][0], IC = cases[k][1], OC = cases[k][2];
        const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
        uint32_t id = 100 + 10 * (uint32_t)k;
        const lin_inputs in = lin_inputs_of(&P, id, N, IC, OC);
        float *x = in.x, *w = in.w, *bias = in.bias, *res = in.res, *dy = in.dy, *pre = in.pre;
        float *dw0 = in.dw0, *db0 = ct_uniform_f32(&P, id + 7, OC, -1.0f, 1.0f);
        /* scales as delayed scaling would set them: the format's largest value over the amax */
        fp8_pair fx = fp8_operand(&P, cpu, x, N, IC, 448.0f / 4.5f, MG_FP8_E4M3);
        fp8_pair fw = fp8_operand(&P, cpu, w, OC, IC, 448.0f / 0.25f, MG_FP8_E4M3);
        if (P.failed) {
            ct_pool_free(&P);
            break;
        }
        expect_forwards(t, &P, cpu, gpu, &fx, &fw, bias, res, N, IC, OC, FP8_TOL, "fp8");
        /* backward, e4m3 and e5m2 gradients, plain and through a GELU */
        for (int f = 0; f < 2 && !P.failed; f++) {
            bool gelu = f == 1;
            fp8_pair fd = fp8_operand(&P, cpu, dy, N, OC, (f ? 57344.0f : 448.0f) / 5e-3f, f);
            void *d_dy = ct_up_act(&P, dy, no), *d_gp = ct_up_act(&P, pre, ni);
            void *d_dx = ct_poison_act(&P, ni);
            float *d_dw = ct_up_f32(&P, dw0, nw), *d_db = ct_up_f32(&P, db0, OC);
            float *dx = ct_host(&P, ni * sizeof(float)), *dw = ct_dup(&P, dw0, nw);
            float *db = ct_dup(&P, db0, OC);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->fp8_linear_backward(gpu, d_dx, d_dw, d_db, d_dy, &fd.gpu, &fx.gpu,
                                                  &fw.gpu, gelu ? d_gp : NULL, N, IC, OC));
            MG_EXPECT_OK(cpu->fp8_linear_backward(cpu, dx, dw, db, dy, &fd.cpu, &fx.cpu, &fw.cpu,
                                                  gelu ? pre : NULL, N, IC, OC));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, ni), dx, ni, CT_TOL_GEMM,
                            "fp8 dinp %s%s %dx%dx%d", f ? "e5m2" : "e4m3", gelu ? " GELU" : "", N,
                            IC, OC);
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_dw, nw), dw, nw, CT_TOL_F32, "fp8 dw %s %dx%dx%d",
                            f ? "e5m2" : "e4m3", N, IC, OC);
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_db, OC), db, OC, CT_TOL_F32, "fp8 dbias %dx%dx%d", N,
                            IC, OC);
            /* dw NULL (--no-fp8-wgrad): the input gradient alone, the input's bytes unread */
            const mg_fp8_tensor none = {NULL, NULL, NULL, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
            void *d_dx2 = ct_poison_act(&P, ni);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->fp8_linear_backward(gpu, d_dx2, NULL, NULL, d_dy, &fd.gpu, &none,
                                                  &fw.gpu, gelu ? d_gp : NULL, N, IC, OC));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dx2, ni), dx, ni, CT_TOL_GEMM,
                            "fp8 dinp without dw %s%s %dx%dx%d", f ? "e5m2" : "e4m3",
                            gelu ? " GELU" : "", N, IC, OC);
        }
        ct_pool_free(&P);
    }
}

/* A block-scaled operand (rows, cols) of x, both forms with their scales (core/fp8_block.h's
 * layouts), cast by the CPU (the CUDA casts equal it: cuda_fp8_cast_blocks_matches_cpu) and
 * uploaded: 1 x 128 blocks along rows and columns, or 128 x 128 tiles (tiles). */
static fp8_pair block_operand(ct_pool *P, mg_backend *cpu, const float *x, int rows, int cols,
                              bool tiles, int format) {
    fp8_pair o;
    memset(&o, 0, sizeof o);
    const size_t n = (size_t)rows * cols;
    const size_t ns = tiles ? mg_fp8_tile_floats(rows, cols)
                            : (size_t)rows * mg_fp8_block_count(cols),
                 nst = tiles ? mg_fp8_tile_floats(cols, rows)
                             : (size_t)cols * mg_fp8_block_count(rows);
    uint8_t *b = ct_host(P, n), *bt = ct_host(P, n);
    float *s = ct_host(P, ns * 4), *st = ct_host(P, nst * 4);
    if (P->failed) return o;
    memset(s, 0, ns * 4), memset(st, 0, nst * 4);
    (void)cpu->fp8_cast_blocks(cpu, b, s, bt, st, x, rows, cols, tiles, format, true);
    uint8_t *db = ct_poison(P, n), *dbt = ct_poison(P, n);
    float *ds = ct_up_f32(P, s, ns), *dst = ct_up_f32(P, st, nst);
    if (P->failed) return o;
    (void)P->g->copy_h2d(P->g, db, b, n);
    (void)P->g->copy_h2d(P->g, dbt, bt, n);
    const int mode = tiles ? MG_FP8_SCALE_TILES : MG_FP8_SCALE_ROWS;
    o.cpu = (mg_fp8_tensor){b, bt, s, format, mode, st};
    o.gpu = (mg_fp8_tensor){db, dbt, ds, format, mode, dst};
    return o;
}

/* The blockwise recipe's products: cuBLASLt's block-scaled fp8 GEMMs (1 x 128 scaled inputs and
 * gradients, 128 x 128 scaled weights; the weight gradient's both 1 x 128) against the CPU's
 * products of the decoded values, within the GEMM tolerance: the forward with bias and residual
 * and GELU-fused, the backward with e4m3 and e5m2 gradients; rows of very different magnitudes,
 * so that a block scale read from the wrong place shows. */
/* The weight gradient's tolerance (fp32 out, so not the GEMM's bf16 one): cuBLASLt's
 * block-scaled products on Hopper most likely sum each 128-element block in the tensor cores'
 * own accumulator, narrower than fp32, and scale the block's sum into fp32 after (both sides
 * read the same bytes and scales); with the tokens' magnitudes 2^-4 .. 2^4 along that sum the
 * products came within 1.4e-4 .. 2.0e-4 of the CPU's (H200, 2026-11-30). A block scale read
 * from the wrong place moves elements by factors. */
#define BLOCK_DW_TOL 1e-3

MG_TEST(cuda_fp8_block_linear_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    /* the last: a Llama-style 3B layer's QKV product at micro-batch 2 (4096 tokens, 3072 in,
     * 5120 out) */
    static const int cases[][3] = {{128, 256, 384}, {256, 768, 3072}, {4096, 3072, 5120}};
    for (int k = 0; k < 3; k++) {
        ct_pool P = ct_pool_of(t, gpu);
        const int N = cases[k][0], IC = cases[k][1], OC = cases[k][2];
        const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
        const lin_inputs in = lin_inputs_of(&P, 300 + 10 * (uint32_t)k, N, IC, OC);
        float *x = in.x, *w = in.w, *bias = in.bias, *res = in.res, *dy = in.dy, *pre = in.pre;
        float *dw0 = in.dw0;
        if (P.failed) {
            ct_pool_free(&P);
            break;
        }
        for (size_t i = 0; i < ni; i++) x[i] *= ldexpf(1.0f, (int)(i / IC) % 9 - 4);
        for (size_t i = 0; i < nw; i++) w[i] *= ldexpf(1.0f, (int)(i / IC / 128) % 3);
        ct_round_act(x, ni), ct_round_act(w, nw);
        fp8_pair fx = block_operand(&P, cpu, x, N, IC, false, MG_FP8_E4M3);
        fp8_pair fw = block_operand(&P, cpu, w, OC, IC, true, MG_FP8_E4M3);
        if (P.failed) {
            ct_pool_free(&P);
            break;
        }
        expect_forwards(t, &P, cpu, gpu, &fx, &fw, bias, res, N, IC, OC, CT_TOL_GEMM, "block fp8");
        for (int f = 0; f < 2 && !P.failed; f++) {
            fp8_pair fd = block_operand(&P, cpu, dy, N, OC, false, f);
            void *d_dy = ct_up_act(&P, dy, no), *d_gp = ct_up_act(&P, pre, ni);
            void *d_dx = ct_poison_act(&P, ni);
            float *d_dw = ct_up_f32(&P, dw0, nw);
            float *dx = ct_host(&P, ni * sizeof(float)), *dw = ct_dup(&P, dw0, nw);
            if (P.failed) break;
            MG_EXPECT_OK(gpu->fp8_linear_backward(gpu, d_dx, d_dw, NULL, d_dy, &fd.gpu, &fx.gpu,
                                                  &fw.gpu, f ? d_gp : NULL, N, IC, OC));
            MG_EXPECT_OK(cpu->fp8_linear_backward(cpu, dx, dw, NULL, dy, &fd.cpu, &fx.cpu, &fw.cpu,
                                                  f ? pre : NULL, N, IC, OC));
            CT_EXPECT_CLOSE(ct_down_act(&P, d_dx, ni), dx, ni, CT_TOL_GEMM,
                            "block fp8 dinp %s %dx%dx%d", f ? "e5m2 GELU" : "e4m3", N, IC, OC);
            CT_EXPECT_CLOSE(ct_down_f32(&P, d_dw, nw), dw, nw, BLOCK_DW_TOL,
                            "block fp8 dw %s %dx%dx%d", f ? "e5m2" : "e4m3", N, IC, OC);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_fp8_update_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { nt = 9, len = 5 };
    const size_t nf = 2 * nt + (size_t)nt * len;
    ct_pool P = ct_pool_of(t, gpu);
    float *st = ct_uniform_f32(&P, 7, nf, 0.0f, 300.0f);
    if (!P.failed) {
        st[0] = 0.0f;                 /* no amax: the scale stays */
        st[4] = INFINITY;             /* an overflow */
        st[5] = NAN;                  /* a NaN */
        st[nt + 2 * nt + 3] = 1e-40f; /* a subnormal in a history */
        float *d = ct_up_f32(&P, st, nf);
        for (int step = 0; step < 3 && !P.failed; step++) {
            MG_EXPECT_OK(gpu->fp8_update(gpu, d, nt, len, step, step == 1, mg_fp8_max(MG_FP8_E4M3),
                                         mg_fp8_max(MG_FP8_E5M2)));
            MG_EXPECT_OK(cpu->fp8_update(cpu, st, nt, len, step, step == 1, mg_fp8_max(MG_FP8_E4M3),
                                         mg_fp8_max(MG_FP8_E5M2)));
            float *got = ct_down_f32(&P, d, nf);
            if (got) CT_EXPECT_SAME_BITS(got, st, nf * sizeof(float), "fp8_update step %d", step);
        }
    }
    ct_pool_free(&P);
}
