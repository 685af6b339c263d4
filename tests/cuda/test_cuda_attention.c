/* CUDA backend against the CPU backend: causal self-attention over the fused qkv buffer, forward
 * and backward (method and tolerances: cuda_test_util.h). Each backend keeps its own `saved`
 * state (sized by its own attention_saved_bytes) and its own forward output for backward. The
 * query, key and value parts of dqkv are compared separately: they differ in size, and an error
 * confined to one part must not hide behind another. Both CUDA implementations are checked: ours
 * (attention.cu) and cuDNN's fused attention (attention_cudnn.cu, deterministic graph), the latter
 * with a SKIP line when the build has no cuDNN or cuDNN has no plan for a shape. Head sizes from
 * 1 to 256 cover both families of ours (attention.cu's tensor-core kernels, attention_generic.cu's
 * for the other sizes), with either kind of dropout mask and documents; sizes outside are refused.
 */
#include "cuda_test_util.h"

#include "backend/cuda/cuda_ops.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    int B, S, nq, ng, hd;
} att_case;

static const att_case k_cases[] = {
    {1, 1, 4, 4, 64},     /* one token: the softmax is a single 1 */
    {2, 7, 4, 2, 64},     /* grouped queries, odd length */
    {2, 257, 8, 2, 64},   /* crosses 64/128-row tiles by one */
    {1, 129, 8, 8, 128},  /* Llama head size, multi-head */
    {2, 64, 12, 12, 64},  /* GPT-2 small's heads */
    {1, 1024, 8, 1, 128}, /* multi-query, long sequence */
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

/* The attention entries of one implementation under test. */
typedef struct {
    const char *name;
    size_t (*saved_bytes)(mg_backend *, int, int, int, int);
    mg_status (*forward)(mg_backend *, void *, void *, const void *, int, int, int, int, int,
                         const mg_dropout *, const int32_t *);
    mg_status (*backward)(mg_backend *, void *, const void *, const void *, const void *,
                          const void *, int, int, int, int, int, const mg_dropout *,
                          const int32_t *);
} att_impl;

static void check_impls(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, const att_impl *impls,
                        int n_impl);

MG_TEST(cuda_attention_matches_cpu_and_repeats) {
    CT_BACKENDS(cpu, gpu);
    /* the table's entries under MG_TEST_CUDA_AS_CPU (no CUDA functions to call directly) */
    att_impl impls[2] = {
        {"ours", gpu->attention_saved_bytes, gpu->attention_forward, gpu->attention_backward}};
    int n_impl = 1;
    if (gpu->device == MG_DEVICE_CUDA) {
        impls[0].saved_bytes = CT_CUDA_OP(gpu, attention_saved_bytes);
        impls[0].forward = CT_CUDA_OP(gpu, attention_forward);
        impls[0].backward = CT_CUDA_OP(gpu, attention_backward);
    }
    if (gpu->device != MG_DEVICE_CUDA || !CT_CUDA_OP(gpu, attention_cudnn_available)())
        printf("SKIP cuda_attention cudnn: %s\n", gpu->device != MG_DEVICE_CUDA
                                                      ? "backend under test is not cuda"
                                                      : "this build has no cuDNN");
    else
        impls[n_impl++] = (att_impl){"cudnn", CT_CUDA_OP(gpu, attention_cudnn_saved_bytes),
                                     CT_CUDA_OP(gpu, attention_cudnn_forward),
                                     CT_CUDA_OP(gpu, attention_cudnn_backward)};
    check_impls(t, cpu, gpu, impls, n_impl);
}

/* One implementation on one case, against the CPU's out and dqkv. */
static void check_impl(mg_test_ctx *t, mg_backend *gpu, const att_impl *im, att_case c,
                       const float *qkv, const float *dout, const float *ref_out,
                       const float *ref_dqkv) {
    static const char *part_name[3] = {"dq", "dk", "dv"};
    if (strcmp(im->name, "cudnn") == 0) {
        int ok = 0;
        MG_EXPECT_OK(
            CT_CUDA_OP(gpu, attention_cudnn_supported)(gpu, c.B, c.S, c.nq, c.ng, c.hd, 0u, &ok));
        if (!ok) {
            printf("SKIP cuda_attention cudnn B=%d S=%d nq=%d ng=%d hd=%d: no cuDNN plan "
                   "(falls back to ours)\n",
                   c.B, c.S, c.nq, c.ng, c.hd);
            return;
        }
    }
    int N = c.B * c.S, r = c.nq / c.ng;
    size_t nqkv = (size_t)N * c.ng * (r + 2) * c.hd, nout = (size_t)N * c.nq * c.hd;
    size_t gpu_saved = im->saved_bytes(gpu, c.B, c.S, c.nq, c.hd);
    ct_pool P = ct_pool_of(t, gpu);
    void *d_qkv = ct_up_act(&P, qkv, nqkv), *d_dout = ct_up_act(&P, dout, nout);
    void *d_out = ct_poison_act(&P, nout), *d_saved = ct_poison(&P, gpu_saved);
    void *d_dqkv = ct_poison_act(&P, nqkv);
    if (P.failed) goto done;
    float *got_out[2], *got_d[2];
    for (int run = 0; run < 2; run++) {
        MG_EXPECT_OK(
            im->forward(gpu, d_out, d_saved, d_qkv, c.B, c.S, c.nq, c.ng, c.hd, NULL, NULL));
        MG_EXPECT_OK(im->backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, c.B, c.S, c.nq, c.ng,
                                  c.hd, NULL, NULL));
        got_out[run] = ct_down_act(&P, d_out, nout);
        got_d[run] = ct_down_act(&P, d_dqkv, nqkv);
    }
    CT_EXPECT_CLOSE(got_out[0], ref_out, nout, CT_TOL_GEMM,
                    "%s attention_forward B=%d S=%d nq=%d ng=%d hd=%d", im->name, c.B, c.S, c.nq,
                    c.ng, c.hd);
    for (int part = 0; part < 3; part++) {
        size_t n1, n2;
        float *g = ct_qkv_part(&P, got_d[0], N, c.nq, c.ng, c.hd, part, &n1);
        float *want = ct_qkv_part(&P, ref_dqkv, N, c.nq, c.ng, c.hd, part, &n2);
        /* With S = 1 the query and key gradients are zero in exact arithmetic (a softmax
         * over one key has no slope), so the reference is 0 or fp32 rounding noise (~1e-7 of
         * the gradient's scale: it depends on the inputs, e.g. rounded to fp16 or bf16), and
         * so is the result: compare that noise with the scale of the whole gradient instead. */
        double want_max = 0, all_max = 0, got_max = 0;
        for (size_t i = 0; i < n2; i++) want_max = fmax(want_max, fabs(want[i]));
        for (size_t i = 0; i < nqkv; i++) all_max = fmax(all_max, fabs(ref_dqkv[i]));
        if (want_max <= 1e-5 * all_max && all_max > 0) {
            for (size_t i = 0; i < n1; i++) got_max = fmax(got_max, fabs(g[i]));
            MG_EXPECT(got_max <= CT_TOL_ATTN_BWD * all_max,
                      "%s attention_backward %s B=%d S=%d: |got| %g, want 0 (gradient scale "
                      "%g)",
                      im->name, part_name[part], c.B, c.S, got_max, all_max);
        } else {
            CT_EXPECT_CLOSE(g, want, n1, CT_TOL_ATTN_BWD,
                            "%s attention_backward %s B=%d S=%d nq=%d ng=%d hd=%d", im->name,
                            part_name[part], c.B, c.S, c.nq, c.ng, c.hd);
        }
    }
    CT_EXPECT_SAME_BITS(got_out[0], got_out[1], nout * 4, "%s attention_forward S=%d", im->name,
                        c.S);
    CT_EXPECT_SAME_BITS(got_d[0], got_d[1], nqkv * 4, "%s attention_backward S=%d", im->name, c.S);
done:
    ct_pool_free(&P);
}

