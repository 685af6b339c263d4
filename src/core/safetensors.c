#include "core/safetensors.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { NAME_CAP = (int)sizeof(((mg_st_entry *)0)->name) }; /* 160: names are < 160 bytes */
static const char METADATA_KEY[] = "__metadata__";
static const double MAX_EXACT = 9007199254740992.0; /* 2^53: larger JSON numbers are inexact */

/* ---------------------------------------------------------------- shared helpers */

static int dtype_parse(const char *s, mg_dtype *out) {
    for (int d = MG_F32; d <= MG_I64; d++) {
        if (strcmp(s, mg_dtype_name((mg_dtype)d)) == 0) {
            *out = (mg_dtype)d;
            return 1;
        }
    }
    return 0;
}

static int dtype_valid(mg_dtype d) {
    return (unsigned)d <= (unsigned)MG_I64;
}

/* numel * dtype size, or 0 with *overflow set when it does not fit in size_t. */
static size_t shape_bytes(const int64_t *shape, int ndim, mg_dtype dtype, int *overflow) {
    size_t bytes = mg_dtype_size(dtype);
    *overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (__builtin_mul_overflow(bytes, (size_t)shape[i], &bytes)) {
            *overflow = 1;
            return 0;
        }
    }
    return bytes;
}

/* "[2, 3]" into buf, for messages. */
static const char *shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* 1 if j is an object whose members are all strings (safetensors' __metadata__); else 0 and
 * *bad names the first offending member (or NULL when j is not an object). */
static int metadata_valid(const cJSON *j, const char **bad) {
    *bad = NULL;
    if (!cJSON_IsObject(j)) return 0;
    for (const cJSON *c = j->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            *bad = c->string;
            return 0;
        }
    }
    return 1;
}

/* A cJSON-printed string copied into our own allocation (freed with free()). */
static char *print_json(const cJSON *j) {
    char *printed = cJSON_PrintUnformatted(j);
    if (!printed) return NULL;
    char *copy = strdup(printed);
    cJSON_free(printed);
    return copy;
}

/* ---------------------------------------------------------------- reader */

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const mg_st_entry *)a)->name, ((const mg_st_entry *)b)->name);
}

/* Data order: by begin, then end (empty tensors first), then name, so the order is total. */
static int cmp_offset(const void *a, const void *b) {
    const mg_st_entry *x = a, *y = b;
    const char *xb = x->data, *yb = y->data;
    if (xb != yb) return xb < yb ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT) || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Validates one tensor entry and fills e (data relative to base). Offsets are checked against
 * the data section here; tiling (no overlap, no hole) is checked once all entries are known. */
