/* --pipeline-model-parallel-layout (parallel/pipeline/layer_layout.h). */
#include "parallel/pipeline/layer_layout.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define FLAG     "--pipeline-model-parallel-layout"
#define MAX_TEXT 65536 /* the unrolled string's characters at most */

/* Appends n copies of s[0, len) to *out (of *used, MAX_TEXT at most). */
static mg_status put(char *out, size_t *used, const char *s, size_t len, long n) {
    for (long k = 0; k < n; k++) {
        if (*used + len >= MAX_TEXT)
            return MG_FAIL(MG_ERR_USAGE, FLAG " unrolls to more than %d characters", MAX_TEXT);
        memcpy(out + *used, s, len);
        *used += len;
    }
    out[*used] = '\0';
    return MG_OK;
}

/* The count after "*" at s (digits), and the characters it takes; 0 where none follows. */
static long repeat_at(const char *s, size_t *taken) {
    *taken = 0;
    if (s[0] != '*' || !isdigit((unsigned char)s[1])) return -1;
    char *end;
    long n = strtol(s + 1, &end, 10);
    *taken = (size_t)(end - s);
    return n;
}

/* One pass: with groups, "(...)*n" unrolled (non-empty, no ")" inside); without, "x*n". */
static mg_status unroll(const char *in, char *out, bool groups) {
    size_t used = 0, taken;
    out[0] = '\0';
    for (size_t i = 0; in[i];) {
        if (groups && in[i] == '(') {
            const char *close = strchr(in + i + 1, ')');
            long n = close && close > in + i + 1 ? repeat_at(close + 1, &taken) : -1;
            if (n >= 0) {
                MG_CHECK(put(out, &used, in + i + 1, (size_t)(close - in - i - 1), n));
                i = (size_t)(close - in) + 1 + taken;
                continue;
            }
        }
        long n = !groups && in[i + 1] ? repeat_at(in + i + 1, &taken) : -1;
        MG_CHECK(put(out, &used, in + i, 1, n >= 0 ? n : 1));
        i += 1 + (n >= 0 ? taken : 0);
    }
    return MG_OK;
}

static mg_status parse_stages(const char *text, int pp, int num_layers, mg_layer_layout *out) {
    int embeddings = 0, losses = 0, layers = 0, s = 0;
    size_t n = strlen(text);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i <= n; i++) {
        const char c = text[i];
        if (c == '|' || c == '\0') {
            if (++s > MG_LAYOUT_MAX_STAGES)
                return MG_FAIL(MG_ERR_USAGE, FLAG " has more than %d stages", MG_LAYOUT_MAX_STAGES);
            continue;
        }
        if (c == 't') {
            out->layers[s]++, layers++;
        } else if (c == 'E') {
            if (i != 0)
                return MG_FAIL(MG_ERR_USAGE,
                               FLAG ": the embedding (E) must be the first layer of the first "
                                    "stage, and once");
            embeddings++;
        } else if (c == 'L') {
            if (i != n - 1 || losses)
                return MG_FAIL(MG_ERR_USAGE,
                               FLAG ": the loss (L) must be the last layer of the last stage, and "
                                    "once");
            losses++;
        } else if (c == 'm') {
            return MG_FAIL(MG_ERR_USAGE,
                           FLAG ": m (a multi-token-prediction layer) is not supported here; "
                                "give E, t and L only");
        } else {
            return MG_FAIL(MG_ERR_USAGE,
                           FLAG ": invalid layer character '%c' in stage %d; the characters are "
                                "E (embedding), t (transformer layer), L (loss), | between stages",
                           c, s);
        }
    }
    out->n_stages = s;
    if (!embeddings || !losses)
        return MG_FAIL(MG_ERR_USAGE,
                       FLAG " must begin with the embedding (E) and end with the loss (L)");
    if (layers != num_layers)
        return MG_FAIL(MG_ERR_USAGE, FLAG " holds %d transformer layers (t), --num-layers is %d",
                       layers, num_layers);
    if (s % pp)
        return MG_FAIL(MG_ERR_USAGE,
                       "The length of pipeline_model_parallel_layout must be divisible by "
                       "pipeline_model_parallel_size (%d stages, --pipeline-model-parallel-size "
                       "%d)",
                       s, pp);
    return MG_OK;
}

mg_status mg_layer_layout_parse(const char *layout, int pp, int num_layers, mg_layer_layout *out) {
    char *a = malloc(MAX_TEXT), *b = malloc(MAX_TEXT);
    mg_status st = a && b ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory parsing " FLAG);
    size_t k = 0;
    for (size_t i = 0; st == MG_OK && layout[i] && k + 1 < MAX_TEXT; i++)
        if (layout[i] != ',' && !isspace((unsigned char)layout[i])) a[k++] = layout[i];
    if (st == MG_OK) a[k] = '\0';
    if (st == MG_OK) st = unroll(a, b, true);
    if (st == MG_OK) st = unroll(b, a, false);
    if (st == MG_OK) st = parse_stages(a, pp, num_layers, out);
    free(a);
    free(b);
    return st;
}
