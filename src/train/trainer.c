#include "train/trainer.h"

#include "core/flags.h"
#include "core/log.h"
#include "data/tokenizer_gpt2.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- set-up ---- */

static mg_status plan_memory(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_backend *be = t->be;
    mg_gpt *g = &t->model;
    size_t numel = g->params.numel, esz = mg_dtype_size(be->compute_dtype);
    size_t N = (size_t)c->micro_batch_size * c->seq_length;
    mg_arena_init(&t->a_params, "parameters");
    mg_arena_init(&t->a_grads, "gradients");
    mg_arena_init(&t->a_optim, "optimizer state");
    mg_arena_init(&t->a_acts, "activations");
    mg_arena_init(&t->a_work, "workspace");
    mg_arena_init(&t->a_io, "batch");
    MG_CHECK(mg_arena_reserve(&t->a_params, numel * esz, 0, &t->off_params));
    MG_CHECK(mg_arena_reserve(&t->a_grads, numel * sizeof(float), 0, &t->off_grads));
    mg_optimizer_init(&t->opt, c, numel);
    MG_CHECK(mg_optimizer_plan(&t->opt, &t->a_optim));
    MG_CHECK(mg_gpt_plan(g, be, c->micro_batch_size, &t->a_acts, &t->a_work));
    MG_CHECK(mg_arena_reserve(&t->a_io, N * sizeof(int32_t), 0, &t->off_tokens));
    MG_CHECK(mg_arena_reserve(&t->a_io, N * sizeof(int32_t), 0, &t->off_targets));
    MG_CHECK(mg_arena_reserve(&t->a_io, N * sizeof(float), 0, &t->off_dloss));
    MG_CHECK(mg_arena_reserve(&t->a_io, sizeof(float), 0, &t->off_loss));

    mg_arena *arenas[] = {&t->a_params, &t->a_grads, &t->a_optim, &t->a_acts, &t->a_work, &t->a_io};
    double total = 0;
    for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++) {
        MG_CHECK(mg_arena_commit(arenas[i], NULL));
        total += (double)arenas[i]->size;
    }
    mg_log_info("> memory plan (%s): parameters %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB, "
                "activations %.1f MiB, workspace %.1f MiB, total %.1f MiB",
                be->name, t->a_params.size / 1048576.0, t->a_grads.size / 1048576.0,
                t->a_optim.size / 1048576.0, t->a_acts.size / 1048576.0,
                t->a_work.size / 1048576.0, total / 1048576.0);
    t->params = mg_arena_ptr(&t->a_params, t->off_params);
    t->grads = mg_arena_ptr(&t->a_grads, t->off_grads);
    mg_optimizer_bind(&t->opt, &t->a_optim);
    t->tokens = mg_arena_ptr(&t->a_io, t->off_tokens);
    t->targets = mg_arena_ptr(&t->a_io, t->off_targets);
    t->dloss = mg_arena_ptr(&t->a_io, t->off_dloss);
    t->loss = mg_arena_ptr(&t->a_io, t->off_loss);
    MG_CHECK(mg_gpt_bind(g, be, t->params, t->grads));
    t->host_tokens = malloc(N * sizeof(int32_t));
    t->host_targets = malloc(N * sizeof(int32_t));
    if (!t->host_tokens || !t->host_targets)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the batch staging buffers");
    return MG_OK;
}

/* Host staging of the fp32 state for checkpoints. */
static mg_status alloc_host_state(const mg_trainer *t, mg_checkpoint_tensors *h) {
    size_t n = t->model.params.numel;
    h->params = calloc(n, sizeof(float));
    h->exp_avg = calloc(n, sizeof(float));
    h->exp_avg_sq = calloc(n, sizeof(float));
    if (!h->params || !h->exp_avg || !h->exp_avg_sq)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate %.1f MiB for checkpoint staging",
                       3.0 * (double)n * 4 / 1048576.0);
    return MG_OK;
}

static void free_host_state(mg_checkpoint_tensors *h) {
    free(h->params);
    free(h->exp_avg);
    free(h->exp_avg_sq);
}

static mg_status load_or_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_backend *be = t->be;
    size_t n = t->model.params.numel;
    mg_checkpoint_tensors h = {0};
    mg_status st = alloc_host_state(t, &h);
    int64_t it = -1;
    if (st == MG_OK && c->load[0]) st = mg_checkpoint_latest(c->load, &it);
    if (st == MG_OK && c->load[0] && it < 0)
        mg_log_warn("could not find a checkpoint in %s (no latest_checkpointed_iteration.txt); "
                    "starting from random initialisation", c->load);
    if (st == MG_OK && it >= 0) {
        st = mg_checkpoint_load(c->load, it, &t->state, c, &t->model, &h);
        if (st == MG_OK) {
            st = be->copy_h2d(be, t->opt.m, h.exp_avg, n * sizeof(float));
            if (st == MG_OK) st = be->copy_h2d(be, t->opt.v, h.exp_avg_sq, n * sizeof(float));
            t->opt.step = t->state.optimizer_step;
            t->lr.num_steps = t->state.lr_num_steps;
            mg_log_info("> loaded checkpoint from %s at iteration %" PRId64, c->load, it);
        }
    } else if (st == MG_OK) {
        mg_params_init(&t->model.params, (uint64_t)c->seed, h.params);
    }
    if (st == MG_OK) st = be->upload_f32(be, t->params, h.params, n);
    free_host_state(&h);
    return st;
}

