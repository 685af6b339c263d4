/* Packed documents, Megatron's --reset-position-ids and --reset-attention-mask (trainer_docs.h).
 *  - mg_docs_compute against Megatron's own loop (_get_ltor_masks_and_position_ids: for each eod
 *    index i, position_ids[i+1:] -= i + 1 - prev, attention_mask[i+1:, :i+1] = 0), written out
 *    here on a dense mask, eods at the start, the end and back to back included;
 *  - the CPU attention op with doc_start against the naive reference in double (with and without
 *    attention dropout), its saved probabilities zero outside each row's document, its backward
 *    against central differences across a 64-row query block;
 *  - the embedding with per-token positions against the table rows it must read and add to;
 *  - the invariant: a microbatch packing documents A|B and C|D|E with both flags gives every
 *    document's logits, per-token losses and parameter gradients that the same document gets
 *    alone at the start of a sequence (learned absolute positions with LayerNorm and GELU, and
 *    RoPE with RMSNorm, SwiGLU and GQA); without the flags document B's logits do differ;
 *  - the trainer: the slot's arrays hold the loaded microbatch's positions and starts, nothing is
 *    allocated without the flags, and a tokenizer without an end-of-document token is refused. */
#include "cpu_test_util.h"
#include "attention_test_util.h"
#include "config_test_util.h"

#include "core/status.h"
#include "data/mock.h"
#include "train/memory.h"
#include "train/trainer.h"
#include "train/trainer_docs.h"
#include "train/trainer_loss.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- positions and starts */

/* Megatron's loop over one sequence: positions, and mask[i][j] = query i may see key j. */
static void megatron_ltor(const int32_t *tok, int S, int32_t eod, int32_t *pos, uint8_t *mask) {
    for (int i = 0; i < S; i++) {
        pos[i] = i;
        for (int j = 0; j < S; j++) mask[i * S + j] = j <= i; /* tril */
    }
    int prev = 0;
    for (int i = 0; i < S; i++) {
        if (tok[i] != eod) continue;
        for (int a = i + 1; a < S; a++)
            for (int b = 0; b <= i; b++) mask[a * S + b] = 0;
        for (int a = i + 1; a < S; a++) pos[a] -= i + 1 - prev;
        prev = i + 1;
    }
}

MG_TEST(docs_compute_matches_megatron_ltor) {
    enum { S = 12, B = 4, EOD = 9 };
    const int32_t tok[B * S] = {
        1, 2, 9, 3, 9, 9, 4, 5, 6, 7, 8, 1, /* eods inside and back to back */
        9, 1, 2, 3, 4, 5, 9, 6, 7, 8, 1, 9, /* at the start and at the end */
        1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, /* none */
        9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, /* every token */
    };
    int32_t pos[B * S], doc[B * S], ref_pos[S];
    uint8_t mask[S * S];
    mg_docs_compute(tok, B, S, EOD, pos, doc);
    int bad_pos = 0, bad_mask = 0, later = 0;
    for (int b = 0; b < B; b++) {
        megatron_ltor(tok + b * S, S, EOD, ref_pos, mask);
        for (int i = 0; i < S; i++) {
            bad_pos += pos[b * S + i] != ref_pos[i];
            later += doc[b * S + i] > 0;
            for (int j = 0; j < S; j++)
                bad_mask += mask[i * S + j] != (doc[b * S + i] <= j && j <= i);
        }
    }
    MG_EXPECT(bad_pos == 0, "%d positions differ from Megatron's", bad_pos);
    MG_EXPECT(bad_mask == 0, "%d mask entries differ from Megatron's", bad_mask);
    MG_EXPECT(later > 0, "no document starts after index 0: the case is vacuous");
    /* one array alone: the same values */
    int32_t only[B * S];
    mg_docs_compute(tok, B, S, EOD, NULL, only);
    MG_EXPECT(memcmp(only, doc, sizeof doc) == 0, "doc_start alone differs");
    mg_docs_compute(tok, B, S, EOD, only, NULL);
    MG_EXPECT(memcmp(only, pos, sizeof pos) == 0, "positions alone differ");
}

/* ---------------------------------------------------------------- the attention op */

