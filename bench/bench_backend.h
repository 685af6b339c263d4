/* What the C benchmarks that drive a backend share (op_bench.c, grouped_gemm_bench.c,
 * fp8_cast_bench.c): a failure ends the program with the library's error. Define BENCH_NAME (the
 * program's name, for its messages) before including. */
#ifndef MG_BENCH_BACKEND_H
#define MG_BENCH_BACKEND_H

#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>

/* "BENCH_NAME: what: the library's error", exit status 1. */
static inline void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", BENCH_NAME, what, mg_error_message());
    exit(1);
}

/* bytes of backend memory, or die. */
static inline void *dev(mg_backend *be, size_t bytes) {
    void *p = NULL;
    if (be->alloc(be, bytes, &p) != MG_OK) die("cannot allocate device memory");
    return p;
}

#endif