/* Each case's inputs and CPU reference are made once and serve every implementation. */
static void check_impls(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, const att_impl *impls,
                        int n_impl) {
    for (size_t k = 0; k < NCASES; k++) {
        att_case c = k_cases[k];
        int N = c.B * c.S, r = c.nq / c.ng;
        size_t nqkv = (size_t)N * c.ng * (r + 2) * c.hd, nout = (size_t)N * c.nq * c.hd;
        ct_pool P = ct_pool_of(t, gpu);
        float *qkv = ct_rand_act(&P, 90, nqkv, 1.0f), *dout = ct_rand_act(&P, 91, nout, 1.0f);
        float *ref_out = ct_host(&P, nout * 4), *ref_dqkv = ct_host(&P, nqkv * 4);
        float *saved = ct_host(&P, cpu->attention_saved_bytes(cpu, c.B, c.S, c.nq, c.hd));
        MG_EXPECT_OK(cpu->attention_forward(cpu, ref_out, saved, qkv, c.B, c.S, c.nq, c.ng, c.hd,
                                            NULL, NULL));
        MG_EXPECT_OK(cpu->attention_backward(cpu, ref_dqkv, dout, qkv, ref_out, saved, c.B, c.S,
                                             c.nq, c.ng, c.hd, NULL, NULL));
        for (int i = 0; i < n_impl; i++)
            check_impl(t, gpu, &impls[i], c, qkv, dout, ref_out, ref_dqkv);
        ct_pool_free(&P);
    }
}