static mg_status gpt_split_sample(void *ctx, int64_t index, int32_t *tokens, int32_t *targets) {
    struct mg_gpt_split_source *s = ctx;
    return mg_gpt_data_sample_pair(s->data, s->split, index, tokens, targets);
}

/* The vocabulary size a tokenizer implies when --vocab-size is not given. */
static mg_status resolve_vocab(mg_config *c) {
    if (c->vocab_size > 0) return MG_OK;
    if (strcmp(c->tokenizer_type, "GPT2BPETokenizer") != 0)
        return MG_FAIL(MG_ERR_USAGE, "--vocab-size is required with --tokenizer-type %s",
                       c->tokenizer_type);
    mg_tokenizer *tok;
    MG_CHECK(mg_tokenizer_gpt2_load(&tok, c->vocab_file, c->merge_file));
    c->vocab_size = mg_tokenizer_vocab_size(tok);
    mg_tokenizer_free(tok);
    return MG_OK;
}

/* Train and validation samples: Megatron's mock streams or its GPT datasets, with the split
 * sizes of get_train_valid_test_num_samples. */
static mg_status open_data(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    t->have_valid = c->eval_iters > 0;
    if (!c->data_path[0]) {
        MG_CHECK(mg_mock_init(&t->train_data, (uint64_t)c->seed, 0, c->vocab_size, c->seq_length));
        MG_CHECK(mg_mock_init(&t->valid_data, (uint64_t)c->seed, 1, c->vocab_size, c->seq_length));
        t->train_src = (mg_sample_source){mg_mock_source, &t->train_data};
        t->valid_src = (mg_sample_source){mg_mock_source, &t->valid_data};
        return MG_OK;
    }
    int64_t gbs = c->global_batch_size;
    int64_t evals = c->eval_interval > 0 ? c->train_iters / c->eval_interval + 1 : 1;
    mg_gpt_data_config dc = {
        .data_path = c->data_path,
        .split = c->split,
        .seq_length = c->seq_length,
        .seed = (uint64_t)c->seed,
        .cache_path = c->data_cache_path,
        /* the test split is not used by the trainer yet: one epoch (or nothing if it is empty) */
        .num_samples = {c->train_iters * gbs, evals * c->eval_iters * gbs, -1},
    };
    MG_CHECK(mg_gpt_data_build(&t->gpt_data, &dc));
    t->train_split = (struct mg_gpt_split_source){t->gpt_data, 0};
    t->valid_split = (struct mg_gpt_split_source){t->gpt_data, 1};
    t->train_src = (mg_sample_source){gpt_split_sample, &t->train_split};
    t->valid_src = (mg_sample_source){gpt_split_sample, &t->valid_split};
    if (mg_gpt_data_len(t->gpt_data, 0) == 0)
        return MG_FAIL(MG_ERR_USAGE, "--split %s leaves no training documents in %s", c->split,
                       c->data_path);
    if (t->have_valid && mg_gpt_data_len(t->gpt_data, 1) == 0) {
        mg_log_warn("--split %s leaves no validation documents; evaluation is skipped", c->split);
        t->have_valid = false;
    }
    mg_log_info("> datasets: train %" PRId64 " samples (%d epochs), valid %" PRId64 " samples",
                mg_gpt_data_len(t->gpt_data, 0), mg_gpt_data_num_epochs(t->gpt_data, 0),
                mg_gpt_data_len(t->gpt_data, 1));
    return MG_OK;
}

mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    MG_CHECK(resolve_vocab(&t->cfg));
    const mg_config *c = &t->cfg;
    if (strcmp(c->device, "cpu") != 0)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "--device %s: only the cpu backend is built", c->device);
    MG_CHECK(mg_backend_cpu_create(&t->be, c->num_threads));
    MG_CHECK(mg_backend_validate(t->be));
    MG_CHECK(mg_gpt_build(&t->model, c));
    MG_CHECK(mg_lr_schedule_init(&t->lr, c));
    t->num_microbatches = c->global_batch_size / c->micro_batch_size; /* data parallel size 1 */
    MG_CHECK(plan_memory(t));
    MG_CHECK(open_data(t));
    MG_CHECK(load_or_init(t));
    /* Megatron averages the loss over every token of the global batch */
    size_t N = (size_t)t->model.N;
    float w = 1.0f / (float)(N * (size_t)t->num_microbatches);
    float *ones = malloc(N * sizeof *ones);
    if (!ones) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < N; i++) ones[i] = w;
    mg_status st = t->be->copy_h2d(t->be, t->dloss, ones, N * sizeof *ones);
    free(ones);
    return st;
}

/* ---- one iteration ---- */

