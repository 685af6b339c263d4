/* NumPy's .npy format (numpy.lib.format), for the dataset index cache: Megatron saves its document,
 * sample, shuffle and blending indices with numpy.save, so ours are the same files.
 *
 * Writing reproduces numpy.save's bytes for a C-ordered little-endian integer array: version 1.0,
 * the header dict "{'descr': '<i4', 'fortran_order': False, 'shape': (n,), }", the spare spaces
 * numpy leaves for growing the first axis (21 digits), space padding to a 64-byte boundary and a
 * newline. Files are written under a temporary name and renamed, so a reader sees all or nothing.
 *
 * Reading maps the file and accepts versions 1.0-3.0, C order, the integer dtypes below, 1-D or
 * 2-D shapes, and checks that the data size matches the file size exactly.
 * Float32 arrays are written too (mg_npy_save_f32), not read.
 * Exports: mg_npy, mg_npy_*. Needs: core/status. */
#ifndef MG_DATA_NPY_H
#define MG_DATA_NPY_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { MG_NPY_I2 = 0, MG_NPY_I4, MG_NPY_U4, MG_NPY_I8, MG_NPY_DTYPE_COUNT } mg_npy_dtype;

typedef struct {
    mg_npy_dtype dtype;
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* shape[1] is 1 when ndim == 1 */
    const void *data; /* (shape[0] * shape[1]) elements, little endian */
    void *map;        /* private: the mapped file, or */
    size_t map_size;
    void *owned; /* private: malloc'd data (mg_npy_adopt) */
} mg_npy;

/* "<i2", "<i4", "<u4", "<i8" */
const char *mg_npy_descr(mg_npy_dtype t);
size_t mg_npy_itemsize(mg_npy_dtype t);

/* Writes data (shape[0] x shape[1] elements, or shape[0] when ndim is 1) as numpy.save would. */
mg_status mg_npy_save(const char *path, mg_npy_dtype t, int ndim, const int64_t *shape,
                      const void *data);
/* The same for float32 ("<f4"), for tools' outputs (`megatron generate --logits-file`); the
 * reader takes integer arrays only. */
mg_status mg_npy_save_f32(const char *path, int ndim, const int64_t *shape, const float *data);
/* Maps `path`; errors name the file and what is wrong (MG_ERR_IO, MG_ERR_FORMAT). */
mg_status mg_npy_load(mg_npy *a, const char *path);
/* Makes `a` an owner of malloc'd `data` (freed by mg_npy_free). */
void mg_npy_adopt(mg_npy *a, mg_npy_dtype t, int ndim, const int64_t *shape, void *data);
void mg_npy_free(mg_npy *a); /* safe on a zeroed array */

static inline int64_t mg_npy_numel(const mg_npy *a) {
    return a->shape[0] * a->shape[1];
}

/* Element i of the flattened array, widened to int64. */
static inline int64_t mg_npy_get(const mg_npy *a, int64_t i) {
    switch (a->dtype) {
    case MG_NPY_I2:
        return ((const int16_t *)a->data)[i];
    case MG_NPY_I4:
        return ((const int32_t *)a->data)[i];
    case MG_NPY_U4:
        return ((const uint32_t *)a->data)[i];
    default:
        return ((const int64_t *)a->data)[i];
    }
}

#endif
