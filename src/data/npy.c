/* .npy reading and writing (see npy.h). */
#include "data/npy.h"

#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC         "\x93NUMPY"
#define NPY_MAGIC_LEN     6
#define NPY_ALIGN         64
#define NPY_GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */

static const char *const k_descr[MG_NPY_DTYPE_COUNT] = {"<i2", "<i4", "<u4", "<i8"};
static const size_t k_itemsize[MG_NPY_DTYPE_COUNT] = {2, 4, 4, 8};

const char *mg_npy_descr(mg_npy_dtype t) {
    return k_descr[t];
}
size_t mg_npy_itemsize(mg_npy_dtype t) {
    return k_itemsize[t];
}

static int64_t numel_of(int ndim, const int64_t *shape) {
    return ndim == 1 ? shape[0] : shape[0] * shape[1];
}

/* numpy.save's bytes for an array of dtype `descr` ("<i4") and itemsize bytes per element */
static mg_status save_array(const char *path, const char *descr, size_t itemsize, int ndim,
                            const int64_t *shape, const void *data) {
    /* numpy.lib.format._write_array_header and _wrap_header, version 1.0 */
    char dict[256], hdr[512];
    int n;
    if (ndim == 1)
        n = snprintf(dict, sizeof dict,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }", descr,
                     (long long)shape[0]);
    else
        n = snprintf(dict, sizeof dict,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }", descr,
                     (long long)shape[0], (long long)shape[1]);
    char digits[32];
    int spare = NPY_GROWTH_DIGITS - snprintf(digits, sizeof digits, "%lld", (long long)shape[0]);
    int hlen = n + (spare > 0 ? spare : 0) + 1; /* + '\n' */
    int pad = NPY_ALIGN - ((NPY_MAGIC_LEN + 2 + 2 + hlen) % NPY_ALIGN);
    int total = hlen + pad;
    memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
    hdr[6] = 1, hdr[7] = 0;
    hdr[8] = (char)(total & 0xff), hdr[9] = (char)(total >> 8);
    memcpy(hdr + 10, dict, (size_t)n);
    memset(hdr + 10 + n, ' ', (size_t)(total - n - 1));
    hdr[10 + total - 1] = '\n';

    size_t bytes = (size_t)numel_of(ndim, shape) * itemsize;
    const void *parts[2] = {hdr, data};
    size_t sizes[2] = {(size_t)(10 + total), bytes};
    return mg_file_write_atomic(path, parts, sizes, 2);
}

mg_status mg_npy_save(const char *path, mg_npy_dtype t, int ndim, const int64_t *shape,
                      const void *data) {
    return save_array(path, k_descr[t], k_itemsize[t], ndim, shape, data);
}

mg_status mg_npy_save_f32(const char *path, int ndim, const int64_t *shape, const float *data) {
    return save_array(path, "<f4", sizeof(float), ndim, shape, data);
}

