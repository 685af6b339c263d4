/* Blockwise fp8 scaling (Megatron's --fp8-recipe blockwise; Transformer Engine's
 * Float8BlockScaling, the scheme DeepSeek-V3 trained with): each block of a tensor has its own
 * fp32 scale, from the block's own largest magnitude (amax) now.
 *   - 1 x 128 blocks: 128 neighbours along one row. Inputs and output gradients are cast this
 *     way, once along each dimension a product contracts: row by row for the forward's and the
 *     input gradient's products, column by column (the transpose's rows) for the weight
 *     gradient's.
 *   - 128 x 128 blocks: weights. Their transpose is the same bytes transposed, the grid of scales
 *     transposed, so a weight is cast once.
 * A block's scale: fp8_max / amax (a correctly rounded fp32 division); 1 where amax is 0,
 * infinite or NaN; the largest fp32 where the quotient overflows; with pow2 (Transformer Engine's
 * default for this recipe) rounded down to a power of two by clearing its mantissa, so that
 * scaling and unscaling are exact. Elements are cast as core/fp8.h's saturating cast of
 * value x scale (fp32); the product of two operands multiplies each block's values by the
 * inverse of its scale (scale_inv, 1 / scale in fp32).
 * Blocks at the end of a row or column hold what is left (fewer than 128).
 * Layouts (row-major): 1 x 128 of a (rows, cols) tensor: scale_inv (rows, ceil(cols / 128));
 * 128 x 128: (ceil(rows / 128), ceil(cols / 128)).
 * Exports: MG_FP8_BLOCK, mg_fp8_block_scale, mg_fp8_block_count, mg_fp8_block_rows,
 * mg_fp8_block_cols, mg_fp8_block_tiles. Needs: core/fp8.h. */
#ifndef MG_CORE_FP8_BLOCK_H
#define MG_CORE_FP8_BLOCK_H

#include "core/fp8.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

#define MG_FP8_BLOCK 128

/* The scale of a block whose amax is amax (see above). */
MG_HB_FN float mg_fp8_block_scale(float amax, float fp8_max, bool pow2) {
    if (!(amax > 0.0f) || isinf(amax)) return 1.0f; /* 0, NaN or infinite */
    float s = fp8_max / amax;
    if (isinf(s)) s = FLT_MAX;
    if (pow2) s = mg_hb_float(mg_hb_bits(s) & 0xff800000u);
    return s;
}

/* Blocks of MG_FP8_BLOCK along n elements. */
MG_HB_FN int mg_fp8_block_count(int n) {
    return (n + MG_FP8_BLOCK - 1) / MG_FP8_BLOCK;
}

/* in (rows, cols, fp32) cast in 1 x 128 blocks along its rows: out (rows, cols) bytes and
 * scale_inv (rows, mg_fp8_block_count(cols)). */
void mg_fp8_block_rows(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2);
/* in (rows, cols) cast in 1 x 128 blocks along its columns, transposed: out_t (cols, rows) bytes,
 * each row of out_t (a column of in) in blocks of 128, and scale_inv_t (cols,
 * mg_fp8_block_count(rows)). */
void mg_fp8_block_cols(uint8_t *out_t, float *scale_inv_t, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2);
/* in (rows, cols) cast in 128 x 128 blocks: out (rows, cols) bytes and scale_inv
 * (mg_fp8_block_count(rows), mg_fp8_block_count(cols)). */
void mg_fp8_block_tiles(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                        mg_fp8_format f, bool pow2);

#endif
