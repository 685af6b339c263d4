/* CUDA dropout against the CPU backend (core/dropout.h: one counter-based mask for both, of each
 * kind: stream masks keyed by a {seed, offset} pair in each backend's own memory, and positional
 * ones):
 *  - hidden dropout (dropout_add, dropout_backward): on inputs of ones the outputs ARE the mask,
 *    0 or 1/(1-p); the CUDA zero pattern must equal the CPU's element for element (rows of 64
 *    and rows of 6, whose Philox blocks straddle rows; a sequence-parallel row offset and a
 *    sequence offset), and on random inputs the values agree to compute-dtype rounding;
 *  - attention dropout: with q = k = 0 and v_t the unit vector e_t (hd = 128 >= S) the output is
 *    out[s, t] = f(s, t) / (s + 1), so again the zero pattern is the mask and must equal the
 *    CPU's exactly, for our kernels and for the backend's table entry (cuDNN by default, which
 *    hands dropout to our kernels), at S = 128 (two query and key tiles) and S = 67 (a ragged
 *    tile; rows whose keys straddle Philox blocks); on random inputs forward and backward agree
 *    with the CPU's to the attention tolerances, and a rerun gives the same bits. (The table's
 *    entry runs stream masks inside cuDNN, whose mask is its own: test_cuda_attention_dropout.c.)
 *  - rng_advance moves the streams' offsets on the device as the CPU does on the host, and
 *    normal_f32 draws the CPU's normals from a stream.
 * Method and tolerances: cuda_test_util.h. */
#include "cuda_test_util.h"

#include "backend/cuda/cuda_ops.h"
#include "core/dropout.h"

#include <math.h>
#include <stdio.h>

/* Elements where exactly one of got, ref is zero, and where both are non-zero but differ by more
 * than one rounding to the compute dtype (CT_EPS relative, with 2% to spare). */
static void zero_pattern(const float *got, const float *ref, size_t n, size_t *pattern,
                         size_t *value, size_t *zeros) {
    *pattern = *value = *zeros = 0;
    for (size_t i = 0; i < n; i++) {
        bool gz = got[i] == 0.0f, rz = ref[i] == 0.0f;
        *zeros += rz;
        if (gz != rz)
            (*pattern)++;
        else if (!gz && !(fabsf(got[i] - ref[i]) <= (float)(1.02 * CT_EPS) * fabsf(ref[i])))
            (*value)++;
    }
}