/* The value text after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *hdr, const char *key) {
    const char *p = strstr(hdr, key);
    if (!p) return NULL;
    p += strlen(key);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static mg_status parse_header(mg_npy *a, const char *hdr, const char *path) {
    const char *d = dict_value(hdr, "'descr'"), *fo = dict_value(hdr, "'fortran_order'");
    const char *sh = dict_value(hdr, "'shape'");
    if (!d || !fo || !sh) return MG_FAIL(MG_ERR_FORMAT, "%s: not a .npy header: %.80s", path, hdr);
    int t = -1;
    for (int i = 0; i < MG_NPY_DTYPE_COUNT; i++)
        if (d[0] == '\'' && !strncmp(d + 1, k_descr[i], 3) && d[4] == '\'') t = i;
    if (t < 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: dtype %.*s is not one of <i2, <i4, <u4, <i8", path,
                       (int)strcspn(d, ",}"), d);
    if (strncmp(fo, "False", 5))
        return MG_FAIL(MG_ERR_FORMAT, "%s: Fortran-ordered arrays are not supported", path);
    if (*sh != '(') return MG_FAIL(MG_ERR_FORMAT, "%s: malformed shape %.20s", path, sh);
    int64_t dims[3];
    int nd = 0;
    const char *p = sh + 1;
    while (*p != ')') {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || errno || nd == 2)
            return MG_FAIL(MG_ERR_FORMAT, "%s: shape %.30s is not a 1-D or 2-D size", path, sh);
        dims[nd++] = v;
        p = end;
        while (*p == ' ' || *p == ',') p++;
    }
    if (nd == 0) return MG_FAIL(MG_ERR_FORMAT, "%s: a scalar, expected an array", path);
    a->dtype = (mg_npy_dtype)t;
    a->ndim = nd;
    a->shape[0] = dims[0];
    a->shape[1] = nd == 2 ? dims[1] : 1;
    return MG_OK;
}

mg_status mg_npy_load(mg_npy *a, const char *path) {
    memset(a, 0, sizeof *a);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return MG_FAIL(MG_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return MG_FAIL(MG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    size_t size = (size_t)st.st_size;
    if (size < 12) {
        close(fd);
        return MG_FAIL(MG_ERR_FORMAT, "%s: %zu bytes is too short for a .npy file", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return MG_FAIL(MG_ERR_IO, "cannot map %s: %s", path, strerror(errno));
    const unsigned char *b = map;
    mg_status s = MG_OK;
    size_t hstart = 0, hlen = 0;
    if (memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) || b[6] < 1 || b[6] > 3) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: not a .npy file (bad magic or version)", path);
    } else if (b[6] == 1) {
        hstart = 10, hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else {
        hstart = 12,
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    }
    if (s == MG_OK && hstart + hlen > size)
        s = MG_FAIL(MG_ERR_FORMAT, "%s: header runs past the end of the file", path);
    if (s == MG_OK) {
        char *hdr = malloc(hlen + 1);
        if (!hdr) {
            s = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the header of %s", path);
        } else {
            memcpy(hdr, b + hstart, hlen);
            hdr[hlen] = '\0';
            s = parse_header(a, hdr, path);
            free(hdr);
        }
    }
    if (s == MG_OK) {
        size_t want = (size_t)mg_npy_numel(a) * k_itemsize[a->dtype];
        if (a->shape[1] != 0 && (size_t)a->shape[0] > SIZE_MAX / 8 / (size_t)a->shape[1])
            s = MG_FAIL(MG_ERR_FORMAT, "%s: shape is too large", path);
        else if (size - hstart - hlen != want)
            s = MG_FAIL(MG_ERR_FORMAT,
                        "%s: %zu data bytes, but the header's shape and dtype need %zu (truncated "
                        "or corrupt)",
                        path, size - hstart - hlen, want);
    }
    if (s != MG_OK) {
        munmap(map, size);
        memset(a, 0, sizeof *a);
        return s;
    }
    size_t off = hstart + hlen;
    if (off % k_itemsize[a->dtype]) { /* numpy aligns to 64; copy what another writer did not */
        size_t bytes = size - off;
        a->owned = malloc(bytes ? bytes : 1);
        if (!a->owned) {
            munmap(map, size);
            return MG_FAIL(MG_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, path);
        }
        memcpy(a->owned, b + off, bytes);
        munmap(map, size);
        a->data = a->owned;
        return MG_OK;
    }
    a->map = map;
    a->map_size = size;
    a->data = b + off;
    return MG_OK;
}

void mg_npy_adopt(mg_npy *a, mg_npy_dtype t, int ndim, const int64_t *shape, void *data) {
    memset(a, 0, sizeof *a);
    a->dtype = t;
    a->ndim = ndim;
    a->shape[0] = shape[0];
    a->shape[1] = ndim == 2 ? shape[1] : 1;
    a->data = data;
    a->owned = data;
}

void mg_npy_free(mg_npy *a) {
    if (a->map) munmap(a->map, a->map_size);
    free(a->owned);
    memset(a, 0, sizeof *a);
}