/* A NaN in one element of one token's value head: that column of the output is NaN for every
 * later query of the sequence in the group, as on the CPU; earlier queries, other columns, other
 * groups and the other sequence stay finite. */
MG_TEST(cuda_attention_nonfinite_parity) {
    CT_BACKENDS(cpu, gpu);
    enum { B = 2, S = 7, NQ = 4, NG = 2, HD = 64, R = NQ / NG, C = NG * (R + 2) * HD };
    size_t nqkv = (size_t)B * S * C, nout = (size_t)B * S * NQ * HD;
    ct_pool P = ct_pool_of(t, gpu);
    float *qkv = ct_rand_act(&P, 92, nqkv, 1.0f);
    qkv[(size_t)3 * C + (1 * (R + 2) + R + 1) * HD + 10] = NAN; /* batch 0, token 3, group 1 v */
    float *ref = ct_host(&P, nout * 4);
    float *saved = ct_host(&P, cpu->attention_saved_bytes(cpu, B, S, NQ, HD));
    MG_EXPECT_OK(cpu->attention_forward(cpu, ref, saved, qkv, B, S, NQ, NG, HD, NULL, NULL));
    void *d_qkv = ct_up_act(&P, qkv, nqkv), *d_out = ct_poison_act(&P, nout);
    void *d_saved = ct_poison(&P, gpu->attention_saved_bytes(gpu, B, S, NQ, HD));
    if (!P.failed) {
        MG_EXPECT_OK(
            gpu->attention_forward(gpu, d_out, d_saved, d_qkv, B, S, NQ, NG, HD, NULL, NULL));
        CT_EXPECT_PARITY(ct_down_act(&P, d_out, nout), ref, nout, "attention_forward");
    }
    ct_pool_free(&P);
}

/* A shape whose deterministic cuDNN backward needs more than the default 2 GiB workspace (about
 * B nq S^2 2 bytes: 4.3 GB here): the workspace grows to the plan's size instead of failing, and
 * forward and backward give finite results. Only on the CUDA backend (the CPU reference would take
 * minutes at this size). */
MG_TEST(cuda_attention_workspace_grows_to_the_plan) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    if (strcmp(gpu->name, "cuda") != 0) return;
    enum { B = 8, S = 4096, NQ = 16, NG = 16, HD = 64, C = NG * 3 * HD };
    size_t nqkv = (size_t)B * S * C, nout = (size_t)B * S * NQ * HD;
    ct_pool P = ct_pool_of(t, gpu);
    float *qkv = ct_rand_act(&P, 93, nqkv, 1.0f), *dout = ct_rand_act(&P, 94, nout, 1.0f);
    void *d_qkv = ct_up_act(&P, qkv, nqkv), *d_dout = ct_up_act(&P, dout, nout);
    void *d_out = ct_poison_act(&P, nout), *d_dqkv = ct_poison_act(&P, nqkv);
    void *d_saved = ct_poison(&P, gpu->attention_saved_bytes(gpu, B, S, NQ, HD));
    if (!P.failed) {
        MG_EXPECT_OK(
            gpu->attention_forward(gpu, d_out, d_saved, d_qkv, B, S, NQ, NG, HD, NULL, NULL));
        MG_EXPECT_OK(gpu->attention_backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, B, S, NQ,
                                             NG, HD, NULL, NULL));
        const float *out = ct_down_act(&P, d_out, nout), *dqkv = ct_down_act(&P, d_dqkv, nqkv);
        size_t bad = 0;
        for (size_t i = 0; out && i < nout; i += 4099) bad += !isfinite(out[i]);
        for (size_t i = 0; dqkv && i < nqkv; i += 4099) bad += !isfinite(dqkv[i]);
        MG_EXPECT(out && dqkv && bad == 0, "%zu sampled outputs or gradients are not finite", bad);
    }
    ct_pool_free(&P);
}

