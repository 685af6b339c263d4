/* Blockwise fp8 casts (core/fp8_block.h) against tests/golden/fp8/fp8_block.json, written by
 * tools/reference/fp8_block_golden.py from Transformer Engine's block-scale recipe: a 129 x 136
 * input (log-uniform magnitudes, a zero row and column, an infinity, a NaN, a row whose scale
 * overflows fp32) cast in 1 x 128 blocks along rows, along columns (the transpose) and in
 * 128 x 128 tiles gives the reference's bytes and scale inverses bit for bit, for e4m3 with and
 * without power-of-two scales and e5m2 with them; the scale rule's edges by hand; and the cpu
 * backend's products on block-scaled operands (fp8_cast_blocks, fp8_linear_forward and
 * _backward) equal the products of the values decoded here, block by block. */
#include "test.h"

#include "golden_io.h"

#include "core/fp8_block.h"
#include "cpu_test_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN MG_GOLDEN_DIR "/fp8/fp8_block.json"

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* The bytes of hex string s (n of them); NULL when it has another length. */
static uint8_t *unhex(const char *s, size_t n) {
    if (!s || strlen(s) != 2 * n) return NULL;
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; b && i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) {
            free(b);
            return NULL;
        }
        b[i] = (uint8_t)v;
    }
    return b;
}

/* got against want (n bytes of format f, NaN for NaN whatever its pattern) and the scale
 * inverses (m fp32 values) against the reference's bits. */
static void same(mg_test_ctx *t, const char *what, const uint8_t *got, const char *want_hex,
                 size_t n, const float *inv, const cJSON *want_inv, size_t m, mg_fp8_format f) {
    uint8_t *want = unhex(want_hex, n);
    MG_EXPECT(want != NULL, "%s: the reference's bytes are not %zu hex pairs", what, n);
    MG_EXPECT((size_t)cJSON_GetArraySize(want_inv) == m, "%s: %d scale inverses, expected %zu",
              what, cJSON_GetArraySize(want_inv), m);
    int bad = 0;
    for (size_t i = 0; want && i < n && bad < 5; i++) {
        bool gn = isnan(mg_fp8_to_f32(got[i], f)), wn = isnan(mg_fp8_to_f32(want[i], f));
        if (gn || wn ? gn != wn : got[i] != want[i]) {
            MG_EXPECT(0, "%s: byte %zu is 0x%02x, the reference 0x%02x", what, i, got[i], want[i]);
            bad++;
        }
    }
    for (size_t i = 0; i < m && i < (size_t)cJSON_GetArraySize(want_inv) && bad < 10; i++) {
        uint32_t g = mg_hb_bits(inv[i]),
                 w = (uint32_t)cJSON_GetArrayItem(want_inv, (int)i)->valuedouble;
        if (g != w) {
            MG_EXPECT(0, "%s: scale inverse %zu is 0x%08x, the reference 0x%08x", what, i, g, w);
            bad++;
        }
    }
    free(want);
}