MG_TEST(cuda_dropout_hidden_mask_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    const struct {
        int N, H, S, first, sample0;
        double p;
    } cases[] = {{96, 64, 32, 0, 0, 0.1}, {20, 6, 8, 5, 7, 0.5}, {33, 40, 11, 11, 2, 0.3}};
    for (size_t kk = 0; kk < 2 * sizeof cases / sizeof *cases; kk++) {
        const size_t k = kk / 2;
        const bool stream = kk % 2;
        const int N = cases[k].N, H = cases[k].H, S = cases[k].S;
        const size_t n = (size_t)N * H;
        uint64_t cpu_state[2] = {0x123456789abcull, 40 + k};
        ct_pool P = ct_pool_of(t, gpu);
        uint64_t *gpu_state = ct_up_u64(&P, cpu_state, 2);
        if (P.failed) {
            MG_EXPECT(0, "cannot upload the stream state");
            ct_pool_free(&P);
            continue;
        }
        /* the CPU's mask struct; the GPU's is the same but for the state's address */
        mg_dropout d = stream ? mg_dropout_stream_init(cases[k].p, cpu_state, 3 * k + 1)
                              : mg_dropout_init(cases[k].p, 1234, 9, 3, MG_DROPOUT_MLP_OUT,
                                                cases[k].sample0, cases[k].first);
        mg_dropout dg = d;
        if (stream) dg.state = gpu_state;
        float *ones = ct_host(&P, n * 4), *zeros = ct_host(&P, n * 4);
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f, zeros[i] = 0.0f;
        float *x = ct_rand_act(&P, 500, n, 1.0f), *bias = ct_rand_act(&P, 501, (size_t)H, 1.0f);
        float *res = ct_rand_act(&P, 502, n, 1.0f), *dout = ct_rand_act(&P, 503, n, 1.0f);
        float *ref_mask = ct_host(&P, n * 4), *ref_add = ct_host(&P, n * 4);
        float *ref_back = ct_host(&P, n * 4);
        MG_EXPECT_OK(cpu->dropout_add(cpu, ref_mask, ones, NULL, zeros, N, H, S, &d));
        MG_EXPECT_OK(cpu->dropout_add(cpu, ref_add, x, bias, res, N, H, S, &d));
        MG_EXPECT_OK(cpu->dropout_backward(cpu, ref_back, dout, N, H, S, &d));
        void *d_ones = ct_up_act(&P, ones, n), *d_zeros = ct_up_act(&P, zeros, n);
        void *d_x = ct_up_act(&P, x, n), *d_bias = ct_up_act(&P, bias, (size_t)H);
        void *d_res = ct_up_act(&P, res, n), *d_dout = ct_up_act(&P, dout, n);
        void *d_out = ct_poison_act(&P, n), *d_dx = ct_poison_act(&P, n);
        if (P.failed) goto next;
        /* the mask itself */
        MG_EXPECT_OK(gpu->dropout_add(gpu, d_out, d_ones, NULL, d_zeros, N, H, S, &dg));
        size_t pat, val, nz;
        zero_pattern(ct_down_act(&P, d_out, n), ref_mask, n, &pat, &val, &nz);
        MG_EXPECT(pat == 0 && val == 0 && nz > 0 && nz < n,
                  "%s N %d H %d first %d: %zu mask elements differ from the CPU's, %zu values off "
                  "(%zu of %zu dropped)",
                  stream ? "stream" : "positional", N, H, d.first, pat, val, nz, n);
        /* random inputs, in place (out aliases x) */
        MG_EXPECT_OK(gpu->dropout_add(gpu, d_x, d_x, d_bias, d_res, N, H, S, &dg));
        CT_EXPECT_CLOSE(ct_down_act(&P, d_x, n), ref_add, n, CT_TOL_ACT, "dropout_add N %d H %d", N,
                        H);
        MG_EXPECT_OK(gpu->dropout_backward(gpu, d_dx, d_dout, N, H, S, &dg));
        float *got_back = ct_down_act(&P, d_dx, n);
        zero_pattern(got_back, ref_back, n, &pat, &val, &nz);
        MG_EXPECT(pat == 0 && val == 0, "%s dropout_backward N %d H %d: %zu pattern, %zu values",
                  stream ? "stream" : "positional", N, H, pat, val);
    next:
        ct_pool_free(&P);
    }
}

typedef mg_status (*att_fwd)(mg_backend *, void *, void *, const void *, int, int, int, int, int,
                             const mg_dropout *, const int32_t *);
typedef mg_status (*att_bwd)(mg_backend *, void *, const void *, const void *, const void *,
                             const void *, int, int, int, int, int, const mg_dropout *,
                             const int32_t *);