/* The document mask of packed sequences (doc_start, --reset-attention-mask): documents that end
 * inside a 64-row tile, on a tile boundary (63, 64), on the first and the last token, and a long
 * one spanning several tiles, so key tiles before a query tile's document are skipped and the
 * rest masked per element. Forward and backward against the CPU with the same doc_start, with
 * and without attention dropout, twice (bitwise repeatable); our kernels and the backend's entry
 * (cuDNN by default, which hands a document mask to ours). */
typedef struct {
    int B, S, nq, ng, hd;
    int eods[2][8]; /* per sequence, -1 ends */
} doc_case;

static const doc_case k_doc_cases[] = {
    {2, 257, 8, 2, 64, {{10, 63, 64, 130, 200, 256, -1}, {0, 1, 190, -1}}},
    {1, 129, 4, 4, 128, {{40, 127, -1}, {-1}}},
    {2, 70, 4, 1, 32, {{69, -1}, {5, 6, 7, 64, -1}}},
};

/* Inputs and the CPU reference of one case, with or without dropout, made once for every
 * implementation under test. */
static void check_doc(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, const att_impl *impls,
                      int n_impl, const doc_case *c, bool dropping) {
    int N = c->B * c->S, r = c->nq / c->ng;
    size_t nqkv = (size_t)N * c->ng * (r + 2) * c->hd, nout = (size_t)N * c->nq * c->hd;
    mg_dropout d = mg_dropout_init(0.2, 4321, 9, 3, MG_DROPOUT_ATTENTION, 1, 0);
    const mg_dropout *dp = dropping ? &d : NULL;
    ct_pool P = ct_pool_of(t, gpu);
    int32_t *doc = ct_host(&P, (size_t)N * sizeof *doc);
    for (int b = 0; b < c->B; b++)
        for (int s = 0, start = 0, k = 0; s < c->S; s++) {
            doc[b * c->S + s] = start;
            if (c->eods[b][k] == s) start = s + 1, k++;
        }
    float *qkv = ct_rand_act(&P, 95, nqkv, 1.0f), *dout = ct_rand_act(&P, 96, nout, 1.0f);
    float *ref_out = ct_host(&P, nout * 4), *ref_dqkv = ct_host(&P, nqkv * 4);
    float *saved = ct_host(&P, cpu->attention_saved_bytes(cpu, c->B, c->S, c->nq, c->hd));
    MG_EXPECT_OK(
        cpu->attention_forward(cpu, ref_out, saved, qkv, c->B, c->S, c->nq, c->ng, c->hd, dp, doc));
    MG_EXPECT_OK(cpu->attention_backward(cpu, ref_dqkv, dout, qkv, ref_out, saved, c->B, c->S,
                                         c->nq, c->ng, c->hd, dp, doc));
    void *d_qkv = ct_up_act(&P, qkv, nqkv), *d_dout = ct_up_act(&P, dout, nout);
    int32_t *d_doc = ct_up_i32(&P, doc, N);
    for (int i = 0; i < n_impl && !P.failed; i++) {
        const att_impl *im = &impls[i];
        ct_pool Q = ct_pool_of(t, gpu);
        void *d_out = ct_poison_act(&Q, nout), *d_dqkv = ct_poison_act(&Q, nqkv);
        void *d_saved = ct_poison(&Q, im->saved_bytes(gpu, c->B, c->S, c->nq, c->hd));
        if (Q.failed) {
            ct_pool_free(&Q);
            break;
        }
        float *got_out[2], *got_d[2];
        for (int run = 0; run < 2; run++) {
            MG_EXPECT_OK(im->forward(gpu, d_out, d_saved, d_qkv, c->B, c->S, c->nq, c->ng, c->hd,
                                     dp, d_doc));
            MG_EXPECT_OK(im->backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, c->B, c->S, c->nq,
                                      c->ng, c->hd, dp, d_doc));
            got_out[run] = ct_down_act(&Q, d_out, nout);
            got_d[run] = ct_down_act(&Q, d_dqkv, nqkv);
        }
        CT_EXPECT_CLOSE(got_out[0], ref_out, nout, CT_TOL_GEMM,
                        "%s attention_forward documents S=%d hd=%d dropout %d", im->name, c->S,
                        c->hd, dropping);
        CT_EXPECT_QKV_CLOSE(&Q, got_d[0], ref_dqkv, N, c->nq, c->ng, c->hd, CT_TOL_ATTN_BWD,
                            "%s attention_backward documents S=%d hd=%d dropout %d", im->name,
                            c->S, c->hd, dropping);
        CT_EXPECT_SAME_BITS(got_out[0], got_out[1], nout * 4,
                            "%s attention_forward documents rerun", im->name);
        CT_EXPECT_SAME_BITS(got_d[0], got_d[1], nqkv * 4, "%s attention_backward documents rerun",
                            im->name);
        ct_pool_free(&Q);
    }
    ct_pool_free(&P);
}

