/* Whole-file reads and atomic writes, with one-line errors that name the file.
 * Exports: mg_file_read, mg_file_write_atomic, mg_file_make_dirs, mg_file_remove_dir. Needs:
 * core/status. */
#ifndef MG_CORE_FILE_H
#define MG_CORE_FILE_H

#include "core/status.h"

#include <stddef.h>

/* Reads all of path into a malloc'd buffer with a NUL appended (not counted in *size). */
mg_status mg_file_read(const char *path, char **buf, size_t *size);

/* Writes the concatenation of parts[0..n) to path atomically: into "<path>.tmp.<pid>", flushed to
 * disk, then renamed over path. On failure path is untouched and the temporary is removed. */
mg_status mg_file_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                               int n);

/* mkdir -p: dir and its missing parents. Errors name `what` ("the index cache directory") and
 * end with `fix` ("pass --data-cache-path DIR with write access"). */
mg_status mg_file_make_dirs(const char *dir, const char *what, const char *fix);

/* Best-effort removal of a directory of plain files (ours: checkpoint and conversion temporaries)
 * with the files in it; no recursion. */
void mg_file_remove_dir(const char *path);

#endif
