/* The CPU reference backend: plain fp32 C with OpenMP threads and OpenBLAS for matrix products.
 * Memory is ordinary host memory (aligned, zeroed), so the copy entries are memcpy. */
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The alignment of every allocation: the arena's offset alignment, enough for any SIMD load. */
#define MG_CPU_ALIGN 256

static mg_status cpu_alloc(mg_backend *be, size_t bytes, void **out) {
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

static void cpu_free(mg_backend *be, void *ptr) {
    free(ptr);
}

static mg_status cpu_copy(mg_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
    return MG_OK;
}

static mg_status cpu_memset_zero(mg_backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
    return MG_OK;
}

/* The compute dtype is fp32, so conversion is a copy. */
static mg_status cpu_upload_f32(mg_backend *be, void *dst, const float *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
    return MG_OK;
}

static mg_status cpu_download_f32(mg_backend *be, float *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
    return MG_OK;
}

static mg_status cpu_synchronize(mg_backend *be) {
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
        MG_CHECK(cpu_alloc(be, bytes, &p));
        c->scratch = p;
        c->scratch_bytes = bytes;
    }
    *out = c->scratch;
    return MG_OK;
}

static void cpu_destroy(mg_backend *be) {
    mg_cpu_ctx *c = be->ctx;
    if (c) free(c->scratch);
    free(c);
    free(be);
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

    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->copy_h2d = cpu_copy;
    be->copy_d2h = cpu_copy;
    be->copy_d2d = cpu_copy;
    be->memset_zero = cpu_memset_zero;
    be->upload_f32 = cpu_upload_f32;
    be->download_f32 = cpu_download_f32;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;

    be->embedding_forward = mg_cpu_embedding_forward;
    be->embedding_backward = mg_cpu_embedding_backward;
    be->layernorm_forward = mg_cpu_layernorm_forward;
    be->layernorm_backward = mg_cpu_layernorm_backward;
    be->rmsnorm_forward = mg_cpu_rmsnorm_forward;
    be->rmsnorm_backward = mg_cpu_rmsnorm_backward;
    be->linear_forward = mg_cpu_linear_forward;
    be->linear_gelu_forward = mg_cpu_linear_gelu_forward;
    be->linear_backward = mg_cpu_linear_backward;
    be->gelu_forward = mg_cpu_gelu_forward;
    be->gelu_backward = mg_cpu_gelu_backward;
    be->swiglu_forward = mg_cpu_swiglu_forward;
    be->swiglu_backward = mg_cpu_swiglu_backward;
    be->rope_forward = mg_cpu_rope_forward;
    be->rope_backward = mg_cpu_rope_backward;
    be->attention_saved_bytes = mg_cpu_attention_saved_bytes;
    be->attention_forward = mg_cpu_attention_forward;
    be->attention_backward = mg_cpu_attention_backward;
    be->cross_entropy_fused = mg_cpu_cross_entropy_fused;
    be->cross_entropy_max = mg_cpu_cross_entropy_max;
    be->cross_entropy_sums = mg_cpu_cross_entropy_sums;
    be->cross_entropy_finish = mg_cpu_cross_entropy_finish;
    be->add = mg_cpu_add;
    be->bias_residual_add = mg_cpu_bias_residual_add;
    be->dropout_add = mg_cpu_dropout_add;
    be->dropout_backward = mg_cpu_dropout_backward;
    be->sum_f32 = mg_cpu_sum_f32;
    be->sumsq_f32 = mg_cpu_sumsq_f32;
    be->count_zeros_f32 = mg_cpu_count_zeros_f32;
    be->clip_coef = mg_cpu_clip_coef;
    be->adamw = mg_cpu_adamw;
    be->router_forward = mg_cpu_router_forward;
    be->router_backward = mg_cpu_router_backward;
    be->moe_route = mg_cpu_moe_route;
    be->moe_route_backward = mg_cpu_moe_route_backward;
    be->moe_permute = mg_cpu_moe_permute;
    be->moe_permute_backward = mg_cpu_moe_permute_backward;
    be->moe_regroup = mg_cpu_moe_regroup;
    be->moe_unpermute = mg_cpu_moe_unpermute;
    be->moe_unpermute_backward = mg_cpu_moe_unpermute_backward;
    be->grouped_linear_forward = mg_cpu_grouped_linear_forward;
    be->grouped_linear_backward = mg_cpu_grouped_linear_backward;
    be->grouped_activation_forward = mg_cpu_grouped_activation_forward;
    be->grouped_swiglu_backward = mg_cpu_grouped_swiglu_backward;
    be->moe_expert_bias_update = mg_cpu_moe_expert_bias_update;

    mg_status st = mg_backend_validate(be);
    if (st != MG_OK) {
        cpu_destroy(be);
        return st;
    }
    *out = be;
    return MG_OK;
}
