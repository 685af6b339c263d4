/* Stream dropout masks (core/dropout.h's MG_DROPOUT_STREAM, the default) through the CPU ops, and
 * the model's streams (model/rng.h): Megatron's seeds, the use numbers of a step, and the
 * offsets in backend memory (bind, rng_advance, a resumed run's offset).
 *
 * Statistical bounds: n independent draws kept with probability q have a kept fraction of
 * standard deviation sqrt(q(1-q)/n); each bound is 6 of them (a correct mask fails one with
 * probability ~2e-9; the draws are seeded, so a pass is reproducible). Two masks drawn
 * independently keep an element in both with probability q^2: a stream position or seed that
 * did not reach the draws would keep it in both with probability q. */
#include "cpu_test_util.h"

#include "core/dropout.h"
#include "model/rng.h"

#include <math.h>

#define SIGMAS 6.0

static double bound(double q, double n) {
    return SIGMAS * sqrt(q * (1 - q) / n);
}

/* A stream {seed, offset} in the backend's memory. */
static uint64_t *stream(mg_test_ctx *t, mg_backend *be, uint64_t seed, uint64_t offset) {
    void *p = NULL;
    MG_EXPECT_OK(be->alloc(be, 2 * sizeof(uint64_t), &p));
    const uint64_t v[2] = {seed, offset};
    if (p) MG_EXPECT_OK(be->copy_h2d(be, p, v, sizeof v));
    return p;
}

enum { N = 1024, H = 384, S = 256 }; /* 393216 elements: 4 sequences of 256 tokens */

/* dropout_add of ones onto a zero residual: the mask's factors. */
static void factors(mg_test_ctx *t, mg_backend *be, const mg_dropout *d, float *out) {
    static float ones[N * H], zero[N * H];
    for (int i = 0; i < N * H; i++) ones[i] = 1.0f;
    MG_EXPECT_OK(be->dropout_add(be, out, ones, NULL, zero, N, H, S, d));
}

MG_TEST(dropout_stream_keep_fraction_and_repeat) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    uint64_t *st = stream(t, be, 1234, 0);
    float *a = t_zeros(N * H), *b = t_zeros(N * H), *g = t_zeros(N * H);
    const double ps[] = {0.1, 0.3};
    for (int k = 0; k < 2 && st; k++) {
        const mg_dropout d = mg_dropout_stream_init(ps[k], st, 7);
        factors(t, be, &d, a);
        double kept = 0, n = (double)N * H, q = 1 - ps[k];
        int other = 0;
        for (int i = 0; i < N * H; i++) {
            kept += a[i] != 0.0f;
            other += a[i] != 0.0f && a[i] != d.scale;
        }
        MG_EXPECT(other == 0, "p %g: %d factors neither 0 nor 1/(1-p)", ps[k], other);
        MG_EXPECT(fabs(kept / n - q) <= bound(q, n), "p %g: kept %.6f of %.0f, want %.6f +- %.2g",
                  ps[k], kept / n, n, q, bound(q, n));
        /* the same op again, and its backward, draw the same mask */
        factors(t, be, &d, b);
        MG_EXPECT(!memcmp(a, b, sizeof(float) * N * H), "p %g: the same op drew another mask",
                  ps[k]);
        static float ones[N * H];
        for (int i = 0; i < N * H; i++) ones[i] = 1.0f;
        MG_EXPECT_OK(be->dropout_backward(be, g, ones, N, H, S, &d));
        MG_EXPECT(!memcmp(a, g, sizeof(float) * N * H), "p %g: the backward drew another mask",
                  ps[k]);
    }
    free(a), free(b), free(g);
    if (st) be->free(be, st);
    be->destroy(be);
}

/* Elements kept by both masks, over N x H. */
static double both_kept(const float *a, const float *b) {
    double k = 0;
    for (int i = 0; i < N * H; i++) k += a[i] != 0.0f && b[i] != 0.0f;
    return k;
}

/* Other use numbers, other seeds and a moved offset give independent masks; the offset and the
 * use add (offset o, use u draws what offset 0, use o + u draws), and rng_advance moves every
 * stream of the state. */
