/* A C interface to libsentencepiece (C++), implemented in tokenizer_spm_shim.cc: only what
 * tokenizer_spm.c needs. Built when the library is present (MG_HAVE_SENTENCEPIECE).
 * Returns: 0 on success; MG_SPM_NOMEM; MG_SPM_ERROR with a one-line message in err. The
 * processor is immutable after load and its encode/decode may run on several threads at once.
 * Exports: mg_spm, mg_spm_*. Needs: libsentencepiece, libstdc++. */
#ifndef MG_DATA_TOKENIZER_SPM_SHIM_H
#define MG_DATA_TOKENIZER_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MG_SPM_OK = 0, MG_SPM_NOMEM = 1, MG_SPM_ERROR = 2 };

typedef struct mg_spm mg_spm;

int mg_spm_load(const char *path, mg_spm **out, char *err, size_t err_cap);
void mg_spm_free(mg_spm *p);
/* piece count, bos, eos, pad, unk ids (-1: the model has none) */
void mg_spm_ids(const mg_spm *p, int *pieces, int *bos, int *eos, int *pad, int *unk);
/* Appends the ids of text[0..len) to *ids (realloc-grown; *n, *cap updated): encode_as_ids. */
int mg_spm_encode(const mg_spm *p, const char *text, size_t len, int32_t **ids, size_t *n,
                  size_t *cap, char *err, size_t err_cap);
/* ids -> a malloc'd NUL-terminated string (*len bytes): decode_ids. */
int mg_spm_decode(const mg_spm *p, const int32_t *ids, size_t n, char **text, size_t *len,
                  char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
