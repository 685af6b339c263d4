/* Pipeline stages on the CUDA backend against the whole model on the CPU backend, without NCCL:
 * the model is built as the 2 stages of --pipeline-model-parallel-size 2 (and as the 2 x 2 model
 * chunks of --virtual-pipeline-model-parallel-size 2) in one process, and one microbatch runs
 * through them by hand, as the executor would (parallel/pipeline/run.c: forward of each chunk in
 * stage order, the hidden state copied from one chunk's output to the next chunk's input; the
 * head and loss in the last chunk's backward; then the backwards in reverse order, d(input)
 * copied to the previous chunk's d(output)). The same microbatch goes through the whole model
 * (P = 1) on the CPU backend. Checked: the loss, and every parameter's gradient by name; a tied
 * embedding's gradient is the first stage's plus the last stage's copy (what the embedding
 * group's all-reduce makes).
 *
 * GPT-2 style (tied embeddings, learned positions, biases) and Llama style (untied, RoPE, GQA,
 * SwiGLU), 4 layers, hidden 64, micro-batch 2 of 32 tokens, vocabulary 256. Tolerances: the loss
 * as test_cuda_train.c's first step (relative 1e-2: a mean over 64 tokens of a bf16-rounded
 * chain); each gradient's normalised error max|got - ref| / max|ref| within 5e-2 (the bf16 chain
 * of its backward path: the op tests bound each op at 1e-2 .. 2e-2, and a parameter's gradient
 * passes through the layers above it; a wrong chunk boundary, a missing copy or a gradient on
 * the wrong stage is O(1)). With MG_TEST_CUDA_AS_CPU=1 the stages run on a second CPU backend and
 * must agree to 1e-5 (fp32; only summation orders may differ). */
#include "cuda_test_util.h"

#include "model/gpt.h"

#include <math.h>
#include <stdio.h>

enum { MB = 2, SEQ = 32, VOCAB = 256 };

static mg_status stage_config(mg_config *c, bool llama, int pp, int vpp) {
    char spp[8], svpp[8];
    snprintf(spp, sizeof spp, "%d", pp);
    snprintf(svpp, sizeof svpp, "%d", vpp);
    const char *extra[] = {"--num-layers",
                           "4",
                           "--global-batch-size",
                           "8",
                           "--lr",
                           "1e-3",
                           "--train-iters",
                           "1",
                           "--seed",
                           "11",
                           "--pipeline-model-parallel-size",
                           spp,
                           vpp > 1 ? "--virtual-pipeline-model-parallel-size" : NULL,
                           svpp,
                           NULL};
    return ct_tiny_config(c, "cpu", llama, extra);
}

/* One stage (or the whole model) on a backend: its model, arenas, weights and gradients. */
typedef struct {
    mg_gpt g;
    mg_backend *be;
    mg_allocator alloc;
    mg_arena acts, work;
    void *params;
    float *grads;
} stage;

static mg_status stage_open(stage *s, mg_backend *be, const mg_config *c, int pp_rank) {
    memset(s, 0, sizeof *s);
    s->be = be;
    const mg_allocator *a = mg_backend_arena_allocator(be, &s->alloc);
    mg_arena_init(&s->acts, "activations");
    mg_arena_init(&s->work, "workspace");
    MG_CHECK(mg_gpt_build(&s->g, c, 0, pp_rank, 0));
    /* a slot per model chunk: each holds its own forward's activations until its backward */
    int slots =
        c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
    MG_CHECK(mg_gpt_plan(&s->g, mg_gpt_target_of(&s->g, be, c->micro_batch_size),
                         c->micro_batch_size, slots, &s->acts, &s->work));
    MG_CHECK(mg_arena_commit(&s->acts, a));
    MG_CHECK(mg_arena_commit(&s->work, a));
    size_t n = s->g.params.numel;
    MG_CHECK(be->alloc(be, n * mg_dtype_size(be->compute_dtype), &s->params));
    MG_CHECK(be->alloc(be, n * sizeof(float), (void **)&s->grads));
    float *host = malloc(n * sizeof *host);
    if (!host) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    mg_params_init(&s->g.params, (uint64_t)c->seed, host); /* keyed by global names */
    mg_status st = be->upload_f32(be, s->params, host, n);
    free(host);
    MG_CHECK(st);
    return mg_gpt_bind(&s->g, be, s->params, s->grads, NULL);
}

