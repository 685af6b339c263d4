#include "golden_io.h"

#include "core/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'M', 'G', 'G', 'O', 'L', 'D', 'E', 'N'};
enum { VERSION = 1, NAME_CAP = 160 };

typedef struct {
    const unsigned char *p;
    size_t size, pos;
} cursor;

static int take(cursor *c, size_t n, const unsigned char **out) {
    if (c->size - c->pos < n) return 0;
    *out = c->p + c->pos;
    c->pos += n;
    return 1;
}

static int take_u32(cursor *c, uint32_t *v) {
    const unsigned char *b;
    if (!take(c, 4, &b)) return 0;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 1;
}

static int take_i64(cursor *c, int64_t *v) {
    const unsigned char *b;
    if (!take(c, 8, &b)) return 0;
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | b[i];
    *v = (int64_t)u;
    return 1;
}

/* One record at the cursor into r (r->data allocated). */
static mg_status parse_record(const char *path, int index, cursor *c, mg_golden_record *r) {
    uint32_t name_len, dtype, ndim;
    const unsigned char *name, *data;
    if (!take_u32(c, &name_len))
        return MG_FAIL(MG_ERR_FORMAT, "%s: record %d: truncated before its name", path, index);
    if (name_len == 0 || name_len >= NAME_CAP)
        return MG_FAIL(MG_ERR_FORMAT, "%s: record %d: name length %u outside 1..%d", path, index,
                       name_len, NAME_CAP - 1);
    if (!take(c, name_len, &name))
        return MG_FAIL(MG_ERR_FORMAT, "%s: record %d: truncated in its name", path, index);
    if (memchr(name, '\0', name_len))
        return MG_FAIL(MG_ERR_FORMAT, "%s: record %d: name contains a NUL byte", path, index);
    memcpy(r->name, name, name_len);
    r->name[name_len] = '\0';
    if (!take_u32(c, &dtype) || !take_u32(c, &ndim))
        return MG_FAIL(MG_ERR_FORMAT, "%s: record '%s': truncated header", path, r->name);
    if (dtype > MG_GOLDEN_U16)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: record '%s': unknown dtype %u (0 f32, 1 i32, 2 u8, 3 u16)", path,
                       r->name, dtype);
    if (ndim > 4)
        return MG_FAIL(MG_ERR_FORMAT, "%s: record '%s': %u dims (at most 4)", path, r->name, ndim);
    r->dtype = (int)dtype;
    r->ndim = (int)ndim;
    r->numel = 1;
    for (uint32_t i = 0; i < ndim; i++) {
        if (!take_i64(c, &r->shape[i]))
            return MG_FAIL(MG_ERR_FORMAT, "%s: record '%s': truncated shape", path, r->name);
        if (r->shape[i] < 0 || (r->shape[i] > 0 && r->numel > INT64_MAX / 4 / r->shape[i]))
            return MG_FAIL(MG_ERR_FORMAT, "%s: record '%s': bad dimension %lld", path, r->name,
                           (long long)r->shape[i]);
        r->numel *= r->shape[i];
    }
    static const size_t elem_size[] = {4, 4, 1, 2}; /* by dtype */
    size_t bytes = (size_t)r->numel * elem_size[dtype];
    if (!take(c, bytes, &data))
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: record '%s': needs %zu data bytes but only %zu remain (truncated?)",
                       path, r->name, bytes, c->size - (c->pos > c->size ? c->size : c->pos));
    r->data = malloc(bytes ? bytes : 1);
    if (!r->data)
        return MG_FAIL(MG_ERR_NOMEM, "%s: record '%s': cannot allocate %zu bytes", path, r->name,
                       bytes);
    memcpy(r->data, data, bytes); /* little-endian host, as make_golden.py writes */
    return MG_OK;
}

mg_status mg_golden_load(mg_golden *g, const char *path) {
    g->records = NULL;
    g->n = 0;
    char *text = NULL;
    size_t size = 0;
    MG_CHECK(mg_file_read(path, &text, &size));
    unsigned char *buf = (unsigned char *)text;
    mg_status s = MG_OK;
    cursor c = {buf, size, 0};
    const unsigned char *magic;
    uint32_t version, count;
    if (!take(&c, 8, &magic) || memcmp(magic, MAGIC, 8) != 0) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: not a golden file (magic is not MGGOLDEN)", path);
        goto fail;
    }
    if (!take_u32(&c, &version) || !take_u32(&c, &count)) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: truncated file header", path);
        goto fail;
    }
    if (version != VERSION) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: version %u, this reader knows version %d", path, version,
                    VERSION);
        goto fail;
    }
    /* A record takes at least 13 bytes (name length, 1-byte name, dtype, ndim), which bounds
     * count before anything is allocated from it. */
    if (count > (size - c.pos) / 13) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: %u records cannot fit in %zu bytes (truncated?)", path,
                    count, size);
        goto fail;
    }
    g->records = calloc(count ? count : 1, sizeof *g->records);
    if (!g->records) {
        s = MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %u records", path, count);
        goto fail;
    }
    for (uint32_t i = 0; i < count; i++) {
        g->n = (int)i + 1; /* so that mg_golden_free releases what was allocated */
        MG_CHECK_GOTO(parse_record(path, (int)i, &c, &g->records[i]), s, fail);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(g->records[j].name, g->records[i].name) == 0) {
                s = MG_FAIL(MG_ERR_FORMAT, "%s: record '%s' appears twice", path,
                            g->records[i].name);
                goto fail;
            }
    }
    if (c.pos != size) {
        s = MG_FAIL(MG_ERR_FORMAT, "%s: %zu bytes after the last record", path, size - c.pos);
        goto fail;
    }
    free(buf);
    return MG_OK;

fail:
    free(buf);
    mg_golden_free(g);
    return s;
}

const mg_golden_record *mg_golden_find(const mg_golden *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->records[i].name, name) == 0) return &g->records[i];
    return NULL;
}

void mg_golden_free(mg_golden *g) {
    for (int i = 0; i < g->n; i++) free(g->records[i].data);
    free(g->records);
    g->records = NULL;
    g->n = 0;
}

cJSON *mg_golden_json(mg_test_ctx *t, const char *path) {
    char *buf = NULL;
    MG_EXPECT_OK(mg_file_read(path, &buf, NULL));
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    MG_EXPECT(root != NULL, "%s does not parse", path);
    return root;
}
