/* Backend-independent helpers: validation of an op table, the ordering of a collective between
 * compute work; mg_backend_cuda_create (bf16), and mg_backend_cuda_create_dtype's stand-in in
 * builds without the CUDA backend. */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

mg_status mg_backend_validate(const mg_backend *be) {
    if (!be) return MG_FAIL(MG_ERR_INTERNAL, "no backend given (NULL op table)");
    char missing[1024] = "";
    size_t used = 0;
    int count = 0;
    /* Every entry is required today except the optional ones (memory_info, matmul_peak_tflops);
     * an entry that becomes optional leaves this list. */
#define MG_REQUIRE(entry)                                                                          \
    do {                                                                                           \
        if (!be->entry) {                                                                          \
            int n_ = snprintf(missing + used, sizeof missing - used, "%s%s", count ? ", " : "",    \
                              #entry);                                                             \
            if (n_ > 0 && used + (size_t)n_ < sizeof missing) used += (size_t)n_;                  \
            count++;                                                                               \
        }                                                                                          \
    } while (0)
    MG_REQUIRE(alloc);
    MG_REQUIRE(free);
    MG_REQUIRE(copy_h2d);
    MG_REQUIRE(copy_d2h);
    MG_REQUIRE(copy_d2d);
    MG_REQUIRE(memset_zero);
    MG_REQUIRE(upload_f32);
    MG_REQUIRE(download_f32);
    MG_REQUIRE(synchronize);
    MG_REQUIRE(destroy);
    MG_REQUIRE(embedding_forward);
    MG_REQUIRE(embedding_backward);
    MG_REQUIRE(layernorm_forward);
    MG_REQUIRE(layernorm_backward);
    MG_REQUIRE(rmsnorm_forward);
    MG_REQUIRE(rmsnorm_backward);
    MG_REQUIRE(linear_forward);
    MG_REQUIRE(linear_gelu_forward);
    MG_REQUIRE(linear_backward);
    MG_REQUIRE(gelu_forward);
    MG_REQUIRE(gelu_backward);
    MG_REQUIRE(swiglu_forward);
    MG_REQUIRE(swiglu_backward);
    MG_REQUIRE(rope_forward);
    MG_REQUIRE(rope_backward);
    MG_REQUIRE(attention_saved_bytes);
    MG_REQUIRE(attention_forward);
    MG_REQUIRE(attention_backward);
    MG_REQUIRE(cross_entropy_fused);
    MG_REQUIRE(cross_entropy_max);
    MG_REQUIRE(cross_entropy_sums);
    MG_REQUIRE(cross_entropy_finish);
    MG_REQUIRE(add);
    MG_REQUIRE(bias_residual_add);
    MG_REQUIRE(dropout_add);
    MG_REQUIRE(dropout_backward);
    MG_REQUIRE(sum_f32);
    MG_REQUIRE(sumsq_f32);
    MG_REQUIRE(count_zeros_f32);
    MG_REQUIRE(clip_coef);
    MG_REQUIRE(adamw);
#undef MG_REQUIRE
    if (count)
        return MG_FAIL(MG_ERR_INTERNAL, "backend '%s' lacks required ops: %s",
                       be->name ? be->name : "(unnamed)", missing);
    return MG_OK;
}

static mg_status arena_alloc(void *ctx, size_t bytes, void **out) {
    mg_backend *be = ctx;
    return be->alloc(be, bytes, out);
}

static void arena_free(void *ctx, void *ptr) {
    mg_backend *be = ctx;
    be->free(be, ptr);
}

const mg_allocator *mg_backend_arena_allocator(mg_backend *be, mg_allocator *storage) {
    if (be->device == MG_DEVICE_CPU) return NULL;
    *storage = (mg_allocator){arena_alloc, arena_free, be};
    return storage;
}

mg_status mg_backend_comm_begin(mg_backend *be, void **stream) {
    *stream = NULL;
    if (!be->stream_handle) return MG_OK;
    MG_CHECK(be->stream_wait(be, MG_STREAM_COMM, MG_STREAM_COMPUTE));
    *stream = be->stream_handle(be, MG_STREAM_COMM);
    return MG_OK;
}

mg_status mg_backend_comm_end(mg_backend *be) {
    return be->stream_handle ? be->stream_wait(be, MG_STREAM_COMPUTE, MG_STREAM_COMM) : MG_OK;
}

#ifndef MG_HAVE_CUDA
mg_status mg_backend_cuda_create_dtype(mg_backend **out, int device, mg_dtype compute) {
    *out = NULL;
    if (compute != MG_BF16 && compute != MG_F16) /* as the real one: before the device */
        return MG_FAIL(MG_ERR_USAGE,
                       "the cuda backend computes in bf16 or fp16, not %s (mg_dtype %d)",
                       mg_dtype_name(compute), (int)compute);
    return MG_FAIL(MG_ERR_UNSUPPORTED,
                   "no CUDA device: this build has no CUDA backend (built without nvcc and "
                   "cuBLASLt, or with CUDA=0; the build line says backends=cpu), so device %d "
                   "cannot be used",
                   device);
}

mg_status mg_backend_cuda_probe(int device) {
    mg_backend *none;
    return mg_backend_cuda_create_dtype(&none, device, MG_BF16);
}
#endif

mg_status mg_backend_cuda_create(mg_backend **out, int device) {
    return mg_backend_cuda_create_dtype(out, device, MG_BF16);
}

size_t mg_backend_attention_saved_bytes(mg_device device, int B, int S, int nq, int hd) {
    (void)hd;
    size_t rows = (size_t)B * (size_t)nq * (size_t)S;
    return (device == MG_DEVICE_CPU ? rows * (size_t)S : rows) * sizeof(float);
}