MG_TEST(cuda_attention_documents_match_cpu) {
    CT_BACKENDS(cpu, gpu);
    att_impl impls[2] = {
        {"table", gpu->attention_saved_bytes, gpu->attention_forward, gpu->attention_backward},
        {"ours", gpu->attention_saved_bytes, gpu->attention_forward, gpu->attention_backward}};
    int n_impl = 1;
    if (gpu->device == MG_DEVICE_CUDA) {
        impls[1] =
            (att_impl){"ours", CT_CUDA_OP(gpu, attention_saved_bytes),
                       CT_CUDA_OP(gpu, attention_forward), CT_CUDA_OP(gpu, attention_backward)};
        n_impl = 2;
    }
    for (size_t k = 0; k < sizeof k_doc_cases / sizeof *k_doc_cases; k++)
        for (int drop = 0; drop < 2; drop++)
            check_doc(t, cpu, gpu, impls, n_impl, &k_doc_cases[k], drop);
}

/* Every head size from 1 to 256 runs on CUDA: the tensor-core kernels for multiples of 16 up to
 * 128, attention_generic.cu's for the rest. Sizes of both families (odd ones too: their rows sit
 * at odd 2-byte offsets), with grouped queries, each without dropout, with positional and with
 * stream dropout, with documents, and with documents and stream dropout; forward and backward of
 * our implementation against the CPU, twice (bitwise repeatable), the second time with no device
 * allocation or host synchronisation. Without dropout and documents, also the backend's entry
 * (cuDNN by default, or ours where cuDNN has no plan). The stream's {seed, offset} lives in each
 * backend's own memory: uploaded for the backend under test, a host array for the CPU. */
typedef struct {
    int hd, B, S, nq, ng;
} hd_case;

static const hd_case k_hd_cases[] = {
    {1, 2, 67, 4, 2},    /* generic: a single channel */
    {8, 2, 130, 4, 2},   /* generic */
    {24, 2, 67, 6, 2},   /* generic, 3 query heads per group */
    {37, 1, 130, 2, 1},  /* generic, odd: every other row at an odd 2-byte offset */
    {64, 2, 130, 4, 2},  /* tensor cores */
    {80, 1, 67, 4, 4},   /* tensor cores, multi-head */
    {96, 2, 67, 4, 1},   /* tensor cores, multi-query */
    {128, 1, 130, 4, 2}, /* tensor cores, the largest */
    {192, 2, 67, 4, 2},  /* generic */
    {256, 1, 130, 2, 1}, /* generic, the largest */
};

enum { HD_PLAIN, HD_POSITIONAL, HD_STREAM, HD_DOCS, HD_DOCS_STREAM, HD_VARIANTS };
static const char *const k_hd_variant[HD_VARIANTS] = {
    "plain", "positional dropout", "stream dropout", "documents", "documents, stream dropout"};

