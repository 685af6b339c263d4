/* Split and blend parsing, normalisation and the blending indices (see blend.h). */
#include "data/blend.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const mg_split_names[MG_SPLIT_COUNT] = {"train", "valid", "test"};

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

double mg_np_sum(const double *a, int64_t n) {
    if (n < 8) {
        double res = -0.0; /* numpy starts from -0.0 so that a sum of -0.0 stays -0.0 */
        for (int64_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) { /* numpy's PW_BLOCKSIZE: eight accumulators, then the tail */
        double r[8];
        for (int k = 0; k < 8; k++) r[k] = a[k];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return mg_np_sum(a, n2) + mg_np_sum(a + n2, n - n2);
}

void mg_normalize(const double *w, int n, double *out) {
    double s = mg_np_sum(w, n);
    for (int i = 0; i < n; i++) out[i] = w[i] / s;
}

int64_t mg_blend_dataset_size(int64_t target, double weight, double surplus) {
    double first = ceil((double)target * weight);
    return (int64_t)ceil(first * (1.0 + surplus));
}

/* ---- --split ---- */

/* Python's float() on a run of [.0-9]: digits with at most one '.', at least one digit. */
static bool split_number(const char *s, size_t len, double *out) {
    int dots = 0, digits = 0;
    for (size_t i = 0; i < len; i++) s[i] == '.' ? dots++ : digits++;
    if (dots > 1 || digits == 0) return false;
    char buf[64];
    if (len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    *out = strtod(buf, NULL);
    return true;
}

mg_status mg_split_parse(mg_split *s, const char *text) {
    double v[MG_SPLIT_COUNT] = {0, 0, 0};
    int n = 0;
    for (const char *p = text; *p;) {
        if (!(isdigit((unsigned char)*p) || *p == '.')) {
            p++;
            continue;
        }
        size_t len = strspn(p, ".0123456789");
        double x;
        if (!split_number(p, len, &x))
            return USAGE("--split '%s': '%.*s' is not a number; write three weights such as "
                         "969,30,1",
                         text, (int)len, p);
        if (n == MG_SPLIT_COUNT)
            return USAGE("--split '%s' has more than three weights; write train,valid,test such "
                         "as 969,30,1",
                         text);
        v[n++] = x;
        p += len;
    }
    double sum = mg_np_sum(v, MG_SPLIT_COUNT);
    if (!(sum > 0) || !isfinite(sum))
        return USAGE("--split '%s' gives no data to any split (the weights sum to %g); write "
                     "weights such as 969,30,1",
                     text, sum);
    mg_split r;
    memset(&r, 0, sizeof r);
    mg_normalize(v, MG_SPLIT_COUNT, r.vector);
    /* convert_split_vector_to_split_matrix with vector_b == vector_a */
    double e[MG_SPLIT_COUNT + 1];
    e[0] = 0;
    for (int i = 0; i < MG_SPLIT_COUNT; i++) e[i + 1] = e[i] + r.vector[i];
    for (int i = 0; i < MG_SPLIT_COUNT; i++) {
        r.present[i] = !(e[i + 1] <= e[i]);
        r.matrix[i][0] = e[i];
        r.matrix[i][1] = e[i + 1];
    }
    *s = r;
    return MG_OK;
}

void mg_split_range(const mg_split *s, int i, int64_t n, int64_t *begin, int64_t *end) {
    if (!s->present[i]) {
        *begin = *end = 0;
        return;
    }
    /* int(round(x * float(n))): Python rounds half to even, as rint in the default mode */
    *begin = (int64_t)rint(s->matrix[i][0] * (double)n);
    *end = (int64_t)rint(s->matrix[i][1] * (double)n);
    if (*end < *begin) *end = *begin;
}

/* ---- --data-path ---- */

/* Python's float(): optional sign, inf/infinity/nan, or a decimal with optional fraction and
 * exponent where single underscores may separate digits. */
static bool py_float(const char *s, double *out) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    const char *specials[] = {"inf", "infinity", "nan"};
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(p, specials[i])) {
            *out = strtod(s, NULL);
            return true;
        }
    char buf[128];
    size_t n = 0;
    int digits = 0;
    bool dot = false, exp = false;
    for (; *p; p++) {
        if (n + 2 >= sizeof buf) return false;
        if (isdigit((unsigned char)*p)) {
            buf[n++] = *p, digits++;
        } else if (*p == '_') {
            if (p == s || !isdigit((unsigned char)p[-1]) || !isdigit((unsigned char)p[1]))
                return false;
        } else if (*p == '.' && !dot && !exp) {
            buf[n++] = *p, dot = true;
        } else if ((*p == 'e' || *p == 'E') && !exp && digits) {
            buf[n++] = 'e', exp = true, digits = 0;
            if (p[1] == '+' || p[1] == '-') buf[n++] = *++p;
        } else {
            return false;
        }
    }
    if (!digits) return false;
    buf[n] = '\0';
    double v = strtod(buf, NULL);
    *out = (*s == '-') ? -v : v;
    return true;
}

void mg_blend_free(mg_blend *b) {
    for (int i = 0; i < b->n && b->prefixes; i++) free(b->prefixes[i]);
    free(b->prefixes);
    free(b->weights);
    memset(b, 0, sizeof *b);
}

mg_status mg_blend_parse(mg_blend *out, const char *data_path) {
    memset(out, 0, sizeof *out);
    /* split on whitespace */
    int cap = 8, n = 0;
    char **tok = malloc(sizeof *tok * (size_t)cap);
    if (!tok) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blend");
    mg_status st = MG_OK;
    for (const char *p = data_path; *p;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        size_t len = strcspn(p, " \t\n\r\f\v");
        if (n == cap) {
            char **t = realloc(tok, sizeof *tok * (size_t)(cap *= 2));
            if (!t) {
                st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blend");
                break;
            }
            tok = t;
        }
        tok[n] = strndup(p, len);
        if (!tok[n]) {
            st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blend");
            break;
        }
        n++;
        p += len;
    }
    mg_blend b = {.n = n, .prefixes = tok, .weights = NULL};
    if (st != MG_OK) goto fail;
    if (n == 0) {
        st = USAGE("--data-path needs a dataset prefix (or weighted pairs such as 0.3 A 0.7 B)");
        goto fail;
    }
    double x;
    if (n % 2 == 1) {
        if (n > 1 && py_float(tok[0], &x)) {
            st = USAGE("--data-path has %d entries starting with the weight '%s': a weighted "
                       "blend needs WEIGHT PREFIX pairs (e.g. 0.3 A 0.7 B)",
                       n, tok[0]);
            goto fail;
        }
        *out = b;
        return MG_OK;
    }
    int numbers = 0;
    for (int i = 0; i < n; i += 2) numbers += py_float(tok[i], &x);
    if (numbers == 0) { /* every weight position is a prefix: an unweighted list */
        *out = b;
        return MG_OK;
    }
    for (int i = 0; i < n; i += 2)
        if (!py_float(tok[i], &x)) {
            st = USAGE("--data-path blend weight '%s' (entry %d) is not a number; write WEIGHT "
                       "PREFIX pairs (e.g. 0.3 A 0.7 B) or prefixes only",
                       tok[i], i + 1);
            goto fail;
        }
    int m = n / 2;
    double *w = malloc(sizeof *w * (size_t)m);
    char **pre = malloc(sizeof *pre * (size_t)m);
    if (!w || !pre) {
        free(w), free(pre);
        st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blend");
        goto fail;
    }
    for (int i = 0; i < m; i++) {
        py_float(tok[2 * i], &w[i]);
        pre[i] = tok[2 * i + 1];
        free(tok[2 * i]);
    }
    free(tok);
    b = (mg_blend){.n = m, .prefixes = pre, .weights = w};
    mg_normalize(w, m, w);
    for (int i = 0; i < m; i++)
        if (!(w[i] > 0) || !isfinite(w[i])) {
            st = USAGE("--data-path blend weights must be positive numbers; the weight of '%s' "
                       "normalises to %g",
                       pre[i], w[i]);
            goto fail;
        }
    *out = b;
    return MG_OK;
fail:
    mg_blend_free(&b);
    return st;
}

/* ---- blending indices (helpers.cpp) ---- */

mg_status mg_blend_build_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                                 int64_t *dataset_sample_index) {
    int64_t *current = calloc((size_t)n, sizeof *current);
    if (!current) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blending counters");
    for (int64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = 0;
        double best_err = weights[0] * sd - (double)current[0];
        for (int d = 1; d < n; d++) {
            double err = weights[d] * sd - (double)current[d];
            if (err > best_err) best_err = err, best = d;
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = current[best]++;
    }
    free(current);
    return MG_OK;
}

mg_status mg_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                    int64_t *dataset_sample_index) {
    int64_t total = 0;
    for (int d = 0; d < n; d++) total += sizes[d];
    int64_t *count = calloc((size_t)n, sizeof *count);
    double *w = malloc(sizeof *w * (size_t)n);
    bool *spent = calloc((size_t)n, sizeof *spent);
    mg_status st = MG_OK;
    if (!count || !w || !spent) st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate the blending counters");
    if (st == MG_OK) {
        for (int d = 0; d < n; d++) w[d] = (double)sizes[d] / (double)total;
        for (int64_t s = 0; s < total; s++) {
            double sd = s > 1 ? (double)s : 1.0;
            int best = -1;
            double best_err = -INFINITY;  /* std::numeric_limits<double>::lowest() */
            for (int d = 0; d < n; d++) { /* the unspent set, in ascending order */
                if (spent[d]) continue;
                double err = w[d] * sd - (double)count[d];
                if (best < 0 || err > best_err) best_err = err, best = d;
            }
            dataset_index[s] = (int16_t)best;
            dataset_sample_index[s] = count[best]++;
            if (count[best] == sizes[best]) spent[best] = true;
        }
    }
    free(count), free(w), free(spent);
    return st;
}
