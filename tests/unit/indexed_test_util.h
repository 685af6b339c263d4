/* File helpers for the indexed dataset and preprocess tests. */
#ifndef MG_INDEXED_TEST_UTIL_H
#define MG_INDEXED_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_harness.h"
#include "test.h"

int mg_idx_test_tmpdir(mg_test_ctx *t, char dir[64]);         /* mkdtemp; 0 on failure */
unsigned char *mg_idx_test_read(const char *path, size_t *n); /* malloc'd contents, NULL */
int mg_idx_test_write(const char *path, const void *data, size_t n);
/* PREFIX.idx and PREFIX.bin; a size of (size_t)-1 writes no file. */
void mg_idx_test_write_pair(const char *prefix, const void *idx, size_t idx_n, const void *bin,
                            size_t bin_n);
int mg_idx_test_count_files(const char *dir);             /* entries other than . and .. */
void mg_idx_test_rmdir(const char *dir);                  /* the directory and everything in it */
int mg_idx_test_same_files(const char *a, const char *b); /* byte-identical */
/* Runs every file of src_dir through the indexed (jsonl = 0) or JSONL (1) harness, expecting a
 * clean result; returns the number of files. */
int mg_idx_test_replay_dir(mg_test_ctx *t, const char *src_dir, const char *tmp_dir, int jsonl);

#endif