/* Document starts of B sequences of S tokens with eods at the listed indices (-1 ends a list). */
static void starts_of(int32_t *doc, int B, int S, const int eods[][6]) {
    for (int b = 0; b < B; b++) {
        int start = 0, k = 0;
        for (int s = 0; s < S; s++) {
            doc[b * S + s] = start;
            if (eods[b][k] == s) start = s + 1, k++;
        }
    }
}

MG_TEST(cpu_attention_doc_mask_matches_naive) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    /* S = 70: a full query block of 64 and a partial one; documents end inside either block, at
     * the block boundary (63, 64), on the first token and on the last */
    enum { B = 2, S = 70, NQ = 4, NG = 2, HD = 8 };
    const int eods[B][6] = {{10, 63, 64, 69, -1}, {0, 30, 66, -1}};
    int32_t doc[B * S];
    starts_of(doc, B, S, eods);
    size_t n = (size_t)B * S * mg_test_qkv_width(NQ, NG, HD), no = (size_t)B * S * NQ * HD;
    size_t sb = be->attention_saved_bytes(be, B, S, NQ, HD);
    float *qkv = t_rnd(300, n, 1.5f), *out = t_zeros(no), *ref = t_zeros(no);
    float *saved = t_zeros(sb / sizeof(float));
    mg_dropout d = mg_dropout_init(0.3, 77, 5, 1, MG_DROPOUT_ATTENTION, 2, 4);
    for (int drop = 0; drop < 2; drop++) {
        const mg_dropout *dp = drop ? &d : NULL;
        MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, B, S, NQ, NG, HD, dp, doc));
        mg_test_attention_naive_doc(ref, qkv, B, S, NQ, NG, HD, dp, doc);
        double e = mg_test_rel_err(out, ref, no);
        MG_EXPECT(e < 1e-6, "dropout %d: rel err %g against the naive document mask", drop, e);
        /* saved probabilities: rows sum to 1 over [doc_start, s], exact zeros elsewhere */
        double worst = 0;
        for (int row = 0; row < B * NQ * S; row++) {
            int b = row / (NQ * S), s = row % S, lo = doc[b * S + s];
            double sum = 0;
            for (int u = 0; u < S; u++) {
                float p = saved[(size_t)row * S + u];
                if (u < lo || u > s) worst = fmax(worst, fabs(p) * 1e6); /* must be exact */
                sum += p;
            }
            worst = fmax(worst, fabs(sum - 1));
        }
        MG_EXPECT(worst < 1e-6, "dropout %d: saved probabilities off by %g", drop, worst);
    }
    /* and the mask matters: plain causal attention differs */
    MG_EXPECT_OK(be->attention_forward(be, out, saved, qkv, B, S, NQ, NG, HD, NULL, NULL));
    mg_test_attention_naive_doc(ref, qkv, B, S, NQ, NG, HD, NULL, doc);
    MG_EXPECT(mg_test_rel_err(out, ref, no) > 1e-2, "the document mask changes nothing");
    /* a doc_start past its position is refused */
    doc[5] = 6;
    MG_EXPECT_ERROR(be->attention_forward(be, out, saved, qkv, B, S, NQ, NG, HD, NULL, doc),
                    MG_ERR_INTERNAL, "doc_start[5] = 6");
    free(qkv), free(out), free(ref), free(saved);
    be->destroy(be);
}

typedef struct {
    mg_backend *be;
    float *qkv, *out, *saved, *R;
    const int32_t *doc;
    const mg_dropout *drop;
    int B, S, nq, ng, hd;
} doc_att_ctx;

static double doc_att_obj(void *c_) {
    doc_att_ctx *c = c_;
    c->be->attention_forward(c->be, c->out, c->saved, c->qkv, c->B, c->S, c->nq, c->ng, c->hd,
                             c->drop, c->doc);
    return t_dotd(c->out, c->R, (size_t)c->B * c->S * c->nq * c->hd);
}

