/* Element types and tensor views. A view owns nothing: it names memory that an arena owns.
 * Conversions fp32 <-> bf16/fp16 round to nearest, ties to even; NaN stays NaN.
 * Exports: mg_dtype, mg_device, mg_tensor, mg_dtype_size, mg_dtype_name, mg_tensor_numel,
 * mg_f32_to_bf16, mg_bf16_to_f32, mg_f32_to_f16, mg_f16_to_f32. Needs: nothing. */
#ifndef MG_TENSOR_H
#define MG_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MG_U8: raw bytes (fp8 weights, which --fp8-param-gather gathers); the last dtype */
typedef enum { MG_F32 = 0, MG_BF16, MG_F16, MG_I32, MG_I64, MG_U8 } mg_dtype;
#define MG_DTYPE_LAST MG_U8
typedef enum { MG_DEVICE_CPU = 0, MG_DEVICE_CUDA } mg_device;

#define MG_MAX_DIMS 4

typedef struct {
    void *ptr;
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    mg_device device;
} mg_tensor;

size_t mg_dtype_size(mg_dtype t);
const char *mg_dtype_name(mg_dtype t); /* safetensors spelling: F32, BF16, F16, I32, I64 */
int64_t mg_tensor_numel(const mg_tensor *t);

uint16_t mg_f32_to_bf16(float x);
float mg_bf16_to_f32(uint16_t x);
uint16_t mg_f32_to_f16(float x);
float mg_f16_to_f32(uint16_t x);

#ifdef __cplusplus
}
#endif

#endif
