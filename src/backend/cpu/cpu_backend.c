/* The CPU reference backend: plain fp32 C with OpenMP threads and OpenBLAS for matrix products.
 * Memory is ordinary host memory (aligned, zeroed), so the copy entries are memcpy. */
#include "backend/cpu/cpu_ops.h"
#include "core/clock.h"
#include "core/tensor.h"
#include "backend/graph_record.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The alignment of every allocation: the arena's offset alignment, enough for any SIMD load. */
#define MG_CPU_ALIGN 256

mg_status mg_cpu_alloc(mg_backend *be, size_t bytes, void **out) {
    *out = NULL;
    /* aligned_alloc needs a size that is a multiple of the alignment; 0 bytes still gives a
     * distinct pointer so callers can treat every successful alloc alike. */
    size_t rounded = (bytes + MG_CPU_ALIGN - 1) / MG_CPU_ALIGN * MG_CPU_ALIGN;
    if (rounded < bytes) return MG_FAIL(MG_ERR_NOMEM, "cpu alloc: size %zu overflows", bytes);
    if (rounded == 0) rounded = MG_CPU_ALIGN;
    void *p = aligned_alloc(MG_CPU_ALIGN, rounded);
    if (!p)
        return MG_FAIL(MG_ERR_NOMEM, "cpu alloc: cannot allocate %zu bytes of host memory",
                       rounded);
    memset(p, 0, rounded);
    *out = p;
    return MG_OK;
}

void mg_cpu_free(mg_backend *be, void *ptr) {
    free(ptr);
}

/* Host memory on both sides: the three copies are one memcpy. */
static mg_status cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
    return MG_OK;
}

mg_status mg_cpu_copy_h2d(mg_backend *be, void *dst, const void *src, size_t bytes) {
    return cpu_copy(dst, src, bytes);
}

mg_status mg_cpu_copy_d2h(mg_backend *be, void *dst, const void *src, size_t bytes) {
    return cpu_copy(dst, src, bytes);
}

mg_status mg_cpu_copy_d2d(mg_backend *be, void *dst, const void *src, size_t bytes) {
    return cpu_copy(dst, src, bytes);
}

mg_status mg_cpu_memset_zero(mg_backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
    return MG_OK;
}

mg_status mg_cpu_convert_bf16(mg_backend *be, void *dst, const void *src, size_t n, bool to_bf16,
                              mg_stream_id stream) {
    if (to_bf16)
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = mg_f32_to_bf16(((const float *)src)[i]);
    else
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] = mg_bf16_to_f32(((const uint16_t *)src)[i]);
    return MG_OK;
}

mg_status mg_cpu_rng_advance(mg_backend *be, uint64_t *state, int n, uint64_t by) {
    (void)be;
    for (int k = 0; k < n; k++) state[2 * k + 1] += by;
    return MG_OK;
}

/* The compute dtype is fp32, so conversion is a copy. */
mg_status mg_cpu_upload_f32(mg_backend *be, void *dst, const float *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
    return MG_OK;
}

mg_status mg_cpu_download_f32(mg_backend *be, float *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
    return MG_OK;
}

mg_status mg_cpu_synchronize(mg_backend *be) {
    return MG_OK;
}

static mg_status timer_slot(int slot) {
    if (slot < 0 || slot >= MG_TIMER_POINTS)
        return MG_FAIL(MG_ERR_INTERNAL, "timer point %d (points 0..%d)", slot, MG_TIMER_POINTS - 1);
    return MG_OK;
}

mg_status mg_cpu_timer_mark(mg_backend *be, int slot) {
    MG_CHECK(timer_slot(slot));
    ((mg_cpu_ctx *)be->ctx)->timer[slot] = mg_clock_seconds();
    return MG_OK;
}

mg_status mg_cpu_timer_seconds(mg_backend *be, int a, int b, double *seconds) {
    MG_CHECK(timer_slot(a));
    MG_CHECK(timer_slot(b));
    const mg_cpu_ctx *c = be->ctx;
    *seconds = c->timer[b] - c->timer[a];
    return MG_OK;
}

mg_status mg_cpu_scratch(mg_backend *be, size_t bytes, void **out) {
    mg_cpu_ctx *c = be->ctx;
    if (bytes > c->scratch_bytes) {
        /* grow only: contents need not survive, so free first and keep the peak footprint low */
        free(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        void *p = NULL;
        MG_CHECK(mg_cpu_alloc(be, bytes, &p));
        c->scratch = p;
        c->scratch_bytes = bytes;
    }
    *out = c->scratch;
    return MG_OK;
}

void mg_cpu_destroy(mg_backend *be) {
    mg_cpu_ctx *c = be->ctx;
    if (c) free(c->scratch);
    free(c);
    free(be);
}

/* Graphs: the recorded calls (backend/graph_record.h). */
mg_status mg_cpu_graph_begin(mg_backend *be) {
    return mg_graph_rec_begin(be);
}

mg_status mg_cpu_graph_end(mg_backend *be, mg_graph **out, mg_graph_info *info) {
    return mg_graph_rec_end(be, out, info);
}

mg_status mg_cpu_graph_launch(mg_backend *be, mg_graph *g) {
    return mg_graph_rec_launch(be, g);
}

void mg_cpu_graph_free(mg_backend *be, mg_graph *g) {
    (void)be;
    mg_graph_rec_free(g);
}

int mg_backend_cpu_threads(void) {
    return mg_cpu_max_threads();
}

mg_status mg_backend_cpu_create(mg_backend **out, int num_threads) {
    *out = NULL;
    mg_backend *be = calloc(1, sizeof *be);
    if (!be) return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the cpu backend table");
#ifdef _OPENMP
    if (num_threads > 0) omp_set_num_threads(num_threads);
#endif
    /* The GEMMs run one single-threaded OpenBLAS call per output tile on OpenMP threads
     * (cpu_linear.c), so OpenBLAS must not start threads of its own. This is process-wide. */
    openblas_set_num_threads(1);
    be->name = "cpu";
    be->compute_dtype = MG_F32;
    be->device = MG_DEVICE_CPU;
    be->ctx = calloc(1, sizeof(mg_cpu_ctx));
    if (!be->ctx) {
        free(be);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the cpu backend state");
    }

    /* every required and CAP entry: mg_cpu_<name> (backend_ops.h); the optional ones stay NULL */
#define MG_OP(name, need, kind, ret, params, args) MG_CPU_SET_##need(name)
#define MG_CPU_SET_REQ(name)                       be->name = mg_cpu_##name;
#define MG_CPU_SET_OPT(name)
#define MG_CPU_SET_CAP(name) be->name = mg_cpu_##name;
#include "backend/backend_ops.h"
#undef MG_CPU_SET_REQ
#undef MG_CPU_SET_OPT
#undef MG_CPU_SET_CAP

    mg_status st = mg_backend_validate(be);
    if (st != MG_OK) {
        mg_cpu_destroy(be);
        return st;
    }
    *out = be;
    return MG_OK;
}