/* Loads the microbatch of samples [first, first + micro_batch_size) into the backend. */
static mg_status load_microbatch(mg_trainer *t, const mg_sample_source *src, int64_t first) {
    const mg_config *c = &t->cfg;
    size_t S = (size_t)c->seq_length;
    for (int b = 0; b < c->micro_batch_size; b++)
        MG_CHECK(src->sample(src->ctx, first + b, t->host_tokens + b * S, t->host_targets + b * S));
    size_t bytes = (size_t)t->model.N * sizeof(int32_t);
    MG_CHECK(t->be->copy_h2d(t->be, t->tokens, t->host_tokens, bytes));
    MG_CHECK(t->be->copy_h2d(t->be, t->targets, t->host_targets, bytes));
    return MG_OK;
}

mg_status mg_trainer_forward_backward(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                      bool backward) {
    mg_backend *be = t->be;
    float scale = 1.0f / (float)((size_t)t->model.N * (size_t)t->num_microbatches);
    MG_CHECK(be->memset_zero(be, t->loss, sizeof(float)));
    for (int mb = 0; mb < t->num_microbatches; mb++) {
        MG_CHECK(load_microbatch(t, src, first + (int64_t)mb * t->cfg.micro_batch_size));
        MG_CHECK(mg_gpt_forward(&t->model, be, t->tokens));
        MG_CHECK(mg_gpt_loss(&t->model, be, t->targets, t->dloss, t->loss, scale));
        if (backward) MG_CHECK(mg_gpt_backward(&t->model, be, t->tokens));
    }
    return MG_OK;
}

static mg_status read_f32(mg_backend *be, const float *src, double *out) {
    float v;
    MG_CHECK(be->copy_d2h(be, &v, src, sizeof v));
    *out = v;
    return MG_OK;
}

mg_status mg_trainer_step(mg_trainer *t, double *loss, double *grad_norm) {
    mg_backend *be = t->be;
    const mg_config *c = &t->cfg;
    MG_CHECK(be->memset_zero(be, t->grads, t->model.params.numel * sizeof(float)));
    MG_CHECK(mg_trainer_forward_backward(t, &t->train_src, t->state.consumed_train_samples, true));
    /* Megatron: the update uses the lr before this iteration's scheduler step */
    double lr = mg_lr_schedule_lr(&t->lr);
    MG_CHECK(mg_optimizer_step(&t->opt, be, &t->model.params, t->params, t->grads, lr));
    mg_lr_schedule_step(&t->lr, c->global_batch_size);
    t->state.iteration++;
    t->state.consumed_train_samples += c->global_batch_size;
    t->state.lr_num_steps = t->lr.num_steps;
    t->state.optimizer_step = t->opt.step;
    MG_CHECK(read_f32(be, t->loss, loss));
    MG_CHECK(read_f32(be, &t->opt.scalars[1], grad_norm));
    return MG_OK;
}

mg_status mg_trainer_evaluate(mg_trainer *t, double *loss) {
    double sum = 0;
    for (int i = 0; i < t->cfg.eval_iters; i++) {
        /* Megatron draws validation batches from a running position in the validation set */
        MG_CHECK(mg_trainer_forward_backward(t, &t->valid_src, t->state.consumed_valid_samples, false));
        t->state.consumed_valid_samples += t->cfg.global_batch_size;
        double l;
        MG_CHECK(read_f32(t->be, t->loss, &l));
        sum += l;
    }
    *loss = t->cfg.eval_iters > 0 ? sum / t->cfg.eval_iters : NAN;
    return MG_OK;
}

mg_status mg_trainer_save(mg_trainer *t) {
    mg_backend *be = t->be;
    size_t n = t->model.params.numel;
    mg_checkpoint_tensors h = {0};
    mg_status st = alloc_host_state(t, &h);
    if (st == MG_OK) st = be->download_f32(be, h.params, t->params, n);
    if (st == MG_OK) st = be->copy_d2h(be, h.exp_avg, t->opt.m, n * sizeof(float));
    if (st == MG_OK) st = be->copy_d2h(be, h.exp_avg_sq, t->opt.v, n * sizeof(float));
    if (st == MG_OK) st = mg_checkpoint_save(t->cfg.save, &t->state, &t->cfg, &t->model, &h);
    free_host_state(&h);
    if (st == MG_OK)
        mg_log_info("  successfully saved checkpoint from iteration %7" PRId64 " to %s",
                    t->state.iteration, t->cfg.save);
    return st;
}

void mg_trainer_free(mg_trainer *t) {
    mg_metrics_close(&t->metrics);
    mg_mock_free(&t->train_data);
    mg_mock_free(&t->valid_data);
    if (t->gpt_data) mg_gpt_data_free(t->gpt_data);
    mg_gpt_free(&t->model);
    mg_arena *arenas[] = {&t->a_params, &t->a_grads, &t->a_optim, &t->a_acts, &t->a_work, &t->a_io};
    for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++) mg_arena_free(arenas[i]);
    free(t->host_tokens);
    free(t->host_targets);
    if (t->be) t->be->destroy(t->be);
    memset(t, 0, sizeof *t);
}
