/* Helpers and fuzz harness bodies for the indexed dataset tests; see indexed_test_util.h. */
#include "indexed_test_util.h"

#include "core/file.h"
#include "core/status.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mg_idx_test_tmpdir(mg_test_ctx *t, char dir[64]) {
    snprintf(dir, 64, "/tmp/mg_idx_test_XXXXXX");
    if (!mkdtemp(dir)) {
        MG_EXPECT(0, "mkdtemp failed");
        return 0;
    }
    return 1;
}

unsigned char *mg_idx_test_read(const char *path, size_t *n) {
    char *buf = NULL;
    *n = 0;
    if (mg_file_read(path, &buf, n) != MG_OK) return NULL;
    return (unsigned char *)buf;
}

int mg_idx_test_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = (n == 0 || fwrite(data, 1, n, f) == n);
    return (fclose(f) == 0) && ok;
}

void mg_idx_test_write_pair(const char *prefix, const void *idx, size_t idx_n, const void *bin,
                            size_t bin_n) {
    char path[512];
    snprintf(path, sizeof path, "%s.idx", prefix);
    if (idx_n != (size_t)-1)
        mg_idx_test_write(path, idx, idx_n);
    else
        unlink(path);
    snprintf(path, sizeof path, "%s.bin", prefix);
    if (bin_n != (size_t)-1)
        mg_idx_test_write(path, bin, bin_n);
    else
        unlink(path);
}

int mg_idx_test_count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

void mg_idx_test_rmdir(const char *dir) {
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int mg_idx_test_same_files(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = mg_idx_test_read(a, &na), *y = mg_idx_test_read(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

int mg_idx_test_replay_dir(mg_test_ctx *t, const char *src_dir, const char *tmp_dir, int jsonl) {
    DIR *d = opendir(src_dir);
    if (!d) return 0;
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src_dir, e->d_name);
        size_t n;
        unsigned char *data = mg_idx_test_read(path, &n);
        if (!data) continue;
        int r = jsonl ? mg_fuzz_jsonl_one(data, n) : mg_fuzz_indexed_one(data, n, tmp_dir);
        MG_EXPECT(r >= 0, "%s: harness invariant broke (%s)", path, mg_error_message());
        free(data);
        files++;
    }
    closedir(d);
    return files;
}