MG_TEST(cpu_attention_doc_mask_grad) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { B = 1, S = 70, NQ = 2, NG = 1, HD = 4 };
    const int eods[B][6] = {{20, 63, 66, -1}};
    int32_t doc[B * S];
    starts_of(doc, B, S, eods);
    mg_dropout d = mg_dropout_init(0.25, 99, 3, 0, MG_DROPOUT_ATTENTION, 0, 0);
    size_t n = (size_t)B * S * mg_test_qkv_width(NQ, NG, HD), no = (size_t)B * S * NQ * HD;
    for (int drop = 0; drop < 2; drop++) {
        doc_att_ctx c = {be,
                         t_rnd(310, n, 1.5f),
                         t_zeros(no),
                         t_zeros(be->attention_saved_bytes(be, B, S, NQ, HD) / sizeof(float)),
                         t_rnd(311, no, 1),
                         doc,
                         drop ? &d : NULL,
                         B,
                         S,
                         NQ,
                         NG,
                         HD};
        doc_att_obj(&c);
        float *dqkv = t_rnd(312, n, 1); /* garbage: dqkv is overwritten */
        MG_EXPECT_OK(be->attention_backward(be, dqkv, c.R, c.qkv, c.out, c.saved, B, S, NQ, NG, HD,
                                            c.drop, doc));
        double e = t_fd_err(c.qkv, n, dqkv, doc_att_obj, &c);
        MG_EXPECT(e < T_FD_TOL, "dropout %d: fd err %g", drop, e);
        free(c.qkv), free(c.out), free(c.saved), free(c.R), free(dqkv);
    }
    be->destroy(be);
}

/* ---------------------------------------------------------------- the embedding */

MG_TEST(cpu_embedding_per_token_positions) {
    mg_backend *be = t_cpu(t);
    if (!be) return;
    enum { S = 6, B = 2, N = B * S, H = 5, V = 7 };
    const int32_t tok[N] = {1, 6, 0, 3, 3, 2, 5, 4, 4, 0, 1, 6};
    const int32_t pos[N] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 0, 1};
    float *wte = t_rnd(320, V * H, 1), *wpe = t_rnd(321, S * H, 1), *out = t_zeros(N * H);
    float *dout = t_rnd(322, N * H, 1), *dwte = t_zeros(V * H), *dwpe = t_zeros(S * H);
    float *want = t_zeros(S * H);
    MG_EXPECT_OK(be->embedding_forward(be, out, tok, wte, wpe, pos, N, S, H, 0, V));
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < H; j++)
            bad += out[i * H + j] != wte[tok[i] * H + j] + wpe[pos[i] * H + j];
    MG_EXPECT(bad == 0, "%d outputs are not wte[token] + wpe[pos]", bad);
    MG_EXPECT_OK(be->embedding_backward(be, dwte, dwpe, dout, tok, pos, N, S, H, 0, V));
    for (int i = 0; i < N; i++) /* in row order, as the op sums */
        for (int j = 0; j < H; j++) want[pos[i] * H + j] += dout[i * H + j];
    MG_EXPECT(memcmp(want, dwpe, sizeof(float) * S * H) == 0,
              "dwpe is not the rows' sum by position");
    MG_EXPECT(dwpe[5 * H] == 0 && dwpe[4 * H + 1] == 0, "unused positions got gradient");
    /* positions i % S: bitwise the op without positions */
    int32_t mod[N];
    float *out2 = t_zeros(N * H);
    for (int i = 0; i < N; i++) mod[i] = i % S;
    MG_EXPECT_OK(be->embedding_forward(be, out, tok, wte, wpe, mod, N, S, H, 0, V));
    MG_EXPECT_OK(be->embedding_forward(be, out2, tok, wte, wpe, NULL, N, S, H, 0, V));
    MG_EXPECT(memcmp(out, out2, sizeof(float) * N * H) == 0, "pos = i %% S differs from NULL");
    mod[3] = S;
    MG_EXPECT_ERROR(be->embedding_forward(be, out, tok, wte, wpe, mod, N, S, H, 0, V),
                    MG_ERR_INTERNAL, "position 6 outside [0, 6)");
    free(wte), free(wpe), free(out), free(out2), free(dout), free(dwte), free(dwpe), free(want);
    be->destroy(be);
}

/* ---------------------------------------------------------------- the model invariant */

