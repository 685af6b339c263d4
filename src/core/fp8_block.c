/* Blockwise fp8 casts on the host (core/fp8_block.h): the CPU backend's reference. */
#include "core/fp8_block.h"

#include <stddef.h>

/* The largest magnitude of n values `stride` apart (NaN wins). */
static float amax_of(const float *x, int n, size_t stride) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[(size_t)i * stride]);
        if (isnan(a) || a > m || isnan(m)) m = isnan(m) ? m : a;
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

void mg_fp8_block_rows(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2) {
    const int nb = mg_fp8_block_count(cols);
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) {
            const int c0 = b * MG_FP8_BLOCK,
                      n = cols - c0 < MG_FP8_BLOCK ? cols - c0 : MG_FP8_BLOCK;
            const size_t at = (size_t)r * cols + c0;
            scale_inv[(size_t)r * nb + b] = cast_run(out + at, in + at, n, 1, f, pow2);
        }
}

void mg_fp8_block_cols(uint8_t *out_t, float *scale_inv_t, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2) {
    const int nb = mg_fp8_block_count(rows);
    for (int c = 0; c < cols; c++)
        for (int b = 0; b < nb; b++) {
            const int r0 = b * MG_FP8_BLOCK,
                      n = rows - r0 < MG_FP8_BLOCK ? rows - r0 : MG_FP8_BLOCK;
            scale_inv_t[(size_t)c * nb + b] =
                cast_run(out_t + (size_t)c * rows + r0, in + (size_t)r0 * cols + c, n, (size_t)cols,
                         f, pow2);
        }
}

void mg_fp8_block_tiles(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                        mg_fp8_format f, bool pow2) {
    const int nr = mg_fp8_block_count(rows), nc = mg_fp8_block_count(cols);
    for (int br = 0; br < nr; br++)
        for (int bc = 0; bc < nc; bc++) {
            const int r0 = br * MG_FP8_BLOCK, c0 = bc * MG_FP8_BLOCK;
            const int h = rows - r0 < MG_FP8_BLOCK ? rows - r0 : MG_FP8_BLOCK,
                      w = cols - c0 < MG_FP8_BLOCK ? cols - c0 : MG_FP8_BLOCK;
            float m = 0.0f;
            for (int i = 0; i < h; i++) {
                float a = amax_of(in + (size_t)(r0 + i) * cols + c0, w, 1);
                if (isnan(a) || a > m || isnan(m)) m = isnan(m) ? m : a;
            }
            const float s = mg_fp8_block_scale(m, mg_fp8_max(f), pow2);
            for (int i = 0; i < h; i++)
                for (int j = 0; j < w; j++) {
                    const size_t at = (size_t)(r0 + i) * cols + c0 + j;
                    out[at] = mg_fp8_from_f32(in[at] * s, f, true);
                }
            scale_inv[(size_t)br * nc + bc] = 1.0f / s;
        }
}
