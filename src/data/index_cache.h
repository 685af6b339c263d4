/* What Megatron's dataset index cache needs besides .npy files:
 *
 * - the "unique description" each dataset hashes to name its cache files: Python's
 *   json.dumps(obj, indent=4) of an ordered dict (ensure_ascii escapes, floats as Python's repr:
 *   shortest round-trip digits, "1.0", "1e-05"), written here by mg_pyjson;
 * - the file names: <cache dir>/<md5 hex of the description>-<class>-<split>-<affix>;
 * - small file helpers: mkdir -p, existence, whole-file text read, atomic text write.
 * Exports: mg_pyjson, mg_pyjson_*, mg_py_float_repr, mg_cache_*. Needs: core/status. */
#ifndef MG_DATA_INDEX_CACHE_H
#define MG_DATA_INDEX_CACHE_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_PYJSON_MAX_DEPTH 16
#define MG_CACHE_PATH_MAX   4608 /* bytes of any cache path we build */

typedef struct {
    char *text; /* NUL-terminated, malloc'd; the caller frees it */
    size_t len, cap;
    int depth;
    int count[MG_PYJSON_MAX_DEPTH]; /* items so far in each open container */
    bool after_key;
    bool failed; /* an allocation failed: text is incomplete */
} mg_pyjson;

void mg_pyjson_init(mg_pyjson *j);
void mg_pyjson_begin(mg_pyjson *j, char open); /* '{' or '[' as a value */
void mg_pyjson_end(mg_pyjson *j, char close);  /* '}' or ']' */
void mg_pyjson_key(mg_pyjson *j, const char *key);
void mg_pyjson_str(mg_pyjson *j, const char *s);
void mg_pyjson_int(mg_pyjson *j, int64_t v);
void mg_pyjson_float(mg_pyjson *j, double v);
void mg_pyjson_null(mg_pyjson *j);
/* The finished text (owned by the caller), or an MG_ERR_NOMEM error. */
mg_status mg_pyjson_finish(mg_pyjson *j, char **text);

/* repr(float(v)) as Python prints it; buf holds at least 32 bytes. */
void mg_py_float_repr(double v, char *buf);

/* os.makedirs(dir, exist_ok=True) */
mg_status mg_cache_mkdirs(const char *dir);
bool mg_cache_is_file(const char *path);
/* Reads a whole file into a malloc'd NUL-terminated string. */
mg_status mg_cache_read_text(const char *path, char **text);
/* Writes text under a temporary name and renames it into place. */
mg_status mg_cache_write_text(const char *path, const char *text);
/* base + affix into out (cap bytes); an error when it does not fit. */
mg_status mg_cache_path(char *out, size_t cap, const char *base, const char *affix);
/* "<dir>/<md5(description)>-<cls>-<split>-" into out (cap bytes); the md5 hex into md5 (33). */
mg_status mg_cache_base(char *out, size_t cap, const char *dir, const char *description,
                        const char *cls, const char *split, char md5[33]);

#endif