enum { MS = 16, MB = 2, MN = MB * MS, MV = 64, MEOD = MV - 1 };

static const char *k_tiny =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--vocab-size 64 --mock-data --micro-batch-size 2 --global-batch-size 2 "
    "--train-iters 1 --lr 1e-3 --eval-iters 0 --num-threads 1 --device cpu "
    "--attention-dropout 0 --hidden-dropout 0";

static mg_trainer *docs_trainer(mg_test_ctx *t, const char *const *extra) {
    return mg_test_trainer(t, k_tiny, extra);
}

static void release(mg_trainer *tr) {
    mg_test_trainer_free(tr);
}

/* A document: sequence `seq` of the packed microbatch, tokens [start, start + len). */
typedef struct {
    int seq, start, len;
    int ref, ref_seq; /* its reference microbatch and sequence there (from token 0) */
} doc_span;

/* One forward (+ loss, + backward accumulating into the trainer's gradients) of the microbatch
 * (tok, tgt) with per-token weights w and the given documents; logits (MN, V) and losses (MN)
 * copied out. */
static void model_run(mg_test_ctx *t, mg_trainer *tr, const int32_t *tok, const int32_t *tgt,
                      const float *w, const int32_t *pos, const int32_t *doc, float *logits,
                      float *losses) {
    mg_gpt *g = &tr->model;
    size_t nl = (size_t)MN * g->cfg.V_l;
    float acc = 0;
    mg_gpt_set_documents(g, 0, pos, doc);
    MG_EXPECT_OK(mg_gpt_forward(g, tr->be, tok));
    memcpy(logits, mg_gpt_logits(g), nl * sizeof(float)); /* the loss overwrites them */
    MG_EXPECT_OK(mg_gpt_loss(g, tr->be, tgt, w, NULL, &acc, 1.0f));
    memcpy(losses, mg_block_ws_ptr(&g->blk, g->ws.losses), MN * sizeof(float));
    MG_EXPECT_OK(mg_gpt_backward(g, tr->be, tok));
    mg_gpt_set_documents(g, 0, NULL, NULL);
}

