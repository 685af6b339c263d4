#include "core/env.h"

#include <stdlib.h>
#include <string.h>

enum { MG_ENV_CACHE = 32 };
static struct {
    const char *name;
    const char *value; /* NULL when unset */
} g_cache[MG_ENV_CACHE];
static int g_cached;

static const char *lookup(const char *name) {
    for (int i = 0; i < g_cached; i++)
        if (strcmp(g_cache[i].name, name) == 0) return g_cache[i].value;
    const char *v = getenv(name);
    if (g_cached < MG_ENV_CACHE) {
        g_cache[g_cached].name = name;
        g_cache[g_cached].value = v;
        g_cached++;
    }
    return v;
}

int mg_env_int(const char *name, int fallback) {
    const char *v = lookup(name);
    if (!v || !*v) return fallback;
    char *end;
    long x = strtol(v, &end, 10);
    return *end ? fallback : (int)x;
}

const char *mg_env_str(const char *name, const char *fallback) {
    const char *v = lookup(name);
    return v ? v : fallback;
}

void mg_env_forget(void) {
    g_cached = 0;
}
