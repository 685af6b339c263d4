#include "core/file.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

mg_status mg_file_read(const char *path, char **buf, size_t *size) {
    *buf = NULL;
    if (size) *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return MG_FAIL(MG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return MG_FAIL(MG_ERR_IO, "%s: cannot determine the size (not a regular file?)", path);
    }
    char *b = malloc((size_t)len + 1);
    if (!b) {
        fclose(f);
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %ld bytes", path, len);
    }
    size_t got = fread(b, 1, (size_t)len, f);
    int err = ferror(f);
    fclose(f);
    if (got != (size_t)len || err) {
        free(b);
        return MG_FAIL(MG_ERR_IO, "%s: short read (%zu of %ld bytes)", path, got, len);
    }
    b[len] = '\0';
    *buf = b;
    if (size) *size = (size_t)len;
    return MG_OK;
}

mg_status mg_file_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                               int n) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return MG_FAIL(MG_ERR_IO, "path is too long: %s", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return MG_FAIL(MG_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        ok = sizes[i] == 0 || fwrite(parts[i], 1, sizes[i], f) == sizes[i];
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) == 0) return MG_OK;
    if (ok) e = errno;
    remove(tmp);
    return MG_FAIL(MG_ERR_IO, "cannot write %s: %s", path, strerror(e));
}

void mg_file_remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char f[4200];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(f, sizeof f, "%s/%s", path, e->d_name);
            unlink(f);
        }
        closedir(d);
    }
    rmdir(path);
}

mg_status mg_file_make_dirs(const char *dir, const char *what, const char *fix) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return MG_FAIL(MG_ERR_USAGE, "%s path is longer than %zu bytes: %.80s...; %s", what,
                       sizeof path - 1, dir, fix);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return MG_FAIL(MG_ERR_IO, "cannot create %s %s: %s; %s", what, path, strerror(errno),
                           fix);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return MG_FAIL(MG_ERR_IO, "cannot create %s %s: a file is in the way; %s", what, path,
                           fix);
        if (c == '\0') break;
        *p = c;
    }
    return MG_OK;
}