static void stage_close(stage *s) {
    if (s->be) {
        if (s->params) s->be->free(s->be, s->params);
        if (s->grads) s->be->free(s->be, s->grads);
    }
    mg_arena_free(&s->acts);
    mg_arena_free(&s->work);
    mg_gpt_free(&s->g);
}

/* max|got - ref| / max|ref|; infinite where got is not finite. */
static double norm_err(const float *got, const float *ref, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double e = fabs((double)got[i] - ref[i]);
        d = e > d ? e : d;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    return m > 0 ? d / m : d;
}

/* The gradient of parameter `name` on host (fp32), summed over the stages that hold it (a tied
 * embedding's copy on the last stage included); false when no stage has it. */
static bool stage_grad(stage *st, int n, const char *name, const char *copy_of, float *out,
                       int64_t numel) {
    bool found = false;
    memset(out, 0, (size_t)numel * sizeof *out);
    float *tmp = malloc((size_t)numel * sizeof *tmp);
    for (int s = 0; s < n && tmp; s++) {
        const mg_param_table *pt = &st[s].g.params;
        for (int i = 0; i < pt->n; i++) {
            const mg_param_meta *m = &pt->p[i];
            bool match = !strcmp(m->name, name) || (copy_of && m->shared && !strcmp(copy_of, name));
            if (!match || m->numel != numel) continue;
            if (st[s].be->copy_d2h(st[s].be, tmp, mg_gpt_grad(&st[s].g, i),
                                   (size_t)numel * sizeof *tmp) != MG_OK)
                continue;
            for (int64_t k = 0; k < numel; k++) out[k] += tmp[k];
            found = true;
        }
    }
    free(tmp);
    return found;
}

