/* --grad-reduce-in-bf16 (parallel/ddp.h's bf16 stage) on host buffers: a gradient buffer of three
 * parameters, one bucket and buckets of 1000 elements, plain all-reduce and the distributed
 * optimizer's reduce-scatter. Each rank's fp32 gradients are rounded to bf16, summed in bf16 over
 * the group and the sum written back in fp32 (the whole bucket, or this rank's shard). With two
 * ranks the result is exactly bf16(bf16(g0) + bf16(g1)), computed here from core/tensor.h's
 * roundings (dist_round); with more, MPI may add in any order, so each element must lie within the
 * bf16 rounding of every partial sum of the exact total (D ulps of the largest magnitude). Outside
 * this rank's shard the gradients are untouched with the distributed optimizer. On device buffers
 * the same reductions run inside train_dp's bf16 variant. */
#include "dist.h"

#include "backend/backend.h"
#include "parallel/ddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rank r's gradient i: values of many magnitudes, most not bf16-representable. */
static float grad_value(int r, size_t i) {
    return (float)(sin(0.37 * (double)i + 1.3 * r) * ldexp(1.0, (int)(i % 9) - 4)) * 1.001f;
}

/* x rounded to bf16 (dist_round: core/tensor.h's rounding) */
static float bf16(double x) {
    return (float)dist_round(MG_BF16, x);
}

static void check(dist_ctx *t, mg_backend *be, bool distopt, bool buckets) {
    const int64_t sizes[] = {1000, 777, 2048};
    mg_grad_buffer_config gc = {.data_parallel_size = t->size,
                                .use_distributed_optimizer = distopt,
                                .overlap_grad_reduce = buckets,
                                .bucket_size = buckets ? 1000 : 0,
                                .align_param_starts = true};
    mg_grad_buffer_layout l;
    DOK(mg_grad_buffer_layout_build(sizes, 3, &gc, &l));
    const size_t n = (size_t)l.numel;
    float *g = calloc(n, sizeof *g), *want = calloc(n, sizeof *want), *params = calloc(n, 4);
    uint16_t *stage = calloc((size_t)mg_grad_buffer_largest_bucket(&l), sizeof *stage);
    for (size_t i = 0; i < n; i++) {
        g[i] = grad_value(t->rank, i);
        want[i] = bf16(bf16(grad_value(0, i)) + bf16(grad_value(1, i)));
    }
    mg_ddp d;
    DOK(mg_ddp_init(&d, &l, NULL, 0, mg_comm_world_comm(t->w), be, g, params, MG_F32, false, false,
                    stage));
    DOK(mg_ddp_start_grad_sync(&d));
    DOK(mg_ddp_finish_grad_sync(&d));
    const char *label = distopt ? (buckets ? "reduce-scatter, buckets" : "reduce-scatter")
                                : (buckets ? "all-reduce, buckets" : "all-reduce");
    int bad = 0;
    for (int k = 0; k < l.n_buckets; k++) {
        mg_grad_range b = l.buckets[k].range, s = b;
        if (distopt) DOK(mg_grad_buffer_shard_range(&l, k, t->rank, &s));
        for (int64_t i = b.start; i < b.end; i++) {
            const bool mine = i >= s.start && i < s.end;
            float expect = want[i];
            bool ok;
            if (!mine) { /* another rank's shard: this rank's own gradient, untouched */
                ok = g[i] == grad_value(t->rank, (size_t)i);
                expect = grad_value(t->rank, (size_t)i);
            } else if (t->size == 2) {
                ok = g[i] == expect;
            } else { /* any order: within D bf16 ulps of the largest magnitude of the exact sum */
                double exact = 0, top = 0;
                for (int r = 0; r < t->size; r++) {
                    double v = bf16(grad_value(r, (size_t)i));
                    exact += v;
                    top = fmax(top, fabs(exact));
                }
                expect = (float)exact;
                ok = fabs(g[i] - exact) <= t->size * ldexp(top, -8) && g[i] == bf16(g[i]);
            }
            if (!ok && bad++ < 3)
                DEXPECT(0, "%s: element %lld is %.9g, want %.9g", label, (long long)i, (double)g[i],
                        (double)expect);
        }
    }
    DEXPECT(bad == 0, "%s: %d elements wrong", label, bad);
    mg_ddp_free(&d);
    mg_grad_buffer_layout_free(&l);
    free(g), free(want), free(params), free(stage);
}

void test_ddp_bf16(dist_ctx *t) {
    if (dist_on_device(t)) return; /* train_dp's bf16 variant covers device buffers */
    mg_backend *be = NULL;
    DOK(mg_backend_cpu_create(&be, 1));
    for (int v = 0; v < 4; v++) check(t, be, v & 1, v & 2);
    be->destroy(be);
}
