#include "core/tensor.h"

#include <string.h>

size_t mg_dtype_size(mg_dtype t) {
    switch (t) {
    case MG_F32: return 4;
    case MG_BF16: return 2;
    case MG_F16: return 2;
    case MG_I32: return 4;
    case MG_I64: return 8;
    }
    return 0;
}

const char *mg_dtype_name(mg_dtype t) {
    switch (t) {
    case MG_F32: return "F32";
    case MG_BF16: return "BF16";
    case MG_F16: return "F16";
    case MG_I32: return "I32";
    case MG_I64: return "I64";
    }
    return "?";
}

int64_t mg_tensor_numel(const mg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t mg_f32_to_bf16(float x) {
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float mg_bf16_to_f32(uint16_t x) { return float_of((uint32_t)x << 16); }

uint16_t mg_f32_to_f16(float x) {
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;        /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;       /* overflow (>= 65520) rounds to Inf */
    if (a < 0x38800000u) {                              /* subnormal half or zero */
        if (a < 0x33000000u) return sign;               /* below half the smallest subnormal */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);               /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);         /* round to nearest even at bit 13 */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float mg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return float_of(sign);
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -v : v;
    }
    if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
    return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}
