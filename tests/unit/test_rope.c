/* Partial rotary embeddings (--rotary-percent) and per-token positions: the CPU rope ops and the
 * model's tables against Hugging Face's GPT-NeoX rotary code (tests/golden/rope_partial.golden,
 * tools/reference/make_rope_golden.py, which also checks it against megatron-core), the
 * positions argument against a reordering of the rows, bad arguments, and --rotary-percent's
 * validation. */
#include "config_test_util.h"
#include "cpu_test_util.h"
#include "golden_io.h"

#include "config/flags.h"
#include "model/gpt.h"

static const char *const k_cases[] = {"gqa_half", "mqa_quarter", "mha_third", "whole"};

static const mg_golden_record *rec(mg_test_ctx *t, const mg_golden *g, const char *c,
                                   const char *what, int64_t numel) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", c, what);
    const mg_golden_record *r = mg_golden_find(g, name);
    MG_EXPECT(r && r->numel == numel, "golden record %s missing or not %lld elements", name,
              (long long)numel);
    return r && r->numel == numel ? r : NULL;
}

/* Entries rope must leave alone (value heads, channels [rd, hd) of q and k) that differ. */
static int untouched_changed(const float *got, const float *in, int N, int nq, int ng, int hd,
                             int rd) {
    int r = nq / ng, bad = 0;
    size_t C = (size_t)ng * (r + 2) * hd;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < ng * (r + 2); h++) {
            size_t off = (size_t)i * C + (size_t)h * hd;
            for (int k = h % (r + 2) == r + 1 ? 0 : rd; k < hd; k++)
                bad += memcmp(&got[off + k], &in[off + k], sizeof(float)) != 0;
        }
    return bad;
}

/* fp32 tables and products against torch's fp32: a few ulps (angles up to S rad). */
#define ROPE_TOL 2e-6

MG_TEST(rope_partial_matches_hf_golden) {
    mg_golden g;
    MG_EXPECT_OK(mg_golden_load(&g, MG_GOLDEN_DIR "/rope_partial.golden"));
    if (t->failures) return;
    mg_backend *be = t_cpu(t);
    if (!be) {
        mg_golden_free(&g);
        return;
    }
    for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
        const char *c = k_cases[k];
        const mg_golden_record *dims = rec(t, &g, c, "dims", 6);
        const mg_golden_record *pct = rec(t, &g, c, "percent", 1), *base = rec(t, &g, c, "base", 1);
        if (!dims || !pct || !base) continue;
        const int32_t *d = dims->data;
        int B = d[0], S = d[1], nq = d[2], ng = d[3], hd = d[4], rd = d[5], N = B * S;
        size_t n = (size_t)N * ng * (nq / ng + 2) * hd, nt = (size_t)S * (rd / 2);
        /* the rotated channels as validation and the model compute them */
        double percent = *(const float *)pct->data;
        int got_rd = mg_config_rotary_dim(hd, percent);
        MG_EXPECT(got_rd == rd, "%s: int(%d * %g) gave %d rotated channels, want %d", c, hd,
                  percent, got_rd, rd);
        const mg_golden_record *cs = rec(t, &g, c, "cos", (int64_t)nt);
        const mg_golden_record *sn = rec(t, &g, c, "sin", (int64_t)nt);
        const mg_golden_record *in = rec(t, &g, c, "qkv", (int64_t)n);
        const mg_golden_record *out = rec(t, &g, c, "out", (int64_t)n);
        const mg_golden_record *pos = rec(t, &g, c, "pos", N);
        const mg_golden_record *out_pos = rec(t, &g, c, "out_pos", (int64_t)n);
        const mg_golden_record *r = rec(t, &g, c, "r", (int64_t)n);
        const mg_golden_record *grad = rec(t, &g, c, "grad", (int64_t)n);
        if (!cs || !sn || !in || !out || !pos || !out_pos || !r || !grad) continue;
        /* the model's tables (model/gpt.c) against HF's */
        float *mc = t_zeros(nt), *ms = t_zeros(nt);
        mg_gpt_rope_tables(mc, ms, S, rd, *(const float *)base->data);
        double ec = mg_test_rel_err(mc, cs->data, nt), es = mg_test_rel_err(ms, sn->data, nt);
        MG_EXPECT(ec < ROPE_TOL && es < ROPE_TOL, "%s: tables differ from HF's: cos %g, sin %g", c,
                  ec, es);
        /* the op with HF's tables: positions i % S, then the golden's positions */
        float *x = t_dup(in->data, n);
        MG_EXPECT_OK(be->rope_forward(be, x, cs->data, sn->data, NULL, N, S, nq, ng, hd, rd));
        double e = mg_test_rel_err(x, out->data, n);
        MG_EXPECT(e < ROPE_TOL, "%s: rope_forward differs from HF by %g", c, e);
        int bad = untouched_changed(x, in->data, N, nq, ng, hd, rd);
        MG_EXPECT(bad == 0, "%s: rope_forward changed %d entries past rd or in the values", c, bad);
        memcpy(x, in->data, n * sizeof *x);
        MG_EXPECT_OK(be->rope_forward(be, x, cs->data, sn->data, pos->data, N, S, nq, ng, hd, rd));
        e = mg_test_rel_err(x, out_pos->data, n);
        MG_EXPECT(e < ROPE_TOL, "%s: rope_forward with positions differs from HF by %g", c, e);
        /* the backward is autograd's gradient of sum(out_pos * r) */
        float *dx = t_dup(r->data, n);
        MG_EXPECT_OK(
            be->rope_backward(be, dx, cs->data, sn->data, pos->data, N, S, nq, ng, hd, rd));
        e = mg_test_rel_err(dx, grad->data, n);
        MG_EXPECT(e < ROPE_TOL, "%s: rope_backward differs from autograd by %g", c, e);
        bad = untouched_changed(dx, r->data, N, nq, ng, hd, rd);
        MG_EXPECT(bad == 0, "%s: rope_backward changed %d entries it must pass", c, bad);
        free(mc), free(ms), free(x), free(dx);
    }
    be->destroy(be);
    mg_golden_free(&g);
}

