/* JSON lines reader: a validating recursive-descent parser over one line that records where the
 * requested top-level values are, then decodes them. Contract in jsonl.h. */
#include "data/jsonl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char *mg_jsonl_next_line(const char *buf, size_t len, size_t *pos, size_t *line_len) {
    size_t i = *pos;
    if (i >= len) return NULL;
    const char *start = buf + i;
    const char *nl = memchr(start, '\n', len - i);
    size_t stop = nl ? (size_t)(nl - buf) : len;
    /* A lone '\r' also ends a line (Python's universal newlines); it is rare, so look for it
     * only in [i, stop). */
    const char *cr = memchr(start, '\r', stop - i);
    if (cr) {
        size_t c = (size_t)(cr - buf);
        *line_len = c - i;
        *pos = (c + 1 < len && buf[c + 1] == '\n') ? c + 2 : c + 1;
        return start;
    }
    *line_len = stop - i;
    *pos = nl ? stop + 1 : len;
    return start;
}

const char *mg_jsonl_error_text(mg_jsonl_error e) {
    switch (e) {
    case MG_JSONL_OK:
        return "ok";
    case MG_JSONL_EMPTY:
        return "empty line";
    case MG_JSONL_SYNTAX:
        return "not JSON";
    case MG_JSONL_UTF8:
        return "invalid UTF-8";
    case MG_JSONL_DEPTH:
        return "nested too deeply";
    case MG_JSONL_NOT_OBJECT:
        return "not a JSON object";
    case MG_JSONL_KEY_MISSING:
        return "key missing";
    case MG_JSONL_NOT_STRING:
        return "value is not a string (or an array of strings)";
    case MG_JSONL_SURROGATE:
        return "string holds an unpaired UTF-16 surrogate escape";
    case MG_JSONL_NOMEM:
        return "out of memory";
    }
    return "unknown error";
}

/* ---------------------------------------------------------------- parser */

typedef struct {
    const unsigned char *s, *p, *end;
    mg_jsonl_error err;
    const unsigned char *err_at;
} parser;

static int fail(parser *ps, mg_jsonl_error e) {
    if (ps->err == MG_JSONL_OK) ps->err = e, ps->err_at = ps->p;
    return 0;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* Length of the valid UTF-8 sequence at p (strict: no overlongs, no surrogates, <= U+10FFFF),
 * 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

static int reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *q = realloc(*buf, c);
    if (!q) return 0;
    *buf = q, *cap = c;
    return 1;
}

/* Whether 8 bytes hold no '"', '\\', control or non-ASCII byte (SWAR: a byte b is flagged when
 * b < 0x20, b >= 0x80, b == 0x22 or b == 0x5C). */
