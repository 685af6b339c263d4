/* --apply-layernorm-1p (Megatron's layernorm_zero_centered_gamma) through the trainer on the CPU
 * backend, LayerNorm (GPT-2 style) and RMSNorm (Llama style, with --rotary-percent 0.5):
 *  - initialisation: every stored norm weight is 0 (the norms start as the plain model's, whose
 *    weights are 1), every other parameter is the plain model's;
 *  - the invariant: with stored norm weights w the model is the plain model whose norm weights
 *    are 1 + w: the same loss and the same gradient for every parameter, bit for bit (the norm
 *    op sees the same weight values: 1 + w formed in fp32 either way, and d(1 + w)/dw = 1);
 *  - training: a step with weight decay moves both the same way (norm weights take no weight
 *    decay in Megatron, zero-centred or not), so after it the stored w' is still the plain
 *    weight minus 1, to fp32 rounding;
 *  - the layer-norm weights' metadata stays 1-D without weight decay;
 *  - the Hugging Face export writes 1 + w (what transformers' norms multiply by) and the import
 *    subtracts 1 again. */
#include "test.h"

#include "config_test_util.h"

#include "core/rng.h"
#include "convert/hf_names.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mg_status onep_config(mg_config *c, bool llama, bool onep) {
    char flags[1024];
    snprintf(flags, sizeof flags,
             "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
             "--vocab-size 64 --mock-data --micro-batch-size 2 --global-batch-size 4 "
             "--train-iters 4 --lr 3e-3 --weight-decay 0.1 --num-threads 2 --device cpu "
             "--attention-dropout 0 --hidden-dropout 0 %s %s",
             llama ? "--normalization RMSNorm --swiglu --position-embedding-type rope "
                     "--rotary-percent 0.5 --group-query-attention --num-query-groups 2 "
                     "--disable-bias-linear --untie-embeddings-and-output-weights"
                   : "",
             onep ? "--apply-layernorm-1p" : "");
    return mg_test_config(c, flags, NULL);
}

/* Is parameter i a norm's weight (the ones 1p re-centres)? */
static bool norm_weight(const mg_gpt *g, int i) {
    if (i == g->lnf_w) return true;
    for (int l = 0; l < g->n_layers; l++)
        if (i == g->layers[l].ln1_w || i == g->layers[l].ln2_w) return true;
    return false;
}

static double loss_and_grads(mg_test_ctx *t, mg_trainer *tr, float *grad) {
    mg_backend *be = tr->be;
    size_t n = tr->model.params.numel;
    MG_EXPECT_OK(be->memset_zero(be, tr->mem.grads, n * sizeof(float)));
    MG_EXPECT_OK(mg_trainer_forward_backward(tr, &tr->data.train_src, 0, true));
    float loss = NAN;
    MG_EXPECT_OK(be->copy_d2h(be, &loss, tr->mem.loss, sizeof loss));
    MG_EXPECT_OK(be->copy_d2h(be, grad, tr->mem.grads, n * sizeof(float)));
    return loss;
}