MG_TEST(fp8_block_casts_match_the_reference) {
    cJSON *g = mg_golden_json(t, GOLDEN);
    if (!g) return;
    const int R = item(g, "rows")->valueint, C = item(g, "cols")->valueint;
    const size_t n = (size_t)R * C;
    const cJSON *in = item(g, "input");
    MG_EXPECT((size_t)cJSON_GetArraySize(in) == n, "%d inputs for %d x %d", cJSON_GetArraySize(in),
              R, C);
    float *x = malloc(n * sizeof *x), *inv = malloc(n * sizeof *inv),
          *ref = malloc(n * sizeof *ref);
    uint8_t *b = malloc(n);
    for (size_t i = 0; x && i < n; i++)
        x[i] = mg_hb_float((uint32_t)cJSON_GetArrayItem(in, (int)i)->valuedouble);
    const cJSON *c;
    int cases = 0;
    cJSON_ArrayForEach(c, item(g, "cases")) {
        const mg_fp8_format f =
            strcmp(item(c, "format")->valuestring, "e5m2") == 0 ? MG_FP8_E5M2 : MG_FP8_E4M3;
        const bool pow2 = cJSON_IsTrue(item(c, "pow2"));
        char what[64];
        snprintf(what, sizeof what, "%s%s rows", item(c, "format")->valuestring,
                 pow2 ? " pow2" : "");
        /* the scales in the reference's order (run by run), from ours (block-major) */
        mg_fp8_block_rows(b, inv, x, R, C, f, pow2);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < mg_fp8_block_count(C); k++)
                ref[(size_t)r * mg_fp8_block_count(C) + k] = inv[mg_fp8_block_at(R, r, k)];
        same(t, what, b, item(c, "rows")->valuestring, n, ref, item(c, "rows_scale_inv"),
             (size_t)R * mg_fp8_block_count(C), f);
        snprintf(what, sizeof what, "%s%s cols", item(c, "format")->valuestring,
                 pow2 ? " pow2" : "");
        mg_fp8_block_cols(b, inv, x, R, C, f, pow2);
        for (int r = 0; r < C; r++)
            for (int k = 0; k < mg_fp8_block_count(R); k++)
                ref[(size_t)r * mg_fp8_block_count(R) + k] = inv[mg_fp8_block_at(C, r, k)];
        same(t, what, b, item(c, "cols")->valuestring, n, ref, item(c, "cols_scale_inv"),
             (size_t)C * mg_fp8_block_count(R), f);
        snprintf(what, sizeof what, "%s%s tiles", item(c, "format")->valuestring,
                 pow2 ? " pow2" : "");
        float *inv_t = malloc(mg_fp8_tile_floats(C, R) * sizeof *inv_t);
        mg_fp8_block_tiles(b, inv, inv_t, x, R, C, f, pow2);
        int bad_t = 0; /* the transpose's grid holds the same scales, transposed */
        for (int br = 0; inv_t && br < mg_fp8_block_count(R); br++)
            for (int bc = 0; bc < mg_fp8_block_count(C); bc++) {
                ref[(size_t)br * mg_fp8_block_count(C) + bc] = inv[mg_fp8_tile_at(C, br, bc)];
                bad_t += mg_hb_bits(inv_t[mg_fp8_tile_at(R, bc, br)]) !=
                         mg_hb_bits(inv[mg_fp8_tile_at(C, br, bc)]);
            }
        MG_EXPECT(inv_t && bad_t == 0, "%s: %d tiles of the transposed grid differ", what, bad_t);
        free(inv_t);
        same(t, what, b, item(c, "tiles")->valuestring, n, ref, item(c, "tiles_scale_inv"),
             (size_t)mg_fp8_block_count(R) * mg_fp8_block_count(C), f);
        cases++;
    }
    MG_EXPECT(cases == 3, "%d cases in the reference, expected 3", cases);
    free(x);
    free(inv);
    free(ref);
    free(b);
    cJSON_Delete(g);
}

/* The rule by hand: an amax at the format's largest value scales by 1; 0, infinity and NaN by 1;
 * 448 / 3 rounds down to 128 with power-of-two scales; an amax whose quotient overflows gets the
 * largest fp32 (2^127 with power-of-two scales); and a tensor's last block holds what is left. */
MG_TEST(fp8_block_scale_edges) {
    MG_EXPECT(mg_fp8_block_scale(448.0f, 448.0f, true) == 1.0f, "amax 448");
    MG_EXPECT(mg_fp8_block_scale(0.0f, 448.0f, true) == 1.0f &&
                  mg_fp8_block_scale(INFINITY, 448.0f, false) == 1.0f &&
                  mg_fp8_block_scale(NAN, 448.0f, true) == 1.0f,
              "amax 0, infinite or NaN: scale 1");
    MG_EXPECT(mg_fp8_block_scale(3.0f, 448.0f, true) == 128.0f &&
                  mg_fp8_block_scale(3.0f, 448.0f, false) == 448.0f / 3.0f,
              "448 / 3: 128 as a power of two, else the quotient");
    MG_EXPECT(mg_fp8_block_scale(1e-41f, 448.0f, false) == FLT_MAX &&
                  mg_fp8_block_scale(1e-41f, 448.0f, true) == ldexpf(1.0f, 127),
              "an overflowing quotient: the largest fp32 (a power of two: 2^127)");
    MG_EXPECT(mg_fp8_block_count(128) == 1 && mg_fp8_block_count(129) == 2 &&
                  mg_fp8_block_count(1) == 1,
              "blocks of 128");
}

/* The value of byte q of block-scaled bytes: times the inverse of its block's scale. */
static double val(uint8_t q, mg_fp8_format f, float scale_inv) {
    return (double)mg_fp8_to_f32(q, f) * (double)scale_inv;
}

/* The cpu backend's linear on block-scaled operands (the blockwise recipe's forms: the input and
 * the gradient cast along rows and, separately, along columns; the weight in tiles, its transpose
 * the same bytes): out = x w^T, dinp = dy w and dw = dy^T x each equal the fp64 products of the
 * values decoded here, to fp32 rounding. N = 130 tokens (two column blocks), 200 inputs and 140
 * outputs (partial blocks), rows of very different magnitudes. */