/* Positions are a row's own: permuting the rows of the input and giving each row its old
 * position (pos[i] = perm[i] % S) gives the permuted output of the default positions, bit for
 * bit, forward and backward; with the identity they are the default. */
MG_TEST(rope_positions_permutation_equals_reordering) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 3, S = 11, NQ = 6, NG = 2, HD = 20, RD = 10, N = B * S };
    const size_t C = (size_t)NG * (NQ / NG + 2) * HD, n = (size_t)N * C, nt = (size_t)S * RD / 2;
    float *cs = t_zeros(nt), *sn = t_zeros(nt);
    mg_gpt_rope_tables(cs, sn, S, RD, 10000.0);
    float *x = t_rnd(90, n, 1), *ref = t_dup(x, n), *y = t_zeros(n);
    int32_t perm[N], pos[N];
    for (int i = 0; i < N; i++) perm[i] = i;
    for (int i = N - 1; i > 0; i--) { /* a seeded Fisher-Yates shuffle */
        int j = (int)(mg_rng_uniform(T_SEED, 91, (uint64_t)i) * (float)(i + 1));
        j = j > i ? i : j;
        int32_t tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (int i = 0; i < N; i++) {
        memcpy(y + (size_t)i * C, x + (size_t)perm[i] * C, C * sizeof *y);
        pos[i] = perm[i] % S;
    }
    for (int dir = 0; dir < 2; dir++) {
        float *a = t_dup(ref, n), *b = t_dup(y, n);
        mg_status (*op)(mg_backend *, void *, const float *, const float *, const int32_t *, int,
                        int, int, int, int, int) = dir ? be->rope_backward : be->rope_forward;
        MG_EXPECT_OK(op(be, a, cs, sn, NULL, N, S, NQ, NG, HD, RD));
        MG_EXPECT_OK(op(be, b, cs, sn, pos, N, S, NQ, NG, HD, RD));
        int bad = 0, moved = 0;
        for (int i = 0; i < N; i++) {
            bad += memcmp(b + (size_t)i * C, a + (size_t)perm[i] * C, C * sizeof *a) != 0;
            moved += perm[i] != i;
        }
        MG_EXPECT(moved > N / 2, "the shuffle left %d of %d rows in place", N - moved, N);
        MG_EXPECT(bad == 0, "%s: %d rows differ from the reordered default-position rows",
                  dir ? "backward" : "forward", bad);
        /* identity positions are the default ones */
        float *c = t_dup(ref, n);
        int32_t ident[N];
        for (int i = 0; i < N; i++) ident[i] = i % S;
        MG_EXPECT_OK(op(be, c, cs, sn, ident, N, S, NQ, NG, HD, RD));
        MG_EXPECT(memcmp(c, a, n * sizeof *c) == 0, "positions i %% S differ from NULL");
        free(a), free(b), free(c);
    }
    free(cs), free(sn), free(x), free(ref), free(y);
    be->destroy(be);
}

