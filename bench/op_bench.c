/* Where a GPT-2 training step spends its time on a backend: each op of one step timed on its own
 * (the same shapes and counts the model runs), summed per op family, next to the measured step.
 *   build/op_bench [--layers 12 --hidden 768 --heads 12 --batch 32 --seq 1024 --vocab 50304]
 *                  [--device cuda|cpu] [--reps 10]
 * Each op runs `reps` times after one warm-up; the time is wall clock over the repetitions with
 * one synchronisation at the end, so launch gaps between ops are not counted (the step may be
 * slower than the sum). Every input holds seeded random values (tokens uniform over the
 * vocabulary): on zeros a GPU's matrix products draw less power, hold higher clocks and ran
 * ~20% faster than on real data (bench/NOTES.md, 2026-11-21). Prints one line per op, per family,
 * and a JSON line per family. The attention ops are the backend's: on cuda, MG_ATTENTION=cudnn (or
 * cudnn-nondet) times cuDNN's fused attention instead of our kernels (docs/environment.md); the
 * header and JSON say which. */
#define BENCH_NAME "op_bench"
#include "bench_backend.h"

#include "backend/backend.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int L, H, nh, B, S, V, reps;
    const char *device;
} shape;

#define OP(name, family, count, call)                                                              \
    do {                                                                                           \
        if ((call) != MG_OK) {                                                                     \
            fprintf(stderr, "op_bench: %s failed: %s\n", name, mg_error_message());                \
            return 1;                                                                              \
        }                                                                                          \
        be->synchronize(be);                                                                       \
        double t0_ = mg_clock_seconds();                                                           \
        for (int r_ = 0; r_ < s.reps; r_++) (void)(call);                                          \
        be->synchronize(be);                                                                       \
        double ms_ = (mg_clock_seconds() - t0_) * 1e3 / s.reps;                                    \
        printf("  %-28s %9.3f ms x %4d = %9.2f ms\n", name, ms_, (count), ms_ *(count));           \
        fam[family] += ms_ * (count);                                                              \
    } while (0)

enum { F_ATTN, F_GEMM, F_HEAD, F_NORM, F_EMB, F_OPT, F_N };
/* "linear (layers)" includes the GELU and the residual adds, fused into the products since
 * 2026-11-21 (earlier entries of bench/NOTES.md have them as a family of their own) */
static const char *fam_name[F_N] = {"attention", "linear (layers)", "lm head + cross-entropy",
                                    "layernorm", "embedding",       "optimizer (adamw + norm)"};

/* Fills n elements at p with seeded uniform values in [lo, hi), in the backend's compute dtype
 * (as_f32 = 0) or fp32 (as_f32 = 1): one host chunk of random values, repeated (generating every
 * element of the (N, V) logits on the host would take longer than the benchmark). */
