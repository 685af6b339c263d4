/* The C model against Hugging Face transformers (tests/golden/, written by
 * tools/reference/make_golden.py): the same weights loaded from safetensors must give the same
 * logits and loss (relative error <= 1e-5), the same gradient for every parameter (<= 1e-4), and,
 * after 3 AdamW steps with clipping and a warm-up + cosine schedule, the same parameters (<= 1e-5).
 * Tolerances: fp32 on both sides with different summation orders; logits and the loss accumulate
 * ~1e-7 relative rounding per op over a few dozen ops; gradients pass through twice as many. */
#include "test.h"

#include "core/file.h"
#include "config/flags.h"
#include "golden_io.h"
#include "convert/hf_names.h"
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The golden model's Megatron flags (from <name>.json) parsed by the real flag parser. */
static mg_status golden_config(const char *name, mg_config *c) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, MG_GOLDEN_DIR "/%s.json", name);
    MG_CHECK(mg_file_read(path, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
    if (!cJSON_IsArray(args)) {
        cJSON_Delete(root);
        return MG_FAIL(MG_ERR_FORMAT, "%s: no args array", path);
    }
    char *argv[128];
    int argc = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, args) if (argc < 120) argv[argc++] = a->valuestring;
    /* the fp32 CPU backend: the tolerances below are fp32's (tests/cuda compares CUDA to CPU);
     * no dropout: the reference runs in eval mode (Megatron's default 0.1 would drop) */
    char extra[][24] = {"--mock-data", "--eval-iters",     "0",   "--num-threads",
                        "2",           "--device",         "cpu", "--attention-dropout",
                        "0",           "--hidden-dropout", "0"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) argv[argc++] = extra[i];
    bool help = false;
    mg_config_defaults(c);
    mg_status st = mg_flags_parse(c, argc, argv, &help);
    if (st == MG_OK) st = mg_config_validate(c);
    cJSON_Delete(root);
    return st;
}

typedef struct {
    const int32_t *tokens, *targets; /* (nseq, S) */
    int nseq, S;
} golden_batch;

static mg_status golden_source(void *ctx, int64_t index, int32_t *tokens, int32_t *targets) {
    const golden_batch *b = ctx;
    size_t row = (size_t)(index % b->nseq) * (size_t)b->S;
    memcpy(tokens, b->tokens + row, (size_t)b->S * sizeof *tokens);
    memcpy(targets, b->targets + row, (size_t)b->S * sizeof *targets);
    return MG_OK;
}

/* Every HF-named tensor of `buf` (parameter layout) against golden records "<prefix><name>". */
static void compare_named(mg_test_ctx *t, const mg_gpt *g, const float *buf, const mg_golden *gold,
                          const char *prefix, double tol, double *worst) {
    mg_hf_export_set set;
    MG_EXPECT_OK(mg_hf_export(g, buf, &set));
    for (int i = 0; i < set.n; i++) {
        char name[200];
        snprintf(name, sizeof name, "%s%s", prefix, set.tensors[i].name);
        const mg_golden_record *r = mg_golden_find(gold, name);
        MG_EXPECT(r != NULL, "golden record %s missing", name);
        if (!r) continue;
        int64_t n =
            set.tensors[i].shape[0] * (set.tensors[i].ndim == 2 ? set.tensors[i].shape[1] : 1);
        MG_EXPECT(n == r->numel, "%s: %lld elements, golden has %lld", name, (long long)n,
                  (long long)r->numel);
        if (n != r->numel) continue;
        double err = mg_test_rel_err(set.tensors[i].data, r->data, (size_t)n);
        if (err > *worst) *worst = err;
        MG_EXPECT(err <= tol, "%s: relative error %.3g > %.0e", name, err, tol);
    }
    mg_hf_export_free(&set);
}

/* The global layer number of MoE layer `index` of a whole model. */
static int moe_layer(const mg_gpt *g, int index) {
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].moe && g->layers[l].moe->index == index) return l;
    return -1;
}

/* The expert bias of every MoE layer from the reference's weights (its "e_score_correction_bias"
 * tensors), where the model has one. */
static void load_expert_bias(mg_test_ctx *t, mg_trainer *tr, const mg_safetensors *sf) {
    mg_gpt *g = &tr->model;
    for (int i = 0; g->cfg.moe.expert_bias && i < g->n_moe; i++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias",
                 moe_layer(g, i));
        const mg_st_entry *e = mg_safetensors_find(sf, name);
        MG_EXPECT(e && e->dtype == MG_F32 && e->shape[0] == g->cfg.moe.E, "%s missing", name);
        if (e)
            MG_EXPECT_OK(tr->be->copy_h2d(tr->be, mg_gpt_moe_bias(g, i), e->data,
                                          (size_t)g->cfg.moe.E * sizeof(float)));
    }
}

