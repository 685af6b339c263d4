/* Error reporting: every library function returns mg_status; the first failure records one
 * human-readable line (what went wrong and how to fix it) and each MG_CHECK on the way up adds a
 * frame to a trace used for debugging. main() prints the line and maps the code to an exit code.
 * Exports: mg_error_set, mg_error_message, mg_error_trace, mg_error_clear, MG_FAIL, MG_CHECK.
 * Needs: nothing. */
#ifndef MG_STATUS_H
#define MG_STATUS_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records msg (printf-style) as the current error and returns code. Returns code unchanged. */
mg_status mg_error_set(mg_status code, const char *func, const char *file, int line, const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));
/* Appends one "at func (file:line)" frame to the trace. */
void mg_error_frame(const char *func, const char *file, int line, const char *expr);
const char *mg_error_message(void); /* the one-line message of the last error, "" if none */
const char *mg_error_trace(void);   /* the frames, newline separated */
void mg_error_clear(void);
const char *mg_status_name(mg_status s);

#define MG_FAIL(code, ...) mg_error_set((code), __func__, __FILE__, __LINE__, __VA_ARGS__)

#define MG_CHECK(expr)                                                                             \
    do {                                                                                           \
        mg_status mg_check_s_ = (expr);                                                            \
        if (mg_check_s_ != MG_OK) {                                                                \
            mg_error_frame(__func__, __FILE__, __LINE__, #expr);                                   \
            return mg_check_s_;                                                                    \
        }                                                                                          \
    } while (0)

/* Same, but jumps to a cleanup label with the status stored in `st`. */
#define MG_CHECK_GOTO(expr, st, label)                                                             \
    do {                                                                                           \
        (st) = (expr);                                                                             \
        if ((st) != MG_OK) {                                                                       \
            mg_error_frame(__func__, __FILE__, __LINE__, #expr);                                   \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
