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
 * Layouts of the scales' inverses (cuBLASLt's for its 128-element 1D and 128 x 128 2D scaling,
 * so that its block-scaled GEMMs read them as they are):
 *   1 x 128 blocks of `runs` runs (rows): block-major, block b of run r at b * runs + r
 *     (mg_fp8_block_at; runs contiguous);
 *   128 x 128 tiles of a (rows, cols) tensor: tile (br, bc) at br * ld + bc, ld =
 *     ceil(ceil(cols / 128) / 4) * 4 (mg_fp8_tile_at: the grid's rows padded to a multiple of
 *     4); the transpose's grid is the same for (cols, rows).
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

/* The scale of block b of run r, of `runs` runs (see above). */
MG_HB_FN size_t mg_fp8_block_at(int runs, int r, int b) {
    return (size_t)b * (size_t)runs + (size_t)r;
}

/* A tile grid's row stride for a tensor of `cols` columns, and tile (br, bc)'s place. */
MG_HB_FN int mg_fp8_tile_ld(int cols) {
    return (mg_fp8_block_count(cols) + 3) / 4 * 4;
}
MG_HB_FN size_t mg_fp8_tile_at(int cols, int br, int bc) {
    return (size_t)br * (size_t)mg_fp8_tile_ld(cols) + (size_t)bc;
}
/* Floats of the tile grid of a (rows, cols) tensor. */
MG_HB_FN size_t mg_fp8_tile_floats(int rows, int cols) {
    return (size_t)mg_fp8_block_count(rows) * (size_t)mg_fp8_tile_ld(cols);
}

/* in (rows, cols, fp32) cast in 1 x 128 blocks along its rows: out (rows, cols) bytes and
 * scale_inv (rows x mg_fp8_block_count(cols), block-major). */
void mg_fp8_block_rows(uint8_t *out, float *scale_inv, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2);
/* in (rows, cols) cast in 1 x 128 blocks along its columns, transposed: out_t (cols, rows) bytes,
 * each row of out_t (a column of in) in blocks of 128, and scale_inv_t (cols x
 * mg_fp8_block_count(rows), block-major). */
void mg_fp8_block_cols(uint8_t *out_t, float *scale_inv_t, const float *in, int rows, int cols,
                       mg_fp8_format f, bool pow2);
/* in (rows, cols) cast in 128 x 128 blocks: out (rows, cols) bytes and scale_inv
 * (mg_fp8_tile_floats(rows, cols)); and, where not NULL, the transpose's grid scale_inv_t
 * (mg_fp8_tile_floats(cols, rows)). */
void mg_fp8_block_tiles(uint8_t *out, float *scale_inv, float *scale_inv_t, const float *in,
                        int rows, int cols, mg_fp8_format f, bool pow2);

#endif
