/* safetensors files (https://github.com/huggingface/safetensors): the weight format for
 * checkpoints and Hugging Face imports. Layout: u64 little-endian header length N, N bytes of JSON
 *   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "string value", ...}}
 * (padded with spaces), then the data section; offsets are relative to its start.
 *
 * The reader maps the file read-only and validates everything before returning: a JSON object of
 * well-formed entries, known dtypes, shape x dtype size = offset span, and offsets that tile the
 * data section exactly (no overlap, no hole, nothing left over), as the reference implementation
 * requires. Every failure is one MG_ERR_FORMAT (contents) or MG_ERR_IO (file system) line naming
 * the file and the problem. Entries are in data order (ascending offsets). An entry's `data` points
 * into the mapping: valid until close, and aligned for its dtype only if the writer ordered the
 * tensors so (Python's writer and ours with 4/8-byte dtypes first do); use memcpy otherwise.
 * Assumes a little-endian host, as every supported target is.
 *
 * The writer writes "<path>.tmp", fsyncs it, renames it over path and fsyncs the directory, so a
 * crash leaves either the old file or the complete new one. Invalid arguments give MG_ERR_USAGE.
 *
 * Exports: mg_st_entry, mg_safetensors, mg_st_tensor, mg_safetensors_open, mg_safetensors_find,
 * mg_safetensors_close, mg_safetensors_write. Needs: core/status, core/tensor, cJSON. */
#ifndef MG_SAFETENSORS_H
#define MG_SAFETENSORS_H

#include "core/status.h"
#include "core/tensor.h"

#include <stddef.h>
#include <stdint.h>

#define MG_ST_MAX_HEADER ((uint64_t)100 << 20) /* larger headers are rejected as corrupt */
#define MG_ST_NAME_CAP   160 /* tensor names are shorter than this (NUL included) */

typedef struct {
    char name[MG_ST_NAME_CAP]; /* NUL-terminated; longer names are a format error */
    mg_dtype dtype;
    int ndim; /* 0 (a scalar) .. MG_MAX_DIMS */
    int64_t shape[MG_MAX_DIMS];
    size_t nbytes;    /* numel * dtype size = end - begin */
    const void *data; /* into the mapping; (shape) in C order */
} mg_st_entry;

typedef struct {
    mg_st_entry *entries; /* (n), ascending data offsets */
    int n;
    void *map;
    size_t map_size;
    char *metadata_json; /* the "__metadata__" object re-serialised, or NULL */
} mg_safetensors;

/* Maps path read-only and validates it. On failure *st is left zeroed (close is harmless). */
mg_status mg_safetensors_open(mg_safetensors *st, const char *path);
/* The entry called name, or NULL if absent. Linear search: fine for thousands of tensors. */
const mg_st_entry *mg_safetensors_find(const mg_safetensors *st, const char *name);
/* Unmaps and frees; leaves *st zeroed. */
void mg_safetensors_close(mg_safetensors *st);

typedef struct {
    const char *name;
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    const void *data; /* (shape) in C order, numel * dtype size bytes */
} mg_st_tensor;

/* Writes path atomically: to "<path>.tmp", fsync, rename. metadata: NULL or a JSON object of
 * string values (safetensors' __metadata__). Tensors are written in the given order, offsets
 * contiguous; the header is padded with spaces to a multiple of 8 bytes. Names must be unique,
 * non-empty, shorter than 160 bytes and not "__metadata__". */
mg_status mg_safetensors_write(const char *path, const mg_st_tensor *tensors, int n,
                               const char *metadata_json);

#endif
