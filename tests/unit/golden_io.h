/* Reader for the golden vectors written by tools/reference/make_golden.py (format: MGGOLDEN v1,
 * described in tests/golden/README.md). Test-only code: the library never reads these files.
 * Each record's data is its own allocation, so it is aligned for float/int32 access.
 * Exports: mg_golden_record, mg_golden, mg_golden_load, mg_golden_find, mg_golden_free,
 * MG_GOLDEN_DIR, mg_golden_json. Needs: core/status, cJSON, tests/test.h. */
#ifndef MG_GOLDEN_IO_H
#define MG_GOLDEN_IO_H

#include "core/status.h"
#include "test.h"

#include <cjson/cJSON.h>

#include <stdint.h>

/* Where the golden files live, relative to the repository root (tests run from there). */
#define MG_GOLDEN_DIR "tests/golden"

enum { MG_GOLDEN_F32 = 0, MG_GOLDEN_I32 = 1, MG_GOLDEN_U8 = 2, MG_GOLDEN_U16 = 3 };

typedef struct {
    char name[160];
    int dtype; /* MG_GOLDEN_F32, _I32, _U8 or _U16 */
    int ndim;  /* 0..4 */
    int64_t shape[4];
    int64_t numel;
    void *data; /* (shape), numel elements of the dtype (4, 4, 1 or 2 bytes) */
} mg_golden_record;

typedef struct {
    mg_golden_record *records; /* (n), in file order */
    int n;
} mg_golden;

/* Reads path and validates magic, version, every record header and the sizes against the file
 * size (no truncation, no trailing bytes, no duplicate names). On failure *g is left empty. */
mg_status mg_golden_load(mg_golden *g, const char *path);
/* The record called name, or NULL. */
const mg_golden_record *mg_golden_find(const mg_golden *g, const char *name);
void mg_golden_free(mg_golden *g);

/* A JSON golden file (the tools/reference scripts' .json), parsed; NULL with the failure recorded
 * in t when it cannot be read or does not parse. Free with cJSON_Delete. */
cJSON *mg_golden_json(mg_test_ctx *t, const char *path);

#endif
