/* mg_config <-> JSON, keyed by field name (the flag table's `key`). Written by hand so doubles get
 * %.17g and integers their exact decimal text; read with cJSON. Integers are limited to ±2^53
 * (the parser enforces it for int64 flags), so cJSON's double holds every value exactly. */
#include "config/flags.h"
#include "config/flags_table.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MG_JSON_INT_MAX 9007199254740992.0 /* 2^53 */

static void write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

mg_status mg_config_to_json(const mg_config *c, char **json_out) {
    *json_out = NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the config JSON");
    mg_status st = MG_OK;
    const char *sep = "{\n";
    for (int i = 0; i < mg_flag_count && st == MG_OK; i++) {
        const mg_flag_spec *fl = &mg_flag_table[i];
        if (!fl->key) continue;
        const void *p = mg_flag_cfield(c, fl);
        fprintf(f, "%s  \"%s\": ", sep, fl->key);
        sep = ",\n";
        switch (fl->kind) {
        case MG_FLAG_INT:
            fprintf(f, "%d", *(const int *)p);
            break;
        case MG_FLAG_INT64:
            fprintf(f, "%" PRId64, *(const int64_t *)p);
            break;
        case MG_FLAG_BOOL:
            fputs(*(const bool *)p ? "true" : "false", f);
            break;
        case MG_FLAG_STRING:
        case MG_FLAG_STRING_LIST:
            write_string(f, (const char *)p);
            break;
        case MG_FLAG_DOUBLE:
            if (!isfinite(*(const double *)p))
                st = MG_FAIL(MG_ERR_NUMERIC, "config field %s is %g, which JSON cannot hold",
                             fl->key, *(const double *)p);
            else
                fprintf(f, "%.17g", *(const double *)p);
            break;
        case MG_FLAG_ENUM: {
            int v = *(const int *)p, n = 0;
            while (fl->choices[n]) n++;
            if (v < 0 || v >= n)
                st = MG_FAIL(MG_ERR_INTERNAL, "config field %s holds %d, not a valid choice",
                             fl->key, v);
            else
                write_string(f, fl->choices[v]);
            break;
        }
        case MG_FLAG_STRING_REF: /* subcommand tables only */
            st = MG_FAIL(MG_ERR_INTERNAL, "config field %s is not an mg_config field", fl->key);
            break;
        }
    }
    fputs("\n}\n", f);
    if (fclose(f) != 0 || !buf)
        st = st ? st : MG_FAIL(MG_ERR_NOMEM, "cannot write the config JSON");
    if (st != MG_OK) {
        free(buf);
        return st;
    }
    *json_out = buf;
    return MG_OK;
}

static const mg_flag_spec *find_key(const char *key) {
    for (int i = 0; i < mg_flag_count; i++)
        if (mg_flag_table[i].key && !strcmp(mg_flag_table[i].key, key)) return &mg_flag_table[i];
    return NULL;
}

static mg_status read_integer(const cJSON *item, double lo, double hi, double *out) {
    double v = item->valuedouble;
    if (!cJSON_IsNumber(item) || v != floor(v) || v < lo || v > hi)
        return MG_FAIL(MG_ERR_FORMAT, "config JSON: '%s' must be an integer in [%.17g, %.17g]",
                       item->string, lo, hi);
    *out = v;
    return MG_OK;
}

static mg_status read_field(mg_config *c, const mg_flag_spec *fl, const cJSON *item) {
    void *p = mg_flag_field(c, fl);
    double v;
    switch (fl->kind) {
    case MG_FLAG_INT:
        MG_CHECK(read_integer(item, INT_MIN, INT_MAX, &v));
        *(int *)p = (int)v;
        return MG_OK;
    case MG_FLAG_INT64:
        MG_CHECK(read_integer(item, -MG_JSON_INT_MAX, MG_JSON_INT_MAX, &v));
        *(int64_t *)p = (int64_t)v;
        return MG_OK;
    case MG_FLAG_DOUBLE:
        if (!cJSON_IsNumber(item))
            return MG_FAIL(MG_ERR_FORMAT, "config JSON: '%s' must be a number", item->string);
        *(double *)p = item->valuedouble;
        return MG_OK;
    case MG_FLAG_BOOL:
        if (!cJSON_IsBool(item))
            return MG_FAIL(MG_ERR_FORMAT, "config JSON: '%s' must be true or false", item->string);
        *(bool *)p = cJSON_IsTrue(item);
        return MG_OK;
    case MG_FLAG_STRING:
    case MG_FLAG_STRING_LIST:
        if (!cJSON_IsString(item) || strlen(item->valuestring) >= fl->size)
            return MG_FAIL(MG_ERR_FORMAT, "config JSON: '%s' must be a string of at most %zu bytes",
                           item->string, fl->size - 1);
        memset(p, 0, fl->size);
        memcpy(p, item->valuestring, strlen(item->valuestring));
        return MG_OK;
    case MG_FLAG_ENUM:
        for (int i = 0; cJSON_IsString(item) && fl->choices[i]; i++)
            if (!strcmp(item->valuestring, fl->choices[i])) {
                *(int *)p = i;
                return MG_OK;
            }
        return MG_FAIL(MG_ERR_FORMAT, "config JSON: '%s' must be one of the %s choices",
                       item->string, fl->name);
    case MG_FLAG_STRING_REF: /* subcommand tables only */
        break;
    }
    return MG_FAIL(MG_ERR_INTERNAL, "flag %s has an unknown kind", fl->name);
}

mg_status mg_config_from_cjson(mg_config *c, const struct cJSON *obj) {
    if (!cJSON_IsObject(obj))
        return MG_FAIL(MG_ERR_FORMAT, "config JSON must be an object {\"num_layers\": ...}");
    mg_config tmp = *c;
    for (const cJSON *item = obj->child; item; item = item->next) {
        const mg_flag_spec *fl = find_key(item->string);
        if (!fl)
            return MG_FAIL(MG_ERR_FORMAT,
                           "config JSON has unknown key '%s'; it was written by another version "
                           "or edited: remove the key",
                           item->string);
        MG_CHECK(read_field(&tmp, fl, item));
    }
    *c = tmp;
    return MG_OK;
}

mg_status mg_config_from_json(mg_config *c, const char *json) {
    if (!json) return MG_FAIL(MG_ERR_FORMAT, "config JSON: no text given");
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        return MG_FAIL(MG_ERR_FORMAT, "config JSON is malformed near '%.20s'", at ? at : "");
    }
    mg_status st = mg_config_from_cjson(c, root);
    cJSON_Delete(root);
    return st;
}
