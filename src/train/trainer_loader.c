/* The trainer's data loaders (train/trainer_loader.h). */
#include "train/trainer_loader.h"

#include "core/log.h"
#include "data/cyclic_sampler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* One split's cyclic loader: the sampler over the source it wraps. */
typedef struct {
    mg_sample_source inner;
    mg_cyclic_sampler sampler;
} cyclic_loader;

struct mg_cyclic_loaders {
    cyclic_loader split[3]; /* train, valid, test */
};

static mg_status cyclic_sample(void *ctx, int64_t pos, int32_t *tokens, int32_t *targets) {
    cyclic_loader *l = ctx;
    int64_t index;
    MG_CHECK(mg_cyclic_sampler_index(&l->sampler, pos, &index));
    return l->inner.sample(l->inner.ctx, index, tokens, targets);
}

/* The split's samples: its dataset's length, or what Megatron asks the mock dataset for. */
static int64_t split_len(const mg_trainer *t, int split) {
    if (t->gpt_data) return mg_gpt_data_len(t->gpt_data, split);
    const mg_config *c = &t->cfg;
    const int64_t gbs = c->global_batch_size;
    if (split == 0) return c->train_samples > 0 ? c->train_samples : t->train_iters * gbs;
    const int64_t evals = c->eval_interval > 0 ? t->train_iters / c->eval_interval + 1 : 1;
    return (split == 1 ? evals : 1) * c->eval_iters * gbs;
}

mg_status mg_trainer_loaders_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    if (c->dataloader_type != MG_LOADER_CYCLIC) return MG_OK;
    t->cyclic = calloc(1, sizeof *t->cyclic);
    if (!t->cyclic) return MG_FAIL(MG_ERR_NOMEM, "out of memory (data loaders)");
    static const char *const names[3] = {"train", "validation", "test"};
    mg_sample_source *src[3] = {&t->train_src, &t->valid_src, &t->test_src};
    const bool used[3] = {true, t->have_valid, t->have_test};
    const int64_t start[3] = {t->state.consumed_train_samples, t->state.consumed_valid_samples, 0};
    const bool sharding = !c->no_data_sharding;
    for (int k = 0; k < 3; k++) {
        if (!used[k]) continue;
        cyclic_loader *l = &t->cyclic->split[k];
        const int64_t n = split_len(t, k);
        mg_status st = mg_cyclic_sampler_init(&l->sampler, n, start[k], c->micro_batch_size,
                                              t->dp_size, sharding);
        if (st != MG_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", mg_error_message());
            return MG_FAIL(st, "%s (the %s split)", why, names[k]);
        }
        l->inner = *src[k];
        *src[k] = (mg_sample_source){cyclic_sample, l};
        const mg_cyclic_sampler *s = &l->sampler;
        mg_log_info("> --dataloader-type cyclic, %s: %" PRId64 " samples, epochs of %" PRId64
                    " (data sharding %s), from sample %" PRId64 " (epoch %" PRId64 ")",
                    names[k], n, s->active, sharding ? "on" : "off", start[k],
                    start[k] / s->active);
    }
    return MG_OK;
}

void mg_trainer_loaders_free(mg_trainer *t) {
    if (!t->cyclic) return;
    for (int k = 0; k < 3; k++) mg_cyclic_sampler_free(&t->cyclic->split[k].sampler);
    free(t->cyclic);
    t->cyclic = NULL;
}