MG_TEST(dropout_stream_uses_seeds_and_offsets) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    const double p = 0.3, q = 1 - p, n = (double)N * H;
    uint64_t *s0 = stream(t, be, 1234, 0), *s1 = stream(t, be, 1235, 0);
    float *a = t_zeros(N * H), *b = t_zeros(N * H);
    if (!s0 || !s1) goto done;
    const mg_dropout base = mg_dropout_stream_init(p, s0, 8);
    factors(t, be, &base, a);
    const struct {
        const char *what;
        mg_dropout d;
    } other[] = {{"use 9", mg_dropout_stream_init(p, s0, 9)},
                 {"use 8 + 3 x 12 layers", mg_dropout_stream_init(p, s0, 8 + 36)},
                 {"seed + 1", mg_dropout_stream_init(p, s1, 8)}};
    for (size_t k = 0; k < sizeof other / sizeof *other; k++) {
        factors(t, be, &other[k].d, b);
        double f = both_kept(a, b) / n;
        MG_EXPECT(fabs(f - q * q) <= bound(q * q, n),
                  "%s: both kept %.6f, want %.6f +- %.2g (independent masks)", other[k].what, f,
                  q * q, bound(q * q, n));
    }
    /* offset 5, use 3 is offset 0, use 8 */
    uint64_t *s5 = stream(t, be, 1234, 5);
    if (s5) {
        const mg_dropout d5 = mg_dropout_stream_init(p, s5, 3);
        factors(t, be, &d5, b);
        MG_EXPECT(!memcmp(a, b, sizeof(float) * N * H), "offset 5 use 3 differs from use 8");
        be->free(be, s5);
    }
    /* rng_advance by 5 over two streams: both offsets move, the seeds stay */
    uint64_t *pair = NULL;
    MG_EXPECT_OK(be->alloc(be, 4 * sizeof(uint64_t), (void **)&pair));
    if (pair) {
        const uint64_t v[4] = {1234, 0, 77, 40};
        MG_EXPECT_OK(be->copy_h2d(be, pair, v, sizeof v));
        MG_EXPECT_OK(be->rng_advance(be, pair, 2, 5));
        uint64_t w[4];
        MG_EXPECT_OK(be->copy_d2h(be, w, pair, sizeof w));
        MG_EXPECT(w[0] == 1234 && w[1] == 5 && w[2] == 77 && w[3] == 45,
                  "after rng_advance 5: {%llu, %llu, %llu, %llu}", (unsigned long long)w[0],
                  (unsigned long long)w[1], (unsigned long long)w[2], (unsigned long long)w[3]);
        const mg_dropout da = mg_dropout_stream_init(p, pair, 3);
        factors(t, be, &da, b);
        MG_EXPECT(!memcmp(a, b, sizeof(float) * N * H), "advanced by 5, use 3 differs from use 8");
        be->free(be, pair);
    }
done:
    free(a), free(b);
    if (s0) be->free(be, s0);
    if (s1) be->free(be, s1);
    be->destroy(be);
}

/* Attention dropout from a stream: another sequence or head of the op draws independently. */
MG_TEST(dropout_stream_attention_heads_independent) {
    const double p = 0.2, q = 1 - p;
    const uint64_t st[2] = {99, 12}; /* the CPU reads the stream from host memory */
    const mg_dropout d = mg_dropout_stream_init(p, st, 4);
    enum { SA = 512 };
    double n = 0, kept = 0, head = 0, seq = 0;
    for (int s = 0; s < SA; s++)
        for (int u = 0; u < SA; u++) {
            int k00 = mg_dropout_attention(&d, 0, 0, s, u, SA) != 0.0f;
            int k01 = mg_dropout_attention(&d, 0, 1, s, u, SA) != 0.0f;
            int k10 = mg_dropout_attention(&d, 1, 0, s, u, SA) != 0.0f;
            n += 1, kept += k00, head += k00 && k01, seq += k00 && k10;
        }
    MG_EXPECT(fabs(kept / n - q) <= bound(q, n), "kept %.6f, want %.6f", kept / n, q);
    MG_EXPECT(fabs(head / n - q * q) <= bound(q * q, n), "heads 0 and 1 both kept %.6f, want %.6f",
              head / n, q * q);
    MG_EXPECT(fabs(seq / n - q * q) <= bound(q * q, n),
              "sequences 0 and 1 both kept %.6f, want %.6f", seq / n, q * q);
}

/* Megatron's model_parallel_cuda_manual_seed: default seed + 100 x pipeline rank, the
 * model-parallel stream 2718 + tensor-parallel rank above it. */