static void check_invariant(mg_test_ctx *t, const char *name, const char *const *extra) {
    mg_trainer *tr = docs_trainer(t, extra);
    if (!tr) return;
    MG_EXPECT(tr->docs_eod == MEOD, "%s: eod %d, want %d", name, (int)tr->docs_eod, MEOD);
    /* packed: A (6, ends with eod) | B (10); C (3) | D (4) | E (9), every other token random */
    const doc_span docs[] = {
        {0, 0, 6, 0, 0}, {0, 6, 10, 1, 0}, {1, 0, 3, 0, 1}, {1, 3, 4, 1, 1}, {1, 7, 9, 2, 0}};
    enum { ND = sizeof docs / sizeof *docs, NREF = 3 };
    int32_t tok[MN], tgt[MN], rtok[NREF][MN], rtgt[NREF][MN];
    float w[MN], rw[NREF][MN];
    for (int i = 0; i < MN; i++) {
        tok[i] = (int32_t)(mg_rng_uniform(T_SEED, 330, (uint64_t)i) * (MV - 1)) %
                 (MV - 1); /* never the eod */
        tgt[i] = (int32_t)(mg_rng_uniform(T_SEED, 331, (uint64_t)i) * MV) % MV;
        w[i] = 1.0f;
    }
    tok[5] = tok[MS + 2] = tok[MS + 6] = MEOD; /* A, C and D end with the eod */
    /* references: each document from token 0 of its own sequence, filler (weight 0) after it */
    for (int r = 0; r < NREF; r++)
        for (int i = 0; i < MN; i++) {
            rtok[r][i] =
                (int32_t)(mg_rng_uniform(T_SEED, 332 + r, (uint64_t)i) * (MV - 1)) % (MV - 1);
            rtgt[r][i] = 0;
            rw[r][i] = 0.0f;
        }
    for (int k = 0; k < ND; k++) {
        const doc_span *d = &docs[k];
        for (int i = 0; i < d->len; i++) {
            int p = d->seq * MS + d->start + i, q = d->ref_seq * MS + i;
            rtok[d->ref][q] = tok[p];
            rtgt[d->ref][q] = tgt[p];
            rw[d->ref][q] = 1.0f;
        }
    }
    int32_t pos[MN], doc[MN];
    mg_docs_compute(tok, MB, MS, MEOD, pos, doc);

    mg_gpt *g = &tr->model;
    size_t V = (size_t)g->cfg.V_l, nl = (size_t)MN * V, numel = g->params.numel;
    float *lp = t_zeros(nl), *lr[NREF], lossp[MN], lossr[NREF][MN];
    float *gp = t_zeros(numel);
    for (int r = 0; r < NREF; r++) lr[r] = t_zeros(nl);
    memset(tr->mem.grads, 0, numel * sizeof(float));
    model_run(t, tr, tok, tgt, w, pos, doc, lp, lossp);
    memcpy(gp, tr->mem.grads, numel * sizeof(float));
    memset(tr->mem.grads, 0, numel * sizeof(float)); /* the references' sum */
    for (int r = 0; r < NREF; r++)
        model_run(t, tr, rtok[r], rtgt[r], rw[r], NULL, NULL, lr[r], lossr[r]);
    double worst_l = 0, worst_loss = 0;
    for (int k = 0; k < ND; k++) {
        const doc_span *d = &docs[k];
        size_t p0 = (size_t)d->seq * MS + d->start, q0 = (size_t)d->ref_seq * MS;
        double e = mg_test_rel_err(lp + p0 * V, lr[d->ref] + q0 * V, (size_t)d->len * V);
        MG_EXPECT(e < 1e-5, "%s: document %c's logits differ from its own by %g", name, 'A' + k, e);
        worst_l = fmax(worst_l, e);
        double el = mg_test_rel_err(lossp + p0, lossr[d->ref] + q0, (size_t)d->len);
        MG_EXPECT(el < 1e-5, "%s: document %c's losses differ from its own by %g", name, 'A' + k,
                  el);
        worst_loss = fmax(worst_loss, el);
    }
    double eg = mg_test_rel_err(gp, tr->mem.grads, numel);
    MG_EXPECT(eg < 5e-5, "%s: the packed gradients differ from the documents' sum by %g", name, eg);
    /* without the flags B sees A: its logits change */
    memset(tr->mem.grads, 0, numel * sizeof(float));
    model_run(t, tr, tok, tgt, w, NULL, NULL, lp, lossp);
    double eb = mg_test_rel_err(lp + 6 * V, lr[1], 10 * V);
    MG_EXPECT(eb > 1e-3, "%s: document B's logits do not depend on the flags (%g)", name, eb);
    if (getenv("MG_TEST_VERBOSE"))
        printf("%s: logits %.3g, losses %.3g, gradients %.3g; unpacked B %.3g\n", name, worst_l,
               worst_loss, eg, eb);
    free(lp), free(gp);
    for (int r = 0; r < NREF; r++) free(lr[r]);
    release(tr);
}

MG_TEST(docs_packed_equal_separate_learned_positions) {
    const char *extra[] = {"--reset-position-ids", "--reset-attention-mask", NULL};
    check_invariant(t, "learned_absolute", extra);
}

MG_TEST(docs_packed_equal_separate_rope) {
    const char *extra[] = {"--reset-position-ids",
                           "--reset-attention-mask",
                           "--normalization",
                           "RMSNorm",
                           "--swiglu",
                           "--position-embedding-type",
                           "rope",
                           "--group-query-attention",
                           "--num-query-groups",
                           "2",
                           "--disable-bias-linear",
                           "--untie-embeddings-and-output-weights",
                           NULL};
    check_invariant(t, "rope", extra);
}

/* ---------------------------------------------------------------- the trainer */