static void check_attention(mg_test_ctx *t, mg_backend *cpu, mg_backend *gpu, const char *name,
                            att_fwd fwd, att_bwd bwd, int S, bool stream) {
    enum { B = 2, NQ = 4, NG = 2, HD = 128, R = NQ / NG, C = NG * (R + 2) * HD };
    const size_t nqkv = (size_t)B * S * C, nout = (size_t)B * S * NQ * HD;
    uint64_t cpu_state[2] = {0xfeedbeefull, 1000};
    ct_pool P = ct_pool_of(t, gpu);
    uint64_t *gpu_state = ct_up_u64(&P, cpu_state, 2);
    if (P.failed) {
        MG_EXPECT(0, "cannot upload the stream state");
        ct_pool_free(&P);
        return;
    }
    /* positional: sequence 3 of the global batch, and the heads of tensor-parallel rank 1 of 2 */
    mg_dropout d = stream ? mg_dropout_stream_init(0.2, cpu_state, 11)
                          : mg_dropout_init(0.2, 4321, 17, 5, MG_DROPOUT_ATTENTION, 3, NQ);
    mg_dropout dg = d;
    if (stream) dg.state = gpu_state;
    name = stream ? (strcmp(name, "ours") == 0 ? "ours stream" : name) : name;
    float *reveal = ct_host(&P, nqkv * 4);
    memset(reveal, 0, nqkv * 4);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int g = 0; g < NG; g++)
                reveal[((size_t)b * S + s) * C + (size_t)(g * (R + 2) + R + 1) * HD + s] = 1.0f;
    float *qkv = ct_rand_act(&P, 510, nqkv, 1.0f), *dout = ct_rand_act(&P, 511, nout, 1.0f);
    float *ref_mask = ct_host(&P, nout * 4), *ref_out = ct_host(&P, nout * 4);
    float *ref_dqkv = ct_host(&P, nqkv * 4);
    float *saved = ct_host(&P, cpu->attention_saved_bytes(cpu, B, S, NQ, HD));
    MG_EXPECT_OK(cpu->attention_forward(cpu, ref_mask, saved, reveal, B, S, NQ, NG, HD, &d, NULL));
    MG_EXPECT_OK(cpu->attention_forward(cpu, ref_out, saved, qkv, B, S, NQ, NG, HD, &d, NULL));
    MG_EXPECT_OK(cpu->attention_backward(cpu, ref_dqkv, dout, qkv, ref_out, saved, B, S, NQ, NG, HD,
                                         &d, NULL));
    void *d_reveal = ct_up_act(&P, reveal, nqkv), *d_qkv = ct_up_act(&P, qkv, nqkv);
    void *d_dout = ct_up_act(&P, dout, nout), *d_out = ct_poison_act(&P, nout);
    void *d_saved = ct_poison(&P, gpu->attention_saved_bytes(gpu, B, S, NQ, HD));
    void *d_dqkv = ct_poison_act(&P, nqkv);
    if (P.failed) goto done;
    MG_EXPECT_OK(fwd(gpu, d_out, d_saved, d_reveal, B, S, NQ, NG, HD, &dg, NULL));
    size_t pat, val, nz;
    zero_pattern(ct_down_act(&P, d_out, nout), ref_mask, nout, &pat, &val, &nz);
    /* the causal triangle's upper part is zero on both: the dropped ones are the rest */
    MG_EXPECT(pat == 0 && val == 0 && nz > (size_t)B * NQ * (S * (S - 1) / 2 + S * (HD - S)),
              "%s S %d: %zu attention mask elements differ from the CPU's, %zu values off (%zu "
              "zeros)",
              name, S, pat, val, nz);
    float *got_out[2], *got_d[2];
    for (int run = 0; run < 2; run++) {
        MG_EXPECT_OK(fwd(gpu, d_out, d_saved, d_qkv, B, S, NQ, NG, HD, &dg, NULL));
        MG_EXPECT_OK(bwd(gpu, d_dqkv, d_dout, d_qkv, d_out, d_saved, B, S, NQ, NG, HD, &dg, NULL));
        got_out[run] = ct_down_act(&P, d_out, nout);
        got_d[run] = ct_down_act(&P, d_dqkv, nqkv);
    }
    CT_EXPECT_CLOSE(got_out[0], ref_out, nout, CT_TOL_GEMM, "%s attention_forward S %d, dropout",
                    name, S);
    CT_EXPECT_CLOSE(got_d[0], ref_dqkv, nqkv, CT_TOL_ATTN_BWD,
                    "%s attention_backward S %d, dropout", name, S);
    CT_EXPECT_SAME_BITS(got_out[0], got_out[1], nout * 4, "%s attention_forward S %d rerun", name,
                        S);
    CT_EXPECT_SAME_BITS(got_d[0], got_d[1], nqkv * 4, "%s attention_backward S %d rerun", name, S);
