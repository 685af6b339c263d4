/* Helpers shared by the CPU backend tests (test_cpu_*.c): seeded random buffers, a double
 * objective, and the central-difference gradient check.
 *
 * Finite differences: for an op y = f(x) and a fixed random R, the objective L(x) = sum(y * R) is
 * accumulated in double from the fp32 outputs, and dL/dx_i ~ (L(x+h e_i) - L(x-h e_i)) / (x+ - x-)
 * (the actual fp32 perturbation). The analytic gradient is backward(dout = R). Inputs are O(1),
 * h = 1e-2: the truncation error is O(h^2 f''') ~ 1e-5 relative, and the fp32 rounding of a few
 * dozen outputs (~6e-8 relative each) gives ~1e-6 in L, i.e. ~1e-4 at worst after dividing by 2h
 * (in practice the errors cancel: correct ops measure 1e-6 .. 3e-5 normalised error,
 * max|a-fd| / max|fd|). The tolerance 1e-3 keeps a margin of 30x over the worst observed case,
 * while a wrong term, factor or index shows up as O(0.1..1).
 */
#ifndef MG_TEST_CPU_UTIL_H
#define MG_TEST_CPU_UTIL_H

#include "test.h"

#include "backend/backend.h"
#include "core/rng.h"
#include "core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T_SEED   1234567ull
#define T_FD_H   1e-2f
#define T_FD_TOL 1e-3

static inline float *t_rnd(uint32_t id, size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = scale * mg_rng_normal(T_SEED, id, i);
    return p;
}

static inline float *t_zeros(size_t n) {
    return calloc(n ? n : 1, sizeof(float));
}

static inline float *t_dup(const float *x, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

static inline double t_dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Normalised error of `analytic` against central differences of obj() over the n entries of x. */
typedef double (*obj_fn)(void *ctx);
static inline double t_fd_err(float *x, size_t n, const float *analytic, obj_fn obj, void *ctx) {
    float *fd = t_zeros(n);
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i], xp = x0 + T_FD_H, xm = x0 - T_FD_H;
        x[i] = xp;
        double lp = obj(ctx);
        x[i] = xm;
        double lm = obj(ctx);
        x[i] = x0;
        fd[i] = (float)((lp - lm) / ((double)xp - (double)xm));
    }
    double e = mg_test_rel_err(analytic, fd, n);
    free(fd);
    return e;
}

static inline mg_backend *t_cpu(mg_test_ctx *t) {
    mg_backend *be = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 0));
    return be;
}

#endif
