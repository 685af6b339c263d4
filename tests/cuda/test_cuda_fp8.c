/* The fp8 ops (backend_ops.h: fp8_quantize, fp8_update) against the CPU backend's: the same
 * casts of core/fp8.h and the same recipe of core/fp8_scaling.h on both, so
 *   - fp8_quantize of the same compute-dtype inputs gives the CPU's fp32 result rounded once to
 *     the compute dtype, bit for bit, and the same amax, bit for bit, also without an output
 * (spread magnitudes over the whole e4m3 and e5m2 ranges, saturating ones included; an odd n and an
 * unaligned start);
 *   - fp8_update of the same state (amaxes with a zero, an infinity and a NaN among them) gives
 *     the CPU's scales and histories bit for bit, for both formats' largest values. */
#include "cuda_test_util.h"

#include "core/fp8.h"

#include <math.h>
#include <string.h>

MG_TEST(cuda_fp8_quantize_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { n = 70001 };
    ct_pool P = ct_pool_of(t, gpu);
    float *x = ct_uniform_act(&P, 31, n, -1.0f, 1.0f), *want = ct_host(&P, n * sizeof(float));
    for (int f = 0; f < 2 && !P.failed; f++) {
        /* magnitudes from 2^-20 to 2^20 times the scale's inverse: subnormals to saturation */
        for (int i = 0; i < n; i++) x[i] = ldexpf(x[i], (i % 41) - 20);
        ct_round_act(x, n);
        const float scale = f == 0 ? 3.5f : 0.75f;
        float amax_c = 0.0f, zero = 0.0f;
        void *d_in = ct_up_act(&P, x, n), *d_out = ct_poison_act(&P, n + 1);
        float *d_scale = ct_up_f32(&P, &scale, 1), *d_amax = ct_up_f32(&P, &zero, 1);
        if (P.failed) break;
        char *out1 = (char *)d_out + mg_dtype_size(gpu->compute_dtype); /* unaligned start */
        MG_EXPECT_OK(gpu->fp8_quantize(gpu, out1, d_in, n, d_scale, d_amax, f));
        MG_EXPECT_OK(cpu->fp8_quantize(cpu, want, x, n, &scale, &amax_c, f));
        ct_round_act(want, n);
        float *got = ct_down_act(&P, out1, n), *amax_g = ct_down_f32(&P, d_amax, 1);
        if (got && amax_g) {
            CT_EXPECT_CLOSE(got, want, n, 0.0f, "fp8_quantize %s", f ? "e5m2" : "e4m3");
            MG_EXPECT(memcmp(amax_g, &amax_c, 4) == 0, "fp8_quantize %s: amax %.9g, cpu %.9g",
                      f ? "e5m2" : "e4m3", (double)*amax_g, (double)amax_c);
        }
        /* out NULL: the amax alone, the same */
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d_amax, &zero, sizeof zero));
        MG_EXPECT_OK(gpu->fp8_quantize(gpu, NULL, d_in, n, d_scale, d_amax, f));
        float *amax_only = ct_down_f32(&P, d_amax, 1);
        if (amax_only)
            MG_EXPECT(memcmp(amax_only, &amax_c, 4) == 0, "fp8_quantize %s, amax only: %.9g",
                      f ? "e5m2" : "e4m3", (double)*amax_only);
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_fp8_update_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { nt = 9, len = 5 };
    const size_t nf = 2 * nt + (size_t)nt * len;
    ct_pool P = ct_pool_of(t, gpu);
    float *st = ct_uniform_f32(&P, 7, nf, 0.0f, 300.0f);
    if (!P.failed) {
        st[0] = 0.0f;                 /* no amax: the scale stays */
        st[4] = INFINITY;             /* an overflow */
        st[5] = NAN;                  /* a NaN */
        st[nt + 2 * nt + 3] = 1e-40f; /* a subnormal in a history */
        float *d = ct_up_f32(&P, st, nf);
        for (int step = 0; step < 3 && !P.failed; step++) {
            MG_EXPECT_OK(gpu->fp8_update(gpu, d, nt, len, step, step == 1, mg_fp8_max(MG_FP8_E4M3),
                                         mg_fp8_max(MG_FP8_E5M2)));
            MG_EXPECT_OK(cpu->fp8_update(cpu, st, nt, len, step, step == 1, mg_fp8_max(MG_FP8_E4M3),
                                         mg_fp8_max(MG_FP8_E5M2)));
            float *got = ct_down_f32(&P, d, nf);
            if (got) CT_EXPECT_SAME_BITS(got, st, nf * sizeof(float), "fp8_update step %d", step);
        }
    }
    ct_pool_free(&P);
}
