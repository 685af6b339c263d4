#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_message[1024];
static _Thread_local char g_trace[4096];

mg_status mg_error_set(mg_status code, const char *func, const char *file, int line, const char *fmt,
                       ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_message, sizeof g_message, fmt, ap);
    va_end(ap);
    snprintf(g_trace, sizeof g_trace, "  raised in %s (%s:%d)\n", func, file, line);
    return code;
}

void mg_error_frame(const char *func, const char *file, int line, const char *expr) {
    size_t used = strlen(g_trace);
    if (used + 1 < sizeof g_trace)
        snprintf(g_trace + used, sizeof g_trace - used, "  at %s (%s:%d): %s\n", func, file, line,
                 expr);
}

const char *mg_error_message(void) { return g_message; }
const char *mg_error_trace(void) { return g_trace; }

void mg_error_clear(void) {
    g_message[0] = '\0';
    g_trace[0] = '\0';
}

const char *mg_status_name(mg_status s) {
    switch (s) {
    case MG_OK: return "ok";
    case MG_ERR_USAGE: return "usage error";
    case MG_ERR_IO: return "I/O error";
    case MG_ERR_FORMAT: return "format error";
    case MG_ERR_NOMEM: return "out of memory";
    case MG_ERR_UNSUPPORTED: return "unsupported";
    case MG_ERR_NUMERIC: return "numeric error";
    case MG_ERR_INTERNAL: return "internal error";
    case MG_ERR_COMM: return "communication error";
    }
    return "unknown error";
}
