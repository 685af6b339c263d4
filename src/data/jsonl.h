/* JSON lines as Megatron's tools/preprocess_data.py reads them: the file is split into lines the
 * way Python's text mode does (universal newlines: "\n", "\r\n" or a lone "\r" ends a line), each
 * line is parsed as json.loads would (RFC 8259 plus NaN/Infinity/-Infinity, control characters
 * rejected inside strings, the last of duplicate keys wins, at most MG_JSONL_MAX_DEPTH nesting)
 * and the values of the requested keys are extracted, decoded to UTF-8.
 *
 * A value is a string (one text) or, as Megatron accepts from --split-sentences output, an array
 * of strings (one text per sentence). Anything else, a missing key, a line that is not a JSON
 * object, invalid UTF-8, or a string holding an unpaired UTF-16 surrogate escape (which Python
 * decodes but cannot encode for the tokenizer) makes the line invalid: an error code and the byte
 * column where it was found, never a crash (the parser is fuzzed).
 *
 * Why not cJSON: it stops strings at "\u0000" and keeps the first of duplicate keys, and
 * preprocess output must be byte-identical to Megatron's for every line Python accepts.
 *
 * Exports: mg_jsonl_next_line, mg_jsonl_doc, mg_jsonl_extract, mg_jsonl_error_text.
 * Needs: nothing. */
#ifndef MG_DATA_JSONL_H
#define MG_DATA_JSONL_H

#include <stddef.h>

enum { MG_JSONL_MAX_DEPTH = 512, MG_JSONL_MAX_KEYS = 64 };

typedef enum {
    MG_JSONL_OK = 0,
    MG_JSONL_EMPTY,       /* blank line */
    MG_JSONL_SYNTAX,      /* not JSON */
    MG_JSONL_UTF8,        /* invalid UTF-8 */
    MG_JSONL_DEPTH,       /* nested deeper than MG_JSONL_MAX_DEPTH */
    MG_JSONL_NOT_OBJECT,  /* valid JSON, but not an object */
    MG_JSONL_KEY_MISSING, /* a requested key is absent */
    MG_JSONL_NOT_STRING,  /* a requested value is not a string or an array of strings */
    MG_JSONL_SURROGATE,   /* a requested string holds an unpaired \ud800-\udfff escape */
    MG_JSONL_NOMEM,       /* allocation failed (not the line's fault) */
} mg_jsonl_error;

/* The next line of buf[*pos, len): returns its start, sets *line_len (terminator excluded) and
 * advances *pos past the terminator. Returns NULL at the end of the buffer. */
const char *mg_jsonl_next_line(const char *buf, size_t len, size_t *pos, size_t *line_len);

/* Extracted texts of one line; reuse one per thread across lines, free with mg_jsonl_doc_free. */
typedef struct {
    char *text; /* decoded UTF-8 of every extracted string, back to back (may contain NUL) */
    size_t text_len, text_cap;
    size_t *str_off, *str_len; /* (nstrs) each string's place in text */
    size_t nstrs, strs_cap;
    size_t key_first[MG_JSONL_MAX_KEYS], key_count[MG_JSONL_MAX_KEYS]; /* strings of key k */
    /* where the error was found (byte column, 0-based) and which key it concerns (-1: none) */
    size_t err_col;
    int err_key;
    char *scratch; /* a decoded object key */
    size_t scratch_cap;
} mg_jsonl_doc;

/* Parses line[0, len) and extracts keys[0..nkeys) (nkeys <= MG_JSONL_MAX_KEYS). */
mg_jsonl_error mg_jsonl_extract(mg_jsonl_doc *doc, const char *line, size_t len,
                                const char *const *keys, int nkeys);
void mg_jsonl_doc_free(mg_jsonl_doc *doc);
const char *mg_jsonl_error_text(mg_jsonl_error e); /* "not JSON", "key missing", ... */

#endif