static int plain8(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    /* (x - ones) & ~x & high is non-zero iff x has a zero byte (no false negatives) */
    uint64_t special = ((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b) | v;
    return (special & high) == 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Parses the string at ps->p (which is '"'). With out != NULL, appends its decoded UTF-8 to
 * (*out, *out_len, *out_cap) and sets *lone when an unpaired surrogate escape occurs (Python's
 * scanner keeps those; they cannot be encoded as UTF-8). Decoded text is never longer than the
 * escaped source, so one reserve up front suffices. */
static int parse_string(parser *ps, char **out, size_t *out_len, size_t *out_cap, int *lone) {
    ps->p++; /* opening quote */
    const unsigned char *run = ps->p;
    if (out && !reserve(out, out_cap, *out_len + (size_t)(ps->end - ps->p) + 1))
        return fail(ps, MG_JSONL_NOMEM);
    char *o = out ? *out + *out_len : NULL;
#define FLUSH()                                                                                    \
    do {                                                                                           \
        if (o && ps->p > run) memcpy(o, run, (size_t)(ps->p - run)), o += ps->p - run;             \
    } while (0)
    while (ps->p < ps->end) {
        /* The hot loop: plain ASCII runs, 8 bytes per step where they are long. */
        const unsigned char *q = ps->p;
        while (ps->end - q >= 8 && plain8(q)) q += 8;
        while (q < ps->end && *q >= 0x20 && *q < 0x80 && *q != '"' && *q != '\\') q++;
        ps->p = q;
        if (q == ps->end) break;
        unsigned c = *ps->p;
        if (c == '"') {
            FLUSH();
            ps->p++;
            if (out) *out_len = (size_t)(o - *out);
            return 1;
        }
        if (c < 0x20) return fail(ps, MG_JSONL_SYNTAX); /* control character (strict=True) */
        if (c >= 0x80) {
            size_t n = utf8_len(ps->p, ps->end);
            if (!n) return fail(ps, MG_JSONL_UTF8);
            ps->p += n;
            continue;
        }
        if (c != '\\') {
            ps->p++;
            continue;
        }
        FLUSH();
        if (ps->end - ps->p < 2) return fail(ps, MG_JSONL_SYNTAX);
        unsigned e = ps->p[1], cp = 0;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, (int)e) : NULL;
        if (k) {
            if (o) *o++ = to[k - from];
            ps->p += 2;
        } else if (e == 'u') {
            if (!hex4(ps->p + 2, ps->end, &cp)) return fail(ps, MG_JSONL_SYNTAX);
            ps->p += 6;
            unsigned lo;
            if (cp >= 0xD800 && cp <= 0xDBFF && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
                ps->p[1] == 'u' && hex4(ps->p + 2, ps->end, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                ps->p += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                if (lone) *lone = 1;
                cp = 0xFFFD; /* placeholder; the caller rejects the string */
            }
            if (o) o += put_utf8(o, cp);
        } else {
            return fail(ps, MG_JSONL_SYNTAX);
        }
        run = ps->p;
    }
#undef FLUSH
    return fail(ps, MG_JSONL_SYNTAX); /* unterminated */
}

static int digits(parser *ps) {
    const unsigned char *b = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    return ps->p > b;
}

static int literal(parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0) return fail(ps, MG_JSONL_SYNTAX);
    ps->p += n;
    return 1;
}

/* Python's NUMBER_RE: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?, plus -Infinity. */
static int parse_number(parser *ps) {
    if (*ps->p == '-') {
        ps->p++;
        if (ps->p < ps->end && *ps->p == 'I') return literal(ps, "Infinity");
    }
    if (ps->p >= ps->end) return fail(ps, MG_JSONL_SYNTAX);
    if (*ps->p == '0')
        ps->p++;
    else if (!digits(ps))
        return fail(ps, MG_JSONL_SYNTAX);
    /* An incomplete fraction or exponent ends the number before it ("1." parses 1, then the
     * '.' is extra data), so failing here or at the caller gives the same verdict. */
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!digits(ps)) return fail(ps, MG_JSONL_SYNTAX);
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (!digits(ps)) return fail(ps, MG_JSONL_SYNTAX);
    }
    return 1;
}

static int parse_value(parser *ps, int depth);

static int parse_array(parser *ps, int depth) {
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') return ps->p++, 1;
    for (;;) {
        if (!parse_value(ps, depth + 1)) return 0;
        skip_ws(ps);
        if (ps->p >= ps->end) return fail(ps, MG_JSONL_SYNTAX);
        if (*ps->p == ']') return ps->p++, 1;
        if (*ps->p != ',') return fail(ps, MG_JSONL_SYNTAX);
        ps->p++;
        skip_ws(ps);
    }
}

/* A member list; with doc != NULL (the top level) each key is compared with the wanted keys and
 * the span of a wanted value recorded in (vbeg, vend) — the last occurrence wins, as in a dict. */
typedef struct {
    mg_jsonl_doc *doc;
    const char *const *keys;
    int nkeys;
    const unsigned char **vbeg, **vend;
} wanted;

static int parse_object(parser *ps, int depth, const wanted *w) {
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') return ps->p++, 1;
    for (;;) {
        if (ps->p >= ps->end || *ps->p != '"') return fail(ps, MG_JSONL_SYNTAX);
        int match = -1;
        if (w) {
            size_t klen = 0;
            if (!parse_string(ps, &w->doc->scratch, &klen, &w->doc->scratch_cap, NULL)) return 0;
            for (int k = 0; k < w->nkeys && match < 0; k++)
                if (strlen(w->keys[k]) == klen && memcmp(w->keys[k], w->doc->scratch, klen) == 0)
                    match = k;
        } else if (!parse_string(ps, NULL, NULL, NULL, NULL)) {
            return 0;
        }
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return fail(ps, MG_JSONL_SYNTAX);
        ps->p++;
        skip_ws(ps);
        const unsigned char *b = ps->p;
        if (!parse_value(ps, depth + 1)) return 0;
        if (match >= 0) w->vbeg[match] = b, w->vend[match] = ps->p;
        skip_ws(ps);
        if (ps->p >= ps->end) return fail(ps, MG_JSONL_SYNTAX);
        if (*ps->p == '}') return ps->p++, 1;
        if (*ps->p != ',') return fail(ps, MG_JSONL_SYNTAX);
        ps->p++;
        skip_ws(ps);
    }
}

