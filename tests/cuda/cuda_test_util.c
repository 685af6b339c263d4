/* Shared helpers of the CUDA backend tests (method and tolerances: cuda_test_util.h). */
#include "cuda_test_util.h"

#include "config/flags.h"
#include "core/rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static mg_backend *g_cpu, *g_gpu;
static int g_cpu_tried, g_gpu_tried;
static char g_gpu_error[512];
static int g_round_outputs; /* MG_TEST_CUDA_AS_CPU=bf16 or f16 */

static void destroy_backends(void) {
    if (g_gpu) g_gpu->destroy(g_gpu);
    if (g_cpu) g_cpu->destroy(g_cpu);
    g_gpu = g_cpu = NULL;
}

mg_backend *ct_cpu(mg_test_ctx *t) {
    if (!g_cpu_tried) {
        g_cpu_tried = 1;
        MG_EXPECT_OK(mg_backend_cpu_create(&g_cpu, 0));
        atexit(destroy_backends);
    }
    MG_EXPECT(g_cpu != NULL, "no cpu backend");
    return g_cpu;
}

/* Read once: ct_dtype is asked for every element that the inputs round (ct_round_act), and a
 * getenv per element was most of the suite's host time. */
int ct_as_cpu(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *as_cpu = getenv("MG_TEST_CUDA_AS_CPU");
        mode = !as_cpu                       ? 0
               : strcmp(as_cpu, "1") == 0    ? 1
               : strcmp(as_cpu, "bf16") == 0 ? 2
               : strcmp(as_cpu, "f16") == 0  ? 3
                                             : 0;
    }
    return mode;
}

/* MG_TEST_CUDA_DTYPE: NULL (unset), "bf16" or "fp16"; anything else is reported by ct_gpu. */
static const char *dtype_env(void) {
    return getenv("MG_TEST_CUDA_DTYPE");
}

mg_dtype ct_dtype(void) {
    static int dtype = -1; /* read once, as ct_as_cpu */
    if (dtype < 0) {
        int as_cpu = ct_as_cpu();
        const char *d = dtype_env();
        dtype = as_cpu >= 2                   ? (as_cpu == 3 ? MG_F16 : MG_BF16)
                : d && strcmp(d, "fp16") == 0 ? MG_F16
                                              : MG_BF16;
    }
    return (mg_dtype)dtype;
}

mg_backend *ct_gpu(mg_test_ctx *t) {
    if (!g_gpu_tried) {
        g_gpu_tried = 1;
        int as_cpu = ct_as_cpu();
        const char *d = dtype_env();
        g_round_outputs = as_cpu >= 2;
        mg_status st = MG_OK;
        if (d && strcmp(d, "bf16") != 0 && strcmp(d, "fp16") != 0)
            snprintf(g_gpu_error, sizeof g_gpu_error,
                     "MG_TEST_CUDA_DTYPE=%s: expected bf16 or fp16", d);
        else if (as_cpu)
            st = mg_backend_cpu_create(&g_gpu, 0);
        else
            st = mg_backend_cuda_create_dtype(&g_gpu, 0, ct_dtype());
        if (st != MG_OK) snprintf(g_gpu_error, sizeof g_gpu_error, "%s", mg_error_message());
        if (g_gpu) /* once: which dtype this run checks */
            printf("  backend under test: %s, compute %s, inputs rounded to %s%s\n", g_gpu->name,
                   mg_dtype_name(g_gpu->compute_dtype), mg_dtype_name(ct_dtype()),
                   g_round_outputs ? " (outputs too)" : "");
    }
    MG_EXPECT(g_gpu != NULL, "no cuda backend: %s", g_gpu_error);
    return g_gpu;
}

mg_backend *ct_cuda(mg_test_ctx *t) {
    mg_backend *g = ct_gpu(t);
    if (g && g->device != MG_DEVICE_CUDA) {
        MG_EXPECT(0, "the backend under test is '%s', not cuda (MG_TEST_CUDA_AS_CPU)", g->name);
        return NULL;
    }
    return g;
}

/* ---------------------------------------------------------------- pool and host buffers */

