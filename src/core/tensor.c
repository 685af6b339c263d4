#include "core/tensor.h"

#include "core/half_bits.h"

#include <string.h>

size_t mg_dtype_size(mg_dtype t) {
    switch (t) {
    case MG_F32:
        return 4;
    case MG_BF16:
        return 2;
    case MG_F16:
        return 2;
    case MG_I32:
        return 4;
    case MG_I64:
        return 8;
    case MG_U8:
        return 1;
    }
    return 0;
}

const char *mg_dtype_name(mg_dtype t) {
    switch (t) {
    case MG_F32:
        return "F32";
    case MG_BF16:
        return "BF16";
    case MG_F16:
        return "F16";
    case MG_I32:
        return "I32";
    case MG_I64:
        return "I64";
    case MG_U8:
        return "U8";
    }
    return "?";
}

int64_t mg_tensor_numel(const mg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

uint16_t mg_f32_to_bf16(float x) {
    return mg_hb_f32_to_bf16(x);
}

float mg_bf16_to_f32(uint16_t x) {
    return mg_hb_bf16_to_f32(x);
}

uint16_t mg_f32_to_f16(float x) {
    return mg_hb_f32_to_f16(x);
}

float mg_f16_to_f32(uint16_t h) {
    return mg_hb_f16_to_f32(h);
}