/* One implementation on one case and variant against the CPU's out and dqkv. */
static void check_hd_impl(mg_test_ctx *t, mg_backend *gpu, const att_impl *im, const hd_case *c,
                          const char *variant, const void *d_qkv, const void *d_dout,
                          const mg_dropout *dp, const int32_t *d_doc, const float *ref_out,
                          const float *ref_dqkv) {
    int N = c->B * c->S, r = c->nq / c->ng;
    size_t nqkv = (size_t)N * c->ng * (r + 2) * c->hd, nout = (size_t)N * c->nq * c->hd;
    bool cuda = gpu->device == MG_DEVICE_CUDA;
    ct_pool Q = ct_pool_of(t, gpu);
    void *d_out = ct_poison_act(&Q, nout), *d_dqkv = ct_poison_act(&Q, nqkv);
    void *d_saved = ct_poison(&Q, im->saved_bytes(gpu, c->B, c->S, c->nq, c->hd));
    if (Q.failed) goto done;
    float *got_out[2], *got_d[2];
    for (int run = 0; run < 2; run++) {
        uint64_t allocs = cuda ? ct_allocs(gpu) : 0, syncs = cuda ? ct_syncs(gpu) : 0;
        MG_EXPECT_OK(
            im->forward(gpu, d_out, d_saved, d_qkv, c->B, c->S, c->nq, c->ng, c->hd, dp, d_doc));
        MG_EXPECT_OK(im->backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, c->B, c->S, c->nq,
                                  c->ng, c->hd, dp, d_doc));
        if (cuda && run == 1) /* the second run: cuDNN builds its plans in the first */
            MG_EXPECT(ct_allocs(gpu) == allocs && ct_syncs(gpu) == syncs,
                      "%s attention hd=%d %s: %llu device allocations, %llu host syncs", im->name,
                      c->hd, variant, (unsigned long long)(ct_allocs(gpu) - allocs),
                      (unsigned long long)(ct_syncs(gpu) - syncs));
        got_out[run] = ct_down_act(&Q, d_out, nout);
        got_d[run] = ct_down_act(&Q, d_dqkv, nqkv);
    }
    CT_EXPECT_CLOSE(got_out[0], ref_out, nout, CT_TOL_GEMM,
                    "%s attention_forward hd=%d B=%d S=%d nq=%d ng=%d, %s", im->name, c->hd, c->B,
                    c->S, c->nq, c->ng, variant);
    CT_EXPECT_QKV_CLOSE(&Q, got_d[0], ref_dqkv, N, c->nq, c->ng, c->hd, CT_TOL_ATTN_BWD,
                        "%s attention_backward hd=%d B=%d S=%d nq=%d ng=%d, %s", im->name, c->hd,
                        c->B, c->S, c->nq, c->ng, variant);
    CT_EXPECT_SAME_BITS(got_out[0], got_out[1], nout * 4, "%s attention_forward hd=%d %s rerun",
                        im->name, c->hd, variant);
    CT_EXPECT_SAME_BITS(got_d[0], got_d[1], nqkv * 4, "%s attention_backward hd=%d %s rerun",
                        im->name, c->hd, variant);
done:
    ct_pool_free(&Q);
}

