/* Backend-independent helpers: the op table's entries as data (generated from backend_ops.h) and
 * its validation, the ordering of a collective between compute work; mg_backend_cuda_create
 * (bf16), and mg_backend_cuda_create_dtype's stand-in in builds without the CUDA backend. */
#include "backend/backend.h"
#include "backend/graph_record.h"

#include <stdio.h>
#include <string.h>

const mg_backend_entry mg_backend_entries[MG_BACKEND_N_ENTRIES] = {
#define MG_OP(name, need, kind, ret, params, args) {#name, MG_NEED_##need, MG_BACKEND_##kind},
#define MG_NEED_REQ                                true
#define MG_NEED_OPT                                false
#define MG_NEED_CAP                                false
#include "backend/backend_ops.h"
#undef MG_NEED_REQ
#undef MG_NEED_OPT
#undef MG_NEED_CAP
};

bool mg_backend_has(const mg_backend *be, int i) {
    switch (i) {
#define MG_OP(name, need, kind, ret, params, args)                                                 \
    case MG_BACKEND_ENTRY_##name:                                                                  \
        return be->name != NULL;
#include "backend/backend_ops.h"
    default:
        return false;
    }
}

/* The names of the entries of be that are NULL among the required ones (moe: among the MoE ops),
 * comma-separated in table order into missing; their count. */
static int missing_entries(const mg_backend *be, bool moe, char *missing, size_t size) {
    size_t used = 0;
    int count = 0;
    missing[0] = '\0';
    for (int i = 0; i < MG_BACKEND_N_ENTRIES; i++) {
        const mg_backend_entry *e = &mg_backend_entries[i];
        if ((moe ? e->kind != MG_BACKEND_MOE : !e->required) || mg_backend_has(be, i)) continue;
        int n = snprintf(missing + used, size - used, "%s%s", count ? ", " : "", e->name);
        if (n > 0 && used + (size_t)n < size) used += (size_t)n;
        count++;
    }
    return count;
}

mg_status mg_backend_validate(const mg_backend *be) {
    if (!be) return MG_FAIL(MG_ERR_INTERNAL, "no backend given (NULL op table)");
    char missing[1024];
    if (missing_entries(be, false, missing, sizeof missing))
        return MG_FAIL(MG_ERR_INTERNAL, "backend '%s' lacks required ops: %s",
                       be->name ? be->name : "(unnamed)", missing);
    return MG_OK;
}

mg_status mg_backend_require_moe(const mg_backend *be) {
    char missing[1024];
    if (missing_entries(be, true, missing, sizeof missing))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "the %s backend lacks Mixture-of-Experts ops (%s); train --num-experts "
                       "models with --device cpu",
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
    /* a recording backend holds a collective only as a host call (comm.h's mg_comm_record) */
    if (be->recording && !mg_graph_rec_takes_host_calls(be))
        return mg_graph_rec_refuse(be, "a collective (a backend without streams)");
    if (!be->stream_handle) return MG_OK;
    MG_CHECK(be->stream_wait(be, MG_STREAM_COMM, MG_STREAM_COMPUTE));
    *stream = be->stream_handle(be, MG_STREAM_COMM);
    return MG_OK;
}

mg_status mg_backend_peer_gather(mg_backend *be, const mg_peer_window *pw, void *whole,
                                 const void *part, size_t bytes, mg_stream_id s) {
    MG_CHECK(be->peer_push(be, pw, part, 0, bytes, s));
    return be->peer_take(be, pw, whole, part, bytes, s);
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

mg_status mg_peer_sum_rows_check(size_t n, const void *bias, const void *residual, int H) {
    if ((bias || residual) && (H <= 0 || n % (size_t)H != 0))
        return MG_FAIL(MG_ERR_INTERNAL, "peer_sum: %zu values in rows of %d", n, H);
    return MG_OK;
}