MG_TEST(rope_rejects_bad_channels_and_positions) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { S = 4, N = 8, NQ = 2, NG = 1, HD = 8 };
    size_t n = (size_t)N * NG * (NQ / NG + 2) * HD;
    float *x = t_rnd(95, n, 1), *cs = t_zeros(S * HD / 2), *sn = t_zeros(S * HD / 2);
    float *keep = t_dup(x, n);
    const int bad_rd[] = {0, 3, 10, -2};
    for (int i = 0; i < 4; i++) {
        MG_EXPECT_ERROR(be->rope_forward(be, x, cs, sn, NULL, N, S, NQ, NG, HD, bad_rd[i]),
                        MG_ERR_INTERNAL, "rotated channels");
        MG_EXPECT_ERROR(be->rope_backward(be, x, cs, sn, NULL, N, S, NQ, NG, HD, bad_rd[i]),
                        MG_ERR_INTERNAL, "rotated channels");
    }
    int32_t pos[N] = {0, 1, 2, 3, 0, 1, 4, 3}; /* 4 is outside [0, S) */
    MG_EXPECT_ERROR(be->rope_forward(be, x, cs, sn, pos, N, S, NQ, NG, HD, HD), MG_ERR_INTERNAL,
                    "position 4 outside [0, 4)");
    pos[6] = -1;
    MG_EXPECT_ERROR(be->rope_backward(be, x, cs, sn, pos, N, S, NQ, NG, HD, 4), MG_ERR_INTERNAL,
                    "position -1");
    MG_EXPECT(memcmp(x, keep, n * sizeof *x) == 0, "a refused call changed its buffer");
    free(x), free(cs), free(sn), free(keep);
    be->destroy(be);
}

/* --rotary-percent: a fraction in (0, 1] whose channel count int(kv-channels * P) is even and
 * positive; each refusal is one line naming the flag and a value that works. */
MG_TEST(rotary_percent_validation) {
    static const char base[] = "--num-layers 2 --hidden-size 128 --num-attention-heads 2 "
                               "--seq-length 16 --max-position-embeddings 16 --micro-batch-size 1 "
                               "--train-iters 1 --lr 1e-3 --mock-data --vocab-size 64 "
                               "--position-embedding-type rope"; /* kv-channels 64 */
    mg_config c;
    const char *ok[] = {"--rotary-percent", "0.5", NULL};
    MG_EXPECT_OK(mg_test_config(&c, base, ok));
    MG_EXPECT(c.rotary_percent == 0.5 &&
                  mg_config_rotary_dim(c.kv_channels, c.rotary_percent) == 32,
              "--rotary-percent 0.5 of 64 channels: %g, %d", c.rotary_percent,
              mg_config_rotary_dim(c.kv_channels, c.rotary_percent));
    MG_EXPECT_OK(mg_test_config(&c, base, NULL));
    MG_EXPECT(c.rotary_percent == 1.0 && mg_config_rotary_dim(64, 1.0) == 64, "default 1.0");
    const struct {
        const char *value, *msg;
    } bad[] = {
        {"0",
         "--rotary-percent must be in (0, 1] (the fraction of each head RoPE rotates), got 0;"},
        {"1.5", "--rotary-percent must be in (0, 1]"},
        {"-0.25", "got -0.25"},
        /* int(64 * 0.3) = 19: odd; 18 channels need 0.29 (int(18.56)) */
        {"0.3", "--rotary-percent 0.3 rotates int(64 * 0.3) = 19 of the 64 channels of a head "
                "(--kv-channels); RoPE rotates channel pairs, so the count must be even and "
                "positive: use e.g. --rotary-percent 0.29 (18 channels)"},
        {"0.01", "int(64 * 0.01) = 0 of the 64 channels"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *extra[] = {"--rotary-percent", bad[i].value, NULL};
        MG_EXPECT_ERROR(mg_test_config(&c, base, extra), MG_ERR_USAGE, bad[i].msg);
    }
    /* the suggestion validates and gives what it says */
    const char *sug[] = {"--rotary-percent", "0.29", NULL};
    MG_EXPECT_OK(mg_test_config(&c, base, sug));
    MG_EXPECT(mg_config_rotary_dim(c.kv_channels, c.rotary_percent) == 18, "0.29 gives %d",
              mg_config_rotary_dim(c.kv_channels, c.rotary_percent));
    /* without RoPE the channel count does not matter, the range does */
    static const char learned[] = "--num-layers 2 --hidden-size 128 --num-attention-heads 2 "
                                  "--seq-length 16 --micro-batch-size 1 --train-iters 1 --lr 1e-3 "
                                  "--mock-data --vocab-size 64 --rotary-percent";
    const char *odd_ok[] = {"0.3", NULL};
    MG_EXPECT_OK(mg_test_config(&c, learned, odd_ok));
    const char *zero[] = {"0", NULL};
    MG_EXPECT_ERROR(mg_test_config(&c, learned, zero), MG_ERR_USAGE, "--rotary-percent must be");
}