MG_TEST(cuda_attention_head_sizes_match_cpu) {
    CT_BACKENDS(cpu, gpu);
    att_impl ours = {"ours", gpu->attention_saved_bytes, gpu->attention_forward,
                     gpu->attention_backward};
    const att_impl table = {"table", gpu->attention_saved_bytes, gpu->attention_forward,
                            gpu->attention_backward};
    if (gpu->device == MG_DEVICE_CUDA)
        ours = (att_impl){"ours", CT_CUDA_OP(gpu, attention_saved_bytes),
                          CT_CUDA_OP(gpu, attention_forward), CT_CUDA_OP(gpu, attention_backward)};
    /* a stream's {seed, offset}: an offset past 2^32 puts bits in both of its counter words */
    const uint64_t stream_host[2] = {0x5eed0123456789abull, (1ull << 32) + 77};
    for (size_t k = 0; k < sizeof k_hd_cases / sizeof *k_hd_cases; k++) {
        const hd_case *c = &k_hd_cases[k];
        int N = c->B * c->S, r = c->nq / c->ng;
        size_t nqkv = (size_t)N * c->ng * (r + 2) * c->hd, nout = (size_t)N * c->nq * c->hd;
        ct_pool P = ct_pool_of(t, gpu);
        float *qkv = ct_rand_act(&P, 97, nqkv, 1.0f), *dout = ct_rand_act(&P, 98, nout, 1.0f);
        /* documents: sequence 0 ends them after S/3 and 2S/3, sequence 1 after 0 and S/2 + 1 */
        int32_t *doc = ct_host(&P, (size_t)N * sizeof *doc);
        for (int b = 0; b < c->B; b++) {
            int e1 = b % 2 ? 0 : c->S / 3, e2 = b % 2 ? c->S / 2 + 1 : 2 * c->S / 3;
            for (int s = 0, start = 0; s < c->S; s++) {
                doc[b * c->S + s] = start;
                if (s == e1 || s == e2) start = s + 1;
            }
        }
        float *ref_out = ct_host(&P, nout * 4), *ref_dqkv = ct_host(&P, nqkv * 4);
        float *saved = ct_host(&P, cpu->attention_saved_bytes(cpu, c->B, c->S, c->nq, c->hd));
        void *d_qkv = ct_up_act(&P, qkv, nqkv), *d_dout = ct_up_act(&P, dout, nout);
        int32_t *d_doc = ct_up_i32(&P, doc, N);
        const uint64_t *stream_dev = ct_up_u64(&P, stream_host, 2);
        for (int v = 0; v < HD_VARIANTS && !P.failed; v++) {
            /* the same mask for both backends: only the stream's state pointer differs */
            mg_dropout cpu_drop = mg_dropout_init(0.2, 4321, 9, 3, MG_DROPOUT_ATTENTION, 1, 2);
            mg_dropout gpu_drop = cpu_drop;
            if (v == HD_STREAM || v == HD_DOCS_STREAM) {
                cpu_drop = mg_dropout_stream_init(0.2, stream_host, 3);
                gpu_drop = mg_dropout_stream_init(0.2, stream_dev, 3);
            }
            bool dropping = v == HD_POSITIONAL || v == HD_STREAM || v == HD_DOCS_STREAM;
            bool docs = v == HD_DOCS || v == HD_DOCS_STREAM;
            const mg_dropout *cdp = dropping ? &cpu_drop : NULL, *gdp = dropping ? &gpu_drop : NULL;
            MG_EXPECT_OK(cpu->attention_forward(cpu, ref_out, saved, qkv, c->B, c->S, c->nq, c->ng,
                                                c->hd, cdp, docs ? doc : NULL));
            MG_EXPECT_OK(cpu->attention_backward(cpu, ref_dqkv, dout, qkv, ref_out, saved, c->B,
                                                 c->S, c->nq, c->ng, c->hd, cdp,
                                                 docs ? doc : NULL));
            check_hd_impl(t, gpu, &ours, c, k_hd_variant[v], d_qkv, d_dout, gdp,
                          docs ? d_doc : NULL, ref_out, ref_dqkv);
            if (v == HD_PLAIN)
                check_hd_impl(t, gpu, &table, c, k_hd_variant[v], d_qkv, d_dout, NULL, NULL,
                              ref_out, ref_dqkv);
        }
        ct_pool_free(&P);
    }
}

/* Head dims outside 1..256 are refused by our entries with one line naming the limit, before
 * anything is read or launched (so no buffers are needed). CUDA only. */
MG_TEST(cuda_attention_head_dim_limits) {
    CT_BACKENDS(cpu, gpu);
    (void)cpu;
    if (gpu->device != MG_DEVICE_CUDA) return;
    const int bad[] = {0, -8, 257, 512};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        MG_EXPECT_ERROR(CT_CUDA_OP(gpu, attention_forward)(gpu, NULL, NULL, NULL, 1, 8, 2, 1,
                                                           bad[k], NULL, NULL),
                        MG_ERR_UNSUPPORTED, "(1 to 256 on CUDA)");
        MG_EXPECT_ERROR(CT_CUDA_OP(gpu, attention_backward)(gpu, NULL, NULL, NULL, NULL, NULL, 1, 8,
                                                            2, 1, bad[k], NULL, NULL),
                        MG_ERR_UNSUPPORTED, "(1 to 256 on CUDA)");
    }
}