void ct_pool_free(ct_pool *P) {
    for (int i = 0; i < P->ndev; i++)
        if (P->dev[i]) P->g->free(P->g, P->dev[i]);
    for (int i = 0; i < P->nhost; i++) free(P->host[i]);
    P->ndev = P->nhost = 0;
}

/* test code out of room (a bug in the test or a full host, not a result): says so and stops */
static _Noreturn void pool_full(const char *what, size_t bytes) {
    fprintf(stderr,
            "cuda tests: no room for a %s buffer of %zu bytes (a pool holds %d; free a "
            "pool per round)\n",
            what, bytes, CT_POOL_MAX);
    abort();
}

static void pool_fail(ct_pool *P, const char *what, size_t n) {
    P->failed = 1;
    mg_test_fail(P->t, __FILE__, __LINE__, "%s (%zu): %s", what, n, mg_error_message());
}

void *ct_host(ct_pool *P, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || P->nhost == CT_POOL_MAX) pool_full("host", bytes);
    P->host[P->nhost++] = p;
    return p;
}

uint16_t ct_act_bits(float x) {
    return ct_dtype() == MG_F16 ? mg_f32_to_f16(x) : mg_f32_to_bf16(x);
}

float ct_act_value(uint16_t bits) {
    return ct_dtype() == MG_F16 ? mg_f16_to_f32(bits) : mg_bf16_to_f32(bits);
}

/* The input makers below fill large buffers (up to 10^8 elements) on the host while the device
 * waits: they run on OpenMP threads. Each element depends on its index alone (counter-based
 * random numbers), so the values are the same for any thread count. */
void ct_round_act(float *x, size_t n) {
    (void)ct_dtype(); /* read the environment once, before the threads ask */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = ct_act_value(ct_act_bits(x[i]));
}