static void check_onep(mg_test_ctx *t, bool llama) {
    const char *kind = llama ? "RMSNorm" : "LayerNorm";
    mg_config ca, cb;
    MG_EXPECT_OK(onep_config(&ca, llama, true));
    MG_EXPECT_OK(onep_config(&cb, llama, false));
    if (t->failures) return;
    mg_trainer *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    MG_EXPECT_OK(mg_trainer_init(a, &ca, NULL));
    MG_EXPECT_OK(mg_trainer_init(b, &cb, NULL));
    if (t->failures) goto out;
    const mg_param_table *pa = &a->model.params, *pb = &b->model.params;
    MG_EXPECT(pa->n == pb->n && pa->numel == pb->numel, "%s: the parameter tables differ", kind);
    if (t->failures) goto out;
    size_t n = pa->numel;
    float *wa = calloc(n, sizeof *wa), *wb = calloc(n, sizeof *wb);
    float *ga = calloc(n, sizeof *ga), *gb = calloc(n, sizeof *gb);
    MG_EXPECT_OK(mg_trainer_get_weights(a, wa));
    MG_EXPECT_OK(mg_trainer_get_weights(b, wb));
    /* initialisation: zeros where the plain model has ones, the rest identical */
    int norms = 0, wrong = 0, other = 0;
    for (int i = 0; i < pa->n; i++) {
        const mg_param_meta *m = &pa->p[i], *mb = &pb->p[mg_params_find(pb, m->name)];
        bool nw = norm_weight(&a->model, i);
        norms += nw;
        if (nw)
            MG_EXPECT(m->ndim == 1 && !m->weight_decay, "%s: weight decay on %s", kind, m->name);
        for (int64_t j = 0; j < m->numel; j++) {
            float x = wa[m->offset + j], y = wb[mb->offset + j];
            if (nw)
                wrong += x != 0.0f || y != 1.0f;
            else
                other += memcmp(&x, &y, sizeof x) != 0;
        }
    }
    MG_EXPECT(norms == 2 * 2 + 1, "%s: %d norm weights, want 5", kind, norms);
    MG_EXPECT(wrong == 0, "%s: %d norm weight elements not initialised to 0 (1p) and 1 (plain)",
              kind, wrong);
    MG_EXPECT(other == 0, "%s: %d other elements differ between the models", kind, other);
    /* the invariant at random norm weights: stored w against plain 1 + w */
    for (int i = 0; i < pa->n; i++) {
        if (!norm_weight(&a->model, i)) continue;
        const mg_param_meta *m = &pa->p[i], *mb = &pb->p[mg_params_find(pb, m->name)];
        for (int64_t j = 0; j < m->numel; j++) {
            float w = 0.3f * mg_rng_normal(77, (uint32_t)i, (uint64_t)j);
            wa[m->offset + j] = w;
            wb[mb->offset + j] = 1.0f + w;
        }
    }
    MG_EXPECT_OK(mg_trainer_set_weights(a, wa));
    MG_EXPECT_OK(mg_trainer_set_weights(b, wb));
    float *w0 = malloc(n * sizeof *w0);
    memcpy(w0, wa, n * sizeof *w0);
    double la = loss_and_grads(t, a, ga), lb = loss_and_grads(t, b, gb);
    MG_EXPECT(la == lb && isfinite(la), "%s: loss %.9g with 1p, %.9g plain", kind, la, lb);
    int differ = 0, nonzero = 0;
    for (int i = 0; i < pa->n; i++) {
        const mg_param_meta *m = &pa->p[i], *mb = &pb->p[mg_params_find(pb, m->name)];
        for (int64_t j = 0; j < m->numel; j++) {
            differ += memcmp(&ga[m->offset + j], &gb[mb->offset + j], sizeof(float)) != 0;
            nonzero += norm_weight(&a->model, i) && ga[m->offset + j] != 0.0f;
        }
    }
    MG_EXPECT(differ == 0, "%s: %d gradient elements differ between 1p and plain", kind, differ);
    MG_EXPECT(nonzero > 100, "%s: only %d nonzero norm weight gradients", kind, nonzero);
    /* a training step (AdamW, weight decay 0.1 on the matrices) keeps w' = plain' - 1 */
    double sla, slb, na, nb;
    MG_EXPECT_OK(mg_trainer_step(a, &sla, &na));
    MG_EXPECT_OK(mg_trainer_step(b, &slb, &nb));
    MG_EXPECT(sla == slb && na == nb, "%s: step loss %.9g / %.9g, grad norm %.9g / %.9g", kind, sla,
              slb, na, nb);
    MG_EXPECT_OK(mg_trainer_step(a, &sla, &na));
    MG_EXPECT_OK(mg_trainer_step(b, &slb, &nb));
    MG_EXPECT(fabs(sla - slb) <= 1e-6 * fabs(slb), "%s: second step loss %.9g with 1p, %.9g plain",
              kind, sla, slb);
    MG_EXPECT_OK(mg_trainer_get_weights(a, wa));
    MG_EXPECT_OK(mg_trainer_get_weights(b, wb));
    double worst = 0, moved = 0;
    for (int i = 0; i < pa->n; i++) {
        const mg_param_meta *m = &pa->p[i], *mb = &pb->p[mg_params_find(pb, m->name)];
        double off = norm_weight(&a->model, i) ? 1.0 : 0.0;
        for (int64_t j = 0; j < m->numel; j++) {
            double d = fabs((double)wa[m->offset + j] + off - wb[mb->offset + j]);
            worst = fmax(worst, d);
            if (off) moved = fmax(moved, fabs(wa[m->offset + j] - w0[m->offset + j]));
        }
    }
    MG_EXPECT(worst < 1e-6,
              "%s: after 2 steps the 1p weights (+1 for norms) differ from the "
              "plain ones by %g",
              kind, worst);
    MG_EXPECT(moved > 1e-3, "%s: norm weights did not train (max change %g)", kind, moved);
    free(w0), free(wa), free(wb), free(ga), free(gb);
out:
    mg_trainer_free(a);
    mg_trainer_free(b);
    free(a), free(b);
}