done:
    ct_pool_free(&P);
}

MG_TEST(cuda_dropout_attention_mask_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    for (int S = 128; S > 0; S = S == 128 ? 67 : 0) {
        /* the backend's entry: cuDNN by default, which runs ours under positional masks */
        check_attention(t, cpu, gpu, "table", gpu->attention_forward, gpu->attention_backward, S,
                        false);
        if (gpu->device == MG_DEVICE_CUDA)
            for (int stream = 0; stream < 2; stream++)
                check_attention(t, cpu, gpu, "ours", CT_CUDA_OP(gpu, attention_forward),
                                CT_CUDA_OP(gpu, attention_backward), S, stream);
        else /* the CPU under test: its stream masks too */
            check_attention(t, cpu, gpu, "table", gpu->attention_forward, gpu->attention_backward,
                            S, true);
    }
}

MG_TEST(cuda_rng_advance_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    uint64_t want[6] = {1, 2, 3, UINT64_MAX - 5, 7, 8}, got[6];
    ct_pool P = ct_pool_of(t, gpu);
    uint64_t *d = ct_poison(&P, sizeof want);
    if (!P.failed) {
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d, want, sizeof want));
        MG_EXPECT_OK(gpu->rng_advance(gpu, d, 3, 40));
        MG_EXPECT_OK(gpu->rng_advance(gpu, d, 2, 9)); /* the first two streams only */
        MG_EXPECT_OK(cpu->rng_advance(cpu, want, 3, 40));
        MG_EXPECT_OK(cpu->rng_advance(cpu, want, 2, 9));
        MG_EXPECT_OK(gpu->copy_d2h(gpu, got, d, sizeof got));
        MG_EXPECT(memcmp(got, want, sizeof got) == 0 && want[1] == 51 && want[5] == 48 &&
                      want[3] == 43 && want[0] == 1 && want[2] == 3, /* offsets wrap modulo 2^64 */
                  "rng_advance: cuda {%llu %llu | %llu %llu | %llu %llu}",
                  (unsigned long long)got[0], (unsigned long long)got[1],
                  (unsigned long long)got[2], (unsigned long long)got[3],
                  (unsigned long long)got[4], (unsigned long long)got[5]);
    }
    ct_pool_free(&P);
}

/* normal_f32 (core/normal.h): the same uniforms on both backends, so the normals agree to the
 * last bits of each libm (CT_TOL_F32_ELEM, element by element); n not a multiple of 4 and an
 * unaligned start take the scalar tail; the stream's state is read on the device. */
MG_TEST(cuda_normal_f32_matches_cpu) {
    CT_BACKENDS(cpu, gpu);
    enum { n = 100003 };
    const uint64_t state[2] = {0x123456789ull, 77};
    ct_pool P = ct_pool_of(t, gpu);
    uint64_t *d_state = ct_poison(&P, sizeof state);
    float *d_out = ct_poison(&P, (n + 1) * sizeof(float)), *want = ct_host(&P, n * sizeof(float));
    if (!P.failed) {
        MG_EXPECT_OK(gpu->copy_h2d(gpu, d_state, state, sizeof state));
        MG_EXPECT_OK(gpu->normal_f32(gpu, d_out + 1, n, d_state, 5));
        MG_EXPECT_OK(cpu->normal_f32(cpu, want, n, state, 5));
        float *got = ct_down_f32(&P, d_out + 1, n);
        if (got) CT_EXPECT_CLOSE(got, want, n, CT_TOL_F32_ELEM, "normal_f32 (n %d)", n);
    }
    ct_pool_free(&P);
}
