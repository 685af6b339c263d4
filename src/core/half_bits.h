/* fp32 <-> bf16/fp16 on bit patterns, the one definition of the project's rounding: to nearest,
 * ties to even; NaN stays a quiet NaN; fp16 values from 65520 up become +-Inf and subnormals are
 * kept. Inline for host C (core/tensor.c) and CUDA device code alike (backend/cuda/convert.cu), so
 * the device rounds exactly as the host. Exports: mg_hb_f32_to_bf16, mg_hb_bf16_to_f32,
 * mg_hb_f32_to_f16, mg_hb_f16_to_f32. Needs: nothing. */
#ifndef MG_CORE_HALF_BITS_H
#define MG_CORE_HALF_BITS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MG_HB_FN static inline __host__ __device__
#else
#define MG_HB_FN static inline
#endif

MG_HB_FN uint32_t mg_hb_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

MG_HB_FN float mg_hb_float(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

MG_HB_FN uint16_t mg_hb_f32_to_bf16(float x) {
    uint32_t u = mg_hb_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

MG_HB_FN float mg_hb_bf16_to_f32(uint16_t h) {
    return mg_hb_float((uint32_t)h << 16);
}

MG_HB_FN uint16_t mg_hb_f32_to_f16(float x) {
    uint32_t u = mg_hb_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* overflow (>= 65520) rounds to Inf */
    if (a < 0x38800000u) {                       /* subnormal half or zero */
        if (a < 0x33000000u) return sign;        /* below half the smallest subnormal */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

/* exact */
MG_HB_FN float mg_hb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return mg_hb_float(sign);
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31) return mg_hb_float(sign | 0x7f800000u | (mant << 13));
    return mg_hb_float(sign | ((exp + 112) << 23) | (mant << 13));
}

#endif