/* A golden vector of E values against backend memory (fp32), relative to its largest value. */
static void compare_vector(mg_test_ctx *t, mg_trainer *tr, const mg_golden *gold, const char *rec,
                           const float *dev, int n, double tol) {
    const mg_golden_record *r = mg_golden_find(gold, rec);
    MG_EXPECT(r && r->numel == n, "golden record %s missing or not %d values", rec, n);
    if (!r || r->numel != n) return;
    float h[1024];
    MG_EXPECT_OK(tr->be->copy_d2h(tr->be, h, dev, (size_t)n * sizeof *h));
    double err = mg_test_rel_err(h, r->data, (size_t)n);
    MG_EXPECT(err <= tol, "%s: relative error %.3g > %.0e", rec, err, tol);
}

/* MoE models after the first forward-backward: the logged aux loss and z-loss, and every MoE
 * layer's tokens per expert (integers: exact). */
static void check_moe_stats(mg_test_ctx *t, mg_trainer *tr, const mg_golden *gold) {
    mg_gpt *g = &tr->model;
    if (g->n_moe == 0) return;
    const char *rec[2] = {"aux_loss", "z_loss"};
    for (int k = 0; k < 2; k++)
        if (mg_golden_find(gold, rec[k]))
            compare_vector(t, tr, gold, rec[k], &tr->mem.stats[MG_STAT_MOE_AUX + k], 1, 1e-5);
    for (int i = 0; i < g->n_moe; i++) {
        char name[64];
        snprintf(name, sizeof name, "tokens_per_expert.%d", moe_layer(g, i));
        compare_vector(t, tr, gold, name, mg_gpt_moe_load(g, i), g->cfg.moe.E, 0);
    }
}

/* NaN in every expert gradient: a training step does not zero them but has each MoE layer's
 * first backward write them over (mg_gpt_expert_grads_unwritten), so any element it missed would
 * turn the step's gradient norm into NaN. */
static void poison_expert_grads(mg_test_ctx *t, mg_trainer *tr) {
    const mg_param_table *pt = &tr->model.params;
    for (int i = 0; i < pt->n; i++) {
        if (!pt->p[i].expert) continue;
        size_t n = (size_t)pt->p[i].numel;
        float *nan_buf = malloc(n * sizeof *nan_buf);
        for (size_t j = 0; nan_buf && j < n; j++) nan_buf[j] = NAN;
        MG_EXPECT(nan_buf != NULL, "out of memory");
        if (nan_buf)
            MG_EXPECT_OK(
                tr->be->copy_h2d(tr->be, mg_gpt_grad(&tr->model, i), nan_buf, n * sizeof *nan_buf));
        free(nan_buf);
    }
}

