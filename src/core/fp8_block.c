/* Blockwise fp8 casts on the host (core/fp8_block.h): the CPU backend's reference. */
#include "core/fp8_block.h"

#include <stddef.h>

/* The largest magnitude of n values `stride` apart (NaN wins). */
static float amax_of(const float *x, int n, size_t stride) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        m = mg_fp8_amax_max(m, fabsf(x[(size_t)i * stride]));
    }
    return m;
}

/* Casts n values `stride` apart with the scale of their amax into out (contiguous); returns the
 * scale's inverse. */
static float cast_run(uint8_t *out, const float *x, int n, size_t stride, mg_fp8_format f,
                      bool pow2) {
    const float s = mg_fp8_block_scale(amax_of(x, n, stride), mg_fp8_max(f), pow2);
    for (int i = 0; i < n; i++) out[i] = mg_fp8_from_f32(x[(size_t)i * stride] * s, f, true);
    return 1.0f / s;
}

/* `outer` runs of `inner` values of in, the runs `step` apart and their values `stride` apart, each
 * cast in 1 x 128 blocks into its row of out (outer, inner), the scales' inverses into scale_inv
 * (outer x mg_fp8_block_count(inner), block-major: mg_fp8_block_at). */
static void block_runs(uint8_t *out, float *scale_inv, const float *in, int outer, int inner,
                       size_t step, size_t stride, mg_fp8_format f, bool pow2) {
    const int nb = mg_fp8_block_count(inner);
    for (int o = 0; o < outer; o++)
        for (int b = 0; b < nb; b++) {
            const int i0 = b * MG_FP8_BLOCK,
                      n = inner - i0 < MG_FP8_BLOCK ? inner - i0 : MG_FP8_BLOCK;
            scale_inv[mg_fp8_block_at(outer, o, b)] =
                cast_run(out + (size_t)o * inner + i0, in + (size_t)o * step + (size_t)i0 * stride,
                         n, stride, f, pow2);
        }
}

void mg_fp8_block_rows(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2) {
    block_runs(out, scale_inv, in, rows, cols, (size_t)cols, 1, f, pow2);
}

void mg_fp8_block_cols(uint8_t *out_t, float *scale_inv_t, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2) {
    block_runs(out_t, scale_inv_t, in, cols, rows, 1, (size_t)cols, f, pow2);
}

void mg_fp8_block_tiles(uint8_t *out, float *scale_inv, float *scale_inv_t, const float *in,
                        int rows, int cols, mg_fp8_format f, bool pow2) {
    const int nr = mg_fp8_block_count(rows), nc = mg_fp8_block_count(cols);
    for (int br = 0; br < nr; br++)
        for (int bc = 0; bc < nc; bc++) {
            const int r0 = br * MG_FP8_BLOCK, c0 = bc * MG_FP8_BLOCK;
            const int h = rows - r0 < MG_FP8_BLOCK ? rows - r0 : MG_FP8_BLOCK,
                      w = cols - c0 < MG_FP8_BLOCK ? cols - c0 : MG_FP8_BLOCK;
            float m = 0.0f;
            for (int i = 0; i < h; i++) {
                m = mg_fp8_amax_max(m, amax_of(in + (size_t)(r0 + i) * cols + c0, w, 1));
            }
            const float s = mg_fp8_block_scale(m, mg_fp8_max(f), pow2);
            for (int i = 0; i < h; i++)
                for (int j = 0; j < w; j++) {
                    const size_t at = (size_t)(r0 + i) * cols + c0 + j;
                    out[at] = mg_fp8_from_f32(in[at] * s, f, true);
                }
            scale_inv[mg_fp8_tile_at(cols, br, bc)] = 1.0f / s;
            if (scale_inv_t) scale_inv_t[mg_fp8_tile_at(rows, bc, br)] = 1.0f / s;
        }
}