static mg_status parse_entry(const char *path, const cJSON *j, const char *base, size_t data_size,
                             mg_st_entry *e) {
    const char *name = j->string;
    size_t len = strlen(name);
    if (len >= (size_t)NAME_CAP)
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor name '%.48s...' is %zu bytes long (limit %d)",
                       path, name, len, NAME_CAP - 1);
    memcpy(e->name, name, len + 1);
    if (!cJSON_IsObject(j))
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", path, name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!dt || !sh || !off)
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' has no %s", path, name,
                       !dt   ? "dtype"
                       : !sh ? "shape"
                             : "data_offsets");
    if (!cJSON_IsString(dt))
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' dtype is not a string", path, name);
    if (!dtype_parse(dt->valuestring, &e->dtype))
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' has unknown or unsupported dtype '%.16s' (known: F32, "
                       "BF16, F16, I32, I64)",
                       path, name, dt->valuestring);

    if (!cJSON_IsArray(sh))
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' shape is not an array", path, name);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > MG_MAX_DIMS)
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' has %d dims (at most %d supported)", path,
                       name, ndim, MG_MAX_DIMS);
    e->ndim = ndim;
    int i = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        uint64_t v;
        if (cJSON_IsNumber(d) && d->valuedouble < 0)
            return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' has negative dimension %g", path, name,
                           d->valuedouble);
        if (!json_uint(d, &v))
            return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' shape entry %d is not an integer", path,
                           name, i);
        e->shape[i] = (int64_t)v;
    }

    uint64_t begin, end;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &begin) ||
        !json_uint(off->child->next, &end))
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' data_offsets is not a pair of non-negative integers", path,
                       name);
    if (begin > end)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed", path,
                       name, begin, end);
    if (end > data_size)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64
                       "] exceed the data section (%zu bytes)",
                       path, name, begin, end, data_size);

    int overflow;
    char sbuf[128];
    e->nbytes = shape_bytes(e->shape, ndim, e->dtype, &overflow);
    if (overflow)
        return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' shape %s of %s overflows", path, name,
                       shape_str(sbuf, sizeof sbuf, e->shape, ndim), mg_dtype_name(e->dtype));
    if (e->nbytes != end - begin)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: tensor '%s' shape %s of %s needs %zu bytes but data_offsets [%" PRIu64
                       ", %" PRIu64 "] span %" PRIu64,
                       path, name, shape_str(sbuf, sizeof sbuf, e->shape, ndim),
                       mg_dtype_name(e->dtype), e->nbytes, begin, end, end - begin);
    e->data = base + begin;
    return MG_OK;
}

/* Names unique; offsets tile [0, data_size) exactly. Sorts e into data order. */
static mg_status check_layout(const char *path, mg_st_entry *e, int n, const char *base,
                              size_t data_size) {
    qsort(e, (size_t)n, sizeof *e, cmp_name);
    for (int i = 1; i < n; i++)
        if (strcmp(e[i - 1].name, e[i].name) == 0)
            return MG_FAIL(MG_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path,
                           e[i].name);
    qsort(e, (size_t)n, sizeof *e, cmp_offset);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t begin = (size_t)((const char *)e[i].data - base), end = begin + e[i].nbytes;
        if (begin < pos)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: tensor '%s' data_offsets [%zu, %zu] overlap tensor '%s' (ends at "
                           "%zu)",
                           path, e[i].name, begin, end, e[i - 1].name, pos);
        if (begin > pos)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: bytes [%zu, %zu) of the data section belong to no tensor (before "
                           "'%s')",
                           path, pos, begin, e[i].name);
        pos = end;
    }
    if (pos != data_size)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: the data section has %zu bytes but the tensors cover only %zu", path,
                       data_size, pos);
    return MG_OK;
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