static void check_golden_model(mg_test_ctx *t, const char *name) {
    mg_config cfg;
    MG_EXPECT_OK(golden_config(name, &cfg));
    if (t->failures) return;
    char path[256];
    mg_golden gold;
    snprintf(path, sizeof path, MG_GOLDEN_DIR "/%s.golden", name);
    MG_EXPECT_OK(mg_golden_load(&gold, path));
    if (t->failures) return;
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &cfg, NULL));
    mg_gpt *g = &tr->model;
    mg_backend *be = tr->be;
    size_t numel = g->params.numel;
    float *host = calloc(numel, sizeof *host);

    /* the reference's initial weights, through the Hugging Face name mapping */
    mg_safetensors sf;
    snprintf(path, sizeof path, MG_GOLDEN_DIR "/%s.safetensors", name);
    MG_EXPECT_OK(mg_safetensors_open(&sf, path));
    MG_EXPECT_OK(mg_hf_import(g, &sf, path, host));
    load_expert_bias(t, tr, &sf);
    mg_safetensors_close(&sf);
    MG_EXPECT_OK(mg_trainer_set_weights(tr, host));

    const mg_golden_record *tok = mg_golden_find(&gold, "tokens");
    const mg_golden_record *tgt = mg_golden_find(&gold, "targets");
    const mg_golden_record *logits = mg_golden_find(&gold, "logits");
    const mg_golden_record *loss = mg_golden_find(&gold, "loss");
    MG_EXPECT(tok && tgt && logits && loss, "golden file lacks tokens/targets/logits/loss");
    if (t->failures) goto done;
    golden_batch batch = {tok->data, tgt->data, (int)tok->shape[0], (int)tok->shape[1]};
    MG_EXPECT(batch.S == cfg.seq_length && batch.nseq == cfg.global_batch_size,
              "golden batch shape (%d, %d) does not match the flags", batch.nseq, batch.S);
    mg_sample_source src = {golden_source, &batch};
    tr->data.train_src = src;

    /* logits, one microbatch at a time */
    int N = g->blk.N, V = g->cfg.V;
    float *lg = malloc((size_t)N * V * sizeof *lg);
    double worst_logits = 0;
    for (int mb = 0; mb < cfg.global_batch_size / cfg.micro_batch_size; mb++) {
        const int32_t *ids = batch.tokens + (size_t)mb * N;
        MG_EXPECT_OK(be->copy_h2d(be, tr->mem.tokens, ids, (size_t)N * sizeof *ids));
        MG_EXPECT_OK(mg_gpt_forward(g, be, tr->mem.tokens));
        MG_EXPECT_OK(be->download_f32(be, lg, mg_gpt_logits(g), (size_t)N * V));
        double err =
            mg_test_rel_err(lg, (const float *)logits->data + (size_t)mb * N * V, (size_t)N * V);
        if (err > worst_logits) worst_logits = err;
    }
    free(lg);
    MG_EXPECT(worst_logits <= 1e-5, "%s logits: relative error %.3g > 1e-5", name, worst_logits);

    /* loss and every gradient of the mean loss over the global batch (2 microbatches) */
    MG_EXPECT_OK(be->memset_zero(be, tr->mem.grads, numel * sizeof(float)));
    MG_EXPECT_OK(mg_trainer_forward_backward(tr, &src, 0, true));
    float l;
    MG_EXPECT_OK(be->copy_d2h(be, &l, tr->mem.loss, sizeof l));
    double want = ((const float *)loss->data)[0];
    MG_EXPECT(fabs(l - want) <= 1e-5 * fabs(want), "%s loss %.9g, reference %.9g", name, l, want);
    double worst_grad = 0;
    compare_named(t, g, tr->mem.grads, &gold, "grad.", 1e-4, &worst_grad);
    check_moe_stats(t, tr, &gold);

    /* three training iterations on the same batch */
    const mg_golden_record *sl = mg_golden_find(&gold, "step_loss");
    const mg_golden_record *sn = mg_golden_find(&gold, "step_grad_norm");
    const mg_golden_record *slr = mg_golden_find(&gold, "step_lr");
    MG_EXPECT(sl && sn && slr, "golden file lacks the step records");
    if (t->failures) goto done;
    for (int k = 0; k < 3; k++) {
        double lr = mg_lr_schedule_lr(&tr->lr), step_loss, norm;
        poison_expert_grads(t, tr);
        MG_EXPECT_OK(mg_trainer_step(tr, &step_loss, &norm));
        double wl = ((float *)sl->data)[k], wn = ((float *)sn->data)[k],
               wlr = ((float *)slr->data)[k];
        MG_EXPECT(fabs(step_loss - wl) <= 1e-5 * fabs(wl), "step %d loss %.9g, reference %.9g", k,
                  step_loss, wl);
        MG_EXPECT(fabs(norm - wn) <= 1e-4 * fabs(wn), "step %d grad norm %.9g, reference %.9g", k,
                  norm, wn);
        MG_EXPECT(fabs(lr - wlr) <= 1e-7 * fabs(wlr) + 1e-12, "step %d lr %.9g, reference %.9g", k,
                  lr, wlr);
    }
    MG_EXPECT_OK(mg_trainer_get_weights(tr, host));
    double worst_final = 0;
    compare_named(t, g, host, &gold, "final.", 1e-5, &worst_final);
    for (int i = 0; g->cfg.moe.expert_bias && i < g->n_moe; i++) { /* after 3 updates */
        char rec[128];
        snprintf(rec, sizeof rec,
                 "final.model.layers.%d.block_sparse_moe.gate.e_score_correction_bias",
                 moe_layer(g, i));
        compare_vector(t, tr, &gold, rec, mg_gpt_moe_bias(g, i), g->cfg.moe.E, 1e-6);
    }
    printf("  %s: logits %.2e, grads %.2e, params after 3 steps %.2e (max relative errors)\n", name,
           worst_logits, worst_grad, worst_final);
done:
    free(host);
    mg_trainer_free(tr);
    free(tr);
    mg_golden_free(&gold);
}

MG_TEST(golden_gpt2_matches_transformers) {
    check_golden_model(t, "gpt2");
}
MG_TEST(golden_llama_matches_transformers) {
    check_golden_model(t, "llama");
}
MG_TEST(golden_mixtral_matches_transformers) {
    check_golden_model(t, "mixtral");
}
MG_TEST(golden_moe_sigmoid_shared_matches_reference) {
    check_golden_model(t, "moe_sigmoid");
}
MG_TEST(golden_moe_capacity_matches_reference) {
    check_golden_model(t, "moe_capacity");
}
