/* Runs every registered unit test (or those whose name contains argv[1]). With MG_TEST_TIME set
 * (and not "0") each PASS/FAIL line ends with the test's wall and process CPU time (all threads),
 * " (1.234 s, cpu 2.345 s)"; the scripts that parse the output (tests/run.sh, tests/cuda/run.sh,
 * tests/dist/lib.sh) read only the line's start. */
#include "test.h"

#include "core/clock.h"
#include "core/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_TESTS = 1024 };
static struct {
    const char *name;
    mg_test_fn fn;
} g_tests[MAX_TESTS];
static int g_count;

void mg_test_register(const char *name, mg_test_fn fn) {
    if (g_count < MAX_TESTS) {
        g_tests[g_count].name = name;
        g_tests[g_count].fn = fn;
        g_count++;
    }
}

void mg_test_fail(mg_test_ctx *t, const char *file, int line, const char *fmt, ...) {
    t->failures++;
    if (t->failures > 5) return; /* keep the report short */
    fprintf(stderr, "  %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

double mg_test_rel_err(const float *a, const float *b, size_t n) {
    double maxdiff = 0, maxref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)b[i]) > maxref) maxref = fabs((double)b[i]);
    }
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *timing = getenv("MG_TEST_TIME");
    bool timed = timing && *timing && strcmp(timing, "0") != 0;
    int passed = 0, failed = 0;
    for (int i = 0; i < g_count; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        mg_test_ctx ctx = {0, g_tests[i].name};
        mg_error_clear();
        double t0 = mg_clock_seconds();
        clock_t c0 = clock();
        g_tests[i].fn(&ctx);
        printf("%s %s", ctx.failures ? "FAIL" : "PASS", g_tests[i].name);
        if (timed)
            printf(" (%.3f s, cpu %.3f s)", mg_clock_seconds() - t0,
                   (double)(clock() - c0) / CLOCKS_PER_SEC);
        printf("\n");
        ctx.failures ? failed++ : passed++;
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
