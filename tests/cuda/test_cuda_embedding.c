/* CUDA backend against the CPU backend: token + position embedding, forward and backward (method
 * and tolerances: cuda_test_util.h). Half the tokens repeat a few hot ids, so the backward
 * scatter-add has real collisions, and its result must not depend on the run (determinism). */
#include "cuda_test_util.h"

#include "train/trainer_docs.h"

typedef struct {
    int N, S, H, V, with_wpe;
} emb_case;

static const emb_case k_cases[] = {
    {1, 1, 64, 50304, 1},     /* one token, GPT-2's padded vocabulary */
    {7, 7, 96, 1001, 0},      /* odd sizes, no learned positions (Llama) */
    {514, 257, 64, 50304, 1}, /* two sequences of an odd length */
    {257, 257, 1000, 1001, 1},
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

MG_TEST(cuda_embedding_forward_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NCASES; k++) {
        emb_case c = k_cases[k];
        size_t nout = (size_t)c.N * c.H, P_rows = (size_t)c.S + 3;
        ct_pool P = ct_pool_of(t, gpu);
        int32_t *tok = ct_tokens(&P, 20, c.N, c.V);
        float *wte = ct_rand_act(&P, 21, (size_t)c.V * c.H, 1.0f);
        float *wpe = c.with_wpe ? ct_rand_act(&P, 22, P_rows * c.H, 0.5f) : NULL;
        float *ref = ct_host(&P, nout * 4);
        MG_EXPECT_OK(cpu->embedding_forward(cpu, ref, tok, wte, wpe, NULL, c.N, c.S, c.H, 0, c.V));
        int32_t *d_tok = ct_up_i32(&P, tok, c.N);
        void *d_wte = ct_up_act(&P, wte, (size_t)c.V * c.H);
        void *d_wpe = wpe ? ct_up_act(&P, wpe, P_rows * c.H) : NULL;
        void *d_out = ct_poison_act(&P, nout);
        if (!P.failed) {
            MG_EXPECT_OK(gpu->embedding_forward(gpu, d_out, d_tok, d_wte, d_wpe, NULL, c.N, c.S,
                                                c.H, 0, c.V));
            float *got = ct_down_act(&P, d_out, nout);
            if (wpe)
                CT_EXPECT_CLOSE(got, ref, nout, CT_TOL_ACT, "embedding_forward N=%d S=%d H=%d V=%d",
                                c.N, c.S, c.H, c.V);
            else /* a pure gather: exact */
                CT_EXPECT_SAME_BITS(got, ref, nout * 4, "embedding_forward (gather) N=%d H=%d", c.N,
                                    c.H);
        }
        ct_pool_free(&P);
    }
}

MG_TEST(cuda_embedding_backward_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    for (size_t k = 0; k < NCASES; k++) {
        emb_case c = k_cases[k];
        size_t nout = (size_t)c.N * c.H, nwte = (size_t)c.V * c.H, nwpe = ((size_t)c.S + 3) * c.H;
        ct_pool P = ct_pool_of(t, gpu);
        int32_t *tok = ct_tokens(&P, 23, c.N, c.V);
        float *dout = ct_rand_act(&P, 24, nout, 1.0f);
        /* accumulated outputs: pre-filled, non-zero */
        float *dwte0 = ct_uniform_f32(&P, 25, nwte, -1.0f, 1.0f);
        float *dwpe0 = ct_uniform_f32(&P, 26, nwpe, -1.0f, 1.0f);
        float *ref_wte = ct_dup(&P, dwte0, nwte), *ref_wpe = ct_dup(&P, dwpe0, nwpe);
        MG_EXPECT_OK(cpu->embedding_backward(cpu, ref_wte, c.with_wpe ? ref_wpe : NULL, dout, tok,
                                             NULL, c.N, c.S, c.H, 0, c.V));
        int32_t *d_tok = ct_up_i32(&P, tok, c.N);
        void *d_dout = ct_up_act(&P, dout, nout);
        float *d_wte = ct_up_f32(&P, dwte0, nwte), *d_wpe = ct_up_f32(&P, dwpe0, nwpe);
        if (P.failed) goto next;
        float *got[2][2];
        for (int run = 0; run < 2; run++) {
            ct_put_f32(&P, d_wte, dwte0, nwte);
            ct_put_f32(&P, d_wpe, dwpe0, nwpe);
            MG_EXPECT_OK(gpu->embedding_backward(gpu, d_wte, c.with_wpe ? d_wpe : NULL, d_dout,
                                                 d_tok, NULL, c.N, c.S, c.H, 0, c.V));
            got[run][0] = ct_down_f32(&P, d_wte, nwte);
            got[run][1] = ct_down_f32(&P, d_wpe, nwpe);
        }
        CT_EXPECT_CLOSE(got[0][0], ref_wte, nwte, CT_TOL_F32,
                        "embedding_backward dwte N=%d H=%d "
                        "V=%d",
                        c.N, c.H, c.V);
        CT_EXPECT_CLOSE(got[0][1], ref_wpe, nwpe, CT_TOL_F32, "embedding_backward dwpe N=%d H=%d",
                        c.N, c.H);
        CT_EXPECT_SAME_BITS(got[0][0], got[1][0], nwte * 4, "embedding_backward dwte N=%d", c.N);
        CT_EXPECT_SAME_BITS(got[0][1], got[1][1], nwpe * 4, "embedding_backward dwpe N=%d", c.N);
        /* rows no token (or position) touches keep their exact pre-filled bits */
        {
            char *used = ct_host(&P, (size_t)c.V);
            memset(used, 0, (size_t)c.V);
            for (int i = 0; i < c.N; i++) used[tok[i]] = 1;
            int bad = 0;
            for (int v = 0; v < c.V; v++)
                if (!used[v])
                    bad += memcmp(got[0][0] + (size_t)v * c.H, dwte0 + (size_t)v * c.H,
                                  (size_t)c.H * 4) != 0;
            MG_EXPECT(bad == 0, "%d untouched dwte rows changed (N=%d V=%d)", bad, c.N, c.V);
            if (!c.with_wpe)
                MG_EXPECT(memcmp(got[0][1], dwpe0, nwpe * 4) == 0, "dwpe changed though NULL");
        }
    next:
        ct_pool_free(&P);
    }
}