MG_TEST(model_rng_seeds_as_megatron) {
    const struct {
        uint64_t seed;
        int pp, tp;
        uint64_t want[2];
    } c[] = {{1234, 0, 0, {1234, 3952}},
             {1234, 0, 1, {1234, 3953}},
             {1234, 3, 2, {1534, 4254}},
             {0, 1, 7, {100, 2825}}};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        uint64_t got[2];
        mg_model_rng_seeds(c[i].seed, c[i].pp, c[i].tp, got);
        MG_EXPECT(got[0] == c[i].want[0] && got[1] == c[i].want[1],
                  "seed %llu pp %d tp %d: {%llu, %llu}, want {%llu, %llu}",
                  (unsigned long long)c[i].seed, c[i].pp, c[i].tp, (unsigned long long)got[0],
                  (unsigned long long)got[1], (unsigned long long)c[i].want[0],
                  (unsigned long long)c[i].want[1]);
    }
}

/* The use numbers of a step: one per (microbatch, layer, site), all below the step's count, none
 * twice, none skipped. */
MG_TEST(model_rng_uses_of_a_step) {
    enum { L = 5, MB = 4 };
    const uint64_t per_step = mg_model_rng_step_uses(L, MB);
    MG_EXPECT(per_step == MB * 3 * L, "a step of %d microbatches of %d layers: %llu uses", MB, L,
              (unsigned long long)per_step);
    unsigned char seen[MB * 3 * L] = {0};
    int bad = 0;
    for (int mb = 0; mb < MB; mb++)
        for (int l = 0; l < L; l++)
            for (int site = MG_DROPOUT_ATTENTION; site <= MG_DROPOUT_MLP_OUT; site++) {
                uint64_t u = mg_model_rng_use(L, mb, l, site);
                if (u >= per_step || seen[u]++) bad++;
            }
    MG_EXPECT(bad == 0, "%d use numbers out of range or repeated", bad);
}

/* The model's streams in backend memory: seeded at bind with offsets 0; advance moves both;
 * a resumed run's offset replaces both offsets and keeps the seeds. */
MG_TEST(model_rng_bind_advance_and_restore) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    mg_model_rng r = {0};
    MG_EXPECT_OK(mg_model_rng_bind(&r, be, 1234, 1, 1));
    uint64_t v[4] = {0}, off = 99;
    if (r.state) MG_EXPECT_OK(be->copy_d2h(be, v, r.state, sizeof v));
    MG_EXPECT(v[0] == 1334 && v[1] == 0 && v[2] == 4053 && v[3] == 0,
              "bound: {%llu, %llu, %llu, %llu}", (unsigned long long)v[0], (unsigned long long)v[1],
              (unsigned long long)v[2], (unsigned long long)v[3]);
    MG_EXPECT(mg_model_rng_stream(&r, MG_RNG_MODEL_PARALLEL) == r.state + 2,
              "the model-parallel stream is not the second pair");
    MG_EXPECT_OK(mg_model_rng_advance(&r, 30));
    MG_EXPECT_OK(mg_model_rng_advance(&r, 30));
    MG_EXPECT_OK(mg_model_rng_offset(&r, &off));
    if (r.state) MG_EXPECT_OK(be->copy_d2h(be, v, r.state, sizeof v));
    MG_EXPECT(off == 60 && v[1] == 60 && v[3] == 60, "advanced twice by 30: %llu (%llu, %llu)",
              (unsigned long long)off, (unsigned long long)v[1], (unsigned long long)v[3]);
    MG_EXPECT_OK(mg_model_rng_set_offset(&r, 1u << 20));
    if (r.state) MG_EXPECT_OK(be->copy_d2h(be, v, r.state, sizeof v));
    MG_EXPECT(v[0] == 1334 && v[1] == 1u << 20 && v[2] == 4053 && v[3] == 1u << 20,
              "restored: {%llu, %llu, %llu, %llu}", (unsigned long long)v[0],
              (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3]);
    mg_model_rng_free(&r);
    MG_EXPECT(r.state == NULL, "freed streams still set");
    MG_EXPECT_OK(mg_model_rng_offset(&r, &off));
    MG_EXPECT(off == 0, "an unbound model's offset %llu", (unsigned long long)off);
    be->destroy(be);
}
