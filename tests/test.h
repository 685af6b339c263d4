/* A small test harness. A test is a function registered at load time:
 *   MG_TEST(arena_offsets_are_aligned) { ... MG_EXPECT(cond, "fmt", ...); ... }
 * A test passes when no expectation failed. The runner (tests/unit/main.c) runs every test, or
 * those whose name contains argv[1], prints PASS/FAIL lines and ends with "N passed, N failed";
 * with MG_TEST_TIME=1 each PASS/FAIL line also ends with the test's wall and CPU seconds. */
#ifndef MG_TEST_H
#define MG_TEST_H

#include <math.h>
#include <stdio.h>

typedef struct {
    int failures;
    const char *name;
} mg_test_ctx;

typedef void (*mg_test_fn)(mg_test_ctx *t);
void mg_test_register(const char *name, mg_test_fn fn);
void mg_test_fail(mg_test_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define MG_TEST(name)                                                                              \
    static void name(mg_test_ctx *t);                                                              \
    __attribute__((constructor)) static void name##_register(void) {                               \
        mg_test_register(#name, name);                                                             \
    }                                                                                              \
    static void name(mg_test_ctx *t)

/* Records a failure with a message; the test goes on (use `return` to stop). */
#define MG_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) mg_test_fail(t, __FILE__, __LINE__, __VA_ARGS__);                             \
    } while (0)

/* Expects an mg_status call to succeed; on failure prints the library's error message. */
#define MG_EXPECT_OK(expr)                                                                         \
    do {                                                                                           \
        mg_status mg_t_s_ = (expr);                                                                \
        if (mg_t_s_ != MG_OK)                                                                      \
            mg_test_fail(t, __FILE__, __LINE__, "%s failed: %s", #expr, mg_error_message());       \
    } while (0)

/* Expects `expr` to fail with `code` and a one-line message containing `substr`. Needs the
 * library's core/status.h and <string.h>. */
#define MG_EXPECT_ERROR(expr, code, substr)                                                        \
    do {                                                                                           \
        mg_error_clear();                                                                          \
        mg_status mg_t_e_ = (expr);                                                                \
        MG_EXPECT(mg_t_e_ == (code), "%s returned %s, want %s (message: %s)", #expr,               \
                  mg_status_name(mg_t_e_), mg_status_name(code), mg_error_message());              \
        MG_EXPECT(strstr(mg_error_message(), (substr)) != NULL, "message '%s' lacks '%s'",         \
                  mg_error_message(), (substr));                                                   \
        MG_EXPECT(strchr(mg_error_message(), '\n') == NULL, "message is not one line: %s",         \
                  mg_error_message());                                                             \
    } while (0)

/* Relative error max|a-b| / max(max|b|, tiny), the normalised error used across the tests. */
double mg_test_rel_err(const float *a, const float *b, size_t n);

#endif