mg_status mg_safetensors_open(mg_safetensors *st, const char *path) {
    memset(st, 0, sizeof *st);
    mg_status s = MG_OK;
    void *map = MAP_FAILED;
    size_t size = 0;
    char *hdr = NULL;
    cJSON *root = NULL;
    mg_st_entry *entries = NULL;
    char *meta = NULL;
    int n = 0;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return MG_FAIL(MG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        s = MG_FAIL(MG_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    size = (size_t)sb.st_size;
    if (size < 8) {
        s = MG_FAIL(MG_ERR_FORMAT,
                    "%s: file is %zu bytes, shorter than the 8-byte header length; not a "
                    "safetensors file",
                    path, size);
        goto fail;
    }
    /* populated: the pages are mapped now (from the page cache, or read ahead in one pass)
     * rather than faulted in one at a time while the tensors are copied */
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
        goto fail;
    }

    uint64_t hlen = load_le64(map);
    if (hlen > MG_ST_MAX_HEADER) {
        s = MG_FAIL(MG_ERR_FORMAT,
                    "%s: header length %" PRIu64 " is absurd (limit %" PRIu64
                    " bytes); not a safetensors file",
                    path, hlen, MG_ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        s = MG_FAIL(MG_ERR_FORMAT,
                    "%s: header length %" PRIu64 " exceeds the file (%zu bytes); truncated?", path,
                    hlen, size);
        goto fail;
    }
    const char *text = (const char *)map + 8;
    if (memchr(text, '\0', hlen)) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: header contains a NUL byte", path);
        goto fail;
    }
    /* cJSON wants a terminated buffer; requiring the terminator right after the JSON (and
     * optional padding) rejects trailing garbage. */
    hdr = malloc(hlen + 1);
    if (!hdr) {
        s = MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %" PRIu64 " header bytes", path, hlen);
        goto fail;
    }
    memcpy(hdr, text, hlen);
    hdr[hlen] = '\0';
    const char *parse_end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, hlen + 1, &parse_end, 1);
    if (!root) {
        size_t at = parse_end && parse_end >= hdr ? (size_t)(parse_end - hdr) : 0;
        s = MG_FAIL(MG_ERR_FORMAT,
                    "%s: header is not valid JSON (error near byte %zu of %" PRIu64 ")", path, at,
                    hlen);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }

    const char *base = text + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    int count = cJSON_GetArraySize(root);
    entries = calloc(count > 0 ? (size_t)count : 1, sizeof *entries);
    if (!entries) {
        s = MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %d entries", path, count);
        goto fail;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, METADATA_KEY) == 0) {
            const char *bad;
            if (meta) {
                s = MG_FAIL(MG_ERR_FORMAT, "%s: __metadata__ appears twice", path);
                goto fail;
            }
            if (!metadata_valid(c, &bad)) {
                s = bad ? MG_FAIL(MG_ERR_FORMAT, "%s: __metadata__ value '%.64s' is not a string",
                                  path, bad)
                        : MG_FAIL(MG_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
                goto fail;
            }
            if (!(meta = print_json(c))) {
                s = MG_FAIL(MG_ERR_NOMEM, "%s: cannot copy __metadata__", path);
                goto fail;
            }
            continue;
        }
        MG_CHECK_GOTO(parse_entry(path, c, base, data_size, &entries[n]), s, fail);
        n++;
    }
    MG_CHECK_GOTO(check_layout(path, entries, n, base, data_size), s, fail);

    cJSON_Delete(root);
    free(hdr);
    close(fd);
    st->entries = entries;
    st->n = n;
    st->map = map;
    st->map_size = size;
    st->metadata_json = meta;
    return MG_OK;

fail:
    cJSON_Delete(root);
    free(hdr);
    free(entries);
    free(meta);
    if (map != MAP_FAILED) munmap(map, size);
    close(fd);
    return s;
}

const mg_st_entry *mg_safetensors_find(const mg_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    return NULL;
}

