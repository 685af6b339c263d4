#include "core/log.h"

#include "core/env.h"

#include <stdarg.h>
#include <stdio.h>

static int g_rank = 0, g_world = 1;

void mg_log_init(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size > 0 ? world_size : 1;
}
int mg_log_rank(void) { return g_rank; }
int mg_log_world(void) { return g_world; }
bool mg_log_is_logging_rank(void) { return g_rank == g_world - 1; }

static int g_level = -1; /* mg_log_set_level's; -1: MG_LOG_LEVEL's */
void mg_log_set_level(int level) { g_level = level; }
static int level(void) { return g_level >= 0 ? g_level : mg_env_int("MG_LOG_LEVEL", 1); }

static void emit(FILE *f, const char *prefix, const char *fmt, va_list ap) {
    if (g_world > 1) fprintf(f, "[rank %d] ", g_rank);
    if (prefix) fputs(prefix, f);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}

#define MG_LOG_BODY(cond, stream, prefix)                                                          \
    do {                                                                                           \
        if (!(cond)) return;                                                                       \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        emit(stream, prefix, fmt, ap);                                                             \
        va_end(ap);                                                                                \
    } while (0)

void mg_log_info(const char *fmt, ...) {
    MG_LOG_BODY(level() >= 1 && (g_rank == 0 || mg_env_int("MG_LOG_ALL", 0)), stdout, NULL);
}
void mg_log_last(const char *fmt, ...) {
    MG_LOG_BODY(level() >= 1 && (mg_log_is_logging_rank() || mg_env_int("MG_LOG_ALL", 0)), stdout,
                NULL);
}
void mg_log_self(bool self, const char *fmt, ...) {
    MG_LOG_BODY(level() >= 1 && (self || mg_env_int("MG_LOG_ALL", 0)), stdout, NULL);
}
void mg_log_warn(const char *fmt, ...) { MG_LOG_BODY(level() >= 1, stderr, "warning: "); }
void mg_log_error(const char *fmt, ...) { MG_LOG_BODY(1, stderr, "error: "); }
void mg_log_debug(const char *fmt, ...) { MG_LOG_BODY(level() >= 2, stderr, "debug: "); }
