/* The CPU backend's fp8 ops of the routed experts (backend_ops.h: fp8_cast_grouped,
 * fp8_grouped_linear_forward, fp8_grouped_linear_backward; the reference the CUDA ops are tested
 * against) equal its dense fp8 ops run group by group, bit for bit: the grouped cast's rows and
 * its grouped transpose's columns (core/fp8.h: each group at a 16-aligned column) are each
 * group's own fp8_cast, and the grouped products (forward with bias; backward with dinp through
 * the GELU, dW and dbias accumulated over two sources sharing the experts) are fp8_linear_forward
 * and fp8_linear_backward of each group with its expert's bytes. Also: the amax covers the groups'
 * rows only (a huge value after them is not in it), and groups with no rows at all (a receive
 * budget's empty round) write nothing. */
#include "test.h"

#include "backend/backend.h"
#include "core/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NSRC 2
#define NW   4
#define G    (NSRC * NW)
#define IC   24
#define OC   40

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

MG_TEST(cpu_fp8_grouped_ops_equal_the_dense_ops_per_group) {
    static const int32_t counts[G] = {3, 0, 17, 5, 2, 0, 9, 1};
    int rows = 0;
    for (int g = 0; g < G; g++) rows += counts[g];
    const int R = rows + 2;
    const size_t ld = (size_t)mg_fp8_group_ld(R, G), stride = 1024; /* >= OC x IC, 16-aligned */
    mg_backend *be = NULL;
    MG_EXPECT_OK(mg_backend_cpu_create(&be, 1));
    if (!be) return;
    float *x = malloc((size_t)R * IC * 4), *dy = malloc((size_t)R * OC * 4);
    float *pre = malloc((size_t)R * IC * 4), *w = malloc((size_t)NW * OC * IC * 4);
    float *bias = malloc((size_t)NW * OC * 4);
    uint8_t *xb = calloc((size_t)R * IC, 1), *xt = calloc((size_t)IC * ld, 1);
    uint8_t *db = calloc((size_t)R * OC, 1), *dt = calloc((size_t)OC * ld, 1);
    uint8_t *wb = calloc(2 * NW * stride, 1), *gb = malloc((size_t)R * OC), *gt = malloc(IC * 64);
    uint8_t *gdt = malloc(OC * 64);
    float *out = malloc((size_t)R * OC * 4), *out2 = malloc((size_t)R * OC * 4);
    float *dinp = malloc((size_t)R * IC * 4), *dinp2 = malloc((size_t)R * IC * 4);
    float *dw = calloc((size_t)NW * OC * IC, 4), *dw2 = calloc((size_t)NW * OC * IC, 4);
    float *dbias = calloc((size_t)NW * OC, 4), *dbias2 = calloc((size_t)NW * OC, 4);
    MG_EXPECT(x && dy && pre && w && bias && xb && xt && db && dt && wb && gb && gt && gdt && out &&
                  out2 && dinp && dinp2 && dw && dw2 && dbias && dbias2,
              "allocation");
    if (!(x && dy && pre && w && bias && xb && xt && db && dt && wb && gb && gt && gdt && out &&
          out2 && dinp && dinp2 && dw && dw2 && dbias && dbias2))
        goto done;
    uint32_t s = 7;
    for (int i = 0; i < R * IC; i++) x[i] = 3.0f * frand(&s), pre[i] = 2.0f * frand(&s);
    for (int i = 0; i < R * OC; i++) dy[i] = 1e-3f * frand(&s);
    for (int i = 0; i < NW * OC * IC; i++) w[i] = 0.2f * frand(&s);
    for (int i = 0; i < NW * OC; i++) bias[i] = frand(&s);
    x[(size_t)rows * IC] = 1e6f; /* past the groups: not in the amax */
    float sx = 448.0f / 3.0f, sd = 57344.0f / 1e-3f, sw = 448.0f / 0.2f;
    float sinv_x = 0, sinv_d = 0, sinv_w = 0, amax = 0, amax_g = 0;
    MG_EXPECT_OK(
        be->fp8_cast_grouped(be, xb, xt, x, counts, G, R, IC, &sx, &sinv_x, &amax, MG_FP8_E4M3));
    MG_EXPECT(amax <= 3.0f, "the grouped cast's amax %g reads a row past the groups", amax);
    MG_EXPECT_OK(
        be->fp8_cast_grouped(be, db, dt, dy, counts, G, R, OC, &sd, &sinv_d, NULL, MG_FP8_E5M2));
    for (int j = 0; j < NW; j++)
        MG_EXPECT_OK(be->fp8_cast(be, wb + j * stride, wb + (NW + j) * stride,
                                  w + (size_t)j * OC * IC, OC, IC, &sw, &sinv_w, NULL, MG_FP8_E4M3,
                                  NULL, NULL));
    /* the cast: each group's own */
    size_t r0 = 0, c0 = 0;
    for (int g = 0; g < G; g++) {
        int n = counts[g];
        MG_EXPECT_OK(be->fp8_cast(be, gb, gt, x + r0 * IC, n, IC, &sx, NULL, &amax_g, MG_FP8_E4M3,
                                  NULL, NULL));
        MG_EXPECT(memcmp(gb, xb + r0 * IC, (size_t)n * IC) == 0, "group %d: rows differ", g);
        for (int j = 0; j < IC; j++)
            MG_EXPECT(memcmp(gt + (size_t)j * n, xt + (size_t)j * ld + c0, (size_t)n) == 0,
                      "group %d: transposed row %d differs", g, j);
        r0 += (size_t)n;
        c0 += ((size_t)n + 15) / 16 * 16;
    }
    MG_EXPECT(amax == amax_g, "the grouped cast's amax %g, the groups' %g", amax, amax_g);
    /* the products */
    void *bp[NW], *dwp[NW], *dbp[NW];
    for (int j = 0; j < NW; j++) {
        bp[j] = bias + (size_t)j * OC;
        dwp[j] = dw + (size_t)j * OC * IC;
        dbp[j] = dbias + (size_t)j * OC;
    }
    const mg_fp8_tensor fx = {xb, xt, &sinv_x, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL},
                        fd = {db, dt, &sinv_d, MG_FP8_E5M2, MG_FP8_SCALE_TENSOR, NULL};
    const mg_fp8_tensor fw = {wb,          wb + NW * stride,    &sinv_w,
                              MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
    MG_EXPECT_OK(
        be->fp8_grouped_linear_forward(be, out, &fx, &fw, stride, bp, counts, NSRC, NW, IC, OC));
    MG_EXPECT_OK(be->fp8_grouped_linear_backward(be, dinp, (float *const *)dwp, (float *const *)dbp,
                                                 dy, &fd, &fx, &fw, stride, pre, counts, NSRC, NW,
                                                 R, IC, OC, true));
    r0 = 0;
    for (int g = 0; g < G; g++) {
        int n = counts[g], j = g % NW;
        mg_fp8_tensor gx = {xb + r0 * IC, gt, &sinv_x, MG_FP8_E4M3, MG_FP8_SCALE_TENSOR, NULL};
        mg_fp8_tensor gd = {db + r0 * OC, gdt, &sinv_d, MG_FP8_E5M2, MG_FP8_SCALE_TENSOR, NULL};
        mg_fp8_tensor gw = {wb + j * stride, wb + (NW + j) * stride, &sinv_w,
                            MG_FP8_E4M3,     MG_FP8_SCALE_TENSOR,    NULL};
        MG_EXPECT_OK(be->fp8_cast(be, NULL, gt, x + r0 * IC, n, IC, &sx, NULL, NULL, MG_FP8_E4M3,
                                  NULL, NULL));
        MG_EXPECT_OK(be->fp8_cast(be, NULL, gdt, dy + r0 * OC, n, OC, &sd, NULL, NULL, MG_FP8_E5M2,
                                  NULL, NULL));
        MG_EXPECT_OK(be->fp8_linear_forward(be, out2 + r0 * OC, NULL, &gx, &gw,
                                            bias + (size_t)j * OC, NULL, n, IC, OC));
        MG_EXPECT_OK(be->fp8_linear_backward(be, dinp2 + r0 * IC, dw2 + (size_t)j * OC * IC,
                                             dbias2 + (size_t)j * OC, dy + r0 * OC, &gd, &gx, &gw,
                                             pre + r0 * IC, n, IC, OC));
        r0 += (size_t)n;
    }
    MG_EXPECT(memcmp(out, out2, (size_t)rows * OC * 4) == 0, "the grouped forward differs");
    MG_EXPECT(memcmp(dinp, dinp2, (size_t)rows * IC * 4) == 0, "the grouped dinp differs");
    MG_EXPECT(memcmp(dw, dw2, (size_t)NW * OC * IC * 4) == 0, "the grouped dW differs");
    MG_EXPECT(memcmp(dbias, dbias2, (size_t)NW * OC * 4) == 0, "the grouped dbias differs");
    /* a round of a receive budget may bring no rows at all: nothing written, no failure */
    static const int32_t none[G] = {0};
    for (int i = 0; i < R * OC; i++) out[i] = -7.0f;
    MG_EXPECT_OK(be->fp8_cast_grouped(be, xb, xt, x, none, G, R, IC, &sx, NULL, NULL, MG_FP8_E4M3));
    MG_EXPECT_OK(
        be->fp8_grouped_linear_forward(be, out, &fx, &fw, stride, bp, none, NSRC, NW, IC, OC));
    MG_EXPECT_OK(be->fp8_grouped_linear_backward(be, dinp, (float *const *)dwp, (float *const *)dbp,
                                                 dy, &fd, &fx, &fw, stride, NULL, none, NSRC, NW, R,
                                                 IC, OC, true));
    MG_EXPECT(out[0] == -7.0f && out[R * OC - 1] == -7.0f, "no rows: the forward wrote");
done:
    free(x), free(dy), free(pre), free(w), free(bias), free(xb), free(xt), free(db), free(dt);
    free(wb), free(gb), free(gt), free(gdt), free(out), free(out2), free(dinp), free(dinp2);
    free(dw), free(dw2), free(dbias), free(dbias2);
    be->destroy(be);
}