static void check_chain(mg_test_ctx *t, bool llama, int vpp) {
    mg_backend *cpu = ct_cpu(t), *gpu = ct_gpu(t);
    if (!cpu || !gpu) return;
    const char *name = llama ? "llama" : "gpt2";
    mg_config c1, c2;
    MG_EXPECT_OK(stage_config(&c1, llama, 1, 1));
    MG_EXPECT_OK(stage_config(&c2, llama, 2, vpp));
    if (t->failures) return;
    stage whole, st[2];
    memset(st, 0, sizeof st);
    size_t N = (size_t)MB * SEQ;
    int32_t tok_h[MB * SEQ], tgt_h[MB * SEQ];
    float dl_h[MB * SEQ];
    uint64_t r = CT_SEED;
    for (size_t i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok_h[i] = (int32_t)((r >> 33) % VOCAB);
        tgt_h[i] = (int32_t)((r >> 13) % VOCAB);
        dl_h[i] = 1.0f / (float)N;
    }
    /* the whole model on the cpu */
    MG_EXPECT_OK(stage_open(&whole, cpu, &c1, 0));
    float loss_ref = 0;
    MG_EXPECT_OK(mg_gpt_forward(&whole.g, cpu, tok_h));
    MG_EXPECT_OK(mg_gpt_loss(&whole.g, cpu, tgt_h, dl_h, NULL, &loss_ref, 1.0f));
    MG_EXPECT_OK(mg_gpt_backward(&whole.g, cpu, tok_h));
    /* the stages on the backend under test */
    void *dev = NULL;
    size_t io_bytes = N * 2 * sizeof(int32_t) + (N + 1) * sizeof(float);
    MG_EXPECT_OK(gpu->alloc(gpu, io_bytes, &dev));
    if (!dev) goto done;
    int32_t *tok = dev, *tgt = tok + N;
    float *dl = (float *)(tgt + N), *loss = dl + N;
    MG_EXPECT_OK(gpu->copy_h2d(gpu, tok, tok_h, N * sizeof(int32_t)));
    MG_EXPECT_OK(gpu->copy_h2d(gpu, tgt, tgt_h, N * sizeof(int32_t)));
    MG_EXPECT_OK(gpu->copy_h2d(gpu, dl, dl_h, N * sizeof(float)));
    for (int p = 0; p < 2; p++) MG_EXPECT_OK(stage_open(&st[p], gpu, &c2, p));
    if (t->failures) goto done;
    size_t bytes = mg_gpt_hidden_numel(&st[0].g) * mg_dtype_size(gpu->compute_dtype);
    /* virtual stages in order: chunk c of rank p is virtual stage c*2 + p */
    for (int v = 0; v < 2 * vpp; v++) {
        stage *s = &st[v % 2];
        int c = v / 2;
        if (v > 0) {
            stage *prev = &st[(v - 1) % 2];
            MG_EXPECT_OK(gpu->copy_d2d(gpu, mg_gpt_chunk_input(&s->g, c, c),
                                       mg_gpt_chunk_output(&prev->g, (v - 1) / 2, (v - 1) / 2),
                                       bytes));
        }
        MG_EXPECT_OK(mg_gpt_chunk_forward(&s->g, gpu, c, c, v == 0 ? tok : NULL));
    }
    for (int v = 2 * vpp - 1; v >= 0; v--) {
        stage *s = &st[v % 2];
        int c = v / 2;
        if (v == 2 * vpp - 1) {
            MG_EXPECT_OK(gpu->memset_zero(gpu, loss, sizeof(float)));
            MG_EXPECT_OK(mg_gpt_head_loss(&s->g, gpu, c, tgt, dl, NULL, loss, 1.0f));
        } else {
            stage *next = &st[(v + 1) % 2];
            MG_EXPECT_OK(
                gpu->copy_d2d(gpu, mg_gpt_chunk_dout(&s->g), mg_gpt_chunk_dinput(&next->g), bytes));
        }
        MG_EXPECT_OK(mg_gpt_chunk_backward(&s->g, gpu, c, c, v == 0 ? tok : NULL));
    }
    float loss_got = 0;
    MG_EXPECT_OK(gpu->copy_d2h(gpu, &loss_got, loss, sizeof loss_got));
    double tol = ct_as_cpu() ? 1e-5 : 5e-2;
    double el = fabs(loss_got - loss_ref) / fabs(loss_ref);
    MG_EXPECT(isfinite(loss_got) && el <= (ct_as_cpu() ? 1e-5 : 1e-2),
              "%s P 2 x V %d: loss %.6f through the stages, %.6f whole (relative %.2e)", name, vpp,
              loss_got, loss_ref, el);
    /* every gradient of the whole model, from the stage(s) holding it */
    const mg_param_table *wt = &whole.g.params;
    const char *wte = wt->p[whole.g.wte].name;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < wt->n; i++) {
        const mg_param_meta *m = &wt->p[i];
        float *ref = mg_gpt_grad(&whole.g, i), *got = malloc((size_t)m->numel * sizeof *got);
        bool tied = i == whole.g.wte && whole.g.out_w == whole.g.wte;
        bool found = got && stage_grad(st, 2, m->name, tied ? wte : NULL, got, m->numel);
        MG_EXPECT(found, "%s P 2 x V %d: no stage holds %s", name, vpp, m->name);
        double e = found ? norm_err(got, ref, (size_t)m->numel) : 0;
        if (e > worst || isnan(e)) worst = e, worst_name = m->name;
        free(got);
    }
    if (ct_verbose())
        printf("  %s P 2 x V %d: loss %.6f / %.6f, worst gradient error %.2e (%s)\n", name, vpp,
               loss_got, loss_ref, worst, worst_name);
    MG_EXPECT(worst <= tol, "%s P 2 x V %d: gradient of %s off by %.3g (normalised, > %.0e)", name,
              vpp, worst_name, worst, tol);
done:
    if (dev) gpu->free(gpu, dev);
    for (int p = 0; p < 2; p++) stage_close(&st[p]);
    stage_close(&whole);
}

MG_TEST(cuda_pipeline_stages_match_the_whole_model) {
    check_chain(t, false, 1);
    check_chain(t, true, 1);
    check_chain(t, false, 2);
    check_chain(t, true, 2);
}