float *ct_rand_act(ct_pool *P, uint32_t id, size_t n, float scale) {
    float *p = ct_host(P, n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = scale * mg_rng_normal(CT_SEED, id, i);
    ct_round_act(p, n);
    return p;
}

float *ct_uniform_f32(ct_pool *P, uint32_t id, size_t n, float lo, float hi) {
    float *p = ct_host(P, n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * mg_rng_uniform(CT_SEED, id, i);
    return p;
}

float *ct_uniform_act(ct_pool *P, uint32_t id, size_t n, float lo, float hi) {
    float *p = ct_uniform_f32(P, id, n, lo, hi);
    ct_round_act(p, n);
    return p;
}

int32_t *ct_tokens(ct_pool *P, uint32_t id, size_t n, int V) {
    int32_t *p = ct_host(P, n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        float u = mg_rng_uniform(CT_SEED, id, 2 * i), w = mg_rng_uniform(CT_SEED, id, 2 * i + 1);
        int tok = u < 0.5f ? (int)(w * 5) * (V / 5) : (int)(w * V);
        p[i] = tok < V ? tok : V - 1;
    }
    if (n > 1) p[0] = 0, p[n - 1] = V - 1;
    return p;
}

float *ct_dup(ct_pool *P, const float *x, size_t n) {
    float *p = ct_host(P, n * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* ---------------------------------------------------------------- device buffers */

static void *dev_alloc(ct_pool *P, size_t bytes) {
    void *d = NULL;
    if (P->ndev == CT_POOL_MAX) pool_full("device", bytes);
    if (P->g->alloc(P->g, bytes, &d) != MG_OK) {
        pool_fail(P, "device alloc", bytes);
        return NULL;
    }
    P->dev[P->ndev++] = d;
    return d;
}

void ct_put_act(ct_pool *P, void *d, const float *x, size_t n) {
    if (d && P->g->upload_f32(P->g, d, x, n) != MG_OK) pool_fail(P, "compute-dtype upload", n);
}

void ct_put_f32(ct_pool *P, float *d, const float *x, size_t n) {
    if (d && P->g->copy_h2d(P->g, d, x, n * sizeof(float)) != MG_OK) pool_fail(P, "fp32 upload", n);
}

void *ct_up_act(ct_pool *P, const float *x, size_t n) {
    void *d = dev_alloc(P, n * mg_dtype_size(P->g->compute_dtype));
    ct_put_act(P, d, x, n);
    return d;
}

float *ct_up_f32(ct_pool *P, const float *x, size_t n) {
    float *d = dev_alloc(P, n * sizeof(float));
    ct_put_f32(P, d, x, n);
    return d;
}

void *const *ct_up_ptrs(ct_pool *P, const float *x, int n, size_t each, int f32, void **bufs) {
    for (int i = 0; i < n; i++)
        bufs[i] = f32 ? (void *)ct_up_f32(P, x + i * each, each) : ct_up_act(P, x + i * each, each);
    void **d = ct_poison(P, (size_t)n * sizeof(void *));
    if (d && P->g->copy_h2d(P->g, d, bufs, (size_t)n * sizeof(void *)) != MG_OK) P->failed = 1;
    return (void *const *)d;
}

int32_t *ct_up_i32(ct_pool *P, const int32_t *x, size_t n) {
    int32_t *d = dev_alloc(P, n * sizeof(int32_t));
    if (d && P->g->copy_h2d(P->g, d, x, n * sizeof(int32_t)) != MG_OK)
        pool_fail(P, "int32 upload", n);
    return d;
}

uint64_t *ct_up_u64(ct_pool *P, const uint64_t *x, size_t n) {
    uint64_t *d = dev_alloc(P, n * sizeof(uint64_t));
    if (d && P->g->copy_h2d(P->g, d, x, n * sizeof(uint64_t)) != MG_OK)
        pool_fail(P, "uint64 upload", n);
    return d;
}

void *ct_poison(ct_pool *P, size_t bytes) {
    void *d = dev_alloc(P, bytes), *h = malloc(bytes ? bytes : 1);
    if (!h) abort();
    memset(h, 0xff, bytes);
    if (d && P->g->copy_h2d(P->g, d, h, bytes) != MG_OK) pool_fail(P, "poison", bytes);
    free(h);
    return d;
}

void *ct_poison_act(ct_pool *P, size_t n) {
    return ct_poison(P, n * mg_dtype_size(P->g->compute_dtype));
}

float *ct_down_act(ct_pool *P, const void *d, size_t n) {
    float *h = ct_host(P, n * sizeof(float));
    if (!d || P->g->download_f32(P->g, h, d, n) != MG_OK) {
        pool_fail(P, "compute-dtype download", n);
        for (size_t i = 0; i < n; i++) h[i] = NAN;
    }
    if (g_round_outputs) ct_round_act(h, n);
    return h;
}

float *ct_down_f32(ct_pool *P, const float *d, size_t n) {
    float *h = ct_host(P, n * sizeof(float));
    if (!d || P->g->copy_d2h(P->g, h, d, n * sizeof(float)) != MG_OK) {
        pool_fail(P, "fp32 download", n);
        for (size_t i = 0; i < n; i++) h[i] = NAN;
    }
    return h;
}

void *ct_down_raw(ct_pool *P, const void *d, size_t bytes) {
    void *h = ct_host(P, bytes);
    if (!d || P->g->copy_d2h(P->g, h, d, bytes) != MG_OK) {
        pool_fail(P, "download", bytes);
        memset(h, 0xff, bytes);
    }
    return h;
}

/* ---------------------------------------------------------------- comparison */

static double err_at(const float *got, const float *ref, size_t n, size_t *worst) {
    double maxdiff = 0, maxref = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) continue;
        if (!isfinite(got[i])) {
            *worst = i;
            return INFINITY;
        }
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > maxdiff) maxdiff = d, *worst = i;
        if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
    }
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

int ct_verbose(void) {
    const char *v = getenv("MG_TEST_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

void ct_expect_close(mg_test_ctx *t, const char *file, int line, const float *got, const float *ref,
                     size_t n, double tol, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t worst;
    double e = err_at(got, ref, n, &worst);
    if (ct_verbose()) printf("  %-60s err %.3g (tol %.3g)\n", what, e, tol);
    if (!(e <= tol))
        mg_test_fail(t, file, line,
                     "%s: normalised error %.3g > %.3g (worst [%zu]: got %.8g, "
                     "want %.8g)",
                     what, e, tol, worst, n ? got[worst] : 0.0, n ? ref[worst] : 0.0);
}

float *ct_qkv_part(ct_pool *P, const float *x, int N, int nq, int ng, int hd, int part,
                   size_t *n_out) {
    int r = nq / ng, per = part == 0 ? r : 1;
    size_t C = (size_t)ng * (r + 2) * hd, n = (size_t)N * ng * per * hd;
    float *out = ct_host(P, n * 4), *o = out;
    if (!out) return NULL;
    for (int i = 0; i < N; i++)
        for (int g = 0; g < ng; g++) {
            int h0 = part == 0 ? 0 : part == 1 ? r : r + 1;
            const float *src = x + (size_t)i * C + ((size_t)g * (r + 2) + h0) * hd;
            memcpy(o, src, (size_t)per * hd * 4);
            o += (size_t)per * hd;
        }
    *n_out = n;
    return out;
}

void ct_expect_qkv_close(mg_test_ctx *t, const char *file, int line, ct_pool *P, const float *got,
                         const float *ref, int N, int nq, int ng, int hd, double tol,
                         const char *fmt, ...) {
    static const char *names[3] = {"dq", "dk", "dv"};
    char what[224];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    for (int part = 0; part < 3; part++) {
        size_t n1, n2;
        float *g = ct_qkv_part(P, got, N, nq, ng, hd, part, &n1);
        float *w = ct_qkv_part(P, ref, N, nq, ng, hd, part, &n2);
        if (!g || !w) return;
        ct_expect_close(t, file, line, g, w, n1, tol, "%s %s", what, names[part]);
    }
}

void ct_expect_nonfinite_parity(mg_test_ctx *t, const char *file, int line, const float *got,
                                const float *ref, size_t n, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t bad = 0, first = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        int ok;
        if (isnan(ref[i]))
            ok = isnan(got[i]);
        else if (isinf(ref[i]))
            ok = got[i] == ref[i];
        else
            ok = isfinite(got[i]);
        nonfinite += !isfinite(ref[i]);
        if (!ok && bad++ == 0) first = i;
    }
    if (bad)
        mg_test_fail(t, file, line,
                     "%s: %zu of %zu entries differ in NaN/Inf (first [%zu]: got "
                     "%g, want %g)",
                     what, bad, n, first, got[first], ref[first]);
    /* a parity test whose reference has nothing non-finite would prove nothing */
    if (!nonfinite) mg_test_fail(t, file, line, "%s: the reference has no NaN or Inf", what);
}

void ct_expect_same_bits(mg_test_ctx *t, const char *file, int line, const void *a, const void *b,
                         size_t bytes, const char *fmt, ...) {
    if (memcmp(a, b, bytes) == 0) return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t i = 0;
    while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i]) i++;
    mg_test_fail(t, file, line, "%s: two runs differ (first at byte %zu of %zu)", what, i, bytes);
}

mg_status ct_tiny_config(mg_config *c, const char *device, bool llama, const char *const *extra) {
    char dev[16];
    snprintf(dev, sizeof dev, "%s", device);
    char *argv[96] = {"--hidden-size",
                      "64",
                      "--num-attention-heads",
                      "4",
                      "--seq-length",
                      "32",
                      "--max-position-embeddings",
                      "32",
                      "--vocab-size",
                      "256",
                      "--make-vocab-size-divisible-by",
                      "64",
                      "--micro-batch-size",
                      "2",
                      "--mock-data",
                      "--eval-iters",
                      "0",
                      "--device",
                      dev};
    int argc = 0;
    while (argv[argc]) argc++;
    char *l[] = {"--normalization",
                 "RMSNorm",
                 "--swiglu",
                 "--position-embedding-type",
                 "rope",
                 "--group-query-attention",
                 "--num-query-groups",
                 "2",
                 "--disable-bias-linear",
                 "--untie-embeddings-and-output-weights"};
    if (llama)
        for (size_t i = 0; i < sizeof l / sizeof *l; i++) argv[argc++] = l[i];
    for (int i = 0; extra && extra[i] && argc < 95; i++) argv[argc++] = (char *)extra[i];
    bool help = false;
    mg_config_defaults(c);
    MG_CHECK(mg_flags_parse(c, argc, argv, &help));
    return mg_config_validate(c);
}
