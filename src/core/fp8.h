/* fp32 <-> fp8 on bit patterns, the project's one definition of the two OCP 8-bit formats that
 * Hopper's tensor cores take:
 *   e4m3 (e4m3fn): 4 exponent bits (bias 7), 3 mantissa bits, no infinity; S.1111.111 is NaN;
 *                  the largest finite value 448, the smallest subnormal 2^-9;
 *   e5m2:          5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: infinities
 *                  (S.11111.00) and NaNs; the largest finite value 57344, the smallest subnormal
 *                  2^-16.
 * Rounding: to nearest, ties to even, subnormals kept. A value beyond the largest finite one
 * after rounding (infinities included) becomes, with `saturate`, the largest finite value of its
 * sign (what training casts do: Transformer Engine's and cuBLASLt's saturating conversions);
 * without, NaN in e4m3 and infinity in e5m2 (PyTorch's and ml_dtypes' casts). NaN stays NaN
 * (0x7f in e4m3, 0x7e in e5m2, with the input's sign).
 * Inline for host C and CUDA device code alike, so both round exactly the same way.
 * Grouped transposes (the experts' rows, backend_ops.h's fp8_cast_grouped): a (rows, cols) tensor
 * whose rows come in groups is stored transposed as (cols, ld) with each group's rows starting at
 * a column that is a multiple of MG_FP8_GROUP_ALIGN (16 bytes: where Hopper's fp8 GEMMs can start
 * reading a group's columns as a matrix): group g at the sum of the earlier groups' rows, each
 * rounded up to MG_FP8_GROUP_ALIGN. mg_fp8_group_ld gives ld for G groups of at most rows rows in
 * all, a multiple of MG_FP8_GROUP_ALIGN too.
 * Exports: mg_fp8_format, mg_fp8_amax_max, mg_fp8_max, mg_fp8_from_f32, mg_fp8_to_f32,
 * MG_FP8_GROUP_ALIGN, mg_fp8_group_cols, mg_fp8_group_ld. Needs: core/half_bits.h. */
#ifndef MG_CORE_FP8_H
#define MG_CORE_FP8_H

#include "core/half_bits.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum { MG_FP8_E4M3 = 0, MG_FP8_E5M2 = 1 } mg_fp8_format;

#define MG_FP8_GROUP_ALIGN 16

/* The columns a group of n rows takes in a grouped transpose: n rounded up to the alignment. */
MG_HB_FN int64_t mg_fp8_group_cols(int64_t n) {
    return (n + MG_FP8_GROUP_ALIGN - 1) / MG_FP8_GROUP_ALIGN * MG_FP8_GROUP_ALIGN;
}

/* The columns of a grouped transpose of G groups and at most rows rows (see the header). */
MG_HB_FN int64_t mg_fp8_group_ld(int64_t rows, int64_t G) {
    const int64_t a = MG_FP8_GROUP_ALIGN;
    return (rows + (a - 1) * G + a - 1) / a * a;
}

/* An amax's running maximum: the larger of m and magnitude a, a NaN in either winning (as
 * torch.max). */
MG_HB_FN float mg_fp8_amax_max(float m, float a) {
    return isnan(a) || a > m || isnan(m) ? (isnan(m) ? m : a) : m;
}

/* The largest finite value: 448 (e4m3) or 57344 (e5m2). */
MG_HB_FN float mg_fp8_max(mg_fp8_format f) {
    return f == MG_FP8_E4M3 ? 448.0f : 57344.0f;
}

MG_HB_FN uint8_t mg_fp8_from_f32(float x, mg_fp8_format f, bool saturate) {
    const int man = f == MG_FP8_E4M3 ? 3 : 2, bias = f == MG_FP8_E4M3 ? 7 : 15;
    const int emin = 1 - bias; /* the smallest normal exponent */
    uint32_t u = mg_hb_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | (f == MG_FP8_E4M3 ? 0x7fu : 0x7eu); /* NaN */
    float ax = mg_hb_float(a), top = mg_fp8_max(f);
    if (a == 0) return sign;
    if (a < 0x7f800000u) {
        /* the quantum at ax's binade (the subnormals' below 2^emin): a power of two, so the
         * division is exact and rintf rounds to nearest even */
        int e = (int)(a >> 23) - 127;
        if (e < emin) e = emin;
        float q = ldexpf(1.0f, e - man);
        ax = rintf(ax / q) * q;
    }
    if (ax > top) { /* past the largest finite value (or an infinity) */
        if (saturate)
            ax = top;
        else
            return sign | (f == MG_FP8_E4M3 ? 0x7fu : 0x7cu);
    }
    if (ax == 0.0f) return sign;
    uint32_t r = mg_hb_bits(ax);
    int e = (int)(r >> 23) - 127;
    if (e < emin) /* subnormal: the count of quanta of 2^(emin - man) */
        return sign | (uint8_t)(int)ldexpf(ax, man - emin);
    return sign |
           (uint8_t)(((uint32_t)(e + bias) << man) | ((r >> (23 - man)) & ((1u << man) - 1u)));
}

MG_HB_FN float mg_fp8_to_f32(uint8_t v, mg_fp8_format f) {
    const int man = f == MG_FP8_E4M3 ? 3 : 2, bias = f == MG_FP8_E4M3 ? 7 : 15;
    const float s = (v & 0x80u) ? -1.0f : 1.0f;
    int ef = (v & 0x7fu) >> man, mf = v & ((1u << man) - 1u);
    if (f == MG_FP8_E4M3 && (v & 0x7fu) == 0x7fu)
        return mg_hb_float(0x7fc00000u | ((uint32_t)(v & 0x80u) << 24));
    if (f == MG_FP8_E5M2 && ef == 31)
        return mf ? mg_hb_float(0x7fc00000u | ((uint32_t)(v & 0x80u) << 24)) : s * INFINITY;
    if (ef == 0) return s * ldexpf((float)mf, 1 - bias - man);
    return s * ldexpf((float)((1 << man) | mf), ef - bias - man);
}

#endif
