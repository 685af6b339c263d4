/* Description JSON, cache file names and file helpers (see index_cache.h). */
#include "data/index_cache.h"

#include "core/file.h"
#include "core/md5.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Python json.dumps(indent=4) ---- */

static void put(mg_pyjson *j, const char *s, size_t n) {
    if (j->failed) return;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *t = realloc(j->text, cap);
        if (!t) {
            j->failed = true;
            return;
        }
        j->text = t, j->cap = cap;
    }
    memcpy(j->text + j->len, s, n);
    j->len += n;
    j->text[j->len] = '\0';
}
static void puts_(mg_pyjson *j, const char *s) {
    put(j, s, strlen(s));
}

void mg_pyjson_init(mg_pyjson *j) {
    memset(j, 0, sizeof *j);
}

/* Newline and indentation before the next item of the innermost container. */
static void item(mg_pyjson *j) {
    if (j->depth == 0) return;
    puts_(j, j->count[j->depth - 1]++ ? ",\n" : "\n");
    for (int i = 0; i < j->depth; i++) puts_(j, "    ");
}

static void value(mg_pyjson *j) {
    if (j->after_key)
        j->after_key = false;
    else
        item(j);
}

void mg_pyjson_begin(mg_pyjson *j, char open) {
    value(j);
    put(j, &open, 1);
    if (j->depth == MG_PYJSON_MAX_DEPTH) {
        j->failed = true;
        return;
    }
    j->count[j->depth++] = 0;
}

void mg_pyjson_end(mg_pyjson *j, char close) {
    if (j->depth == 0) {
        j->failed = true;
        return;
    }
    j->depth--;
    if (j->count[j->depth]) {
        puts_(j, "\n");
        for (int i = 0; i < j->depth; i++) puts_(j, "    ");
    }
    put(j, &close, 1);
}

static void string(mg_pyjson *j, const char *s) {
    puts_(j, "\"");
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        char esc[16];
        uint32_t cp = *p;
        int n = 1;
        if (cp >= 0x80) { /* decode UTF-8; ensure_ascii writes \uXXXX (surrogate pairs) */
            int need = cp >= 0xf0 ? 3 : cp >= 0xe0 ? 2 : cp >= 0xc0 ? 1 : -1;
            bool ok = need > 0;
            uint32_t v = need == 3 ? cp & 7 : need == 2 ? cp & 15 : cp & 31;
            for (int k = 1; ok && k <= need; k++) {
                if ((p[k] & 0xc0) != 0x80) ok = false;
                v = v << 6 | (p[k] & 0x3f);
            }
            if (ok) cp = v, n = need + 1;
            /* invalid bytes: Python's surrogateescape would give \udcXX */
            else
                cp = 0xdc00 | *p;
        }
        if (cp == '"')
            snprintf(esc, sizeof esc, "\\\"");
        else if (cp == '\\')
            snprintf(esc, sizeof esc, "\\\\");
        else if (cp == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (cp == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (cp == '\b')
            snprintf(esc, sizeof esc, "\\b");
        else if (cp == '\f')
            snprintf(esc, sizeof esc, "\\f");
        else if (cp < 0x20 || (cp >= 0x7f && cp < 0x10000)) /* outside ' '..'~' */
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        else if (cp >= 0x10000)
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                     0xdc00 + ((cp - 0x10000) & 0x3ff));
        else
            esc[0] = (char)cp, esc[1] = '\0';
        puts_(j, esc);
        p += n;
    }
    puts_(j, "\"");
}

void mg_pyjson_key(mg_pyjson *j, const char *key) {
    item(j);
    string(j, key);
    puts_(j, ": ");
    j->after_key = true;
}

void mg_pyjson_str(mg_pyjson *j, const char *s) {
    value(j);
    string(j, s);
}

void mg_pyjson_int(mg_pyjson *j, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    value(j);
    puts_(j, b);
}

void mg_pyjson_float(mg_pyjson *j, double v) {
    char b[32];
    if (isnan(v))
        snprintf(b, sizeof b, "NaN");
    else if (isinf(v))
        snprintf(b, sizeof b, v > 0 ? "Infinity" : "-Infinity");
    else
        mg_py_float_repr(v, b);
    value(j);
    puts_(j, b);
}

void mg_pyjson_null(mg_pyjson *j) {
    value(j);
    puts_(j, "null");
}

mg_status mg_pyjson_finish(mg_pyjson *j, char **text) {
    if (j->failed || j->depth != 0 || !j->text) {
        free(j->text);
        mg_pyjson_init(j);
        return MG_FAIL(MG_ERR_NOMEM, "cannot build the dataset description");
    }
    *text = j->text;
    mg_pyjson_init(j);
    return MG_OK;
}

void mg_py_float_repr(double v, char *buf) {
    if (!isfinite(v)) {
        snprintf(buf, 32, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    if (v == 0) {
        snprintf(buf, 32, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* shortest digits that read back as v */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    char *o = buf;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= 16) { /* Python's repr switches to exponent notation */
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        snprintf(o, 16, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (exp10 < 0) {
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > exp10 + 1) {
            memcpy(o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += nd - exp10 - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

/* ---- files ---- */

mg_status mg_cache_mkdirs(const char *dir) {
    return mg_file_make_dirs(dir, "the index cache directory",
                             "pass --data-cache-path DIR with write access");
}

bool mg_cache_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

mg_status mg_cache_read_text(const char *path, char **text) {
    return mg_file_read(path, text, NULL);
}

mg_status mg_cache_write_text(const char *path, const char *text) {
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return mg_file_write_atomic(path, parts, sizes, 1);
}

mg_status mg_cache_path(char *out, size_t cap, const char *base, const char *affix) {
    if (snprintf(out, cap, "%s%s", base, affix) >= (int)cap)
        return MG_FAIL(MG_ERR_IO, "index cache path is too long: %s%s", base, affix);
    return MG_OK;
}

mg_status mg_cache_base(char *out, size_t cap, const char *dir, const char *description,
                        const char *cls, const char *split, char md5[33]) {
    mg_md5_hex(description, strlen(description), md5);
    size_t dl = strlen(dir);
    const char *slash = dl && dir[dl - 1] == '/' ? "" : "/";
    if (snprintf(out, cap, "%s%s%s-%s-%s-", dir, slash, md5, cls, split) >= (int)cap)
        return MG_FAIL(MG_ERR_IO, "index cache path is too long: %s", dir);
    return MG_OK;
}
