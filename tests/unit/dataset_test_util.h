/* Helpers shared by the dataset tests: temporary directories, whole files, golden cases. */
#ifndef MG_TEST_DATASET_UTIL_H
#define MG_TEST_DATASET_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#define DS_GOLDEN "tests/golden/dataset"

/* mkdtemp under /tmp into dir (64 bytes); false on failure. */
bool ds_tmpdir(char *dir);
/* rm -rf */
void ds_rmtree(const char *dir);
/* A malloc'd copy of the file (NUL appended), or NULL. */
char *ds_read_file(const char *path, size_t *len);
bool ds_files_equal(const char *a, const char *b);
/* Regular files directly in dir. */
int ds_count_files(const char *dir);
bool ds_copy_file(const char *from, const char *to);

#endif