static void fill(mg_backend *be, void *p, size_t n, int as_f32, float lo, float hi, uint64_t seed) {
    enum { CHUNK = 1 << 20 };
    static float host[CHUNK];
    for (size_t i = 0; i < CHUNK; i++) host[i] = lo + (hi - lo) * mg_rng_uniform(seed, 0, i);
    size_t esz = as_f32 ? sizeof(float) : mg_dtype_size(be->compute_dtype);
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        mg_status st = as_f32 ? be->copy_h2d(be, (char *)p + off * esz, host, m * sizeof(float))
                              : be->upload_f32(be, (char *)p + off * esz, host, m);
        if (st != MG_OK) {
            fprintf(stderr, "op_bench: cannot fill an input: %s\n", mg_error_message());
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    shape s = {12, 768, 12, 32, 1024, 50304, 10, "cuda"};
    const struct {
        const char *flag;
        int *v;
    } ints[] = {{"--layers", &s.L}, {"--hidden", &s.H}, {"--heads", &s.nh}, {"--batch", &s.B},
                {"--seq", &s.S},    {"--vocab", &s.V},  {"--reps", &s.reps}};
    const int nints = (int)(sizeof ints / sizeof *ints);
    for (int i = 1; i + 1 < argc; i += 2) {
        int k = 0;
        while (k < nints && strcmp(argv[i], ints[k].flag)) k++;
        if (k < nints)
            *ints[k].v = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device"))
            s.device = argv[i + 1];
        else {
            fprintf(stderr, "op_bench: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    mg_backend *be = NULL;
    mg_status st =
        !strcmp(s.device, "cpu") ? mg_backend_cpu_create(&be, -1) : mg_backend_cuda_create(&be, 0);
    if (st != MG_OK) {
        fprintf(stderr, "op_bench: %s\n", mg_error_message());
        return 1;
    }
    const int N = s.B * s.S, H = s.H, hd = H / s.nh, V = s.V, L = s.L;
    const size_t e = mg_dtype_size(be->compute_dtype);
    const size_t nparams =
        (size_t)V * H + (size_t)s.S * H + (size_t)L * (12 * (size_t)H * H + 13 * (size_t)H);
    void *x = dev(be, (size_t)N * H * e), *y = dev(be, (size_t)N * H * e);
    void *x2 = dev(be, (size_t)N * H * e);
    void *qkv = dev(be, (size_t)N * 3 * H * e), *dqkv = dev(be, (size_t)N * 3 * H * e);
    void *h4 = dev(be, (size_t)N * 4 * H * e), *dh4 = dev(be, (size_t)N * 4 * H * e);
    void *w = dev(be, (size_t)4 * H * H * e), *wte = dev(be, (size_t)V * H * e);
    float *dw = dev(be, (size_t)4 * H * H * 4), *db = dev(be, (size_t)4 * H * 4);
    float *dwte = dev(be, (size_t)V * H * 4), *dwpe = dev(be, (size_t)s.S * H * 4);
    void *wpe = dev(be, (size_t)s.S * H * e), *bias = dev(be, (size_t)4 * H * e);
    void *logits = dev(be, (size_t)N * V * e),
         *saved = dev(be, be->attention_saved_bytes(be, s.B, s.S, s.nh, hd));
    float *stats = dev(be, (size_t)N * 4 * 2), *losses = dev(be, (size_t)N * 4),
          *dloss = dev(be, (size_t)N * 4);
    int32_t *tok = dev(be, (size_t)N * 4);
    float *p32 = dev(be, nparams * 4), *m = dev(be, nparams * 4), *v = dev(be, nparams * 4),
          *g = dev(be, nparams * 4), *one = dev(be, 4), *sq = dev(be, 4), *rates = dev(be, 16);
    void *pbf = dev(be, nparams * e);
    const float hostone = 1.0f, hostrates[4] = {1e-4f, 0.1f, 0.5f, 0.5f}; /* lr, wd, bc1, bc2 */
    be->copy_h2d(be, one, &hostone, 4);
    be->copy_h2d(be, rates, hostrates, 16);
    const mg_adamw_span all = {0, 0, 0, nparams, 0, 1};
    /* activations and weights ~ unit scale, gradients and moments small, v >= 0 */
    void *acts[] = {x, y, x2, qkv, dqkv, h4, dh4, logits};
    size_t act_n[] = {(size_t)N * H,     (size_t)N * H,     (size_t)N * H,     (size_t)N * 3 * H,
                      (size_t)N * 3 * H, (size_t)N * 4 * H, (size_t)N * 4 * H, (size_t)N * V};
    for (int i = 0; i < 8; i++) fill(be, acts[i], act_n[i], 0, -1.0f, 1.0f, 100 + i);
    fill(be, w, (size_t)4 * H * H, 0, -0.05f, 0.05f, 110);
    fill(be, wte, (size_t)V * H, 0, -0.05f, 0.05f, 111);
    fill(be, wpe, (size_t)s.S * H, 0, -0.05f, 0.05f, 112);
    fill(be, bias, (size_t)4 * H, 0, -0.05f, 0.05f, 113);
    fill(be, p32, nparams, 1, -0.05f, 0.05f, 114);
    fill(be, g, nparams, 1, -1e-3f, 1e-3f, 115);
    fill(be, m, nparams, 1, -1e-4f, 1e-4f, 116);
    fill(be, v, nparams, 1, 0.0f, 1e-6f, 117);
    fill(be, dloss, (size_t)N, 1, 1.0f / N, 1.0f / N, 118);
    {
        int32_t *ht = malloc((size_t)N * sizeof *ht);
        for (int i = 0; ht && i < N; i++) ht[i] = (int32_t)(mg_rng_uniform(119, 0, i) * V) % V;
        if (!ht || be->copy_h2d(be, tok, ht, (size_t)N * sizeof *ht) != MG_OK) {
            fprintf(stderr, "op_bench: cannot upload the tokens\n");
            return 1;
        }
        free(ht);
    }
    double fam[F_N] = {0};
    /* unset: the backend's default (cuDNN when the build has it, else ours; its log line says) */
    const char *attn = mg_env_str("MG_ATTENTION", "default");
    printf("op_bench: %s, GPT-2 %dx%d, heads %d, batch %d x seq %d, vocab %d, %zu parameters, "
           "attention %s\n",
           be->name, L, H, s.nh, s.B, s.S, V, nparams, attn);
    OP("attention_forward", F_ATTN, L,
       be->attention_forward(be, y, saved, qkv, s.B, s.S, s.nh, s.nh, hd, NULL, NULL));
    OP("attention_backward", F_ATTN, L,
       be->attention_backward(be, dqkv, x, qkv, y, saved, s.B, s.S, s.nh, s.nh, hd, NULL, NULL));
    OP("linear qkv fwd", F_GEMM, L, be->linear_forward(be, qkv, x, w, bias, NULL, N, H, 3 * H));
    OP("linear qkv bwd", F_GEMM, L,
       be->linear_backward(be, y, dw, db, dqkv, x, w, NULL, N, H, 3 * H));
    /* the residual add rides in the proj and fc2 products (model/attention.c, mlp.c) */
    OP("linear proj fwd (+res)", F_GEMM, L, be->linear_forward(be, y, x, w, bias, x2, N, H, H));
    OP("linear proj bwd", F_GEMM, L, be->linear_backward(be, y, dw, db, x, x, w, NULL, N, H, H));
    /* GELU MLP: fc1 + GELU is one call, and so are fc2's input gradient + GELU's gradient */
    OP("linear fc1+gelu fwd", F_GEMM, L,
       be->linear_gelu_forward(be, dh4, h4, x, w, bias, N, H, 4 * H));
    OP("linear fc1 bwd", F_GEMM, L,
       be->linear_backward(be, y, dw, db, dh4, x, w, NULL, N, H, 4 * H));
    OP("linear fc2 fwd (+res)", F_GEMM, L, be->linear_forward(be, y, h4, w, bias, x2, N, 4 * H, H));
    OP("linear fc2+dgelu bwd", F_GEMM, L,
       be->linear_backward(be, dh4, dw, db, y, h4, w, h4, N, 4 * H, H));
    OP("lm head fwd", F_HEAD, 1, be->linear_forward(be, logits, x, wte, NULL, NULL, N, H, V));
    OP("cross_entropy_fused", F_HEAD, 1,
       be->cross_entropy_fused(be, logits, losses, tok, dloss, N, V));
    OP("lm head bwd", F_HEAD, 1,
       be->linear_backward(be, y, dwte, NULL, logits, x, wte, NULL, N, H, V));
    OP("layernorm fwd", F_NORM, 2 * L + 1,
       be->layernorm_forward(be, y, stats, stats + N, x, bias, bias, N, H, 1e-5f));
    OP("layernorm bwd", F_NORM, 2 * L + 1,
       be->layernorm_backward(be, y, dw, db, x, x, bias, stats, stats + N, N, H));
    OP("embedding fwd", F_EMB, 1,
       be->embedding_forward(be, x, tok, wte, wpe, NULL, N, s.S, H, 0, V));
    OP("embedding bwd", F_EMB, 1,
       be->embedding_backward(be, dwte, dwpe, x, tok, NULL, N, s.S, H, 0, V));
    OP("sumsq (grad norm)", F_OPT, 1, be->sumsq_f32(be, sq, g, nparams, NULL));
    OP("adamw", F_OPT, 1,
       be->adamw(be, pbf, p32, g, m, v, &all, 1, rates, rates + 2, 0.9f, 0.95f, 1e-8f, one));
    double total = 0;
    for (int f = 0; f < F_N; f++) total += fam[f];
    printf("\nper step, op by op (no launch gaps): %.1f ms\n", total);
    for (int f = 0; f < F_N; f++) {
        printf("  %-26s %8.2f ms  %5.1f%%\n", fam_name[f], fam[f], 100 * fam[f] / total);
        printf("{\"bench\":\"op\",\"device\":\"%s\",\"attention\":\"%s\",\"layers\":%d,"
               "\"hidden\":%d,\"batch\":%d,\"seq\":%d,\"family\":\"%s\",\"ms_per_step\":%.3f,"
               "\"share\":%.4f}\n",
               be->name, attn, L, H, s.B, s.S, fam_name[f], fam[f], fam[f] / total);
    }
    be->destroy(be);
    return 0;
}