MG_TEST(fp8_block_linear_equals_dequantized_products) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { N = 130, IC = 200, OC = 140 };
    /* the layouts written out here: 1 x 128 scales block-major (runs contiguous), tile grids with
     * rows padded to 4 (and the transpose's own grid), as cuBLASLt reads them */
    const int B = MG_FP8_BLOCK, nbI = mg_fp8_block_count(IC), nbO = mg_fp8_block_count(OC),
              nbN = mg_fp8_block_count(N), ldI = (nbI + 3) / 4 * 4, ldO = (nbO + 3) / 4 * 4;
    float *x = t_rnd(201, (size_t)N * IC, 1), *w = t_rnd(202, (size_t)OC * IC, 0.05f),
          *dy = t_rnd(203, (size_t)N * OC, 1e-3f);
    for (int i = 0; i < N; i++) /* each row its own magnitude: the blocks' scales differ */
        for (int k = 0; k < IC; k++) x[(size_t)i * IC + k] *= ldexpf(1.0f, i % 13 - 6);
    uint8_t *xr = malloc((size_t)N * IC), *xc = malloc((size_t)N * IC),
            *wr = malloc((size_t)OC * IC), *wt = malloc((size_t)OC * IC),
            *dr = malloc((size_t)N * OC), *dc = malloc((size_t)N * OC);
    float *xs = malloc((size_t)N * nbI * 4), *xcs = malloc((size_t)IC * nbN * 4),
          *ws = malloc((size_t)nbO * ldI * 4), *wst = malloc((size_t)nbI * ldO * 4),
          *ds = malloc((size_t)N * nbO * 4), *dcs = malloc((size_t)OC * nbN * 4);
    float *out = t_zeros((size_t)N * OC), *dinp = t_zeros((size_t)N * IC),
          *dw = t_zeros((size_t)OC * IC);
    MG_EXPECT_OK(be->fp8_cast_blocks(be, xr, xs, xc, xcs, x, N, IC, false, MG_FP8_E4M3, true));
    MG_EXPECT_OK(be->fp8_cast_blocks(be, wr, ws, wt, wst, w, OC, IC, true, MG_FP8_E4M3, true));
    MG_EXPECT_OK(be->fp8_cast_blocks(be, dr, ds, dc, dcs, dy, N, OC, false, MG_FP8_E5M2, true));
    const mg_fp8_tensor fx = {xr, xc, xs, MG_FP8_E4M3, MG_FP8_SCALE_ROWS, xcs},
                        fw = {wr, wt, ws, MG_FP8_E4M3, MG_FP8_SCALE_TILES, wst},
                        fd = {dr, dc, ds, MG_FP8_E5M2, MG_FP8_SCALE_ROWS, dcs};
    MG_EXPECT_OK(be->fp8_linear_forward(be, out, NULL, &fx, &fw, NULL, NULL, N, IC, OC));
    MG_EXPECT_OK(be->fp8_linear_backward(be, dinp, dw, NULL, dy, &fd, &fx, &fw, NULL, N, IC, OC));
    /* the products of the decoded values: x along rows, w by tiles (its transpose's bytes the
     * same), dy along rows for dinp and along columns (its own cast) for dw, x along columns */
    double e_out = 0, e_in = 0, e_w = 0, m_out = 0, m_in = 0, m_w = 0;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double r = 0;
            for (int k = 0; k < IC; k++)
                r += val(xr[(size_t)i * IC + k], MG_FP8_E4M3, xs[(size_t)(k / B) * N + i]) *
                     val(wr[(size_t)o * IC + k], MG_FP8_E4M3, ws[(size_t)(o / B) * ldI + k / B]);
            e_out = fmax(e_out, fabs(out[(size_t)i * OC + o] - r)), m_out = fmax(m_out, fabs(r));
        }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < IC; k++) {
            double r = 0;
            for (int o = 0; o < OC; o++)
                r += val(dr[(size_t)i * OC + o], MG_FP8_E5M2, ds[(size_t)(o / B) * N + i]) *
                     val(wt[(size_t)k * OC + o], MG_FP8_E4M3, wst[(size_t)(k / B) * ldO + o / B]);
            e_in = fmax(e_in, fabs(dinp[(size_t)i * IC + k] - r)), m_in = fmax(m_in, fabs(r));
        }
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < IC; k++) {
            double r = 0;
            for (int i = 0; i < N; i++)
                r += val(dc[(size_t)o * N + i], MG_FP8_E5M2, dcs[(size_t)(i / B) * OC + o]) *
                     val(xc[(size_t)k * N + i], MG_FP8_E4M3, xcs[(size_t)(i / B) * IC + k]);
            e_w = fmax(e_w, fabs(dw[(size_t)o * IC + k] - r)), m_w = fmax(m_w, fabs(r));
        }
    MG_EXPECT(m_out > 0 && e_out <= 1e-5 * m_out, "forward: error %g of %g", e_out, m_out);
    MG_EXPECT(m_in > 0 && e_in <= 1e-5 * m_in, "input gradient: error %g of %g", e_in, m_in);
    MG_EXPECT(m_w > 0 && e_w <= 1e-5 * m_w, "weight gradient: error %g of %g", e_w, m_w);
    free(x), free(w), free(dy), free(xr), free(xc), free(wr), free(wt), free(dr), free(dc);
    free(xs), free(xcs), free(ws), free(wst), free(ds), free(dcs), free(out), free(dinp), free(dw);
    be->destroy(be);
}