static int parse_value(parser *ps, int depth) {
    if (depth > MG_JSONL_MAX_DEPTH) return fail(ps, MG_JSONL_DEPTH);
    if (ps->p >= ps->end) return fail(ps, MG_JSONL_SYNTAX);
    switch (*ps->p) {
    case '"':
        return parse_string(ps, NULL, NULL, NULL, NULL);
    case '{':
        return parse_object(ps, depth, NULL);
    case '[':
        return parse_array(ps, depth);
    case 't':
        return literal(ps, "true");
    case 'f':
        return literal(ps, "false");
    case 'n':
        return literal(ps, "null");
    case 'N':
        return literal(ps, "NaN");
    case 'I':
        return literal(ps, "Infinity");
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps);
        if (*ps->p >= 0x80 && !utf8_len(ps->p, ps->end)) return fail(ps, MG_JSONL_UTF8);
        return fail(ps, MG_JSONL_SYNTAX);
    }
}

/* ---------------------------------------------------------------- extraction */

static int add_string(mg_jsonl_doc *doc, parser *ps) {
    if (doc->nstrs == doc->strs_cap) {
        size_t c = doc->strs_cap ? doc->strs_cap * 2 : 16;
        size_t *a = realloc(doc->str_off, c * sizeof *a);
        if (!a) return fail(ps, MG_JSONL_NOMEM);
        doc->str_off = a;
        size_t *b = realloc(doc->str_len, c * sizeof *b);
        if (!b) return fail(ps, MG_JSONL_NOMEM);
        doc->str_len = b, doc->strs_cap = c;
    }
    size_t off = doc->text_len;
    int lone = 0;
    if (!parse_string(ps, &doc->text, &doc->text_len, &doc->text_cap, &lone)) return 0;
    if (lone) {
        ps->err = MG_JSONL_SURROGATE;
        return 0;
    }
    doc->str_off[doc->nstrs] = off, doc->str_len[doc->nstrs] = doc->text_len - off;
    doc->nstrs++;
    return 1;
}

/* Decodes the already validated value at [b, e): a string, or an array of strings. */
static mg_jsonl_error extract_value(mg_jsonl_doc *doc, parser *ps, const unsigned char *b,
                                    const unsigned char *e) {
    ps->p = b, ps->end = e, ps->err = MG_JSONL_OK;
    if (*b == '"') return add_string(doc, ps) ? MG_JSONL_OK : ps->err;
    if (*b != '[') return MG_JSONL_NOT_STRING;
    ps->p++;
    for (;;) {
        skip_ws(ps);
        if (*ps->p == ']') return MG_JSONL_OK; /* the span was validated: no bounds trouble */
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p != '"') return MG_JSONL_NOT_STRING;
        if (!add_string(doc, ps)) return ps->err;
    }
}

mg_jsonl_error mg_jsonl_extract(mg_jsonl_doc *doc, const char *line, size_t len,
                                const char *const *keys, int nkeys) {
    doc->text_len = 0, doc->nstrs = 0, doc->err_col = 0, doc->err_key = -1;
    if (nkeys < 0 || nkeys > MG_JSONL_MAX_KEYS) return MG_JSONL_NOMEM;
    parser ps = {(const unsigned char *)line, (const unsigned char *)line,
                 (const unsigned char *)line + len, MG_JSONL_OK, NULL};
    skip_ws(&ps);
    if (ps.p == ps.end) return MG_JSONL_EMPTY;
    const unsigned char *vbeg[MG_JSONL_MAX_KEYS] = {0}, *vend[MG_JSONL_MAX_KEYS] = {0};
    wanted w = {doc, keys, nkeys, vbeg, vend};
    int ok, is_object = *ps.p == '{';
    if (is_object)
        ok = parse_object(&ps, 1, &w);
    else
        ok = parse_value(&ps, 1);
    if (ok) {
        skip_ws(&ps);
        if (ps.p != ps.end) ok = fail(&ps, MG_JSONL_SYNTAX); /* "Extra data" */
    }
    if (!ok) {
        doc->err_col = (size_t)(ps.err_at - ps.s);
        return ps.err;
    }
    if (!is_object) return MG_JSONL_NOT_OBJECT;
    for (int k = 0; k < nkeys; k++) {
        doc->err_key = k;
        if (!vbeg[k]) return MG_JSONL_KEY_MISSING;
        doc->err_col = (size_t)(vbeg[k] - ps.s);
        doc->key_first[k] = doc->nstrs;
        mg_jsonl_error e = extract_value(doc, &ps, vbeg[k], vend[k]);
        if (e != MG_JSONL_OK) return e;
        doc->key_count[k] = doc->nstrs - doc->key_first[k];
    }
    doc->err_key = -1, doc->err_col = 0;
    return MG_JSONL_OK;
}

void mg_jsonl_doc_free(mg_jsonl_doc *doc) {
    free(doc->text), free(doc->str_off), free(doc->str_len), free(doc->scratch);
    memset(doc, 0, sizeof *doc);
}