void mg_safetensors_close(mg_safetensors *st) {
    if (st->map) munmap(st->map, st->map_size);
    free(st->entries);
    free(st->metadata_json);
    memset(st, 0, sizeof *st);
}

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = 1; /* only short numeric fragments are printed this way */
        return;
    }
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped, other bytes verbatim. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            sb_put(b, esc, 2);
        } else if (*c < 0x20) {
            sb_printf(b, "\\u%04x", *c);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_puts(b, "\"");
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the caller's tensors; fills sizes[i]. */
static mg_status check_tensors(const char *path, const mg_st_tensor *t, int n, size_t *sizes) {
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !name[0] || strlen(name) >= (size_t)NAME_CAP || !strcmp(name, METADATA_KEY))
            return MG_FAIL(MG_ERR_USAGE,
                           "%s: tensor %d: name must be 1..%d bytes and not __metadata__", path, i,
                           NAME_CAP - 1);
        if (!dtype_valid(t[i].dtype))
            return MG_FAIL(MG_ERR_USAGE, "%s: tensor '%s': invalid dtype %d", path, name,
                           (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > MG_MAX_DIMS)
            return MG_FAIL(MG_ERR_USAGE, "%s: tensor '%s': ndim %d outside 0..%d", path, name,
                           t[i].ndim, MG_MAX_DIMS);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0)
                return MG_FAIL(MG_ERR_USAGE, "%s: tensor '%s': negative dimension %" PRId64, path,
                               name, t[i].shape[d]);
        int overflow;
        sizes[i] = shape_bytes(t[i].shape, t[i].ndim, t[i].dtype, &overflow);
        if (overflow) return MG_FAIL(MG_ERR_USAGE, "%s: tensor '%s': size overflows", path, name);
        if (sizes[i] && !t[i].data)
            return MG_FAIL(MG_ERR_USAGE, "%s: tensor '%s': data is NULL", path, name);
    }
    const char **names = malloc((n > 0 ? (size_t)n : 1) * sizeof *names);
    if (!names) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %d names", path, n);
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    mg_status s = MG_OK;
    for (int i = 1; i < n && s == MG_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            s = MG_FAIL(MG_ERR_USAGE, "%s: tensor name '%s' given twice", path, names[i]);
    free(names);
    return s;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static mg_status build_header(const char *path, const mg_st_tensor *t, int n, const size_t *sizes,
                              const char *metadata_json, strbuf *b) {
    sb_puts(b, "{");
    int first = 1;
    if (metadata_json) {
        cJSON *m = cJSON_Parse(metadata_json);
        const char *bad = NULL;
        mg_status s = MG_OK;
        if (!m || !metadata_valid(m, &bad))
            s = bad ? MG_FAIL(MG_ERR_USAGE, "%s: metadata value '%.64s' is not a string", path, bad)
                    : MG_FAIL(MG_ERR_USAGE, "%s: metadata must be a JSON object of string values",
                              path);
        char *printed = s == MG_OK ? print_json(m) : NULL;
        cJSON_Delete(m); /* bad pointed into m: the message was formatted above */
        if (s != MG_OK) return s;
        if (!printed) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot print metadata", path);
        sb_puts(b, "\"__metadata__\":");
        sb_puts(b, printed);
        free(printed);
        first = 0;
    }
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        if (!first) sb_puts(b, ",");
        first = 0;
        sb_json_string(b, t[i].name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", mg_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) sb_printf(b, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", offset, offset + sizes[i]);
        offset += sizes[i];
    }
    sb_puts(b, "}");
    while (b->len % 8) sb_puts(b, " ");
    if (b->oom) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot build the header", path);
    return MG_OK;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(fd, c, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Makes the rename durable. Best effort: some file systems cannot fsync a directory. */
static void fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else {
        size_t len = slash == path ? 1 : (size_t)(slash - path);
        if (len >= sizeof dir) return;
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

mg_status mg_safetensors_write(const char *path, const mg_st_tensor *tensors, int n,
                               const char *metadata_json) {
    if (!path || n < 0 || (n > 0 && !tensors))
        return MG_FAIL(MG_ERR_USAGE, "safetensors write: invalid arguments (path %s, n %d)",
                       path ? path : "NULL", n);
    mg_status s = MG_OK;
    strbuf hdr = {0};
    char *tmp = NULL;
    int fd = -1, created = 0;
    size_t *sizes = calloc(n > 0 ? (size_t)n : 1, sizeof *sizes);
    if (!sizes) return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %d sizes", path, n);
    MG_CHECK_GOTO(check_tensors(path, tensors, n, sizes), s, done);
    MG_CHECK_GOTO(build_header(path, tensors, n, sizes, metadata_json, &hdr), s, done);

    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    if (!tmp) {
        s = MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate a path", path);
        goto done;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    created = 1;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    int bad = write_all(fd, len8, 8) || write_all(fd, hdr.p, hdr.len);
    for (int i = 0; i < n && !bad; i++) bad = write_all(fd, tensors[i].data, sizes[i]);
    if (bad || fsync(fd) != 0) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        goto done;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot close: %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        s = MG_FAIL(MG_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        goto done;
    }
    created = 0; /* renamed: nothing to clean up */
    fsync_parent(path);

done:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    free(tmp);
    free(hdr.p);
    free(sizes);
    return s;
}