MG_TEST(docs_trainer_fills_each_slot) {
    const char *both[] = {"--reset-position-ids", "--reset-attention-mask", NULL};
    mg_trainer *tr = docs_trainer(t, both);
    if (!tr) return;
    MG_EXPECT(tr->mem.positions && tr->mem.doc_starts, "the slot arrays are missing");
    MG_EXPECT_OK(mg_trainer_forward_backward(tr, &tr->data.train_src, 0, true));
    /* the trainer's microbatch: mock samples 0 and 1 */
    int32_t tok[MN], tgt[MN], pos[MN], doc[MN];
    mg_mock_data d;
    MG_EXPECT_OK(mg_mock_init(&d, 1234, 0, MV, MS));
    for (int b = 0; b < MB; b++) MG_EXPECT_OK(mg_mock_source(&d, b, tok + b * MS, tgt + b * MS));
    mg_mock_free(&d);
    mg_docs_compute(tok, MB, MS, MEOD, pos, doc);
    int later = 0;
    for (int i = 0; i < MN; i++) later += doc[i] > 0;
    MG_EXPECT(later > 0, "the mock microbatch holds one document per sequence: vacuous");
    MG_EXPECT(memcmp(tr->mem.positions, pos, sizeof pos) == 0, "slot positions differ");
    MG_EXPECT(memcmp(tr->mem.doc_starts, doc, sizeof doc) == 0, "slot document starts differ");
    MG_EXPECT(tr->model.slot_pass[0].pos == tr->mem.positions &&
                  tr->model.slot_pass[0].doc_start == tr->mem.doc_starts,
              "the model's slot does not point at the trainer's arrays");
    /* `megatron plan` predicts the batch arena with the two arrays */
    mg_memory_stage m;
    MG_EXPECT_OK(mg_memory_stage_estimate(&tr->cfg, 0, 1, MG_F32, &m));
    MG_EXPECT(m.batch == tr->mem.plan.io.size && m.total == tr->mem.planned_bytes,
              "predicted batch %zu B, total %zu B; the trainer's %zu B, %zu B", m.batch, m.total,
              tr->mem.plan.io.size, tr->mem.planned_bytes);
    release(tr);
    /* one flag: only its array; none: nothing */
    const char *one[] = {"--reset-position-ids", NULL};
    tr = docs_trainer(t, one);
    if (tr)
        MG_EXPECT(tr->mem.positions && !tr->mem.doc_starts &&
                      tr->model.slot_pass[0].doc_start == NULL,
                  "--reset-position-ids alone: positions %p, starts %p", (void *)tr->mem.positions,
                  (void *)tr->mem.doc_starts);
    release(tr);
    tr = docs_trainer(t, NULL);
    if (tr)
        MG_EXPECT(!tr->mem.positions && !tr->mem.doc_starts && tr->docs_eod == -1 &&
                      !tr->model.slot_pass[0].pos,
                  "no flags: document arrays allocated");
    release(tr);
}

MG_TEST(docs_need_an_end_of_document_token) {
    mg_config c;
    MG_EXPECT_OK(mg_test_config(&c, k_tiny, NULL));
    /* Llama 3's tokenizer.json without its tokenizer_config.json: no eos token */
    char dir[] = "/tmp/mg_docs_noeos_XXXXXX", path[96], cmd[256];
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cmd, sizeof cmd, "cp tests/golden/tokenizers/llama3/tokenizer.json %s/", dir);
    MG_EXPECT(system(cmd) == 0, "%s", cmd);
    snprintf(c.data_path, sizeof c.data_path, "corpus_text_document");
    snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "HuggingFaceTokenizer");
    snprintf(c.tokenizer_model, sizeof c.tokenizer_model, "%s", dir);
    int32_t eod = 0;
    MG_EXPECT_ERROR(mg_trainer_eod_for(&c, "--reset-attention-mask", &eod), MG_ERR_USAGE,
                    "--reset-attention-mask: the HuggingFaceTokenizer tokenizer has no "
                    "end-of-document token");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    /* GPT-2's is <|endoftext|> */
    snprintf(c.tokenizer_type, sizeof c.tokenizer_type, "GPT2BPETokenizer");
    snprintf(c.vocab_file, sizeof c.vocab_file, "data/gpt2/encoder.json");
    snprintf(c.merge_file, sizeof c.merge_file, "data/gpt2/vocab.bpe");
    MG_EXPECT_OK(mg_trainer_eod_for(&c, "--reset-position-ids", &eod));
    MG_EXPECT(eod == 50256, "GPT2BPETokenizer: eod %d", (int)eod);
}
