/* The loss of a pass: the mask, each token's weight, the reported loss (train/trainer_loss.h). */
#include "train/trainer_loss.h"

#include "core/log.h"
#include "data/tokenizer.h"
#include "train/trainer_batch.h"

#include <stdlib.h>
#include <string.h>

mg_status mg_trainer_loss_eod(const mg_config *c, int32_t *eod) {
    return mg_trainer_eod_for(c, "--eod-mask-loss", eod);
}

mg_status mg_trainer_eod_for(const mg_config *c, const char *flag, int32_t *eod) {
    *eod = -1;
    const char *type = c->tokenizer_type;
    /* the mock documents end with vocab - 1 (data/mock.h), NullTokenizer's eod is vocab - 1 */
    if (!c->data_path[0] || !type[0] || !strcmp(type, "NullTokenizer")) {
        if (c->vocab_size < 2)
            return MG_FAIL(MG_ERR_USAGE,
                           "%s needs --vocab-size (its end-of-document id is vocab-size - 1)",
                           flag);
        *eod = c->vocab_size - 1;
        return MG_OK;
    }
    mg_tokenizer *tok;
    mg_tokenizer_spec spec = {.type = type,
                              .vocab_file = c->vocab_file,
                              .merge_file = c->merge_file,
                              .model = c->tokenizer_model};
    MG_CHECK(mg_tokenizer_load(&tok, &spec));
    *eod = mg_tokenizer_eod(tok);
    mg_tokenizer_free(tok);
    if (*eod < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s: the %s tokenizer has no end-of-document token; drop the flag or use "
                       "a tokenizer with one",
                       flag, type);
    return MG_OK;
}

mg_status mg_trainer_loss_init(mg_trainer *t) {
    t->eod_id = -1;
    if (!t->cfg.eod_mask_loss) return MG_OK;
    MG_CHECK(mg_trainer_loss_eod(&t->cfg, &t->eod_id));
    mg_log_info("> --eod-mask-loss: no loss where the input is token %d (end of document)%s",
                (int)t->eod_id,
                t->cfg.calculate_per_token_loss ? "; --calculate-per-token-loss" : "");
    return MG_OK;
}

/* This rank computes the loss, or MoE layers weigh their aux losses by the pass's count. */
static bool needs_count(const mg_trainer *t) {
    return t->model.chunks[t->model.n_chunks - 1].post ||
           (t->cfg.calculate_per_token_loss && t->model.n_moe > 0);
}

mg_status mg_trainer_loss_pass(mg_trainer *t, const mg_sample_source *src, int64_t first) {
    const mg_config *c = &t->cfg;
    int64_t S = c->seq_length, samples = (int64_t)c->micro_batch_size * t->num_microbatches *
                                         t->layout.dp_size; /* the global batch */
    t->pass_tokens = samples * S;
    if (t->eod_id >= 0 && needs_count(t)) {
        /* every sample of the global batch, every rank's: host_tokens is free until the first
         * microbatch loads */
        int64_t n = 0;
        for (int64_t k = 0; k < samples; k++) {
            MG_CHECK(src->sample(src->ctx, first + k, t->mem.host_tokens, t->mem.host_targets));
            for (int64_t i = 0; i < S; i++) n += t->mem.host_tokens[i] != t->eod_id;
        }
        t->pass_tokens = n;
    }
    if (c->calculate_per_token_loss && t->model.n_moe > 0)
        t->model.moe_ws.loss_weight =
            (float)(1.0 / (double)(t->pass_tokens > 1 ? t->pass_tokens : 1));
    return MG_OK;
}

mg_status mg_trainer_loss_weights(mg_trainer *t, float *dloss, float *loss_w) {
    size_t N = (size_t)t->model.blk.N;
    int64_t n = 0;
    for (size_t i = 0; i < N; i++) n += t->mem.host_tokens[i] != t->eod_id;
    const double T = (double)(t->pass_tokens > 1 ? t->pass_tokens : 1);
    const double denom = t->cfg.calculate_per_token_loss
                             ? T
                             : (double)(n > 1 ? n : 1) * t->num_microbatches * t->layout.dp_size;
    /* the gradient weights, without the loss scale, which the training head multiplies in on the
     * device; then the reported loss's, mask / T (the same array under
     * --calculate-per-token-loss). The host array is reused at once: copy_h2d allows it. */
    float *h = t->mem.host_dloss;
    const float w = (float)(1.0 / denom), l = (float)(1.0 / T);
    for (size_t i = 0; i < N; i++) h[i] = t->mem.host_tokens[i] != t->eod_id ? w : 0.0f;
    MG_CHECK(t->be->copy_h2d(t->be, dloss, h, N * sizeof(float)));
    for (size_t i = 0; i < N; i++) h[i] = t->mem.host_tokens[i] != t->eod_id ? l : 0.0f;
    return t->be->copy_h2d(t->be, loss_w, h, N * sizeof(float));
}

mg_status mg_trainer_loss_microbatch(mg_trainer *t, int slot) {
    if (t->eod_id < 0) return MG_OK;
    size_t at = (size_t)slot * (size_t)t->model.blk.N;
    return mg_trainer_loss_weights(t, t->mem.dloss + at, t->mem.loss_w + at);
}

void mg_trainer_loss_args(const mg_trainer *t, int slot, const float **dloss, const float **loss_w,
                          float *scale) {
    if (t->eod_id < 0) { /* every token counts: the one weight, as the loss's scale */
        *dloss = t->mem.dloss;
        *loss_w = NULL;
        *scale = mg_trainer_token_weight(t);
        return;
    }
    /* the slot's gradient weights, mask / denominator, and its reported-loss weights, mask / T */
    size_t at = (size_t)slot * (size_t)t->model.blk.N;
    *dloss = t->mem.dloss + at;
    *loss_w = t->mem.loss_w + at;
    *scale = 1.0f;
}
