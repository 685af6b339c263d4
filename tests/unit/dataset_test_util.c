/* Helpers shared by the dataset tests (see dataset_test_util.h). */
#include "dataset_test_util.h"

#include "core/file.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool ds_tmpdir(char *dir) {
    snprintf(dir, 64, "/tmp/mg_dataset_XXXXXX");
    return mkdtemp(dir) != NULL;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void ds_rmtree(const char *dir) {
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *ds_read_file(const char *path, size_t *len) {
    char *buf = NULL;
    return mg_file_read(path, &buf, len) == MG_OK ? buf : NULL;
}

bool ds_files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = ds_read_file(a, &la), *y = ds_read_file(b, &lb);
    bool eq = x && y && la == lb && !memcmp(x, y, la);
    free(x), free(y);
    return eq;
}

int ds_count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) n++;
    }
    closedir(d);
    return n;
}

bool ds_copy_file(const char *from, const char *to) {
    size_t n;
    char *buf = ds_read_file(from, &n);
    FILE *f = buf ? fopen(to, "wb") : NULL;
    bool ok = f && fwrite(buf, 1, n, f) == n;
    if (f) ok = (fclose(f) == 0) && ok;
    free(buf);
    return ok;
}