/* Vocab-parallel embedding: the vocabulary split in two ranges (one rank each; every token, hot ids
 * included, is in one of them), the position embedding given to the second only. Forward against
 * the CPU's range forward; backward against the CPU's, twice (bitwise repeatable), and each range's
 * dwte bitwise the rows of the CUDA full-vocabulary backward (the sort-based dwte sums a token's
 * rows in the same order whatever the range), with the guard rows around the range untouched. */
MG_TEST(cuda_embedding_vocab_range_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    static const emb_case cases[] = {
        {514, 257, 64, 50304, 1}, /* hot ids repeat > 32 times: the long-segment path */
        {257, 257, 1000, 1001, 1},
        {7, 7, 96, 1001, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        emb_case c = cases[k];
        size_t nout = (size_t)c.N * c.H, nwte = (size_t)c.V * c.H, nwpe = ((size_t)c.S + 3) * c.H;
        ct_pool P = ct_pool_of(t, gpu);
        int32_t *tok = ct_tokens(&P, 27, c.N, c.V);
        float *wte = ct_rand_act(&P, 28, nwte, 1.0f), *dout = ct_rand_act(&P, 29, nout, 1.0f);
        float *wpe = c.with_wpe ? ct_rand_act(&P, 30, nwpe, 0.5f) : NULL;
        float *dwte0 = ct_uniform_f32(&P, 31, nwte + 2 * (size_t)c.H, -1.0f, 1.0f);
        float *dwpe0 = ct_uniform_f32(&P, 32, nwpe, -1.0f, 1.0f);
        int32_t *d_tok = ct_up_i32(&P, tok, c.N);
        void *d_dout = ct_up_act(&P, dout, nout), *d_out = ct_poison_act(&P, nout);
        void *d_wpe = wpe ? ct_up_act(&P, wpe, nwpe) : NULL;
        float *d_full = ct_up_f32(&P, dwte0 + c.H, nwte);
        if (P.failed) goto next;
        /* the CUDA full-vocabulary backward (dwte only) */
        MG_EXPECT_OK(
            gpu->embedding_backward(gpu, d_full, NULL, d_dout, d_tok, NULL, c.N, c.S, c.H, 0, c.V));
        float *full = ct_down_f32(&P, d_full, nwte);
        int split = c.V / 3 * 2 / 8 * 8; /* a multiple of 8 on GPT-2's vocabulary */
        for (int r = 0; r < 2 && !P.failed; r++) {
            int v0 = r ? split : 0, Vl = r ? c.V - split : split;
            size_t nl = (size_t)Vl * c.H;
            const float *pe = r == 1 ? wpe : NULL;
            void *d_pe = r == 1 ? d_wpe : NULL;
            /* forward */
            void *d_wte = ct_up_act(&P, wte + (size_t)v0 * c.H, nl);
            float *ref = ct_host(&P, nout * 4);
            MG_EXPECT_OK(cpu->embedding_forward(cpu, ref, tok, wte + (size_t)v0 * c.H, pe, NULL,
                                                c.N, c.S, c.H, v0, Vl));
            if (P.failed) break;
            MG_EXPECT_OK(gpu->embedding_forward(gpu, d_out, d_tok, d_wte, d_pe, NULL, c.N, c.S, c.H,
                                                v0, Vl));
            float *got = ct_down_act(&P, d_out, nout);
            if (pe)
                CT_EXPECT_CLOSE(got, ref, nout, CT_TOL_ACT, "embedding_forward [%d, %d) N=%d H=%d",
                                v0, v0 + Vl, c.N, c.H);
            else /* a gather and zeros: exact */
                CT_EXPECT_SAME_BITS(got, ref, nout * 4, "embedding_forward [%d, %d) N=%d H=%d", v0,
                                    v0 + Vl, c.N, c.H);
            /* backward: the range's rows of dwte0 with one guard row on each side */
            const float *rows0 = dwte0 + (size_t)v0 * c.H; /* guard, Vl rows, guard */
            float *ref_wte = ct_dup(&P, rows0 + c.H, nl), *ref_wpe = ct_dup(&P, dwpe0, nwpe);
            MG_EXPECT_OK(cpu->embedding_backward(cpu, ref_wte, pe ? ref_wpe : NULL, dout, tok, NULL,
                                                 c.N, c.S, c.H, v0, Vl));
            float *d_wte_g = ct_up_f32(&P, rows0, nl + 2 * (size_t)c.H);
            float *d_wpe_g = ct_up_f32(&P, dwpe0, nwpe);
            if (P.failed) break;
            float *g[2][2];
            for (int run = 0; run < 2; run++) {
                ct_put_f32(&P, d_wte_g, rows0, nl + 2 * (size_t)c.H);
                ct_put_f32(&P, d_wpe_g, dwpe0, nwpe);
                MG_EXPECT_OK(gpu->embedding_backward(gpu, d_wte_g + c.H, pe ? d_wpe_g : NULL,
                                                     d_dout, d_tok, NULL, c.N, c.S, c.H, v0, Vl));
                g[run][0] = ct_down_f32(&P, d_wte_g, nl + 2 * (size_t)c.H);
                g[run][1] = ct_down_f32(&P, d_wpe_g, nwpe);
            }
            CT_EXPECT_CLOSE(g[0][0] + c.H, ref_wte, nl, CT_TOL_F32,
                            "embedding_backward dwte [%d, %d) N=%d H=%d", v0, v0 + Vl, c.N, c.H);
            CT_EXPECT_CLOSE(g[0][1], ref_wpe, nwpe, CT_TOL_F32,
                            "embedding_backward dwpe [%d, %d) N=%d H=%d", v0, v0 + Vl, c.N, c.H);
            CT_EXPECT_SAME_BITS(g[0][0], g[1][0], (nl + 2 * (size_t)c.H) * 4,
                                "embedding_backward dwte [%d, %d) repeat", v0, v0 + Vl);
            CT_EXPECT_SAME_BITS(g[0][1], g[1][1], nwpe * 4,
                                "embedding_backward dwpe [%d, %d) repeat", v0, v0 + Vl);
            CT_EXPECT_SAME_BITS(g[0][0] + c.H, full + (size_t)v0 * c.H, nl * 4,
                                "embedding_backward dwte [%d, %d) vs the full vocabulary's rows",
                                v0, v0 + Vl);
            MG_EXPECT(!memcmp(g[0][0], rows0, (size_t)c.H * 4) &&
                          !memcmp(g[0][0] + nl + c.H, rows0 + nl + c.H, (size_t)c.H * 4),
                      "embedding_backward [%d, %d): a guard row next to the range changed", v0,
                      v0 + Vl);
            if (!pe) MG_EXPECT(!memcmp(g[0][1], dwpe0, nwpe * 4), "dwpe changed though NULL");
        }
    next:
        ct_pool_free(&P);
    }
}

/* Per-token positions (--reset-position-ids, train/trainer_docs.h): B sequences of packed
 * documents (about one token in 10 is the end-of-document id, so positions restart often and the
 * low positions repeat across documents: dwpe's rows collide like dwte's, through the same
 * sort-based sums, both the short and the long segments). Forward and backward against the CPU
 * with the same positions; backward twice, bitwise repeatable; position rows no token has keep
 * their pre-filled bits. */
MG_TEST(cuda_embedding_positions_match_cpu_and_repeat) {
    CT_BACKENDS(cpu, gpu);
    static const emb_case cases[] = {
        {4 * 257, 257, 64, 50304, 1}, /* hot positions: the long-segment path */
        {3 * 50, 50, 96, 1001, 1},    /* short segments, H not a multiple of 64 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        emb_case c = cases[k];
        int B = c.N / c.S;
        size_t nout = (size_t)c.N * c.H, nwte = (size_t)c.V * c.H, nwpe = (size_t)c.S * c.H;
        ct_pool P = ct_pool_of(t, gpu);
        int32_t *tok = ct_tokens(&P, 33, c.N, c.V);
        float *u = ct_uniform_f32(&P, 34, c.N, 0.0f, 1.0f);
        for (int i = 0; i < c.N; i++)
            if (u[i] < 0.1f) tok[i] = c.V - 1; /* the end-of-document id */
        int32_t *pos = ct_host(&P, (size_t)c.N * sizeof *pos);
        mg_docs_compute(tok, B, c.S, c.V - 1, pos, NULL);
        float *wte = ct_rand_act(&P, 35, nwte, 1.0f), *wpe = ct_rand_act(&P, 36, nwpe, 0.5f);
        float *dout = ct_rand_act(&P, 37, nout, 1.0f);
        float *dwte0 = ct_uniform_f32(&P, 38, nwte, -1.0f, 1.0f);
        float *dwpe0 = ct_uniform_f32(&P, 39, nwpe, -1.0f, 1.0f);
        float *ref = ct_host(&P, nout * 4);
        float *ref_wte = ct_dup(&P, dwte0, nwte), *ref_wpe = ct_dup(&P, dwpe0, nwpe);
        MG_EXPECT_OK(cpu->embedding_forward(cpu, ref, tok, wte, wpe, pos, c.N, c.S, c.H, 0, c.V));
        MG_EXPECT_OK(
            cpu->embedding_backward(cpu, ref_wte, ref_wpe, dout, tok, pos, c.N, c.S, c.H, 0, c.V));
        int32_t *d_tok = ct_up_i32(&P, tok, c.N), *d_pos = ct_up_i32(&P, pos, c.N);
        void *d_wte = ct_up_act(&P, wte, nwte), *d_wpe = ct_up_act(&P, wpe, nwpe);
        void *d_dout = ct_up_act(&P, dout, nout), *d_out = ct_poison_act(&P, nout);
        float *d_gwte = ct_up_f32(&P, dwte0, nwte), *d_gwpe = ct_up_f32(&P, dwpe0, nwpe);
        if (P.failed) goto next;
        MG_EXPECT_OK(
            gpu->embedding_forward(gpu, d_out, d_tok, d_wte, d_wpe, d_pos, c.N, c.S, c.H, 0, c.V));
        CT_EXPECT_CLOSE(ct_down_act(&P, d_out, nout), ref, nout, CT_TOL_ACT,
                        "embedding_forward with positions N=%d S=%d H=%d", c.N, c.S, c.H);
        float *got[2][2];
        for (int run = 0; run < 2; run++) {
            ct_put_f32(&P, d_gwte, dwte0, nwte);
            ct_put_f32(&P, d_gwpe, dwpe0, nwpe);
            MG_EXPECT_OK(gpu->embedding_backward(gpu, d_gwte, d_gwpe, d_dout, d_tok, d_pos, c.N,
                                                 c.S, c.H, 0, c.V));
            got[run][0] = ct_down_f32(&P, d_gwte, nwte);
            got[run][1] = ct_down_f32(&P, d_gwpe, nwpe);
        }
        CT_EXPECT_CLOSE(got[0][0], ref_wte, nwte, CT_TOL_F32,
                        "embedding_backward dwte with positions N=%d H=%d", c.N, c.H);
        CT_EXPECT_CLOSE(got[0][1], ref_wpe, nwpe, CT_TOL_F32,
                        "embedding_backward dwpe with positions N=%d H=%d", c.N, c.H);
        CT_EXPECT_SAME_BITS(got[0][0], got[1][0], nwte * 4, "dwte with positions repeat N=%d", c.N);
        CT_EXPECT_SAME_BITS(got[0][1], got[1][1], nwpe * 4, "dwpe with positions repeat N=%d", c.N);
        {
            char *used = ct_host(&P, (size_t)c.S);
            memset(used, 0, (size_t)c.S);
            for (int i = 0; i < c.N; i++) used[pos[i]] = 1;
            int bad = 0, unused = 0;
            for (int s = 0; s < c.S; s++)
                if (!used[s]) {
                    unused++;
                    bad += memcmp(got[0][1] + (size_t)s * c.H, dwpe0 + (size_t)s * c.H,
                                  (size_t)c.H * 4) != 0;
                }
            MG_EXPECT(unused > 0, "every position is used: documents never restart (N=%d)", c.N);
            MG_EXPECT(bad == 0, "%d unused dwpe rows changed (N=%d)", bad, c.N);
        }
    next:
        ct_pool_free(&P);
    }
}
