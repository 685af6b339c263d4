/* Buffers, exact test values and comparison for the multi-rank tests (dist.h). */
#include "dist.h"

#include "core/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *dist_alloc(dist_ctx *t, size_t count, mg_dtype dt) {
    void *p = NULL;
    DOK(t->B->alloc(count * mg_dtype_size(dt), &p));
    return p;
}

void dist_put(dist_ctx *t, void *dev, const void *host, size_t count, mg_dtype dt) {
    DOK(t->B->upload(dev, host, count * mg_dtype_size(dt)));
}

void dist_get(dist_ctx *t, void *host, const void *dev, size_t count, mg_dtype dt) {
    DOK(t->B->download(host, dev, count * mg_dtype_size(dt)));
}

void dist_free(dist_ctx *t, void *dev) {
    if (dev) t->B->free(dev);
}

void *dist_stream(dist_ctx *t) {
    return t->B->stream();
}

void *host_alloc(size_t count, mg_dtype dt) {
    void *p = calloc(count ? count : 1, mg_dtype_size(dt));
    if (!p) {
        fprintf(stderr, "dist_tests: out of memory\n");
        exit(1);
    }
    return p;
}

void host_set(void *buf, mg_dtype dt, size_t i, double v) {
    switch (dt) {
    case MG_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case MG_BF16:
        ((uint16_t *)buf)[i] = mg_f32_to_bf16((float)v);
        break;
    case MG_F16:
        ((uint16_t *)buf)[i] = mg_f32_to_f16((float)v);
        break;
    case MG_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case MG_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case MG_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    }
}

double host_get(const void *buf, mg_dtype dt, size_t i) {
    switch (dt) {
    case MG_F32:
        return ((const float *)buf)[i];
    case MG_BF16:
        return mg_bf16_to_f32(((const uint16_t *)buf)[i]);
    case MG_F16:
        return mg_f16_to_f32(((const uint16_t *)buf)[i]);
    case MG_I32:
        return ((const int32_t *)buf)[i];
    case MG_I64:
        return (double)((const int64_t *)buf)[i];
    case MG_U8:
        return ((const uint8_t *)buf)[i];
    }
    return NAN;
}

double dist_value(mg_dtype dt, int rank, size_t i, int seed) {
    double v = (double)((long)((i * 7 + (size_t)rank * 3 + (size_t)seed * 5) % 13) - 6);
    if (dt == MG_I64) v += (double)((i + (size_t)rank) % 3) * 1099511627776.0; /* 2^40 */
    if (dt == MG_U8) v += 6; /* bytes: 0 .. 12, so the sums of up to 21 ranks fit */
    return v;
}

double dist_round(mg_dtype dt, double v) {
    uint16_t h;
    switch (dt) {
    case MG_F32:
        return (float)v;
    case MG_BF16:
        h = mg_f32_to_bf16((float)v);
        return mg_bf16_to_f32(h);
    case MG_F16:
        h = mg_f32_to_f16((float)v);
        return mg_f16_to_f32(h);
    default:
        return v;
    }
}

void dist_compare(dist_ctx *t, const char *what, const void *got, const void *want, size_t n,
                  mg_dtype dt) {
    size_t es = mg_dtype_size(dt), bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
            if (!bad) first = i;
            bad++;
        }
    if (bad)
        dist_fail(t, __FILE__, __LINE__,
                  "%s (%s, n=%zu): %zu of %zu elements differ, first at %zu: got %.17g want %.17g",
                  what, mg_dtype_name(dt), n, bad, n, first, host_get(got, dt, first),
                  host_get(want, dt, first));
}

int dist_scenario_end(mg_comm_world *w, mg_status st, double t0, const char *unnoticed) {
    const int rank = mg_comm_world_rank(w);
    if (st == MG_OK) {
        fprintf(stderr, "dist_tests: rank %d: %s\n", rank, unnoticed);
        mg_comm_world_finalize(w);
        return 0;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_error_message());
    fprintf(stderr, "dist_tests: rank %d: error after %.2f s: %s\n", rank, mg_clock_seconds() - t0,
            msg);
    fflush(stderr);
    mg_comm_world_fail(w, msg);
    mg_comm_world_finalize(w);
    return 1;
}