MG_TEST(layernorm_1p_equals_plain_norm_of_one_plus_w) {
    check_onep(t, false);
    check_onep(t, true);
}

/* The Hugging Face mapping of a 1p model: every norm weight is written as 1 + w (ln_1, ln_2,
 * ln_f for GPT-2; input_layernorm, post_attention_layernorm, model.norm for Llama), norm biases
 * and every other tensor as they are; reading the file back gives w again (the values are
 * multiples of 2^-10, so w + 1 - 1 is exact). */
MG_TEST(layernorm_1p_hf_export_writes_one_plus_w) {
    for (int llama = 0; llama < 2; llama++) {
        mg_config c1, c0;
        MG_EXPECT_OK(onep_config(&c1, llama, true));
        MG_EXPECT_OK(onep_config(&c0, llama, false));
        mg_gpt g1, g0;
        MG_EXPECT_OK(mg_gpt_build(&g1, &c1, 0, 0, 0));
        MG_EXPECT_OK(mg_gpt_build(&g0, &c0, 0, 0, 0));
        if (t->failures) return;
        size_t n = g1.params.numel;
        float *a = calloc(n, sizeof *a), *back = calloc(n, sizeof *back);
        for (int i = 0; i < g1.params.n; i++)
            for (int64_t j = 0; j < g1.params.p[i].numel; j++)
                a[g1.params.p[i].offset + j] = (float)((i * 37 + j) % 257 - 128) / 1024.0f;
        mg_hf_export_set s1, s0;
        MG_EXPECT_OK(mg_hf_export(&g1, a, &s1));
        MG_EXPECT_OK(mg_hf_export(&g0, a, &s0)); /* the same layout: the plain model's export */
        MG_EXPECT(s1.n == s0.n, "%d tensors with 1p, %d plain", s1.n, s0.n);
        int norms = 0, bad = 0;
        for (int k = 0; k < s1.n && k < s0.n; k++) {
            const mg_st_tensor *x = &s1.tensors[k], *y = &s0.tensors[k];
            const char *nm = x->name;
            bool nw = strstr(nm, "norm.weight") || strstr(nm, "ln_1.weight") ||
                      strstr(nm, "ln_2.weight") || strstr(nm, "ln_f.weight");
            norms += nw;
            int64_t numel = x->shape[0] * (x->ndim == 2 ? x->shape[1] : 1);
            for (int64_t j = 0; j < numel; j++)
                bad += ((const float *)x->data)[j] != ((const float *)y->data)[j] + (nw ? 1 : 0);
        }
        MG_EXPECT(norms == 5, "%s: %d norm weights exported, want 5", llama ? "llama" : "gpt2",
                  norms);
        MG_EXPECT(bad == 0, "%s: %d exported elements are not the plain ones (+1 for norm weights)",
                  llama ? "llama" : "gpt2", bad);
        char path[64];
        snprintf(path, sizeof path, "/tmp/mg_test_1p_%d_%d.safetensors", (int)getpid(), llama);
        MG_EXPECT_OK(mg_safetensors_write(path, s1.tensors, s1.n, NULL));
        mg_safetensors st;
        MG_EXPECT_OK(mg_safetensors_open(&st, path));
        MG_EXPECT_OK(mg_hf_import(&g1, &st, path, back));
        MG_EXPECT(memcmp(a, back, n * sizeof *a) == 0, "%s: export then import is not the identity",
                  llama ? "llama" : "gpt2");
        mg_safetensors_close(&st);
        unlink(path);
        mg_hf_export_free(&s1);
        mg_hf_export_free(&s0);
        free(a), free(back);
        mg_gpt_free(&g1);
        mg_gpt_free(&g0);
    }
}
