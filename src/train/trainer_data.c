/* The trainer's data sources (train/trainer_data.h). */
#include "train/trainer_data.h"

#include "core/log.h"
#include "data/blend.h"
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

/* Megatron's MockGPTLowLevelDataset: the documents --split shares out for --mock-data. */
#define MOCK_DOCUMENTS 100000

static mg_status gpt_split_sample(void *ctx, int64_t index, int32_t *tokens, int32_t *targets) {
    struct mg_gpt_split_source *s = ctx;
    return mg_gpt_data_sample_pair(s->data, s->split, index, tokens, targets);
}

/* Which splits are used, from each one's documents (len): as Megatron's do_train, do_valid and
 * do_test, a split without documents or weight has no dataset. */
static mg_status settle_splits(mg_train_data *d, const mg_config *c, const int64_t len[3],
                               const char *where) {
    d->have_valid = c->eval_iters > 0;
    d->have_test = c->eval_iters > 0 && len[MG_SPLIT_TEST] > 0;
    if (len[MG_SPLIT_TRAIN] == 0)
        return MG_FAIL(MG_ERR_USAGE, "--split %s leaves no training documents in %s", c->split,
                       where);
    if (d->have_valid && len[MG_SPLIT_VALID] == 0) {
        mg_log_warn("--split %s leaves no validation documents; evaluation is skipped", c->split);
        d->have_valid = false;
    }
    return MG_OK;
}

/* Megatron's mock streams, one per split that --split gives documents. */
static mg_status open_mock(mg_train_data *d, const mg_config *c) {
    mg_split sp;
    MG_CHECK(mg_split_parse(&sp, c->split));
    int64_t len[MG_SPLIT_COUNT];
    for (int k = 0; k < MG_SPLIT_COUNT; k++) {
        int64_t begin, end;
        mg_split_range(&sp, k, MOCK_DOCUMENTS, &begin, &end);
        len[k] = end - begin;
    }
    MG_CHECK(settle_splits(d, c, len, "the mock data"));
    mg_mock_data *data[MG_SPLIT_COUNT] = {&d->train_data, &d->valid_data, &d->test_data};
    mg_sample_source *src[MG_SPLIT_COUNT] = {&d->train_src, &d->valid_src, &d->test_src};
    for (int k = 0; k < MG_SPLIT_COUNT; k++) {
        MG_CHECK(
            mg_mock_init(data[k], (uint64_t)c->seed, (uint32_t)k, c->vocab_size, c->seq_length));
        *src[k] = (mg_sample_source){mg_mock_source, data[k]};
    }
    return MG_OK;
}

mg_status mg_train_data_open(mg_train_data *d, const mg_config *c, int64_t train_iters) {
    if (!c->data_path[0]) return open_mock(d, c);
    int64_t gbs = c->global_batch_size;
    int64_t evals = c->eval_interval > 0 ? train_iters / c->eval_interval + 1 : 1;
    mg_gpt_data_config dc = {
        .data_path = c->data_path,
        .split = c->split,
        .seq_length = c->seq_length,
        .seed = (uint64_t)c->seed,
        .cache_path = c->data_cache_path,
        /* get_train_valid_test_num_samples: the test split is one evaluation, built only when
         * it is evaluated (so a weighted blend needs no count for it otherwise) */
        .num_samples = {c->train_samples > 0 ? c->train_samples : train_iters * gbs,
                        evals * c->eval_iters * gbs,
                        c->eval_iters > 0 ? (int64_t)c->eval_iters * gbs : MG_GPT_SPLIT_UNUSED},
        /* a tiny test share of a small corpus may hold no document (Megatron would not finish
         * building it): then there is no test evaluation */
        .may_be_empty = {false, false, true},
    };
    MG_CHECK(mg_gpt_data_build(&d->gpt_data, &dc));
    d->train_split = (struct mg_gpt_split_source){d->gpt_data, MG_SPLIT_TRAIN};
    d->valid_split = (struct mg_gpt_split_source){d->gpt_data, MG_SPLIT_VALID};
    d->test_split = (struct mg_gpt_split_source){d->gpt_data, MG_SPLIT_TEST};
    d->train_src = (mg_sample_source){gpt_split_sample, &d->train_split};
    d->valid_src = (mg_sample_source){gpt_split_sample, &d->valid_split};
    d->test_src = (mg_sample_source){gpt_split_sample, &d->test_split};
    const int64_t len[MG_SPLIT_COUNT] = {mg_gpt_data_len(d->gpt_data, MG_SPLIT_TRAIN),
                                         mg_gpt_data_len(d->gpt_data, MG_SPLIT_VALID),
                                         mg_gpt_data_len(d->gpt_data, MG_SPLIT_TEST)};
    MG_CHECK(settle_splits(d, c, len, c->data_path));
    mg_log_info("> datasets: train %" PRId64 " samples (%d epochs), valid %" PRId64
                " samples, test %" PRId64 " samples",
                len[MG_SPLIT_TRAIN], mg_gpt_data_num_epochs(d->gpt_data, MG_SPLIT_TRAIN),
                len[MG_SPLIT_VALID], len[MG_SPLIT_TEST]);
    return MG_OK;
}

/* The split's samples: its dataset's length, or what Megatron asks the mock dataset for. */
static int64_t split_len(const mg_train_data *d, const mg_config *c, int64_t train_iters,
                         int split) {
    if (d->gpt_data) return mg_gpt_data_len(d->gpt_data, split);
    const int64_t gbs = c->global_batch_size;
    if (split == 0) return c->train_samples > 0 ? c->train_samples : train_iters * gbs;
    const int64_t evals = c->eval_interval > 0 ? train_iters / c->eval_interval + 1 : 1;
    return (split == 1 ? evals : 1) * c->eval_iters * gbs;
}

mg_status mg_train_data_loaders_init(mg_train_data *d, const mg_config *c, int64_t train_iters,
                                     int dp_size, const mg_train_state *state) {
    if (c->dataloader_type != MG_LOADER_CYCLIC) return MG_OK;
    d->cyclic = calloc(1, sizeof *d->cyclic);
    if (!d->cyclic) return MG_FAIL(MG_ERR_NOMEM, "out of memory (data loaders)");
    static const char *const names[3] = {"train", "validation", "test"};
    mg_sample_source *src[3] = {&d->train_src, &d->valid_src, &d->test_src};
    const bool used[3] = {true, d->have_valid, d->have_test};
    const int64_t start[3] = {state->consumed_train_samples, state->consumed_valid_samples, 0};
    const bool sharding = !c->no_data_sharding;
    for (int k = 0; k < 3; k++) {
        if (!used[k]) continue;
        cyclic_loader *l = &d->cyclic->split[k];
        const int64_t n = split_len(d, c, train_iters, k);
        mg_status st = mg_cyclic_sampler_init(&l->sampler, n, start[k], c->micro_batch_size,
                                              dp_size, sharding);
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

void mg_train_data_free(mg_train_data *d) {
    if (d->cyclic)
        for (int k = 0; k < 3; k++) mg_cyclic_sampler_free(&d->cyclic->split[k].sampler);
    free(d->cyclic);
    d->cyclic = NULL;
    mg_mock_free(&d->train_data);
    mg_mock_free(&d->valid_data);
    mg_mock_free(&d->test_data);
    if (d->gpt_data) mg_gpt_data_free(d->gpt_data);
    d->gpt_data = NULL;
}
